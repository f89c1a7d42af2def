//! Parameter sweeps (`vassal sweep SPEC`, docs/sweep.md): a base scenario run over the
//! grid of every combination of parameter values (× seeds), on all cores, into a table
//! (CSV and JSON) and an SVG plot.
//!
//! A spec is TOML:
//!
//! ```toml
//! base = "bvt-contention.toml"      # scenario (or experiment) file, relative to the spec
//! seeds = [1, 2, 3]                 # optional; default: the scenario's seed
//! metrics = ["task.mpeg.miss_ratio", "task.mpeg.latency_max_ms"]   # `repro` metric paths
//!
//! [[param]]
//! path = "task.hog.count"           # a key path into the scenario's TOML
//! values = [1, 2, 4, 8]
//!
//! [[param]]
//! path = "task.mpeg.behaviour.exec"
//! values = ["5ms", "6ms", "7.5ms", "10ms"]
//!
//! [plot]                            # optional
//! x = "task.hog.count"              # default: the first parameter
//! y = "task.mpeg.miss_ratio"        # default: the first metric
//! ```
//!
//! Key paths walk the scenario's TOML tables; in an array of tables (`[[task]]`,
//! `[[scheduler]]`) a segment picks the element with that `name` (or a 0-based index).
//! The last key is set (created if absent) to each value; the resulting scenario is
//! parsed and validated like a file, so a bad value is reported with its grid point.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use crate::repro::metric;
use crate::scenario::parse_scenario;
use crate::svg::{self, Series};

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Param {
    pub path: String,
    pub values: Vec<toml::Value>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlotSpec {
    pub x: Option<String>,
    pub y: Option<String>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Spec {
    pub base: PathBuf,
    #[serde(default)]
    pub seeds: Vec<u64>,
    pub metrics: Vec<String>,
    #[serde(rename = "param")]
    pub params: Vec<Param>,
    #[serde(default)]
    pub plot: PlotSpec,
}

/// A loaded spec: the spec and its base scenario's TOML.
pub struct Sweep {
    pub name: String,
    pub spec: Spec,
    base: toml::Table,
    base_file: String,
}

/// One grid point's run.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Point {
    /// The parameters' values, in spec order, as written in TOML.
    pub params: Vec<String>,
    pub seed: u64,
    /// The metrics, in spec order.
    pub metrics: Vec<f64>,
}

/// The value as a table cell / label: strings bare, everything else as TOML writes it.
fn label(v: &toml::Value) -> String {
    match v {
        toml::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Sets the value at `path` (see the module documentation) in `table`.
pub fn set_path(table: &mut toml::Table, path: &str, value: toml::Value) -> Result<(), String> {
    let segs: Vec<&str> = path.split('.').collect();
    if segs.iter().any(|s| s.is_empty()) {
        return Err(format!("param path '{path}': empty segment"));
    }
    let (last, walk) = segs.split_last().expect("split on '.' gives at least one segment");
    let Some((first, rest)) = walk.split_first() else {
        table.insert(last.to_string(), value);
        return Ok(());
    };
    let mut cur = table.get_mut(*first).ok_or_else(|| format!("param path '{path}': the scenario has no key '{first}'"))?;
    let mut walked = first.to_string();
    for seg in rest {
        cur = step(cur, seg, &walked, path)?;
        walked = format!("{walked}.{seg}");
    }
    match cur {
        toml::Value::Table(t) => {
            t.insert(last.to_string(), value);
            Ok(())
        }
        toml::Value::Array(_) => {
            let slot = step(cur, last, &walked, path)?;
            *slot = value;
            Ok(())
        }
        other => Err(format!("param path '{path}': '{walked}' is {}, not a table", other.type_str())),
    }
}

/// One step down: a table key, or an array element by `name` or index.
fn step<'a>(cur: &'a mut toml::Value, seg: &str, walked: &str, path: &str) -> Result<&'a mut toml::Value, String> {
    match cur {
        toml::Value::Table(t) => t.get_mut(seg).ok_or_else(|| format!("param path '{path}': '{walked}' has no key '{seg}'")),
        toml::Value::Array(a) => {
            let by_name = a.iter().position(|e| e.get("name").and_then(|n| n.as_str()) == Some(seg));
            let at = by_name.or_else(|| seg.parse::<usize>().ok().filter(|i| *i < a.len()));
            match at {
                Some(i) => Ok(&mut a[i]),
                None => Err(format!("param path '{path}': no element of '{walked}' is named '{seg}'")),
            }
        }
        other => Err(format!("param path '{path}': '{walked}' is {}, not a table", other.type_str())),
    }
}

impl Sweep {
    /// Reads a spec file and its base scenario.
    pub fn load(spec_path: &Path) -> Result<Sweep, String> {
        let text = std::fs::read_to_string(spec_path).map_err(|e| format!("{}: {e}", spec_path.display()))?;
        let spec: Spec = toml::from_str(&text).map_err(|e| format!("{}: {e}", spec_path.display()))?;
        let name = spec_path.file_stem().map_or("sweep".into(), |s| s.to_string_lossy().to_string());
        let base_path = spec_path.parent().unwrap_or(Path::new(".")).join(&spec.base);
        let base_text = std::fs::read_to_string(&base_path).map_err(|e| format!("{}: base {}: {e}", spec_path.display(), base_path.display()))?;
        Sweep::new(name, spec, &base_text, &base_path.display().to_string()).map_err(|e| format!("{}: {e}", spec_path.display()))
    }

    /// A sweep from a parsed spec and the base scenario's text.
    pub fn new(name: String, spec: Spec, base_text: &str, base_file: &str) -> Result<Sweep, String> {
        let mut base: toml::Table = toml::from_str(base_text).map_err(|e| format!("base {base_file}: {e}"))?;
        // An experiment file's rows are not part of the scenario.
        base.remove("expect");
        if spec.params.is_empty() {
            return Err("a sweep needs at least one [[param]]".into());
        }
        if spec.metrics.is_empty() {
            return Err("a sweep needs metrics = [...] (metric paths as in docs/repro.md)".into());
        }
        for p in &spec.params {
            if p.values.is_empty() {
                return Err(format!("param '{}' has no values", p.path));
            }
            // Each path must exist up to its last key in the base.
            let mut t = base.clone();
            set_path(&mut t, &p.path, p.values[0].clone())?;
        }
        let mut seen = std::collections::BTreeSet::new();
        for p in &spec.params {
            if !seen.insert(&p.path) {
                return Err(format!("param '{}' is listed twice", p.path));
            }
        }
        if let Some(x) = &spec.plot.x {
            if !spec.params.iter().any(|p| &p.path == x) {
                return Err(format!("plot.x '{x}' is not one of the params"));
            }
        }
        if let Some(y) = &spec.plot.y {
            if !spec.metrics.contains(y) {
                return Err(format!("plot.y '{y}' is not one of the metrics"));
            }
        }
        let size: usize = spec.params.iter().map(|p| p.values.len()).product::<usize>() * spec.seeds.len().max(1);
        if size > 100_000 {
            return Err(format!("the grid has {size} runs; at most 100000"));
        }
        Ok(Sweep { name, spec, base, base_file: base_file.to_string() })
    }

    /// The grid: each combination of values (the first parameter varying slowest), then
    /// each seed; as indices into each parameter's values.
    pub fn grid(&self) -> Vec<(Vec<usize>, Option<u64>)> {
        let mut combos: Vec<Vec<usize>> = vec![Vec::new()];
        for p in &self.spec.params {
            combos = combos.into_iter().flat_map(|c| (0..p.values.len()).map(move |i| [c.clone(), vec![i]].concat())).collect();
        }
        let seeds: Vec<Option<u64>> = if self.spec.seeds.is_empty() { vec![None] } else { self.spec.seeds.iter().map(|s| Some(*s)).collect() };
        combos.into_iter().flat_map(|c| seeds.iter().map(move |s| (c.clone(), *s))).collect()
    }

    /// Runs one grid point.
    fn run_point(&self, idx: &[usize], seed: Option<u64>) -> Result<Point, String> {
        let mut t = self.base.clone();
        let labels: Vec<String> = self.spec.params.iter().zip(idx).map(|(p, &i)| label(&p.values[i])).collect();
        let at = || self.spec.params.iter().zip(&labels).map(|(p, l)| format!("{} = {l}", p.path)).collect::<Vec<_>>().join(", ");
        for (p, &i) in self.spec.params.iter().zip(idx) {
            set_path(&mut t, &p.path, p.values[i].clone())?;
        }
        let text = toml::to_string(&t).map_err(|e| format!("at {}: {e}", at()))?;
        let mut sc = parse_scenario(&text, &format!("{} with {}", self.base_file, at())).map_err(|e| e.to_string())?;
        if let Some(s) = seed {
            sc.seed = s;
        }
        let seed = sc.seed;
        let report = crate::simulate(sc).map_err(|e| format!("at {}: {e}", at()))?;
        let metrics = self.spec.metrics.iter().map(|m| metric(&report, m)).collect::<Result<Vec<_>, _>>().map_err(|e| format!("at {}: {e}", at()))?;
        Ok(Point { params: labels, seed, metrics })
    }

    /// Runs every grid point on `threads` threads (at least 1); `progress(done, total)`
    /// is called after each. Points come back in grid order whatever the threads did.
    pub fn run(&self, threads: usize, progress: &(dyn Fn(usize, usize) + Sync)) -> Result<Vec<Point>, String> {
        let grid = self.grid();
        let total = grid.len();
        let next = AtomicUsize::new(0);
        let done = AtomicUsize::new(0);
        let results: Mutex<Vec<Option<Result<Point, String>>>> = Mutex::new(vec![None; total]);
        std::thread::scope(|s| {
            for _ in 0..threads.clamp(1, total.max(1)) {
                s.spawn(|| loop {
                    let k = next.fetch_add(1, Ordering::Relaxed);
                    if k >= total {
                        break;
                    }
                    let (idx, seed) = &grid[k];
                    let r = self.run_point(idx, *seed);
                    let failed = r.is_err();
                    results.lock().unwrap_or_else(|e| e.into_inner())[k] = Some(r);
                    progress(done.fetch_add(1, Ordering::Relaxed) + 1, total);
                    if failed {
                        // stop handing out work; the first error is reported
                        next.store(total, Ordering::Relaxed);
                    }
                });
            }
        });
        let results = results.into_inner().unwrap_or_else(|e| e.into_inner());
        let mut out = Vec::with_capacity(total);
        for r in results {
            match r {
                Some(Ok(p)) => out.push(p),
                Some(Err(e)) => return Err(e),
                None => {} // skipped after an error (never reached: an error returns above)
            }
        }
        Ok(out)
    }

    fn header(&self) -> Vec<String> {
        let mut h: Vec<String> = self.spec.params.iter().map(|p| p.path.clone()).collect();
        h.push("seed".into());
        h.extend(self.spec.metrics.iter().cloned());
        h
    }

    /// The table as CSV (RFC 4180 quoting), one row per run.
    pub fn csv(&self, points: &[Point]) -> String {
        fn cell(s: &str) -> String {
            if s.contains([',', '"', '\n', '\r']) {
                format!("\"{}\"", s.replace('"', "\"\""))
            } else {
                s.to_string()
            }
        }
        let mut o = self.header().iter().map(|h| cell(h)).collect::<Vec<_>>().join(",") + "\n";
        for p in points {
            let mut row: Vec<String> = p.params.iter().map(|v| cell(v)).collect();
            row.push(p.seed.to_string());
            row.extend(p.metrics.iter().map(|m| format!("{m}")));
            o += &(row.join(",") + "\n");
        }
        o
    }

    /// The table as JSON: `{sweep, base, params, metrics, rows: [{params: {...}, seed, metrics: {...}}]}`.
    pub fn json(&self, points: &[Point]) -> serde_json::Value {
        let rows: Vec<serde_json::Value> = points
            .iter()
            .map(|p| {
                let params: serde_json::Map<String, serde_json::Value> =
                    self.spec.params.iter().zip(&p.params).map(|(k, v)| (k.path.clone(), serde_json::Value::String(v.clone()))).collect();
                let metrics: serde_json::Map<String, serde_json::Value> =
                    self.spec.metrics.iter().zip(&p.metrics).map(|(k, v)| (k.clone(), serde_json::json!(v))).collect();
                serde_json::json!({ "params": params, "seed": p.seed, "metrics": metrics })
            })
            .collect();
        serde_json::json!({
            "sweep": self.name,
            "base": self.base_file,
            "params": self.spec.params.iter().map(|p| p.path.clone()).collect::<Vec<_>>(),
            "metrics": self.spec.metrics,
            "rows": rows,
        })
    }

    /// A readable table.
    pub fn table(&self, points: &[Point]) -> String {
        let h = self.header();
        let mut rows: Vec<Vec<String>> = vec![h.clone()];
        for p in points {
            let mut r = p.params.clone();
            r.push(p.seed.to_string());
            r.extend(p.metrics.iter().map(|m| crate::html::num(*m)));
            rows.push(r);
        }
        let widths: Vec<usize> = (0..h.len()).map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0)).collect();
        let mut o = String::new();
        for r in &rows {
            let line: Vec<String> = r.iter().zip(&widths).map(|(v, w)| format!("{v:>w$}")).collect();
            o += line.join("  ").trim_end();
            o.push('\n');
        }
        o
    }

    /// The plot: metric `plot.y` (default the first) against parameter `plot.x` (default
    /// the first), one line per combination of the other parameters, each point the mean
    /// over seeds. Numbers and durations ("5ms", in ms) make a numeric axis, other
    /// values are placed evenly in spec order.
    pub fn svg(&self, points: &[Point]) -> String {
        let xi = self.spec.plot.x.as_ref().and_then(|x| self.spec.params.iter().position(|p| &p.path == x)).unwrap_or(0);
        let yi = self.spec.plot.y.as_ref().and_then(|y| self.spec.metrics.iter().position(|m| m == y)).unwrap_or(0);
        let xp = &self.spec.params[xi];
        let numeric: Option<Vec<f64>> = xp.values.iter().map(as_number).collect();
        let xs: Vec<f64> = numeric.clone().unwrap_or_else(|| (0..xp.values.len()).map(|i| i as f64).collect());
        let xlabels: Vec<String> = xp.values.iter().map(label).collect();
        // group: the other parameters' labels → x index → values over seeds
        let mut groups: BTreeMap<SeriesKey, BTreeMap<usize, Vec<f64>>> = BTreeMap::new();
        let mut order: Vec<SeriesKey> = Vec::new();
        for p in points {
            let key: SeriesKey = p
                .params
                .iter()
                .enumerate()
                .filter(|(i, _)| *i != xi)
                .map(|(i, v)| (self.spec.params[i].values.iter().position(|x| label(x) == *v).unwrap_or(0), format!("{} = {v}", self.spec.params[i].path)))
                .collect();
            let x = xlabels.iter().position(|l| *l == p.params[xi]).unwrap_or(0);
            if !groups.contains_key(&key) {
                order.push(key.clone());
            }
            groups.entry(key).or_default().entry(x).or_default().push(p.metrics[yi]);
        }
        order.sort();
        let series: Vec<Series> = order
            .iter()
            .enumerate()
            .map(|(k, key)| {
                let pts = groups[key].iter().filter(|(_, v)| v.iter().all(|y| y.is_finite())).map(|(&x, v)| (xs[x], v.iter().sum::<f64>() / v.len() as f64)).collect();
                let name = if key.is_empty() { self.spec.metrics[yi].clone() } else { key.iter().map(|(_, s)| s.as_str()).collect::<Vec<_>>().join(", ") };
                Series { name, points: pts, step_to: None, colour: svg::colour(k), dashed: false, markers: true }
            })
            .collect();
        let lo = xs.iter().cloned().fold(f64::INFINITY, f64::min);
        let hi = xs.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let pad = if hi > lo { (hi - lo) * 0.03 } else { 1.0 };
        let ticks: Option<Vec<(f64, String)>> = if numeric.is_none() { Some(xs.iter().cloned().zip(xlabels.clone()).collect()) } else { None };
        let unit = if xp.values.iter().all(|v| matches!(v, toml::Value::String(_))) && numeric.is_some() { " (ms)" } else { "" };
        let seeds = if self.spec.seeds.len() > 1 { format!(", mean of {} seeds", self.spec.seeds.len()) } else { String::new() };
        svg::standalone(&svg::line_plot_ticks(
            &format!("{}: {} against {}{seeds}", self.name, self.spec.metrics[yi], xp.path),
            &format!("{}{unit}", xp.path),
            &self.spec.metrics[yi],
            (lo - pad, hi + pad),
            &series,
            ticks.as_deref(),
        ))
    }
}

/// A plot line: the other parameters' (value index, "path = value") pairs.
type SeriesKey = Vec<(usize, String)>;

/// A parameter value as a number: integers, floats, and durations ("7.5ms", in ms).
fn as_number(v: &toml::Value) -> Option<f64> {
    match v {
        toml::Value::Integer(i) => Some(*i as f64),
        toml::Value::Float(f) => Some(*f),
        toml::Value::String(s) => vassal_core::parse_duration(s).ok().map(|ns| ns as f64 / 1e6),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_pick_tables_and_named_array_elements() {
        let mut t: toml::Table = toml::from_str(
            r#"
            until = "1s"
            [machine]
            cpus = 1
            [[task]]
            name = "a"
            params = { weight = 1 }
            [[task]]
            name = "b"
            "#,
        )
        .unwrap();
        set_path(&mut t, "machine.cpus", toml::Value::Integer(4)).unwrap();
        set_path(&mut t, "task.b.params", toml::Value::Table(toml::Table::new())).unwrap();
        set_path(&mut t, "task.a.params.weight", toml::Value::Integer(3)).unwrap();
        set_path(&mut t, "task.1.count", toml::Value::Integer(2)).unwrap();
        set_path(&mut t, "until", toml::Value::String("2s".into())).unwrap();
        assert_eq!(t["machine"]["cpus"].as_integer(), Some(4));
        assert_eq!(t["task"][0]["params"]["weight"].as_integer(), Some(3));
        assert_eq!(t["task"][1]["count"].as_integer(), Some(2));
        assert_eq!(t["until"].as_str(), Some("2s"));
        let e = set_path(&mut t, "task.c.count", toml::Value::Integer(1)).unwrap_err();
        assert!(e.contains("no element of 'task' is named 'c'"), "{e}");
        let e = set_path(&mut t, "machine.cpus.x", toml::Value::Integer(1)).unwrap_err();
        assert!(e.contains("'machine.cpus' is integer, not a table"), "{e}");
    }

    #[test]
    fn csv_quotes_what_needs_quoting() {
        let spec: Spec = toml::from_str(r#"base = "x"
metrics = ["tasks.share.spread"]
[[param]]
path = "task.a.behaviour"
values = ["p,q"]"#)
        .unwrap();
        let s = Sweep::new("s".into(), spec, "[[task]]\nname = \"a\"\nbehaviour = 1\n", "x").unwrap();
        let csv = s.csv(&[Point { params: vec!["say \"hi\", ok".into()], seed: 1, metrics: vec![0.5] }]);
        assert_eq!(csv, "task.a.behaviour,seed,tasks.share.spread\n\"say \"\"hi\"\", ok\",1,0.5\n");
    }
}
