//! `vassal agent --trace FILE`: what the agent decided, as a Chrome trace
//! ([`crate::chrome`]) or, when FILE ends in `.pftrace`, `.perfetto-trace` or `.pb`, as a
//! Perfetto protobuf trace (issue 18 item 3) in the layout of a kernel trace: per CPU,
//! ftrace `sched_switch` events for each span the agent selected a managed thread there,
//! `sched_waking` for each wake the agent saw, and every thread declared with its process
//! (vassal_perfetto, Perfetto's published schema). Perfetto's thread-state tracks and its
//! `sched_slice` / `thread_state` tables then read the agent's decisions as they read the
//! kernel's switches (`vassal twin --out` writes the kernel's for the same run).
//!
//! Times are CLOCK_MONOTONIC ns, the clock of the kernel's ftrace with `trace_clock =
//! mono`, so the two line up. A span is what the agent *decided* (the thread may have
//! run less: the kernel still preempts it for its own threads). A span ends in state S if
//! the agent saw the thread block by then, else R. The Perfetto trace is kept in memory
//! (at most [`MAX_EVENTS`] switches and wakes; past that, further ones are counted and
//! dropped, and the count is printed at the stop) and written at an orderly stop: unlike
//! the Chrome trace, a crashed agent leaves none.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

use vassal_core::Ns;
use vassal_perfetto::{encode, switches_from_runs, Process, Run, SchedTrace, State, Thread, Waking};

use crate::chrome::ChromeTrace;

/// Switches and wakes kept for a Perfetto trace (32 bytes each, in the agent's locked
/// memory: at most 32 MB; about a quarter of an hour of a busy 2-CPU machine).
pub const MAX_EVENTS: usize = 1_000_000;

/// Whether `path` names a Perfetto trace (as `vassal sim --trace` decides).
pub fn is_perfetto(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "pftrace" || e == "perfetto-trace" || e == "pb")
}

/// The agent's decision trace, in either format.
pub enum DecisionTrace {
    Chrome(ChromeTrace),
    Perfetto(PerfettoTrace),
}

impl DecisionTrace {
    pub fn create(path: &Path, t0: Ns, ncpus: u16) -> io::Result<DecisionTrace> {
        if is_perfetto(path) {
            PerfettoTrace::create(path, ncpus).map(DecisionTrace::Perfetto)
        } else {
            ChromeTrace::create(path, t0, ncpus).map(DecisionTrace::Chrome)
        }
    }
    /// The dispatcher decided for `cpu` at `now`: `task` (tid, deciding scheduler) or idle.
    pub fn decision(&mut self, now: Ns, cpu: u16, task: Option<(u32, &str)>) {
        match self {
            DecisionTrace::Chrome(t) => t.decision(now, cpu, task),
            DecisionTrace::Perfetto(t) => t.decision(now, cpu, task.map(|(tid, _)| tid)),
        }
    }
    /// The agent saw thread `tid` become runnable (`woke`) or block.
    pub fn runnable(&mut self, now: Ns, tid: u32, woke: bool) {
        match self {
            DecisionTrace::Chrome(t) => t.runnable(now, tid, woke),
            DecisionTrace::Perfetto(t) => t.runnable(now, tid, woke),
        }
    }
    /// A scheduler event of `sched` fired (Chrome only: ftrace has no such event).
    pub fn event(&mut self, now: Ns, sched: &str) {
        if let DecisionTrace::Chrome(t) = self {
            t.event(now, sched);
        }
    }
    /// After a pass.
    pub fn flush(&mut self) {
        if let DecisionTrace::Chrome(t) = self {
            t.flush();
        }
    }
    /// An orderly stop at `now`.
    pub fn finish(&mut self, now: Ns) {
        match self {
            DecisionTrace::Chrome(t) => t.finish(now),
            DecisionTrace::Perfetto(t) => {
                if let Err(e) = t.finish(now) {
                    eprintln!("vassal agent: --trace {}: {e}", t.path.display());
                }
            }
        }
    }
}

/// The agent's decisions kept for a Perfetto trace.
pub struct PerfettoTrace {
    path: PathBuf,
    ncpus: u16,
    runs: Vec<Run>,
    wakings: Vec<Waking>,
    /// Per CPU: the open span (tid, start).
    open: Vec<Option<(u32, Ns)>>,
    /// Per thread: its process, name, and whether the agent last saw it runnable.
    threads: BTreeMap<u32, (i32, String, bool)>,
    dropped: u64,
    done: bool,
}

impl PerfettoTrace {
    /// Creates FILE at once (so a path that cannot be written is refused at the start).
    pub fn create(path: &Path, ncpus: u16) -> io::Result<PerfettoTrace> {
        std::fs::File::create(path)?;
        Ok(PerfettoTrace {
            path: path.to_path_buf(),
            ncpus,
            runs: Vec::new(),
            wakings: Vec::new(),
            open: vec![None; ncpus as usize],
            threads: BTreeMap::new(),
            dropped: 0,
            done: false,
        })
    }

    /// Declares `tid` on first sight: its process and name from /proc (a thread gone by
    /// then is its own process, named by its tid).
    fn thread(&mut self, tid: u32) -> &mut (i32, String, bool) {
        self.threads.entry(tid).or_insert_with(|| {
            let status = std::fs::read_to_string(format!("/proc/{tid}/status")).unwrap_or_default();
            let field = |k: &str| status.lines().find_map(|l| l.strip_prefix(k)).map(|v| v.trim().to_string());
            let pid = field("Tgid:").and_then(|v| v.parse().ok()).unwrap_or(tid as i32);
            let name = field("Name:").unwrap_or_else(|| format!("tid {tid}"));
            (pid, name, true)
        })
    }

    fn room(&mut self) -> bool {
        if self.runs.len() + self.wakings.len() < MAX_EVENTS {
            return true;
        }
        self.dropped += 1;
        false
    }

    fn close(&mut self, now: Ns, cpu: usize) {
        if let Some((tid, start)) = self.open.get_mut(cpu).and_then(Option::take) {
            if now > start && self.room() {
                let runnable = self.thread(tid).2;
                let end_state = if runnable { State::Runnable } else { State::Sleeping };
                self.runs.push(Run { cpu: cpu as u32, tid: tid as i32, start, end: now, end_state });
            }
        }
    }

    pub fn decision(&mut self, now: Ns, cpu: u16, tid: Option<u32>) {
        let c = cpu as usize;
        if c >= self.open.len() || self.open[c].map(|(t, _)| t) == tid && tid.is_some() {
            return; // no such CPU, or the same thread goes on running: one span
        }
        self.close(now, c);
        if let Some(tid) = tid {
            self.thread(tid);
            self.open[c] = Some((tid, now));
        }
    }

    pub fn runnable(&mut self, now: Ns, tid: u32, woke: bool) {
        self.thread(tid).2 = woke;
        if woke && self.room() {
            self.wakings.push(Waking { ts: now, cpu: 0, waker: 0, tid: tid as i32, target_cpu: 0 });
        }
    }

    /// The trace as Perfetto protobuf bytes, the open spans closed at `now`.
    pub fn encode(&mut self, now: Ns) -> Result<Vec<u8>, String> {
        for c in 0..self.open.len() {
            self.close(now, c);
        }
        let mut processes: BTreeMap<i32, String> = BTreeMap::new();
        let mut threads = Vec::new();
        for (&tid, (pid, name, _)) in &self.threads {
            if tid as i32 == *pid {
                processes.insert(*pid, name.clone());
            } else {
                processes.entry(*pid).or_insert_with(|| format!("pid {pid}"));
            }
            threads.push(Thread { tid: tid as i32, pid: *pid, name: name.clone(), prio: 120 });
        }
        let t = SchedTrace {
            cpus: self.ncpus as u32,
            processes: processes.into_iter().map(|(pid, name)| Process { pid, name }).collect(),
            threads,
            switches: switches_from_runs(&self.runs),
            wakings: self.wakings.clone(),
        };
        encode(&t)
    }

    /// Writes the trace (once).
    pub fn finish(&mut self, now: Ns) -> Result<(), String> {
        if std::mem::replace(&mut self.done, true) {
            return Ok(());
        }
        let bytes = self.encode(now)?;
        std::fs::write(&self.path, bytes).map_err(|e| e.to_string())?;
        if self.dropped > 0 {
            eprintln!("vassal agent: --trace: {} events past the first {MAX_EVENTS} were not kept", self.dropped);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_agents_decisions_decode_as_per_cpu_switches_with_thread_states() {
        let dir = std::env::temp_dir().join(format!("vassal-decisions-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("agent.pftrace");
        let mut t = PerfettoTrace::create(&path, 2).unwrap();
        let me = std::process::id();
        // This test's own process: a real tid with a name in /proc.
        t.runnable(1_000, me, true);
        t.decision(1_000, 0, Some(me));
        t.decision(3_000, 0, Some(me)); // the same thread goes on: one span
        t.runnable(5_000, me, false);
        t.decision(5_000, 0, None);
        t.decision(6_000, 1, Some(me));
        t.finish(9_000).unwrap();
        let trace = vassal_perfetto::decode(&std::fs::read(&path).unwrap()).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        let me = me as i32;
        let tree = trace.packet.iter().find(|p| p.has_process_tree()).unwrap().process_tree();
        assert!(tree.threads.iter().any(|th| th.tid() == me && th.tgid() == me), "{:?}", tree.threads);
        let mut sw = Vec::new();
        let mut wakes = Vec::new();
        for p in trace.packet.iter().filter(|p| p.has_ftrace_events()) {
            let b = p.ftrace_events();
            for e in &b.event {
                if e.has_sched_switch() {
                    let s = e.sched_switch();
                    sw.push((b.cpu(), e.timestamp(), s.prev_pid(), s.prev_state(), s.next_pid()));
                } else if e.has_sched_waking() {
                    wakes.push((e.timestamp(), e.sched_waking().pid()));
                }
            }
        }
        // S (1) once the agent saw it block, R (0) while it was runnable.
        assert_eq!(sw, vec![(0, 1_000, 0, 0, me), (0, 5_000, me, 1, 0), (1, 6_000, 0, 0, me), (1, 9_000, me, 1, 0)]);
        assert_eq!(wakes, vec![(1_000, me)]);
    }

    #[test]
    fn the_format_follows_the_extension() {
        assert!(is_perfetto(Path::new("a.pftrace")));
        assert!(is_perfetto(Path::new("a.perfetto-trace")));
        assert!(!is_perfetto(Path::new("a.json")));
    }
}
