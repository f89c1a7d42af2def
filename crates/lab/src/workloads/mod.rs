//! Experiment workloads: task behaviours that only some experiments use, kept out of the
//! simulator's engine and run through its behaviour registry ([`vassal_sim::behave`]).
//! A scenario names them like any behaviour (`behaviour = { kind = "randres", ... }`);
//! every simulation the lab and the `vassal` command run uses [`registry`].
//!
//! - `randres` (BVT paper 001 §5.1): one deadline after another, with reservations.

use vassal_sim::behave::Registry;

pub mod randres;

/// The lab's behaviours.
pub fn registry() -> Registry {
    let mut r = Registry::default();
    r.register("randres", randres::RandresKind);
    r
}
