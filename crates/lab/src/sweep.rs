//! Sweeps (docs/sweep.md): one scenario run as many *variants* — every combination of one
//! value per `[[axis]]`, plus single `[[run]]`s — each once per seed, on all cores. The
//! same file format serves `vassal repro` (an experiment file whose `[[expect]]` rows
//! compare variants) and `vassal sweep` (a table of `metrics` per variant, written as
//! CSV, JSON and an SVG plot).
//!
//! ```toml
//! base = "scenario.toml"        # optional: else the file's own scenario keys are the base
//! seeds = [1, 2, 3]             # optional: each variant runs once per seed (default: once)
//! metrics = ["kernel.swap_outs", { name = "loads/min", metric = "36 * 60 / kernel.last_exit_s" }]
//!
//! [[axis]]                      # named values, each setting key paths
//! name = "sched"
//! values = [
//!   { name = "dbs", set = { "default.policy" = "dbs", "task.randres*.behaviour.reserve" = "sched" } },
//!   { name = "fps", set = { "default.policy" = "fps" } },
//! ]
//! [[axis]]                      # shorthand: every value sets one path; x = the value
//! path = "task.hog.count"       # (name defaults to the path)
//! values = [1, 2, 4, 8]
//!
//! [[run]]                       # a single variant besides the grid
//! name = "ref"
//! set = { "default.policy" = "bvt" }
//!
//! [plot]                        # optional: metric y against axis x
//! x = "task.hog.count"
//! y = "kernel.swap_outs"
//! ```
//!
//! A grid variant is named by its value names joined with "/" (`dbs/8`), the first axis
//! varying slowest; `[[run]]`s follow in file order. A value may have `x` (a number: its
//! position on the axis, for plots and `crossing`). Key paths: see [`set_path`].
//! Expressions (rows' `metric`, `metrics`): the metric language, [`crate::metric`].

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use vassal_sim::report::Report;
use vassal_sim::scenario::parse_scenario;

use crate::expect::Expect;
use crate::fmt::num;
use crate::metric::{self, has_star, metric, parse, Expr, Scope};
use crate::svg;

/// The top-level keys a sweep reads; all others are the base scenario's.
const SWEEP_KEYS: [&str; 8] = ["base", "seeds", "axis", "run", "metrics", "plot", "expect", "control"];

/// One value of an axis (or one `[[run]]`): its name, position and settings.
#[derive(Clone, Debug)]
pub struct AxisValue {
    pub name: String,
    pub x: Option<f64>,
    pub set: Vec<(String, toml::Value)>,
}

#[derive(Clone, Debug)]
pub struct Axis {
    pub name: String,
    /// The path every value sets, for an axis written as `path` and `values`.
    pub path: Option<String>,
    pub values: Vec<AxisValue>,
}

/// A metric of the table `vassal sweep` writes: an expression, per variant.
#[derive(Clone, Debug)]
pub struct Metric {
    pub name: String,
    pub text: String,
    pub expr: Expr,
}

/// A variant: its name and, for a grid variant, its value index on every axis.
#[derive(Clone, Debug)]
pub struct Variant {
    pub name: String,
    pub values: Option<Vec<usize>>,
}

/// A loaded sweep.
#[derive(Clone, Debug)]
pub struct Sweep {
    /// The file, for errors.
    pub file: String,
    /// The file name without `.toml` (names the CLI's output files).
    pub name: String,
    /// Where the base scenario came from: `file`, or the `base` file.
    pub base_file: String,
    pub base: toml::Table,
    pub axes: Vec<Axis>,
    pub runs: Vec<AxisValue>,
    /// Each variant runs once per seed; a metric is the mean over the runs (empty: the
    /// scenario's own seed, once).
    pub seeds: Vec<u64>,
    pub metrics: Vec<Metric>,
    /// The plot: axis index and metric index.
    pub plot: (usize, usize),
    pub variants: Vec<Variant>,
    /// Settings applied to every variant after its own (an experiment's control run,
    /// `repro`); empty for a sweep as written.
    pub overrides: Vec<(String, toml::Value)>,
}

/// The reports of every variant (in variant order), one per seed.
pub type Runs = Vec<Vec<Report>>;

/// Reports by (scenario text, seed): runs made, for a later sweep to reuse.
pub type Known = std::collections::BTreeMap<(String, Option<u64>), Report>;

/// The mean of `metric` over a variant's runs.
pub fn mean_metric(runs: &[Report], path: &str) -> Result<f64, String> {
    if runs.is_empty() {
        return Err("no runs".into());
    }
    let mut sum = 0.0;
    for r in runs {
        sum += metric(r, path)?;
    }
    Ok(sum / runs.len() as f64)
}

/// True if the experiment document is a sweep (has `[[axis]]` or `[[run]]`).
pub fn is_sweep(table: &toml::Table) -> bool {
    table.contains_key("axis") || table.contains_key("run")
}

fn str_of<'a>(t: &'a toml::Table, key: &str, what: &str) -> Result<&'a str, String> {
    t.get(key).and_then(|v| v.as_str()).ok_or_else(|| format!("{what} needs {key} = \"...\""))
}

fn check_keys(t: &toml::Table, allowed: &[&str], what: &str) -> Result<(), String> {
    match t.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(bad) => Err(format!("{what}: unknown key `{bad}` (expected {})", allowed.join(", "))),
        None => Ok(()),
    }
}

/// A value as a name or table cell: strings bare, everything else as TOML writes it.
fn label(v: &toml::Value) -> String {
    match v {
        toml::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// A value as a number: integers, floats, and durations ("7.5ms", in ms).
fn as_number(v: &toml::Value) -> Option<f64> {
    match v {
        toml::Value::Integer(i) => Some(*i as f64),
        toml::Value::Float(f) if f.is_finite() => Some(*f),
        toml::Value::String(s) => vassal_core::parse_duration(s).ok().map(|ns| ns as f64 / 1e6),
        _ => None,
    }
}

fn check_name(name: &str, what: &str) -> Result<(), String> {
    if name.is_empty() || name.contains(['/', '[', ']', '*']) {
        return Err(format!("{what}: name '{name}' must be non-empty without '/', '[', ']' or '*'"));
    }
    Ok(())
}

/// A named value `{ name, x, set }` of an axis, or a `[[run]]`.
fn named_value(v: &toml::Value, what: &str) -> Result<AxisValue, String> {
    let v = v.as_table().ok_or_else(|| format!("{what}: each value is a table {{ name = \"...\", set = {{ ... }} }}"))?;
    check_keys(v, &["name", "x", "set"], what)?;
    let name = str_of(v, "name", what)?.to_string();
    check_name(&name, what)?;
    let x = match v.get("x") {
        None => None,
        Some(toml::Value::Integer(i)) => Some(*i as f64),
        Some(toml::Value::Float(f)) if f.is_finite() => Some(*f),
        Some(other) => return Err(format!("{what} '{name}': x must be a finite number, found {other}")),
    };
    let set = match v.get("set") {
        None => Vec::new(),
        Some(toml::Value::Table(t)) => t.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        Some(_) => return Err(format!("{what} '{name}': set must be a table of \"dotted.path\" = value")),
    };
    Ok(AxisValue { name, x, set })
}

fn parse_axis(a: &toml::Value, what: &str) -> Result<Axis, String> {
    let a = a.as_table().ok_or_else(|| format!("{what}: expected a table"))?;
    check_keys(a, &["name", "path", "values"], what)?;
    let path = a.get("path").map(|p| p.as_str().ok_or_else(|| format!("{what}: path must be a string"))).transpose()?;
    let name = match (a.get("name"), path) {
        (Some(_), _) => str_of(a, "name", what)?.to_string(),
        (None, Some(p)) => p.to_string(),
        (None, None) => return Err(format!("{what} needs name = \"...\" (or path = \"...\")")),
    };
    let what = format!("{what} ('{name}')");
    let vals = a.get("values").and_then(|v| v.as_array()).ok_or_else(|| format!("{what}: needs values = [...]"))?;
    if vals.is_empty() {
        return Err(format!("{what}: values is empty"));
    }
    let mut values: Vec<AxisValue> = Vec::new();
    for v in vals {
        let value = match path {
            // The shorthand: the value itself, set at `path`; named by its text.
            Some(p) => {
                let vname = label(v);
                check_name(&vname, &format!("{what}: value {v}"))?;
                AxisValue { name: vname, x: as_number(v), set: vec![(p.to_string(), v.clone())] }
            }
            None => named_value(v, &format!("{what}: value"))?,
        };
        if values.iter().any(|x| x.name == value.name) {
            return Err(format!("{what}: duplicate value '{}'", value.name));
        }
        values.push(value);
    }
    Ok(Axis { name, path: path.map(str::to_string), values })
}

fn parse_metrics(v: &toml::Value, axes: &[String], file: &str) -> Result<Vec<Metric>, String> {
    let list = v.as_array().ok_or_else(|| format!("{file}: metrics must be an array"))?;
    let mut out: Vec<Metric> = Vec::new();
    for m in list {
        let (name, text) = match m {
            toml::Value::String(s) => (s.clone(), s.clone()),
            toml::Value::Table(t) => {
                check_keys(t, &["name", "metric"], &format!("{file}: metrics"))?;
                (str_of(t, "name", &format!("{file}: metrics"))?.to_string(), str_of(t, "metric", &format!("{file}: metrics"))?.to_string())
            }
            other => return Err(format!("{file}: metrics: {other} is neither \"EXPRESSION\" nor {{ name, metric }}")),
        };
        if out.iter().any(|x| x.name == name) {
            return Err(format!("{file}: metrics: '{name}' is listed twice"));
        }
        let expr = parse(&text, axes).map_err(|e| format!("{file}: metrics '{name}': {e}"))?;
        out.push(Metric { name, text, expr });
    }
    Ok(out)
}

impl Sweep {
    /// Reads a sweep document (`file` names it in errors; a `base` path is relative to
    /// its directory).
    pub fn from_table(file: &str, table: &toml::Table) -> Result<Sweep, String> {
        let (base_file, base) = match table.get("base") {
            None => {
                let mut base = table.clone();
                for k in SWEEP_KEYS {
                    base.remove(k);
                }
                (file.to_string(), base)
            }
            Some(toml::Value::String(b)) => {
                if let Some(k) = table.keys().find(|k| !SWEEP_KEYS.contains(&k.as_str())) {
                    return Err(format!(
                        "{file}: unknown key `{k}`: with base = \"...\" the scenario is in the base file (sweep keys: {})",
                        SWEEP_KEYS.join(", ")
                    ));
                }
                let p = Path::new(file).parent().unwrap_or(Path::new("")).join(b);
                let text = std::fs::read_to_string(&p).map_err(|e| format!("{file}: base {}: {e}", p.display()))?;
                let mut base: toml::Table = toml::from_str(&text).map_err(|e| format!("{file}: base {}: {e}", p.display()))?;
                if is_sweep(&base) || base.contains_key("base") {
                    return Err(format!("{file}: base {} is itself a sweep", p.display()));
                }
                // An experiment file's rows are not part of its scenario.
                base.remove("expect");
                (p.display().to_string(), base)
            }
            Some(v) => return Err(format!("{file}: base must be a file name, found {v}")),
        };
        let seeds = match table.get("seeds") {
            None => Vec::new(),
            Some(toml::Value::Array(a)) if !a.is_empty() => a
                .iter()
                .map(|v| {
                    v.as_integer()
                        .filter(|&i| i >= 0)
                        .map(|i| i as u64)
                        .ok_or_else(|| format!("{file}: seeds must be integers >= 0, found {v}"))
                })
                .collect::<Result<Vec<_>, _>>()?,
            Some(v) => return Err(format!("{file}: seeds must be a non-empty array of integers, found {v}")),
        };
        let list = |key: &str| -> Result<Vec<toml::Value>, String> {
            match table.get(key) {
                None => Ok(Vec::new()),
                Some(toml::Value::Array(a)) => Ok(a.clone()),
                Some(_) => Err(format!("{file}: [[{key}]] must be an array of tables")),
            }
        };
        let axes = list("axis")?
            .iter()
            .enumerate()
            .map(|(k, a)| parse_axis(a, &format!("{file}: axis {}", k + 1)))
            .collect::<Result<Vec<_>, _>>()?;
        let runs = list("run")?.iter().map(|r| named_value(r, &format!("{file}: [[run]]"))).collect::<Result<Vec<_>, _>>()?;
        if axes.is_empty() && runs.is_empty() {
            return Err(format!("{file}: a sweep needs [[axis]] or [[run]] tables"));
        }
        let mut seen = BTreeSet::new();
        for a in &axes {
            if !seen.insert(a.name.as_str()) {
                return Err(format!("{file}: axis '{}' is listed twice", a.name));
            }
        }
        let axis_names: Vec<String> = axes.iter().map(|a| a.name.clone()).collect();
        let metrics = match table.get("metrics") {
            None => Vec::new(),
            Some(v) => parse_metrics(v, &axis_names, file)?,
        };
        let plot = match table.get("plot") {
            None => (0, 0),
            Some(toml::Value::Table(p)) => {
                check_keys(p, &["x", "y"], &format!("{file}: [plot]"))?;
                let name =
                    |k: &str| p.get(k).map(|v| v.as_str().ok_or_else(|| format!("{file}: plot.{k} must be a name, found {v}"))).transpose();
                let x = match name("x")? {
                    None => 0,
                    Some(x) => axes
                        .iter()
                        .position(|a| a.name == x)
                        .ok_or_else(|| format!("{file}: plot.x '{x}' is not an axis ({})", axis_names.join(", ")))?,
                };
                let y = match name("y")? {
                    None => 0,
                    Some(y) => {
                        metrics.iter().position(|m| m.name == y).ok_or_else(|| format!("{file}: plot.y '{y}' is not one of the metrics"))?
                    }
                };
                (x, y)
            }
            Some(_) => return Err(format!("{file}: [plot] must be a table")),
        };
        let grid_size = axes.iter().try_fold(if axes.is_empty() { 0usize } else { 1 }, |n, a| n.checked_mul(a.values.len()));
        let total = grid_size.and_then(|g| (g + runs.len()).checked_mul(seeds.len().max(1)));
        if total.is_none_or(|t| t > 100_000) {
            return Err(format!("{file}: the sweep has more than 100000 runs"));
        }
        // The variants: the grid (first axis slowest), then the runs.
        let mut grid: Vec<Vec<usize>> = if axes.is_empty() { Vec::new() } else { vec![Vec::new()] };
        for a in &axes {
            grid = grid.into_iter().flat_map(|p| (0..a.values.len()).map(move |k| [p.clone(), vec![k]].concat())).collect();
        }
        let mut variants: Vec<Variant> = grid
            .into_iter()
            .map(|v| Variant {
                name: v.iter().zip(&axes).map(|(&k, a)| a.values[k].name.as_str()).collect::<Vec<_>>().join("/"),
                values: Some(v),
            })
            .collect();
        for r in &runs {
            if variants.iter().any(|v| v.name == r.name) {
                return Err(format!("{file}: [[run]] '{}' has the name of another variant", r.name));
            }
            variants.push(Variant { name: r.name.clone(), values: None });
        }
        let file_name = Path::new(file).file_stem().map_or("sweep".into(), |s| s.to_string_lossy().to_string());
        let sweep = Sweep {
            file: file.to_string(),
            name: file_name,
            base_file,
            base,
            axes,
            runs,
            seeds,
            metrics,
            plot,
            variants,
            overrides: Vec::new(),
        };
        // Every variant must build (so a bad setting is found before anything runs), and
        // every metric name the variants it reads.
        for k in 0..sweep.variants.len() {
            sweep.document(k)?;
        }
        for m in &sweep.metrics {
            sweep.check(&m.expr, true).map_err(|e| format!("{file}: metrics '{}': {e}", m.name))?;
        }
        Ok(sweep)
    }

    /// Loads a sweep file.
    pub fn load(path: &Path) -> Result<Sweep, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let table: toml::Table = toml::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        if !is_sweep(&table) {
            return Err(format!("{}: not a sweep (no [[axis]] or [[run]])", path.display()));
        }
        Sweep::from_table(&path.display().to_string(), &table)
    }

    /// The settings of variant `k`, each with what it comes from (for errors).
    fn settings(&self, k: usize) -> Vec<(String, &AxisValue)> {
        match &self.variants[k].values {
            Some(v) => {
                v.iter().zip(&self.axes).map(|(&i, a)| (format!("axis '{}' value '{}'", a.name, a.values[i].name), &a.values[i])).collect()
            }
            None => {
                let r = &self.runs[k - (self.variants.len() - self.runs.len())];
                vec![(format!("run '{}'", r.name), r)]
            }
        }
    }

    /// The scenario document of variant `k`.
    pub fn document(&self, k: usize) -> Result<toml::Table, String> {
        let mut doc = self.base.clone();
        for (what, val) in self.settings(k) {
            for (path, value) in &val.set {
                set_path(&mut doc, path, value).map_err(|e| format!("{}: {what}: set \"{path}\": {e}", self.file))?;
            }
        }
        for (path, value) in &self.overrides {
            set_path(&mut doc, path, value).map_err(|e| format!("{}: [control] set \"{path}\": {e}", self.file))?;
        }
        Ok(doc)
    }

    /// The same sweep as a control run: every value named in `replace` (`"AXIS.VALUE" =
    /// "OTHER"`) takes the settings of value OTHER of the same axis (keeping its name, so
    /// the rows still read it), and `set` is applied to every variant after its own
    /// settings. Every variant must still build.
    pub fn with_control(&self, set: &[(String, toml::Value)], replace: &[(String, String)]) -> Result<Sweep, String> {
        let mut s = self.clone();
        for (from, by) in replace {
            let (axis, value) =
                from.split_once('.').ok_or_else(|| format!("{}: [control] replace: '{from}' is not AXIS.VALUE", self.file))?;
            let a =
                s.axes.iter_mut().find(|a| a.name == axis).ok_or_else(|| format!("{}: [control] replace: no axis '{axis}'", self.file))?;
            let other = a
                .values
                .iter()
                .find(|v| v.name == *by)
                .map(|v| v.set.clone())
                .ok_or_else(|| format!("{}: [control] replace: axis '{axis}' has no value '{by}'", self.file))?;
            let v = a
                .values
                .iter_mut()
                .find(|v| v.name == value)
                .ok_or_else(|| format!("{}: [control] replace: axis '{axis}' has no value '{value}'", self.file))?;
            v.set = other;
        }
        s.overrides.extend(set.iter().cloned());
        for k in 0..s.variants.len() {
            s.document(k)?;
        }
        Ok(s)
    }

    fn variant_index(&self, name: &str) -> Result<usize, String> {
        self.variants.iter().position(|v| v.name == name).ok_or_else(|| {
            format!("no variant '{name}' (variants: {})", self.variants.iter().map(|v| v.name.as_str()).collect::<Vec<_>>().join(", "))
        })
    }

    /// The scenario text of the variant named `name` (e.g. "v7/18").
    pub fn variant_text(&self, name: &str) -> Result<String, String> {
        let k = self.variant_index(name).map_err(|e| format!("{}: {e}", self.file))?;
        let mut doc = self.document(k)?;
        doc.insert(
            "name".into(),
            toml::Value::String(format!("{}-{}", doc.get("name").and_then(|n| n.as_str()).unwrap_or("sweep"), name.replace('/', "-"))),
        );
        scenario_text(&doc).map_err(|e| format!("{}: variant {name}: {e}", self.file))
    }

    /// Every run: (variant, seed or None for the scenario's own), variant-major.
    pub fn grid(&self) -> Vec<(usize, Option<u64>)> {
        let seeds: Vec<Option<u64>> = if self.seeds.is_empty() { vec![None] } else { self.seeds.iter().map(|&s| Some(s)).collect() };
        (0..self.variants.len()).flat_map(|v| seeds.iter().map(move |&s| (v, s))).collect()
    }

    fn run_one(&self, k: usize, text: &str, seed: Option<u64>) -> Result<Report, String> {
        let name = &self.variants[k].name;
        let label = format!("{} [variant {name}]", self.file);
        let mut sc = parse_scenario(text, &label).map_err(|e| e.to_string())?;
        if let Some(s) = seed {
            sc.seed = s;
        }
        let seed = sc.seed;
        vassal_sim::simulate_with(sc, &crate::workloads::registry()).map_err(|e| format!("{label} seed {seed}: {e}"))
    }

    /// Runs every variant once per seed on `jobs` threads (at least 1); `progress(done,
    /// total)` is called after each run. The reports come back in variant and seed order
    /// whatever the threads did; on errors, the first in that order is returned.
    pub fn run(&self, jobs: usize, progress: &(dyn Fn(usize, usize) + Sync)) -> Result<Runs, String> {
        self.run_known(jobs, progress, &Known::new()).map(|(runs, _)| runs)
    }

    /// Like [`Sweep::run`], but a run whose scenario (its text) and seed are in `known`,
    /// or equal to another run's, is not run again: its report is copied (a run is a
    /// function of its scenario and seed). Returns the runs and every (scenario, seed)
    /// report, `known`'s included, for a later call (a control run, `repro`).
    pub fn run_known(&self, jobs: usize, progress: &(dyn Fn(usize, usize) + Sync), known: &Known) -> Result<(Runs, Known), String> {
        let grid = self.grid();
        let texts = (0..self.variants.len())
            .map(|k| {
                let name = &self.variants[k].name;
                scenario_text(&self.document(k)?).map_err(|e| format!("{}: variant {name}: {e}", self.file))
            })
            .collect::<Result<Vec<_>, _>>()?;
        // The runs to make: the first grid entry of each (text, seed) not known.
        let mut todo: Vec<usize> = Vec::new();
        let mut seen: BTreeSet<(&str, Option<u64>)> = BTreeSet::new();
        for (k, &(v, seed)) in grid.iter().enumerate() {
            if !known.contains_key(&(texts[v].clone(), seed)) && seen.insert((texts[v].as_str(), seed)) {
                todo.push(k);
            }
        }
        let total = todo.len();
        let next = AtomicUsize::new(0);
        let done = AtomicUsize::new(0);
        let results: Mutex<Vec<Option<Result<Report, String>>>> = Mutex::new((0..total).map(|_| None).collect());
        std::thread::scope(|s| {
            for _ in 0..jobs.clamp(1, total.max(1)) {
                s.spawn(|| loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= total {
                        break;
                    }
                    let (v, seed) = grid[todo[i]];
                    let r = self.run_one(v, &texts[v], seed);
                    let failed = r.is_err();
                    results.lock().unwrap_or_else(|e| e.into_inner())[i] = Some(r);
                    progress(done.fetch_add(1, Ordering::Relaxed) + 1, total);
                    if failed {
                        // Hand out no more work. Every run before this one was handed out
                        // already, so the first error in grid order is among the results.
                        next.store(total, Ordering::Relaxed);
                    }
                });
            }
        });
        let mut all = known.clone();
        for (r, &k) in results.into_inner().unwrap_or_else(|e| e.into_inner()).into_iter().zip(&todo) {
            let (v, seed) = grid[k];
            match r {
                Some(Ok(report)) => {
                    all.insert((texts[v].clone(), seed), report);
                }
                Some(Err(e)) => return Err(e),
                None => {} // not run after an error, which comes first in grid order
            }
        }
        let mut runs: Runs = vec![Vec::new(); self.variants.len()];
        for &(v, seed) in &grid {
            let report = all
                .get(&(texts[v].clone(), seed))
                .ok_or_else(|| format!("{}: variant {} was not run", self.file, self.variants[v].name))?;
            runs[v].push(report.clone());
        }
        Ok((runs, all))
    }

    /// Checks that every `METRIC[VARIANT]` of `e` names a variant (with `*` in place of
    /// a crossing's axis), and, unless `bare_ok`, that every metric names one.
    pub fn check(&self, e: &Expr, bare_ok: bool) -> Result<(), String> {
        self.check_in(e, bare_ok, None)
    }

    fn check_in(&self, e: &Expr, bare_ok: bool, star: Option<usize>) -> Result<(), String> {
        match e {
            Expr::Num(_) => Ok(()),
            Expr::Metric { path, variant: None } => {
                if bare_ok {
                    Ok(())
                } else {
                    Err(format!("metric '{path}' needs a variant: {path}[VARIANT]"))
                }
            }
            Expr::Metric { variant: Some(v), .. } => match star.filter(|_| v.contains('*')) {
                Some(axis) => {
                    for value in &self.axes[axis].values {
                        self.variant_index(&self.substitute(v, axis, &value.name)?)?;
                    }
                    Ok(())
                }
                None if v.contains('*') => Err(format!("'{v}': '*' only in the series of crossing(...)")),
                None => self.variant_index(v).map(|_| ()),
            },
            Expr::Neg(a) => self.check_in(a, bare_ok, star),
            Expr::Bin(_, a, b) => self.check_in(a, bare_ok, star).and(self.check_in(b, bare_ok, star)),
            Expr::Crossing { axis, series, reference } => {
                if let Some(bad) = self.axes[*axis].values.iter().find(|v| v.x.is_none()) {
                    return Err(format!("crossing: value '{}' of axis '{}' has no x", bad.name, self.axes[*axis].name));
                }
                if !has_star(series) {
                    return Err("crossing: the series names no variant with '*' (e.g. METRIC[low/*])".into());
                }
                self.check_in(series, bare_ok, Some(*axis))?;
                self.check_in(reference, bare_ok, None)
            }
        }
    }

    /// `pattern` (a variant name with `*` for axis `axis`) with `value` in its place.
    fn substitute(&self, pattern: &str, axis: usize, value: &str) -> Result<String, String> {
        let mut segs: Vec<&str> = pattern.split('/').collect();
        if segs.len() != self.axes.len() || segs[axis] != "*" || segs.iter().filter(|s| s.contains('*')).count() != 1 {
            return Err(format!("'{pattern}' must name one value per axis with '*' (only) for axis '{}'", self.axes[axis].name));
        }
        segs[axis] = value;
        Ok(segs.join("/"))
    }

    /// Evaluates `e` over `runs`: `METRIC[VARIANT]` is the mean over VARIANT's runs, a
    /// bare METRIC `bare(metric)`.
    pub fn eval(&self, e: &Expr, runs: &Runs, bare: &dyn Fn(&str) -> Result<f64, String>) -> Result<f64, String> {
        metric::eval(e, &Variants { sweep: self, runs, bare })
    }

    /// A metric's value for variant `v`: each metric the mean over the variant's seeds.
    pub fn variant_value(&self, m: &Metric, runs: &Runs, v: usize) -> Result<f64, String> {
        self.eval(&m.expr, runs, &|p| mean_metric(&runs[v], p))
            .map_err(|e| format!("{}: metrics '{}' for variant {}: {e}", self.file, m.name, self.variants[v].name))
    }

    /// A metric's value for one run (variant `v`, seed number `s`).
    pub fn run_value(&self, m: &Metric, runs: &Runs, v: usize, s: usize) -> Result<f64, String> {
        self.eval(&m.expr, runs, &|p| metric(&runs[v][s], p))
            .map_err(|e| format!("{}: metrics '{}' for variant {}: {e}", self.file, m.name, self.variants[v].name))
    }

    /// The value names of variant `v` on every axis ("" for a `[[run]]`).
    pub fn value_names(&self, v: usize) -> Vec<&str> {
        match &self.variants[v].values {
            Some(ix) => ix.iter().zip(&self.axes).map(|(&i, a)| a.values[i].name.as_str()).collect(),
            None => vec![""; self.axes.len()],
        }
    }

    /// The curves of the grid along the plot's x axis: for each combination of the
    /// other axes' values (in grid order), its label ("v7", "dbs, low") and its variants
    /// in x-axis value order.
    pub fn curves(&self) -> Vec<(String, Vec<usize>)> {
        let xa = self.plot.0;
        let mut out: Vec<(Vec<usize>, String, Vec<usize>)> = Vec::new();
        for (k, v) in self.variants.iter().enumerate() {
            let Some(ix) = &v.values else { continue };
            let key: Vec<usize> = ix.iter().enumerate().filter(|(a, _)| *a != xa).map(|(_, &i)| i).collect();
            match out.iter_mut().find(|c| c.0 == key) {
                Some(c) => c.2.push(k),
                None => {
                    // A named value speaks for itself; a bare one ("4") needs its axis.
                    let label = ix
                        .iter()
                        .enumerate()
                        .filter(|(a, _)| *a != xa)
                        .map(|(a, &i)| match &self.axes[a].path {
                            Some(_) => format!("{} = {}", self.axes[a].name, self.axes[a].values[i].name),
                            None => self.axes[a].values[i].name.clone(),
                        })
                        .collect::<Vec<_>>()
                        .join(", ");
                    out.push((key, label, vec![k]));
                }
            }
        }
        out.into_iter().map(|(_, l, v)| (l, v)).collect()
    }

    /// The tables `vassal sweep` prints, one per metric (each value the mean over the
    /// seeds): a line per curve (see [`Sweep::curves`]), a column per value of the plot's
    /// x axis; then a line per `[[run]]`.
    pub fn table(&self, runs: &Runs) -> Result<String, String> {
        use std::fmt::Write as _;
        let mut o = String::new();
        let curves = self.curves();
        let xa = self.axes.get(self.plot.0);
        let labels =
            curves.iter().map(|c| c.0.as_str()).chain(self.runs.iter().map(|r| r.name.as_str())).chain(xa.map(|a| a.name.as_str()));
        let first = labels.map(|l| l.chars().count()).max().unwrap_or(0);
        for m in &self.metrics {
            let mut about: Vec<String> = Vec::new();
            if m.text != m.name {
                about.push(m.text.clone());
            }
            if self.seeds.len() > 1 {
                about.push(format!("mean of {} seeds", self.seeds.len()));
            }
            let about = if about.is_empty() { String::new() } else { format!(" ({})", about.join(", ")) };
            let _ = writeln!(o, "{}{about}", m.name);
            if let Some(xa) = xa {
                let cells: Vec<String> = xa.values.iter().map(|v| format!("{:>10}", v.name)).collect();
                let _ = writeln!(o, "  {:<first$} {}", xa.name, cells.join(" "));
            }
            for (label, vs) in &curves {
                let cells =
                    vs.iter().map(|&v| self.variant_value(m, runs, v).map(|x| format!("{:>10}", num(x)))).collect::<Result<Vec<_>, _>>()?;
                let _ = writeln!(o, "  {label:<first$} {}", cells.join(" "));
            }
            for k in self.variants.len() - self.runs.len()..self.variants.len() {
                let _ = writeln!(o, "  {:<first$} {:>10}", self.variants[k].name, num(self.variant_value(m, runs, k)?));
            }
            o.push('\n');
        }
        Ok(o)
    }

    /// The plot (a standalone SVG): the plot's metric (each point the mean over the seeds)
    /// against its x axis, a line per curve (see [`Sweep::curves`]) and a dashed level
    /// line per `[[run]]`. The x axis is the values' `x` where every value has one, else
    /// the values evenly spaced and labelled by name. None when there is no axis or no
    /// metric.
    pub fn svg(&self, runs: &Runs) -> Result<Option<String>, String> {
        Ok(self.plot_of(runs, self.plot.1)?.map(|p| svg::standalone(&p)))
    }

    /// The plot of metric number `metric` against the plot's x axis, as an inline `<svg>`
    /// element (see [`Sweep::svg`]).
    pub fn plot_of(&self, runs: &Runs, metric: usize) -> Result<Option<String>, String> {
        let (Some(axis), Some(m)) = (self.axes.get(self.plot.0), self.metrics.get(metric)) else { return Ok(None) };
        let numeric: Option<Vec<f64>> = axis.values.iter().map(|v| v.x).collect();
        let xs: Vec<f64> = numeric.clone().unwrap_or_else(|| (0..axis.values.len()).map(|i| i as f64).collect());
        let position = |v: usize| self.variants[v].values.as_ref().map_or(0, |ix| ix[self.plot.0]);
        let mut series = Vec::new();
        for (k, (label, vs)) in self.curves().iter().enumerate() {
            let mut points = Vec::new();
            for &v in vs {
                let y = self.variant_value(m, runs, v)?;
                if y.is_finite() {
                    points.push((xs[position(v)], y));
                }
            }
            points.sort_by(|a, b| a.0.total_cmp(&b.0));
            let name = if label.is_empty() { m.name.clone() } else { label.clone() };
            series.push(svg::Series { name, points, step_to: None, colour: svg::colour(k), dashed: false, markers: true });
        }
        let lo = xs.iter().cloned().fold(f64::INFINITY, f64::min);
        let hi = xs.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let first_run = self.variants.len() - self.runs.len();
        for (k, r) in self.runs.iter().enumerate() {
            let y = self.variant_value(m, runs, first_run + k)?;
            if y.is_finite() {
                let colour = svg::colour(series.len());
                series.push(svg::Series {
                    name: r.name.clone(),
                    points: vec![(lo, y), (hi, y)],
                    step_to: None,
                    colour,
                    dashed: true,
                    markers: false,
                });
            }
        }
        let pad = if hi > lo { (hi - lo) * 0.03 } else { 1.0 };
        let ticks: Option<Vec<(f64, String)>> = match numeric {
            Some(_) => None,
            None => Some(xs.iter().cloned().zip(axis.values.iter().map(|v| v.name.clone())).collect()),
        };
        let seeds = if self.seeds.len() > 1 { format!(", mean of {} seeds", self.seeds.len()) } else { String::new() };
        Ok(Some(svg::line_plot_ticks(
            &format!("{}: {} against {}{seeds}", self.name, m.name, axis.name),
            &axis.name,
            &m.name,
            (lo - pad, hi + pad),
            &series,
            ticks.as_deref(),
        )))
    }

    /// The runs as CSV (RFC 4180 quoting): variant, its value on each axis, seed, then
    /// each metric of that run.
    pub fn csv(&self, runs: &Runs) -> Result<String, String> {
        fn cell(s: &str) -> String {
            if s.contains([',', '"', '\n', '\r']) {
                format!("\"{}\"", s.replace('"', "\"\""))
            } else {
                s.to_string()
            }
        }
        let mut head = vec!["variant".to_string()];
        head.extend(self.axes.iter().map(|a| a.name.clone()));
        head.push("seed".into());
        head.extend(self.metrics.iter().map(|m| m.name.clone()));
        let mut o = head.iter().map(|h| cell(h)).collect::<Vec<_>>().join(",") + "\n";
        for v in 0..self.variants.len() {
            for (s, run) in runs[v].iter().enumerate() {
                let mut row = vec![cell(&self.variants[v].name)];
                row.extend(self.value_names(v).iter().map(|n| cell(n)));
                row.push(run.seed.to_string());
                for m in &self.metrics {
                    row.push(format!("{}", self.run_value(m, runs, v, s)?));
                }
                o += &(row.join(",") + "\n");
            }
        }
        Ok(o)
    }

    /// The runs as JSON: `{sweep, base, axes, metrics, rows: [{variant, values: {axis:
    /// value}, seed, metrics: {name: number}}]}` (NaN as null).
    pub fn json(&self, runs: &Runs) -> Result<serde_json::Value, String> {
        let mut rows = Vec::new();
        for v in 0..self.variants.len() {
            let values: serde_json::Map<String, serde_json::Value> =
                self.axes.iter().zip(self.value_names(v)).filter(|(_, n)| !n.is_empty()).map(|(a, n)| (a.name.clone(), n.into())).collect();
            for (s, run) in runs[v].iter().enumerate() {
                let mut metrics = serde_json::Map::new();
                for m in &self.metrics {
                    metrics.insert(m.name.clone(), serde_json::json!(self.run_value(m, runs, v, s)?));
                }
                rows.push(serde_json::json!({ "variant": self.variants[v].name, "values": values, "seed": run.seed, "metrics": metrics }));
            }
        }
        Ok(serde_json::json!({
            "sweep": self.name,
            "base": self.base_file,
            "axes": self.axes.iter().map(|a| a.name.clone()).collect::<Vec<_>>(),
            "metrics": self.metrics.iter().map(|m| serde_json::json!({ "name": m.name, "metric": m.text })).collect::<Vec<_>>(),
            "rows": rows,
        }))
    }
}

/// The scope of a sweep's expressions: `METRIC[VARIANT]` is the mean over VARIANT's runs
/// (with a crossing's axis value in place of `*`), a bare METRIC `bare(METRIC)`.
struct Variants<'a> {
    sweep: &'a Sweep,
    runs: &'a Runs,
    bare: &'a dyn Fn(&str) -> Result<f64, String>,
}

impl Scope for Variants<'_> {
    fn metric(&self, path: &str, variant: Option<&str>, star: Option<(usize, &str)>) -> Result<f64, String> {
        let Some(v) = variant else { return (self.bare)(path) };
        let name = match star.filter(|_| v.contains('*')) {
            Some((axis, value)) => self.sweep.substitute(v, axis, value)?,
            None => v.to_string(),
        };
        mean_metric(&self.runs[self.sweep.variant_index(&name)?], path)
    }

    fn axis(&self, axis: usize) -> Result<Vec<(f64, &str)>, String> {
        let a = &self.sweep.axes[axis];
        a.values
            .iter()
            .map(|v| v.x.map(|x| (x, v.name.as_str())).ok_or_else(|| format!("crossing: value '{}' of axis '{}' has no x", v.name, a.name)))
            .collect()
    }
}

/// The number of runs at a time when none is asked for: the cores there are.
pub fn default_jobs() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Runs a sweep experiment on all cores and computes its `[[expect]]` rows' values, whose
/// metrics must name their variants. Every row's expression is checked before anything
/// runs. With `plots`, also returns the plot of each of its `metrics` (inline SVG, for
/// `repro --report`).
pub fn expect_values(sweep: &Sweep, expects: &[Expect], plots: bool, known: &Known) -> Result<(Vec<f64>, Vec<String>, Known), String> {
    let file = &sweep.file;
    let axes: Vec<String> = sweep.axes.iter().map(|a| a.name.clone()).collect();
    let exprs = expects
        .iter()
        .map(|e| {
            parse(&e.metric, &axes).and_then(|x| sweep.check(&x, false).map(|_| x)).map_err(|m| format!("{file}: expect '{}': {m}", e.id))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let (runs, known) = sweep.run_known(default_jobs(), &|_, _| {}, known)?;
    let values = expects
        .iter()
        .zip(&exprs)
        .map(|(e, x)| {
            sweep
                .eval(x, &runs, &|p| Err(format!("metric '{p}' needs a variant")))
                .map_err(|m| format!("{file}: expect '{}': metric '{}': {m}", e.id, e.metric))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut out = Vec::new();
    if plots {
        for k in 0..sweep.metrics.len() {
            out.extend(sweep.plot_of(&runs, k).map_err(|m| format!("{file}: {m}"))?);
        }
    }
    Ok((values, out, known))
}

/// A scenario document as text for the scenario parser. `toml::to_string` leaves a table
/// that holds only tables implicit (`[scheduler.usage.hard_time]` with no
/// `[scheduler.usage]`), and the parser's spanned values cannot be read from an implicit
/// table; so every table is written with its own header.
pub fn scenario_text(doc: &toml::Table) -> Result<String, String> {
    fn explicit(t: &mut toml_edit::Table) {
        t.set_implicit(false);
        for (_, item) in t.iter_mut() {
            match item {
                toml_edit::Item::Table(t) => explicit(t),
                toml_edit::Item::ArrayOfTables(a) => a.iter_mut().for_each(explicit),
                _ => {}
            }
        }
    }
    let text = toml::to_string(doc).map_err(|e| e.to_string())?;
    let mut d: toml_edit::DocumentMut = text.parse().map_err(|e: toml_edit::TomlError| e.to_string())?;
    explicit(d.as_table_mut());
    Ok(d.to_string())
}

/// Sets `path` in `doc` to `value`. The path is dotted: a step into a table is a key; a
/// step into an array (of tables: `[[task]]`, `[[scheduler]]`) picks the element whose
/// `name` is the step, or every element whose name starts with PREFIX for `PREFIX*`,
/// or else the element at that 0-based index. Every step but the last must exist; the
/// last is set (a table key is added if absent). The scenario parser then checks the
/// result like a file.
pub fn set_path(doc: &mut toml::Table, path: &str, value: &toml::Value) -> Result<(), String> {
    let steps: Vec<&str> = path.split('.').collect();
    if steps.iter().any(|s| s.is_empty()) {
        return Err("empty step in the path".into());
    }
    let mut root = toml::Value::Table(std::mem::take(doc));
    let r = set_in(&mut root, &steps, 0, value);
    if let toml::Value::Table(t) = root {
        *doc = t;
    }
    r
}

fn set_in(here: &mut toml::Value, steps: &[&str], k: usize, value: &toml::Value) -> Result<(), String> {
    let walked = || steps[..k].join(".");
    let step = steps[k];
    let last = k + 1 == steps.len();
    match here {
        toml::Value::Table(t) => {
            if last {
                t.insert(step.to_string(), value.clone());
                return Ok(());
            }
            let next = t.get_mut(step).ok_or_else(|| format!("no `{}`", steps[..=k].join(".")))?;
            set_in(next, steps, k + 1, value)
        }
        toml::Value::Array(a) => {
            let name_of = |e: &toml::Value| e.get("name").and_then(|n| n.as_str()).map(str::to_string);
            let picked: Vec<usize> = match step.strip_suffix('*') {
                Some(prefix) => (0..a.len()).filter(|&i| name_of(&a[i]).is_some_and(|n| n.starts_with(prefix))).collect(),
                None => match a.iter().position(|e| name_of(e).as_deref() == Some(step)) {
                    Some(i) => vec![i],
                    None => step.parse::<usize>().ok().filter(|&i| i < a.len()).into_iter().collect(),
                },
            };
            if picked.is_empty() {
                return Err(format!("`{}` has no element named {step}", walked()));
            }
            for i in picked {
                if last {
                    a[i] = value.clone();
                } else {
                    set_in(&mut a[i], steps, k + 1, value)?;
                }
            }
            Ok(())
        }
        other => Err(format!("`{}` is {}, neither a table nor an array", walked(), other.type_str())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(doc: &str, expr: &str) -> Result<(), String> {
        let s = Sweep::from_table("t.toml", &toml::from_str(doc).unwrap())?;
        let e = parse(expr, &s.axes.iter().map(|a| a.name.clone()).collect::<Vec<_>>())?;
        s.check(&e, false)
    }

    #[test]
    fn set_path_walks_tables_arrays_names_and_wildcards() {
        let mut doc: toml::Table =
            toml::from_str("[[task]]\nname = \"a1\"\n[[task]]\nname = \"b\"\nphases = [1, 2]\n[[task]]\nname = \"a2\"\n[m]\nx = 1\n")
                .unwrap();
        let i = |v: i64| toml::Value::Integer(v);
        set_path(&mut doc, "task.1.count", &i(3)).unwrap();
        set_path(&mut doc, "task.b.phases.0", &i(9)).unwrap();
        set_path(&mut doc, "task.a*.count", &i(5)).unwrap();
        set_path(&mut doc, "m.x", &i(2)).unwrap();
        set_path(&mut doc, "until", &i(7)).unwrap();
        let t = doc["task"].as_array().unwrap();
        assert_eq!(t[1]["count"].as_integer(), Some(3));
        assert_eq!(t[1]["phases"].as_array().unwrap()[0].as_integer(), Some(9));
        assert_eq!((t[0]["count"].as_integer(), t[2]["count"].as_integer()), (Some(5), Some(5)));
        assert_eq!(doc["m"]["x"].as_integer(), Some(2));
        assert_eq!(doc["until"].as_integer(), Some(7));
        assert_eq!(set_path(&mut doc, "task.5.count", &i(1)).unwrap_err(), "`task` has no element named 5");
        assert_eq!(set_path(&mut doc, "task.z*.count", &i(1)).unwrap_err(), "`task` has no element named z*");
        assert_eq!(set_path(&mut doc, "nope.x", &i(1)).unwrap_err(), "no `nope`");
        assert_eq!(set_path(&mut doc, "m.x.y", &i(1)).unwrap_err(), "`m.x` is integer, neither a table nor an array");
        assert!(set_path(&mut doc, "m..x", &i(1)).is_err());
    }

    const DOC: &str = "until = \"1s\"\n[machine]\ncpus = 1\n[[axis]]\nname = \"p\"\nvalues = [{ name = \"a\", x = 1, set = { \"machine.cpus\" = 1 } }, { name = \"b\", x = 2, set = { \"machine.cpus\" = 2 } }]\n[[axis]]\npath = \"until\"\nvalues = [\"1s\", \"2s\", \"3s\"]\n[[run]]\nname = \"ref\"\nset = { \"machine.cpus\" = 4 }\n";

    #[test]
    fn variants_are_the_grid_first_axis_slowest_then_the_runs() {
        let s = Sweep::from_table("t.toml", &toml::from_str(DOC).unwrap()).unwrap();
        let names: Vec<&str> = s.variants.iter().map(|v| v.name.as_str()).collect();
        assert_eq!(names, ["a/1s", "a/2s", "a/3s", "b/1s", "b/2s", "b/3s", "ref"]);
        assert_eq!(s.axes[1].name, "until");
        assert_eq!(s.axes[1].values[2].x, Some(3000.0), "a duration's x is in ms");
        let d = s.document(4).unwrap();
        assert_eq!((d["machine"]["cpus"].as_integer(), d["until"].as_str()), (Some(2), Some("2s")));
        assert_eq!(s.document(6).unwrap()["machine"]["cpus"].as_integer(), Some(4));
    }

    #[test]
    fn references_are_checked_against_the_variants() {
        assert!(value(DOC, "m[a/1s] - m[ref]").is_ok());
        assert!(value(DOC, "crossing(p, m[*/2s], m[ref])").is_ok());
        assert!(value(DOC, "crossing(p, m[*/2s] - m[ref], 0)").is_ok(), "a series may name fixed variants too");
        assert!(value(DOC, "crossing(p, m[a/2s], m[ref])").unwrap_err().contains("the series names no variant with '*'"));
        assert!(value(DOC, "crossing(until, m[a/*], m[ref])").is_ok(), "a duration's x");
        let e = value(&DOC.replace(", x = 2", ""), "crossing(p, m[*/1s], m[ref])").unwrap_err();
        assert!(e.contains("value 'b' of axis 'p' has no x"), "{e}");
        let e = value(DOC, "m[c/1s]").unwrap_err();
        assert!(e.contains("no variant 'c/1s' (variants: a/1s, a/2s"), "{e}");
        assert!(value(DOC, "m").unwrap_err().contains("needs a variant: m[VARIANT]"));
        assert!(value(DOC, "m[*/1s]").unwrap_err().contains("only in the series of crossing"));
        assert!(value(DOC, "crossing(p, m[a/*], m[ref])").unwrap_err().contains("'*' (only) for axis 'p'"));
    }
}
