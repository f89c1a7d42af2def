//! vassal-module: loadable scheduling policies (issue 8).
//!
//! A policy written against vassal's policy interface with the SDK (`sdk/vassal-sdk`) and
//! compiled to WebAssembly is loaded at run time into a running [`Dispatcher`] — above or
//! below a named scheduler, like Vassal's loadable scheduler drivers (paper 000 §3–4) —
//! and unloaded again. The module runs in a wasmtime sandbox ([`WasmPolicy`], compiled by
//! Cranelift): a fuel budget per call, a memory limit, and no access to anything but the
//! ABI's imports. The same
//! SDK source built for the host target is a *native* module ([`NativePolicy`], a shared
//! library with a C ABI): as fast as a built-in policy, but trusted — not sandboxed, as
//! Vassal's drivers were not ([`Backend`] tells the two apart from the file). The
//! dispatcher distrusts both ([`vassal_core::Containment`]): a module that traps, runs past
//! its budget, exceeds its memory, makes an invalid decision or leaves a runnable task
//! unserved past the watchdog is ejected and its tasks fall back to the schedulers below.
//!
//! The entry points a mechanism (the simulator, the Linux agent's `vassal ctl load/unload`)
//! calls: [`load`] / [`load_bytes`], [`unload`], and after each event
//! [`Dispatcher::eject_failed`] (plus a timer at [`Dispatcher::next_watchdog`]).
//! The ABI is in [`abi`] and docs/modules.md.

pub mod abi;
mod examples;
mod glue;
mod native;
mod wasm;

use std::collections::BTreeMap;
use std::path::Path;

use vassal_core::{Containment, Dispatcher, Ns, ParamValue, Policy, Position, SchedId, TaskId, Usage, MS};

pub use examples::{example_path, examples_dir, native_example_path};
pub use native::NativePolicy;
pub use wasm::{Limits, LoadError, WasmPolicy};

/// The two forms of a module, told apart by the file's first bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// A WebAssembly module (`\0asm`): sandboxed — fuel per call, a memory limit, nothing
    /// but the ABI's imports. Anyone the mechanism lets load schedulers may load one.
    Wasm,
    /// A native shared library (ELF) built with the SDK for this machine: as fast as a
    /// built-in policy, but it runs unconfined in the host's process (no fuel, no memory
    /// limit; a fault in it crashes the host). Trusted, as Vassal's drivers were: a
    /// mechanism should let only root load one.
    Native,
}

impl Backend {
    /// The form of a module from its first bytes: ELF is native, anything else is given to
    /// the WebAssembly host (which refuses what is not a module).
    pub fn of(bytes: &[u8]) -> Backend {
        if bytes.starts_with(b"\x7fELF") {
            Backend::Native
        } else {
            Backend::Wasm
        }
    }

    /// The form of the module in `path` (reads its first bytes; opened as [`read_file`]
    /// opens it: only a regular file of at most [`MAX_MODULE_BYTES`]).
    pub fn of_file(path: &Path) -> Result<Backend, LoadError> {
        use std::io::Read;
        let read_err = |err| LoadError::Read { path: path.display().to_string(), err };
        let mut head = [0u8; 4];
        let mut f = open_module_file(path).map_err(read_err)?;
        let n = f.read(&mut head).map_err(read_err)?;
        Ok(Backend::of(&head[..n]))
    }

    /// Whether a module of this form runs in a sandbox (fuel, memory limit, traps
    /// contained). Only [`Backend::Wasm`] does.
    pub fn sandboxed(self) -> bool {
        self == Backend::Wasm
    }
}

/// A module opened (compiled, initialised with its parameters) but not yet registered.
pub struct Opened {
    pub policy: Box<dyn Policy>,
    /// The CPU usage it declared (Vassal §8).
    pub usage: Usage,
    pub backend: Backend,
    /// What it was opened as (the file's name, from [`open_file`]): for messages and logs.
    pub label: String,
}

/// Opens a module of either form from its bytes (the form from [`Backend::of`]); `label`
/// names it in messages. `limits` apply to a WebAssembly module only.
pub fn open_bytes(
    bytes: &[u8],
    label: &str,
    ncpus: u16,
    params: &BTreeMap<String, ParamValue>,
    limits: Limits,
) -> Result<Opened, LoadError> {
    let backend = Backend::of(bytes);
    Ok(match backend {
        Backend::Wasm => {
            let p = WasmPolicy::from_bytes(bytes, label, ncpus, params, limits)?;
            Opened { usage: p.usage(), policy: Box::new(p), backend, label: label.to_string() }
        }
        Backend::Native => {
            let p = NativePolicy::from_bytes(bytes, label, ncpus, params)?;
            Opened { usage: p.usage(), policy: Box::new(p), backend, label: label.to_string() }
        }
    })
}

/// [`open_bytes`] from a file; the label is the file name.
pub fn open_file(path: &Path, ncpus: u16, params: &BTreeMap<String, ParamValue>, limits: Limits) -> Result<Opened, LoadError> {
    let (bytes, label) = read_file(path)?;
    open_bytes(&bytes, &label, ncpus, params, limits)
}

/// The largest module file read: 64 MiB (the SDK's examples are 30 KB–2 MB as
/// WebAssembly, 0.4–4 MB native).
pub const MAX_MODULE_BYTES: u64 = 64 << 20;

/// A module file's bytes and its label (the file's name), for every loader of a file (the
/// agent's `ctl load`, `vassal sim --load`, scenarios, [`WasmPolicy::from_file`]). Only a
/// regular file of at most [`MAX_MODULE_BYTES`] is read, and nothing blocks: a FIFO, a
/// device (`/dev/zero`), a socket or a directory is refused before it is opened, and
/// again by the opened file's own type (the path may have changed in between); a file
/// larger than the bound is refused by its size, and one growing while it is read is cut
/// at the bound + 1 byte and refused.
pub(crate) fn read_file(path: &Path) -> Result<(Vec<u8>, String), LoadError> {
    use std::io::Read;
    let read_err = |err| LoadError::Read { path: path.display().to_string(), err };
    let f = open_module_file(path).map_err(read_err)?;
    let mut bytes = Vec::new();
    f.take(MAX_MODULE_BYTES + 1).read_to_end(&mut bytes).map_err(read_err)?;
    if bytes.len() as u64 > MAX_MODULE_BYTES {
        return Err(read_err(too_large(bytes.len() as u64)));
    }
    let label = path.file_name().map_or_else(|| path.display().to_string(), |f| f.to_string_lossy().into_owned());
    Ok((bytes, label))
}

fn too_large(len: u64) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::InvalidInput,
        format!("it is {len} bytes or more, larger than the limit for a module ({} MiB)", MAX_MODULE_BYTES >> 20),
    )
}

/// Why a file of this type and size is not read as a module.
fn check_module_file(md: &std::fs::Metadata) -> std::io::Result<()> {
    let ft = md.file_type();
    if !ft.is_file() {
        #[cfg(unix)]
        let what = {
            use std::os::unix::fs::FileTypeExt;
            if ft.is_fifo() {
                "a FIFO"
            } else if ft.is_char_device() {
                "a character device"
            } else if ft.is_block_device() {
                "a block device"
            } else if ft.is_socket() {
                "a socket"
            } else if ft.is_dir() {
                "a directory"
            } else {
                "not a regular file"
            }
        };
        #[cfg(not(unix))]
        let what = if ft.is_dir() { "a directory" } else { "not a regular file" };
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("not a regular file ({what})")));
    }
    if md.len() > MAX_MODULE_BYTES {
        return Err(too_large(md.len()));
    }
    Ok(())
}

/// Opens a module file for reading without blocking (see [`read_file`]). A symbolic link
/// is followed (the simulator's users name modules through links; the agent loads only
/// for root, and `vassal ctl load` sends the resolved path).
fn open_module_file(path: &Path) -> std::io::Result<std::fs::File> {
    check_module_file(&std::fs::metadata(path)?)?;
    let mut opts = std::fs::OpenOptions::new();
    opts.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        // Should the path now name a FIFO, the open does not wait for a writer; nor does
        // a terminal become the controlling one.
        opts.custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY);
    }
    let f = opts.open(path)?;
    check_module_file(&f.metadata()?)?;
    Ok(f)
}

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
    pub params: BTreeMap<String, ParamValue>,
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
///
/// The form comes from the file ([`Backend::of_file`]): a native module is loaded too,
/// unsandboxed — a mechanism that must refuse those to unprivileged callers checks
/// [`Backend::sandboxed`] first.
pub fn load(disp: &mut Dispatcher, path: &Path, name: &str, place: &Placement, opts: &LoadOptions) -> Result<SchedId, LoadError> {
    let (bytes, label) = read_file(path)?;
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
    position(disp, place)?;
    let m = open_bytes(bytes, label, disp.ncpus(), &opts.params, opts.limits)?;
    register_opened(disp, m, name, place, opts.watchdog)
}

/// The second half of [`load`], for a module opened beforehand ([`open_file`]) — a
/// mechanism that must not stall its dispatcher opens (compiles) it first, outside its
/// lock, and registers it under the lock: the conflict check, the placement and the
/// containment with `watchdog`. Nothing changes if this fails.
pub fn register_opened(
    disp: &mut Dispatcher,
    m: Opened,
    name: &str,
    place: &Placement,
    watchdog: Option<Ns>,
) -> Result<SchedId, LoadError> {
    let pos = position(disp, place)?;
    let id = disp.register(name, m.policy, m.usage, pos)?;
    disp.contain(id, Containment { watchdog })?;
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
    let id = disp.lookup(name).ok_or_else(|| LoadError::Init(format!("no scheduler named '{name}' is loaded")))?;
    Ok(disp.unregister_to_below(now, id)?)
}
