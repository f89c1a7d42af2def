//! vassal-sim: a deterministic discrete-event multiprocessor simulator that runs vassal
//! policies under the Vassal dispatcher hierarchy.

pub mod engine;
pub mod memory;
pub mod metrics;
pub mod model;
pub mod modules;
pub mod report;
pub mod rtapp;
pub mod scenario;
pub mod swap;

pub use engine::{simulate, Mark, MarkKind, Sim, SimError, Slice, Trace, VtSample};
pub use report::Report;
