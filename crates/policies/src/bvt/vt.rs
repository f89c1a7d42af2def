//! BVT's virtual time (paper 001 §2, §2.1, §3): what a run is charged (whole mcu, each
//! started one once: `charge_for`), the context-switch allowance C and its crossover rule
//! (`c_rule`, `run_until_cross`: §3's countdown), the migration penalty (§2.4) and the
//! scheduler virtual time SVT (`svt_now`). All in `i128` units of 1/VT_SCALE virtual ns
//! (see the representation notes in mod.rs). Methods of [`Bvt`], split out of mod.rs.

use super::*;

impl Bvt {
    pub(super) fn mcu_vt(&self) -> i128 {
        self.cfg.mcu as i128 * VT_SCALE
    }

    pub(super) fn c_vt(&self) -> i128 {
        self.cfg.c as i128 * VT_SCALE
    }

    /// §2.1: switch from running i to j when E_j ≤ E_i − C/w_i, i.e. w_i·(E_i − E_j) ≥ C
    /// (exact, in integers).
    pub(super) fn c_rule(&self, w_i: u64, e_i: i128, e_j: i128) -> bool {
        self.c_w(w_i) as i128 * (e_i - e_j) >= self.c_vt()
    }

    /// The weight C is divided by for a running task of weight `w_i` (see `c_weight`).
    pub(super) fn c_w(&self, w_i: u64) -> u64 {
        if self.cfg.c_weight > 0 {
            self.cfg.c_weight
        } else {
            w_i
        }
    }

    /// §2.4: the migration penalty M for running `id` on `cpu`.
    pub(super) fn penalty(&self, ctx: &Ctx, id: TaskId, cpu: CpuId) -> i128 {
        if self.cfg.migration_penalty > 0 && ctx.last_cpu(id).is_some_and(|c| c != cpu) {
            self.cfg.migration_penalty as i128 * VT_SCALE
        } else {
            0
        }
    }

    /// The AVT increase (and new frac, credit) for running `ran` more ns from the settled
    /// state with `credit` unused ns of an already charged mcu (§2: each started mcu is
    /// charged k·m_i, m_i = mcu·VT_SCALE/w_i carried exactly through `frac`).
    pub(super) fn charge_for(&self, weight: u64, frac: u64, credit: Ns, ran: Ns) -> (i128, u64, Ns) {
        if ran <= credit {
            return (0, frac, credit - ran);
        }
        let excess = ran - credit;
        let k = excess.div_ceil(self.cfg.mcu);
        let total = frac as i128 + k as i128 * self.mcu_vt();
        let w = weight as i128;
        let new_credit = (k as u128 * self.cfg.mcu as u128 - excess as u128) as Ns;
        (total / w, (total % w) as u64, new_credit)
    }

    /// §3: the AVT increase (and new frac) for running from `from` to `to`: one mcu advance
    /// per timer interrupt in (from, to], the interrupts at the multiples of mcu (a tick
    /// charges the task that ran up to it).
    pub(super) fn charge_ticks(&self, weight: u64, frac: u64, from: Ns, to: Ns) -> (i128, u64) {
        let k = (to / self.cfg.mcu).saturating_sub(from / self.cfg.mcu);
        let total = frac as i128 + k as i128 * self.mcu_vt();
        let w = weight as i128;
        (total / w, (total % w) as u64)
    }

    /// The time from `from` to the `k`-th timer interrupt after it.
    pub(super) fn to_tick(&self, from: Ns, k: u64) -> Ns {
        (from / self.cfg.mcu).saturating_add(k).saturating_mul(self.cfg.mcu).saturating_sub(from)
    }

    /// The credit a task would keep if dispatched on `cpu` now.
    pub(super) fn effective_credit(t: &Task, cpu: CpuId, now: Ns) -> Ns {
        if t.stopped == Some((cpu, now)) {
            t.credit
        } else {
            0
        }
    }

    /// Estimated AVT increase of a running task since it was last accounted (§3: the
    /// scheduler advances the running thread's AVT whenever it is invoked).
    pub(super) fn pending_charge(&self, t: &Slot<Task>, now: Ns) -> i128 {
        match t.st {
            St::Running(_) if self.cfg.tick_charge => self.charge_ticks(t.weight, t.frac, t.settled_at, now).0,
            St::Running(_) => self.charge_for(t.weight, t.frac, t.credit, now.saturating_sub(t.settled_at)).0,
            _ => 0,
        }
    }

    /// How long task `t` (EVT `e_t`, charges from `frac` and `credit`) must run before the
    /// §2.1 rule lets `e_rival` replace it: credit + k whole mcu, k the fewest mcu after
    /// which w_t·(E_t − E_rival) ≥ C. The last mcu is paid for, so it is run to its end
    /// (§3's context-switch countdown counts whole mcu). 0: the rule holds already.
    /// None: too far in the future to matter. With tick charging (§3) the k mcu are the
    /// next k timer interrupts after `from` (when the task was last accounted).
    pub(super) fn run_until_cross(&self, t: &Task, credit: Ns, e_t: i128, e_rival: i128, from: Ns) -> Option<Ns> {
        let w = t.weight as i128;
        let cw = self.c_w(t.weight) as i128;
        let need = self.c_vt() - cw * (e_t - e_rival);
        if need <= 0 {
            return Some(0);
        }
        let q = (need + cw - 1) / cw; // AVT units to gain
        let units = q * w - t.frac as i128; // > 0: q ≥ 1 and frac < w
        let k = (units + self.mcu_vt() - 1) / self.mcu_vt();
        if self.cfg.tick_charge {
            let ns = self.to_tick(from, k.min(u64::MAX as i128) as u64) as u128;
            return (ns <= MAX_SLICE).then_some(ns as Ns);
        }
        let ns = credit as u128 + k as u128 * self.cfg.mcu as u128;
        (ns <= MAX_SLICE).then_some(ns as Ns)
    }

    /// SVT for a wake-up: the minimum A over tasks counted in SVT, with running tasks'
    /// AVTs brought up to date by estimate (never below the recorded floor).
    pub(super) fn svt_now(&self, now: Ns) -> i128 {
        let mut min: Option<i128> = None;
        for &(a, id) in &self.svt_set {
            let t = self.t(id);
            if let St::Running(_) = t.st {
                let est = a + self.pending_charge(t, now);
                min = Some(min.map_or(est, |m| m.min(est)));
            } else {
                // Later entries have A ≥ a, and running ones only grow by the estimate.
                min = Some(min.map_or(a, |m| m.min(a)));
                break;
            }
        }
        min.map_or(self.svt_floor, |m| m.max(self.svt_floor))
    }
}
