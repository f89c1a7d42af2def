//! The decisions a global policy (`edf`, `fps`) has asked for and that have not happened
//! yet, per CPU. The simulator handles every event of an instant before it makes the
//! decisions they call for (docs/jobs.md), so several jobs may be released, and some may
//! complete, before any CPU decides. Each CPU asked to decide will take the best waiting
//! job that may run there, so a job checking whether it must preempt first counts them:
//! - [`Ask::For`]: a CPU asked to decide (idle, or its job is to be preempted);
//! - [`Ask::Free`]: a CPU whose running task went straight on to its next job (its job
//!   completed, a scheduling point): that next job competes with the waiting ones, as
//!   if it were waiting too (its key is kept).
//!
//! A waiting job that fewer better jobs compete with than there are CPUs asked is
//! served by one of them and preempts nothing ([`Asked::served`]); one pushed out by a
//! better job is checked again after the next dispatch.
//!
//! Invariant: a CPU's entry is `No` once the decision it asked for was made (the policy
//! calls [`Asked::done`] when it picks, dispatches or is told of a preemption there).
//! `waiting` has a CPU's bit set exactly when its entry is not `No`, so the usual case —
//! no CPU asked — is one test.

use vassal_core::{CpuId, CpuSet, Ctx};

/// The state of one CPU (module docs); `K` is the policy's order of jobs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Ask<K> {
    #[default]
    No,
    For,
    Free(K),
}

#[derive(Clone, Debug)]
pub struct Asked<K> {
    cpus: Vec<Ask<K>>,
    /// The CPUs whose entry is not `No`.
    waiting: CpuSet,
}

impl<K> Default for Asked<K> {
    fn default() -> Self {
        Asked { cpus: Vec::new(), waiting: CpuSet::NONE }
    }
}

impl<K: Copy + Ord> Asked<K> {
    pub fn init(&mut self, ncpus: usize) {
        self.cpus = (0..ncpus).map(|_| Ask::No).collect();
        self.waiting = CpuSet::NONE;
    }

    pub fn get(&self, cpu: CpuId) -> Ask<K> {
        if !self.waiting.contains(cpu) {
            return Ask::No;
        }
        self.cpus.get(cpu.0 as usize).copied().unwrap_or(Ask::No)
    }

    /// The CPUs a ready task allowed on `aff` may ask to decide, in ascending order: those
    /// of `aff` below `ncpus`, but not `except` and none asked already. (A set of bits
    /// walked once: a global policy checks them at every wake-up.)
    #[inline]
    pub fn candidates(&self, aff: CpuSet, except: Option<CpuId>, ncpus: u16) -> impl Iterator<Item = CpuId> {
        CpuSet(aff.0 & CpuSet::first(ncpus).0 & !self.waiting.0 & !except.map_or(0, |c| CpuSet::only(c).0)).iter()
    }

    /// Whether no CPU is asked to decide.
    pub fn is_empty(&self) -> bool {
        self.waiting == CpuSet::NONE
    }

    /// Asks `cpu` to decide.
    pub fn ask(&mut self, ctx: &mut Ctx, cpu: CpuId) {
        if let Some(x) = self.cpus.get_mut(cpu.0 as usize) {
            if !matches!(x, Ask::Free(_)) {
                *x = Ask::For;
            }
            self.waiting.0 |= 1 << cpu.0;
        }
        let _ = ctx.resched(cpu);
    }

    /// Asks `cpu` to decide because its running task's job completed; `next` is the
    /// task's next job.
    pub fn ask_free(&mut self, ctx: &mut Ctx, cpu: CpuId, next: K) {
        if let Some(x) = self.cpus.get_mut(cpu.0 as usize) {
            *x = Ask::Free(next);
            self.waiting.0 |= 1 << cpu.0;
        }
        let _ = ctx.resched(cpu);
    }

    /// The decision on `cpu` is being made.
    pub fn done(&mut self, cpu: CpuId) {
        if self.waiting.contains(cpu) {
            self.cpus[cpu.0 as usize] = Ask::No;
            self.waiting.0 &= !(1 << cpu.0);
        }
    }

    /// Whether a job of order `key`, allowed on `aff` (but not `except`), will be taken by
    /// one of the CPUs asked to decide: fewer jobs better than it compete for them —
    /// `better_waiting(n)` counts the waiting jobs better than `key`, up to `n`.
    pub fn served(&self, key: K, aff: CpuSet, except: Option<CpuId>, better_waiting: impl FnOnce(usize) -> usize) -> bool {
        let mut candidates = self.waiting.0 & aff.0 & !except.map_or(0, |c| CpuSet::only(c).0);
        if candidates == 0 {
            return false;
        }
        let mut slots = 0;
        let mut better = 0;
        while candidates != 0 {
            let c = candidates.trailing_zeros() as usize;
            candidates &= candidates - 1;
            match self.cpus[c] {
                Ask::No => {}
                Ask::For => slots += 1,
                Ask::Free(k) => {
                    slots += 1;
                    better += usize::from(k < key);
                }
            }
        }
        slots > 0 && better < slots && better + better_waiting(slots - better) < slots
    }
}
