//! BVT (paper 001) as a loadable module: vassal's built-in `bvt` policy
//! (crates/policies/src/bvt.rs, the very same source) compiled to WebAssembly with the
//! SDK, so that `vassal bench` can compare a loaded policy's cost per decision with the
//! built-in one's, the only difference being the module boundary and the interpreter.
//!
//! Parameters: those of the built-in `bvt` (see `vassal policies`), plus `reserved` (the
//! CPU share declared to the hierarchy, in CPUs; default 0.5).

use std::collections::BTreeMap;
use vassal_sdk::*;

fn build(p: &Params, _ncpus: u16) -> Result<Setup, String> {
    let usage = p.reserved_usage(0.5)?;
    let map: BTreeMap<String, Param> =
        p.map.iter().filter(|(k, _)| k.as_str() != "reserved").map(|(k, v)| (k.clone(), v.clone())).collect();
    let policy = vassal_policies::build("bvt", &map)?;
    Ok(Setup { policy, usage })
}

vassal_sdk::export_policy!(build);
