//! Loadable modules in scenarios (issue 8): a `[[scheduler]]` with `module = "x.wasm"`
//! instead of `policy`, and `vassal sim --load FILE`.
//!
//! A module scheduler's [`PolicySpec`] has the kind `module:PATH` (the path resolved
//! against the scenario file's directory) and the module's own parameters; its `usage` is
//! the one the module declares. The engine opens it with [`vassal_module::open_file`] —
//! WebAssembly (sandboxed: a fresh fuel budget per call, so a runaway module is ejected
//! at the same decision in every run) or a native shared library (trusted: the same
//! policy at native speed, but a module that never returns hangs the simulation; see
//! docs/modules.md "Native modules"), told apart by the file's first bytes — contains it
//! (a fault, an invalid decision or the watchdog ejects it, and its tasks go to the
//! scheduler below), and unloads it to the scheduler below.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use vassal_core::Usage;
use vassal_module::{Limits, Opened};
use vassal_policies::ParamValue;

use crate::model::PolicySpec;

/// The kind prefix of a module scheduler's [`PolicySpec`].
pub const MODULE_PREFIX: &str = "module:";

/// The module file of a module scheduler's spec (None: a built-in policy).
pub fn module_path(spec: &PolicySpec) -> Option<&Path> {
    spec.kind.strip_prefix(MODULE_PREFIX).map(Path::new)
}

/// The spec of a module scheduler loaded from `path` with `params`.
pub fn module_spec(path: &Path, params: BTreeMap<String, ParamValue>) -> PolicySpec {
    PolicySpec { kind: format!("{MODULE_PREFIX}{}", path.display()), params }
}

/// Resolves a module path written in a scenario file against the file's directory.
pub fn resolve(scenario_file: &str, module: &str) -> PathBuf {
    let p = Path::new(module);
    if p.is_absolute() {
        return p.to_path_buf();
    }
    Path::new(scenario_file).parent().map_or_else(|| p.to_path_buf(), |d| d.join(p))
}

/// Opens (compiles or maps, instantiates, initialises) the module of `spec` for `ncpus`
/// CPUs, of either form; its label is its file's name.
pub fn build_module(spec: &PolicySpec, ncpus: u16) -> Result<Opened, String> {
    let path = module_path(spec).ok_or_else(|| format!("'{}' is not a module", spec.kind))?;
    vassal_module::open_file(path, ncpus, &spec.params, Limits::default()).map_err(|e| format!("module {}: {e}", path.display()))
}

/// Loads the module once to check it and read its declared usage (scenario parsing).
pub fn probe(spec: &PolicySpec, ncpus: u16) -> Result<Usage, String> {
    build_module(spec, ncpus).map(|m| m.usage)
}

/// Where `vassal sim --load` puts a module, by scheduler name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Place {
    Top,
    Above(String),
    Below(String),
}

/// A `KEY=VALUE` module parameter from the command line: an integer, a number, `true` or
/// `false`, else a string (e.g. a duration "10ms").
pub fn parse_param(kv: &str) -> Result<(String, ParamValue), String> {
    let (k, v) = kv.split_once('=').ok_or_else(|| format!("--param {kv}: expected KEY=VALUE"))?;
    if k.is_empty() {
        return Err(format!("--param {kv}: empty key"));
    }
    let v = if let Ok(i) = v.parse::<i64>() {
        ParamValue::Int(i)
    } else if let Ok(f) = v.parse::<f64>() {
        ParamValue::Float(f)
    } else if v == "true" || v == "false" {
        ParamValue::Bool(v == "true")
    } else {
        ParamValue::Str(v.to_string())
    };
    Ok((k.to_string(), v))
}

/// `vassal sim SCENARIO --load FILE --name N`: makes scheduler `name` of the scenario run
/// the module in `path`. If the scenario has a `[[scheduler]]` named `name`, the module
/// replaces its policy (keeping its load and unload times and the tasks that name it: the
/// prototyping loop of docs/modules.md); otherwise a new scheduler is added at `place`.
/// `load_at`/`unload_at` override the times. The module is loaded once here to check it.
pub fn apply_load(
    sc: &mut crate::model::Scenario,
    path: &Path,
    name: &str,
    place: &Place,
    load_at: Option<vassal_core::Ns>,
    unload_at: Option<vassal_core::Ns>,
    params: BTreeMap<String, ParamValue>,
) -> Result<(), String> {
    if name == sc.default_name {
        return Err(format!("'{name}' is the default scheduler, which a module cannot replace"));
    }
    let spec = module_spec(path, params);
    let usage = probe(&spec, sc.machine.cpus)?;
    let existing = sc.schedulers.iter().position(|s| s.name == name);
    let mut entry = match existing {
        Some(i) => sc.schedulers.remove(i),
        None => crate::model::SchedulerSpec { name: name.to_string(), policy: spec.clone(), usage, load_at: 0, unload_at: None },
    };
    entry.policy = spec;
    entry.usage = usage;
    if let Some(t) = load_at {
        entry.load_at = t;
    }
    if unload_at.is_some() {
        entry.unload_at = unload_at;
    }
    if entry.unload_at.is_some_and(|u| u <= entry.load_at) {
        return Err(format!("scheduler '{name}': unload time must be later than its load time"));
    }
    let index_of = |n: &str| -> Result<usize, String> {
        if n == sc.default_name {
            return Ok(sc.schedulers.len());
        }
        sc.schedulers.iter().position(|s| s.name == n).ok_or_else(|| {
            let mut names: Vec<String> = sc.schedulers.iter().map(|s| format!("'{}'", s.name)).collect();
            names.push(format!("'{}'", sc.default_name));
            format!("no scheduler named '{n}' to place '{name}' by; the scenario has {}", names.join(", "))
        })
    };
    let at = match place {
        Place::Top if existing.is_some() => existing.unwrap_or(0),
        Place::Top => 0,
        Place::Above(n) => index_of(n)?,
        Place::Below(n) if *n == sc.default_name => return Err("nothing can be placed below the default scheduler".into()),
        Place::Below(n) => index_of(n)? + 1,
    };
    sc.schedulers.insert(at.min(sc.schedulers.len()), entry);
    Ok(())
}
