//! Metrics the simulator keeps: per task CPU time and share, dispatch latency
//! (runnable → running), response time per job/burst, deadlines met and missed with
//! lateness, context switches and migrations; per CPU busy/idle/overhead; totals.

use hdrhistogram::Histogram;
use serde::Serialize;
use vassal_core::Ns;

/// A distribution of durations (ns) with exact count, mean, min and max, and
/// percentiles to 2 significant digits (1%). The histogram is allocated on the first
/// sample and grows with the largest value, so thousands of tasks stay cheap. A run of
/// equal samples (a zero latency, a job's constant response) is counted first and goes
/// into the histogram as one `record_n` when a different value comes or the summary is
/// taken: the same histogram as recording each sample, for less work on a hot path.
#[derive(Clone, Default)]
pub struct Hist {
    h: Option<Histogram<u64>>,
    /// The value of the current run of equal samples and its length, not yet recorded.
    run: (u64, u64),
    count: u64,
    sum: u128,
    /// Sum of squares, for an exact standard deviation.
    sumsq: u128,
    min: u64,
    max: u64,
}

impl Hist {
    pub fn record(&mut self, v: Ns) {
        if self.run.1 > 0 && self.run.0 == v {
            self.run.1 += 1;
        } else {
            self.flush();
            self.run = (v, 1);
        }
        self.min = if self.count == 0 { v } else { self.min.min(v) };
        self.count += 1;
        self.max = self.max.max(v);
        self.sum += v as u128;
        self.sumsq = self.sumsq.saturating_add((v as u128) * (v as u128));
    }
    /// Records the pending run of equal samples.
    fn flush(&mut self) {
        let (v, n) = std::mem::take(&mut self.run);
        if n > 0 {
            record_n(self.h.get_or_insert_with(new_histogram), v, n);
        }
    }
    pub fn count(&self) -> u64 {
        self.count
    }
    pub fn summary(&self) -> Summary {
        if self.count == 0 {
            return Summary::default();
        }
        let mut h = self.h.clone().unwrap_or_else(new_histogram);
        if self.run.1 > 0 {
            record_n(&mut h, self.run.0, self.run.1);
        }
        let n = self.count;
        Summary {
            count: n,
            mean_ns: (self.sum / n as u128) as u64,
            // percentiles are clamped to the exact extremes
            p50_ns: h.value_at_quantile(0.5).clamp(self.min, self.max),
            p99_ns: h.value_at_quantile(0.99).clamp(self.min, self.max),
            max_ns: self.max,
            min_ns: self.min,
            sd_ns: sd(self.sum, self.sumsq, n),
        }
    }
}

fn new_histogram() -> Histogram<u64> {
    let mut h = Histogram::new(2).expect("2 significant digits is valid");
    h.auto(true);
    h
}

/// Records `n` samples of `v`: `record_n` resizes the histogram (auto);
/// `saturating_record_n` would clamp instead.
fn record_n(h: &mut Histogram<u64>, v: u64, n: u64) {
    if h.record_n(v, n).is_err() {
        h.saturating_record_n(v, n);
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Summary {
    pub count: u64,
    pub mean_ns: u64,
    pub p50_ns: u64,
    pub p99_ns: u64,
    pub max_ns: u64,
    pub min_ns: u64,
    /// Population standard deviation, from exact integer sums (rounded to the nearest ns).
    pub sd_ns: u64,
}

/// Population standard deviation of `n` values with sum `sum` and sum of squares
/// `sumsq`: sqrt((n·Σv² − (Σv)²) / n²), the numerator in exact integers.
fn sd(sum: u128, sumsq: u128, n: u64) -> u64 {
    if n == 0 {
        return 0;
    }
    let n = n as u128;
    let num = n.saturating_mul(sumsq).saturating_sub(sum.saturating_mul(sum));
    // the variance's numerator is exact; one float division and square root
    let var = num as f64 / (n as f64 * n as f64);
    var.sqrt().round() as u64
}

#[derive(Clone, Default)]
pub struct TaskMetrics {
    pub name: String,
    pub cpu_ns: Ns,
    pub latency: Hist,
    pub response: Hist,
    pub lateness: Hist,
    pub jobs_met: u64,
    pub jobs_missed: u64,
    pub switches: u64,
    pub migrations: u64,
    pub messages: u64,
    pub refused_messages: u64,
    /// Became runnable at this time and has not been dispatched since.
    pub runnable_since: Option<Ns>,
    /// Loop iteration periods: the time between successive executions of a script's
    /// `timer` phase, and between successive `send set` phases (each kind on its own),
    /// as the running task reaches them (paper 000 Table 2's periodic wake-up times).
    pub iterations: Hist,
    /// When the task last reached a `timer` phase / sent a `set` request.
    pub last_timer: Option<Ns>,
    pub last_set: Option<Ns>,
    /// Whether the task has waited on its timer yet (see `Metrics::iteration`).
    pub timer_waited: bool,
}

#[derive(Clone, Copy, Default)]
pub struct CpuMetrics {
    pub busy_ns: Ns,
    pub overhead_ns: Ns,
}

/// Everything measured during one run.
#[derive(Default)]
pub struct Metrics {
    pub tasks: Vec<TaskMetrics>,
    pub cpus: Vec<CpuMetrics>,
    pub switches: u64,
    pub migrations: u64,
    pub events: u64,
    pub interrupts: u64,
    /// Engine events worth a line in the report, with their time.
    pub log: Vec<(Ns, String)>,
}

impl Metrics {
    pub fn new(ncpus: u16, names: impl IntoIterator<Item = String>) -> Self {
        Metrics {
            tasks: names.into_iter().map(|name| TaskMetrics { name, ..Default::default() }).collect(),
            cpus: vec![CpuMetrics::default(); ncpus as usize],
            ..Default::default()
        }
    }
    pub fn runnable(&mut self, task: usize, now: Ns) {
        let t = &mut self.tasks[task];
        if t.runnable_since.is_none() {
            t.runnable_since = Some(now);
        }
    }
    /// The task starts executing at `start` (after any switch cost).
    pub fn started(&mut self, task: usize, start: Ns) {
        if let Some(since) = self.tasks[task].runnable_since.take() {
            self.tasks[task].latency.record(start.saturating_sub(since));
        }
    }
    /// The task stopped being runnable: no latency sample pending.
    pub fn blocked(&mut self, task: usize) {
        self.tasks[task].runnable_since = None;
    }
    pub fn switched_in(&mut self, task: usize, migrated: bool) {
        self.switches += 1;
        self.tasks[task].switches += 1;
        if migrated {
            self.migrations += 1;
            self.tasks[task].migrations += 1;
        }
    }
    pub fn ran(&mut self, task: usize, cpu: usize, ns: Ns) {
        self.tasks[task].cpu_ns += ns;
        self.cpus[cpu].busy_ns += ns;
    }
    pub fn overhead(&mut self, cpu: usize, ns: Ns) {
        self.cpus[cpu].overhead_ns += ns;
    }
    pub fn response(&mut self, task: usize, ns: Ns) {
        self.tasks[task].response.record(ns);
    }
    /// A job with a deadline finished at `finish`.
    pub fn job(&mut self, task: usize, release: Ns, finish: Ns, deadline: Ns) {
        let t = &mut self.tasks[task];
        t.response.record(finish - release);
        if finish <= deadline {
            t.jobs_met += 1;
        } else {
            t.jobs_missed += 1;
            t.lateness.record(finish - deadline);
        }
    }
    /// A deadline missed without the job completing (refused, or abandoned at its
    /// deadline: paper 001 §5.1's randres).
    pub fn job_missed(&mut self, task: usize) {
        self.tasks[task].jobs_missed += 1;
    }
    /// The task reached a loop marker (`set`: a `send set` phase, else a `timer` phase)
    /// at `now`: records the time since it last reached one of the same kind. The first
    /// timer interval is not a wake-up period (the first arrival follows no timer wait:
    /// the first expiry is one period after it, and the interval also holds whatever ran
    /// in between), so timer intervals are recorded from the second arrival after a wait.
    pub fn iteration(&mut self, task: usize, set: bool, now: Ns) {
        let t = &mut self.tasks[task];
        let prev = if set {
            t.last_set.replace(now)
        } else {
            let prev = t.last_timer.replace(now);
            let waited = std::mem::replace(&mut t.timer_waited, prev.is_some());
            prev.filter(|_| waited)
        };
        if let Some(prev) = prev {
            t.iterations.record(now.saturating_sub(prev));
        }
    }
    pub fn note(&mut self, now: Ns, text: impl AsRef<str>) {
        self.log.push((now, text.as_ref().to_string()));
    }
}

/// Formats a log line: the time in seconds with ns precision, then the text.
pub fn log_line(at: Ns, text: &str) -> String {
    format!("{:>4}.{:09}s {}", at / 1_000_000_000, at % 1_000_000_000, text)
}
