//! vassal-module: loadable scheduling policies (issue 8).
//!
//! A policy written against vassal's policy interface with the SDK (`sdk/vassal-sdk`) and
//! compiled to WebAssembly is loaded at run time into a running [`Dispatcher`] — above or
//! below a named scheduler, like Vassal's loadable scheduler drivers (paper 000 §3–4) —
//! and unloaded again. The module runs in a wasmi sandbox ([`WasmPolicy`]): a fuel budget
//! per call, a memory limit, and no access to anything but the ABI's imports. The
//! dispatcher distrusts it ([`vassal_core::Containment`]): a module that traps, runs past
//! its budget, exceeds its memory, makes an invalid decision or leaves a runnable task
//! unserved past the watchdog is ejected and its tasks fall back to the schedulers below.
//!
//! The entry points a mechanism (the simulator, the Linux agent's `vassal ctl load/unload`)
//! calls: [`load`] / [`load_bytes`], [`unload`], and after each event
//! [`Dispatcher::eject_failed`] (plus a timer at [`Dispatcher::next_watchdog`]).
//! The ABI is in [`abi`] and docs/modules.md.

pub mod abi;
mod examples;
mod wasm;

use std::collections::BTreeMap;
use std::path::Path;

use vassal_core::{Containment, Dispatcher, Ns, Position, SchedId, TaskId, MS};

pub use examples::{example_path, examples_dir};
pub use wasm::{Limits, LoadError, ModuleParam, WasmPolicy};

/// Where a module goes in the hierarchy, by scheduler name.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub enum Placement {
    /// Above every scheduler.
    #[default]
    Top,
    Above(String),
    Below(String),
}

/// How a module is loaded: its parameters, limits and containment.
#[derive(Clone, Debug, PartialEq)]
pub struct LoadOptions {
    pub params: BTreeMap<String, ModuleParam>,
    pub limits: Limits,
    /// The watchdog: a runnable task of the module's that waits longer than this without
    /// running gets the module ejected (None: no watchdog).
    pub watchdog: Option<Ns>,
}

/// The default watchdog: Linux's sched_ext uses 30 s; a simulated scenario is seconds
/// long, so vassal's default is 1 s.
pub const DEFAULT_WATCHDOG: Ns = 1000 * MS;

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions { params: BTreeMap::new(), limits: Limits::default(), watchdog: Some(DEFAULT_WATCHDOG) }
    }
}

/// Loads the module in `path` into `disp` as scheduler `name` at `place`: `vassal ctl load
/// FILE --name N [--above NAME|--below NAME]`. The module's declared CPU usage goes
/// through the dispatcher's conflict check (Vassal §8); the scheduler is contained
/// ([`Containment`]) with `opts.watchdog`. Nothing changes if loading fails.
pub fn load(
    disp: &mut Dispatcher,
    path: &Path,
    name: &str,
    place: &Placement,
    opts: &LoadOptions,
) -> Result<SchedId, LoadError> {
    let bytes = std::fs::read(path).map_err(|err| LoadError::Read { path: path.display().to_string(), err })?;
    let label = path.file_name().map_or_else(|| path.display().to_string(), |f| f.to_string_lossy().into_owned());
    load_bytes(disp, &bytes, &label, name, place, opts)
}

/// [`load`] from the module's bytes; `label` names it in messages.
pub fn load_bytes(
    disp: &mut Dispatcher,
    bytes: &[u8],
    label: &str,
    name: &str,
    place: &Placement,
    opts: &LoadOptions,
) -> Result<SchedId, LoadError> {
    let pos = position(disp, place)?;
    let policy = WasmPolicy::from_bytes(bytes, label, disp.ncpus(), &opts.params, opts.limits)?;
    let usage = policy.usage();
    let id = disp.register(name, Box::new(policy), usage, pos)?;
    disp.contain(id, Containment { watchdog: opts.watchdog })?;
    Ok(id)
}

/// Resolves a [`Placement`] against the registered schedulers.
pub fn position(disp: &Dispatcher, place: &Placement) -> Result<Position, LoadError> {
    let find = |n: &str| {
        disp.lookup(n).ok_or_else(|| {
            let names: Vec<String> = disp.schedulers().into_iter().map(|s| format!("'{}'", s.name)).collect();
            LoadError::Init(format!("no scheduler named '{n}' to place the module by; loaded: {}", names.join(", ")))
        })
    };
    Ok(match place {
        Placement::Top => Position::Top,
        Placement::Above(n) => Position::Above(find(n)?),
        Placement::Below(n) => Position::Below(find(n)?),
    })
}

/// Unloads scheduler `name` (`vassal ctl unload N`): its tasks go to the scheduler below it
/// ([`Dispatcher::unregister_to_below`]). Returns each task with the scheduler that took it.
/// The mechanism then drains the dispatcher's effects (running tasks' CPUs need decisions).
pub fn unload(disp: &mut Dispatcher, now: Ns, name: &str) -> Result<Vec<(TaskId, SchedId)>, LoadError> {
    let id = disp
        .lookup(name)
        .ok_or_else(|| LoadError::Init(format!("no scheduler named '{name}' is loaded")))?;
    Ok(disp.unregister_to_below(now, id)?)
}
