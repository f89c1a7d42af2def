//! vassal-policies: scheduling policies, one file each, and a registry that builds them
//! by name from parameters.

pub mod params;

pub use params::{ParamValue, Params};

use std::collections::BTreeMap;
use vassal_core::Policy;

/// The policy kinds this crate can build, with a one-line description each.
pub fn kinds() -> &'static [(&'static str, &'static str)] {
    &[]
}

/// Builds a policy of `kind` from its parameters. Unknown kinds and parameters, and
/// values of the wrong type or range, are refused with a message naming them.
pub fn build(kind: &str, params: &BTreeMap<String, ParamValue>) -> Result<Box<dyn Policy>, String> {
    let _ = params;
    Err(format!(
        "unknown policy '{kind}'; expected one of: {}",
        kinds().iter().map(|(k, _)| *k).collect::<Vec<_>>().join(", ")
    ))
}
