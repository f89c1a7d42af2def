//! Perfetto traces of CPU scheduling, the way scheduler developers read a kernel trace
//! (docs/trace.md, "Perfetto"). A [`SchedTrace`] — processes, threads, per-CPU context
//! switches and wake-ups — is written as Perfetto's protobuf `Trace` (its published
//! .proto schema, compiled by the `perfetto_protos` crate; no hand-rolled encoding):
//!
//! - one `ProcessTree` packet and a `TrackDescriptor` per process and per thread (names,
//!   pid/tid), so Perfetto's process and thread tracks carry the right names;
//! - per CPU, `FtraceEventBundle`s of ftrace `sched_switch` and `sched_waking` events in
//!   time order, as the kernel's tracepoints record them — from which Perfetto's
//!   trace processor builds its `sched_slice` and `thread_state` tables and the UI its
//!   CPU and thread-state tracks.
//!
//! It knows nothing of vassal: the simulator's trace (vassal-lab) and the agent's are
//! mapped onto it. [`switches_from_runs`] turns "this thread held that CPU from s to e,
//! then was in state X" into the switch events.
//!
//! Invariants (checked by [`encode`]): every thread id an event names is declared (0 is
//! the idle task, `swapper/N`); on each CPU, each switch's `prev` is the previous
//! switch's `next` (the CPU starts idle); timestamps are integer ns.

use std::collections::BTreeMap;

pub use perfetto_protos;
use perfetto_protos::ftrace_event::FtraceEvent;
use perfetto_protos::ftrace_event_bundle::FtraceEventBundle;
use perfetto_protos::process_descriptor::ProcessDescriptor;
use perfetto_protos::process_tree::{process_tree, ProcessTree};
use perfetto_protos::sched::{SchedSwitchFtraceEvent, SchedWakingFtraceEvent};
use perfetto_protos::thread_descriptor::ThreadDescriptor;
use perfetto_protos::trace::Trace;
use perfetto_protos::trace_packet::TracePacket;
use perfetto_protos::track_descriptor::TrackDescriptor;
use protobuf::Message;

/// A process (a thread group).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Process {
    pub pid: i32,
    pub name: String,
}

/// A thread, in process `pid`, with its kernel priority as sched_switch reports it
/// (0..99 real-time, 100..139 normal: 120 + nice; -1 deadline).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Thread {
    pub tid: i32,
    pub pid: i32,
    pub name: String,
    pub prio: i32,
}

/// What a thread switched out of a CPU does next (sched_switch's `prev_state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// Preempted, still runnable (R).
    Runnable,
    /// Blocked of its own accord (S: a sleep, a wait).
    Sleeping,
    /// Blocked involuntarily (D: a page fault, I/O).
    Uninterruptible,
    /// It exited (X).
    Dead,
}

impl State {
    /// The kernel's bits for `prev_state` (TASK_RUNNING, TASK_INTERRUPTIBLE,
    /// TASK_UNINTERRUPTIBLE, EXIT_DEAD).
    pub fn kernel_bits(self) -> i64 {
        match self {
            State::Runnable => 0,
            State::Sleeping => 1,
            State::Uninterruptible => 2,
            State::Dead => 16,
        }
    }
}

/// A context switch on `cpu` at `ts` from `prev` (0: idle) to `next` (0: idle).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Switch {
    pub ts: u64,
    pub cpu: u32,
    pub prev: i32,
    pub prev_state: State,
    pub next: i32,
}

/// Thread `tid` woken at `ts`, recorded on `cpu` (where the waker runs, `waker`, 0 for
/// an interrupt or timer on an idle CPU), to run on `target_cpu`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Waking {
    pub ts: u64,
    pub cpu: u32,
    pub waker: i32,
    pub tid: i32,
    pub target_cpu: u32,
}

/// Everything a trace holds.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SchedTrace {
    pub cpus: u32,
    pub processes: Vec<Process>,
    pub threads: Vec<Thread>,
    pub switches: Vec<Switch>,
    pub wakings: Vec<Waking>,
}

/// A span during which `tid` held `cpu`, and the state it left the CPU in at `end`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Run {
    pub cpu: u32,
    pub tid: i32,
    pub start: u64,
    pub end: u64,
    pub end_state: State,
}

/// The switches of `runs` (no two on one CPU overlapping): at each run's start one from
/// whoever held the CPU (the run ending right then, else idle), and at its end one to
/// idle unless another run starts right then. Ordered by CPU, then time.
pub fn switches_from_runs(runs: &[Run]) -> Vec<Switch> {
    let mut by_cpu: BTreeMap<u32, Vec<&Run>> = BTreeMap::new();
    for r in runs.iter().filter(|r| r.end > r.start) {
        by_cpu.entry(r.cpu).or_default().push(r);
    }
    let mut out = Vec::new();
    for (cpu, mut rs) in by_cpu {
        rs.sort_by_key(|r| (r.start, r.end));
        let mut last: Option<&Run> = None;
        for r in rs {
            match last {
                Some(l) if l.end == r.start => out.push(Switch { ts: r.start, cpu, prev: l.tid, prev_state: l.end_state, next: r.tid }),
                Some(l) => {
                    out.push(Switch { ts: l.end, cpu, prev: l.tid, prev_state: l.end_state, next: 0 });
                    out.push(Switch { ts: r.start, cpu, prev: 0, prev_state: State::Runnable, next: r.tid });
                }
                None => out.push(Switch { ts: r.start, cpu, prev: 0, prev_state: State::Runnable, next: r.tid }),
            }
            last = Some(r);
        }
        if let Some(l) = last {
            out.push(Switch { ts: l.end, cpu, prev: l.tid, prev_state: l.end_state, next: 0 });
        }
    }
    out
}

/// The kernel's comm: at most 15 bytes (TASK_COMM_LEN 16 with its NUL).
fn comm(name: &str) -> String {
    let mut end = name.len().min(15);
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    name[..end].to_string()
}

/// Events per bundle packet (a bound on packet size, not on the trace).
const BUNDLE: usize = 4096;
const SEQUENCE: u32 = 1;

fn packet() -> TracePacket {
    let mut p = TracePacket::new();
    p.set_trusted_packet_sequence_id(SEQUENCE);
    p
}

/// The trace as Perfetto protobuf bytes. Fails (and writes nothing) if an event names an
/// undeclared thread or CPU, or a CPU's switches do not chain.
pub fn encode(t: &SchedTrace) -> Result<Vec<u8>, String> {
    let threads: BTreeMap<i32, &Thread> = t.threads.iter().map(|th| (th.tid, th)).collect();
    if threads.contains_key(&0) {
        return Err("thread id 0 is the idle task; give threads ids above 0".into());
    }
    let known = |tid: i32, what: &str| {
        if tid == 0 || threads.contains_key(&tid) {
            Ok(())
        } else {
            Err(format!("{what} names thread {tid}, which is not declared"))
        }
    };
    let name_of = |tid: i32, cpu: u32| if tid == 0 { format!("swapper/{cpu}") } else { comm(&threads[&tid].name) };
    let prio_of = |tid: i32| if tid == 0 { 120 } else { threads[&tid].prio };

    let mut out = Trace::new();
    let mut tree = ProcessTree::new();
    for p in &t.processes {
        let mut x = process_tree::Process::new();
        x.set_pid(p.pid);
        x.set_ppid(0);
        x.cmdline.push(p.name.clone());
        tree.processes.push(x);
    }
    for th in &t.threads {
        let mut x = process_tree::Thread::new();
        x.set_tid(th.tid);
        x.set_tgid(th.pid);
        x.set_name(th.name.clone());
        tree.threads.push(x);
    }
    let mut p = packet();
    p.set_timestamp(0);
    p.set_process_tree(tree);
    out.packet.push(p);
    for (k, pr) in t.processes.iter().enumerate() {
        let mut pd = ProcessDescriptor::new();
        pd.set_pid(pr.pid);
        pd.set_process_name(pr.name.clone());
        let mut td = TrackDescriptor::new();
        td.set_uuid(1 + k as u64);
        td.process = Some(pd).into();
        let mut p = packet();
        p.set_track_descriptor(td);
        out.packet.push(p);
    }
    for (k, th) in t.threads.iter().enumerate() {
        let mut d = ThreadDescriptor::new();
        d.set_pid(th.pid);
        d.set_tid(th.tid);
        d.set_thread_name(th.name.clone());
        let mut td = TrackDescriptor::new();
        td.set_uuid(1 + (t.processes.len() + k) as u64);
        td.thread = Some(d).into();
        let mut p = packet();
        p.set_track_descriptor(td);
        out.packet.push(p);
    }

    // Per CPU, in time order; at one instant wake-ups before switches.
    let mut per_cpu: BTreeMap<u32, Vec<(u64, u8, usize)>> = BTreeMap::new();
    let mut on_cpu: BTreeMap<u32, i32> = BTreeMap::new();
    for (k, s) in t.switches.iter().enumerate() {
        if s.cpu >= t.cpus {
            return Err(format!("a switch at {} ns is on CPU {}, beyond the {} CPUs", s.ts, s.cpu, t.cpus));
        }
        known(s.prev, "a switch")?;
        known(s.next, "a switch")?;
        per_cpu.entry(s.cpu).or_default().push((s.ts, 1, k));
    }
    for (k, w) in t.wakings.iter().enumerate() {
        if w.cpu >= t.cpus || w.target_cpu >= t.cpus {
            return Err(format!("a wake-up at {} ns names a CPU beyond the {} CPUs", w.ts, t.cpus));
        }
        known(w.tid, "a wake-up")?;
        known(w.waker, "a wake-up")?;
        per_cpu.entry(w.cpu).or_default().push((w.ts, 0, k));
    }
    for (cpu, mut evs) in per_cpu {
        evs.sort();
        let mut events = Vec::with_capacity(evs.len());
        for (ts, kind, k) in evs {
            let mut e = FtraceEvent::new();
            e.set_timestamp(ts);
            if kind == 1 {
                let s = t.switches[k];
                let cur = on_cpu.get(&cpu).copied().unwrap_or(0);
                if s.prev != cur {
                    return Err(format!("CPU {cpu} at {ts} ns: a switch from thread {} while thread {cur} holds it", s.prev));
                }
                on_cpu.insert(cpu, s.next);
                let mut x = SchedSwitchFtraceEvent::new();
                x.set_prev_comm(name_of(s.prev, cpu));
                x.set_prev_pid(s.prev);
                x.set_prev_prio(prio_of(s.prev));
                x.set_prev_state(if s.prev == 0 { 0 } else { s.prev_state.kernel_bits() });
                x.set_next_comm(name_of(s.next, cpu));
                x.set_next_pid(s.next);
                x.set_next_prio(prio_of(s.next));
                e.set_pid(s.prev as u32);
                e.set_sched_switch(x);
            } else {
                let w = t.wakings[k];
                let mut x = SchedWakingFtraceEvent::new();
                x.set_comm(name_of(w.tid, cpu));
                x.set_pid(w.tid);
                x.set_prio(prio_of(w.tid));
                x.set_success(1);
                x.set_target_cpu(w.target_cpu as i32);
                e.set_pid(w.waker as u32);
                e.set_sched_waking(x);
            }
            events.push(e);
        }
        for chunk in events.chunks(BUNDLE) {
            let mut b = FtraceEventBundle::new();
            b.set_cpu(cpu);
            b.event = chunk.to_vec();
            let mut p = packet();
            p.set_ftrace_events(b);
            out.packet.push(p);
        }
    }
    out.write_to_bytes().map_err(|e| format!("encoding the trace: {e}"))
}

/// Reads Perfetto protobuf bytes back (for tests and tools).
pub fn decode(bytes: &[u8]) -> Result<Trace, String> {
    Trace::parse_from_bytes(bytes).map_err(|e| format!("not a Perfetto trace: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn two_threads() -> SchedTrace {
        let runs = [
            Run { cpu: 0, tid: 11, start: 100, end: 300, end_state: State::Runnable },
            Run { cpu: 0, tid: 12, start: 300, end: 400, end_state: State::Sleeping },
            Run { cpu: 1, tid: 11, start: 500, end: 600, end_state: State::Dead },
        ];
        SchedTrace {
            cpus: 2,
            processes: vec![Process { pid: 10, name: "app".into() }],
            threads: vec![
                Thread { tid: 11, pid: 10, name: "a-thread-with-a-long-name".into(), prio: 120 },
                Thread { tid: 12, pid: 10, name: "b".into(), prio: 89 },
            ],
            switches: switches_from_runs(&runs),
            wakings: vec![Waking { ts: 100, cpu: 0, waker: 0, tid: 11, target_cpu: 0 }],
        }
    }

    #[test]
    fn runs_become_chained_switches() {
        let s = two_threads().switches;
        let brief: Vec<(u32, u64, i32, i32, State)> = s.iter().map(|s| (s.cpu, s.ts, s.prev, s.next, s.prev_state)).collect();
        assert_eq!(
            brief,
            [
                (0, 100, 0, 11, State::Runnable),
                (0, 300, 11, 12, State::Runnable),
                (0, 400, 12, 0, State::Sleeping),
                (1, 500, 0, 11, State::Runnable),
                (1, 600, 11, 0, State::Dead)
            ]
        );
    }

    #[test]
    fn encodes_to_the_published_schema() {
        let bytes = encode(&two_threads()).unwrap();
        let t = decode(&bytes).unwrap();
        let tree = t.packet.iter().find(|p| p.has_process_tree()).unwrap().process_tree();
        assert_eq!(tree.threads.len(), 2);
        assert_eq!(tree.threads[0].name(), "a-thread-with-a-long-name");
        let names: Vec<&str> = t
            .packet
            .iter()
            .filter(|p| p.has_track_descriptor())
            .map(|p| p.track_descriptor())
            .map(|d| if d.thread.is_some() { d.thread.thread_name() } else { d.process.process_name() })
            .collect();
        assert_eq!(names, ["app", "a-thread-with-a-long-name", "b"]);
        let bundles: Vec<&FtraceEventBundle> = t.packet.iter().filter(|p| p.has_ftrace_events()).map(|p| p.ftrace_events()).collect();
        assert_eq!(bundles.iter().map(|b| b.cpu()).collect::<Vec<_>>(), [0, 1]);
        let cpu0 = &bundles[0].event;
        assert!(cpu0[0].has_sched_waking() && cpu0[1].has_sched_switch(), "the wake-up before the switch at one instant");
        let sw = cpu0[2].sched_switch();
        assert_eq!(
            (sw.prev_comm(), sw.prev_pid(), sw.prev_state(), sw.next_comm(), sw.next_pid(), sw.next_prio()),
            ("a-thread-with-a", 11, 0, "b", 12, 89)
        );
        assert_eq!(cpu0[2].pid(), 11, "the event is recorded by the thread switching out");
        assert_eq!(cpu0[3].sched_switch().next_comm(), "swapper/0");
        assert_eq!(cpu0[3].sched_switch().prev_state(), 1);
        assert_eq!(bundles[1].event[1].sched_switch().prev_state(), 16);
        assert!(t.packet.iter().all(|p| p.trusted_packet_sequence_id() == SEQUENCE));
    }

    #[test]
    fn refuses_what_perfetto_would_misread() {
        let mut t = two_threads();
        t.switches[1].prev = 12;
        assert!(encode(&t).unwrap_err().contains("CPU 0 at 300 ns: a switch from thread 12 while thread 11 holds it"));
        let mut t = two_threads();
        t.wakings[0].tid = 99;
        assert!(encode(&t).unwrap_err().contains("names thread 99"));
        let mut t = two_threads();
        t.switches[3].cpu = 2;
        assert!(encode(&t).unwrap_err().contains("beyond the 2 CPUs"));
    }
}
