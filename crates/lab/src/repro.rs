//! `vassal repro`: runs the experiments kept under experiments/ and compares each result
//! with the paper's value.
//!
//! An experiment file is a scenario (docs/scenario.md) plus `[[expect]]` rows:
//!
//! ```toml
//! [[expect]]
//! id = "baseline.rr.share.spread"   # stable row id
//! metric = "tasks.share.spread"      # what to measure in the report (see `metric`)
//! paper = 0.0                        # the paper's (or textbook's) value
//! tolerance = 0.01                   # allowed difference
//! compare = "abs"                    # "abs": |ours - paper| <= tolerance (default)
//!                                    # "at_most": ours <= paper + tolerance
//!                                    # "at_least": ours >= paper - tolerance
//! why = "RR gives equal shares; 1% covers the last partial quantum"
//! known_difference = "..."           # optional: ours is known to differ, and why
//! ```

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use std::collections::BTreeMap;

use vassal_sim::engine::Trace;
use vassal_sim::model::Scenario;
use vassal_sim::report::{Report, TaskReport};
use vassal_sim::scenario::parse_scenario;

#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Compare {
    #[default]
    Abs,
    AtMost,
    AtLeast,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Expect {
    pub id: String,
    pub metric: String,
    pub paper: f64,
    pub tolerance: f64,
    #[serde(default)]
    pub compare: Compare,
    pub why: String,
    /// Set when ours is known not to match the paper, with the explanation: the row is
    /// still computed, printed ("DIFFERS") and reported with `pass: false`, but does not
    /// make `vassal repro` exit non-zero. A finding, shown on every run — not hidden.
    #[serde(default)]
    pub known_difference: Option<String>,
}

/// One result row. `--json` prints an array of these with exactly these keys.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Row {
    pub id: String,
    pub paper: f64,
    pub ours: f64,
    pub tolerance: f64,
    pub pass: bool,
    /// The explanation of a known difference from the paper (not in the JSON).
    #[serde(skip)]
    pub known_difference: Option<String>,
}

#[derive(Deserialize)]
struct ExpectsOnly {
    #[serde(default)]
    expect: Vec<Expect>,
}

/// Reads an experiment file once: its text, its TOML table and its `[[expect]]` rows.
fn read_experiment(path: &Path) -> Result<(String, toml::Table, Vec<Expect>), String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let table: toml::Table = toml::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    let only: toml::Table = table.get("expect").map(|e| [("expect".to_string(), e.clone())].into_iter().collect()).unwrap_or_default();
    let parsed: ExpectsOnly = only.try_into().map_err(|e: toml::de::Error| format!("{}: [[expect]]: {e}", path.display()))?;
    if parsed.expect.is_empty() {
        return Err(format!("{}: an experiment needs at least one [[expect]] row", path.display()));
    }
    for e in &parsed.expect {
        if !e.paper.is_finite() || !e.tolerance.is_finite() || e.tolerance < 0.0 {
            return Err(format!("{}: expect '{}': paper and tolerance must be finite, tolerance >= 0", path.display(), e.id));
        }
    }
    Ok((text, table, parsed.expect))
}

/// Reads the `[[expect]]` rows of an experiment file.
pub fn read_expects(path: &Path) -> Result<Vec<Expect>, String> {
    read_experiment(path).map(|(_, _, expects)| expects)
}

fn task_field(t: &TaskReport, field: &str) -> Result<f64, String> {
    let ms = |ns: u64| ns as f64 / 1e6;
    Ok(match field {
        "share" => t.share,
        "cpu_frac" => t.cpu_frac,
        "cpu_ms" => ms(t.cpu_ns),
        "latency_p50_ms" => ms(t.latency.p50_ns),
        "latency_p99_ms" => ms(t.latency.p99_ns),
        "latency_max_ms" => ms(t.latency.max_ns),
        "latency_mean_ms" => ms(t.latency.mean_ns),
        "response_p50_ms" => ms(t.response.p50_ns),
        "response_p99_ms" => ms(t.response.p99_ns),
        "response_max_ms" => ms(t.response.max_ns),
        "response_mean_ms" => ms(t.response.mean_ns),
        "responses" => t.response.count as f64,
        "jobs_met" => t.jobs_met as f64,
        "jobs_missed" => t.jobs_missed as f64,
        "miss_ratio" => {
            let n = t.jobs_met + t.jobs_missed;
            if n == 0 {
                0.0
            } else {
                t.jobs_missed as f64 / n as f64
            }
        }
        "lateness_max_ms" => ms(t.lateness.max_ns),
        "switches" => t.switches as f64,
        "migrations" => t.migrations as f64,
        "iterations" => t.iterations.count as f64,
        "iter_min_us" => t.iterations.min_ns as f64 / 1e3,
        "iter_max_us" => t.iterations.max_ns as f64 / 1e3,
        "iter_mean_us" => t.iterations.mean_ns as f64 / 1e3,
        "iter_sd_us" => t.iterations.sd_ns as f64 / 1e3,
        _ => return Err(format!("unknown task metric '{field}'")),
    })
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
///   swapper_runs, swap_idle_s, user_util, last_exit_s) and `kernel.exit_s.TASK`
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
                "user_util" => k.user_util,
                "last_exit_s" => k.last_exit_ns.ok_or("no task exited")? as f64 / 1e9,
                _ => return Err(format!("unknown kernel field '{field}'")),
            })
        }
        _ => Err("expected task.NAME.FIELD, tasks.FIELD.AGG, group.PREFIX.FIELD.AGG, cpu.N.utilisation, cpus.utilisation.AGG, deadlines.PREFIX.made, totals.FIELD, kernel.FIELD or kernel.exit_s.TASK".into()),
    };
    r.map_err(|e| format!("metric '{path}': {e}"))
}

impl Expect {
    pub fn judge(&self, ours: f64) -> Row {
        let pass = ours.is_finite()
            && match self.compare {
                Compare::Abs => (ours - self.paper).abs() <= self.tolerance + 1e-12,
                Compare::AtMost => ours <= self.paper + self.tolerance + 1e-12,
                Compare::AtLeast => ours >= self.paper - self.tolerance - 1e-12,
            };
        Row {
            id: self.id.clone(),
            paper: self.paper,
            ours,
            tolerance: self.tolerance,
            pass,
            known_difference: if pass { None } else { self.known_difference.clone() },
        }
    }
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
fn trace_metric(sc: &Scenario, trace: &Trace, path: &str) -> Result<f64, String> {
    match path.split('.').collect::<Vec<_>>().as_slice() {
        ["trace", "lag", prefix, "max_ms"] => fair_share_lag(sc, trace, prefix),
        _ => Err(format!("metric '{path}': expected trace.lag.PREFIX.max_ms")),
    }
}

/// Experiments computed without a simulation: the file has a `[computed]` table whose
/// `kind` names the computation; the rest of the table is its input.
fn computed_metrics(kind: &str, input: &toml::Table) -> Result<BTreeMap<String, f64>, String> {
    match kind {
        "bvt_plan" => bvt_plan_metrics(input),
        "rtserver_table" => crate::rtserver_repro::table_metrics(input),
        "rtserver_admission" => crate::rtserver_repro::admission_metrics(input),
        _ => Err(format!("unknown computed experiment kind '{kind}'")),
    }
}

/// `kind = "bvt_plan"` (paper 001 §6.1): `shares` (percent: integers, decimals or strings
/// like "100/3"), `c_mcu` (C in mcu), optional `mcu` ("10ms"), `priorities` and
/// `warp_limits` (durations, "0ms" = no limit). Metrics: see
/// [`vassal_policies::bvt::plan::metrics`].
fn bvt_plan_metrics(input: &toml::Table) -> Result<BTreeMap<String, f64>, String> {
    use vassal_policies::bvt::plan as bvt_plan;
    for k in input.keys() {
        if !["kind", "shares", "c_mcu", "mcu", "priorities", "warp_limits"].contains(&k.as_str()) {
            return Err(format!("bvt_plan: unknown input '{k}' (expected shares, c_mcu, mcu, priorities, warp_limits)"));
        }
    }
    let array = |key: &str| -> Result<Vec<toml::Value>, String> {
        match input.get(key) {
            None => Ok(Vec::new()),
            Some(toml::Value::Array(a)) => Ok(a.clone()),
            Some(v) => Err(format!("bvt_plan: '{key}' must be an array, found {v}")),
        }
    };
    let shares = array("shares")?
        .iter()
        .map(|v| match v {
            toml::Value::Integer(i) if *i >= 0 => bvt_plan::parse_share(&i.to_string()),
            // A decimal is read from its shortest exact text (12.5 → 25/2); NaN and
            // infinities are refused by the parser.
            toml::Value::Float(f) => bvt_plan::parse_share(&f.to_string()),
            toml::Value::String(s) => bvt_plan::parse_share(s),
            other => Err(format!("bvt_plan: share {other} is not a non-negative number")),
        })
        .collect::<Result<Vec<_>, _>>()?;
    let c_mcu = match input.get("c_mcu") {
        Some(toml::Value::Integer(i)) if *i >= 0 => *i as u64,
        Some(v) => return Err(format!("bvt_plan: 'c_mcu' must be a non-negative integer, found {v}")),
        None => return Err("bvt_plan: needs c_mcu (C in mcu)".into()),
    };
    let mcu = match input.get("mcu") {
        None => 10 * vassal_core::MS,
        Some(toml::Value::String(s)) => vassal_core::parse_duration(s).map_err(|e| format!("bvt_plan: mcu: {e}"))?,
        Some(v) => return Err(format!("bvt_plan: 'mcu' must be a duration like \"10ms\", found {v}")),
    };
    let priorities = array("priorities")?
        .iter()
        .map(|v| match v {
            toml::Value::Integer(i) if (0..=u32::MAX as i64).contains(i) => Ok(*i as u32),
            other => Err(format!("bvt_plan: priority {other} is not a non-negative integer")),
        })
        .collect::<Result<Vec<_>, _>>()?;
    let limits = array("warp_limits")?
        .iter()
        .map(|v| match v {
            toml::Value::String(s) => vassal_core::parse_duration(s).map_err(|e| format!("bvt_plan: warp limit: {e}")),
            other => Err(format!("bvt_plan: warp limit {other} must be a duration like \"20ms\"")),
        })
        .collect::<Result<Vec<_>, _>>()?;
    let plan = bvt_plan::plan(&shares, c_mcu, &priorities, &limits, mcu)?;
    Ok(bvt_plan::metrics(&plan).into_iter().map(|(k, v)| (k, v as f64)).collect())
}

/// A simulated experiment's run, kept for reports.
pub struct SimRun {
    pub scenario: Scenario,
    pub report: Report,
    /// Recorded when asked for (see [`run_experiment_full`]) or when a row needs it.
    pub trace: Trace,
}

/// One experiment file's results with what produced them (for `repro --report`).
pub struct ExperimentRun {
    pub path: PathBuf,
    /// The file's leading comment block (its description), without the `#`s.
    pub description: String,
    pub expects: Vec<Expect>,
    /// One per expect, in the same order.
    pub rows: Vec<Row>,
    /// None for computed experiments and sweeps.
    pub run: Option<SimRun>,
    /// A sweep's plots (inline SVG), one per metric it lists.
    pub plots: Vec<String>,
}

/// The comment lines at the top of an experiment file, `#` and one space removed.
fn leading_comment(text: &str) -> String {
    text.lines()
        .take_while(|l| l.trim_start().starts_with('#'))
        .map(|l| l.trim_start().trim_start_matches('#').strip_prefix(' ').unwrap_or(l.trim_start().trim_start_matches('#')))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Runs one experiment file: its scenario (or computation), then each `[[expect]]` row.
pub fn run_experiment(path: &Path) -> Result<Vec<Row>, String> {
    run_experiment_full(path, false).map(|r| r.rows)
}

/// Like [`run_experiment`], and keeps the run; `trace`: record its trace even when no row
/// needs one.
pub fn run_experiment_full(path: &Path, trace: bool) -> Result<ExperimentRun, String> {
    let (text, table, expects) = read_experiment(path)?;
    let description = leading_comment(&text);
    if let Some(computed) = table.get("computed") {
        let input = computed.as_table().ok_or_else(|| format!("{}: [computed] must be a table", path.display()))?;
        let kind =
            input.get("kind").and_then(|k| k.as_str()).ok_or_else(|| format!("{}: [computed] needs kind = \"...\"", path.display()))?;
        let values = computed_metrics(kind, input).map_err(|e| format!("{}: {e}", path.display()))?;
        let rows = expects
            .iter()
            .map(|e| {
                values.get(&e.metric).map(|&v| e.judge(v)).ok_or_else(|| {
                    format!(
                        "{}: expect '{}': {kind} computes no '{}' (it has: {})",
                        path.display(),
                        e.id,
                        e.metric,
                        values.keys().cloned().collect::<Vec<_>>().join(", ")
                    )
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        return Ok(ExperimentRun { path: path.to_path_buf(), description, expects, rows, run: None, plots: Vec::new() });
    }
    if crate::sweep::is_sweep(&table) {
        let (rows, plots) = crate::sweep::expect_rows(path, &table, &expects)?;
        return Ok(ExperimentRun { path: path.to_path_buf(), description, expects, rows, run: None, plots });
    }
    let scenario = parse_scenario(&text, &path.display().to_string()).map_err(|e| e.to_string())?;
    let mut sim = vassal_sim::Sim::new(scenario.clone()).map_err(|e| format!("{}: {e}", path.display()))?;
    if trace || expects.iter().any(|e| e.metric.starts_with("trace.")) {
        sim.record_trace();
    }
    let (report, trace) = sim.run_traced().map_err(|e| format!("{}: {e}", path.display()))?;
    let rows = expects
        .iter()
        .map(|e| {
            let v = if e.metric.starts_with("trace.") { trace_metric(&scenario, &trace, &e.metric) } else { metric(&report, &e.metric) };
            v.map(|ours| e.judge(ours)).map_err(|m| format!("{}: expect '{}': {m}", path.display(), e.id))
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(ExperimentRun {
        path: path.to_path_buf(),
        description,
        expects,
        rows,
        run: Some(SimRun { scenario, report, trace }),
        plots: Vec::new(),
    })
}

/// Every experiment file under `dir`, sorted, whose group (first directory), file stem
/// or any row id starts with one of `names` (all when `names` is empty).
pub fn find_experiments(dir: &Path, names: &[String]) -> Result<Vec<PathBuf>, String> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let entries = std::fs::read_dir(&d).map_err(|e| format!("{}: {e}", d.display()))?;
        for e in entries {
            let p = e.map_err(|e| e.to_string())?.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "toml") {
                files.push(p);
            }
        }
    }
    files.sort();
    if names.is_empty() {
        return Ok(files);
    }
    let mut out = Vec::new();
    for f in files {
        let rel = f.strip_prefix(dir).unwrap_or(&f).to_string_lossy().replace('\\', "/");
        let ids = read_expects(&f)?.into_iter().map(|e| e.id).collect::<Vec<_>>();
        if names.iter().any(|n| rel.starts_with(n.as_str()) || ids.iter().any(|id| id.starts_with(n.as_str()))) {
            out.push(f);
        }
    }
    Ok(out)
}
