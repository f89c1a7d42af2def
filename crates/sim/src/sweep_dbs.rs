//! Sweeps: one experiment file, many runs. An experiment file with a `[sweep]` table is a
//! base scenario plus axes of named settings; each combination of one entry per axis is
//! a run (the base with those settings), and `[[expect]]` rows compare runs.
//!
//! ```toml
//! [sweep]
//! axes = ["sched", "contention"]          # run names: "dbs.none", "bvt.none", ...
//! [sweep.sched]
//! dbs = { "default.policy" = "dbs" }
//! bvt = { "default.policy" = "bvt", "default.params" = { c = "200ms" } }
//! [sweep.contention]
//! none = { x = 0, "task.randres*.behaviour.fussiness" = 0.0 }
//! high = { x = 1, "task.randres*.behaviour.fussiness" = 0.66 }
//! [sweep.runs]                             # optional single runs besides the product
//! bvt_alone = { "default.policy" = "bvt" }
//! ```
//!
//! A setting's key is a dotted path into the scenario's TOML; `task.NAME` selects the
//! `[[task]]` named NAME, `task.PREFIX*` every task whose name starts with PREFIX. The
//! value replaces what is there (tables are created on the way, and the scenario parser
//! then refuses anything misplaced). The key `x` is not a setting: it is the entry's
//! position on its axis, for `crossing`.
//!
//! Metrics of a sweep's rows:
//! - `RUN:PATH` — PATH (see [`crate::repro::metric`]) of the run named RUN;
//! - `RUN:PATH - RUN:PATH` and `RUN:PATH / RUN:PATH` — a difference or ratio of two;
//! - `crossing(AXIS, PATTERN:PATH, RUN:PATH)` — along AXIS (entries ordered by `x`), where
//!   the series of PATTERN (a run name with `*` in AXIS's place) first falls below the
//!   reference value: the `x` at which it crosses, linearly interpolated between the two
//!   entries around the crossing (the first `x` if it starts below; NaN if it never falls
//!   below, which fails the row).

use std::collections::BTreeMap;
use std::path::Path;

use crate::repro::{metric, Expect, Row};
use crate::report::Report;
use crate::scenario::parse_scenario;

/// One entry of an axis: its name, its `x`, and its settings.
struct Entry {
    name: String,
    x: Option<f64>,
    set: toml::Table,
}

struct Sweep {
    axes: Vec<(String, Vec<Entry>)>,
    extra: Vec<Entry>,
}

fn entries(table: &toml::Table, what: &str) -> Result<Vec<Entry>, String> {
    table
        .iter()
        .map(|(name, v)| {
            if name.is_empty() || name.contains('.') || name.contains('*') || name.contains(':') {
                return Err(format!("{what}: entry name '{name}' may not be empty or contain '.', '*' or ':'"));
            }
            let mut set = v.as_table().cloned().ok_or_else(|| format!("{what}.{name} must be a table of settings"))?;
            let x = match set.remove("x") {
                None => None,
                Some(toml::Value::Integer(i)) => Some(i as f64),
                Some(toml::Value::Float(f)) if f.is_finite() => Some(f),
                Some(v) => return Err(format!("{what}.{name}: x must be a finite number, found {v}")),
            };
            Ok(Entry { name: name.clone(), x, set })
        })
        .collect()
}

fn parse_sweep(t: &toml::Table) -> Result<Sweep, String> {
    let axes_list = match t.get("axes") {
        Some(toml::Value::Array(a)) => a
            .iter()
            .map(|v| v.as_str().map(str::to_string).ok_or_else(|| format!("sweep.axes: {v} is not a name")))
            .collect::<Result<Vec<_>, _>>()?,
        None => Vec::new(),
        Some(v) => return Err(format!("sweep.axes must be an array of axis names, found {v}")),
    };
    for k in t.keys() {
        if k != "axes" && k != "runs" && !axes_list.contains(k) {
            return Err(format!("sweep.{k}: not an axis listed in sweep.axes ({})", axes_list.join(", ")));
        }
    }
    let mut axes = Vec::new();
    for a in &axes_list {
        if a == "axes" || a == "runs" {
            return Err(format!("sweep.axes: '{a}' is reserved"));
        }
        let table = t.get(a).and_then(|v| v.as_table()).ok_or_else(|| format!("sweep.{a}: axis has no table of entries"))?;
        let e = entries(table, &format!("sweep.{a}"))?;
        if e.is_empty() {
            return Err(format!("sweep.{a}: an axis needs at least one entry"));
        }
        axes.push((a.clone(), e));
    }
    let extra = match t.get("runs") {
        None => Vec::new(),
        Some(v) => entries(v.as_table().ok_or("sweep.runs must be a table")?, "sweep.runs")?,
    };
    if axes.is_empty() && extra.is_empty() {
        return Err("[sweep] needs axes or runs".into());
    }
    Ok(Sweep { axes, extra })
}

/// Sets `value` at the dotted `path` of `table` (see the module documentation).
fn set_path(table: &mut toml::Table, path: &[&str], value: &toml::Value, full: &str) -> Result<(), String> {
    let (first, rest) = path.split_first().ok_or_else(|| format!("setting '{full}': empty path"))?;
    if first.is_empty() {
        return Err(format!("setting '{full}': empty path segment"));
    }
    if rest.is_empty() {
        table.insert(first.to_string(), value.clone());
        return Ok(());
    }
    if *first == "task" {
        let (sel, rest) = rest.split_first().ok_or_else(|| format!("setting '{full}': task needs a name"))?;
        if rest.is_empty() {
            return Err(format!("setting '{full}': cannot replace a whole task"));
        }
        let tasks = table
            .get_mut("task")
            .and_then(|t| t.as_array_mut())
            .ok_or_else(|| format!("setting '{full}': the scenario has no [[task]]"))?;
        let mut hits = 0;
        for t in tasks.iter_mut() {
            let Some(tt) = t.as_table_mut() else { continue };
            let name = tt.get("name").and_then(|n| n.as_str()).unwrap_or("");
            let matches = match sel.strip_suffix('*') {
                Some(prefix) => name.starts_with(prefix),
                None => name == *sel,
            };
            if matches {
                hits += 1;
                set_path(tt, rest, value, full)?;
            }
        }
        if hits == 0 {
            return Err(format!("setting '{full}': no task named {sel}"));
        }
        return Ok(());
    }
    let next = table.entry(first.to_string()).or_insert_with(|| toml::Value::Table(toml::Table::new()));
    let next = next.as_table_mut().ok_or_else(|| format!("setting '{full}': '{first}' is not a table"))?;
    set_path(next, rest, value, full)
}

fn apply(base: &mut toml::Table, set: &toml::Table) -> Result<(), String> {
    for (k, v) in set {
        let path: Vec<&str> = k.split('.').collect();
        set_path(base, &path, v, k)?;
    }
    Ok(())
}

/// Every run: its name and its settings, in order.
fn runs(sw: &Sweep) -> Vec<(String, Vec<&toml::Table>)> {
    let mut out: Vec<(Vec<String>, Vec<&toml::Table>)> = vec![(Vec::new(), Vec::new())];
    for (_, entries) in &sw.axes {
        let mut next = Vec::new();
        for (names, sets) in &out {
            for e in entries {
                let mut n = names.clone();
                n.push(e.name.clone());
                let mut s = sets.clone();
                s.push(&e.set);
                next.push((n, s));
            }
        }
        out = next;
    }
    let mut all: Vec<(String, Vec<&toml::Table>)> =
        if sw.axes.is_empty() { Vec::new() } else { out.into_iter().map(|(n, s)| (n.join("."), s)).collect() };
    for e in &sw.extra {
        all.push((e.name.clone(), vec![&e.set]));
    }
    all
}

fn term(reports: &BTreeMap<String, Report>, t: &str) -> Result<f64, String> {
    let (run, path) = t.trim().split_once(':').ok_or_else(|| format!("'{t}': expected RUN:PATH"))?;
    let r = reports.get(run).ok_or_else(|| format!("no run named '{run}'"))?;
    metric(r, path)
}

fn crossing(sw: &Sweep, reports: &BTreeMap<String, Report>, args: &str) -> Result<f64, String> {
    let parts: Vec<&str> = args.split(',').map(str::trim).collect();
    let [axis, series, reference] = parts.as_slice() else {
        return Err("crossing needs three arguments: AXIS, PATTERN:PATH, RUN:PATH".into());
    };
    let pos = sw.axes.iter().position(|(a, _)| a == axis).ok_or_else(|| format!("crossing: no axis '{axis}'"))?;
    let (pattern, path) = series.split_once(':').ok_or_else(|| format!("crossing: '{series}': expected PATTERN:PATH"))?;
    let segs: Vec<&str> = pattern.split('.').collect();
    if segs.len() != sw.axes.len() || segs[pos] != "*" {
        return Err(format!("crossing: pattern '{pattern}' must name one entry per axis with '*' for axis '{axis}'"));
    }
    let limit = term(reports, reference)?;
    let mut points: Vec<(f64, f64)> = Vec::new();
    for e in &sw.axes[pos].1 {
        let x = e.x.ok_or_else(|| format!("crossing: entry '{}' of axis '{axis}' has no x", e.name))?;
        let mut s = segs.clone();
        s[pos] = &e.name;
        points.push((x, term(reports, &format!("{}:{path}", s.join(".")))?));
    }
    points.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut prev: Option<(f64, f64)> = None;
    for &(x, y) in &points {
        if y < limit {
            return Ok(match prev {
                None => x,
                Some((x0, y0)) => x0 + (x - x0) * (y0 - limit) / (y0 - y),
            });
        }
        prev = Some((x, y));
    }
    Ok(f64::NAN)
}

fn eval(sw: &Sweep, reports: &BTreeMap<String, Report>, expr: &str) -> Result<f64, String> {
    let e = expr.trim();
    if let Some(args) = e.strip_prefix("crossing(").and_then(|r| r.strip_suffix(')')) {
        return crossing(sw, reports, args);
    }
    if let Some((a, b)) = e.split_once(" - ") {
        return Ok(term(reports, a)? - term(reports, b)?);
    }
    if let Some((a, b)) = e.split_once(" / ") {
        return Ok(term(reports, a)? / term(reports, b)?);
    }
    term(reports, e)
}

/// Runs a sweep experiment (`table` holds the whole file) and judges its rows.
pub fn run(path: &Path, table: &toml::Table, expects: &[Expect]) -> Result<Vec<Row>, String> {
    let file = path.display().to_string();
    let sw = table
        .get("sweep")
        .and_then(|s| s.as_table())
        .ok_or_else(|| format!("{file}: [sweep] must be a table"))
        .and_then(|t| parse_sweep(t).map_err(|e| format!("{file}: {e}")))?;
    let mut base = table.clone();
    base.remove("sweep");
    base.remove("expect");
    let mut reports = BTreeMap::new();
    for (name, sets) in runs(&sw) {
        let mut t = base.clone();
        for s in sets {
            apply(&mut t, s).map_err(|e| format!("{file}: run {name}: {e}"))?;
        }
        let text = toml::to_string(&t).map_err(|e| format!("{file}: run {name}: {e}"))?;
        let sc = parse_scenario(&text, &format!("{file} [run {name}]")).map_err(|e| e.to_string())?;
        let report = crate::Sim::new(sc).and_then(|s| s.run()).map_err(|e| format!("{file}: run {name}: {e}"))?;
        reports.insert(name, report);
    }
    expects
        .iter()
        .map(|e| {
            eval(&sw, &reports, &e.metric)
                .map(|v| e.judge(v))
                .map_err(|m| format!("{file}: expect '{}': metric '{}': {m}", e.id, e.metric))
        })
        .collect()
}
