//! The lab's `randres` workload (BVT paper 001 §5.1) under DBS and alone, and its
//! scenario errors (validated by the behaviour registry, with the file's positions).

use vassal_lab::workloads::registry;
use vassal_sim::scenario::parse_scenario;
use vassal_sim::{simulate_with, Report, Sim};

fn run(text: &str) -> Report {
    simulate_with(parse_scenario(text, "test.toml").unwrap(), &registry()).unwrap()
}

/// The error a scenario gets when it is parsed and its registered kinds are validated.
fn error(text: &str) -> String {
    match Sim::with_registry(parse_scenario(text, "bad.toml").unwrap(), &registry()) {
        Ok(_) => panic!("accepted"),
        Err(e) => e.to_string(),
    }
}

fn randres(policy: &str, f: f64, reserve: bool, extra: &str) -> String {
    let res = if reserve { ", reserve = \"sched\"" } else { "" };
    format!(
        r#"until = "600s"
seed = 7
[machine]
cpus = 1
switch_cost = "0ns"
[default]
name = "sched"
policy = "{policy}"
[[task]]
name = "r1"
params = {{ priority = 3, weight = 35, warp = "114285714ns" }}
behaviour = {{ kind = "randres", fussiness = {f}{res}{extra} }}
[[task]]
name = "r2"
params = {{ priority = 2, weight = 35, warp = "57142857ns" }}
behaviour = {{ kind = "randres", fussiness = {f}{res}{extra} }}
[[task]]
name = "cont"
params = {{ priority = 1, weight = 1 }}
behaviour = {{ kind = "cpu" }}
"#
    )
}

fn made(r: &Report) -> (u64, u64) {
    r.tasks.iter().filter(|t| t.name.starts_with('r')).fold((0, 0), |(m, x), t| (m + t.jobs_met, x + t.jobs_missed))
}

#[test]
fn alone_a_randres_makes_exactly_the_deadlines_whose_need_fits_its_window() {
    // f = 0.75: the window is gap/4 mcu (gap 26..34), the need 6..12 mcu. Alone on the CPU
    // (above a hog under fps) a job is made iff a_i <= gap_i / 4: 19 of the 63 equally
    // likely (gap, need) pairs. A job that does not fit is abandoned at its deadline, so
    // the next window is not delayed and the count stays near 19/63.
    let text = r#"until = "600s"
seed = 3
[machine]
cpus = 1
switch_cost = "0ns"
[default]
policy = "fps"
[[task]]
name = "r"
params = { priority = 2 }
behaviour = { kind = "randres", fussiness = 0.75 }
[[task]]
name = "hog"
params = { priority = 1 }
behaviour = { kind = "cpu" }
"#;
    let r = run(text);
    let t = r.task("r").unwrap();
    let n = t.jobs_met + t.jobs_missed;
    // 600 s / 30 mcu = 2000 windows (± a few).
    assert!((1950..=2050).contains(&n), "{n} windows");
    let frac = t.jobs_met as f64 / n as f64;
    assert!((frac - 19.0 / 63.0).abs() < 0.03, "made {frac}");
    // A made job ran its whole need at once: 6..12 mcu, from its start s_i.
    assert!(t.response.min_ns >= 60_000_000 && t.response.max_ns <= 80_000_000, "{:?}", t.response);
}

#[test]
fn with_no_contention_every_deadline_is_made() {
    for policy in ["dbs", "fps", "bvt"] {
        let r = run(&randres(policy, 0.0, policy == "dbs", ""));
        let (m, x) = made(&r);
        assert!(m > 3900 && x == 0, "{policy}: made {m}, missed {x}");
    }
}

#[test]
fn under_dbs_with_exact_predictions_only_refused_requests_miss() {
    // Every accepted reservation is met (admission is exact and EDF optimal); the misses
    // are exactly the refusals.
    for f in [0.4, 0.66, 0.75] {
        let r = run(&randres("dbs", f, true, ""));
        for t in r.tasks.iter().filter(|t| t.name.starts_with('r')) {
            assert!(t.refused_messages > 0, "f = {f}: {} never refused", t.name);
            assert_eq!(t.jobs_missed, t.refused_messages, "f = {f}: {}", t.name);
            // One request per deadline; the last window may be in progress at the horizon.
            assert!((0..=1).contains(&(t.messages - t.jobs_met - t.jobs_missed)), "{}", t.name);
        }
        // cont gets what is left.
        assert!(r.task("cont").unwrap().cpu_frac > 0.3);
    }
}

#[test]
fn under_prediction_misses_accepted_deadlines_and_over_prediction_refuses_more() {
    let exact = run(&randres("dbs", 0.54, true, ""));
    let under = run(&randres("dbs", 0.54, true, ", error = \"under\", error_mean = 2"));
    let over = run(&randres("dbs", 0.54, true, ", error = \"over\", error_mean = 2"));
    let refusals = |r: &Report| r.tasks.iter().map(|t| t.refused_messages).sum::<u64>();
    let (_, under_missed) = made(&under);
    assert!(under_missed > refusals(&under), "an under-predicted job misses even when accepted");
    assert!(refusals(&over) > refusals(&exact), "over-prediction is refused more");
    assert!(made(&exact).0 > made(&over).0 && made(&exact).0 > made(&under).0);
}

#[test]
fn same_seed_same_windows_whatever_the_error_mode() {
    // Common random numbers: the error draws are made in every mode, so exact runs with
    // different modes are identical.
    let a = run(&randres("dbs", 0.54, true, ", error = \"over\""));
    let b = run(&randres("dbs", 0.54, true, ", error = \"under\""));
    assert_eq!(made(&a), made(&b));
}

#[test]
fn malformed_randres_is_refused_naming_the_key() {
    let cases = [
        (", gap = [34, 26]", "gap must be two whole numbers"),
        (", need = [6]", "need must be two whole numbers"),
        (", error = \"sideways\"", "unknown error mode 'sideways'"),
        (", error_mean = -1", "error_mean -1"),
        (", mcu = \"0ms\"", "mcu must be greater than 0"),
        (", reserve = \"ghost\"", "no scheduler named 'ghost'"),
        (", period = \"1s\"", "unknown key `period` for behaviour kind 'randres'"),
    ];
    for (extra, want) in cases {
        let e = error(&randres("dbs", 0.5, false, extra));
        assert!(e.contains(want) && e.starts_with("bad.toml:12:"), "{extra}: {e}");
    }
    let e = error(&randres("dbs", 1.0, false, ""));
    assert!(e.contains("fussiness 1 must be at least 0 and below 1"), "{e}");
}
