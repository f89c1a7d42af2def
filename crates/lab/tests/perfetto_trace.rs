//! The Perfetto protobuf trace (`vassal sim --trace out.pftrace`), decoded with
//! Perfetto's published schema: process and thread descriptors name every task; per
//! CPU, the sched_switch events chain (each one's prev is the last one's next) and in
//! time order; the slices they make (what Perfetto's `sched_slice` table holds) are the
//! simulator's, CPU by CPU; every thread that blocked is woken (a sched_waking) before
//! it runs again, and every wake-up is one; an exit is prev_state X; the same run gives
//! the same bytes.

use std::collections::BTreeMap;
use std::path::PathBuf;

use vassal_lab::perfetto::{task_tid, to_perfetto, PID};
use vassal_perfetto::decode;
use vassal_sim::engine::MarkKind;
use vassal_sim::model::Scenario;
use vassal_sim::{Sim, Trace};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn scenarios() -> Vec<Scenario> {
    let mut out = Vec::new();
    for f in ["hierarchy.toml", "rr-hogs.toml", "interactive.toml", "interrupts.toml", "fps-rm.toml", "bvt-two-level.toml"] {
        let mut sc = vassal_sim::scenario::load_scenario(&root().join("docs/examples").join(f)).unwrap_or_else(|e| panic!("{f}: {e}"));
        sc.until = sc.until.min(2_000_000_000);
        out.push(sc);
    }
    for f in ["fifo.json", "periodic.json", "phases.json"] {
        let opts = vassal_sim::rtapp::Options { until: Some(2_000_000_000), ..Default::default() };
        out.push(vassal_sim::rtapp::load_rtapp(&root().join("docs/examples/rt-app").join(f), &opts).unwrap());
    }
    // synchronisation: suspend/resume, a mutex and a condition variable, on two CPUs
    let json = r#"{ "global": { "duration": 1, "pi_enabled": true }, "tasks": {
        "a": { "run": 2000, "resume": "b", "suspend": "a" },
        "b": { "lock": "m", "run": 3000, "unlock": "m", "resume": "a", "suspend": "b" },
        "c": { "loop": 20, "lock": "m", "run": 1000, "unlock": "m", "sleep": 4000 } } }"#;
    out.push(vassal_sim::rtapp::parse_rtapp(json, "sync", &vassal_sim::rtapp::Options { cpus: Some(2), ..Default::default() }).unwrap());
    out
}

fn traced(sc: &Scenario) -> Trace {
    let mut sim = Sim::with_registry(sc.clone(), &vassal_lab::workloads::registry()).unwrap();
    sim.record_trace();
    sim.run_traced().unwrap().1
}

#[test]
fn traces_decode_with_the_schema_and_hold_the_run() {
    for sc in scenarios() {
        let name = sc.name.clone();
        let trace = traced(&sc);
        let bytes = to_perfetto(&sc, &trace).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(to_perfetto(&sc, &traced(&sc)).unwrap(), bytes, "{name}: the same run gives the same bytes");
        let t = decode(&bytes).unwrap();

        // Descriptors: one process, a thread per task.
        let tree = t.packet.iter().find(|p| p.has_process_tree()).expect("a process tree").process_tree();
        assert_eq!(tree.processes.len(), 1);
        assert_eq!(tree.processes[0].pid(), PID);
        let names: BTreeMap<i32, &str> = tree.threads.iter().map(|th| (th.tid(), th.name())).collect();
        for (i, task) in sc.tasks.iter().enumerate() {
            assert_eq!(names.get(&task_tid(i)), Some(&task.name.as_str()), "{name}");
        }
        let described: Vec<(i32, &str)> = t
            .packet
            .iter()
            .filter(|p| p.has_track_descriptor() && p.track_descriptor().thread.is_some())
            .map(|p| (p.track_descriptor().thread.tid(), p.track_descriptor().thread.thread_name()))
            .collect();
        assert_eq!(described.len(), sc.tasks.len(), "{name}");

        // Per CPU: switches chain and are in time order; their slices are the simulator's.
        let mut slices: BTreeMap<(u32, i32), u64> = BTreeMap::new();
        let mut events: Vec<(u32, u64, bool, i32, i32, i64)> = Vec::new(); // cpu, ts, switch?, tid/prev, next, state
        for p in t.packet.iter().filter(|p| p.has_ftrace_events()) {
            let b = p.ftrace_events();
            let mut last_ts = 0;
            for e in &b.event {
                assert!(e.timestamp() >= last_ts, "{name}: cpu{} out of order", b.cpu());
                last_ts = e.timestamp();
                if e.has_sched_switch() {
                    let s = e.sched_switch();
                    assert_eq!(e.pid() as i32, s.prev_pid(), "{name}: recorded by the thread switching out");
                    events.push((b.cpu(), e.timestamp(), true, s.prev_pid(), s.next_pid(), s.prev_state()));
                } else {
                    assert!(e.has_sched_waking(), "{name}: only switches and wake-ups");
                    let w = e.sched_waking();
                    assert_eq!(w.target_cpu() as u32, b.cpu(), "{name}");
                    events.push((b.cpu(), e.timestamp(), false, w.pid(), 0, 0));
                }
            }
        }
        events.sort_by_key(|e| (e.0, e.1, e.2));
        let mut on: BTreeMap<u32, (i32, u64)> = BTreeMap::new();
        for &(cpu, ts, switch, a, next, _) in &events {
            if !switch {
                continue;
            }
            let (cur, since) = on.get(&cpu).copied().unwrap_or((0, 0));
            assert_eq!(a, cur, "{name}: cpu{cpu} at {ts}: prev {a}, but {cur} holds it");
            if cur != 0 {
                *slices.entry((cpu, cur)).or_default() += ts - since;
            }
            on.insert(cpu, (next, ts));
        }
        assert!(on.values().all(|&(tid, _)| tid == 0), "{name}: every CPU ends idle (at the horizon)");
        let mut want: BTreeMap<(u32, i32), u64> = BTreeMap::new();
        for s in &trace.slices {
            *want.entry((s.cpu as u32, task_tid(s.task))).or_default() += s.end - s.start;
        }
        assert_eq!(slices, want, "{name}: sched_slice holds the simulator's slices");
        assert!(!want.is_empty(), "{name}: something ran");

        // Thread states: a thread switched out blocked (S) is woken before it runs again.
        let mut by_tid: BTreeMap<i32, Vec<(u64, bool, i64)>> = BTreeMap::new(); // ts, switch-in?, state
        for &(_, ts, switch, a, next, state) in &events {
            if switch {
                if a != 0 {
                    by_tid.entry(a).or_default().push((ts, false, state));
                }
                if next != 0 {
                    by_tid.entry(next).or_default().push((ts, true, -1));
                }
            } else {
                by_tid.entry(a).or_default().push((ts, true, -2)); // a wake-up
            }
        }
        for (tid, mut evs) in by_tid {
            evs.sort_by_key(|e| {
                (
                    e.0,
                    if e.2 == -2 {
                        0
                    } else if e.1 {
                        2
                    } else {
                        1
                    },
                )
            });
            let mut asleep = false;
            for (ts, inn, st) in evs {
                match (inn, st) {
                    (true, -2) => asleep = false,
                    (true, _) => assert!(!asleep, "{name}: thread {tid} runs at {ts} after blocking, without a wake-up"),
                    (false, s) => asleep = s == 1 || s == 16,
                }
            }
        }
        let wakes = trace.marks.iter().filter(|m| m.kind == MarkKind::Wake).count();
        assert_eq!(events.iter().filter(|e| !e.2).count(), wakes, "{name}: a sched_waking per wake-up");
        let exits = trace
            .marks
            .iter()
            .filter(|m| m.kind == MarkKind::Exit && trace.slices.iter().any(|s| s.task == m.task && s.end == m.at))
            .count();
        assert_eq!(events.iter().filter(|e| e.2 && e.5 == 16).count(), exits, "{name}: an exit is prev_state X");
    }
}
