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

use crate::expect::{Control, Expect, ExperimentRun, Row, SimRun, Status};
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

/// Reads the file's `[control]`, if any.
pub fn read_control(path: &Path, table: &toml::Table) -> Result<Option<Control>, String> {
    let Some(c) = table.get("control") else { return Ok(None) };
    let what = format!("{}: [control]", path.display());
    let c = c.as_table().ok_or_else(|| format!("{what} must be a table"))?;
    if let Some(k) = c.keys().find(|k| !["name", "why", "set", "replace", "file"].contains(&k.as_str())) {
        return Err(format!("{what}: unknown key `{k}` (expected name, why, set, replace, file)"));
    }
    let text = |k: &str| -> Result<String, String> {
        c.get(k).and_then(|v| v.as_str()).filter(|s| !s.is_empty()).map(str::to_string).ok_or_else(|| format!("{what} needs {k} = \"...\""))
    };
    let table_of = |k: &str| -> Result<Vec<(String, toml::Value)>, String> {
        match c.get(k) {
            None => Ok(Vec::new()),
            Some(toml::Value::Table(t)) => Ok(t.iter().map(|(k, v)| (k.clone(), v.clone())).collect()),
            Some(_) => Err(format!("{what}: {k} must be a table of \"dotted.path\" = value")),
        }
    };
    let replace = table_of("replace")?
        .into_iter()
        .map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_string())).ok_or_else(|| format!("{what}: replace.\"{k}\" must name a value")))
        .collect::<Result<Vec<_>, _>>()?;
    let file = match c.get("file") {
        None => None,
        Some(toml::Value::String(f)) => Some(path.parent().unwrap_or(Path::new("")).join(f)),
        Some(v) => return Err(format!("{what}: file must be a file name, found {v}")),
    };
    let control = Control { name: text("name")?, why: text("why")?, file, set: table_of("set")?, replace };
    if control.set.is_empty() && control.replace.is_empty() && control.file.is_none() {
        return Err(format!("{what} changes nothing: give set, replace or file"));
    }
    if !control.replace.is_empty() && !crate::sweep::is_sweep(table) {
        return Err(format!("{what}: replace is for sweeps (AXIS.VALUE); use set"));
    }
    if control.file.is_some() && crate::sweep::is_sweep(table) {
        return Err(format!("{what}: file is not for sweeps; use set or replace"));
    }
    Ok(Some(control))
}

/// How to run an experiment: as written, or as its control, or with another seed.
#[derive(Clone, Copy, Default)]
pub struct Mode<'a> {
    pub control: Option<&'a Control>,
    /// Every run with this seed instead of the file's (a sweep: its `seeds` replaced).
    pub seed: Option<u64>,
    /// Record the simulated run's trace even when no row needs one.
    pub trace: bool,
    /// A sweep's runs already made (by scenario and seed), not to be made again.
    pub known: Option<&'a crate::sweep::Known>,
}

/// What evaluating an experiment's rows gives: a value per row, and what produced them.
struct Values {
    values: Vec<f64>,
    run: Option<SimRun>,
    plots: Vec<String>,
    /// A sweep's runs, for its control to reuse where a variant is unchanged.
    known: crate::sweep::Known,
}

/// The value of every `[[expect]]` row of the experiment `table` (the file `path`, its
/// text `text`), run as `mode` says.
fn row_values(path: &Path, text: &str, table: &toml::Table, expects: &[Expect], mode: Mode) -> Result<Values, String> {
    let mut table = table.clone();
    // A control from another file: that file's scenario or computation in place of ours.
    if let Some(other) = mode.control.and_then(|c| c.file.as_ref()) {
        let (_, mut t, _) = read_experiment(other).map_err(|e| format!("{}: [control] file: {e}", path.display()))?;
        if crate::sweep::is_sweep(&t) {
            return Err(format!("{}: [control] file {} is a sweep", path.display(), other.display()));
        }
        t.remove("expect");
        t.remove("control");
        table = t;
    }
    let controlled = |t: &mut toml::Table| -> Result<(), String> {
        if let Some(c) = mode.control {
            for (p, v) in &c.set {
                crate::sweep::set_path(t, p, v).map_err(|e| format!("{}: [control] set \"{p}\": {e}", path.display()))?;
            }
        }
        Ok(())
    };
    if let Some(computed) = table.get("computed") {
        computed.as_table().ok_or_else(|| format!("{}: [computed] must be a table", path.display()))?;
        controlled(&mut table)?;
        let input = table["computed"].as_table().ok_or_else(|| format!("{}: [computed] must be a table", path.display()))?;
        let kind =
            input.get("kind").and_then(|k| k.as_str()).ok_or_else(|| format!("{}: [computed] needs kind = \"...\"", path.display()))?;
        let values = computed_metrics(kind, input).map_err(|e| format!("{}: {e}", path.display()))?;
        let values = expects
            .iter()
            .map(|e| {
                // A control's computation may not compute a row's value (another
                // admission test has no equation to name): NaN, which meets no row.
                let missing = if mode.control.is_some() { Some(f64::NAN) } else { None };
                values.get(&e.metric).copied().or(missing).ok_or_else(|| {
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
        return Ok(Values { values, run: None, plots: Vec::new(), known: Default::default() });
    }
    if crate::sweep::is_sweep(&table) {
        let file = path.display().to_string();
        let mut sweep = crate::sweep::Sweep::from_table(&file, &table)?;
        if let Some(c) = mode.control {
            sweep = sweep.with_control(&c.set, &c.replace)?;
        }
        if let Some(seed) = mode.seed {
            sweep.seeds = vec![seed];
        }
        let known = mode.known.cloned().unwrap_or_default();
        let (values, plots, known) = crate::sweep::expect_values(&sweep, expects, mode.control.is_none() && mode.seed.is_none(), &known)?;
        return Ok(Values { values, run: None, plots, known });
    }
    // Every row's expression parses before anything runs (no axes: not a sweep).
    let exprs = expects
        .iter()
        .map(|e| metric::parse(&e.metric, &[]).map_err(|m| format!("{}: expect '{}': {m}", path.display(), e.id)))
        .collect::<Result<Vec<_>, _>>()?;
    let seeds: Vec<u64> = match table.get("seeds") {
        None => Vec::new(),
        Some(toml::Value::Array(a)) if !a.is_empty() => a
            .iter()
            .map(|v| {
                v.as_integer()
                    .filter(|&i| i >= 0)
                    .map(|i| i as u64)
                    .ok_or_else(|| format!("{}: seeds must be integers >= 0, found {v}", path.display()))
            })
            .collect::<Result<_, _>>()?,
        Some(v) => return Err(format!("{}: seeds must be a non-empty array of integers, found {v}", path.display())),
    };
    let scenario = if mode.control.is_some() {
        controlled(&mut table)?;
        table.remove("control");
        let doc = crate::sweep::scenario_text(&table).map_err(|e| format!("{}: [control]: {e}", path.display()))?;
        parse_scenario(&doc, &format!("{} [control]", path.display())).map_err(|e| e.to_string())?
    } else {
        parse_scenario(text, &path.display().to_string()).map_err(|e| e.to_string())?
    };
    // The seeds to run: the mode's one, the file's list (rows are means over them), or
    // the scenario's own.
    let seeds = match mode.seed {
        Some(s) => vec![s],
        None if seeds.is_empty() => vec![scenario.seed],
        None => seeds,
    };
    let mut sums = vec![0.0; expects.len()];
    let mut first: Option<SimRun> = None;
    for &seed in &seeds {
        let mut sc = scenario.clone();
        sc.seed = seed;
        let mut sim =
            vassal_sim::Sim::with_registry(sc.clone(), &crate::workloads::registry()).map_err(|e| format!("{}: {e}", path.display()))?;
        if (mode.trace && first.is_none()) || exprs.iter().flat_map(metric::paths).any(|p| p.starts_with("trace.")) {
            sim.record_trace();
        }
        let (report, trace) = sim.run_traced().map_err(|e| format!("{}: seed {seed}: {e}", path.display()))?;
        let run = metric::Run { scenario: &sc, report: &report, trace: &trace };
        for ((e, x), sum) in expects.iter().zip(&exprs).zip(sums.iter_mut()) {
            *sum += metric::eval(x, &run).map_err(|m| format!("{}: expect '{}': {m}", path.display(), e.id))?;
        }
        if first.is_none() {
            first = Some(SimRun { scenario: sc, report, trace });
        }
    }
    let values = sums.into_iter().map(|s| s / seeds.len() as f64).collect();
    Ok(Values { values, run: first, plots: Vec::new(), known: Default::default() })
}

/// Runs one experiment file: its scenario (or computation), then each `[[expect]]` row.
pub fn run_experiment(path: &Path) -> Result<Vec<Row>, String> {
    run_experiment_full(path, false).map(|r| r.rows)
}

/// Like [`run_experiment`], and keeps the run; `trace`: record its trace even when no row
/// needs one. With a `[control]`, runs it too and sets each row's `control`.
pub fn run_experiment_full(path: &Path, trace: bool) -> Result<ExperimentRun, String> {
    let (text, table, expects) = read_experiment(path)?;
    let description = leading_comment(&text);
    let control = read_control(path, &table)?;
    let ours = row_values(path, &text, &table, &expects, Mode { trace, ..Mode::default() })?;
    let mut rows: Vec<Row> = expects.iter().zip(&ours.values).map(|(e, &v)| e.judge(v)).collect();
    if let Some(c) = &control {
        let theirs = row_values(path, &text, &table, &expects, Mode { control: Some(c), known: Some(&ours.known), ..Mode::default() })?;
        for ((row, e), &v) in rows.iter_mut().zip(&expects).zip(&theirs.values) {
            row.control = Some(v);
            row.control_pass = Some(matches!(e.status_of(v), Status::Pass | Status::Inconsistent));
        }
    }
    Ok(ExperimentRun { path: path.to_path_buf(), description, expects, rows, run: ours.run, plots: ours.plots, control })
}

/// Each row's status when the experiment runs with `seed` instead of its own (seed
/// robustness: docs/repro.md). A sweep whose rows are means over several seeds, or a
/// simulated experiment with `seeds`, is run as written (its rows are means already).
pub fn statuses_with_seed(path: &Path, seed: u64) -> Result<Vec<Status>, String> {
    let (text, table, expects) = read_experiment(path)?;
    let multi = table.get("seeds").and_then(|s| s.as_array()).is_some_and(|a| a.len() > 1);
    let mode = Mode { seed: if multi { None } else { Some(seed) }, ..Mode::default() };
    let v = row_values(path, &text, &table, &expects, mode)?;
    Ok(expects.iter().zip(&v.values).map(|(e, &x)| e.status_of(x)).collect())
}

/// True if the experiment's rows are computed (no simulation, no seed) or are means over
/// several seeds.
pub fn is_seedless_or_averaged(path: &Path) -> Result<bool, String> {
    let (_, table, _) = read_experiment(path)?;
    Ok(table.contains_key("computed") || table.get("seeds").and_then(|s| s.as_array()).is_some_and(|a| a.len() > 1))
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

#[cfg(test)]
mod tests {
    use super::*;

    fn control(text: &str) -> Result<Option<Control>, String> {
        read_control(Path::new("x/e.toml"), &toml::from_str(text).unwrap())
    }

    #[test]
    fn a_control_is_read_or_refused_with_the_reason() {
        assert!(control("name = \"e\"").unwrap().is_none());
        let c = control("[control]\nname = \"rr\"\nwhy = \"w\"\nset = { \"default.policy\" = \"rr\" }").unwrap().unwrap();
        assert_eq!((c.name.as_str(), c.set.len(), c.file), ("rr", 1, None));
        let c = control("[control]\nname = \"a\"\nwhy = \"w\"\nfile = \"b.toml\"").unwrap().unwrap();
        assert_eq!(c.file.as_deref(), Some(Path::new("x/b.toml")), "relative to the experiment");
        let e = |t: &str| control(t).unwrap_err();
        assert!(e("[control]\nname = \"a\"\nwhy = \"w\"").contains("changes nothing"));
        assert!(e("[control]\nwhy = \"w\"\nfile = \"b\"").contains("needs name"));
        assert!(e("[control]\nname = \"a\"\nfile = \"b\"").contains("needs why"));
        assert!(e("[control]\nname = \"a\"\nwhy = \"w\"\nfile = \"b\"\npolicy = 1").contains("unknown key `policy`"));
        assert!(e("[control]\nname = \"a\"\nwhy = \"w\"\nreplace = { \"s.a\" = \"b\" }").contains("replace is for sweeps"));
        let sweep = "[[axis]]\nname = \"s\"\nvalues = [{ name = \"a\" }]\n";
        assert!(e(&format!("{sweep}[control]\nname = \"a\"\nwhy = \"w\"\nfile = \"b\"")).contains("not for sweeps"));
        assert!(e("[control]\nname = \"a\"\nwhy = \"w\"\nset = 3").contains("set must be a table"));
    }
}
