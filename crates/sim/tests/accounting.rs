//! Deferred accounting (issue 16, `Policy::accounts_runs`): while no loaded policy reads
//! how long a task ran, a wake-up does not settle the other CPUs' accounts; they are
//! settled at their next event instead, in one step. Whether they are settled early or
//! late must change nothing: the same run with an idle scheduler on top that does use
//! `on_run` (`rr`, holding no task, so it never decides) settles at every wake-up, and
//! every task's and CPU's figures must come out the same.

use vassal_sim::scenario::parse_scenario;
use vassal_sim::{simulate, Report};

/// A global `policy` (with `params`) on 3 CPUs, overloaded, with switch and migration
/// costs and unscheduled time (so that a CPU's overhead, progress and idle time all need
/// splitting), periodic tasks, I/O-bound and interactive ones (wake-ups that preempt, or
/// find a CPU idle); with `top`, the idle `rr` above it.
fn scenario(policy: &str, params: &str, top: bool) -> String {
    let top = if top { "[[scheduler]]\nname = \"idle-top\"\npolicy = \"rr\"\nusage = \"best_effort\"\n" } else { "" };
    let mut s = format!(
        r#"until = "3s"
seed = 7
[machine]
cpus = 3
clock = "oneshot"
switch_cost = "7us"
migration_cost = "20us"
unscheduled = {{ interval = {{ exp = "3ms" }}, duration = {{ uniform = ["5us", "60us"] }} }}
[default]
name = "d"
policy = "{policy}"
{params}{top}"#
    );
    for k in 1..=9u64 {
        let period = 4 + 3 * k;
        s += &format!(
            "[[task]]\nname = \"p{k}\"\nparams = {{ period = \"{period}ms\" }}\nbehaviour = {{ kind = \"periodic\", period = \"{period}ms\", exec = {{ uniform = [\"500us\", \"{}us\"] }} }}\n",
            period * 600
        );
    }
    s += "[[task]]\nname = \"io\"\ncount = 3\nbehaviour = { kind = \"io\", run = { exp = \"2ms\" }, sleep = { exp = \"5ms\" } }\n";
    s += "[[task]]\nname = \"ia\"\ncount = 2\nbehaviour = { kind = \"interactive\", burst = { exp = \"1ms\" }, think = { exp = \"20ms\" } }\n";
    s
}

fn run(text: &str) -> Report {
    simulate(parse_scenario(text, "accounting.toml").unwrap()).unwrap()
}

fn figures(r: &Report) -> String {
    let tasks = serde_json::to_string(&r.tasks).unwrap();
    let cpus = serde_json::to_string(&r.cpus).unwrap();
    format!("{tasks}\n{cpus}")
}

#[test]
fn settling_at_the_next_event_changes_no_figure() {
    for (policy, params) in [("edf", ""), ("fps", "params = { rm = true }\n")] {
        let lazy = run(&scenario(policy, params, false));
        let eager = run(&scenario(policy, params, true));
        assert_eq!(figures(&lazy), figures(&eager), "{policy}: deferred and eager accounting differ");
        assert!(lazy.tasks.iter().map(|t| t.jobs_met + t.jobs_missed).sum::<u64>() > 1000, "{policy}: the run has jobs");
        assert!(lazy.tasks.iter().any(|t| t.jobs_missed > 0), "{policy}: the run is overloaded");
        assert!(lazy.cpus.iter().all(|c| c.overhead_ns > 0 && c.idle_ns > 0), "{policy}: overhead and idle time are split");
        assert!(
            lazy.tasks.iter().filter(|t| t.name.starts_with("io") || t.name.starts_with("ia")).all(|t| t.cpu_ns > 0),
            "{policy}: the waking tasks run"
        );
    }
}
