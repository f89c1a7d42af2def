//! EDF as a loadable module: vassal's built-in `edf` policy (crates/policies/src/edf.rs,
//! the very same source) compiled with the SDK. It shows a module told of its tasks'
//! jobs (`vassal_job`, the ABI's `on_job`): textbook EDF orders by the current job's
//! absolute deadline, which a late task that goes straight on to its next job changes
//! without waking (docs/jobs.md), so the module schedules job for job as the built-in.
//!
//! Parameters: those of the built-in `edf` (see `vassal policies`), plus `reserved` (the
//! CPU share declared to the hierarchy, in CPUs; default 0.5).

use std::collections::BTreeMap;
use vassal_sdk::*;

fn build(p: &Params, _ncpus: u16) -> Result<Setup, String> {
    let usage = p.reserved_usage(0.5)?;
    let map: BTreeMap<String, Param> =
        p.map.iter().filter(|(k, _)| k.as_str() != "reserved").map(|(k, v)| (k.clone(), v.clone())).collect();
    let policy = vassal_policies::build("edf", &map)?;
    Ok(Setup { policy, usage })
}

vassal_sdk::export_policy!(build);
