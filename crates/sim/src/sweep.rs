//! Experiments over several variants of one scenario (docs/repro.md, "Sweeps"): a base
//! scenario, `[[axis]]` tables whose values override keys of it, and `[[expect]]` rows
//! whose metric is an arithmetic expression over the variants' reports — so a paper's
//! figure (five systems × eight process counts) is one file, and a row can judge a shape
//! (a ratio between two curves at one point) rather than a single number.
//!
//! ```toml
//! [[axis]]
//! name = "module"
//! values = [
//!   { name = "v7", set = { "default.policy" = "unix" } },
//!   { name = "fb", set = { "default.policy" = "fb" } },
//! ]
//! [[axis]]
//! name = "procs"
//! values = [ { name = "1", set = { "task.1.count" = 1 } }, { name = "2", set = { "task.1.count" = 2 } } ]
//!
//! [[show]]                     # optional: a table printed by `vassal sweep`
//! name = "swap-outs"
//! metric = "kernel.swap_outs"
//!
//! [[expect]]
//! id = "x.ratio"
//! metric = "kernel.swap_outs[fb/2] / kernel.swap_outs[v7/2]"
//! ...
//! ```
//!
//! A variant takes one value of every axis; its name is the value names joined by "/",
//! in axis order. A `set` key is a dotted path into the base document: table keys, and
//! array indices for arrays (`task.1.count` is the second `[[task]]`'s count); the last
//! step may add a key to a table, every earlier one must exist. Expressions: numbers,
//! `+ - * /`, parentheses and `METRIC[VARIANT]` (METRIC as in [`crate::repro::metric`]).

use std::collections::BTreeMap;
use std::path::Path;

use crate::report::Report;
use crate::scenario::parse_scenario;

/// One value of an axis: its name and the keys it sets.
#[derive(Clone, Debug)]
pub struct AxisValue {
    pub name: String,
    pub set: Vec<(String, toml::Value)>,
}

#[derive(Clone, Debug)]
pub struct Axis {
    pub name: String,
    pub values: Vec<AxisValue>,
}

/// A table `vassal sweep` prints: `metric` for every variant.
#[derive(Clone, Debug)]
pub struct Show {
    pub name: String,
    pub metric: String,
}

/// A sweep experiment: the base document and its axes.
#[derive(Clone, Debug)]
pub struct Sweep {
    pub file: String,
    pub base: toml::Table,
    pub axes: Vec<Axis>,
    pub show: Vec<Show>,
    /// Each variant runs once per seed; a metric is the mean over the runs (empty: the
    /// scenario's own seed, once).
    pub seeds: Vec<u64>,
}

/// The runs of every variant, by variant name.
pub type Runs = BTreeMap<String, Vec<Report>>;

/// The mean of `metric` over a variant's runs.
pub fn mean_metric(runs: &[Report], metric: &str) -> Result<f64, String> {
    if runs.is_empty() {
        return Err("no runs".into());
    }
    let mut sum = 0.0;
    for r in runs {
        sum += crate::repro::metric(r, metric)?;
    }
    Ok(sum / runs.len() as f64)
}

/// True if the experiment document is a sweep (has `[[axis]]`).
pub fn is_sweep(table: &toml::Table) -> bool {
    table.contains_key("axis")
}

fn str_of<'a>(t: &'a toml::Table, key: &str, what: &str) -> Result<&'a str, String> {
    t.get(key).and_then(|v| v.as_str()).ok_or_else(|| format!("{what} needs {key} = \"...\""))
}

impl Sweep {
    /// Reads the sweep parts of an experiment document (`file` names it in errors).
    pub fn from_table(file: &str, table: &toml::Table) -> Result<Sweep, String> {
        let mut base = table.clone();
        let axes_v = base.remove("axis");
        let show_v = base.remove("show");
        let seeds = match base.remove("seeds") {
            None => Vec::new(),
            Some(toml::Value::Array(a)) if !a.is_empty() => a
                .iter()
                .map(|v| v.as_integer().filter(|&i| i >= 0).map(|i| i as u64).ok_or_else(|| format!("{file}: seeds must be integers >= 0, found {v}")))
                .collect::<Result<Vec<_>, _>>()?,
            Some(v) => return Err(format!("{file}: seeds must be a non-empty array of integers, found {v}")),
        };
        base.remove("expect");
        let mut axes = Vec::new();
        let Some(toml::Value::Array(list)) = axes_v else {
            return Err(format!("{file}: [[axis]] must be an array of tables"));
        };
        for (k, a) in list.iter().enumerate() {
            let what = format!("{file}: axis {}", k + 1);
            let a = a.as_table().ok_or_else(|| format!("{what}: expected a table"))?;
            if let Some(bad) = a.keys().find(|k| !["name", "values"].contains(&k.as_str())) {
                return Err(format!("{what}: unknown key `{bad}`, expected `name` or `values`"));
            }
            let name = str_of(a, "name", &what)?.to_string();
            let vals = a.get("values").and_then(|v| v.as_array()).ok_or_else(|| format!("{what} ('{name}'): needs values = [...]"))?;
            if vals.is_empty() {
                return Err(format!("{what} ('{name}'): values is empty"));
            }
            let mut values = Vec::new();
            for v in vals {
                let v = v.as_table().ok_or_else(|| format!("{what} ('{name}'): each value is a table {{ name = \"...\", set = {{ ... }} }}"))?;
                if let Some(bad) = v.keys().find(|k| !["name", "set"].contains(&k.as_str())) {
                    return Err(format!("{what} ('{name}'): unknown key `{bad}` in a value, expected `name` or `set`"));
                }
                let vname = str_of(v, "name", &format!("{what} ('{name}'): a value"))?.to_string();
                if vname.is_empty() || vname.contains(['/', '[', ']']) {
                    return Err(format!("{what} ('{name}'): value name '{vname}' must be non-empty without '/', '[' or ']'"));
                }
                if values.iter().any(|x: &AxisValue| x.name == vname) {
                    return Err(format!("{what} ('{name}'): duplicate value '{vname}'"));
                }
                let set = match v.get("set") {
                    None => Vec::new(),
                    Some(toml::Value::Table(t)) => t.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
                    Some(_) => return Err(format!("{what} ('{name}'): value '{vname}': set must be a table of \"dotted.path\" = value")),
                };
                values.push(AxisValue { name: vname, set });
            }
            axes.push(Axis { name, values });
        }
        let mut show = Vec::new();
        if let Some(v) = show_v {
            let list = v.as_array().ok_or_else(|| format!("{file}: [[show]] must be an array of tables"))?;
            for s in list {
                let s = s.as_table().ok_or_else(|| format!("{file}: [[show]]: expected a table"))?;
                show.push(Show {
                    name: str_of(s, "name", &format!("{file}: [[show]]"))?.to_string(),
                    metric: str_of(s, "metric", &format!("{file}: [[show]]"))?.to_string(),
                });
            }
        }
        let sweep = Sweep { file: file.to_string(), base, axes, show, seeds };
        // Every variant must build (so a bad override is found before anything runs).
        for v in sweep.variants() {
            sweep.document(&v)?;
        }
        Ok(sweep)
    }

    /// Every variant: one value index per axis, the first axis slowest.
    pub fn variants(&self) -> Vec<Vec<usize>> {
        let mut out = vec![Vec::new()];
        for a in &self.axes {
            out = out.into_iter().flat_map(|p| (0..a.values.len()).map(move |k| [p.clone(), vec![k]].concat())).collect();
        }
        out
    }

    pub fn variant_name(&self, v: &[usize]) -> String {
        v.iter().zip(&self.axes).map(|(&k, a)| a.values[k].name.as_str()).collect::<Vec<_>>().join("/")
    }

    /// The scenario document of a variant.
    pub fn document(&self, v: &[usize]) -> Result<toml::Table, String> {
        let mut doc = self.base.clone();
        for (&k, a) in v.iter().zip(&self.axes) {
            let val = &a.values[k];
            for (path, value) in &val.set {
                set_path(&mut doc, path, value.clone())
                    .map_err(|e| format!("{}: axis '{}' value '{}': set \"{path}\": {e}", self.file, a.name, val.name))?;
            }
        }
        Ok(doc)
    }

    /// The scenario text of the variant named `name` (e.g. "v7/18").
    pub fn variant_text(&self, name: &str) -> Result<String, String> {
        let v = self.variants().into_iter().find(|v| self.variant_name(v) == name).ok_or_else(|| {
            format!("{}: no variant '{name}' (variants: {})", self.file, self.variants().iter().map(|v| self.variant_name(v)).collect::<Vec<_>>().join(", "))
        })?;
        let mut doc = self.document(&v)?;
        doc.insert("name".into(), toml::Value::String(format!("{}-{}", doc.get("name").and_then(|n| n.as_str()).unwrap_or("sweep"), name.replace('/', "-"))));
        toml::to_string(&doc).map_err(|e| format!("{}: variant {name}: {e}", self.file))
    }

    /// Runs every variant (once per seed); the reports by variant name.
    pub fn run(&self) -> Result<Runs, String> {
        let mut out = BTreeMap::new();
        for v in self.variants() {
            let name = self.variant_name(&v);
            let doc = self.document(&v)?;
            let text = toml::to_string(&doc).map_err(|e| format!("{}: variant {name}: {e}", self.file))?;
            let label = format!("{} [variant {name}]", self.file);
            let sc = parse_scenario(&text, &label).map_err(|e| e.to_string())?;
            let seeds = if self.seeds.is_empty() { vec![sc.seed] } else { self.seeds.clone() };
            let mut reports = Vec::with_capacity(seeds.len());
            for seed in seeds {
                let sc = crate::model::Scenario { seed, ..sc.clone() };
                reports.push(crate::simulate(sc).map_err(|e| format!("{label} seed {seed}: {e}"))?);
            }
            out.insert(name, reports);
        }
        Ok(out)
    }

    /// Evaluates an expression whose metrics all name a variant (`METRIC[VARIANT]`),
    /// each the mean over that variant's runs.
    pub fn eval(&self, expr: &str, runs: &Runs) -> Result<f64, String> {
        eval(expr, &|m: &str, v: Option<&str>| {
            let v = v.ok_or_else(|| format!("metric '{m}' needs a variant: {m}[VARIANT]"))?;
            let r = runs.get(v).ok_or_else(|| {
                format!("no variant '{v}' (variants: {})", runs.keys().cloned().collect::<Vec<_>>().join(", "))
            })?;
            mean_metric(r, m)
        })
    }

    /// The tables of `[[show]]`: for a two-axis sweep, one row per value of the first
    /// axis and one column per value of the second; otherwise one line per variant.
    pub fn tables(&self, reports: &Runs) -> Result<String, String> {
        use std::fmt::Write as _;
        let mut o = String::new();
        for s in &self.show {
            let _ = writeln!(o, "{} ({})", s.name, s.metric);
            let value = |v: &[usize]| -> Result<String, String> {
                let name = self.variant_name(v);
                let r = reports.get(&name).ok_or_else(|| format!("no report for variant {name}"))?;
                eval(&s.metric, &|m: &str, var: Option<&str>| match var {
                    None => mean_metric(r, m),
                    Some(x) => mean_metric(reports.get(x).ok_or_else(|| format!("no variant '{x}'"))?, m),
                })
                .map(|x| format!("{x:.4}"))
            };
            if self.axes.len() == 2 {
                let (a, b) = (&self.axes[0], &self.axes[1]);
                let _ = write!(o, "  {:<14}", format!("{}\\{}", a.name, b.name));
                for bv in &b.values {
                    let _ = write!(o, " {:>10}", bv.name);
                }
                let _ = writeln!(o);
                for i in 0..a.values.len() {
                    let _ = write!(o, "  {:<14}", a.values[i].name);
                    for j in 0..b.values.len() {
                        let _ = write!(o, " {:>10}", value(&[i, j])?);
                    }
                    let _ = writeln!(o);
                }
            } else {
                for v in self.variants() {
                    let _ = writeln!(o, "  {:<24} {}", self.variant_name(&v), value(&v)?);
                }
            }
            let _ = writeln!(o);
        }
        Ok(o)
    }
}

/// Loads a sweep experiment file.
pub fn load(path: &Path) -> Result<Sweep, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let table: toml::Table = toml::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    if !is_sweep(&table) {
        return Err(format!("{}: not a sweep (no [[axis]])", path.display()));
    }
    Sweep::from_table(&path.display().to_string(), &table)
}

/// Sets `path` (dotted; integer steps index arrays) in `doc` to `value`.
fn set_path(doc: &mut toml::Table, path: &str, value: toml::Value) -> Result<(), String> {
    let steps: Vec<&str> = path.split('.').collect();
    if steps.iter().any(|s| s.is_empty()) {
        return Err("empty step in the path".into());
    }
    let (last, init) = steps.split_last().expect("split gives one step at least");
    if init.is_empty() {
        doc.insert(last.to_string(), value);
        return Ok(());
    }
    let mut here: &mut toml::Value = doc.get_mut(steps[0]).ok_or_else(|| format!("no key `{}`", steps[0]))?;
    for (k, step) in init.iter().enumerate().skip(1) {
        here = step_into(here, step).ok_or_else(|| format!("no `{}`", steps[..=k].join(".")))?;
    }
    match here {
        toml::Value::Table(t) => {
            t.insert(last.to_string(), value);
            Ok(())
        }
        toml::Value::Array(a) => {
            let i: usize = last.parse().map_err(|_| format!("`{}` is an array; `{last}` is not an index", init.join(".")))?;
            let slot = a.get_mut(i).ok_or_else(|| format!("`{}` has no element {i}", init.join(".")))?;
            *slot = value;
            Ok(())
        }
        _ => Err(format!("`{}` is neither a table nor an array", init.join("."))),
    }
}

fn step_into<'a>(v: &'a mut toml::Value, step: &str) -> Option<&'a mut toml::Value> {
    match v {
        toml::Value::Table(t) => t.get_mut(step),
        toml::Value::Array(a) => a.get_mut(step.parse::<usize>().ok()?),
        _ => None,
    }
}

/// Evaluates an expression: numbers, `+ - * /`, parentheses, and metric references
/// `METRIC` or `METRIC[VARIANT]`, looked up by `lookup(metric, variant)`.
/// Looks up `METRIC` (second argument None) or `METRIC[VARIANT]`.
pub type Lookup<'a> = dyn Fn(&str, Option<&str>) -> Result<f64, String> + 'a;

pub fn eval(expr: &str, lookup: &Lookup) -> Result<f64, String> {
    let mut p = Parser { s: expr.as_bytes(), i: 0, lookup };
    let v = p.expr()?;
    p.ws();
    if p.i != p.s.len() {
        return Err(format!("expression '{expr}': unexpected '{}' at column {}", &expr[p.i..], p.i + 1));
    }
    Ok(v)
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
    lookup: &'a Lookup<'a>,
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
    fn expr(&mut self) -> Result<f64, String> {
        let mut v = self.term()?;
        while let Some(op @ (b'+' | b'-')) = self.peek() {
            self.i += 1;
            let r = self.term()?;
            v = if op == b'+' { v + r } else { v - r };
        }
        Ok(v)
    }
    fn term(&mut self) -> Result<f64, String> {
        let mut v = self.factor()?;
        while let Some(op @ (b'*' | b'/')) = self.peek() {
            self.i += 1;
            let r = self.factor()?;
            v = if op == b'*' { v * r } else { v / r };
        }
        Ok(v)
    }
    fn factor(&mut self) -> Result<f64, String> {
        match self.peek() {
            Some(b'(') => {
                self.i += 1;
                let v = self.expr()?;
                if self.peek() != Some(b')') {
                    return Err(format!("missing ')' at column {}", self.i + 1));
                }
                self.i += 1;
                Ok(v)
            }
            Some(b'-') => {
                self.i += 1;
                Ok(-self.factor()?)
            }
            Some(c) if c.is_ascii_digit() => {
                let start = self.i;
                while self.i < self.s.len() && (self.s[self.i].is_ascii_digit() || self.s[self.i] == b'.') {
                    self.i += 1;
                }
                let t = std::str::from_utf8(&self.s[start..self.i]).unwrap_or("");
                t.parse::<f64>().map_err(|_| format!("bad number '{t}'"))
            }
            Some(c) if c.is_ascii_alphabetic() => {
                let start = self.i;
                while self.i < self.s.len() && (self.s[self.i].is_ascii_alphanumeric() || b"_.".contains(&self.s[self.i])) {
                    self.i += 1;
                }
                let metric = std::str::from_utf8(&self.s[start..self.i]).unwrap_or("").to_string();
                let variant = if self.s.get(self.i) == Some(&b'[') {
                    let close = self.s[self.i..].iter().position(|&c| c == b']').ok_or("missing ']'")?;
                    let v = std::str::from_utf8(&self.s[self.i + 1..self.i + close]).unwrap_or("").to_string();
                    self.i += close + 1;
                    Some(v)
                } else {
                    None
                };
                (self.lookup)(&metric, variant.as_deref())
            }
            Some(c) => Err(format!("unexpected '{}' at column {}", c as char, self.i + 1)),
            None => Err("unexpected end of expression".into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expressions_follow_precedence_and_look_up_variants() {
        let look = |m: &str, v: Option<&str>| -> Result<f64, String> {
            match (m, v) {
                ("a.b", Some("x/1")) => Ok(6.0),
                ("a.b", Some("y/1")) => Ok(4.0),
                ("c", None) => Ok(2.0),
                _ => Err(format!("no {m} {v:?}")),
            }
        };
        assert_eq!(eval("a.b[x/1] / a.b[y/1]", &look).unwrap(), 1.5);
        assert_eq!(eval("1 + 2 * 3", &look).unwrap(), 7.0);
        assert_eq!(eval("(1 + 2) * 3 - c", &look).unwrap(), 7.0);
        assert_eq!(eval("36 * 60 / a.b[x/1]", &look).unwrap(), 360.0);
        assert_eq!(eval("-c + 1", &look).unwrap(), -1.0);
        assert!(eval("a.b[z/1]", &look).is_err());
        assert!(eval("1 +", &look).is_err());
        assert!(eval("(1", &look).is_err());
        assert!(eval("1 2", &look).is_err());
    }

    #[test]
    fn set_path_walks_tables_and_arrays() {
        let mut doc: toml::Table = toml::from_str("[[task]]\nname = \"a\"\n[[task]]\nname = \"b\"\nphases = [1, 2]\n[m]\nx = 1\n").unwrap();
        set_path(&mut doc, "task.1.count", toml::Value::Integer(3)).unwrap();
        set_path(&mut doc, "task.1.phases.0", toml::Value::Integer(9)).unwrap();
        set_path(&mut doc, "m.x", toml::Value::Integer(2)).unwrap();
        let t = &doc["task"].as_array().unwrap()[1];
        assert_eq!(t["count"].as_integer(), Some(3));
        assert_eq!(t["phases"].as_array().unwrap()[0].as_integer(), Some(9));
        assert_eq!(doc["m"]["x"].as_integer(), Some(2));
        assert!(set_path(&mut doc, "task.5.count", toml::Value::Integer(1)).is_err());
        assert!(set_path(&mut doc, "nope.x", toml::Value::Integer(1)).is_err());
        assert!(set_path(&mut doc, "task.1.phases.x", toml::Value::Integer(1)).is_err());
    }

    #[test]
    fn variants_are_the_cross_product_first_axis_slowest() {
        let doc: toml::Table = toml::from_str(
            "until = \"1s\"\n[machine]\ncpus = 1\n[[axis]]\nname = \"p\"\nvalues = [{ name = \"a\", set = { \"machine.cpus\" = 1 } }, { name = \"b\", set = { \"machine.cpus\" = 2 } }]\n[[axis]]\nname = \"q\"\nvalues = [{ name = \"1\" }, { name = \"2\" }, { name = \"3\" }]\n",
        )
        .unwrap();
        let s = Sweep::from_table("t.toml", &doc).unwrap();
        let names: Vec<String> = s.variants().iter().map(|v| s.variant_name(v)).collect();
        assert_eq!(names, ["a/1", "a/2", "a/3", "b/1", "b/2", "b/3"]);
        assert_eq!(s.document(&[1, 0]).unwrap()["machine"]["cpus"].as_integer(), Some(2));
    }
}
