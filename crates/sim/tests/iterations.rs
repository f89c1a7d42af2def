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

/// One CPU whose `clock` lines are given, and a task looping [run 50 µs, timer 1 ms].
fn timer_loop(until: &str, clock: &str) -> String {
    format!(
        r#"until = "{until}"
[machine]
cpus = 1
{clock}
[[task]]
name = "t"
behaviour = {{ kind = "script", repeat = true, phases = [ {{ run = "50us" }}, {{ timer = "1ms" }} ] }}
"#
    )
}

#[test]
fn timer_loop_period_under_oneshot_and_tick_clocks() {
    let base = |clock: &str| timer_loop("100ms", &format!("clock = \"{clock}\"\nhz = 1024"));
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

/// A tick given by its period, NT's x86 HAL's "1 ms" (1197 PIT counts, 1,003,200 ns):
/// the 1 ms expiries fall behind the ticks by 3.2 µs a period, and once in ~312 periods
/// one tick services two of them, so the wait after the first completes at once (the
/// timer stays signalled): an interval of the loop's own 50 µs, and a long one after it.
#[test]
fn a_tick_slower_than_the_timer_period_gives_catch_up_wake_ups() {
    let text = |tick: &str| timer_loop("2s", &format!("clock = \"tick\"\n{tick}"));
    let r = run(&text("tick = \"1003200ns\""));
    let it = task(&r, "t").iterations;
    assert_eq!(it.min_ns, 50_000, "{it:?}");
    assert_eq!(it.max_ns, 1_003_200, "{it:?}");
    // Every expiry is waited for: the mean interval is the timer's period.
    assert!(it.mean_ns.abs_diff(1_000_000) < 1_000, "{it:?}");
    // With hz = 1000 (a tick of exactly 1 ms) no tick services two expiries.
    let r = run(&text("hz = 1000"));
    let it = task(&r, "t").iterations;
    assert_eq!((it.min_ns, it.max_ns, it.sd_ns), (1_000_000, 1_000_000, 0), "{it:?}");
    let sc = parse_scenario(&text("tick = \"1003200ns\""), "t.toml").unwrap();
    assert_eq!((sc.machine.tick, sc.machine.hz), (Some(1_003_200), 997));
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

/// A periodic timer is a signalled object (paper 000 §6's NT timers; Linux's timerfd):
/// an expiry that passed while the task was busy completes its next wait at once, and
/// several that passed leave one signal, not a count. Loop [run 3.5 ms, timer 1 ms, run
/// 0.2 ms, timer 1 ms], one-shot clock: arrivals at 3.5 (then waits for 4.5), 4.7 (waits
/// for 5.5), 9.0 (6.5, 7.5 and 8.5 passed: at once), 9.2 (waits for 9.5: the three
/// passed expiries were one signal), 13.0 (at once), 13.2 (waits for 13.5).
#[test]
fn a_timer_signalled_while_busy_completes_the_next_wait_at_once() {
    let text = |clock: &str| {
        format!(
            r#"until = "14ms"
[machine]
cpus = 1
clock = "{clock}"
hz = 1000
[[task]]
name = "t"
behaviour = {{ kind = "script", repeat = true, phases = [ {{ run = "3500us" }}, {{ timer = "1ms" }}, {{ run = "200us" }}, {{ timer = "1ms" }} ] }}
"#
        )
    };
    let r = run(&text("oneshot"));
    let it = task(&r, "t").iterations;
    // Intervals 4.3, 0.2, 3.8, 0.2 ms (the first, 1.2, follows no wait: not recorded).
    assert_eq!((it.count, it.min_ns, it.max_ns, it.mean_ns), (4, 200_000, 4_300_000, 2_125_000));
    // CPU: 3.5 + 0.2 + 3.5 + 0.2 + 3.5 + 0.2 + 0.5 (from 13.5 to the horizon).
    assert_eq!(task(&r, "t").cpu_ns, 11_600_000);
    // Tick clock at 1 kHz: an expiry signals at the tick that services it. Arrivals at
    // 3.5 (waits for 4.5: tick 5), 5.2 (waits for 5.5: tick 6), 9.5 (6.5, 7.5, 8.5
    // serviced by tick 9: at once), 9.7 (9.5 is serviced at tick 10: it waits), 13.5
    // (at once), 13.7: the same intervals, the waits ending at ticks.
    let r = run(&text("tick"));
    let it = task(&r, "t").iterations;
    assert_eq!((it.count, it.min_ns, it.max_ns, it.mean_ns), (4, 200_000, 4_300_000, 2_125_000));
    assert_eq!(task(&r, "t").cpu_ns, 11_100_000, "the last wait, for 13.5, ends at tick 14: the horizon");
}
