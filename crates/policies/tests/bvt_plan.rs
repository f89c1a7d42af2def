//! BVT configuration tooling (paper 001 §6.1): the paper's example exactly, the §6.1.3
//! priority→warp algorithm by hand, and refusals of bad input.

use vassal_core::MS;
use vassal_policies::bvt::plan::{metrics, parse_share, plan, Ratio};

const MCU: u64 = 10 * MS;

fn shares(v: &[&str]) -> Vec<Ratio> {
    v.iter().map(|s| parse_share(s).unwrap()).collect()
}

#[test]
fn paper_example_10_30_60_with_c_2_mcu() {
    // §6.1.1: advances 6, 2, 1; V = 2·lcm(6,2,1) = 12; runs 2, 6, 12 mcu; W = 20 mcu.
    let p = plan(&shares(&["10", "30", "60"]), 2, &[], &[], MCU).unwrap();
    let adv: Vec<u64> = p.threads.iter().map(|t| t.advance).collect();
    assert_eq!(adv, vec![6, 2, 1]);
    assert_eq!(p.v, 12);
    assert_eq!(p.w, 20);
    let runs: Vec<u64> = p.threads.iter().map(|t| t.run_mcu).collect();
    assert_eq!(runs, vec![2, 6, 12]);
    // The BVT weights that give those advances.
    let w: Vec<u64> = p.threads.iter().map(|t| t.weight).collect();
    assert_eq!(w, vec![1, 3, 6]);
    assert_eq!(p.unallocated_pct, Ratio::int(0));
    let m = metrics(&p);
    assert!(m.contains(&("V".to_string(), 12)) && m.contains(&("W".to_string(), 20)));
    assert!(m.contains(&("advance.0".to_string(), 6)));
    assert!(!m.iter().any(|(k, _)| k.starts_with("warp")));
}

#[test]
fn shares_below_100_and_exact_fractions() {
    // §6.1.1: two warp-limited threads take 10 %, the others add up to 90 %.
    let p = plan(&shares(&["10", "30", "50"]), 2, &[], &[], MCU).unwrap();
    // reciprocals 10, 10/3, 2 → ×3 → 30, 10, 6 → ÷2 → 15, 5, 3.
    assert_eq!(p.threads.iter().map(|t| t.advance).collect::<Vec<_>>(), vec![15, 5, 3]);
    assert_eq!(p.v, 2 * 15);
    assert_eq!(p.w, 2 + 6 + 10);
    assert_eq!(p.unallocated_pct, Ratio::int(10));
    // Thirds, exactly: 100/3 each.
    let p = plan(&shares(&["100/3", "100/3", "100/3"]), 1, &[], &[], MCU).unwrap();
    assert_eq!(p.threads.iter().map(|t| t.advance).collect::<Vec<_>>(), vec![1, 1, 1]);
    assert_eq!((p.v, p.w), (1, 3));
    // Decimals: 12.5 % and 87.5 % → 7 : 1.
    let p = plan(&shares(&["12.5", "87.5%"]), 1, &[], &[], MCU).unwrap();
    assert_eq!(p.threads.iter().map(|t| t.advance).collect::<Vec<_>>(), vec![7, 1]);
    assert_eq!((p.v, p.w), (7, 8));
}

#[test]
fn priority_to_warp_algorithm() {
    // §6.1.3 by hand, shares 10/30/60 (advances 6, 2, 1), C = 2 mcu:
    // priority 3 (lowest): warp 0;
    // priority 2 (thread 1, L = 5 ms → 1 mcu charged → 1·2 = 2): warp 2;
    // priority 1 (thread 0, L = 1 ms → 1 mcu → 6): warp 2 + 6 = 8.
    let p = plan(&shares(&["10", "30", "60"]), 2, &[1, 2, 3], &[MS, 5 * MS, 0], MCU).unwrap();
    let warps: Vec<u64> = p.threads.iter().map(|t| t.warp).collect();
    assert_eq!(warps, vec![8, 2, 0]);
    // In the policy's units (weights 1, 3, 6): one plan unit is mcu/6 virtual ns.
    assert_eq!(p.threads[0].warp_ns, (8 * MCU).div_ceil(6));
    // L = 0 (no limit) counts as C (2 mcu); the largest L/w at a level is taken;
    // equal priorities share a warp.
    let p = plan(&shares(&["10", "30", "60"]), 2, &[1, 1, 2], &[0, 30 * MS, 0], MCU).unwrap();
    // level 1: max(2 mcu·6, 3 mcu·2) = 12.
    assert_eq!(p.threads.iter().map(|t| t.warp).collect::<Vec<_>>(), vec![12, 12, 0]);
    // Priorities need not be consecutive.
    let p = plan(&shares(&["50", "50"]), 1, &[10, 3], &[], MCU).unwrap();
    assert_eq!(p.threads.iter().map(|t| t.warp).collect::<Vec<_>>(), vec![0, 1]);
}

#[test]
fn bad_inputs_are_refused_with_reasons() {
    let e = plan(&shares(&["50", "30", "30"]), 2, &[], &[], MCU).unwrap_err();
    assert!(e.contains("more than 100%"), "{e}");
    let e = plan(&shares(&["0", "30"]), 2, &[], &[], MCU).unwrap_err();
    assert!(e.contains("more than 0"), "{e}");
    let e = plan(&[], 2, &[], &[], MCU).unwrap_err();
    assert!(e.contains("at least one share"), "{e}");
    let e = plan(&shares(&["10", "30"]), 0, &[], &[], MCU).unwrap_err();
    assert!(e.contains("C must be at least 1 mcu"), "{e}");
    let e = plan(&shares(&["10", "30"]), 2, &[1], &[], MCU).unwrap_err();
    assert!(e.contains("1 priorities for 2 shares"), "{e}");
    let e = plan(&shares(&["10", "30"]), 2, &[], &[MS, MS], MCU).unwrap_err();
    assert!(e.contains("only with priorities"), "{e}");
    for bad in ["-10", "NaN", "nan", "inf", "", "ten", "1e3", "10/0", "1.2.3"] {
        assert!(parse_share(bad).is_err(), "{bad}");
    }
    // 100.0000001 % is more than 100 % (exact, no rounding).
    let e = plan(&shares(&["60", "40.0000001"]), 2, &[], &[], MCU).unwrap_err();
    assert!(e.contains("more than 100%"), "{e}");
}
