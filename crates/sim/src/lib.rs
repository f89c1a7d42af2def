//! vassal-sim: a deterministic discrete-event multiprocessor simulator that runs vassal
//! policies under the Vassal dispatcher hierarchy.

pub mod chrome_trace;
pub mod engine;
pub mod html;
pub mod memory;
pub mod metrics;
pub mod model;
pub mod modules;
pub mod report;
pub mod repro;
pub mod rtapp;
pub mod rtserver_repro;
pub mod scenario;
pub mod svg;
pub mod swap;
pub mod sweep;

pub use engine::{simulate, Mark, MarkKind, Sim, SimError, Slice, Trace, VtSample};
pub use report::Report;
