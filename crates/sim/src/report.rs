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
    /// Jobs finished after their deadline, and jobs unfinished at the horizon whose
    /// deadline had passed (docs/jobs.md).
    pub jobs_missed: u64,
    /// Jobs unfinished at the horizon whose deadline is after it: neither met nor missed.
    pub jobs_pending: u64,
    pub lateness: Summary,
    /// Loop iteration periods (script `timer` phases, `send set` phases): see
    /// `metrics::TaskMetrics::iterations`.
    pub iterations: Summary,
    pub switches: u64,
    pub migrations: u64,
    pub messages: u64,
    pub refused_messages: u64,
}

impl TaskReport {
    /// The task's number named `field`, as the metric language reads it
    /// (`task.NAME.FIELD`, docs/repro.md "Metrics"): times in ms (iteration periods in
    /// µs), counts as numbers, shares as fractions. None for an unknown name.
    pub fn field(&self, field: &str) -> Option<f64> {
        let ms = |ns: u64| ns as f64 / 1e6;
        Some(match field {
            "share" => self.share,
            "cpu_frac" => self.cpu_frac,
            "cpu_ms" => ms(self.cpu_ns),
            "latency_p50_ms" => ms(self.latency.p50_ns),
            "latency_p99_ms" => ms(self.latency.p99_ns),
            "latency_max_ms" => ms(self.latency.max_ns),
            "latency_mean_ms" => ms(self.latency.mean_ns),
            "response_p50_ms" => ms(self.response.p50_ns),
            "response_p99_ms" => ms(self.response.p99_ns),
            "response_max_ms" => ms(self.response.max_ns),
            "response_mean_ms" => ms(self.response.mean_ns),
            "responses" => self.response.count as f64,
            "jobs_met" => self.jobs_met as f64,
            "jobs_missed" => self.jobs_missed as f64,
            "jobs_pending" => self.jobs_pending as f64,
            "miss_ratio" => {
                let n = self.jobs_met + self.jobs_missed;
                if n == 0 {
                    0.0
                } else {
                    self.jobs_missed as f64 / n as f64
                }
            }
            "lateness_max_ms" => ms(self.lateness.max_ns),
            "switches" => self.switches as f64,
            "migrations" => self.migrations as f64,
            "iterations" => self.iterations.count as f64,
            "iter_min_us" => self.iterations.min_ns as f64 / 1e3,
            "iter_max_us" => self.iterations.max_ns as f64 / 1e3,
            "iter_mean_us" => self.iterations.mean_ns as f64 / 1e3,
            "iter_sd_us" => self.iterations.sd_ns as f64 / 1e3,
            _ => return None,
        })
    }
}

/// How a per-task table cell is written.
#[derive(Clone, Copy, Debug)]
enum Cell {
    Name,
    Scheduler,
    /// A task field in ms, three decimals.
    Ms(&'static str),
    /// A fraction as a percentage, two decimals.
    Percent(&'static str),
    /// A count.
    Count(&'static str),
}

/// A column of the per-task table: its heading, whether it holds numbers (right-aligned)
/// and its least width in the text report.
#[derive(Clone, Copy, Debug)]
pub struct Column {
    pub head: &'static str,
    pub numeric: bool,
    pub width: usize,
}

/// The per-task table's columns, each with its cell. Responses show p50, p99 and max,
/// as latencies do.
const TASK_COLUMNS: [(Column, Cell); 14] = {
    const fn text(head: &'static str, width: usize) -> Column {
        Column { head, numeric: false, width }
    }
    const fn num(head: &'static str, width: usize) -> Column {
        Column { head, numeric: true, width }
    }
    [
        (text("task", 16), Cell::Name),
        (text("sched", 10), Cell::Scheduler),
        (num("cpu ms", 11), Cell::Ms("cpu_ms")),
        (num("share", 7), Cell::Percent("share")),
        (num("lat p50", 10), Cell::Ms("latency_p50_ms")),
        (num("lat p99", 10), Cell::Ms("latency_p99_ms")),
        (num("lat max", 10), Cell::Ms("latency_max_ms")),
        (num("resp p50", 10), Cell::Ms("response_p50_ms")),
        (num("resp p99", 10), Cell::Ms("response_p99_ms")),
        (num("resp max", 10), Cell::Ms("response_max_ms")),
        (num("met", 7), Cell::Count("jobs_met")),
        (num("missed", 7), Cell::Count("jobs_missed")),
        (num("switches", 9), Cell::Count("switches")),
        (num("migr", 7), Cell::Count("migrations")),
    ]
};

/// The per-task table of a report, as the text report and the HTML page (vassal-lab)
/// show it: the columns, then a row of cells per task, in task order.
#[derive(Clone, Debug)]
pub struct TaskTable {
    pub columns: Vec<Column>,
    pub rows: Vec<Vec<String>>,
}

impl TaskTable {
    fn of(tasks: &[TaskReport]) -> TaskTable {
        let cell = |t: &TaskReport, c: Cell| {
            let f = |name| t.field(name).unwrap_or(f64::NAN);
            match c {
                Cell::Name => t.name.clone(),
                Cell::Scheduler => t.scheduler.clone(),
                Cell::Ms(name) => format!("{:.3}", f(name)),
                Cell::Percent(name) => format!("{:.2}%", f(name) * 100.0),
                Cell::Count(name) => format!("{}", f(name)),
            }
        };
        TaskTable {
            columns: TASK_COLUMNS.iter().map(|(c, _)| *c).collect(),
            rows: tasks.iter().map(|t| TASK_COLUMNS.iter().map(|&(_, c)| cell(t, c)).collect()).collect(),
        }
    }

    /// The table as text: a heading line, then a line per task; each cell padded to its
    /// column's width (numbers right-aligned), one space between cells.
    pub fn to_text(&self) -> String {
        let line = |cells: &mut dyn Iterator<Item = &str>| {
            let cells: Vec<String> = cells
                .zip(&self.columns)
                .map(|(s, c)| if c.numeric { format!("{s:>w$}", w = c.width) } else { format!("{s:<w$}", w = c.width) })
                .collect();
            cells.join(" ") + "\n"
        };
        let mut o = line(&mut self.columns.iter().map(|c| c.head));
        for r in &self.rows {
            o += &line(&mut r.iter().map(String::as_str));
        }
        o
    }
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
    /// CPU time of the swap scheduler (its runs, its searches, its transfers' stolen
    /// cycles), charged as overhead.
    pub swap_cpu_ns: Ns,
    /// Of the swap-outs, those of tasks that swapped themselves out to grow (V7
    /// `expand()`, paper 004 §2's "voluntary swapouts").
    pub growth_swaps: u64,
    /// Mean number of tasks loaded, up to the last exit (the whole run if none exited).
    pub resident_mean: f64,
    /// Per disk drive (in order of first mention): requests served and time busy.
    pub disks: Vec<DiskReport>,
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
pub struct DiskReport {
    pub name: String,
    pub served: u64,
    pub busy_ns: Ns,
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

    /// The per-task table (the text report's and the HTML page's).
    pub fn task_table(&self) -> TaskTable {
        TaskTable::of(&self.tasks)
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
        o.push('\n');
        o.push_str(&self.task_table().to_text());
        let _ = writeln!(o, "(latency = runnable → running; times in ms)");
        let pending: Vec<String> =
            self.tasks.iter().filter(|t| t.jobs_pending > 0).map(|t| format!("{} {}", t.name, t.jobs_pending)).collect();
        if !pending.is_empty() {
            let _ = writeln!(o, "jobs pending at the horizon (deadline after it): {}", pending.join(", "));
        }
        o.push('\n');
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
            "kernel: {} dispatches, {} system calls, {} swap-ins, {} swap-outs, {} swap-scheduler runs ({} ms of CPU), {} ms idle with a ready process swapped out, user-mode CPU {:.2}%{}",
            k.dispatches,
            k.syscalls,
            k.swap_ins,
            k.swap_outs,
            k.swapper_runs,
            ms(k.swap_cpu_ns),
            ms(k.swap_idle_ns),
            k.user_util * 100.0,
            k.last_exit_ns.map_or(String::new(), |e| format!(" (to the last exit at {} ms)", ms(e)))
        );
        for d in &k.disks {
            let _ = writeln!(o, "disk {}: {} transfers, busy {} ms", d.name, d.served, ms(d.busy_ns));
        }
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
