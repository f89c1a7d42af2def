//! What the agent reports: the schedulers' notes about tasks (kept for `ctl tasks`, and
//! a loaded scheduler's logged too), the hierarchy (`ctl hierarchy`), each managed task's
//! row (`ctl tasks`) and the counters of `status`. Read-only, except `take_notes`.

use std::collections::BTreeMap;

use vassal_core::{Ns, TaskId, TaskState};

use super::{Agent, KState, NOTES};
use crate::kernel;
use crate::wire::{Answer, EjectionRow, SchedRow, TaskRow};

impl Agent {
    /// Modules ejected so far (the last [`MAX_EJECTIONS`]), for `status`.
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
            let Some(m) = l.task.and_then(|t| self.tasks.get_mut(&t.0)) else {
                continue;
            };
            if sched != default {
                eprintln!("vassal agent: scheduler '{sched}' about process {} (uid {}): {}", m.pid, m.uid, l.text);
            }
            if m.notes.len() == NOTES {
                m.notes.pop_front();
            }
            m.notes.push_back(format!("{sched}: {}", l.text));
        }
    }

    pub fn hierarchy(&self) -> Answer {
        let mut counts: BTreeMap<u32, usize> = BTreeMap::new();
        for &id in self.tasks.keys() {
            if let Some(o) = self.drv.disp.owner(TaskId(id)) {
                *counts.entry(o.0).or_default() += 1;
            }
        }
        let schedulers = self
            .drv
            .disp
            .schedulers()
            .into_iter()
            .map(|s| SchedRow {
                tasks: counts.get(&s.id.0).copied().unwrap_or(0),
                module: self.modules.get(&s.name).cloned(),
                name: s.name,
                kind: s.kind,
                usage: s.usage.describe(),
                decided: s.decided,
                refused: s.refused,
            })
            .collect();
        Answer::Hierarchy { schedulers }
    }

    pub fn task_rows(&self) -> Vec<TaskRow> {
        let now = kernel::now_ns();
        self.tasks
            .iter()
            .map(|(&id, m)| {
                let task = TaskId(id);
                let (t0, c0) = m.samples.front().copied().unwrap_or((0, 0));
                let (t1, c1) = (m.samples.back().map_or(0, |s| s.0).max(t0), m.cpu_ns);
                let share = if t1 > t0 { c1.saturating_sub(c0) as f64 / (t1 - t0) as f64 } else { 0.0 };
                let mut lat: Vec<u32> = m.lat.iter().copied().collect();
                lat.sort_unstable();
                let pct = |p: f64| {
                    if lat.is_empty() {
                        0.0
                    } else {
                        lat[((lat.len() - 1) as f64 * p).round() as usize] as f64
                    }
                };
                TaskRow {
                    pid: m.pid,
                    uid: m.uid,
                    task: id,
                    sched: self.drv.disp.owner(task).and_then(|o| self.drv.disp.sched_name(o)).unwrap_or("?").to_string(),
                    threads: m.threads.len(),
                    state: match self.drv.disp.state(task) {
                        TaskState::Running(c) => format!("running on {c}"),
                        TaskState::Runnable => "runnable".into(),
                        TaskState::Blocked => "blocked".into(),
                        TaskState::Dead => "exited".into(),
                    },
                    kernel: match m.want {
                        KState::Untouched => "untouched".into(),
                        KState::Run { cpu, fifo: true } => {
                            format!("fifo{} cpu{cpu}", self.cfg.run_priority)
                        }
                        KState::Run { cpu, fifo: false } => format!("other cpu{cpu}"),
                        KState::Armed { cpu } => {
                            format!("armed fifo{} cpu{cpu}", self.cfg.run_priority + 1)
                        }
                        KState::Parked => "idle".into(),
                        KState::Held => "idle, stopped".into(),
                    },
                    cpu_ns: m.cpu_ns - m.joined_cpu_ns,
                    share,
                    latency_p50_us: pct(0.5),
                    latency_p99_us: pct(0.99),
                    budget_ns: match self.drv.disp.state(task) {
                        TaskState::Running(c) => self.slice_end[c.0 as usize].map(|e| e.saturating_sub(now)),
                        _ => None,
                    },
                    params: m.params.clone(),
                    notes: m.notes.iter().cloned().collect(),
                }
            })
            .collect()
    }

    /// How many ledger records are valid (for tests: one per managed thread).
    pub fn ledger_records(&self) -> usize {
        self.ledger.valid()
    }

    pub fn uptime(&self, now: Ns) -> Ns {
        now.saturating_sub(self.started).max(1)
    }
}
