//! vassal-sim: a deterministic discrete-event multiprocessor simulator that runs vassal
//! policies under the Vassal dispatcher hierarchy: the engine, the scenario and rt-app
//! languages, the machine model (memory, swap), the metrics and the plain report. The
//! experiments run on it and their reports (repro, sweeps, HTML, SVG, Chrome traces)
//! are vassal-lab's.

pub mod behave;
pub mod disk;
pub mod engine;
pub mod memory;
pub mod metrics;
pub mod model;
pub mod modules;
pub mod report;
pub mod rtapp;
pub mod scenario;
pub mod swap;

pub use engine::{simulate, simulate_with, JobRecord, Mark, MarkKind, Sim, SimError, Slice, StepMark, Trace, VtSample};
pub use report::Report;
