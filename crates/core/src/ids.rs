//! Identifiers for tasks, CPUs and schedulers, and CPU sets.

use std::fmt;

/// A task (thread or process) known to the dispatcher. Dense, assigned by the dispatcher.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TaskId(pub u32);

/// A CPU, numbered from 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CpuId(pub u16);

/// A registered scheduler. Never reused, so a stale timer for an unregistered scheduler
/// can be recognised and dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SchedId(pub u32);

impl fmt::Display for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "task{}", self.0)
    }
}
impl fmt::Display for CpuId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cpu{}", self.0)
    }
}
impl fmt::Display for SchedId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sched{}", self.0)
    }
}

/// The most CPUs a machine may have (the width of [`CpuSet`]).
pub const MAX_CPUS: u16 = 64;

/// A set of CPUs (a task's affinity, a hard-time scheduler's CPUs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CpuSet(pub u64);

impl CpuSet {
    pub const NONE: CpuSet = CpuSet(0);
    /// CPUs 0..n.
    pub fn first(n: u16) -> CpuSet {
        if n >= 64 {
            CpuSet(u64::MAX)
        } else {
            CpuSet((1u64 << n) - 1)
        }
    }
    pub fn only(cpu: CpuId) -> CpuSet {
        CpuSet(1u64 << cpu.0)
    }
    #[inline]
    pub fn contains(self, cpu: CpuId) -> bool {
        cpu.0 < 64 && self.0 & (1u64 << cpu.0) != 0
    }
    pub fn intersects(self, other: CpuSet) -> bool {
        self.0 & other.0 != 0
    }
    pub fn len(self) -> u32 {
        self.0.count_ones()
    }
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }
    /// The CPUs of the set, in ascending order (only the set bits are visited).
    pub fn iter(self) -> impl Iterator<Item = CpuId> {
        let mut left = self.0;
        std::iter::from_fn(move || {
            (left != 0).then(|| {
                let c = left.trailing_zeros() as u16;
                left &= left - 1;
                CpuId(c)
            })
        })
    }
}

impl FromIterator<CpuId> for CpuSet {
    fn from_iter<I: IntoIterator<Item = CpuId>>(iter: I) -> Self {
        CpuSet(iter.into_iter().fold(0, |m, c| m | (1u64 << c.0)))
    }
}
