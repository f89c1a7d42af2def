//! The report of one simulation run: a readable table by default, JSON with `--json`.
//! Everything is ordered (tasks and CPUs by index, schedulers top-down), so the same
//! scenario and seed give a byte-identical report.

use std::fmt::Write as _;

use serde::Serialize;
use vassal_core::Ns;

use crate::metrics::Summary;

#[derive(Clone, Debug, Serialize)]
pub struct TaskReport {
    pub name: String,
    /// Owner at the end of the run.
    pub scheduler: String,
    pub cpu_ns: Ns,
    /// Share of all CPU time given to tasks (sums to 1 over tasks).
    pub share: f64,
    /// Fraction of one CPU over the run.
    pub cpu_frac: f64,
    pub latency: Summary,
    pub response: Summary,
    pub jobs_met: u64,
    pub jobs_missed: u64,
    pub lateness: Summary,
    /// Loop iteration periods (script `timer` phases, `send set` phases): see
    /// `metrics::TaskMetrics::iterations`.
    pub iterations: Summary,
    pub switches: u64,
    pub migrations: u64,
    pub messages: u64,
    pub refused_messages: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct CpuReport {
    pub cpu: u16,
    pub busy_ns: Ns,
    pub overhead_ns: Ns,
    pub idle_ns: Ns,
    /// busy / elapsed.
    pub utilisation: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct SchedReport {
    pub name: String,
    pub kind: String,
    pub usage: String,
    pub decided: u64,
    pub refused: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct Totals {
    pub events: u64,
    pub decisions: u64,
    pub picks: u64,
    pub idle_decisions: u64,
    pub refused_decisions: u64,
    pub hand_offs: u64,
    pub switches: u64,
    pub migrations: u64,
    pub interrupts: u64,
    /// Simulated scheduler overhead: context switch, migration and unscheduled time.
    pub overhead_ns: Ns,
}

/// The kernel events paper 004 §5 counts: dispatches, system calls, swap-ins and
/// swap-outs, and the CPU time lost because every ready process was swapped out.
#[derive(Clone, Debug, Default, Serialize)]
pub struct KernelReport {
    /// Decisions that gave a CPU a task, plus each run of the swap scheduler.
    pub dispatches: u64,
    /// Voluntary blocks (I/O, terminal and timer waits), yields, messages and exits.
    pub syscalls: u64,
    pub swap_ins: u64,
    pub swap_outs: u64,
    /// Runs of the swap scheduler.
    pub swapper_runs: u64,
    /// CPU idle while a ready task was swapped out.
    pub swap_idle_ns: Ns,
    /// CPU time of all tasks (user mode).
    pub user_ns: Ns,
    /// When the last task to exit exited (None: none exited).
    pub last_exit_ns: Option<Ns>,
    /// user_ns over the run up to the last exit (the whole run if none exited), per CPU.
    pub user_util: f64,
    /// Per task (scenarios with `[memory]`): image size and swaps.
    pub images: Vec<ImageReport>,
}

#[derive(Clone, Debug, Serialize)]
pub struct ImageReport {
    pub name: String,
    pub size_kb: u64,
    pub swap_ins: u64,
    pub swap_outs: u64,
    pub exit_ns: Option<Ns>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub scenario: String,
    pub seed: u64,
    pub elapsed_ns: Ns,
    pub tasks: Vec<TaskReport>,
    pub cpus: Vec<CpuReport>,
    pub schedulers: Vec<SchedReport>,
    pub totals: Totals,
    pub kernel: KernelReport,
    pub log: Vec<String>,
}

fn ms(ns: Ns) -> String {
    format!("{:.3}", ns as f64 / 1e6)
}

impl Report {
    pub fn task(&self, name: &str) -> Option<&TaskReport> {
        self.tasks.iter().find(|t| t.name == name)
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a report always serialises")
    }

    /// The human-readable table.
    pub fn to_table(&self) -> String {
        let mut o = String::new();
        let _ = writeln!(o, "scenario {}  seed {}  elapsed {} ms", self.scenario, self.seed, ms(self.elapsed_ns));
        let _ = writeln!(o, "\nschedulers (top-down)");
        for s in &self.schedulers {
            let _ = writeln!(o, "  {:<16} {:<6} {:<34} decided {:>9} refused {:>6}", s.name, s.kind, s.usage, s.decided, s.refused);
        }
        let _ = writeln!(
            o,
            "\n{:<16} {:<10} {:>11} {:>7} {:>10} {:>10} {:>10} {:>10} {:>10} {:>7} {:>7} {:>9} {:>7}",
            "task",
            "sched",
            "cpu ms",
            "share",
            "lat p50",
            "lat p99",
            "lat max",
            "resp p50",
            "resp p99",
            "met",
            "missed",
            "switches",
            "migr"
        );
        for t in &self.tasks {
            let _ = writeln!(
                o,
                "{:<16} {:<10} {:>11} {:>6.2}% {:>10} {:>10} {:>10} {:>10} {:>10} {:>7} {:>7} {:>9} {:>7}",
                t.name,
                t.scheduler,
                ms(t.cpu_ns),
                t.share * 100.0,
                ms(t.latency.p50_ns),
                ms(t.latency.p99_ns),
                ms(t.latency.max_ns),
                ms(t.response.p50_ns),
                ms(t.response.p99_ns),
                t.jobs_met,
                t.jobs_missed,
                t.switches,
                t.migrations
            );
        }
        let _ = writeln!(o, "(latency = runnable → running; times in ms)\n");
        let _ = writeln!(o, "{:<6} {:>12} {:>12} {:>12} {:>8}", "cpu", "busy ms", "overhead ms", "idle ms", "util");
        for c in &self.cpus {
            let _ = writeln!(
                o,
                "cpu{:<3} {:>12} {:>12} {:>12} {:>7.2}%",
                c.cpu,
                ms(c.busy_ns),
                ms(c.overhead_ns),
                ms(c.idle_ns),
                c.utilisation * 100.0
            );
        }
        let t = &self.totals;
        let _ = writeln!(
            o,
            "\ntotals: {} events, {} decisions ({} idle, {} refused), {} picks, {} hand-offs, {} switches, {} migrations, {} interrupts, {} ms overhead",
            t.events, t.decisions, t.idle_decisions, t.refused_decisions, t.picks, t.hand_offs, t.switches, t.migrations, t.interrupts, ms(t.overhead_ns)
        );
        let k = &self.kernel;
        let _ = writeln!(
            o,
            "kernel: {} dispatches, {} system calls, {} swap-ins, {} swap-outs, {} swap-scheduler runs, {} ms idle with a ready process swapped out, user-mode CPU {:.2}%{}",
            k.dispatches,
            k.syscalls,
            k.swap_ins,
            k.swap_outs,
            k.swapper_runs,
            ms(k.swap_idle_ns),
            k.user_util * 100.0,
            k.last_exit_ns.map_or(String::new(), |e| format!(" (to the last exit at {} ms)", ms(e)))
        );
        if !k.images.is_empty() {
            let _ = writeln!(o, "\n{:<16} {:>8} {:>9} {:>9} {:>12}", "image", "size KB", "swap-ins", "swap-outs", "exit ms");
            for m in &k.images {
                let exit = m.exit_ns.map_or("-".to_string(), ms);
                let _ = writeln!(o, "{:<16} {:>8} {:>9} {:>9} {:>12}", m.name, m.size_kb, m.swap_ins, m.swap_outs, exit);
            }
        }
        if !self.log.is_empty() {
            let _ = writeln!(o, "\nlog");
            for l in &self.log {
                let _ = writeln!(o, "  {l}");
            }
        }
        o
    }
}
