//! Loadable modules in the simulator (issue 8): the SDK's example modules load from a
//! scenario and from `--load`, behave as their built-in twins, unload to the scheduler
//! below, and every kind of broken module is ejected with its reason while its tasks go
//! on under the scheduler below.
//!
//! The modules are built from sdk/ for wasm32-unknown-unknown with a cargo of their own
//! (sdk/ is its own workspace with its own target dir, so this does not deadlock with
//! the cargo running the test). scripts/test.sh builds them first anyway.

use std::collections::BTreeMap;
use std::path::PathBuf;

use vassal_policies::ParamValue;
use vassal_sim::model::Scenario;
use vassal_sim::modules::{apply_load, Place};
use vassal_sim::scenario::parse_scenario;
use vassal_sim::{Report, Sim};

fn module(name: &str) -> PathBuf {
    vassal_module::example_path(name).unwrap()
}

/// Three tasks under scheduler "proto" (loaded at 0.5 s, unloaded at 2.5 s) above the
/// round-robin default "ts", plus a hog of the default's.
fn scenario(proto: &str) -> String {
    format!(
        r#"
name = "proto"
until = "3s"
[machine]
cpus = 2
[default]
name = "ts"
policy = "rr"
params = {{ quantum = "10ms" }}
[[scheduler]]
name = "proto"
{proto}
load_at = "500ms"
unload_at = "2500ms"
[[task]]
name = "a"
start = "600ms"
scheduler = "proto"
params = {{ tickets = 300, weight = 3 }}
behaviour = {{ kind = "cpu" }}
[[task]]
name = "b"
start = "600ms"
scheduler = "proto"
params = {{ tickets = 100, weight = 1 }}
affinity = [0]
behaviour = {{ kind = "cpu" }}
[[task]]
name = "c"
start = "600ms"
scheduler = "proto"
behaviour = {{ kind = "periodic", period = "20ms", exec = "2ms" }}
[[task]]
name = "hog"
behaviour = {{ kind = "cpu" }}
"#
    )
}

fn parse(text: &str) -> Scenario {
    parse_scenario(text, "inline.toml").unwrap_or_else(|e| panic!("{e}"))
}

fn run(sc: Scenario) -> Report {
    let mut sim = Sim::new(sc).expect("valid scenario");
    sim.set_checks(true); // the dispatcher's invariants after every event: no task lost
    sim.run().expect("the run keeps its invariants")
}

fn module_scheduler(name: &str, params: &str) -> String {
    format!("module = {:?}\nparams = {{ {params} }}", module(name).display().to_string())
}

fn cpu(r: &Report, task: &str) -> u64 {
    r.tasks.iter().find(|t| t.name == task).unwrap_or_else(|| panic!("no task {task}")).cpu_ns
}

fn log_has(r: &Report, what: &str) -> bool {
    r.log.iter().any(|l| l.contains(what))
}

/// The native form of a module (the same source built as a shared library with the C
/// ABI) loads in a scenario too, and makes the same schedule as its WebAssembly form.
#[test]
fn a_native_module_schedules_like_its_webassembly_form() {
    let native = vassal_module::native_example_path("rr").unwrap();
    let wasm = run(parse(&scenario(&module_scheduler("rr", ""))));
    let loaded = run(parse(&scenario(&format!("module = {:?}", native.display().to_string()))));
    assert!(log_has(&loaded, "scheduler 'proto' loaded from module") && log_has(&loaded, "(libvassal_module_rr.so)"), "{:#?}", loaded.log);
    for t in ["a", "b", "c", "hog"] {
        assert_eq!(cpu(&loaded, t), cpu(&wasm, t), "task {t}: native rr vs WebAssembly rr");
    }
    assert!(log_has(&loaded, "module scheduler 'proto' unloaded [a -> ts, b -> ts, c -> ts]"), "{:#?}", loaded.log);
}

#[test]
fn rr_module_schedules_like_the_builtin_rr() {
    let builtin = run(parse(&scenario("policy = \"rr\"\nusage = { reserved = 0.5 }")));
    let loaded = run(parse(&scenario(&module_scheduler("rr", ""))));
    assert!(log_has(&loaded, "scheduler 'proto' loaded from module rr.wasm"), "{:#?}", loaded.log);
    for t in ["a", "b", "c", "hog"] {
        assert_eq!(cpu(&loaded, t), cpu(&builtin, t), "task {t}: module rr vs built-in rr");
    }
    // While loaded (0.6–2.5 s) the proto tasks ran; after the unload they went on under ts.
    assert!(log_has(&loaded, "module scheduler 'proto' unloaded [a -> ts, b -> ts, c -> ts]"), "{:#?}", loaded.log);
}

#[test]
fn bvt_module_schedules_like_the_builtin_bvt() {
    let builtin = run(parse(&scenario("policy = \"bvt\"\nusage = { reserved = 0.5 }")));
    let loaded = run(parse(&scenario(&module_scheduler("bvt", ""))));
    for t in ["a", "b", "c", "hog"] {
        assert_eq!(cpu(&loaded, t), cpu(&builtin, t), "task {t}: module bvt vs built-in bvt");
    }
}

/// Issue 16's smallest overload case for EDF (one CPU; (3 ms, 2 ms) and (5 ms, 2 ms), 30
/// ms) under scheduler "proto" above a round-robin default, as the built-in `edf` and as
/// the `edf` module (the same source, compiled; WebAssembly and native): every job ends
/// at the same nanosecond.
/// Here tasks go straight on from one job to their next without waking, so only a
/// module told of each job (`vassal_job`) keeps textbook order: a's job released at 12
/// ms (due 15), started as its previous one ended, is late at 15 and goes on to end at
/// 16 (docs/jobs.md).
#[test]
fn edf_module_is_told_of_jobs_and_schedules_job_for_job_as_the_builtin() {
    let scenario = |proto: &str| {
        parse(&format!(
            r#"until = "30ms"
[machine]
cpus = 1
clock = "oneshot"
[default]
name = "ts"
policy = "rr"
[[scheduler]]
name = "proto"
{proto}
[[task]]
name = "a"
scheduler = "proto"
params = {{ period = "3ms" }}
behaviour = {{ kind = "periodic", period = "3ms", exec = "2ms" }}
[[task]]
name = "b"
scheduler = "proto"
params = {{ period = "5ms" }}
behaviour = {{ kind = "periodic", period = "5ms", exec = "2ms" }}
"#
        ))
    };
    let jobs = |sc: Scenario| {
        let mut sim = Sim::new(sc).expect("valid scenario");
        sim.record_trace();
        let (report, trace) = sim.run_traced().expect("runs");
        let jobs: Vec<(usize, u64, u64, Option<u64>)> = trace.jobs.iter().map(|j| (j.task, j.release, j.deadline, j.end)).collect();
        (report, jobs)
    };
    let (builtin, want) = jobs(scenario("policy = \"edf\"\nusage = { reserved = 0.9 }"));
    let (loaded, got) = jobs(scenario(&module_scheduler("edf", "reserved = 0.9")));
    assert!(log_has(&loaded, "scheduler 'proto' loaded from module edf (vassal_module_edf.wasm)"), "{:#?}", loaded.log);
    assert_eq!(got, want, "module edf vs built-in edf, job by job");
    let native = vassal_module::native_example_path("edf").unwrap();
    let (_, got) = jobs(scenario(&format!("module = {:?}\nparams = {{ reserved = 0.9 }}", native.display().to_string())));
    assert_eq!(got, want, "native module edf vs built-in edf, job by job");
    // the case itself: a's job released at 12 ms (due 15) ends at 16, past its deadline
    let ms = 1_000_000;
    assert!(want.contains(&(0, 12 * ms, 15 * ms, Some(16 * ms))), "{want:?}");
    for t in ["a", "b"] {
        let (l, b) = (loaded.task(t).unwrap(), builtin.task(t).unwrap());
        assert_eq!((l.jobs_met, l.jobs_missed), (b.jobs_met, b.jobs_missed), "task {t}");
    }
}

#[test]
fn stride_module_shares_by_tickets() {
    // One CPU, two CPU-bound tasks with 300 and 100 tickets under the stride module
    // for 2 s: 3:1 (Waldspurger & Weihl's proportional share), to within one quantum.
    let text = format!(
        r#"
until = "2s"
[machine]
cpus = 1
[default]
policy = "rr"
[[scheduler]]
name = "stride"
{}
[[task]]
name = "rich"
scheduler = "stride"
params = {{ tickets = 300 }}
behaviour = {{ kind = "cpu" }}
[[task]]
name = "poor"
scheduler = "stride"
params = {{ tickets = 100 }}
behaviour = {{ kind = "cpu" }}
"#,
        module_scheduler("stride", "quantum = \"10ms\", reserved = 0.5")
    );
    let r = run(parse(&text));
    let (rich, poor) = (cpu(&r, "rich"), cpu(&r, "poor"));
    assert_eq!(rich + poor, 2_000_000_000, "the CPU was always busy");
    let ideal_poor = 500_000_000i64;
    assert!((poor as i64 - ideal_poor).abs() <= 10_000_000, "poor got {poor} ns, expected 500 ms ± one 10 ms quantum");
}

#[test]
fn a_module_declares_its_usage_and_the_conflict_check_applies() {
    // The module declares 1.9 CPUs reserved; with 2 CPUs and 5% of the machine kept for
    // best effort (0.1 CPU), 1.9 fits exactly, 1.95 does not and the load is refused.
    let ok = run(parse(&scenario(&module_scheduler("rr", "reserved = 1.9"))));
    assert!(log_has(&ok, "reserved 190.0% of one CPU"), "{:#?}", ok.log);
    let refused = run(parse(&scenario(&module_scheduler("rr", "reserved = 1.95"))));
    assert!(log_has(&refused, "scheduler 'proto' refused: scheduler 'proto' conflicts with the hierarchy"), "{:#?}", refused.log);
    // Its tasks' joins were refused: they ran under the default all along.
    assert!(cpu(&refused, "a") > 0);
}

#[test]
fn scenario_errors_name_the_module_problem() {
    let both = scenario(&format!("policy = \"rr\"\n{}", module_scheduler("rr", "")));
    let e = parse_scenario(&both, "x.toml").unwrap_err().to_string();
    assert!(e.contains("has both a policy and a module"), "{e}");
    let with_usage = scenario(&format!("{}\nusage = {{ reserved = 0.5 }}", module_scheduler("rr", "")));
    let e = parse_scenario(&with_usage, "x.toml").unwrap_err().to_string();
    assert!(e.contains("a module declares its own usage"), "{e}");
    let missing = scenario("module = \"no-such-module.wasm\"");
    let e = parse_scenario(&missing, "/tmp/x.toml").unwrap_err().to_string();
    assert!(e.contains("cannot read module file /tmp/no-such-module.wasm") && e.starts_with("/tmp/x.toml:"), "{e}");
    let bad_param = scenario(&module_scheduler("rr", "quantum = 5"));
    let e = parse_scenario(&bad_param, "x.toml").unwrap_err().to_string();
    assert!(e.contains("the module refused its parameters: parameter 'quantum'"), "{e}");
    let not_wasm = scenario(&format!("module = {:?}", concat!(env!("CARGO_MANIFEST_DIR"), "/tests/modules.rs")));
    let e = parse_scenario(&not_wasm, "x.toml").unwrap_err().to_string();
    assert!(e.contains("not a valid WebAssembly module"), "{e}");
}

#[test]
fn sim_load_replaces_a_named_scheduler_or_adds_one() {
    // The prototyping loop: the scenario names "proto" (a built-in rr); --load swaps in a
    // module and keeps the scenario's load/unload times.
    let mut sc = parse(&scenario("policy = \"rr\"\nusage = { reserved = 0.5 }"));
    apply_load(&mut sc, &module("stride"), "proto", &Place::Top, None, None, BTreeMap::new()).unwrap();
    assert_eq!(sc.schedulers.len(), 1);
    assert!(sc.schedulers[0].policy.kind.starts_with("module:"));
    assert_eq!((sc.schedulers[0].load_at, sc.schedulers[0].unload_at), (500_000_000, Some(2_500_000_000)));
    let r = run(sc);
    assert!(log_has(&r, "loaded from module stride.wasm"), "{:#?}", r.log);
    // A new scheduler below "proto", loaded at 1 s and unloaded at 2 s, with a parameter.
    let mut sc = parse(&scenario("policy = \"rr\"\nusage = { reserved = 0.5 }"));
    let params = BTreeMap::from([("quantum".to_string(), ParamValue::Str("5ms".into()))]);
    apply_load(&mut sc, &module("rr"), "mine", &Place::Below("proto".into()), Some(1_000_000_000), Some(2_000_000_000), params).unwrap();
    assert_eq!(sc.schedulers.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(), ["proto", "mine"]);
    let r = run(sc);
    assert!(log_has(&r, "scheduler 'mine' loaded from module rr.wasm"), "{:#?}", r.log);
    // Mistakes are refused with a reason.
    let mut sc = parse(&scenario("policy = \"rr\"\nusage = { reserved = 0.5 }"));
    let e = apply_load(&mut sc, &module("rr"), "x", &Place::Above("nope".into()), None, None, BTreeMap::new()).unwrap_err();
    assert!(e.contains("no scheduler named 'nope'"), "{e}");
    let e = apply_load(&mut sc, &module("rr"), "ts", &Place::Top, None, None, BTreeMap::new()).unwrap_err();
    assert!(e.contains("default scheduler"), "{e}");
}

#[test]
fn unloading_a_module_hands_its_tasks_to_the_scheduler_below() {
    // "proto" (the module) sits above "mid" (a built-in rr with a reserved share): at the
    // unload its tasks go to "mid", not to the default.
    let text = scenario(&module_scheduler("rr", "")).replace(
        "[[task]]\nname = \"a\"",
        "[[scheduler]]\nname = \"mid\"\npolicy = \"rr\"\nusage = { reserved = 0.5 }\n\n[[task]]\nname = \"a\"",
    );
    let r = run(parse(&text));
    assert!(log_has(&r, "module scheduler 'proto' unloaded [a -> mid, b -> mid, c -> mid]"), "{:#?}", r.log);
    let hist = r.tasks.iter().find(|t| t.name == "a").unwrap();
    assert_eq!(hist.scheduler, "mid");
}

/// Runs the broken module with `fail`, and checks that it was ejected for `reason`, that
/// its tasks went to the default and kept running, and that the run kept its invariants.
fn ejected(fail: &str, reason: &str) {
    let r = run(parse(&scenario(&module_scheduler("broken", &format!("fail = \"{fail}\", after = 5")))));
    let line =
        r.log.iter().find(|l| l.contains("scheduler 'proto' ejected")).unwrap_or_else(|| panic!("{fail}: not ejected: {:#?}", r.log));
    assert!(line.contains(reason), "{fail}: {line}");
    assert!(line.contains("[a -> ts, b -> ts, c -> ts]"), "{fail}: tasks not handed down: {line}");
    assert!(log_has(&r, "[proto] ejected: "), "{fail}: the dispatcher's log has no entry");
    // Ejected before the scheduled unload, and nothing unloaded twice.
    assert!(!log_has(&r, "module scheduler 'proto' unloaded"), "{:#?}", r.log);
    // The system went on: every task of the module kept getting CPU afterwards, and the
    // periodic task met its deadlines under the default.
    for t in ["a", "b", "c"] {
        assert!(cpu(&r, t) > 500_000_000 / if t == "c" { 20 } else { 1 }, "{fail}: task {t} ran only {} ns", cpu(&r, t));
    }
}

#[test]
fn a_trapping_module_is_ejected() {
    ejected("trap", "trapped: wasm `unreachable` instruction executed");
}

#[test]
fn a_module_past_its_fuel_budget_is_ejected() {
    ejected("fuel", "ran past its time budget (10000000 fuel units in one call)");
}

#[test]
fn a_module_past_its_memory_limit_is_ejected() {
    ejected("memory", "exceeded its memory limit (16777216 bytes)");
}

#[test]
fn a_module_picking_a_task_not_its_own_is_ejected() {
    ejected("not_yours", "task belongs to another scheduler");
}

#[test]
fn a_module_picking_a_blocked_task_is_ejected() {
    ejected("not_runnable", "task is not runnable");
}

#[test]
fn a_module_starving_its_tasks_is_ejected_by_the_watchdog() {
    ejected("starve", "watchdog: task");
}

#[test]
fn a_well_behaved_module_is_not_ejected() {
    let r = run(parse(&scenario(&module_scheduler("broken", "fail = \"none\""))));
    assert!(!log_has(&r, "ejected"), "{:#?}", r.log);
    assert!(log_has(&r, "module scheduler 'proto' unloaded"), "{:#?}", r.log);
}

#[test]
fn the_docs_worked_example_is_sdk_examples_fifo_and_runs() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let doc = std::fs::read_to_string(root.join("docs/modules.md")).unwrap();
    let start = doc.find("```rust\n// src/lib.rs\n").expect("the worked example") + "```rust\n// src/lib.rs\n".len();
    let block = &doc[start..start + doc[start..].find("```").unwrap()];
    let file = std::fs::read_to_string(root.join("sdk/examples/fifo/src/lib.rs")).unwrap();
    assert_eq!(block, file, "docs/modules.md's worked example and sdk/examples/fifo differ");
    // It runs: three tasks that block get every job done under it, and nothing is ejected.
    let text = format!(
        r#"
until = "2s"
[machine]
cpus = 1
[default]
policy = "rr"
[[scheduler]]
name = "fifo"
{}
[[task]]
name = "p1"
scheduler = "fifo"
behaviour = {{ kind = "periodic", period = "10ms", exec = "2ms" }}
[[task]]
name = "p2"
scheduler = "fifo"
behaviour = {{ kind = "periodic", period = "20ms", exec = "5ms" }}
[[task]]
name = "io"
scheduler = "fifo"
behaviour = {{ kind = "io", run = "1ms", sleep = "3ms" }}
"#,
        module_scheduler("fifo", "")
    );
    let r = run(parse(&text));
    assert!(!log_has(&r, "ejected"), "{:#?}", r.log);
    let fifo = r.schedulers.iter().find(|s| s.name == "fifo").expect("still loaded");
    assert_eq!(fifo.kind, "fifo");
    // At least one dispatch per job: 200 of p1 and 100 of p2 in 2 s, plus io's bursts.
    assert!(fifo.decided > 300, "it made the decisions: {}", fifo.decided);
    for t in ["p1", "p2"] {
        let rep = r.tasks.iter().find(|x| x.name == t).unwrap();
        assert!(rep.jobs_met > 0 && rep.jobs_missed == 0, "{t}: met {} missed {}", rep.jobs_met, rep.jobs_missed);
    }
}
