//! `vassal repro`: runs the experiments kept under experiments/ and compares each result
//! with the paper's value.
//!
//! An experiment file is a scenario (docs/scenario.md) plus `[[expect]]` rows:
//!
//! ```toml
//! [[expect]]
//! id = "baseline.rr.share.spread"   # stable row id
//! metric = "tasks.share.spread"      # what to measure (the metric language: `metric.rs`)
//! paper = 0.0                        # the paper's (or textbook's) value
//! tolerance = 0.01                   # allowed difference
//! compare = "within"                 # "within": |ours - paper| <= tolerance (default)
//!                                    # "at_most": ours <= paper + tolerance
//!                                    # "at_least": ours >= paper - tolerance
//! why = "RR gives equal shares; 1% covers the last partial quantum"
//! known_difference = "..."           # optional: ours is known to differ, and why
//! inconsistent = { implies = 5.0, why = "..." }  # optional: the paper contradicts
//!                                    # itself; ours is judged against what its own
//!                                    # numbers imply
//! ```

use std::path::{Path, PathBuf};

use std::collections::BTreeMap;

use serde::Deserialize;
use vassal_sim::scenario::parse_scenario;

use crate::expect::{Expect, ExperimentRun, Row, SimRun};
use crate::metric;

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
        e.validate().map_err(|m| format!("{}: {m}", path.display()))?;
    }
    Ok((text, table, parsed.expect))
}

/// Reads the `[[expect]]` rows of an experiment file.
pub fn read_expects(path: &Path) -> Result<Vec<Expect>, String> {
    read_experiment(path).map(|(_, _, expects)| expects)
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

/// The input of `kind = "bvt_plan"` (paper 001 §6.1).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BvtPlanInput {
    /// "bvt_plan", read by `computed_metrics`.
    #[serde(rename = "kind")]
    _kind: String,
    /// Percent: integers, decimals or strings like "100/3" (`plan::parse_share`).
    #[serde(default)]
    shares: Vec<toml::Value>,
    c_mcu: u64,
    mcu: Option<String>,
    #[serde(default)]
    priorities: Vec<u32>,
    #[serde(default)]
    warp_limits: Vec<String>,
}

/// `kind = "bvt_plan"` (paper 001 §6.1): `shares` (percent: integers, decimals or strings
/// like "100/3"), `c_mcu` (C in mcu), optional `mcu` ("10ms"), `priorities` and
/// `warp_limits` (durations, "0ms" = no limit). Metrics: see
/// [`vassal_policies::bvt::plan::metrics`].
fn bvt_plan_metrics(input: &toml::Table) -> Result<BTreeMap<String, f64>, String> {
    use vassal_policies::bvt::plan as bvt_plan;
    let input: BvtPlanInput = input.clone().try_into().map_err(|e: toml::de::Error| format!("bvt_plan: {}", e.message()))?;
    let shares = input
        .shares
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
    let mcu = match &input.mcu {
        None => 10 * vassal_core::MS,
        Some(s) => vassal_core::parse_duration(s).map_err(|e| format!("bvt_plan: mcu: {e}"))?,
    };
    let limits = input
        .warp_limits
        .iter()
        .map(|s| vassal_core::parse_duration(s).map_err(|e| format!("bvt_plan: warp limit: {e}")))
        .collect::<Result<Vec<_>, _>>()?;
    let plan = bvt_plan::plan(&shares, input.c_mcu, &input.priorities, &limits, mcu)?;
    Ok(bvt_plan::metrics(&plan).into_iter().map(|(k, v)| (k, v as f64)).collect())
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
    // Every row's expression parses before anything runs (no axes: not a sweep).
    let exprs = expects
        .iter()
        .map(|e| metric::parse(&e.metric, &[]).map_err(|m| format!("{}: expect '{}': {m}", path.display(), e.id)))
        .collect::<Result<Vec<_>, _>>()?;
    let scenario = parse_scenario(&text, &path.display().to_string()).map_err(|e| e.to_string())?;
    let mut sim =
        vassal_sim::Sim::with_registry(scenario.clone(), &crate::workloads::registry()).map_err(|e| format!("{}: {e}", path.display()))?;
    if trace || exprs.iter().flat_map(metric::paths).any(|p| p.starts_with("trace.")) {
        sim.record_trace();
    }
    let (report, trace) = sim.run_traced().map_err(|e| format!("{}: {e}", path.display()))?;
    let run = metric::Run { scenario: &scenario, report: &report, trace: &trace };
    let rows = expects
        .iter()
        .zip(&exprs)
        .map(|(e, x)| metric::eval(x, &run).map(|ours| e.judge(ours)).map_err(|m| format!("{}: expect '{}': {m}", path.display(), e.id)))
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
