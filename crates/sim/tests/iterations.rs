//! The `iterations` metric (a script's loop period: successive `timer` phases, successive
//! `send set` phases) and the exact standard deviation, as used by Vassal's Table 2.

use vassal_sim::metrics::Hist;
use vassal_sim::scenario::parse_scenario;
use vassal_sim::{simulate, Report};

fn run(text: &str) -> Report {
    simulate(parse_scenario(text, "test.toml").unwrap()).unwrap()
}

fn task<'a>(r: &'a Report, name: &str) -> &'a vassal_sim::report::TaskReport {
    r.tasks.iter().find(|t| t.name == name).unwrap()
}

#[test]
fn standard_deviation_is_exact() {
    let mut h = Hist::default();
    for v in [2, 4, 4, 4, 5, 5, 7, 9] {
        h.record(v * 1000);
    }
    let s = h.summary();
    assert_eq!((s.count, s.mean_ns, s.min_ns, s.max_ns, s.sd_ns), (8, 5000, 2000, 9000, 2000));
    assert_eq!(Hist::default().summary().sd_ns, 0);
}

#[test]
fn timer_loop_period_under_oneshot_and_tick_clocks() {
    let base = |clock: &str| {
        format!(
            r#"until = "100ms"
[machine]
cpus = 1
clock = "{clock}"
hz = 1024
[[task]]
name = "t"
behaviour = {{ kind = "script", repeat = true, phases = [ {{ run = "50us" }}, {{ timer = "1ms" }} ] }}
"#
        )
    };
    // One-shot: every interval is exactly the period.
    let r = run(&base("oneshot"));
    let it = task(&r, "t").iterations;
    assert_eq!((it.min_ns, it.max_ns, it.mean_ns, it.sd_ns), (1_000_000, 1_000_000, 1_000_000, 0));
    // Arrivals at 0.05, 1.1, 2.1, ..., 99.1 ms; the first interval (no wait before it) is
    // not a wake-up period and is not recorded.
    assert_eq!(it.count, 98);
    // Tick (976562 ns): one tick, or two when the 1 ms expiries slip past a tick.
    let r = run(&base("tick"));
    let it = task(&r, "t").iterations;
    assert_eq!(it.min_ns, 976_562);
    assert_eq!(it.max_ns, 2 * 976_562);
    assert!(it.sd_ns > 100_000, "{it:?}");
}

#[test]
fn timed_set_loop_period_is_delay_plus_work() {
    let r = run(r#"until = "100ms"
[machine]
cpus = 1
[[scheduler]]
name = "rt"
policy = "timed"
usage = { hard_time = { cpus = [0], util = 0.2 } }
[[task]]
name = "x"
scheduler = "rt"
behaviour = { kind = "script", repeat = true, phases = [ { send = { to = "rt", request = "set", delay = "900us" } }, { run = "100us" } ] }
[[task]]
name = "hog"
behaviour = { kind = "cpu" }
"#);
    let x = task(&r, "x");
    assert_eq!(x.refused_messages, 0);
    let it = x.iterations;
    assert_eq!((it.min_ns, it.max_ns, it.sd_ns), (1_000_000, 1_000_000, 0));
    assert!(it.count >= 99, "{it:?}");
    // While x waits for its event the hog runs: x gets 10% of the CPU.
    assert!((x.cpu_frac - 0.1).abs() < 0.002, "{}", x.cpu_frac);
}
