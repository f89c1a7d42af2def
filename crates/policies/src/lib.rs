//! vassal-policies: scheduling policies, one file each, and a registry that builds them
//! by name from parameters.
//!
//! Baselines:
//! - [`rr`]: Go!'s GTE single-priority preemptive round robin (paper 003 §4);
//! - [`fps`]: fixed-priority preemptive scheduling, optionally rate-monotonic;
//! - [`wrr`]: weighted round robin, the BVT paper's WRR baseline (paper 001 §5.1).
//!
//! Deadlines (paper 001 §5): [`dbs`] runs (s, t, d) reservations earliest-deadline-first,
//! admitted by [`dbs::admission`]; [`edf`] is classic EDF for periodic tasks (rate-monotonic
//! is [`fps`] with `rm = true`).

mod asked;
pub mod bvt;
pub mod dbs;
pub mod edf;
pub mod fb;
pub mod fps;
mod levels;
pub mod linux22;
mod ordered;
pub mod params;
pub mod rr;
pub mod rtserver;
mod runqueue;
mod task_table;
pub mod timed;
pub mod unix;
pub mod wrr;

pub use fps::FixedPriority;
pub use params::{ParamValue, Params};
pub use rr::RoundRobin;
pub use wrr::WeightedRoundRobin;

use std::collections::BTreeMap;
use vassal_core::{Ns, Policy, TaskId, MS};

/// The policy kinds this crate can build, with a one-line description each.
pub fn kinds() -> &'static [(&'static str, &'static str)] {
    &[
        ("rr", "Go! GTE round robin: one global FIFO, preemptive, fixed quantum (params: quantum)"),
        ("fps", "fixed-priority preemptive, optionally rate-monotonic (params: rm, quantum)"),
        ("wrr", "weighted round robin: a turn is weight x quantum (params: quantum)"),
        (
            "bvt",
            "borrowed virtual time, paper 001 (params: mcu, c, migration_penalty, interactive, w_int, wake_preempt, svt_adjust, c_weight, charge)",
        ),
        (
            "bvt2",
            "two-level BVT, paper 001 §2.5/§6.3: reserved effort (root, admission) over a best-effort aggregate (params: mode, threshold, be_share, be_warp, be_warp_limit, be_unwarp, and bvt's)",
        ),
        ("linux22", "Linux 2.2 SCHED_OTHER: counter/priority epochs, goodness (params: tick, priority, cpu_bonus)"),
        ("unix", "standard UNIX V6/V7/S5, paper 004 §3: tick counts decayed once a second, priority = ticks/A + PUSER + nice, kernel priorities on wake (params: variant, tick, wait_pri, resched_secs)"),
        ("fb", "FB feedback queue, paper 004 §4.1: 32 levels, 16-31 real time, a full quantum drops a level, blocking boosts to base + event (params: quantum, quantum_step, base, wake_boost)"),
        ("timed", "Vassal's sample real-time scheduler, paper 000 §5: SET(delay) runs a task at now + delay via a scheduler event (params: lead, resolution, min_delay, spin)"),
        ("rtserver", "soft real-time reservation server, paper 002 §2: reserve/free/modify/avail, admission by eqs. 1-3, a slotted dispatch table by non-preemptive RM, overrun protection (params: slot, frame, r, cpus, admission, overrun_pct, overrun_periods, overrun_window, overrun_cap)"),
        ("dbs", "deadline-based scheduling, paper 001 §5: (s, t, d) reservations admitted if feasible, run EDF on CPU 0, leftover time round robin (params: quantum)"),
        ("edf", "preemptive earliest-deadline-first for periodic tasks (task params: period, deadline; params: quantum, late = keep | next-period; docs/jobs.md)"),
    ]
}

/// Builds a policy of `kind` from its parameters. Unknown kinds and parameters, and
/// values of the wrong type or range, are refused with a message naming them.
pub fn build(kind: &str, params: &BTreeMap<String, ParamValue>) -> Result<Box<dyn Policy>, String> {
    let mut p = Params::new(kind, params);
    let policy: Box<dyn Policy> = match kind {
        "rr" => {
            let quantum = positive(kind, "quantum", p.duration("quantum", 10 * MS)?)?;
            Box::new(RoundRobin::new(quantum))
        }
        "fps" => {
            let rm = p.bool("rm", false)?;
            // No default quantum: without one a task runs until it blocks or is preempted.
            let quantum = if params.contains_key("quantum") { Some(positive(kind, "quantum", p.duration("quantum", 0)?)?) } else { None };
            Box::new(FixedPriority::new(rm, quantum))
        }
        "wrr" => {
            let quantum = positive(kind, "quantum", p.duration("quantum", 10 * MS)?)?;
            Box::new(WeightedRoundRobin::new(quantum))
        }
        "bvt" => Box::new(bvt::build(&mut p)?),
        "bvt2" => Box::new(bvt::two_level::build(&mut p)?),
        "linux22" => Box::new(linux22::build(&mut p)?),
        "unix" => Box::new(unix::build(&mut p)?),
        "fb" => Box::new(fb::build(&mut p)?),
        "timed" => Box::new(timed::build(&mut p)?),
        "rtserver" => Box::new(rtserver::build(&mut p)?),
        "dbs" => Box::new(dbs::build(&mut p)?),
        "edf" => Box::new(edf::build(&mut p)?),
        // More kinds go here, each reading its parameters from `p`.
        _ => {
            return Err(format!(
                "unknown policy '{kind}'; expected one of: {}",
                kinds().iter().map(|(k, _)| *k).collect::<Vec<_>>().join(", ")
            ))
        }
    };
    p.finish()?;
    Ok(policy)
}

/// A duration parameter that must be greater than zero (a zero slice is refused by the
/// dispatcher, so a zero quantum could never run anything).
fn positive(kind: &str, key: &str, v: Ns) -> Result<Ns, String> {
    if v == 0 {
        Err(format!("{kind} parameter '{key}': must be greater than zero"))
    } else {
        Ok(v)
    }
}

/// Policies keep per-task state in vectors indexed by task id (the dispatcher assigns
/// dense ids). A task id this large is refused at attach rather than allocated for.
pub(crate) const MAX_TASK_INDEX: u32 = 1 << 24;

/// The per-task table index of `task`, or a refusal for on_attach.
pub(crate) fn task_index(task: TaskId) -> Result<usize, String> {
    if task.0 >= MAX_TASK_INDEX {
        Err(format!("{task}: task ids of {MAX_TASK_INDEX} and more are not supported"))
    } else {
        Ok(task.0 as usize)
    }
}
