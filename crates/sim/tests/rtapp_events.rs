//! rt-app's grammar and events beyond run/sleep/timer (docs/rtapp.md): json-c's and
//! workgen's freedoms, suspend/resume with lost wake-ups, mutexes with and without
//! priority inheritance, condition variables, barriers, per-phase policy and affinity,
//! SCHED_DEADLINE, shared timers, mem/iorun, and refusals that name line and column.
//! Every expected number is worked out in the test's comment from rt-app's rules.

use vassal_core::MS;
use vassal_sim::model::{Behaviour, Phase, SyncOp};
use vassal_sim::rtapp::{parse_rtapp, Options};
use vassal_sim::{Report, Sim, Trace};

fn sim(json: &str, opts: Options) -> (Report, Trace) {
    let sc = parse_rtapp(json, "t", &opts).unwrap_or_else(|e| panic!("{e}"));
    let mut s = Sim::new(sc).unwrap();
    s.set_checks(true);
    s.record_trace();
    s.run_traced().unwrap()
}

fn run(json: &str) -> Report {
    sim(json, Options::default()).0
}

fn until(ms: u64) -> Options {
    Options { until: Some(ms * MS), ..Options::default() }
}

fn cpu_ms(r: &Report, task: &str) -> f64 {
    r.task(task).unwrap_or_else(|| panic!("no task {task}")).cpu_ns as f64 / 1e6
}

/// The task's slices on the CPUs, as (start, end) in ms.
fn slices(r: &Report, t: &Trace, task: &str) -> Vec<(f64, f64)> {
    let i = r.tasks.iter().position(|x| x.name == task).unwrap();
    let mut v: Vec<(f64, f64)> = t.slices.iter().filter(|s| s.task == i).map(|s| (s.start as f64 / 1e6, s.end as f64 / 1e6)).collect();
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    // a task picked again at once continues its slice
    let mut out: Vec<(f64, f64)> = Vec::new();
    for s in v {
        match out.last_mut() {
            Some(l) if l.1 == s.0 => l.1 = s.1,
            _ => out.push(s),
        }
    }
    out
}

/// Comments, trailing commas, repeated keys in file order, a bare "suspend" (workgen
/// fills in the thread's name) and numbered keys all read as rt-app (with workgen) reads
/// them.
#[test]
fn json_c_and_workgen_grammar() {
    let sc = parse_rtapp(
        r#"{
        /* a thread that runs, sleeps, runs again */
        "global": { "duration": 1, },   // trailing comma
        "tasks": {
            "a": { "run": 1000, "sleep": 2000, "run": 3000, "run7": 4000, "suspend", },
            "b": { "resume": "a", "timer": { "ref": "x", "period": 10000 } },
        },
    }"#,
        "t",
        &Options::default(),
    )
    .unwrap();
    let Behaviour::Script { phases, .. } = &sc.tasks[0].behaviour else { panic!() };
    let run = |us: u64| Phase::Run(vassal_sim::model::Dist::Const(us * 1000));
    assert_eq!(
        phases,
        &[
            run(1000),
            Phase::Sleep(vassal_sim::model::Dist::Const(2_000_000)),
            run(3000),
            run(4000),
            Phase::Sync(SyncOp::Suspend("a".into()))
        ]
    );
}

/// A resume that finds no one suspended is lost (rt-app's pthread_cond_broadcast). On
/// two CPUs, `a` resumes `b` at 0 while `b` still runs its 5 ms, then every 100 ms; `b`
/// suspends at 5 ms and is woken only at 100 ms, 200 ms, …: 10 × 5 ms in 1 s (a
/// remembered resume would give it 20 × 5 ms).
#[test]
fn a_resume_nobody_waits_for_is_lost() {
    let r = sim(
        r#"{ "global": { "duration": 1 }, "tasks": {
            "a": { "cpus": [0], "resume": "b", "sleep": 100000 },
            "b": { "cpus": [1], "run": 5000, "suspend": "b" } } }"#,
        Options::default(),
    )
    .0;
    assert_eq!(cpu_ms(&r, "b"), 50.0);
}

/// tutorial/example4: two threads that run 10 ms, wake each other and suspend: one CPU
/// is busy at a time, each thread gets half of it.
#[test]
fn suspend_resume_ping_pong() {
    let (r, _) = sim(
        r#"{ "global": { "duration": 1 }, "tasks": {
            "thread0": { "loop": -1, "run": 10000, "resume": "thread1", "suspend": "thread0" },
            "thread1": { "loop": -1, "run": 10000, "resume": "thread0", "suspend": "thread1" } } }"#,
        Options { cpus: Some(2), ..Options::default() },
    );
    let (a, b) = (cpu_ms(&r, "thread0"), cpu_ms(&r, "thread1"));
    // both start together (10 ms each, in parallel), then alternate: 10 + 49 × 10 ms
    assert!((a + b - 1000.0).abs() <= 10.0, "{a} + {b}");
    assert!((a - b).abs() <= 10.0, "{a} vs {b}");
}

/// Priority inversion and its cure (one CPU). L (SCHED_OTHER) locks m and runs 10 ms; H
/// (FIFO 50) arrives at 1 ms and blocks on m; M (FIFO 10) arrives at 2 ms and runs 50 ms.
/// Without inheritance M preempts L and H waits behind M: by 30 ms H has run nothing, M
/// 28 ms. With `pi_enabled` L runs with H's priority from 1 ms, unlocks at 10 ms, H runs
/// 10–11 ms, M 11–30 ms.
#[test]
fn priority_inheritance_ends_priority_inversion() {
    let w = |pi: bool| {
        format!(
            r#"{{ "global": {{ "pi_enabled": {pi} }}, "tasks": {{
                "L": {{ "loop": 1, "lock": "m", "run": 10000, "unlock": "m" }},
                "H": {{ "policy": "SCHED_FIFO", "priority": 50, "delay": 1000, "loop": 1, "lock": "m", "run": 1000, "unlock": "m" }},
                "M": {{ "policy": "SCHED_FIFO", "priority": 10, "delay": 2000, "loop": 1, "run": 50000 }} }} }}"#
        )
    };
    let (r, _) = sim(&w(false), until(30));
    assert_eq!((cpu_ms(&r, "H"), cpu_ms(&r, "M"), cpu_ms(&r, "L")), (0.0, 28.0, 2.0));
    let (r, t) = sim(&w(true), until(30));
    assert_eq!((cpu_ms(&r, "H"), cpu_ms(&r, "M"), cpu_ms(&r, "L")), (1.0, 19.0, 10.0));
    assert_eq!(slices(&r, &t, "H").last(), Some(&(10.0, 11.0)));
    assert_eq!(slices(&r, &t, "L"), [(0.0, 10.0)], "L runs on, boosted, while H waits");
}

/// Producer and consumer with a condition variable (two CPUs). The consumer waits on q
/// with m; the producer locks m, signals, unlocks every 10 ms. A consumer that runs 1 ms
/// per wake-up is woken 100 times in 1 s; one that runs 15 ms misses the signals sent
/// while it runs (a signal nobody waits for is lost) and is woken every 20 ms: 50 × 15 ms.
#[test]
fn condition_variables_wake_waiters_and_lose_unheard_signals() {
    let w = |work: u64| {
        format!(
            r#"{{ "global": {{ "duration": 1 }}, "tasks": {{
                "consumer": {{ "cpus": [0], "lock": "m", "wait": {{ "ref": "q", "mutex": "m" }}, "unlock": "m", "run": {work} }},
                "producer": {{ "cpus": [1], "lock": "m", "signal": "q", "unlock": "m", "sleep": 10000 }} }} }}"#
        )
    };
    assert_eq!(cpu_ms(&run(&w(1000)), "consumer"), 100.0);
    assert_eq!(cpu_ms(&run(&w(15000)), "consumer"), 750.0);
}

/// tutorial/example7's first barrier: task1 reaches FIRST at 2 ms and waits; task0 gets
/// there at 3 ms (1 ms, then a 2 ms sleep) and both go on at once.
#[test]
fn a_barrier_opens_when_the_last_user_arrives() {
    let (r, t) = sim(
        r#"{ "tasks": {
            "task0": { "loop": 1, "runtime1": 1000, "sleep1": 2000, "barrier1": "FIRST", "runtime2": 2000 },
            "task1": { "loop": 1, "runtime1": 2000, "barrier1": "FIRST", "runtime2": 1000 } } }"#,
        Options { cpus: Some(2), until: Some(10 * MS), ..Options::default() },
    );
    assert_eq!(slices(&r, &t, "task1"), [(0.0, 2.0), (3.0, 4.0)]);
    assert_eq!(slices(&r, &t, "task0"), [(0.0, 1.0), (3.0, 5.0)]);
}

/// A phase may change the thread's policy (one CPU, a SCHED_FIFO 10 hog from 5 ms): `t`
/// runs its first phase at SCHED_FIFO 20, 0–10 ms, ahead of the hog; its second phase
/// drops it to SCHED_OTHER, where the hog starves it.
#[test]
fn a_phase_changes_the_policy() {
    let (r, t) = sim(
        r#"{ "global": { "duration": 1 }, "tasks": {
            "t": { "loop": 1, "phases": {
                "p1": { "policy": "SCHED_FIFO", "priority": 20, "run": 10000 },
                "p2": { "policy": "SCHED_OTHER", "run": 10000 } } },
            "hog": { "policy": "SCHED_FIFO", "priority": 10, "delay": 5000, "run": 100000 } } }"#,
        Options::default(),
    );
    assert_eq!(slices(&r, &t, "t"), [(0.0, 10.0)]);
    assert_eq!(cpu_ms(&r, "hog"), 990.0);
    assert_eq!(r.task("t").unwrap().scheduler, "default");
}

/// tutorial/example8: phases pinned to CPU 0, then 1, then the thread's own CPU 2.
#[test]
fn a_phase_changes_the_affinity() {
    let (r, _) = sim(
        r#"{ "tasks": { "thread0": { "cpus": [2], "loop": 1, "phases": {
            "phase1": { "cpus": [0], "run": 1500 }, "phase2": { "cpus": [1], "run": 1500 }, "phase3": { "run": 1500 } } } } }"#,
        until(10),
    );
    let busy: Vec<u64> = r.cpus.iter().map(|c| c.busy_ns).collect();
    assert_eq!(busy, [1_500_000, 1_500_000, 1_500_000]);
}

/// SCHED_DEADLINE threads run under `edf` above the SCHED_FIFO scheduler: a FIFO hog at
/// priority 99 takes only what they leave (one CPU: 1 − 0.2 − 0.15).
#[test]
fn sched_deadline_runs_above_sched_fifo() {
    let r = run(r#"{ "global": { "duration": 1 }, "tasks": {
            "dl1": { "policy": "SCHED_DEADLINE", "dl-runtime": 2000, "dl-period": 10000, "run": 2000, "timer": { "ref": "unique", "period": 10000 } },
            "dl2": { "policy": "SCHED_DEADLINE", "dl-runtime": 3000, "dl-period": 20000, "dl-deadline": 15000, "run": 3000, "timer": { "ref": "unique", "period": 20000 } },
            "hog": { "policy": "SCHED_FIFO", "priority": 99, "run": 100000 } } }"#);
    let names: Vec<(&str, &str)> = r.schedulers.iter().map(|s| (s.name.as_str(), s.kind.as_str())).collect();
    assert_eq!(names, [("dl", "edf"), ("rt", "fps"), ("default", "bvt")]);
    assert_eq!((cpu_ms(&r, "dl1"), cpu_ms(&r, "dl2"), cpu_ms(&r, "hog")), (200.0, 150.0, 650.0));
    assert_eq!(r.task("dl1").unwrap().latency.max_ns, 0, "a deadline thread waits for nobody here");
    // Linux's admission test: at most 95% of each CPU for SCHED_DEADLINE
    let e = parse_rtapp(
        r#"{ "global": { "duration": 1 }, "tasks": {
            "d": { "instance": 4, "policy": "SCHED_DEADLINE", "dl-runtime": 5000, "dl-period": 10000, "run": 100 } } }"#,
        "t",
        &Options { cpus: Some(1), ..Options::default() },
    )
    .unwrap_err();
    assert!(e.starts_with("2:13: tasks.d: the SCHED_DEADLINE threads need 200.0% of the machine"), "{e}");
}

/// A timer not named `unique…` is one timer for every thread that names it: each use
/// adds its period. Two threads each waiting for "t" (10 ms) on two CPUs pace each other
/// to one expiry in two: each wakes every 20 ms (unique timers: every 10 ms).
#[test]
fn timers_are_shared_by_name() {
    let w = |name: &str| {
        format!(
            r#"{{ "global": {{ "duration": 1 }}, "tasks": {{
                "a": {{ "cpus": [0], "run": 1000, "timer": {{ "ref": "{name}", "period": 10000 }} }},
                "b": {{ "cpus": [1], "run": 1000, "timer": {{ "ref": "{name}", "period": 10000 }} }} }} }}"#
        )
    };
    let r = run(&w("t"));
    // the timer starts at 0: a runs at 0, waits for 10 ms, then 30, 50, … 990 (51 runs);
    // b runs at 0, waits for 20 ms, then 40, … 980 (50 runs)
    assert_eq!((cpu_ms(&r, "a"), cpu_ms(&r, "b")), (51.0, 50.0));
    let r = run(&w("unique"));
    assert_eq!((cpu_ms(&r, "a"), cpu_ms(&r, "b")), (100.0, 100.0));
}

/// `mem` is CPU time at the memory rate (4 GB/s by default: 4 MB is 1 ms); `iorun` to a
/// device is a blocked wait at the I/O rate (100 MB/s: 100 kB is 1 ms), and to rt-app's
/// default /dev/null no time at all.
#[test]
fn mem_is_cpu_time_and_iorun_is_io_time() {
    let (r, t) = sim(
        r#"{ "global": { "io_device": "/var/tmp/x" }, "tasks": {
            "m": { "loop": 1, "mem": 4000000 },
            "io": { "loop": 1, "iorun": 100000, "run": 1000 } } }"#,
        Options { cpus: Some(2), until: Some(10 * MS), ..Options::default() },
    );
    assert_eq!(cpu_ms(&r, "m"), 1.0);
    assert_eq!(slices(&r, &t, "io"), [(1.0, 2.0)]);
    let sc = parse_rtapp(r#"{ "tasks": { "io": { "loop": 1, "iorun": 100000, "run": 1000 } } }"#, "t", &until(10)).unwrap();
    let Behaviour::Script { phases, .. } = &sc.tasks[0].behaviour else { panic!() };
    assert_eq!(phases.len(), 1, "/dev/null takes the data at once");
}

/// Errors name the line and column, the key's path, and what was expected.
#[test]
fn refusals_name_line_column_and_what_was_expected() {
    let cases: &[(&str, &str)] = &[
        (
            "{ \"global\": { \"duration\": 1 },\n  \"tasks\": { \"a\": { \"run\": 10,\n    \"bogus\": 1 } } }",
            "3:5: tasks.a.bogus: unknown key `bogus`; expected one of `instance`, `loop`, `delay`, `cpus`, `phases`, `policy`, `priority`",
        ),
        ("{ \"global\": { \"duration\": 1, \"colour\": 3 }, \"tasks\": { \"a\": { \"run\": 10 } } }", "1:30: global.colour: unknown key `colour`; expected one of `duration`"),
        ("{ \"tasks\": { \"a\": { \"run\": 10, \"fork\": \"b\" } } }", "1:32: tasks.a.fork: `fork` cannot be simulated"),
        ("{ \"tasks\": { \"a\": { \"run\": 10, \"util_min\": 100 } } }", "1:32: tasks.a.util_min: `util_min` cannot be simulated: utilisation clamping"),
        ("{ \"tasks\": { \"a\": { \"exec\": 10, \"period\": 100 } } }", "1:21: tasks.a.exec: `exec` cannot be simulated: it belongs to rt-app's pre-1.0 grammar"),
        ("{ \"tasks\": { \"a\": { \"run\": 10, \"lock_order\": [0] } } }", "1:32: tasks.a.lock_order: `lock_order` cannot be simulated"),
        ("{ \"tasks\": { \"a\": { \"run\", \"sleep\": 1 } } }", "1:21: tasks.a.run: `run` has no value (only `suspend` may be written bare"),
        ("{ \"tasks\": { \"a\": { \"run\": 1, \"loop\": 2, \"loop\": 3 } } }", "1:42: tasks.a.loop: given twice (first at line 1)"),
        ("{ \"tasks\": { \"a\": { \"run\": \"x\" } } }", "1:28: tasks.a.run: expected an integer, found a string"),
        ("{ \"tasks\": { \"a\": { \"run\": 1 } }\n  \"x\": 1 }", "2:3: unexpected `\"`: expected `,` or `}`"),
        ("{ \"tasks\": { \"a\": { \"policy\": \"SCHED_FIFO\", \"priority\": 0, \"run\": 1 } } }", "1:45: tasks.a.priority: SCHED_FIFO priority must be 1..99, found 0"),
        (
            "{ \"tasks\": { \"a\": { \"policy\": \"SCHED_DEADLINE\", \"dl-runtime\": 20000, \"dl-period\": 10000, \"run\": 1 } } }",
            "1:21: tasks.a: SCHED_DEADLINE with dl-runtime 20000 µs, dl-deadline 10000 µs, dl-period 10000 µs: Linux requires 0 < runtime <= deadline <= period",
        ),
        ("{ \"tasks\": { \"a\": { \"dl-period\": 10000, \"run\": 1 } } }", "1:34: tasks.a: dl-runtime, dl-period and dl-deadline apply only to SCHED_DEADLINE"),
        ("{ \"tasks\": { \"a\": { \"phases\": { \"p\": { \"loop\": 2 } } } } }", "1:33: tasks.a.phases.p: the phase has no events"),
        ("{ \"tasks\": { \"a\": { \"run\": 1, \"phases\": { \"p\": { \"run\": 2 } } } } }", "1:21: tasks.a.run: an event beside `phases`"),
        ("{ \"tasks\": { \"a\": { \"yield\": \"\" } } }", "1:14: tasks.a: the thread loops forever through events that take no time"),
        (
            "{ \"tasks\": { \"a\": { \"timer\": { \"ref\": \"x\", \"period\": 10, \"slack\": 1 } } } }",
            "1:58: tasks.a.timer.slack: unknown key `slack`; expected `ref`, `period`, `mode`",
        ),
        ("{ \"tasks\": { \"a\": { \"policy\": \"SCHED_FIFO\", \"run\": 10 }, \"b\": { \"policy\": \"SCHED_RR\", \"run\": 10 } } }", "1:65: tasks.b: mixing SCHED_FIFO and SCHED_RR"),
        ("{ \"tasks\": { \"a\": { \"run\": 10 } } }", "global.duration: is -1 or absent"),
        ("{ \"tasks\": { \"a\": { \"run\": 10 } }, \"extra\": {} }", "1:36: extra: unknown key `extra`; expected `global`, `tasks`, `resources`"),
    ];
    let mut wrong = Vec::new();
    for (json, want) in cases {
        let opts = if want.contains("global.duration") { Options::default() } else { Options { until: Some(MS), ..Options::default() } };
        match parse_rtapp(json, "t", &opts) {
            Err(e) if e.starts_with(want) || e.contains(want) => {}
            Err(e) => wrong.push(format!("got {e:?}, wanted {want:?}")),
            Ok(_) => wrong.push(format!("accepted, wanted {want:?}")),
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}
