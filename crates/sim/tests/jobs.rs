//! Exact job accounting (docs/jobs.md, issue 16 item 1): everything due at an instant is
//! handled before the decision, under both clocks and for behaviours other than periodic
//! tasks, and the horizon rule (missed if the deadline has passed, else pending).

use vassal_sim::scenario::parse_scenario;
use vassal_sim::{simulate, Report, Sim};

fn run(text: &str) -> Report {
    simulate(parse_scenario(text, "test.toml").unwrap()).unwrap()
}

fn counts(r: &Report, name: &str) -> (u64, u64, u64, u64) {
    let t = r.task(name).unwrap();
    (t.jobs_met, t.jobs_missed, t.jobs_pending, t.response.max_ns)
}

/// One CPU under `clock` (1 ms ticks) until `until`, the default scheduler `fps`: the
/// head of the scenarios below, which add the policy's parameters and the tasks.
fn one_cpu_fps(clock: &str, until: &str) -> String {
    format!("until = \"{until}\"\n[machine]\ncpus = 1\nclock = \"{clock}\"\nhz = 1000\n[default]\npolicy = \"fps\"\n")
}

/// Issue 16's smallest RM case: B (20 ms, 10 ms) finishes exactly at 20 and 40 ms, as A
/// (10 ms, 5 ms) releases a job; it meets them. The clock must not matter.
fn rm_case(clock: &str) -> String {
    one_cpu_fps(clock, "60ms")
        + r#"params = { rm = true }
[[task]]
name = "A"
params = { period = "10ms" }
behaviour = { kind = "periodic", period = "10ms", exec = "5ms" }
[[task]]
name = "B"
params = { period = "20ms" }
behaviour = { kind = "periodic", period = "20ms", exec = "10ms" }
"#
}

#[test]
fn a_completion_at_a_release_is_recorded_then_under_both_clocks() {
    for clock in ["oneshot", "tick"] {
        let r = run(&rm_case(clock));
        // The jobs released at the horizon (60 ms) are pending.
        assert_eq!(counts(&r, "A"), (6, 0, 1, 5_000_000), "{clock}");
        assert_eq!(counts(&r, "B"), (3, 0, 1, 20_000_000), "{clock}");
        // B is not preempted with no work left and dispatched again for nothing: it
        // switches in once per job and once after each of A's jobs inside its own.
        assert_eq!(r.task("B").unwrap().switches, 6, "{clock}");
    }
}

/// Task `task`'s jobs in the trace of `text`'s run: (release, deadline, end), in order.
fn task_jobs(text: &str, task: usize) -> Vec<(u64, u64, Option<u64>)> {
    let mut sim = Sim::new(parse_scenario(text, "t.toml").unwrap()).unwrap();
    sim.record_trace();
    let (_, trace) = sim.run_traced().unwrap();
    trace.jobs.iter().filter(|j| j.task == task).map(|j| (j.release, j.deadline, j.end)).collect()
}

#[test]
fn the_trace_lists_every_job_with_its_end() {
    let b = task_jobs(&rm_case("oneshot"), 1);
    let ms = 1_000_000;
    assert_eq!(
        b,
        [(0, 20 * ms, Some(20 * ms)), (20 * ms, 40 * ms, Some(40 * ms)), (40 * ms, 60 * ms, Some(60 * ms)), (60 * ms, 80 * ms, None)]
    );
}

#[test]
fn an_interactive_burst_ending_as_a_higher_priority_job_is_released_responds_then() {
    // L's 5 ms burst runs 5..10 ms and ends exactly when H releases its second job.
    let r = run(r#"until = "50ms"
[machine]
cpus = 1
clock = "oneshot"
[default]
policy = "fps"
[[task]]
name = "H"
params = { priority = 2 }
behaviour = { kind = "periodic", period = "10ms", exec = "5ms" }
[[task]]
name = "L"
params = { priority = 1 }
behaviour = { kind = "interactive", burst = "5ms", think = "1s" }
"#);
    let l = r.task("L").unwrap();
    assert_eq!((l.response.count, l.response.max_ns), (1, 10_000_000));
}

/// H (priority 2): 5 ms every 10 ms; `low` (priority 1, behaviour `low`) needs 10 ms of
/// CPU each time it has work and runs in H's gaps, so it finishes exactly as H releases
/// a job, 20 ms after its work came. `extra` goes before the tasks (e.g. an interrupt).
fn low_under_h(clock: &str, low: &str, extra: &str) -> String {
    one_cpu_fps(clock, "100ms")
        + &format!(
            r#"{extra}
[[task]]
name = "H"
params = {{ priority = 2 }}
behaviour = {{ kind = "periodic", period = "10ms", exec = "5ms" }}
[[task]]
name = "low"
params = {{ priority = 1 }}
behaviour = {low}
"#
        )
}

#[test]
fn a_frame_decoded_as_a_higher_priority_job_is_released_is_shown_on_time() {
    // Each 20 ms frame decodes in H's gaps (5..10, 15..20 ms of its period) and is done
    // exactly at its ideal time, as H releases: shown then, on time (1 ms allowed). Shown
    // after H's next job instead, it would be 5 ms late.
    for clock in ["oneshot", "tick"] {
        let r = run(&low_under_h(clock, r#"{ kind = "player", period = "20ms", exec = "10ms", late_after = "1ms" }"#, ""));
        // frames shown at 20, 40, 60, 80 and 100 ms; the one decoding at the horizon is pending
        assert_eq!(counts(&r, "low"), (5, 0, 1, 20_000_000), "{clock}");
        assert_eq!(r.task("low").unwrap().response.min_ns, 20_000_000, "{clock}");
    }
}

#[test]
fn an_interrupt_handled_as_a_higher_priority_job_is_released_responds_then() {
    // Interrupts at 30 and 60 ms (and 90, unfinished at the horizon): each 10 ms handler
    // run ends exactly at one of H's releases, 20 ms after its interrupt.
    for clock in ["oneshot", "tick"] {
        let irq = "[[interrupt]]\nvector = 3\nevery = \"30ms\"";
        let r = run(&low_under_h(clock, r#"{ kind = "handler", vector = 3, work = "10ms" }"#, irq));
        let low = r.task("low").unwrap();
        assert_eq!((low.response.count, low.response.min_ns, low.response.max_ns), (2, 20_000_000, 20_000_000), "{clock}");
    }
}

#[test]
fn jobs_unfinished_at_the_horizon_are_missed_if_due_else_pending() {
    // One task needing 15 ms every 10 ms, 30 ms: job 0 ends at 15 (late), job 1 at 30
    // (late), job 2 (due 30) is unfinished at 30: missed; job 3 (released 30) is pending.
    let r = run(r#"until = "30ms"
[machine]
cpus = 1
clock = "oneshot"
[[task]]
name = "t"
behaviour = { kind = "periodic", period = "10ms", exec = "15ms" }
"#);
    let (met, missed, pending, _) = counts(&r, "t");
    assert_eq!((met, missed, pending), (0, 3, 1));
    assert!(r.to_table().contains("jobs pending at the horizon (deadline after it): t 1"), "{}", r.to_table());
}

/// A script's iterations between `timer` waits are jobs (docs/jobs.md): released at the
/// expiry a wait completed for, due at the expiry the next one waits for. S (4 ms, then
/// a 10 ms timer) runs under H (15 ms every 40 ms): its timer starts at 19 ms, where S
/// first reaches it (expiries 29, 39, … ms). Its iterations end at 33 (met), 58 (due 49:
/// missed; the wait for 49 completes at once, the timer being signalled), 62 (due 59:
/// missed), 66, 73 (met), 98 (due 89: missed), and the one released at 89 is unfinished
/// at its deadline 99, before the horizon: missed. The clock must not matter.
#[test]
fn a_scripts_iterations_between_timer_waits_are_jobs() {
    let ms = 1_000_000;
    for clock in ["oneshot", "tick"] {
        let text = one_cpu_fps(clock, "100ms")
            + r#"[[task]]
name = "H"
params = { priority = 2 }
behaviour = { kind = "periodic", period = "40ms", exec = "15ms" }
[[task]]
name = "S"
params = { priority = 1 }
behaviour = { kind = "script", repeat = true, phases = [ { run = "4ms" }, { timer = "10ms" } ] }
"#;
        assert_eq!(counts(&run(&text), "S"), (3, 4, 0, 19 * ms), "{clock}");
        let s: Vec<(u64, u64, Option<u64>)> =
            task_jobs(&text, 1).into_iter().map(|(r, d, e)| (r / ms, d / ms, e.map(|e| e / ms))).collect();
        let want = [(29, 39, Some(33)), (39, 49, Some(58)), (49, 59, Some(62)), (59, 69, Some(66)), (69, 79, Some(73))];
        assert_eq!(s[..5], want, "{clock}");
        assert_eq!(s[5..], [(79, 89, Some(98)), (89, 99, None)], "{clock}");
    }
}

/// The iteration under way at the horizon is a job only if the script will reach a
/// `timer` phase again: alone, S waits at 0 (the timer starts; expiries 10, 20, 30 ms),
/// runs 2 ms after each expiry, and its `times` sends it back to the timer twice; after
/// the third expiry it goes on to a 30 ms run and, not repeating, reaches no timer again.
#[test]
fn a_script_job_at_the_horizon_needs_a_timer_ahead() {
    let script = |until: &str, repeat: bool| {
        format!(
            "until = \"{until}\"\n[machine]\ncpus = 1\nclock = \"oneshot\"\n[[task]]\nname = \"S\"\nbehaviour = {{ kind = \"script\", \
             repeat = {repeat}, phases = [ {{ timer = \"10ms\" }}, {{ run = \"2ms\" }}, {{ times = 3 }}, {{ run = \"30ms\" }} ] }}\n"
        )
    };
    // at 21 ms the `times` will send it back: the job released at 20 is pending (due 30)
    assert_eq!(counts(&run(&script("21ms", false)), "S"), (1, 0, 1, 2_000_000));
    // at 31 and 45 ms it is past its last pass: two jobs met, none open
    assert_eq!(counts(&run(&script("31ms", false)), "S"), (2, 0, 0, 2_000_000));
    assert_eq!(counts(&run(&script("45ms", false)), "S"), (2, 0, 0, 2_000_000));
    // repeating, it reaches the timer again after the 30 ms run: the job released at 30
    // is due at 40, before the horizon: missed
    assert_eq!(counts(&run(&script("45ms", true)), "S"), (2, 1, 0, 2_000_000));
}
