//! rt-app workloads (<https://github.com/scheduler-tools/rt-app>, doc/tutorial.txt) as
//! simulator scenarios: `vassal sim --rt-app FILE.json [--policy KIND]` (docs/rtapp.md).
//!
//! Three steps, each usable alone:
//! - [`json`]: the file as rt-app reads it — json-c's lenient grammar (comments, trailing
//!   commas) and workgen's freedoms (repeated keys in file order, a bare `"suspend"`),
//!   every key with its line and column; [`json::to_strict`] writes it back as the strict
//!   JSON rt-app itself accepts (what workgen hands it).
//! - [`model`]: rt-app's threads, phases, scheduling settings and events, read as rt-app
//!   1.0 reads them; a key rt-app does not know is refused with its line, column and the
//!   keys expected there, and so is any feature the simulator cannot model, by name.
//! - [`build`]: the scenario — SCHED_DEADLINE threads under an `edf` scheduler `dl`,
//!   SCHED_FIFO/SCHED_RR under an `fps` scheduler `rt` below it, SCHED_OTHER/SCHED_IDLE
//!   under the default (`--policy`, CFS weights under `bvt`), Linux's class order; run,
//!   runtime, sleep, timers, mutexes (with priority inheritance under `pi_enabled`),
//!   condition variables, suspend/resume, barriers, yield, mem and iorun, per-phase
//!   policy and affinity, as script phases (crates/sim/src/engine/sync.rs carries out the
//!   synchronisation).
//!
//! Every error names the file, line and column, and the key's path
//! ("w.json:12:5: tasks.a.bogus: unknown key `bogus`; expected one of …").

pub mod build;
pub mod json;
pub mod model;

use std::path::Path;

use vassal_core::Ns;

use crate::model::Scenario;

/// Settings the rt-app file does not hold.
#[derive(Clone, Debug)]
pub struct Options {
    /// The default scheduler's kind for SCHED_OTHER threads (None: `bvt`).
    pub policy: Option<String>,
    /// CPUs of the simulated machine (None: one more than the highest CPU named in a
    /// `cpus` list, at least 1).
    pub cpus: Option<u16>,
    /// The horizon; needed when `global.duration` is -1 (or absent), else it overrides it.
    pub until: Option<Ns>,
    /// How fast a `mem` event writes its buffer, bytes per second of CPU time.
    pub mem_bandwidth: u64,
    /// How fast an `iorun` event's device takes data, bytes per second (a blocked wait);
    /// rt-app's default device, /dev/null, takes it at once.
    pub io_bandwidth: u64,
}

/// Default `mem` speed: 4 GB/s, a memset by one core of a current x86 machine.
pub const MEM_BANDWIDTH: u64 = 4_000_000_000;
/// Default `iorun` speed: 100 MB/s, a disk's sequential writes.
pub const IO_BANDWIDTH: u64 = 100_000_000;

impl Default for Options {
    fn default() -> Self {
        Options { policy: None, cpus: None, until: None, mem_bandwidth: MEM_BANDWIDTH, io_bandwidth: IO_BANDWIDTH }
    }
}

/// Reads an rt-app document's text into its model. Errors: "LINE:COL: PATH: message".
pub fn read(text: &str) -> Result<model::RtApp, String> {
    read_at(text).map_err(|e| e.to_string())
}

/// [`read`], its error kept with its place (a syntax error is one at its position).
fn read_at(text: &str) -> Result<model::RtApp, model::Error> {
    let root = json::parse(text).map_err(|e| model::Error {
        at: e.at,
        path: String::new(),
        msg: format!("{} (not JSON that rt-app's json-c reads)", e.msg),
    })?;
    model::read(&root)
}

/// Reads an rt-app file. Errors start with "FILE:LINE:COL:" for a place in the file,
/// "FILE:" otherwise.
pub fn load_rtapp(path: &Path, opts: &Options) -> Result<Scenario, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let name = path.file_stem().map_or("rt-app".to_string(), |s| s.to_string_lossy().to_string());
    parse_at(&text, &name, opts).map_err(|e| {
        let sep = if e.at == json::Pos::default() { ": " } else { ":" };
        format!("{}{sep}{e}", path.display())
    })
}

/// Builds a scenario named `name` from rt-app JSON text. Errors: "LINE:COL: PATH: message".
pub fn parse_rtapp(text: &str, name: &str, opts: &Options) -> Result<Scenario, String> {
    parse_at(text, name, opts).map_err(|e| e.to_string())
}

/// [`parse_rtapp`], its error kept with its place.
fn parse_at(text: &str, name: &str, opts: &Options) -> Result<Scenario, model::Error> {
    build::to_scenario(&read_at(text)?, name, opts)
}
