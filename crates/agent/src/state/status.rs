//! What the agent reports: the schedulers' notes about tasks (kept for `ctl tasks`, and
//! a loaded scheduler's logged too), the hierarchy (`ctl hierarchy`, with each
//! scheduler's measured share beside what it was granted), each managed process's row
//! and its threads' (`ctl tasks`) and the counters of `status`.
//!
//! **Shares.** A thread's share is its CPU time over the last second (one window,
//! [`super::SHARE_WINDOW`]) divided by that time, of one CPU: its CPU time is read
//! exactly (/proc/TID/schedstat, brought up to date by the kernel even while the thread
//! runs on another CPU) at the moment the row is made, against a sample taken about a
//! second before with the time it was read. So a busy loop shows 100%, never more (the
//! figure before issue 17 divided the newest reading by the time of an older sample —
//! up to 100 ms older —, and read the process CPU clock, which lags a running thread by
//! up to a 4 ms kernel tick: 104–109% for a busy loop). A process's share is the sum of
//! its threads' (up to one per CPU). A scheduler's is the CPU its decisions gave its
//! tasks over the same window.

use std::collections::BTreeMap;

use vassal_core::{Ns, TaskId, TaskState};

use super::{share, Agent, KState, RunClass, NOTES};
use crate::kernel;
use crate::wire::{Answer, EjectionRow, SchedRow, TaskRow, ThreadRow};

impl Agent {
    /// Modules ejected so far (the last [`MAX_EJECTIONS`](super::MAX_EJECTIONS)), for `status`.
    pub fn ejections(&self) -> Vec<EjectionRow> {
        self.ejections.iter().cloned().collect()
    }

    /// What the schedulers logged (`Dispatcher::drain_logs`): each note about a task is
    /// kept with it for `ctl tasks` (the last [`NOTES`]), and a loaded scheduler's notes
    /// go to the agent's log too (e.g. rtserver removing a misbehaving task's reservation,
    /// paper 002 §2.3), so the task's owner and the administrator both see it.
    pub(super) fn take_notes(&mut self) {
        let logs = self.drv.disp.drain_logs();
        if logs.is_empty() {
            return;
        }
        let default = self.drv.disp.sched_name(self.drv.disp.default_sched()).unwrap_or("").to_string();
        for (sched, l) in logs {
            let Some(id) = l.task.map(|t| t.0).filter(|id| self.tasks.contains_key(id)) else {
                continue;
            };
            let m = &self.tasks[&id];
            if sched != default {
                let uid = self.groups.get(&m.pid).map_or(0, |g| g.uid);
                eprintln!("vassal agent: scheduler '{sched}' about thread {} of process {} (uid {uid}): {}", m.tid, m.pid, l.text);
            }
            if let Some(m) = self.tasks.get_mut(&id) {
                if m.notes.len() == NOTES {
                    m.notes.pop_front();
                }
                m.notes.push_back(format!("{sched}: {}", l.text));
            }
        }
    }

    /// Each thread's CPU time now (read fresh: the figures of a row are of this instant).
    fn fresh_cpu(&mut self) -> BTreeMap<u32, u64> {
        self.tasks.iter_mut().map(|(&id, m)| (id, m.runtime.read().unwrap_or(m.cpu_ns).max(m.cpu_ns))).collect()
    }

    pub fn hierarchy(&mut self) -> Answer {
        // The clock after the CPU times: a share's time never ends before its CPU time.
        let fresh = self.fresh_cpu();
        let now = kernel::now_ns();
        let mut counts: BTreeMap<u32, usize> = BTreeMap::new();
        // CPU used since each thread's last read, by the scheduler it ran under.
        let mut pending: BTreeMap<u32, u64> = BTreeMap::new();
        for (&id, m) in &self.tasks {
            if let Some(o) = self.drv.disp.owner(TaskId(id)) {
                *counts.entry(o.0).or_default() += 1;
            }
            if let Some(s) = m.ran_under {
                *pending.entry(s.0).or_default() += fresh[&id].saturating_sub(m.cpu_ns);
            }
        }
        let schedulers = self
            .drv
            .disp
            .schedulers()
            .into_iter()
            .map(|s| {
                let measured = self.sched_use.get(&s.id.0).map_or(0.0, |u| {
                    let total = u.total + pending.get(&s.id.0).copied().unwrap_or(0);
                    share(&u.samples, now, total)
                });
                let demand = s.usage.demand_ppm();
                SchedRow {
                    tasks: counts.get(&s.id.0).copied().unwrap_or(0),
                    module: self.modules.get(&s.name).cloned(),
                    name: s.name,
                    kind: s.kind,
                    usage: s.usage.describe(),
                    decided: s.decided,
                    refused: s.refused,
                    share: measured,
                    granted: (demand > 0).then(|| demand as f64 / vassal_core::CPU_PPM as f64),
                }
            })
            .collect();
        Answer::Hierarchy { schedulers }
    }

    /// The kernel state of a thread, as `ctl tasks` shows it.
    fn describe_kernel(&self, k: KState) -> String {
        match k {
            KState::Untouched => "untouched".into(),
            KState::Run { cpu, class: RunClass::Fifo } => format!("fifo{} cpu{cpu}", self.cfg.run_priority),
            KState::Run { cpu, class: RunClass::Other(Some(n)) } => format!("other nice{n} cpu{cpu}"),
            KState::Run { cpu, class: RunClass::Other(None) } => format!("other cpu{cpu}"),
            KState::Armed { cpu } => format!("armed fifo{} cpu{cpu}", self.cfg.run_priority + 1),
            KState::Parked => "idle".into(),
            KState::Sleeping { fair: true } => "other, unbound".into(),
            KState::Sleeping { fair: false } => "idle, unbound".into(),
            KState::Held => "idle, stopped".into(),
        }
    }

    pub fn task_rows(&mut self) -> Vec<TaskRow> {
        // The clock after the CPU times, and each sample's CPU time read after its clock
        // (pass.rs): a thread's CPU time can then never grow faster than the time the
        // share divides it by — a busy loop shows at most 100%, exactly.
        let fresh = self.fresh_cpu();
        let now = kernel::now_ns();
        let pct = |lat: &mut Vec<u32>, p: f64| {
            if lat.is_empty() {
                0.0
            } else {
                lat.sort_unstable();
                lat[((lat.len() - 1) as f64 * p).round() as usize] as f64
            }
        };
        let sched_of = |a: &Agent, t: TaskId| a.drv.disp.owner(t).and_then(|o| a.drv.disp.sched_name(o)).unwrap_or("?").to_string();
        let mut rows = Vec::with_capacity(self.groups.len());
        for (&pid, g) in &self.groups {
            let mut threads = Vec::with_capacity(g.threads.len());
            let mut all_lat: Vec<u32> = Vec::new();
            let mut notes = Vec::new();
            for (&tid, &id) in &g.threads {
                let Some(m) = self.tasks.get(&id) else { continue };
                let task = TaskId(id);
                let cpu = fresh[&id];
                let mut lat: Vec<u32> = m.lat.iter().copied().collect();
                all_lat.extend(&lat);
                notes.extend(m.notes.iter().cloned());
                threads.push(ThreadRow {
                    tid,
                    task: id,
                    sched: sched_of(self, task),
                    state: match self.drv.disp.state(task) {
                        TaskState::Running(c) => format!("running on {c}"),
                        TaskState::Runnable => "runnable".into(),
                        TaskState::Blocked => "blocked".into(),
                        TaskState::Dead => "exited".into(),
                    },
                    kernel: self.describe_kernel(m.want),
                    cpu_ns: cpu.saturating_sub(m.joined_cpu_ns),
                    // At most one CPU: a thread's CPU time (schedstat, on the scheduler's
                    // clock) and the window (CLOCK_MONOTONIC) are two clocks, and on this
                    // VM a busy loop measured 1.0029 over a second now and then (CI, issue
                    // 17): the excess is the clocks' skew, not CPU a thread cannot use.
                    share: share(&m.samples, now, cpu).min(1.0),
                    latency_p50_us: pct(&mut lat.clone(), 0.5),
                    latency_p99_us: pct(&mut lat, 0.99),
                    budget_ns: match self.drv.disp.state(task) {
                        TaskState::Running(c) => self.slice_end[c.0 as usize].map(|e| e.saturating_sub(now)),
                        _ => None,
                    },
                    weight: m.weight,
                    reserved: m.reserved_ppm as f64 / vassal_core::CPU_PPM as f64,
                    params: m.own.clone(),
                });
            }
            // The process: its threads together.
            let running: Vec<String> = threads.iter().filter_map(|t| t.state.strip_prefix("running on ").map(str::to_string)).collect();
            let state = if !running.is_empty() {
                format!("running on {}", running.join(","))
            } else if threads.iter().any(|t| t.state == "runnable") {
                "runnable".into()
            } else {
                "blocked".into()
            };
            let kernel = if threads.len() == 1 {
                threads[0].kernel.clone()
            } else {
                let mut kinds: BTreeMap<&str, usize> = BTreeMap::new();
                for t in &threads {
                    *kinds.entry(t.kernel.as_str()).or_default() += 1;
                }
                kinds.iter().map(|(k, n)| format!("{n}x {k}")).collect::<Vec<_>>().join(", ")
            };
            let mut scheds: Vec<&str> = threads.iter().map(|t| t.sched.as_str()).collect();
            scheds.sort_unstable();
            scheds.dedup();
            let main = threads.iter().find(|t| t.tid == pid).or(threads.first());
            rows.push(TaskRow {
                pid,
                uid: g.uid,
                task: main.map_or(0, |t| t.task),
                sched: scheds.join("+"),
                threads: threads.len(),
                state,
                kernel,
                cpu_ns: threads.iter().map(|t| t.cpu_ns).sum::<u64>() + g.gone_cpu_ns,
                share: threads.iter().map(|t| t.share).sum(),
                latency_p50_us: pct(&mut all_lat.clone(), 0.5),
                latency_p99_us: pct(&mut all_lat, 0.99),
                budget_ns: main.and_then(|t| t.budget_ns),
                params: g.params.clone(),
                notes,
                reserved: threads.iter().map(|t| t.reserved).sum(),
                thread_rows: threads,
            });
        }
        rows
    }

    /// How many ledger records are valid (for tests: one per managed thread).
    pub fn ledger_records(&self) -> usize {
        self.ledger.valid()
    }

    pub fn uptime(&self, now: Ns) -> Ns {
        now.saturating_sub(self.started).max(1)
    }
}
