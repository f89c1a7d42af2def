//! The dispatch table of the soft real-time server (paper 002 §2.2).
//!
//! "The dispatch table contains a repeatable time frame of slots, each slot corresponds
//! to a time slice of a processor. Each slot can be assigned to a RT process PID, or is
//! free which means yielding the control to the NT kernel scheduler to schedule TS
//! processes. [...] Given N processors, [...] the dispatch table has N columns of
//! repeatable time slots." The broker computes it "using the non-preemptive rate
//! monotonic algorithm".
//!
//! [`build_column`] runs non-preemptive rate-monotonic scheduling over one frame of one
//! CPU in slot units: a job of a reservation (e ns every p ns) is released at every
//! multiple of p, needs ceil(e / slot) slots, and once started runs in consecutive slots
//! until done (non-preemptive); when a CPU is free the pending job with the shortest
//! period starts (ties: the earlier reservation). A job that is not done by its next
//! release (its deadline) makes the column unschedulable. Periods divide the frame, so
//! the frame repeats.

use vassal_core::{Ns, TaskId};

/// One reservation as the table builder sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Job {
    pub task: TaskId,
    /// Execution time per period, ns.
    pub e: Ns,
    /// Period, ns (a multiple of the slot that divides the frame).
    pub p: Ns,
    /// Admission order: breaks rate-monotonic ties (earlier first).
    pub seq: u64,
}

/// A dispatch table: `cols[cpu][slot]` is the owning task, or `None` for a free slot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Table {
    pub slot: Ns,
    pub cols: Vec<Vec<Option<TaskId>>>,
}

impl Table {
    /// An all-free table of `ncpus` columns of `frame / slot` slots.
    pub fn empty(ncpus: u16, slot: Ns, frame: Ns) -> Table {
        Table { slot, cols: vec![vec![None; (frame / slot) as usize]; ncpus as usize] }
    }
    pub fn nslots(&self) -> usize {
        self.cols.first().map_or(0, |c| c.len())
    }
    /// The length of the frame, ns.
    pub fn frame(&self) -> Ns {
        self.slot * self.nslots() as Ns
    }
    pub fn owner(&self, cpu: usize, slot: usize) -> Option<TaskId> {
        self.cols.get(cpu).and_then(|c| c.get(slot)).copied().flatten()
    }
    /// Free slots and all slots: the share left to time-sharing (§2.2: "a total of
    /// 31.25% (100ms out of possible 320ms) of processing capacity is guaranteed to the
    /// TS processes").
    pub fn free_slots(&self) -> (u64, u64) {
        let all: usize = self.cols.iter().map(|c| c.len()).sum();
        let free: usize = self.cols.iter().map(|c| c.iter().filter(|s| s.is_none()).count()).sum();
        (free as u64, all as u64)
    }
    /// Slots `task` owns in one frame.
    pub fn slots_of(&self, task: TaskId) -> u64 {
        self.cols.iter().map(|c| c.iter().filter(|s| **s == Some(task)).count() as u64).sum()
    }
    /// The table as text, one row per slot as in the paper's Table 2.
    pub fn render(&self, name: impl Fn(TaskId) -> String) -> String {
        let mut out = String::new();
        for s in 0..self.nslots() {
            let from = s as Ns * self.slot;
            out.push_str(&format!("{s:>3}  {:>6}-{:<6}", fmt_ms(from), fmt_ms(from + self.slot)));
            for col in &self.cols {
                out.push_str(&format!("  {:>8}", col[s].map_or("free".to_string(), &name)));
            }
            out.push('\n');
        }
        out
    }
}

fn fmt_ms(ns: Ns) -> String {
    if ns.is_multiple_of(vassal_core::MS) {
        format!("{}ms", ns / vassal_core::MS)
    } else {
        format!("{ns}ns")
    }
}

/// Why a column could not be built: `task`'s job released at `release` ns was not done
/// by its deadline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Miss {
    pub task: TaskId,
    pub release: Ns,
}

/// Builds one CPU's column of `frame / slot` slots by non-preemptive rate-monotonic
/// scheduling (see the module documentation). Every `p` must be a positive multiple of
/// `slot` dividing `frame`, and every `e` positive (the broker checks this).
pub fn build_column(slot: Ns, frame: Ns, jobs: &[Job]) -> Result<Vec<Option<TaskId>>, Miss> {
    let nslots = (frame / slot) as usize;
    let mut col = vec![None; nslots];
    // Rate-monotonic priority: shorter period first, then earlier reservation.
    let mut order: Vec<&Job> = jobs.iter().collect();
    order.sort_by_key(|j| (j.p, j.seq, j.task));
    let period_slots: Vec<usize> = order.iter().map(|j| (j.p / slot) as usize).collect();
    let need: Vec<u64> = order.iter().map(|j| j.e.div_ceil(slot)).collect();
    // Remaining slots of each task's current job (0: none pending).
    let mut left = vec![0u64; order.len()];
    let mut current: Option<usize> = None;
    for (s, cell) in col.iter_mut().enumerate() {
        for (k, &ps) in period_slots.iter().enumerate() {
            if s % ps == 0 {
                if left[k] > 0 {
                    // The previous job's deadline is this release.
                    return Err(Miss { task: order[k].task, release: (s - ps) as Ns * slot });
                }
                left[k] = need[k];
            }
        }
        // Non-preemptive: a started job keeps the CPU until done.
        let run = current.filter(|&k| left[k] > 0).or_else(|| (0..order.len()).find(|&k| left[k] > 0));
        if let Some(k) = run {
            *cell = Some(order[k].task);
            left[k] -= 1;
        }
        current = run;
    }
    // The last jobs are due at the end of the frame.
    if let Some(k) = (0..order.len()).find(|&k| left[k] > 0) {
        return Err(Miss { task: order[k].task, release: (nslots - period_slots[k]) as Ns * slot });
    }
    Ok(col)
}
