//! Metrics the simulator keeps: per task CPU time and share, dispatch latency
//! (runnable → running), response time per job/burst, deadlines met and missed with
//! lateness, context switches and migrations; per CPU busy/idle/overhead; totals.

use hdrhistogram::Histogram;
use serde::Serialize;
use vassal_core::Ns;

/// A distribution of durations (ns) with exact count, mean, min and max, and
/// percentiles to 2 significant digits (1%): those of an HdrHistogram with 2 significant
/// digits (`hdrhistogram::Histogram::new(2)`, which gives each value's bucket its
/// highest equivalent value), counted here in groups of [`GROUP`] buckets allocated on
/// first use. The full histogram grew to the largest value and zeroed and copied its
/// whole array at each growth: with a thousand tasks that was most of a run's time
/// (issue 16's profile); a group is touched only when a sample falls in it. A run of
/// equal samples is counted first and goes into its bucket at once.
#[derive(Clone, Default)]
pub struct Hist {
    /// Bucket counts, `GROUP` buckets per group, by group index.
    groups: Vec<Option<Box<[u64; GROUP]>>>,
    /// The value of the current run of equal samples and its length, not yet in `groups`
    /// (zero latencies, a job's constant response: one bucket update per run).
    run: (u64, u64),
    count: u64,
    sum: u128,
    /// Sum of squares, for an exact standard deviation.
    sumsq: u128,
    min: u64,
    max: u64,
}

/// Buckets per group: half the sub-buckets of a 2-significant-digit HdrHistogram (256
/// sub-buckets per power of two, the upper half of each new), so group `g` ≥ 1 holds the
/// values of one power of two and group 0 the values below 128.
const GROUP: usize = 128;

/// The bucket of `v` in an HdrHistogram of 2 significant digits and lowest discernible
/// value 1 (its `index_for`).
fn bucket_of(v: u64) -> usize {
    // log2 of the power of two whose 256 sub-buckets hold v (0 below 256)
    let shift = 56 - (v | 255).leading_zeros() as usize;
    let sub = (v >> shift) as usize;
    ((shift + 1) << 7) + sub - GROUP
}

/// The lowest value of bucket `i` (inverse of [`bucket_of`]).
fn bucket_value(i: usize) -> u64 {
    let (group, sub) = (i >> 7, i & (GROUP - 1));
    if group == 0 {
        sub as u64
    } else {
        ((sub + GROUP) as u64) << (group - 1)
    }
}

impl Hist {
    pub fn record(&mut self, v: Ns) {
        if self.run.1 > 0 && self.run.0 == v {
            self.run.1 += 1;
        } else {
            let (last, n) = std::mem::replace(&mut self.run, (v, 1));
            if n > 0 {
                self.add(last, n);
            }
        }
        self.min = if self.count == 0 { v } else { self.min.min(v) };
        self.count += 1;
        self.max = self.max.max(v);
        self.sum += v as u128;
        self.sumsq = self.sumsq.saturating_add((v as u128) * (v as u128));
    }
    /// Counts `n` samples of `v` in their bucket.
    fn add(&mut self, v: u64, n: u64) {
        let i = bucket_of(v);
        let g = i / GROUP;
        if g >= self.groups.len() {
            self.groups.resize(g + 1, None);
        }
        self.groups[g].get_or_insert_with(|| Box::new([0; GROUP]))[i % GROUP] += n;
    }
    pub fn count(&self) -> u64 {
        self.count
    }
    /// The value at quantile `q`, as `hdrhistogram::Histogram::value_at_quantile` gives it:
    /// the highest value equivalent to the bucket where the count reaches ⌈q·n⌉ (at least 1).
    fn quantile(&self, q: f64, hdr: &Histogram<u64>) -> u64 {
        let target = ((q * self.count as f64).ceil() as u64).max(1);
        // the pending run, counted in its bucket
        let (run_bucket, run_n) = (bucket_of(self.run.0), self.run.1);
        let mut seen = 0;
        for g in 0..self.groups.len().max(run_bucket / GROUP + 1) {
            let counts = self.groups.get(g).and_then(|c| c.as_deref());
            let extra = if run_bucket / GROUP == g { run_n } else { 0 };
            let sum = counts.map_or(0, |c| c.iter().sum::<u64>()) + extra;
            if seen + sum < target {
                seen += sum;
                continue;
            }
            for j in 0..GROUP {
                seen += counts.map_or(0, |c| c[j]) + if run_bucket == g * GROUP + j { run_n } else { 0 };
                if seen >= target {
                    return hdr.highest_equivalent(bucket_value(g * GROUP + j));
                }
            }
        }
        self.max
    }
    pub fn summary(&self) -> Summary {
        if self.count == 0 {
            return Summary::default();
        }
        let hdr = Histogram::<u64>::new(2).expect("2 significant digits is valid");
        let n = self.count;
        Summary {
            count: n,
            mean_ns: (self.sum / n as u128) as u64,
            // percentiles are clamped to the exact extremes
            p50_ns: self.quantile(0.5, &hdr).clamp(self.min, self.max),
            p99_ns: self.quantile(0.99, &hdr).clamp(self.min, self.max),
            max_ns: self.max,
            min_ns: self.min,
            sd_ns: sd(self.sum, self.sumsq, n),
        }
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
    /// Jobs unfinished at the horizon whose deadline is after it (neither met nor missed).
    pub jobs_pending: u64,
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
    /// A job unfinished at the horizon whose deadline is after it.
    pub fn job_pending(&mut self, task: usize) {
        self.tasks[task].jobs_pending += 1;
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The percentiles are HdrHistogram's (2 significant digits, growing with the
    /// largest value), sample for sample, over values of every magnitude, with and
    /// without a pending run of equal samples.
    #[test]
    fn percentiles_are_hdrhistograms() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for round in 0..300 {
            let (mut ours, mut hdr) = (Hist::default(), Histogram::<u64>::new(2).unwrap());
            hdr.auto(true);
            for _ in 0..1 + round % 50 * 7 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                // magnitudes from 0 to 2^63, some values repeated
                let v = match x % 4 {
                    0 => x >> (x % 64),
                    1 => (x >> 40) % 300,
                    2 => u64::MAX - (x % 3),
                    _ => 1 << (x % 64),
                };
                // runs of equal samples, too
                for _ in 0..1 + (x >> 60) % 3 {
                    ours.record(v);
                    hdr.record(v).unwrap();
                }
            }
            // (quantile 0 is the lowest equivalent value in hdrhistogram; the summary never asks it)
            for q in [0.01, 0.25, 0.5, 0.9, 0.99, 1.0] {
                assert_eq!(ours.quantile(q, &hdr), hdr.value_at_quantile(q), "round {round}, quantile {q}");
            }
        }
        for v in [0, 1, 127, 128, 255, 256, 257, 511, 512, 1 << 40, u64::MAX] {
            assert_eq!(bucket_of(bucket_value(bucket_of(v))), bucket_of(v), "{v}");
            assert!(bucket_value(bucket_of(v)) <= v, "{v}");
        }
    }
}
