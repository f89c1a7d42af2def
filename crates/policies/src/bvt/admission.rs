//! Admission control for reserved-effort (RE) threads (paper 001 §6.1.1), deliberately
//! *not* part of BVT: "This admission control module is explicitly not part of BVT so
//! different systems can use different modules and policies ... while all using the same
//! BVT scheduler."
//!
//! It keeps the CPU shares allocated to RE tasks, in exact integer parts per million of
//! the CPU, against a capacity (the part of the CPU that may be reserved, e.g. 100 % minus
//! the share kept for the best-effort aggregate). A new RE task is admitted only if its
//! share fits in what is unallocated ("a new thread requiring 10 percent of the CPU when
//! only 5 percent is unallocated should be refused"); its share is freed when it leaves.
//! The policy chosen for a refusal is to refuse (not to shrink existing reservations).

use std::collections::BTreeMap;

use vassal_core::TaskId;

/// Parts per million of one CPU: 100 % = 1_000_000.
pub const PPM: u64 = 1_000_000;

/// Converts a share given in whole percent (1..=100) to ppm.
pub fn pct_to_ppm(pct: i64) -> Result<u64, String> {
    if (1..=100).contains(&pct) {
        Ok(pct as u64 * (PPM / 100))
    } else {
        Err(format!("a share in percent must be from 1 to 100, got {pct}"))
    }
}

/// The reservation book.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Admission {
    capacity: u64,
    allocated: BTreeMap<TaskId, u64>,
    total: u64,
}

impl Admission {
    /// A book over `capacity` ppm (at most [`PPM`]).
    pub fn new(capacity: u64) -> Result<Admission, String> {
        if capacity > PPM {
            return Err(format!("admission capacity {capacity} ppm is more than the whole CPU ({PPM} ppm)"));
        }
        Ok(Admission { capacity, allocated: BTreeMap::new(), total: 0 })
    }

    pub fn capacity(&self) -> u64 {
        self.capacity
    }
    pub fn allocated(&self) -> u64 {
        self.total
    }
    pub fn unallocated(&self) -> u64 {
        self.capacity - self.total
    }
    /// The share reserved for `task`, if it holds one.
    pub fn share(&self, task: TaskId) -> Option<u64> {
        self.allocated.get(&task).copied()
    }

    /// Reserves `ppm` for `task` if it fits in what is unallocated (a task that already
    /// holds a share is re-sized: its old share counts as free for the check). Refuses a
    /// zero share, and leaves the book unchanged on refusal.
    pub fn admit(&mut self, task: TaskId, ppm: u64) -> Result<(), String> {
        if ppm == 0 || ppm > PPM {
            return Err(format!("a reserved share must be from 1 to {PPM} ppm, got {ppm}"));
        }
        let old = self.allocated.get(&task).copied().unwrap_or(0);
        let free = self.unallocated() + old;
        if ppm > free {
            return Err(format!(
                "admission refused: {task} asks for {} of the CPU but only {} is unallocated (capacity {}, reserved {})",
                fmt_ppm(ppm),
                fmt_ppm(free),
                fmt_ppm(self.capacity),
                fmt_ppm(self.total - old)
            ));
        }
        self.total = self.total - old + ppm;
        self.allocated.insert(task, ppm);
        Ok(())
    }

    /// Frees the share of `task` (it exited or left the RE level). Returns what it held.
    pub fn release(&mut self, task: TaskId) -> Option<u64> {
        let s = self.allocated.remove(&task)?;
        self.total -= s;
        Some(s)
    }
}

/// "12.5%" for 125000 ppm.
pub fn fmt_ppm(ppm: u64) -> String {
    let whole = ppm / (PPM / 100);
    let rest = ppm % (PPM / 100);
    if rest == 0 {
        format!("{whole}%")
    } else {
        let s = format!("{rest:04}");
        format!("{whole}.{}%", s.trim_end_matches('0'))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admits_what_fits_and_frees_on_release() {
        let mut a = Admission::new(PPM).unwrap();
        a.admit(TaskId(1), 600_000).unwrap();
        a.admit(TaskId(2), 350_000).unwrap();
        assert_eq!(a.unallocated(), 50_000);
        // §6.1.1: 10 % when only 5 % is unallocated is refused.
        let e = a.admit(TaskId(3), 100_000).unwrap_err();
        assert!(e.contains("only 5% is unallocated"), "{e}");
        assert_eq!(a.allocated(), 950_000);
        a.admit(TaskId(3), 50_000).unwrap();
        assert_eq!(a.unallocated(), 0);
        assert_eq!(a.release(TaskId(1)), Some(600_000));
        assert_eq!(a.release(TaskId(1)), None);
        a.admit(TaskId(4), 100_000).unwrap();
        // Re-sizing counts the old share as free.
        a.admit(TaskId(4), 600_000).unwrap();
        assert_eq!(a.unallocated(), 0);
        assert!(a.admit(TaskId(5), 0).is_err());
        assert_eq!(fmt_ppm(125_000), "12.5%");
    }
}
