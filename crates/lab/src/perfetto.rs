//! A run's [`Trace`] as a Perfetto protobuf trace (vassal-perfetto): the simulated
//! machine as a kernel trace would show it — per-CPU ftrace `sched_switch` events for
//! every slice (idle between them), `sched_waking` for every wake-up, and the tasks as
//! threads of one process named after the scenario — so Perfetto's CPU and thread-state
//! tracks and its `sched_slice` and `thread_state` tables work on a simulated run as on
//! a real one. See docs/trace.md, "Perfetto".
//!
//! Mapping: the process is pid [`PID`]; task `i` is thread `1000 + i` (as in the Chrome
//! trace). A slice ends in state S (the task blocked at that instant), X (it exited), or
//! R (preempted). A wake-up is recorded on the CPU the task next runs on (else the one it
//! last ran on), by whichever task holds that CPU then (0, the idle task, if none).
//! Priorities as Linux reports them: 99 − priority under `fps`, −1 under `edf`, 120 + the
//! nice value whose CFS weight the task has (120 without one).

use std::collections::BTreeMap;

use vassal_perfetto::{encode, switches_from_runs, Process, Run, SchedTrace, State, Thread, Waking};
use vassal_sim::engine::{MarkKind, Trace};
use vassal_sim::model::Scenario;
use vassal_sim::rtapp::build::PRIO_TO_WEIGHT;

/// The process id of the simulated tasks.
pub const PID: i32 = 100;

/// Task `index`'s thread id.
pub fn task_tid(index: usize) -> i32 {
    1000 + index as i32
}

fn prio(sc: &Scenario, i: usize) -> i32 {
    let t = &sc.tasks[i];
    let kind = t.scheduler.as_ref().and_then(|n| sc.schedulers.iter().find(|s| s.name == *n)).map(|s| s.policy.kind.as_str());
    match kind {
        Some("fps") => 99 - t.params.get("priority").copied().unwrap_or(0).clamp(0, 99) as i32,
        Some("edf") => -1,
        _ => match t.params.get("weight") {
            Some(&w) => {
                let nice = PRIO_TO_WEIGHT.iter().enumerate().min_by_key(|(_, &x)| (x - w).abs()).map_or(20, |(k, _)| k) as i32 - 20;
                120 + nice
            }
            None => 120,
        },
    }
}

/// The Perfetto trace of a run of `sc` (its trace from [`vassal_sim::Sim::run_traced`]
/// after [`vassal_sim::Sim::record_trace`]).
pub fn to_perfetto(sc: &Scenario, trace: &Trace) -> Result<Vec<u8>, String> {
    // What each task did at each instant it blocked or exited.
    let mut stops: BTreeMap<(usize, u64), State> = BTreeMap::new();
    for m in &trace.marks {
        let st = match m.kind {
            MarkKind::Exit => State::Dead,
            MarkKind::Block => State::Sleeping,
            _ => continue,
        };
        let e = stops.entry((m.task, m.at)).or_insert(st);
        if st == State::Dead {
            *e = st;
        }
    }
    let mut runs: Vec<Run> = Vec::with_capacity(trace.slices.len());
    for s in &trace.slices {
        let end_state = stops.get(&(s.task, s.end)).copied().unwrap_or(State::Runnable);
        runs.push(Run { cpu: s.cpu as u32, tid: task_tid(s.task), start: s.start, end: s.end, end_state });
    }
    // Per task, its runs in time order (for the CPU a wake-up is headed to).
    let mut by_task: Vec<Vec<&Run>> = vec![Vec::new(); sc.tasks.len()];
    for r in &runs {
        if let Some(v) = by_task.get_mut((r.tid - 1000) as usize) {
            v.push(r);
        }
    }
    for v in &mut by_task {
        v.sort_by_key(|r| r.start);
    }
    let mut per_cpu: Vec<Vec<&Run>> = vec![Vec::new(); sc.machine.cpus as usize];
    for r in &runs {
        per_cpu[r.cpu as usize].push(r);
    }
    for v in &mut per_cpu {
        v.sort_by_key(|r| r.start);
    }
    let mut wakings = Vec::new();
    for m in trace.marks.iter().filter(|m| m.kind == MarkKind::Wake) {
        let Some(mine) = by_task.get(m.task) else { continue };
        let k = mine.partition_point(|r| r.start < m.at);
        let next = mine.get(k).or_else(|| k.checked_sub(1).and_then(|j| mine.get(j)));
        let cpu = next.map_or(0, |r| r.cpu);
        // the holder of that CPU just before any switch at this instant
        let on = &per_cpu[cpu as usize];
        let j = on.partition_point(|r| r.start < m.at);
        let holder = j.checked_sub(1).map(|j| on[j]).filter(|r| m.at <= r.end).map_or(0, |r| r.tid);
        wakings.push(Waking { ts: m.at, cpu, waker: holder, tid: task_tid(m.task), target_cpu: cpu });
    }
    let t = SchedTrace {
        cpus: sc.machine.cpus as u32,
        processes: vec![Process { pid: PID, name: sc.name.clone() }],
        threads: sc
            .tasks
            .iter()
            .enumerate()
            .map(|(i, t)| Thread { tid: task_tid(i), pid: PID, name: t.name.clone(), prio: prio(sc, i) })
            .collect(),
        switches: switches_from_runs(&runs),
        wakings,
    };
    encode(&t)
}
