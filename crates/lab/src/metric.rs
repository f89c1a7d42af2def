//! The metric language of experiments and sweeps: what a row's `metric` (and a sweep's
//! `metrics`) reads from runs. One language for `vassal repro` and `vassal sweep`,
//! described once in docs/repro.md ("Metrics"):
//!
//! - a *path* names one number of a run: of its report (`task.NAME.FIELD`,
//!   `tasks.FIELD.AGG`, `kernel.swap_outs`, ...; see [`metric`]) or of its trace
//!   (`trace.lag.PREFIX.max_ms`; see [`trace_metric`]);
//! - an *expression* ([`parse`], [`eval`]) combines paths with numbers, `+ - * /` and
//!   parentheses; in a sweep a path may name its variant (`METRIC[VARIANT]`) and
//!   `crossing(AXIS, SERIES, REFERENCE)` finds where a curve falls below another.
//!
//! Where the metrics come from is the caller's [`Scope`]: one run ([`Run`]) or a sweep's
//! variants (`sweep.rs`). A lone path is an expression whose value is the path's.

use std::collections::BTreeMap;

use vassal_sim::engine::Trace;
use vassal_sim::model::Scenario;
use vassal_sim::report::{Report, TaskReport};

/// A task's FIELD: the task report's own names (`TaskReport::field`).
fn task_field(t: &TaskReport, field: &str) -> Result<f64, String> {
    t.field(field).ok_or_else(|| format!("unknown task metric '{field}'"))
}

fn aggregate(values: &[f64], agg: &str) -> Result<f64, String> {
    if values.is_empty() {
        return Err("no tasks match".into());
    }
    let min = values.iter().cloned().fold(f64::INFINITY, f64::min);
    let max = values.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let sum: f64 = values.iter().sum();
    Ok(match agg {
        "min" => min,
        "max" => max,
        "sum" => sum,
        "mean" => sum / values.len() as f64,
        "spread" => max - min,
        _ => return Err(format!("unknown aggregate '{agg}'; expected min, max, sum, mean or spread")),
    })
}

/// Reads a metric from a report. Paths:
/// - `task.NAME.FIELD` — one task (FIELD: share, cpu_frac, cpu_ms, latency_{p50,p99,max,mean}_ms,
///   response_{p50,p99,max,mean}_ms, responses, jobs_met, jobs_missed, miss_ratio,
///   lateness_max_ms, switches, migrations, iterations, iter_{min,max,mean,sd}_us)
/// - `tasks.FIELD.AGG` — over all tasks; `group.PREFIX.FIELD.AGG` — over tasks whose name
///   starts with PREFIX (AGG: min, max, sum, mean, spread)
/// - `deadlines.PREFIX.made` — the fraction of deadlines made (jobs met over jobs met or
///   missed), pooled over the tasks whose names start with PREFIX
/// - `cpu.N.utilisation`, `cpus.utilisation.AGG`
/// - `totals.FIELD` (events, decisions, switches, migrations, refused_decisions, overhead_ms)
/// - `kernel.FIELD` (paper 004's counts: dispatches, syscalls, swap_ins, swap_outs,
///   swapper_runs, swap_idle_s, swap_cpu_s, growth_swaps, resident_mean, user_util, last_exit_s) and `kernel.exit_s.TASK`
pub fn metric(report: &Report, path: &str) -> Result<f64, String> {
    let parts: Vec<&str> = path.split('.').collect();
    let r = match parts.as_slice() {
        ["task", name, field] => {
            let t = report.task(name).ok_or_else(|| format!("no task named '{name}'"))?;
            task_field(t, field)
        }
        ["tasks", field, agg] => {
            let v = report.tasks.iter().map(|t| task_field(t, field)).collect::<Result<Vec<_>, _>>()?;
            aggregate(&v, agg)
        }
        ["group", prefix, field, agg] => {
            let v = report
                .tasks
                .iter()
                .filter(|t| t.name.starts_with(prefix))
                .map(|t| task_field(t, field))
                .collect::<Result<Vec<_>, _>>()?;
            aggregate(&v, agg)
        }
        ["deadlines", prefix, "made"] => {
            // Pooled over the tasks: deadlines made / deadlines due (paper 001 Fig. 5).
            let (met, due) = report
                .tasks
                .iter()
                .filter(|t| t.name.starts_with(prefix))
                .fold((0u64, 0u64), |(m, d), t| (m + t.jobs_met, d + t.jobs_met + t.jobs_missed));
            if due == 0 { Err(format!("no deadlines of tasks named {prefix}*")) } else { Ok(met as f64 / due as f64) }
        }
        ["cpu", n, "utilisation"] => {
            let n: usize = n.parse().map_err(|_| format!("'{n}' is not a CPU number"))?;
            report.cpus.get(n).map(|c| c.utilisation).ok_or_else(|| format!("no cpu {n}"))
        }
        ["cpus", "utilisation", agg] => aggregate(&report.cpus.iter().map(|c| c.utilisation).collect::<Vec<_>>(), agg),
        ["totals", field] => {
            let t = &report.totals;
            Ok(match *field {
                "events" => t.events as f64,
                "decisions" => t.decisions as f64,
                "switches" => t.switches as f64,
                "migrations" => t.migrations as f64,
                "refused_decisions" => t.refused_decisions as f64,
                "overhead_ms" => t.overhead_ns as f64 / 1e6,
                _ => return Err(format!("unknown totals field '{field}'")),
            })
        }
        ["kernel", "exit_s", name] => {
            let m = report.kernel.images.iter().find(|m| m.name == *name).ok_or_else(|| format!("no image named '{name}'"))?;
            m.exit_ns.map(|e| e as f64 / 1e9).ok_or_else(|| format!("task '{name}' did not exit"))
        }
        ["kernel", field] => {
            let k = &report.kernel;
            Ok(match *field {
                "dispatches" => k.dispatches as f64,
                "syscalls" => k.syscalls as f64,
                "swap_ins" => k.swap_ins as f64,
                "swap_outs" => k.swap_outs as f64,
                "swapper_runs" => k.swapper_runs as f64,
                "swap_idle_s" => k.swap_idle_ns as f64 / 1e9,
                "swap_cpu_s" => k.swap_cpu_ns as f64 / 1e9,
                "growth_swaps" => k.growth_swaps as f64,
                "resident_mean" => k.resident_mean,
                "user_util" => k.user_util,
                "last_exit_s" => k.last_exit_ns.ok_or("no task exited")? as f64 / 1e9,
                _ => return Err(format!("unknown kernel field '{field}'")),
            })
        }
        _ => Err("expected task.NAME.FIELD, tasks.FIELD.AGG, group.PREFIX.FIELD.AGG, cpu.N.utilisation, cpus.utilisation.AGG, deadlines.PREFIX.made, totals.FIELD, kernel.FIELD or kernel.exit_s.TASK".into()),
    };
    r.map_err(|e| format!("metric '{path}': {e}"))
}

/// The largest gap, at any slice boundary, between a task's CPU time and its weighted fair
/// share of the CPU time the group received (BVT Figure 1: "the error between fair share
/// and actual"), over tasks whose names start with `prefix`; weights from each task's
/// `weight` parameter (default 1). CPU time here is slice time, so switch costs count.
pub fn fair_share_lag(sc: &Scenario, trace: &Trace, prefix: &str) -> Result<f64, String> {
    let group: Vec<(usize, f64)> = sc
        .tasks
        .iter()
        .enumerate()
        .filter(|(_, t)| t.name.starts_with(prefix))
        .map(|(i, t)| (i, t.params.get("weight").copied().unwrap_or(1).max(1) as f64))
        .collect();
    if group.len() < 2 {
        return Err(format!("fair-share lag needs two or more tasks named {prefix}*"));
    }
    let total_w: f64 = group.iter().map(|(_, w)| w).sum();
    // Slice boundaries in time order: (time, task, +1 start / -1 end).
    let mut edges: Vec<(u64, usize, i8)> = Vec::new();
    for s in &trace.slices {
        if group.iter().any(|(i, _)| *i == s.task) {
            edges.push((s.start, s.task, 1));
            edges.push((s.end, s.task, -1));
        }
    }
    edges.sort();
    let mut cpu: BTreeMap<usize, f64> = BTreeMap::new();
    let mut running: BTreeMap<usize, u64> = BTreeMap::new();
    let mut worst: f64 = 0.0;
    for (at, task, kind) in edges {
        if kind > 0 {
            running.insert(task, at);
        } else if let Some(start) = running.remove(&task) {
            *cpu.entry(task).or_default() += (at - start) as f64;
        }
        // Measure only when no group task is mid-slice, so the accounts are complete.
        if running.is_empty() {
            let g: f64 = cpu.values().sum();
            for (i, w) in &group {
                let lag = (cpu.get(i).copied().unwrap_or(0.0) - w / total_w * g).abs();
                worst = worst.max(lag);
            }
        }
    }
    Ok(worst / 1e6)
}

/// Metrics that need the trace: `trace.lag.PREFIX.max_ms` (see [`fair_share_lag`]).
pub fn trace_metric(sc: &Scenario, trace: &Trace, path: &str) -> Result<f64, String> {
    match path.split('.').collect::<Vec<_>>().as_slice() {
        ["trace", "lag", prefix, "max_ms"] => fair_share_lag(sc, trace, prefix),
        _ => Err(format!("metric '{path}': expected trace.lag.PREFIX.max_ms")),
    }
}

/// Where an expression's metrics come from.
pub trait Scope {
    /// `path` (a METRIC), of `variant` where the expression names one; `star`: inside a
    /// crossing's series, its axis and the value standing for `*` in `variant`.
    fn metric(&self, path: &str, variant: Option<&str>, star: Option<(usize, &str)>) -> Result<f64, String>;
    /// The values of axis `axis`, in file order: each its `x` and name (for `crossing`).
    fn axis(&self, axis: usize) -> Result<Vec<(f64, &str)>, String>;
}

/// Evaluates `e` in `scope`.
pub fn eval(e: &Expr, scope: &dyn Scope) -> Result<f64, String> {
    eval_in(e, scope, None)
}

fn eval_in(e: &Expr, scope: &dyn Scope, star: Option<(usize, &str)>) -> Result<f64, String> {
    Ok(match e {
        Expr::Num(n) => *n,
        Expr::Metric { path, variant } => scope.metric(path, variant.as_deref(), star)?,
        Expr::Neg(a) => -eval_in(a, scope, star)?,
        Expr::Bin(op, a, b) => {
            let (a, b) = (eval_in(a, scope, star)?, eval_in(b, scope, star)?);
            match op {
                b'+' => a + b,
                b'-' => a - b,
                b'*' => a * b,
                _ => a / b,
            }
        }
        Expr::Crossing { axis, series, reference } => {
            let limit = eval_in(reference, scope, None)?;
            let mut points: Vec<(f64, f64)> = Vec::new();
            for (x, value) in scope.axis(*axis)? {
                points.push((x, eval_in(series, scope, Some((*axis, value)))?));
            }
            crossing(points, limit)
        }
    })
}

/// Every METRIC path `e` reads.
pub fn paths(e: &Expr) -> Vec<&str> {
    match e {
        Expr::Num(_) => Vec::new(),
        Expr::Metric { path, .. } => vec![path.as_str()],
        Expr::Neg(a) => paths(a),
        Expr::Bin(_, a, b) | Expr::Crossing { series: a, reference: b, .. } => [paths(a), paths(b)].concat(),
    }
}

/// The scope of a single run's expression (a simulated experiment's row): a bare METRIC
/// is the run's, read from its report (or, for `trace.` paths, its trace); naming a
/// variant needs a sweep.
pub struct Run<'a> {
    pub scenario: &'a Scenario,
    pub report: &'a Report,
    pub trace: &'a Trace,
}

impl Scope for Run<'_> {
    fn metric(&self, path: &str, variant: Option<&str>, _: Option<(usize, &str)>) -> Result<f64, String> {
        match variant {
            Some(v) => Err(format!("metric '{path}[{v}]': METRIC[VARIANT] is for sweeps (docs/sweep.md)")),
            None if path.starts_with("trace.") => trace_metric(self.scenario, self.trace, path),
            None => metric(self.report, path),
        }
    }

    fn axis(&self, _: usize) -> Result<Vec<(f64, &str)>, String> {
        Err("crossing(...) is for sweeps (docs/sweep.md)".into())
    }
}

/// True if some `METRIC[VARIANT]` of `e` has `*` in VARIANT.
pub fn has_star(e: &Expr) -> bool {
    match e {
        Expr::Num(_) | Expr::Crossing { .. } => false,
        Expr::Metric { variant, .. } => variant.as_ref().is_some_and(|v| v.contains('*')),
        Expr::Neg(a) => has_star(a),
        Expr::Bin(_, a, b) => has_star(a) || has_star(b),
    }
}

/// Along `points` (x, y), ordered by x, where y first falls below `limit`: the x of the
/// crossing, linearly interpolated between the two points around it (the first x if it
/// starts below; NaN if it never falls below).
fn crossing(mut points: Vec<(f64, f64)>, limit: f64) -> f64 {
    points.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut prev: Option<(f64, f64)> = None;
    for &(x, y) in &points {
        if y < limit {
            return match prev {
                None => x,
                Some((x0, y0)) => x0 + (x - x0) * (y0 - limit) / (y0 - y),
            };
        }
        prev = Some((x, y));
    }
    f64::NAN
}

/// An expression: numbers, `+ - * /`, unary minus, parentheses, `METRIC` (of the
/// variant at hand, where there is one) or `METRIC[VARIANT]` (the mean over VARIANT's
/// runs; METRIC a path as in [`metric`]), and `crossing(AXIS, SERIES, REFERENCE)`.
#[derive(Clone, Debug, PartialEq)]
pub enum Expr {
    Num(f64),
    Metric {
        path: String,
        variant: Option<String>,
    },
    Neg(Box<Expr>),
    Bin(u8, Box<Expr>, Box<Expr>),
    /// Along axis `axis` (values ordered by `x`), where SERIES — an expression whose
    /// variants have `*` in that axis's place — first falls below REFERENCE: the `x` at
    /// which it crosses, linearly interpolated (the first `x` if it starts below; NaN,
    /// which fails a row, if it never does).
    Crossing {
        axis: usize,
        series: Box<Expr>,
        reference: Box<Expr>,
    },
}

/// Parses an expression; `axes` are the axis names `crossing` may name.
pub fn parse(text: &str, axes: &[String]) -> Result<Expr, String> {
    let mut p = Parser { s: text.as_bytes(), i: 0, axes };
    let e = p.expr().map_err(|e| format!("expression '{text}': {e}"))?;
    p.ws();
    if p.i != p.s.len() {
        return Err(format!("expression '{text}': unexpected '{}' at column {}", &text[p.i..], p.i + 1));
    }
    Ok(e)
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
    axes: &'a [String],
}

impl Parser<'_> {
    fn ws(&mut self) {
        while self.i < self.s.len() && self.s[self.i].is_ascii_whitespace() {
            self.i += 1;
        }
    }
    fn peek(&mut self) -> Option<u8> {
        self.ws();
        self.s.get(self.i).copied()
    }
    fn expect(&mut self, c: u8) -> Result<(), String> {
        if self.peek() != Some(c) {
            return Err(format!("expected '{}' at column {}", c as char, self.i + 1));
        }
        self.i += 1;
        Ok(())
    }
    fn expr(&mut self) -> Result<Expr, String> {
        let mut v = self.term()?;
        while let Some(op @ (b'+' | b'-')) = self.peek() {
            self.i += 1;
            v = Expr::Bin(op, Box::new(v), Box::new(self.term()?));
        }
        Ok(v)
    }
    fn term(&mut self) -> Result<Expr, String> {
        let mut v = self.factor()?;
        while let Some(op @ (b'*' | b'/')) = self.peek() {
            self.i += 1;
            v = Expr::Bin(op, Box::new(v), Box::new(self.factor()?));
        }
        Ok(v)
    }
    fn word(&mut self) -> String {
        let start = self.i;
        while self.i < self.s.len() && (self.s[self.i].is_ascii_alphanumeric() || b"_.".contains(&self.s[self.i])) {
            self.i += 1;
        }
        String::from_utf8_lossy(&self.s[start..self.i]).into_owned()
    }
    fn factor(&mut self) -> Result<Expr, String> {
        match self.peek() {
            Some(b'(') => {
                self.i += 1;
                let v = self.expr()?;
                self.expect(b')')?;
                Ok(v)
            }
            Some(b'-') => {
                self.i += 1;
                Ok(Expr::Neg(Box::new(self.factor()?)))
            }
            Some(c) if c.is_ascii_digit() => {
                let start = self.i;
                while self.i < self.s.len() && (self.s[self.i].is_ascii_digit() || self.s[self.i] == b'.') {
                    self.i += 1;
                }
                let t = String::from_utf8_lossy(&self.s[start..self.i]).into_owned();
                t.parse::<f64>().map(Expr::Num).map_err(|_| format!("bad number '{t}'"))
            }
            Some(c) if c.is_ascii_alphabetic() => {
                let at = self.i + 1;
                let path = self.word();
                if path == "crossing" && self.peek() == Some(b'(') {
                    self.i += 1;
                    self.ws();
                    let name = self.word();
                    let axis = self
                        .axes
                        .iter()
                        .position(|a| *a == name)
                        .ok_or_else(|| format!("crossing: no axis '{name}' (axes: {})", self.axes.join(", ")))?;
                    self.expect(b',')?;
                    let series = self.expr()?;
                    self.expect(b',')?;
                    let reference = self.expr()?;
                    self.expect(b')')?;
                    return Ok(Expr::Crossing { axis, series: Box::new(series), reference: Box::new(reference) });
                }
                if path.ends_with('.') {
                    return Err(format!("metric '{path}' at column {at} ends with '.'"));
                }
                let variant = if self.s.get(self.i) == Some(&b'[') {
                    let close =
                        self.s[self.i..].iter().position(|&c| c == b']').ok_or(format!("missing ']' after column {}", self.i + 1))?;
                    let v = String::from_utf8_lossy(&self.s[self.i + 1..self.i + close]).trim().to_string();
                    self.i += close + 1;
                    Some(v)
                } else {
                    None
                };
                Ok(Expr::Metric { path, variant })
            }
            Some(c) => Err(format!("unexpected '{}' at column {}", c as char, self.i + 1)),
            None => Err("unexpected end".into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expressions_parse_with_precedence() {
        let ax = ["load".to_string()];
        let m = |p: &str, v: &str| Box::new(Expr::Metric { path: p.into(), variant: Some(v.into()) });
        assert_eq!(parse("a.b[x/1] / a.b[y/1]", &ax).unwrap(), Expr::Bin(b'/', m("a.b", "x/1"), m("a.b", "y/1")));
        let n = |v: f64| Box::new(Expr::Num(v));
        assert_eq!(parse("1 + 2 * 3", &ax).unwrap(), Expr::Bin(b'+', n(1.0), Box::new(Expr::Bin(b'*', n(2.0), n(3.0)))));
        assert_eq!(parse("(1 + 2) * 3", &ax).unwrap(), Expr::Bin(b'*', Box::new(Expr::Bin(b'+', n(1.0), n(2.0))), n(3.0)));
        assert_eq!(parse("-c", &ax).unwrap(), Expr::Neg(Box::new(Expr::Metric { path: "c".into(), variant: None })));
        assert_eq!(
            parse("crossing(load, m[*], m[r])", &ax).unwrap(),
            Expr::Crossing { axis: 0, series: m("m", "*"), reference: m("m", "r") }
        );
        for bad in ["1 +", "(1", "1 2", "a.b[x", "a.", "crossing(nope, a[*], b[r])", "crossing(load, a[*])", "#"] {
            assert!(parse(bad, &ax).is_err(), "{bad}");
        }
    }

    #[test]
    fn crossing_interpolates_and_is_nan_when_never_below() {
        assert_eq!(crossing(vec![(2.0, 0.8), (1.0, 0.9), (3.0, 0.7), (4.0, 0.6)], 0.75), 2.5);
        assert_eq!(crossing(vec![(1.0, 0.5), (2.0, 0.4)], 0.75), 1.0);
        assert!(crossing(vec![(1.0, 0.9), (2.0, 0.8)], 0.75).is_nan());
    }

    #[test]
    fn a_lone_path_is_an_expression_of_its_value() {
        for path in ["tasks.share.spread", "cpu.0.utilisation", "kernel.exit_s.ia", "trace.lag.t.max_ms", "task.t_1.iter_sd_us"] {
            assert_eq!(parse(path, &[]).unwrap(), Expr::Metric { path: path.into(), variant: None });
        }
        let e = parse("2 * task.a.share - trace.lag.t.max_ms", &[]).unwrap();
        assert_eq!(paths(&e), ["task.a.share", "trace.lag.t.max_ms"]);
        assert!(parse("crossing(x, a[*], b)", &[]).is_err(), "no axes outside a sweep");
    }
}
