//! BVT's warp (paper 001 §2.2): a task's warp W_i, its warp time limit L_i (a one-shot
//! scheduler event gets control exactly at the limit, footnote 2) and its unwarp time
//! requirement U_i (a warp asked for within U_i of the last episode's end is deferred,
//! and logged); plus the §6.3.2 interactivity heuristic's warp levels. Methods of
//! [`Bvt`], split out of mod.rs.

use super::*;

impl Bvt {
    /// The warp budget used since `warp_run_from` is settled. Returns true if the warp time
    /// limit L_i is reached.
    pub(super) fn settle_warp(&mut self, id: TaskId, now: Ns) -> bool {
        let (mcu, tick) = (self.cfg.mcu, self.cfg.tick_charge);
        let t = self.t_mut(id);
        if let Some(from) = t.warp_run_from {
            t.warp_run_from = if matches!(t.st, St::Running(_)) { Some(now) } else { None };
            if t.warped && t.warp_limit > 0 {
                let reached = from.saturating_add(t.warp_left);
                t.warp_left = t.warp_left.saturating_sub(now.saturating_sub(from));
                // §4.3: with tick charging the limit is only seen at a timer interrupt.
                return t.warp_left == 0 && (!tick || reached.div_ceil(mcu).saturating_mul(mcu) <= now);
            }
        }
        false
    }

    pub(super) fn cancel_limit_event(&mut self, ctx: &mut Ctx, id: TaskId) {
        let t = self.t_mut(id);
        if t.limit_armed {
            t.limit_armed = false;
            ctx.cancel_event(token(TOKEN_WARP_LIMIT, id.0 as u64));
        }
    }

    /// §2.2 footnote 2: a one-shot timer gets control exactly when the warp limit is
    /// reached; with tick charging (§3, §4.3) the limit is detected at the first timer
    /// interrupt at or after it.
    pub(super) fn arm_limit_event(&mut self, ctx: &mut Ctx, id: TaskId) {
        let now = ctx.now();
        let mcu = self.cfg.mcu;
        let tick = self.cfg.tick_charge;
        let t = self.t_mut(id);
        if t.warped && t.warp_limit > 0 && matches!(t.st, St::Running(_)) {
            t.limit_armed = true;
            let at = now.saturating_add(t.warp_left);
            let at = if tick { at.div_ceil(mcu).saturating_mul(mcu) } else { at };
            let _ = ctx.set_event(at, token(TOKEN_WARP_LIMIT, id.0 as u64));
        }
    }

    /// The task attempts to run warped (§2.2): it does if its warp is non-zero and it has
    /// not warped within U_i; otherwise it runs unwarped until U_i has passed.
    pub(super) fn try_warp(&mut self, ctx: &mut Ctx, id: TaskId) {
        let now = ctx.now();
        let t = self.t(id);
        if !t.warp_back || t.warped || t.warp_ns == 0 {
            return;
        }
        if now < t.unwarp_until {
            let until = t.unwarp_until;
            self.push_log(now, id, BvtLogEvent::WarpDenied { until });
            self.t_mut(id).unwarp_armed = true;
            let _ = ctx.set_event(until, token(TOKEN_UNWARP, id.0 as u64));
            return;
        }
        self.update(id, |t| {
            t.warped = true;
            t.warp_left = t.warp_limit;
            t.warp_run_from = matches!(t.st, St::Running(_)).then_some(now);
        });
        self.arm_limit_event(ctx, id);
    }

    /// A warped episode ends (§2.2): by a voluntary block, an explicit unwarp, or the warp
    /// time limit. The unwarp time requirement U_i is measured from now.
    pub(super) fn end_warp(&mut self, ctx: &mut Ctx, id: TaskId, by_limit: bool) {
        let now = ctx.now();
        self.cancel_limit_event(ctx, id);
        if !self.t(id).warped {
            return;
        }
        let limit = self.t(id).warp_limit;
        self.update(id, |t| {
            t.warped = false;
            t.warp_run_from = None;
            t.unwarp_until = now.saturating_add(t.unwarp);
            if by_limit {
                // §2.2: "remains unwarped until it explicitly sets its state to warped again".
                t.warp_back = false;
            }
        });
        if by_limit {
            self.push_log(now, id, BvtLogEvent::WarpLimit { warped_for: limit });
        }
    }

    /// The task no longer wants to run warped (§2.2's warpBack cleared: an unwarp asked
    /// for, or its warp set to 0); a warped episode under way ends. Returns whether one
    /// did.
    pub(super) fn warp_off(&mut self, ctx: &mut Ctx, id: TaskId) -> bool {
        self.settle_warp(id, ctx.now());
        self.t_mut(id).warp_back = false;
        let warped = self.t(id).warped;
        if warped {
            self.end_warp(ctx, id, false);
        }
        warped
    }

    /// §6.3.2: the heuristic's warp for a level.
    pub(super) fn heuristic_warp(&self, level: u32) -> u64 {
        (self.cfg.w_int as u128 * level as u128 / INTERACTIVE_LEVELS as u128) as u64
    }

    pub(super) fn set_level(&mut self, id: TaskId, level: u32) {
        let w = self.heuristic_warp(level);
        self.update(id, |t| {
            t.level = level;
            t.warp_ns = w;
        });
    }
}
