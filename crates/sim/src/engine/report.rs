//! The report at the horizon: per-task, per-CPU and per-scheduler figures from the
//! metrics and the dispatcher, the totals, the kernel counts and the merged log.
//!
//! Invariant: read-only over the finished run (it consumes the [`Sim`]).

use super::Sim;
use crate::report::{CpuReport, Report, SchedReport, TaskReport, Totals};
use vassal_core::Ns;

impl Sim {
    pub(super) fn report(mut self) -> Report {
        let mut log = std::mem::take(&mut self.metrics.log);
        for (sched, l) in self.drv.disp.drain_logs() {
            let who = l.task.and_then(|t| self.sc.tasks.get(t.0 as usize)).map_or(String::new(), |t| format!("{}: ", t.name));
            log.push((l.at, format!("[{sched}] {who}{}", l.text)));
        }
        log.sort_by_key(|(at, _)| *at);
        let elapsed = self.sc.until;
        let total: Ns = self.metrics.tasks.iter().map(|t| t.cpu_ns).sum();
        let tasks = self
            .metrics
            .tasks
            .iter()
            .zip(&self.tasks)
            .map(|(m, t)| TaskReport {
                name: m.name.clone(),
                scheduler: self.drv.disp.owner(t.id).and_then(|s| self.drv.disp.sched_name(s)).unwrap_or("-").to_string(),
                cpu_ns: m.cpu_ns,
                share: if total > 0 { m.cpu_ns as f64 / total as f64 } else { 0.0 },
                cpu_frac: if elapsed > 0 { m.cpu_ns as f64 / elapsed as f64 } else { 0.0 },
                latency: m.latency.summary(),
                response: m.response.summary(),
                jobs_met: m.jobs_met,
                jobs_missed: m.jobs_missed,
                jobs_pending: m.jobs_pending,
                lateness: m.lateness.summary(),
                iterations: m.iterations.summary(),
                switches: m.switches,
                migrations: m.migrations,
                messages: m.messages,
                refused_messages: m.refused_messages,
            })
            .collect();
        let cpus = self
            .metrics
            .cpus
            .iter()
            .enumerate()
            .map(|(c, m)| CpuReport {
                cpu: c as u16,
                busy_ns: m.busy_ns,
                overhead_ns: m.overhead_ns,
                idle_ns: elapsed.saturating_sub(m.busy_ns + m.overhead_ns),
                utilisation: if elapsed > 0 { m.busy_ns as f64 / elapsed as f64 } else { 0.0 },
            })
            .collect();
        let stats = self.drv.disp.stats();
        let schedulers = self
            .drv
            .disp
            .schedulers()
            .into_iter()
            .map(|s| SchedReport { name: s.name, kind: s.kind, usage: s.usage.describe(), decided: s.decided, refused: s.refused })
            .collect();
        Report {
            scenario: self.sc.name.clone(),
            seed: self.sc.seed,
            elapsed_ns: elapsed,
            tasks,
            cpus,
            schedulers,
            totals: Totals {
                // Every event queued up to the horizon, the superseded ones too (the
                // engine used to pop those and discard them by a generation count).
                events: self.metrics.events + self.drv.dropped_timers(),
                decisions: stats.decisions,
                picks: stats.picks,
                idle_decisions: stats.idle,
                refused_decisions: stats.refused,
                hand_offs: stats.hand_offs,
                switches: self.metrics.switches,
                migrations: self.metrics.migrations,
                interrupts: self.metrics.interrupts,
                overhead_ns: self.metrics.cpus.iter().map(|c| c.overhead_ns).sum(),
            },
            kernel: self.kernel_report(),
            log: log.iter().map(|(at, text)| crate::metrics::log_line(*at, text)).collect(),
        }
    }
}
