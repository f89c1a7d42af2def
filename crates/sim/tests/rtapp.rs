//! rt-app workloads (docs/rtapp.md): the shipped examples run through the simulator,
//! rt-app's event semantics (run, runtime, timer modes, loops, instances, FIFO
//! priorities, nice weights), and refusals that name the key.

use std::path::Path;

use vassal_core::MS;
use vassal_sim::rtapp::{load_rtapp, parse_rtapp, Options};
use vassal_sim::{model::Behaviour, Report, Sim};

fn run(sc: vassal_sim::model::Scenario) -> Report {
    let mut sim = Sim::new(sc).unwrap();
    sim.set_checks(true);
    sim.run().unwrap()
}

fn parse(json: &str) -> Result<vassal_sim::model::Scenario, String> {
    parse_rtapp(json, "t", &Options::default())
}

fn cpu_ms(r: &Report, task: &str) -> f64 {
    r.task(task).unwrap_or_else(|| panic!("no task {task}")).cpu_ns as f64 / 1e6
}

/// The rt-app files in docs/examples/rt-app/, in name order.
fn examples() -> Vec<std::path::PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/examples/rt-app");
    let mut files: Vec<_> =
        std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).filter(|p| p.extension().is_some_and(|x| x == "json")).collect();
    files.sort();
    files
}

#[test]
fn every_example_runs() {
    let files = examples();
    assert!(files.len() >= 3, "{files:?}");
    for f in &files {
        let sc = load_rtapp(f, &Options::default()).unwrap_or_else(|e| panic!("{e}"));
        let r = run(sc.clone());
        assert_eq!(r.elapsed_ns, sc.until);
        assert!(r.tasks.iter().all(|t| t.cpu_ns > 0), "{}: a thread never ran", f.display());
    }
}

/// fifo.json: `control` (SCHED_FIFO 50, CPU 0, 2 ms every 10 ms) always runs at once and
/// gets exactly its 20%; `logger` (FIFO 10, 5 ms every 50 ms) its 10%; the SCHED_OTHER
/// batch threads share the rest.
#[test]
fn fifo_threads_preempt_the_others() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/examples/rt-app");
    let sc = load_rtapp(&dir.join("fifo.json"), &Options::default()).unwrap();
    assert_eq!(sc.schedulers.len(), 1);
    assert_eq!(sc.schedulers[0].policy.kind, "fps");
    assert!(sc.schedulers[0].policy.params.is_empty(), "SCHED_FIFO has no time slice");
    let r = run(sc);
    assert_eq!(cpu_ms(&r, "control"), 200.0);
    assert_eq!(r.task("control").unwrap().latency.max_ns, 0);
    assert_eq!(cpu_ms(&r, "logger"), 100.0);
    for b in ["batch-0", "batch-1", "batch-2"] {
        assert_eq!(r.task(b).unwrap().scheduler, "default");
    }
    let batch: f64 = ["batch-0", "batch-1", "batch-2"].iter().map(|b| cpu_ms(&r, b)).sum();
    assert!((batch - 700.0).abs() < 1e-6, "{batch}");
}

/// phases.json: `compiler` has 2 instances of 20 loops of 40 ms run + 2 ms sleep: exactly
/// 800 ms of CPU each, then they exit; the phase loops unroll in order.
#[test]
fn loops_and_instances_unroll() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/examples/rt-app");
    let sc = load_rtapp(&dir.join("phases.json"), &Options::default()).unwrap();
    let names: Vec<&str> = sc.tasks.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["browser", "compiler-0", "compiler-1", "indexer"]);
    assert_eq!(sc.tasks[0].start, 100 * MS);
    match &sc.tasks[0].behaviour {
        Behaviour::Script { phases, repeat } => {
            assert!(*repeat);
            assert_eq!(phases.len(), 3 * 3 + 10 * 2);
        }
        b => panic!("{b:?}"),
    }
    match &sc.tasks[1].behaviour {
        Behaviour::Script { phases, repeat } => {
            assert!(!*repeat);
            assert_eq!(phases.len(), 20 * 2);
        }
        b => panic!("{b:?}"),
    }
    assert_eq!(sc.tasks[3].params.get("weight"), Some(&3), "SCHED_IDLE has CFS's idle weight");
    let r = run(sc);
    assert_eq!(cpu_ms(&r, "compiler-0"), 800.0);
    assert_eq!(cpu_ms(&r, "compiler-1"), 800.0);
}

/// `runtime` runs until so much wall time has passed, preempted or not; `run` needs its
/// CPU time. A FIFO thread takes 0-5 ms of every 20 ms on the one CPU; the other thread
/// starts its 10 ms at the same instant and sleeps 10 ms after it.
#[test]
fn runtime_counts_wall_time_run_counts_cpu_time() {
    let w = |event: &str| {
        format!(
            r#"{{ "global": {{ "duration": 1 }}, "tasks": {{
                "rt": {{ "policy": "SCHED_FIFO", "run": 5000, "timer": {{ "ref": "unique", "period": 20000 }} }},
                "work": {{ "{event}": 10000, "sleep": 10000 }} }} }}"#
        )
    };
    let r = run(parse(&w("runtime")).unwrap());
    // 5 ms of CPU (5..10 ms) per 20 ms cycle
    assert_eq!(cpu_ms(&r, "work"), 250.0);
    let r = run(parse(&w("run")).unwrap());
    // 10 ms of CPU per cycle: 5..15 ms run, sleep to 25, run 25..30 and 40..45 (rt at 40)…
    assert!(cpu_ms(&r, "work") > 350.0, "{}", cpu_ms(&r, "work"));
}

/// rt-app's timer modes when a run overruns the period (tutorial: "relative" restarts
/// the timer from the late instant, "absolute" keeps the original schedule). The thread
/// runs 15 ms, timer, 1 ms, timer (one timer, period 10 ms); the timer starts at the
/// thread's start, as Debian's rt-app 1.0 starts it (measured: docs/rtapp.md), so its first
/// expiry, 10 ms, has passed at the first use (15 ms). Relative mode restarts it then
/// (next expiry 25 ms) and at every overrun: a 25 ms cycle of 16 ms of CPU from 0, 25,
/// 50, …; absolute mode keeps the 10 ms grid (expiries 20, 40, …): a 20 ms cycle from 0,
/// 20, 40, …. Over 1 s: relative 40 cycles (0 … 975) × 16 = 640 ms; absolute 50 cycles
/// (0 … 980) × 16 = 800 ms.
#[test]
fn timer_modes_follow_rt_app() {
    let w = |mode: &str| {
        format!(
            r#"{{ "global": {{ "duration": 1 }}, "tasks": {{ "t": {{
                "run0": 15000, "timer0": {{ "ref": "a", "period": 10000, "mode": "{mode}" }},
                "run1": 1000, "timer1": {{ "ref": "a", "period": 10000, "mode": "{mode}" }} }} }} }}"#
        )
    };
    assert_eq!(cpu_ms(&run(parse(&w("relative")).unwrap()), "t"), 640.0);
    assert_eq!(cpu_ms(&run(parse(&w("absolute")).unwrap()), "t"), 800.0);
}

/// A thread's timers are separate (rt-app's refs). 1 ms run + timer A (10 ms), 1 ms
/// run + timer B (20 ms), looping; both start with the thread: A's first expiry is at
/// 10 ms, B's at 20 ms; from 20 ms on A is always late (relative: restarted, no sleep)
/// and B paces the loop, every 20 ms: 2 ms + 49 cycles × 2 ms = 100 ms of CPU in 1 s.
/// (One shared timer would pace it every 30 ms.)
#[test]
fn each_timer_ref_is_its_own_timer() {
    let sc = parse(
        r#"{ "global": { "duration": 1 }, "tasks": { "t": { "phases": {
            "a": { "run": 1000, "timer": { "ref": "uniqueA", "period": 10000 } },
            "b": { "run": 1000, "timer": { "ref": "uniqueB", "period": 20000 } } } } } }"#,
    )
    .unwrap();
    assert_eq!(cpu_ms(&run(sc), "t"), 100.0);
}

/// SCHED_OTHER priorities are nice values, weighted as Linux CFS weighs them.
#[test]
fn nice_values_become_cfs_weights_under_bvt() {
    let sc = parse(
        r#"{ "global": { "duration": 20 }, "tasks": { "a": { "priority": 0, "run": 10000 }, "b": { "priority": 5, "run": 10000 } } }"#,
    )
    .unwrap();
    assert_eq!(sc.tasks[0].params.get("weight"), Some(&1024));
    assert_eq!(sc.tasks[1].params.get("weight"), Some(&335));
    let r = run(sc);
    let share = r.task("a").unwrap().share;
    // BVT shares in proportion to weight, up to C + mcu of lag (§2.1): < 0.5% of 20 s
    assert!((share - 1024.0 / 1359.0).abs() < 0.005, "{share}");
    // Without weights, nice values are refused rather than ignored.
    let e = parse_rtapp(
        r#"{ "global": { "duration": 1 }, "tasks": { "b": { "priority": 5, "run": 10000 } } }"#,
        "t",
        &Options { policy: Some("rr".into()), ..Options::default() },
    )
    .unwrap_err();
    assert!(e.contains("tasks.b") && e.contains("--policy bvt") && e.starts_with("1:"), "{e}");
}

#[test]
fn until_overrides_duration_and_cpus_size_the_machine() {
    let json = r#"{ "tasks": { "a": { "cpus": [2], "run": 1000, "sleep": 1000 } } }"#;
    let sc = parse_rtapp(json, "t", &Options { until: Some(50 * MS), ..Options::default() }).unwrap();
    assert_eq!(sc.until, 50 * MS);
    assert_eq!(sc.machine.cpus, 3);
    let e = parse_rtapp(json, "t", &Options { until: Some(MS), cpus: Some(2), ..Options::default() }).unwrap_err();
    assert!(e.starts_with("1:29: cpus: CPU 2 is not on the 2-CPU machine (use --cpus)"), "{e}");
}

/// The machine's timer wake-up latency delays every wake-up from a sleep: 1 ms of run
/// and 1 ms of sleep is a 2 ms cycle (500 runs in 1 s) on an ideal machine, a 2.05 ms
/// one with a 50 µs wake-up latency: the 488th run starts at 487 × 2.05 = 998.35 ms
/// and ends in time, so 488 ms of CPU.
#[test]
fn the_wake_latency_delays_each_wake_up_from_a_sleep() {
    let json = r#"{ "global": { "duration": 1 }, "tasks": { "a": { "run": 1000, "sleep": 1000 } } }"#;
    assert_eq!(cpu_ms(&run(parse(json).unwrap()), "a"), 500.0);
    let mut sc = parse(json).unwrap();
    sc.machine.wake_latency = 50_000;
    assert_eq!(cpu_ms(&run(sc), "a"), 488.0);
}

/// An `instance` count is bounded by the scenario's task limit (a file asking for 2^32
/// threads used to be accepted and then never finished building), per thread and in all.
#[test]
fn instance_counts_beyond_the_task_limit_are_refused() {
    let one = |n: u64| format!(r#"{{ "global": {{ "duration": 1 }}, "tasks": {{ "a": {{ "instance": {n}, "run": 1000 }} }} }}"#);
    let e = parse(&one(4_294_967_296)).unwrap_err();
    assert!(e.starts_with("1:") && e.contains("tasks.a.instance") && e.contains("at most 100000"), "{e}");
    assert!(parse(&one(3)).is_ok());
    let two = r#"{ "global": { "duration": 1 }, "tasks": {
        "a": { "instance": 60000, "run": 1000 },
        "b": { "instance": 40001, "run": 1000 } } }"#;
    let e = parse(two).unwrap_err();
    assert!(e.contains("tasks.b") && e.contains("more than 100000"), "{e}");
}

/// A bad command-line option is named without a place in the file (there is none).
#[test]
fn an_option_error_names_the_option_not_a_place() {
    let json = r#"{ "tasks": { "a": { "run": 1000 } } }"#;
    let e = parse_rtapp(json, "t", &Options { policy: Some("nonesuch".into()), ..Options::default() }).unwrap_err();
    assert!(e.starts_with("--policy: unknown policy 'nonesuch'"), "{e}");
    let e = parse_rtapp(json, "t", &Options { cpus: Some(0), ..Options::default() }).unwrap_err();
    assert!(e.starts_with("--cpus: must be between 1 and 64"), "{e}");
}

/// An rt-app thread's iterations are jobs (docs/jobs.md): due at the expiry its timer
/// waits for (rt-app's slack is the time left to it), released at the expiry its last
/// wait was for. One CPU, 40 ms, absolute timers of 10 ms: `hi` (FIFO 50) runs 4 ms at
/// 0, 10, 20, 30 and meets each; `lo` (FIFO 10) needs 7 ms and gets 6 of each 10, so it
/// ends its iterations at 15, 26 and 37 ms (due 10, 20, 30: missed, responses 15, 16, 17
/// ms), and the one under way at the horizon, due at 40, is missed too; `hi`'s iteration
/// released at 40 is pending.
#[test]
fn timer_iterations_are_jobs_due_at_the_next_expiry() {
    let json = r#"{ "global": { "duration": -1 }, "tasks": {
        "hi": { "policy": "SCHED_FIFO", "priority": 50,
                "run": 4000, "timer": { "ref": "uniqueH", "period": 10000, "mode": "absolute" } },
        "lo": { "policy": "SCHED_FIFO", "priority": 10,
                "run": 7000, "timer": { "ref": "uniqueL", "period": 10000, "mode": "absolute" } } } }"#;
    let sc = parse_rtapp(json, "t", &Options { until: Some(40 * MS), ..Options::default() }).unwrap();
    let mut sim = Sim::new(sc).unwrap();
    sim.set_checks(true);
    sim.record_trace();
    let (r, trace) = sim.run_traced().unwrap();
    let counts = |name: &str| {
        let t = r.task(name).unwrap();
        (t.jobs_met, t.jobs_missed, t.jobs_pending, t.response.max_ns)
    };
    assert_eq!(counts("hi"), (4, 0, 1, 4 * MS));
    assert_eq!(counts("lo"), (0, 4, 0, 17 * MS));
    let lo: Vec<(u64, u64, Option<u64>)> = trace.jobs.iter().filter(|j| j.task == 1).map(|j| (j.release, j.deadline, j.end)).collect();
    let ms = |v: u64| v * MS;
    assert_eq!(lo, [(0, ms(10), Some(ms(15))), (ms(10), ms(20), Some(ms(26))), (ms(20), ms(30), Some(ms(37))), (ms(30), ms(40), None)]);
}

/// On every shipped example, the jobs a thread missed are the timer steps it took after
/// their expiry (rt-app's negative slack, what `vassal twin` counts as missed), read from
/// the trace's step marks, plus the iteration unfinished at the horizon past its expiry.
#[test]
fn missed_jobs_are_the_negative_slacks_of_rt_app() {
    let mut with_jobs = 0;
    for f in &examples() {
        let sc = load_rtapp(f, &Options::default()).unwrap_or_else(|e| panic!("{e}"));
        let mut sim = Sim::new(sc).unwrap();
        sim.record_trace();
        let (r, trace) = sim.run_traced().unwrap();
        for (i, t) in r.tasks.iter().enumerate() {
            let late_steps = trace.steps.iter().filter(|m| m.task == i && m.expiry.is_some_and(|e| m.at > e)).count() as u64;
            let unfinished_late = trace.jobs.iter().filter(|j| j.task == i && j.end.is_none() && j.deadline <= r.elapsed_ns).count() as u64;
            assert_eq!(t.jobs_missed, late_steps + unfinished_late, "{}: {}", f.display(), t.name);
            with_jobs += usize::from(t.jobs_met + t.jobs_missed > 0);
        }
    }
    assert!(with_jobs >= 3, "the examples have periodic threads");
}

/// A file's errors start with "FILE:LINE:COL:" when they have a place in it (a syntax
/// error, a refused key or value) and with "FILE: " when they do not (a horizon the file
/// does not give).
#[test]
fn a_files_errors_name_the_file_and_the_place_if_there_is_one() {
    let dir = std::env::temp_dir().join(format!("vassal-rtapp-errors-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cases = [
        ("syntax.json", "{\"tasks\": {\"a\": {\"run\": 1000, bogus", "syntax.json:1:31: unexpected `b`"),
        ("empty.json", "{\"tasks\": {}}", "empty.json:1:2: tasks: no threads"),
        ("forever.json", "{\"tasks\": {\"a\": {\"run\": 1000}}}", "forever.json: global.duration: is -1 or absent"),
    ];
    for (name, text, start) in cases {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        let err = load_rtapp(&path, &Options::default()).unwrap_err();
        let expected = format!("{}", dir.join(start).display());
        assert!(err.starts_with(&expected), "{name}: {err}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
