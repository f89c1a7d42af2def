//! How a scheduler uses the CPU, declared at registration, and the conflict check that
//! refuses a registration which would break another scheduler's guarantees.
//!
//! Vassal (paper 000 §8) proposes that "loadable schedulers describe the ways they will
//! use the CPU" with predefined usage patterns ("hard time", "proportional share", ...)
//! so that "the dispatcher could determine whether a scheduler that is attempting to load
//! would conflict with an already existing scheduler". The rules here:
//!
//! 1. Two hard-time schedulers may not share a CPU ("if two schedulers want to run
//!    different code at precisely the same time on the same processor, the schedulers are
//!    in conflict"; "multiple schedulers with hard time requirements will typically not
//!    coexist").
//! 2. The sum of hard-time and reserved demands may not exceed the CPUs.
//! 3. It must leave best-effort work a guaranteed share of at least
//!    [`HierarchyConfig::min_best_effort_ppm`] (the default scheduler's tasks are never
//!    starved; BVT §2.5 and paper 002's 1 − r for time-sharing make the same point).
//! 4. Order: the hierarchy is queried top-down, so a scheduler can only be guaranteed what
//!    the ones above it leave. Hard-time schedulers must sit above reserved-share ones,
//!    and those above best-effort ones.
//!
//! A loaded best-effort scheduler (issue 17: "a loaded scheduler declares its class")
//! demands no guaranteed share, so rules 2 and 3 are unchanged by it; by rule 4 it sits
//! below every hard-time and reserved one, and above the default it takes precedence
//! over the default's tasks, as any loaded scheduler does (§8: "the loaded scheduler
//! always takes precedence over the built-in scheduler"). A mechanism enforces the class:
//! the Linux agent never gives a best-effort scheduler's tasks real-time priority, so its
//! tasks share the CPU with everything else in the kernel's fair class (docs/agent.md).

use crate::ids::CpuSet;

/// One CPU, in parts per million.
pub const CPU_PPM: u64 = 1_000_000;

/// A scheduler's declared pattern of CPU use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Usage {
    /// Needs the CPUs in `cpus` at definite moments, up to `util_ppm` of each.
    HardTime { cpus: CpuSet, util_ppm: u64 },
    /// Needs a share of the machine, `cpu_ppm` millionths of one CPU in all, whenever it occurs.
    Reserved { cpu_ppm: u64 },
    /// Takes whatever is left, with no guarantee: the default (bottom) scheduler, or a
    /// loaded one below every hard-time and reserved scheduler.
    BestEffort,
}

impl Usage {
    fn rank(self) -> u8 {
        match self {
            Usage::HardTime { .. } => 2,
            Usage::Reserved { .. } => 1,
            Usage::BestEffort => 0,
        }
    }
    /// Total demand in millionths of one CPU.
    pub fn demand_ppm(self) -> u64 {
        match self {
            Usage::HardTime { cpus, util_ppm } => util_ppm.saturating_mul(cpus.len() as u64),
            Usage::Reserved { cpu_ppm } => cpu_ppm,
            Usage::BestEffort => 0,
        }
    }
    pub fn describe(self) -> String {
        match self {
            Usage::HardTime { cpus, util_ppm } => {
                format!("hard time on CPUs {:?} at {:.1}%", cpus.iter().map(|c| c.0).collect::<Vec<_>>(), util_ppm as f64 / 1e4)
            }
            Usage::Reserved { cpu_ppm } => format!("reserved {:.1}% of one CPU", cpu_ppm as f64 / 1e4),
            Usage::BestEffort => "best effort".to_string(),
        }
    }
}

/// Tunables of the hierarchy.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HierarchyConfig {
    /// The least share of the machine, in millionths of one CPU, that the registered
    /// schedulers' demands must leave to best-effort work. Default: 5% of the machine.
    pub min_best_effort_ppm: Option<u64>,
}

impl HierarchyConfig {
    pub fn min_best_effort(&self, ncpus: u16) -> u64 {
        self.min_best_effort_ppm.unwrap_or(ncpus as u64 * CPU_PPM / 20)
    }
}

/// Checks whether a scheduler with usage `new`, inserted at index `at` of the top-down
/// list `existing` (which excludes the default scheduler at the bottom), conflicts.
/// Returns the reason for refusal.
pub fn check_conflict(existing: &[(&str, Usage)], new: Usage, at: usize, ncpus: u16, cfg: &HierarchyConfig) -> Result<(), String> {
    let all = CpuSet::first(ncpus);
    match new {
        // No demand: only the order below applies.
        Usage::BestEffort => {}
        Usage::HardTime { cpus, util_ppm } => {
            if cpus.is_empty() || !all.0 & cpus.0 != 0 {
                return Err(format!(
                    "hard-time CPUs {:?} are not a non-empty subset of the {ncpus} CPUs",
                    cpus.iter().map(|c| c.0).collect::<Vec<_>>()
                ));
            }
            if util_ppm == 0 || util_ppm > CPU_PPM {
                return Err(format!("hard-time utilisation {util_ppm} ppm is not in 1..=1000000"));
            }
            for (name, u) in existing {
                if let Usage::HardTime { cpus: theirs, .. } = u {
                    if theirs.intersects(cpus) {
                        return Err(format!(
                            "hard-time demand conflicts with scheduler '{name}', which needs the same CPU(s) at definite moments"
                        ));
                    }
                }
            }
        }
        Usage::Reserved { cpu_ppm } => {
            if cpu_ppm == 0 {
                return Err("a reserved share of zero is not a reservation".into());
            }
        }
    }
    let capacity = ncpus as u64 * CPU_PPM;
    // Saturating: a huge declared share must be refused, not overflow (a panic in debug
    // builds, a wrap-around to a tiny demand that passes the check in release builds).
    let demand: u64 = existing.iter().map(|(_, u)| u.demand_ppm()).fold(new.demand_ppm(), u64::saturating_add);
    if demand > capacity {
        return Err(format!("hard-time and reserved demands ({:.1}% of one CPU) exceed the {ncpus} CPU(s)", demand as f64 / 1e4));
    }
    let min_be = cfg.min_best_effort(ncpus);
    if capacity - demand < min_be {
        return Err(format!(
            "demands ({:.1}% of one CPU) would leave best-effort tasks {:.1}%, under the guaranteed minimum of {:.1}%",
            demand as f64 / 1e4,
            (capacity - demand) as f64 / 1e4,
            min_be as f64 / 1e4
        ));
    }
    // Order: everything above must rank at least as high, everything below at most as high.
    for (i, (name, u)) in existing.iter().enumerate() {
        if i < at && u.rank() < new.rank() {
            return Err(format!(
                "'{name}' ({}) above a {} scheduler could take the CPU it is guaranteed; place it higher",
                u.describe(),
                new.describe()
            ));
        }
        if i >= at && u.rank() > new.rank() {
            return Err(format!(
                "a {} scheduler above '{name}' ({}) could take the CPU that one is guaranteed; place it lower",
                new.describe(),
                u.describe()
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::CpuId;

    fn hard(cpus: &[u16], pct: u64) -> Usage {
        Usage::HardTime { cpus: cpus.iter().map(|&c| CpuId(c)).collect(), util_ppm: pct * 10_000 }
    }
    fn res(pct: u64) -> Usage {
        Usage::Reserved { cpu_ppm: pct * 10_000 }
    }
    const CFG: HierarchyConfig = HierarchyConfig { min_best_effort_ppm: None };

    #[test]
    fn two_hard_time_on_one_cpu_conflict() {
        let existing = [("rt", hard(&[0], 30))];
        let e = check_conflict(&existing, hard(&[0], 10), 0, 2, &CFG).unwrap_err();
        assert!(e.contains("'rt'"), "{e}");
        assert!(check_conflict(&existing, hard(&[1], 10), 0, 2, &CFG).is_ok());
    }

    #[test]
    fn demands_beyond_the_cpus_are_refused() {
        let existing = [("a", res(150))];
        let e = check_conflict(&existing, res(60), 1, 2, &CFG).unwrap_err();
        assert!(e.contains("exceed the 2 CPU"), "{e}");
    }

    #[test]
    fn best_effort_keeps_a_guaranteed_share() {
        // 2 CPUs, 5% of 2 CPUs = 10% of one CPU must stay free.
        assert!(check_conflict(&[], res(190), 0, 2, &CFG).is_ok());
        let e = check_conflict(&[], res(195), 0, 2, &CFG).unwrap_err();
        assert!(e.contains("best-effort"), "{e}");
        // A best-effort scheduler demands nothing: it never breaks that minimum.
        assert!(check_conflict(&[("a", res(190))], Usage::BestEffort, 1, 2, &CFG).is_ok());
    }

    #[test]
    fn a_best_effort_scheduler_sits_below_hard_and_reserved_ones() {
        let existing = [("rt", hard(&[0], 20)), ("share", res(50))];
        assert!(check_conflict(&existing, Usage::BestEffort, 2, 2, &CFG).is_ok());
        let e = check_conflict(&existing, Usage::BestEffort, 1, 2, &CFG).unwrap_err();
        assert!(e.contains("'share'"), "{e}");
        let e = check_conflict(&existing, Usage::BestEffort, 0, 2, &CFG).unwrap_err();
        assert!(e.contains("'rt'"), "{e}");
        // And nothing with a guarantee goes below it.
        let e = check_conflict(&[("be", Usage::BestEffort)], res(10), 1, 2, &CFG).unwrap_err();
        assert!(e.contains("'be'"), "{e}");
    }

    #[test]
    fn order_is_hard_then_reserved() {
        let existing = [("share", res(20))];
        // hard time below a reserved scheduler: refused
        let e = check_conflict(&existing, hard(&[0], 20), 1, 2, &CFG).unwrap_err();
        assert!(e.contains("'share'"), "{e}");
        // above it: fine
        assert!(check_conflict(&existing, hard(&[0], 20), 0, 2, &CFG).is_ok());
    }

    #[test]
    fn malformed_declarations_are_refused() {
        assert!(check_conflict(&[], hard(&[5], 10), 0, 2, &CFG).is_err());
        assert!(check_conflict(&[], hard(&[0], 0), 0, 2, &CFG).is_err());
        assert!(check_conflict(&[], hard(&[0], 101), 0, 2, &CFG).is_err());
        assert!(check_conflict(&[], res(0), 0, 2, &CFG).is_err());
    }

    #[test]
    fn huge_demands_do_not_overflow() {
        let existing = [("a", res(10))];
        let e = check_conflict(&existing, Usage::Reserved { cpu_ppm: u64::MAX }, 0, 2, &CFG).unwrap_err();
        assert!(e.contains("exceed"), "{e}");
    }
}
