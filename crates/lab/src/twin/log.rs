//! rt-app's per-loop log, both ways: read from the log files the real rt-app writes
//! (`{log_basename}-{thread}-{index}.log`, one row per iteration of a phase), and
//! made from a simulated run's steps so the two are compared row for row; then each
//! thread's summary (docs/twin.md, "What is compared").
//!
//! rt-app 1.0's columns (tutorial.txt, "Log and gnuplot"), µs: `idx perf run period
//! start end rel_st slack c_duration c_period wu_lat` — `run` is the wall time of the
//! iteration's run events (preemption included), `slack` the time left before the
//! (last) timer's expiry when the thread reached it (negative: the expiry had passed, the
//! thread did not sleep: a missed period), `wu_lat` how late the thread ran after the
//! timer's expiry (0 when it did not sleep), `c_duration`/`c_period` what the file asks.
//!
//! The simulated rows follow the same definitions, from the engine's step marks
//! ([`vassal_sim::StepMark`]) and slices: an instant a task is "running" is the first at
//! or after it when the task holds a CPU past the switch (and migration) cost at the
//! slice's start — the moment rt-app's `clock_gettime` would see.

use serde::Serialize;
use vassal_core::{Ns, US};
use vassal_sim::model::{Behaviour, Dist, Phase, Scenario};
use vassal_sim::rtapp::build::LoopStart;
use vassal_sim::{Slice, Trace};

/// One iteration of a phase, times in ns from the run's start (t0).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct LogRow {
    pub start: i64,
    pub end: i64,
    /// Wall time of the iteration's run events.
    pub run: u64,
    /// Before the (last) timer of the iteration; 0 without a timer.
    pub slack: i64,
    pub c_duration: u64,
    pub c_period: u64,
    pub wu_lat: u64,
}

impl LogRow {
    /// The iteration has a timer whose expiry had passed when the thread reached it.
    pub fn missed(&self) -> bool {
        self.c_period > 0 && self.slack < 0
    }
}

/// A row as rt-app writes it: absolute times in µs of CLOCK_MONOTONIC.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RawRow {
    pub run: u64,
    pub start_us: u64,
    pub end_us: u64,
    pub slack: i64,
    pub c_duration: u64,
    pub c_period: u64,
    pub wu_lat: u64,
}

/// Reads one rt-app log file's text. Errors name the line.
pub fn parse_log(text: &str) -> Result<Vec<RawRow>, String> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 11 {
            return Err(format!(
                "line {}: {} columns, expected 11 (idx perf run period start end rel_st slack c_duration c_period wu_lat)",
                n + 1,
                f.len()
            ));
        }
        let u =
            |k: usize| f[k].parse::<u64>().map_err(|_| format!("line {}: column {} is `{}`, expected a count of µs", n + 1, k + 1, f[k]));
        let i =
            |k: usize| f[k].parse::<i64>().map_err(|_| format!("line {}: column {} is `{}`, expected a number of µs", n + 1, k + 1, f[k]));
        out.push(RawRow { run: u(2)?, start_us: u(4)?, end_us: u(5)?, slack: i(7)?, c_duration: u(8)?, c_period: u(9)?, wu_lat: u(10)? });
    }
    Ok(out)
}

/// Raw rows relative to `t0` (ns of CLOCK_MONOTONIC).
pub fn relative(rows: &[RawRow], t0: u64) -> Vec<LogRow> {
    rows.iter()
        .map(|r| LogRow {
            start: (r.start_us * US) as i64 - t0 as i64,
            end: (r.end_us * US) as i64 - t0 as i64,
            run: r.run * US,
            slack: r.slack * US as i64,
            c_duration: r.c_duration * US,
            c_period: r.c_period * US,
            wu_lat: r.wu_lat * US,
        })
        .collect()
}

/// When task `task` is running at or after `at`: `at` inside one of its slices past the
/// slice's overhead, else the next slice's start plus its overhead (None: never again).
struct Running<'a> {
    slices: Vec<&'a Slice>,
    switch: Ns,
    migration: Ns,
}

impl Running<'_> {
    fn overhead(&self, k: usize) -> Ns {
        let moved = k > 0 && self.slices[k - 1].cpu != self.slices[k].cpu;
        self.switch + if moved { self.migration } else { 0 }
    }
    fn at(&self, at: Ns) -> Option<Ns> {
        // the first slice ending at or after `at` (a step taken as a slice ends, e.g.
        // the block after a run, is taken while running)
        let k = self.slices.partition_point(|s| s.end < at);
        let s = self.slices.get(k)?;
        Some(at.max(s.start.saturating_add(self.overhead(k))))
    }
}

fn const_of(d: &Dist) -> Ns {
    match *d {
        Dist::Const(v) => v,
        Dist::Uniform(a, b) => (a + b) / 2,
        Dist::Exp(m) | Dist::Normal(m, _) => m,
    }
}

/// The rows rt-app would have logged in the simulated run, per task (scenario order).
/// `loops` are the tasks' [`LoopStart`]s ([`vassal_sim::rtapp::build::to_scenario_with_loops`]).
/// An iteration still open at the horizon is left out (as it would be cut short).
pub fn sim_rows(sc: &Scenario, loops: &[Vec<LoopStart>], trace: &Trace) -> Vec<Vec<LogRow>> {
    let mut by_task: Vec<Vec<&Slice>> = vec![Vec::new(); sc.tasks.len()];
    for s in &trace.slices {
        if let Some(v) = by_task.get_mut(s.task) {
            v.push(s);
        }
    }
    let mut steps: Vec<Vec<&vassal_sim::StepMark>> = vec![Vec::new(); sc.tasks.len()];
    for m in &trace.steps {
        if let Some(v) = steps.get_mut(m.task) {
            v.push(m);
        }
    }
    let mut out = Vec::with_capacity(sc.tasks.len());
    for (i, task) in sc.tasks.iter().enumerate() {
        let Behaviour::Script { phases, .. } = &task.behaviour else {
            out.push(Vec::new());
            continue;
        };
        let mut sl = std::mem::take(&mut by_task[i]);
        sl.sort_by_key(|s| s.start);
        let run = Running { slices: sl, switch: sc.machine.switch_cost, migration: sc.machine.migration_cost };
        let starts: Vec<usize> = loops.get(i).map(|l| l.iter().map(|s| s.step).collect()).unwrap_or_default();
        let ms = &steps[i];
        let mut rows = Vec::new();
        let mut cur: Option<LogRow> = None;
        for (k, m) in ms.iter().enumerate() {
            let Some(now) = run.at(m.at) else { break };
            if starts.binary_search(&m.step).is_ok() {
                if let Some(mut r) = cur.take() {
                    r.end = now as i64;
                    rows.push(r);
                }
                cur = Some(LogRow { start: now as i64, end: now as i64, run: 0, slack: 0, c_duration: 0, c_period: 0, wu_lat: 0 });
            }
            let Some(r) = cur.as_mut() else { continue };
            // when the step ended: the next step was taken (running from then)
            let next = ms.get(k + 1).and_then(|n| run.at(n.at));
            match &phases[m.step] {
                Phase::Run(d) | Phase::RunWall(d) => {
                    r.c_duration += const_of(d);
                    if let Some(e) = next {
                        r.run += e.saturating_sub(now);
                    }
                }
                &Phase::RtTimer { period, .. } => {
                    r.c_period += period;
                    if let Some(exp) = m.expiry {
                        r.slack = exp as i64 - now as i64;
                        if m.at < exp {
                            if let Some(e) = next {
                                r.wu_lat += e.saturating_sub(exp);
                            }
                        }
                    }
                }
                _ => {}
            }
        }
        // the last iteration ends when the task exits, if it did
        if let Some(mut r) = cur {
            if let Some(x) = trace.marks.iter().find(|x| x.task == i && x.kind == vassal_sim::MarkKind::Exit) {
                r.end = x.at as i64;
                rows.push(r);
            }
        }
        out.push(rows);
    }
    out
}

/// The value at fraction `p` of sorted `v` (nearest rank), None if empty.
pub fn quantile(v: &[i64], p: f64) -> Option<i64> {
    if v.is_empty() {
        return None;
    }
    let k = ((p * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1;
    Some(v[k])
}

/// One thread's figures over a run (µs where a time).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Summary {
    /// Iterations logged inside the window.
    pub iterations: usize,
    /// Fraction of one CPU over the window.
    pub cpu_share: f64,
    /// Wake-up latency after a timer the thread slept on.
    pub wu_lat_p50_us: Option<f64>,
    pub wu_lat_p99_us: Option<f64>,
    /// Slack before the timer (low tail: p1).
    pub slack_p50_us: Option<f64>,
    pub slack_p1_us: Option<f64>,
    /// Iterations with a timer, and of those the missed ones (expiry already past).
    pub timed: usize,
    pub missed: usize,
    /// Run time per iteration (wall time of its run events).
    pub run_p50_us: Option<f64>,
    pub run_p99_us: Option<f64>,
    /// An iteration's length, start to end (for a thread woken by another, the time
    /// from one wake-up to the next).
    pub period_p50_us: Option<f64>,
    pub period_p99_us: Option<f64>,
}

/// The summary of `rows` that lie within [0, window], with the thread's CPU share.
pub fn summarize(rows: &[LogRow], window: Ns, cpu_share: f64) -> Summary {
    let inside: Vec<&LogRow> = rows.iter().filter(|r| r.start >= 0 && r.end <= window as i64).collect();
    let us = |x: Option<i64>| x.map(|v| v as f64 / 1e3);
    let sorted = |mut v: Vec<i64>| {
        v.sort_unstable();
        v
    };
    let timed: Vec<&&LogRow> = inside.iter().filter(|r| r.c_period > 0).collect();
    let slept = sorted(timed.iter().filter(|r| !r.missed()).map(|r| r.wu_lat as i64).collect());
    let slack = sorted(timed.iter().map(|r| r.slack).collect());
    let run = sorted(inside.iter().filter(|r| r.c_duration > 0).map(|r| r.run as i64).collect());
    let period = sorted(inside.iter().map(|r| r.end - r.start).collect());
    Summary {
        iterations: inside.len(),
        cpu_share,
        wu_lat_p50_us: us(quantile(&slept, 0.5)),
        wu_lat_p99_us: us(quantile(&slept, 0.99)),
        slack_p50_us: us(quantile(&slack, 0.5)),
        slack_p1_us: us(quantile(&slack, 0.01)),
        timed: timed.len(),
        missed: timed.iter().filter(|r| r.missed()).count(),
        run_p50_us: us(quantile(&run, 0.5)),
        run_p99_us: us(quantile(&run, 0.99)),
        period_p50_us: us(quantile(&period, 0.5)),
        period_p99_us: us(quantile(&period, 0.99)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_rt_apps_log_and_refuses_a_torn_line() {
        let text = "# Policy : SCHED_OTHER priority : 0\n#idx     perf      run   period           start             end          rel_st      slack c_duration   c_period     wu_lat\n   0   133333     2129    10048      5100573472      5100583520            1370       6763       2000      10000       1155\n   0   133333     7237     7237      5100706165      5100713403          134064      -1038       2000      10000          0\n";
        let rows = parse_log(text).unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!(
            rows[0],
            RawRow { run: 2129, start_us: 5100573472, end_us: 5100583520, slack: 6763, c_duration: 2000, c_period: 10000, wu_lat: 1155 }
        );
        let rel = relative(&rows, 5_100_573_000_000);
        assert_eq!((rel[0].start, rel[0].end, rel[0].run, rel[1].slack), (472_000, 10_520_000, 2_129_000, -1_038_000));
        assert!(rel[1].missed() && !rel[0].missed());
        let e = parse_log("#h\n 0 1 2 3 4 5\n").unwrap_err();
        assert!(e.starts_with("line 2: 6 columns"), "{e}");
        let e = parse_log(" 0 1 x 3 4 5 6 7 8 9 10\n").unwrap_err();
        assert!(e.contains("column 3 is `x`"), "{e}");
    }

    #[test]
    fn a_summary_counts_misses_and_takes_latency_only_where_the_thread_slept() {
        let row = |start: i64, run: u64, slack: i64, wu: u64| LogRow {
            start: start * 1000,
            end: (start + 10_000) * 1000,
            run: run * 1000,
            slack: slack * 1000,
            c_duration: 2_000_000,
            c_period: 10_000_000,
            wu_lat: wu * 1000,
        };
        // µs: four iterations in the window, one past it; one missed (slack < 0, no sleep)
        let rows = [
            row(0, 2000, 8000, 50),
            row(10_000, 2100, 7900, 70),
            row(20_000, 12_000, -2000, 0),
            row(30_000, 2000, 8000, 60),
            row(95_000, 1, 1, 1),
        ];
        let s = summarize(&rows, 100_000_000, 0.25);
        assert_eq!((s.iterations, s.timed, s.missed), (4, 4, 1));
        assert_eq!((s.wu_lat_p50_us, s.wu_lat_p99_us), (Some(60.0), Some(70.0)), "the missed row's 0 is not a latency");
        assert_eq!((s.slack_p50_us, s.slack_p1_us), (Some(7900.0), Some(-2000.0)));
        assert_eq!((s.run_p50_us, s.run_p99_us), (Some(2000.0), Some(12_000.0)));
        assert_eq!((s.period_p50_us, s.period_p99_us), (Some(10_000.0), Some(10_000.0)));
        assert_eq!(s.cpu_share, 0.25);
        let empty = summarize(&[], 1, 0.0);
        assert_eq!((empty.iterations, empty.wu_lat_p50_us), (0, None));
    }
}
