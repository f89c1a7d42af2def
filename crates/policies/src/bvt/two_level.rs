//! Two-level BVT (paper 001 §2.5, §3, §6.3): a first-level BVT scheduler runs the
//! reserved-effort (RE, level 0) tasks plus the second-level scheduler as one aggregate
//! "thread" with its own weight (the CPU share kept for best effort) and warp; the
//! second-level BVT scheduler runs the best-effort (BE, level 1) tasks, an open system.
//!
//! Built by composing two [`crate::bvt::Bvt`] instances, unchanged (no edit to bvt/mod.rs):
//! - **Level 0** sees the RE tasks under local ids (task id + 1) and the aggregate as local
//!   id 0. It is driven through a [`TaskView`] that reports the aggregate as runnable when
//!   some BE task is, running on the CPU where a BE task runs, and allowed on the CPUs
//!   where a queued BE task may run. Events of both levels share this scheduler's
//!   event tokens (bit 63 marks level 1).
//! - **Decisions**: level 0 picks; if it picks the aggregate, level 1 picks the BE task,
//!   and the slice is the shorter of the two (each level's §3 context-switch countdown).
//!   A BE task's CPU time is charged to it at level 1 and to the aggregate at level 0
//!   (§3: "the best-effort scheduler acts like a thread in the reserved-effort scheduler").
//!   When the BE task the aggregate runs blocks or is switched for another BE task, the
//!   aggregate is preempted (not blocked) while other BE tasks are runnable, so the §2.1
//!   allowance keeps the CPU for the aggregate; it blocks (voluntarily, §2.1 SVT rule on
//!   its next wake-up) when no BE task is runnable.
//!
//! # Levels, privilege and admission
//!
//! - Task parameter `level` = 0 (RE) or 1 (BE, the default); guests are always BE. At run
//!   time `Request::Param { name: "level", value }` moves a task; only root (`Sender::is_root`,
//!   uid 0) may move a task to level 0 (§3: "Only root can add threads to the first
//!   level"); others are refused with the reason. Task parameters given at creation
//!   are configuration (the scenario, i.e. the administrator) and are trusted.
//! - An RE task needs a share: task parameter `share` in whole percent (1..=100) or
//!   `share_ppm` (parts per million, 1..=1_000_000). Admission goes through
//!   [`crate::bvt::admission::Admission`] with capacity 100 % − `be_share`; a share that does
//!   not fit in what is unallocated is refused (at attach: the task stays where it was;
//!   by message: `Reply::Refused`). The share is freed when the task exits or leaves
//!   level 0. An RE task's level-0 weight is its share in ppm (§6.1.1: shares are the
//!   weights), so it may not also give `weight`; it may give warp, warp_limit, unwarp.
//!   `Param { share | share_ppm }` re-sizes an RE reservation (root only, admission
//!   checked) or records the share a BE task will ask for when it moves to level 0.
//! - The aggregate's level-0 weight is `be_share` (percent, default 50) in ppm, so when
//!   everything is runnable RE task i gets share_i and BE tasks share `be_share`
//!   (by their own weights); CPU unallocated to RE goes to whoever is runnable, in
//!   proportion (BVT is work-conserving).
//!
//! # Warp of the aggregate (§2.5)
//!
//! Units: level-0 weights are shares in ppm, so level-0 virtual time advances 1/s virtual
//! ns per ns run by a task (or the aggregate) with share s ppm; a level-0 warp that lets
//! it run L ahead is L/s (§6.1.3's L_i/w_i): e.g. 20 virtual ns is 10 ms at 50 %. RE tasks'
//! `warp` and `be_warp` are in these units; `threshold` is compared with BE tasks' warps
//! (level-1 units); in direct mode a BE task's warp is used at level 0 as it is.
//!
//! - `mode = "threshold"` (default, §6.3): the aggregate runs warped, with warp `be_warp`,
//!   warp limit `be_warp_limit` and unwarp requirement `be_unwarp`, while the BE task it
//!   runs (or, when it is not running, the earliest-EVT runnable BE task) runs warped
//!   with a warp above `threshold`; otherwise unwarped.
//! - `mode = "direct"`: the aggregate runs with the warp value and warp time limit of
//!   that BE task while that task runs warped, unwarped otherwise.
//! - A new warped episode of the aggregate starts when the condition becomes true (so
//!   an aggregate unwarped by its own warp limit stays unwarped until the condition
//!   goes false and true again, §2.2), or when the aggregate wakes.
//! - While the aggregate waits, "the BE task it would run" is estimated as the
//!   earliest-EVT runnable BE task; level 1 may instead keep the task it just ran (§2.1
//!   allowance), so the estimate and the task dispatched can differ and each correction
//!   can change level 0's decision. The aggregate's warp is therefore changed at most
//!   twice per instant; a further change waits for the next callback (a later time).
//!
//! Other scheduler parameters (`mcu`, `c`, `wake_preempt`, ...) are BVT's and apply to both
//! levels. Limitation: the aggregate is one thread at level 0, so BE tasks run on at
//! most one CPU at a time (the paper's two-level scheduler is described for one CPU).

use std::collections::BTreeMap;

use vassal_core::{
    AttachInfo, Block, CpuId, CpuSet, Ctx, Decision, Detach, Effect, Ns, Policy, PolicyLog, Preempt, Refusal, Reply, Request, SchedId,
    Sender, TaskId, TaskParams, TaskState, TaskView, Wake,
};

use crate::bvt::admission::{pct_to_ppm, Admission, PPM};
use crate::bvt::{self, Bvt, BvtTaskInfo};
use crate::params::Params;
use crate::task_table::{Slot, St, Tasks, Undo};

/// The aggregate's local id at level 0.
const AGG: TaskId = TaskId(0);
/// Event tokens of level 1 carry this bit.
const L1_BIT: u64 = 1 << 63;
/// Changes of the aggregate's warp allowed at one instant (see `sync_warp`).
const MAX_WARP_CHANGES: u32 = 2;

/// How the aggregate warps (§2.5).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Threshold,
    Direct,
}

/// A task's record (its state is the table's; `Picked` between `pick` and its outcome).
#[derive(Clone, Debug)]
struct Rec {
    level: u8,
    params: TaskParams,
    /// Affinity bits (refreshed when the task wakes).
    aff: u64,
}

/// What the aggregate's warp should be: off, or (warp, limit, unwarp).
type WarpWant = Option<(Ns, Ns, Ns)>;

/// Two-level BVT. See the module documentation.
pub struct TwoLevelBvt {
    l0: Bvt,
    l1: Bvt,
    mode: Mode,
    threshold: Ns,
    be_ppm: u64,
    be_warp: Ns,
    be_warp_limit: Ns,
    be_unwarp: Ns,
    admission: Admission,
    /// The tasks, and per CPU the BE task running there (`running`).
    tasks: Tasks<Rec>,
    agg_attached: bool,
    /// The aggregate's state at level 0 (never `Picked`).
    agg: St,
    agg_last: Option<CpuId>,
    warp_want: WarpWant,
    /// (instant, changes of the aggregate's warp at that instant).
    warp_changed: (Ns, u32),
    /// BE tasks runnable or running.
    be_live: usize,
    /// Affinity bits → number of runnable, not running BE tasks with them.
    be_queued_aff: BTreeMap<u64, usize>,
}

/// Scheduler parameters of bvt2.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bvt2Config {
    pub mode: Mode,
    /// Threshold mode: BE warps above this (virtual ns) warp the aggregate.
    pub threshold: Ns,
    /// The CPU share of the BE aggregate, ppm.
    pub be_share_ppm: u64,
    pub be_warp: Ns,
    pub be_warp_limit: Ns,
    pub be_unwarp: Ns,
}

/// Builds bvt2 from scheduler parameters: `mode` ("threshold" | "direct"), `threshold`,
/// `be_share` (percent, default 50), `be_warp`, `be_warp_limit`, `be_unwarp` (durations,
/// default 0), plus BVT's own (see [`crate::bvt::build`]) for both levels.
pub fn build(p: &mut Params) -> Result<TwoLevelBvt, String> {
    let mode = match p.choice("mode", "threshold", &["threshold", "direct"])?.as_str() {
        "direct" => Mode::Direct,
        _ => Mode::Threshold,
    };
    let threshold = p.duration("threshold", 0)?;
    let be_share = p.int("be_share", 50, 1..=100)?;
    let be_warp = p.duration("be_warp", 0)?;
    let be_warp_limit = p.duration("be_warp_limit", 0)?;
    let be_unwarp = p.duration("be_unwarp", 0)?;
    let base = bvt::build(p)?;
    TwoLevelBvt::new(
        *base.config(),
        Bvt2Config {
            mode,
            threshold,
            be_share_ppm: pct_to_ppm(be_share).map_err(|e| format!("bvt2 parameter 'be_share': {e}"))?,
            be_warp,
            be_warp_limit,
            be_unwarp,
        },
    )
}

fn local(t: TaskId) -> TaskId {
    TaskId(t.0.saturating_add(1))
}

fn real(l: TaskId) -> TaskId {
    TaskId(l.0 - 1)
}

/// Level 0's view: the aggregate as local task 0, every other task shifted by one.
struct L0View<'b, 'c> {
    ctx: &'b Ctx<'c>,
    agg_state: TaskState,
    agg_aff: CpuSet,
    agg_last: Option<CpuId>,
    agg_cpu: Option<CpuId>,
}

impl TaskView for L0View<'_, '_> {
    fn state(&self, task: TaskId) -> TaskState {
        if task == AGG {
            self.agg_state
        } else {
            self.ctx.state(real(task))
        }
    }
    fn affinity(&self, task: TaskId) -> CpuSet {
        if task == AGG {
            self.agg_aff
        } else {
            self.ctx.affinity(real(task))
        }
    }
    fn owner(&self, _task: TaskId) -> Option<SchedId> {
        // Only used by set_exclusive, which BVT does not call.
        Some(self.ctx.sched())
    }
    fn last_cpu(&self, task: TaskId) -> Option<CpuId> {
        if task == AGG {
            self.agg_last
        } else {
            self.ctx.last_cpu(real(task))
        }
    }
    fn running_on(&self, cpu: CpuId) -> Option<TaskId> {
        if self.agg_cpu == Some(cpu) {
            return Some(AGG);
        }
        self.ctx.running_on(cpu).map(local)
    }
}

/// Level 1's view: the mechanism's, unchanged.
struct L1View<'b, 'c>(&'b Ctx<'c>);

impl TaskView for L1View<'_, '_> {
    fn state(&self, task: TaskId) -> TaskState {
        self.0.state(task)
    }
    fn affinity(&self, task: TaskId) -> CpuSet {
        self.0.affinity(task)
    }
    fn owner(&self, _task: TaskId) -> Option<SchedId> {
        Some(self.0.sched())
    }
    fn last_cpu(&self, task: TaskId) -> Option<CpuId> {
        self.0.last_cpu(task)
    }
    fn running_on(&self, cpu: CpuId) -> Option<TaskId> {
        self.0.running_on(cpu)
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Level {
    L0,
    L1,
}

impl TwoLevelBvt {
    pub fn new(bvt: bvt::BvtConfig, cfg: Bvt2Config) -> Result<TwoLevelBvt, String> {
        if cfg.be_share_ppm == 0 || cfg.be_share_ppm > PPM {
            return Err(format!("bvt2: be_share must be more than 0 and at most 100%, got {} ppm", cfg.be_share_ppm));
        }
        for (k, v) in [("be_warp", cfg.be_warp), ("be_warp_limit", cfg.be_warp_limit), ("be_unwarp", cfg.be_unwarp)] {
            if v > bvt::MAX_TIME as u64 {
                return Err(format!("bvt2 parameter '{k}': {v}ns is too large (at most 2^62 ns)"));
            }
        }
        Ok(TwoLevelBvt {
            l0: Bvt::new(bvt)?,
            l1: Bvt::new(bvt)?,
            mode: cfg.mode,
            threshold: cfg.threshold,
            be_ppm: cfg.be_share_ppm,
            be_warp: cfg.be_warp,
            be_warp_limit: cfg.be_warp_limit,
            be_unwarp: cfg.be_unwarp,
            admission: Admission::new(PPM - cfg.be_share_ppm)?,
            tasks: Tasks::default(),
            agg_attached: false,
            agg: St::Blocked,
            agg_last: None,
            warp_want: None,
            warp_changed: (0, 0),
            be_live: 0,
            be_queued_aff: BTreeMap::new(),
        })
    }

    /// The RE reservation book.
    pub fn admission(&self) -> &Admission {
        &self.admission
    }

    /// The level (0 RE, 1 BE) of an attached task.
    pub fn level(&self, task: TaskId) -> Option<u8> {
        self.tasks.get(task).map(|r| r.level)
    }

    /// A task's BVT state at its level.
    pub fn task_info(&self, task: TaskId) -> Option<BvtTaskInfo> {
        match self.tasks.get(task)?.level {
            0 => self.l0.task_info(local(task)),
            _ => self.l1.task_info(task),
        }
    }

    /// The BE aggregate's state at level 0.
    pub fn aggregate_info(&self) -> Option<BvtTaskInfo> {
        self.l0.task_info(AGG)
    }

    // ----- driving the two levels -----

    fn agg_state(&self) -> TaskState {
        match self.agg {
            St::Ready | St::Picked(_) => TaskState::Runnable,
            St::Running(c) => TaskState::Running(c),
            St::Blocked => TaskState::Blocked,
        }
    }

    fn agg_affinity(&self) -> CpuSet {
        let mut bits = 0u64;
        for &a in self.be_queued_aff.keys() {
            bits |= a;
        }
        if let St::Running(c) = self.agg {
            bits |= CpuSet::only(c).0;
        }
        CpuSet(bits)
    }

    /// Runs `f` on one level's BVT with a context translated for it, then carries out the
    /// effects it asked for on the real context.
    fn call<R>(&mut self, ctx: &mut Ctx, level: Level, f: impl FnOnce(&mut Bvt, &mut Ctx) -> R) -> R {
        let mut eff: Vec<Effect> = Vec::new();
        let mut excl: Vec<(TaskId, bool)> = Vec::new();
        let (now, ncpus, sched) = (ctx.now(), ctx.ncpus(), ctx.sched());
        let r = match level {
            Level::L0 => {
                let view = L0View {
                    ctx: &*ctx,
                    agg_state: self.agg_state(),
                    agg_aff: self.agg_affinity(),
                    agg_last: self.agg_last,
                    agg_cpu: match self.agg {
                        St::Running(c) => Some(c),
                        _ => None,
                    },
                };
                let mut inner = Ctx::new(now, ncpus, sched, &mut eff, &mut excl, &view);
                f(&mut self.l0, &mut inner)
            }
            Level::L1 => {
                let view = L1View(&*ctx);
                let mut inner = Ctx::new(now, ncpus, sched, &mut eff, &mut excl, &view);
                f(&mut self.l1, &mut inner)
            }
        };
        let tag = if level == Level::L1 { L1_BIT } else { 0 };
        for e in eff {
            match e {
                Effect::SetEvent { token, at, .. } => {
                    let _ = ctx.set_event(at, token | tag);
                }
                Effect::CancelEvent { token, .. } => ctx.cancel_event(token | tag),
                Effect::Resched(cpu) => {
                    let _ = ctx.resched(cpu);
                }
            }
        }
        r
    }

    fn ensure_agg(&mut self, ctx: &mut Ctx) {
        if self.agg_attached {
            return;
        }
        self.agg_attached = true;
        let mut p = TaskParams::new();
        p.insert("weight".into(), self.be_ppm as i64);
        p.insert("warp".into(), if self.mode == Mode::Threshold { self.be_warp as i64 } else { 0 });
        p.insert("warp_limit".into(), if self.mode == Mode::Threshold { self.be_warp_limit as i64 } else { 0 });
        p.insert("unwarp".into(), if self.mode == Mode::Threshold { self.be_unwarp as i64 } else { 0 });
        p.insert("warp_on".into(), 0);
        let aff = CpuSet::first(ctx.ncpus());
        let info = AttachInfo { state: TaskState::Blocked, params: &p, affinity: aff, parent: None, guest: false };
        let r = self.call(ctx, Level::L0, |b, c| b.on_attach(c, AGG, &info));
        debug_assert!(r.is_ok(), "{r:?}");
    }

    fn be_runnable(&self) -> bool {
        self.be_live > 0
    }

    /// Counts a BE task's state into (`add`) or out of the summaries.
    fn count(&mut self, st: St, aff: u64, add: bool) {
        if st != St::Blocked {
            if add {
                self.be_live += 1;
            } else {
                self.be_live -= 1;
            }
        }
        if matches!(st, St::Ready | St::Picked(_)) {
            let n = self.be_queued_aff.entry(aff).or_insert(0);
            if add {
                *n += 1;
            } else {
                *n -= 1;
                if *n == 0 {
                    self.be_queued_aff.remove(&aff);
                }
            }
        }
    }

    /// Changes a task's recorded state, keeping the BE summaries right.
    fn set_st(&mut self, task: TaskId, st: St) {
        let Some(rec) = self.tasks.get_mut(task) else { return };
        let old = std::mem::replace(&mut rec.st, st);
        self.recount(task, old);
    }

    /// The task's state changed from `old`: the BE summaries and running table follow.
    fn recount(&mut self, task: TaskId, old: St) {
        let Some(rec) = self.tasks.get(task) else { return };
        let (level, st, aff) = (rec.level, rec.st, rec.aff);
        if level == 1 {
            self.count(old, aff, false);
            self.count(st, aff, true);
            if let St::Running(c) = old {
                self.tasks.clear_running(c, task);
            }
            if let St::Running(c) = st {
                self.tasks.set_running(c, task);
            }
        }
    }

    /// Records a task (its id was checked by `on_attach`) in state `st`.
    fn insert_rec(&mut self, task: TaskId, st: St, rec: Rec) {
        let (level, aff) = (rec.level, rec.aff);
        if self.tasks.insert(task, st, rec).is_err() {
            return;
        }
        if level == 1 {
            // Counted from Blocked, the neutral state.
            self.count(st, aff, true);
            if let St::Running(c) = st {
                self.tasks.set_running(c, task);
            }
        }
    }

    /// `pick` returned the task for `cpu` (a runnable task; `on_dispatch` or `on_refused` follows).
    fn picked(&mut self, task: TaskId, cpu: CpuId) {
        if self.tasks.get(task).is_some_and(|r| r.st == St::Ready) {
            self.set_st(task, St::Picked(cpu));
        }
    }

    fn remove_rec(&mut self, task: TaskId) -> Option<Slot<Rec>> {
        self.set_st(task, St::Blocked);
        self.tasks.remove(task)
    }

    /// The BE task the aggregate runs (or, when it is not running, would run next: the
    /// earliest EVT, ties to the earlier AVT, then the lower id, as BVT orders its queue).
    fn be_head(&self) -> Option<TaskId> {
        if let St::Running(c) = self.agg {
            if let Some(t) = self.tasks.running_on(c) {
                return Some(t);
            }
        }
        self.l1.queue_head()
    }

    fn want(&self) -> WarpWant {
        let h = self.be_head()?;
        let i = self.l1.task_info(h)?;
        if !i.warped {
            return None;
        }
        match self.mode {
            Mode::Threshold => (i.warp > self.threshold && self.be_warp > 0).then_some((self.be_warp, self.be_warp_limit, self.be_unwarp)),
            Mode::Direct => (i.warp > 0).then_some((i.warp, i.warp_limit, i.unwarp)),
        }
    }

    /// Brings the aggregate's warp in line with the BE task it runs (§2.5).
    fn sync_warp(&mut self, ctx: &mut Ctx) {
        let want = self.want();
        if want == self.warp_want {
            return;
        }
        // At most MAX_WARP_CHANGES per instant: the aggregate's warp follows the BE task
        // level 1 runs, which depends on whether the aggregate runs — without a bound the
        // two can chase each other forever at one instant. A deferred change is made at
        // the next callback.
        let now = ctx.now();
        if self.warp_changed.0 != now {
            self.warp_changed = (now, 0);
        }
        if self.warp_changed.1 >= MAX_WARP_CHANGES {
            return;
        }
        self.warp_changed.1 += 1;
        let old = std::mem::replace(&mut self.warp_want, want);
        let msg = |b: &mut Bvt, c: &mut Ctx, req: Request| {
            let r = b.on_message(c, Sender::ROOT, AGG, &req);
            debug_assert!(r.is_ok(), "{r:?}");
        };
        match want {
            None => self.call(ctx, Level::L0, |b, c| msg(b, c, Request::Warp { on: false })),
            Some((w, l, u)) => {
                let cur = self.l0.task_info(AGG);
                if self.mode == Mode::Direct {
                    // Other parameters (another BE task's): end the previous episode first.
                    if old.is_some() {
                        self.call(ctx, Level::L0, |b, c| msg(b, c, Request::Warp { on: false }));
                    }
                    let set = |name: &str, v: Ns| Request::Param { name: name.into(), value: v as i64 };
                    if cur.is_none_or(|i| i.warp_limit != l) {
                        self.call(ctx, Level::L0, |b, c| msg(b, c, set("warp_limit", l)));
                    }
                    if cur.is_none_or(|i| i.unwarp != u) {
                        self.call(ctx, Level::L0, |b, c| msg(b, c, set("unwarp", u)));
                    }
                    if cur.is_none_or(|i| i.warp != w) {
                        self.call(ctx, Level::L0, |b, c| msg(b, c, set("warp", w)));
                    }
                }
                self.call(ctx, Level::L0, |b, c| msg(b, c, Request::Warp { on: true }));
            }
        }
    }

    /// Keeps the aggregate runnable exactly when some BE task is, and its warp current.
    fn sync(&mut self, ctx: &mut Ctx) {
        let runnable = self.be_runnable();
        match self.agg {
            St::Blocked if runnable => {
                // Warp first, so the wake-up's preemption check sees it.
                self.sync_warp(ctx);
                self.agg = St::Ready;
                let wake = Wake { voluntary: true, interrupt: None, warp: false, cpu: None };
                self.call(ctx, Level::L0, |b, c| b.on_wake(c, AGG, wake));
            }
            St::Ready if !runnable => {
                self.agg = St::Blocked;
                self.call(ctx, Level::L0, |b, c| b.on_block(c, AGG, Block { voluntary: true }));
            }
            _ => {}
        }
        self.sync_warp(ctx);
    }

    /// The BE task the aggregate ran on `cpu` stopped running there.
    fn agg_stop(&mut self, ctx: &mut Ctx, cpu: CpuId, why: Preempt, voluntary: bool) {
        if self.agg != St::Running(cpu) {
            return;
        }
        if self.be_runnable() {
            self.agg = St::Ready;
            self.call(ctx, Level::L0, |b, c| b.on_preempt(c, AGG, cpu, why));
        } else {
            self.agg = St::Blocked;
            self.call(ctx, Level::L0, |b, c| b.on_block(c, AGG, Block { voluntary }));
        }
    }

    fn st_of(s: TaskState) -> St {
        match s {
            TaskState::Running(c) => St::Running(c),
            TaskState::Runnable => St::Ready,
            _ => St::Blocked,
        }
    }

    /// The RE share a task asks for, from its parameters.
    fn share_of(params: &TaskParams) -> Result<u64, String> {
        match (params.get("share"), params.get("share_ppm")) {
            (Some(_), Some(_)) => Err("bvt2: give 'share' (percent) or 'share_ppm', not both".into()),
            (Some(&p), None) => pct_to_ppm(p).map_err(|e| format!("bvt2: task parameter 'share': {e}")),
            (None, Some(&p)) if (1..=PPM as i64).contains(&p) => Ok(p as u64),
            (None, Some(&p)) => Err(format!("bvt2: task parameter 'share_ppm' must be from 1 to {PPM}, got {p}")),
            (None, None) => {
                Err("bvt2: a reserved-effort task (level 0) needs a CPU share: task parameter 'share' (percent) or 'share_ppm'".into())
            }
        }
    }

    /// Attaches `task` to level 0 (admission checked) in `state`.
    fn attach_re(
        &mut self,
        ctx: &mut Ctx,
        task: TaskId,
        params: &TaskParams,
        state: TaskState,
        affinity: CpuSet,
        parent: Option<TaskId>,
    ) -> Result<(), String> {
        if params.contains_key("weight") {
            return Err("bvt2: the weight of a reserved-effort task is its share; give 'share', not 'weight'".into());
        }
        let ppm = Self::share_of(params)?;
        self.admission.admit(task, ppm).map_err(|e| format!("bvt2: {e}"))?;
        let mut p = params.clone();
        p.insert("weight".into(), ppm as i64);
        let parent = parent.filter(|q| self.level(*q) == Some(0)).map(local);
        let info = AttachInfo { state, params: &p, affinity, parent, guest: false };
        let r = self.call(ctx, Level::L0, |b, c| b.on_attach(c, local(task), &info));
        if r.is_err() {
            self.admission.release(task);
        }
        r
    }

    fn attach_be(&mut self, ctx: &mut Ctx, task: TaskId, info: &AttachInfo) -> Result<(), String> {
        let parent = info.parent.filter(|q| self.level(*q) == Some(1));
        let info = AttachInfo { parent, ..info.clone() };
        self.call(ctx, Level::L1, |b, c| b.on_attach(c, task, &info))
    }

    /// Takes `task` out of its level (the record stays to the caller).
    fn remove(&mut self, ctx: &mut Ctx, task: TaskId, why: Detach) -> Option<Slot<Rec>> {
        let st = self.tasks.get(task)?.st;
        let mut rec = self.remove_rec(task)?;
        rec.st = st;
        if rec.level == 0 {
            self.call(ctx, Level::L0, |b, c| b.on_detach(c, local(task), why));
            self.admission.release(task);
        } else {
            self.call(ctx, Level::L1, |b, c| b.on_detach(c, task, why));
            if let St::Running(cpu) = rec.st {
                self.agg_stop(ctx, cpu, Preempt::Resched, true);
            }
        }
        Some(rec)
    }

    /// A BE task now runs on `cpu`: so does the aggregate.
    fn agg_start(&mut self, ctx: &mut Ctx, cpu: CpuId) {
        match self.agg {
            St::Running(_) => {} // already (here, or elsewhere: one CPU at a time)
            _ => {
                if self.agg == St::Blocked {
                    self.sync(ctx);
                }
                self.agg = St::Running(cpu);
                self.agg_last = Some(cpu);
                self.call(ctx, Level::L0, |b, c| b.on_dispatch(c, AGG, cpu));
            }
        }
    }

    fn move_level(&mut self, ctx: &mut Ctx, from: Sender, task: TaskId, to: i64) -> Reply {
        if to != 0 && to != 1 {
            return Reply::refused(format!("bvt2: 'level' must be 0 (reserved effort) or 1 (best effort), got {to}"));
        }
        if to == 0 && !from.is_root() {
            return Reply::refused(format!(
                "bvt2: only root (uid 0) may put a task in the reserved-effort level (level 0); uid {} is not root",
                from.uid
            ));
        }
        let Some(rec) = self.tasks.get(task).cloned() else {
            return Reply::refused(format!("{task} is not scheduled by bvt2"));
        };
        if rec.level as i64 == to {
            return Reply::Ok;
        }
        let state = ctx.state(task);
        let aff = ctx.affinity(task);
        if to == 0 {
            // Admission first, so a refusal leaves everything as it was.
            let ppm = match Self::share_of(&rec.params) {
                Ok(p) => p,
                Err(e) => return Reply::Refused(e),
            };
            if let Err(e) = self.admission.admit(task, ppm) {
                return Reply::Refused(format!("bvt2: {e}"));
            }
            self.admission.release(task);
        }
        self.remove(ctx, task, Detach::Moved);
        let mut params = rec.params.clone();
        params.insert("level".into(), to);
        let r = if to == 0 {
            self.attach_re(ctx, task, &params, state, aff, None)
        } else {
            self.attach_be(ctx, task, &AttachInfo { state, params: &params, affinity: aff, parent: None, guest: false })
        };
        match r {
            Ok(()) => {
                self.insert_rec(task, Self::st_of(state), Rec { level: to as u8, params, aff: aff.0 });
            }
            Err(e) => {
                // Put it back where it was (cannot fail: it was there a moment ago).
                let back = if rec.level == 0 {
                    self.attach_re(ctx, task, &rec.params, state, aff, None)
                } else {
                    self.attach_be(ctx, task, &AttachInfo { state, params: &rec.params, affinity: aff, parent: None, guest: false })
                };
                if back.is_ok() {
                    self.insert_rec(task, Self::st_of(state), Rec { aff: aff.0, ..rec.data });
                }
                return Reply::Refused(e);
            }
        }
        if let TaskState::Running(cpu) = state {
            let _ = ctx.resched(cpu);
        }
        self.sync(ctx);
        Reply::Ok
    }
}

impl Policy for TwoLevelBvt {
    /// A_i and E_i for plots (paper 001 Figures 1-4), in virtual ns.
    fn virtual_time(&self, task: TaskId) -> Option<vassal_core::VirtualTime> {
        let t = self.task_info(task)?;
        let scale = bvt::VT_SCALE as f64;
        Some(vassal_core::VirtualTime { actual: t.avt as f64 / scale, effective: t.evt as f64 / scale })
    }
    fn kind(&self) -> &str {
        "bvt2"
    }

    fn init(&mut self, ncpus: u16) {
        self.tasks.init(ncpus);
        self.l0.init(ncpus);
        self.l1.init(ncpus);
    }

    fn drain_log(&mut self, out: &mut Vec<PolicyLog>) {
        let mut l0 = Vec::new();
        self.l0.drain_log(&mut l0);
        for mut e in l0 {
            match e.task {
                Some(AGG) => {
                    e.task = None;
                    e.text = format!("best-effort aggregate: {}", e.text);
                }
                Some(t) => e.task = Some(real(t)),
                None => {}
            }
            out.push(e);
        }
        self.l1.drain_log(out);
    }

    fn on_attach(&mut self, ctx: &mut Ctx, task: TaskId, info: &AttachInfo) -> Result<(), String> {
        self.ensure_agg(ctx);
        crate::task_index(task)?;
        let level = match info.params.get("level") {
            _ if info.guest => 1,
            None => 1,
            Some(&l @ (0 | 1)) => l as u8,
            Some(&l) => return Err(format!("bvt2: task parameter 'level' must be 0 (reserved effort) or 1 (best effort), got {l}")),
        };
        if self.tasks.contains(task) {
            self.remove(ctx, task, Detach::Moved);
        }
        if level == 0 {
            self.attach_re(ctx, task, info.params, info.state, info.affinity, info.parent)?;
        } else {
            self.attach_be(ctx, task, info)?;
        }
        let st = Self::st_of(info.state);
        self.insert_rec(task, st, Rec { level, params: info.params.clone(), aff: info.affinity.0 });
        if level == 1 {
            if let St::Running(cpu) = st {
                self.agg_start(ctx, cpu);
                let _ = ctx.resched(cpu);
            }
        }
        self.sync(ctx);
        Ok(())
    }

    fn on_detach(&mut self, ctx: &mut Ctx, task: TaskId, why: Detach) {
        if self.remove(ctx, task, why).is_some() {
            self.sync(ctx);
        }
    }

    fn on_wake(&mut self, ctx: &mut Ctx, task: TaskId, wake: Wake) {
        let Some(rec) = self.tasks.get_mut(task) else { return };
        if rec.st != St::Blocked {
            return;
        }
        rec.aff = ctx.affinity(task).0;
        let level = rec.level;
        self.set_st(task, St::Ready);
        if level == 0 {
            self.call(ctx, Level::L0, |b, c| b.on_wake(c, local(task), wake));
        } else {
            self.call(ctx, Level::L1, |b, c| b.on_wake(c, task, wake));
        }
        self.sync(ctx);
    }

    fn on_block(&mut self, ctx: &mut Ctx, task: TaskId, block: Block) {
        let Some(rec) = self.tasks.get(task) else { return };
        let (was, level) = (rec.st, rec.level);
        self.set_st(task, St::Blocked);
        if level == 0 {
            self.call(ctx, Level::L0, |b, c| b.on_block(c, local(task), block));
        } else {
            self.call(ctx, Level::L1, |b, c| b.on_block(c, task, block));
            if let St::Running(cpu) = was {
                self.agg_stop(ctx, cpu, Preempt::Resched, block.voluntary);
            }
        }
        self.sync(ctx);
    }

    fn on_dispatch(&mut self, ctx: &mut Ctx, task: TaskId, cpu: CpuId) {
        let Some(rec) = self.tasks.get(task) else { return };
        let level = rec.level;
        self.set_st(task, St::Running(cpu));
        if level == 0 {
            self.call(ctx, Level::L0, |b, c| b.on_dispatch(c, local(task), cpu));
        } else {
            self.call(ctx, Level::L1, |b, c| b.on_dispatch(c, task, cpu));
            self.agg_start(ctx, cpu);
        }
        self.sync(ctx);
    }

    fn on_preempt(&mut self, ctx: &mut Ctx, task: TaskId, cpu: CpuId, why: Preempt) {
        let Some(rec) = self.tasks.get(task) else { return };
        let level = rec.level;
        self.set_st(task, St::Ready);
        if level == 0 {
            self.call(ctx, Level::L0, |b, c| b.on_preempt(c, local(task), cpu, why));
        } else {
            self.call(ctx, Level::L1, |b, c| b.on_preempt(c, task, cpu, why));
            self.agg_stop(ctx, cpu, why, true);
        }
    }

    fn on_run(&mut self, ctx: &mut Ctx, task: TaskId, cpu: CpuId, ran: Ns) {
        let Some(rec) = self.tasks.get(task) else { return };
        if rec.level == 0 {
            self.call(ctx, Level::L0, |b, c| b.on_run(c, local(task), cpu, ran));
        } else {
            self.call(ctx, Level::L1, |b, c| b.on_run(c, task, cpu, ran));
            // §3: the aggregate is charged for its BE tasks' CPU time.
            if self.agg == St::Running(cpu) {
                self.call(ctx, Level::L0, |b, c| b.on_run(c, AGG, cpu, ran));
            }
        }
        self.sync(ctx);
    }

    fn on_event(&mut self, ctx: &mut Ctx, token: u64) {
        if token & L1_BIT != 0 {
            self.call(ctx, Level::L1, |b, c| b.on_event(c, token & !L1_BIT));
        } else {
            self.call(ctx, Level::L0, |b, c| b.on_event(c, token));
        }
        self.sync(ctx);
    }

    fn on_message(&mut self, ctx: &mut Ctx, from: Sender, task: TaskId, req: &Request) -> Reply {
        self.ensure_agg(ctx);
        let Some(rec) = self.tasks.get(task) else {
            return Reply::refused(format!("{task} is not scheduled by bvt2"));
        };
        let level = rec.level;
        let reply = match req {
            Request::Param { name, value } if name == "level" => return self.move_level(ctx, from, task, *value),
            Request::Param { name, value } if name == "share" || name == "share_ppm" => {
                let mut p = TaskParams::new();
                p.insert(name.clone(), *value);
                let ppm = match Self::share_of(&p) {
                    Ok(v) => v,
                    Err(e) => return Reply::Refused(e),
                };
                if level == 0 {
                    if !from.is_root() {
                        return Reply::refused(format!(
                            "bvt2: only root (uid 0) may change a reserved-effort share; uid {} is not root",
                            from.uid
                        ));
                    }
                    if let Err(e) = self.admission.admit(task, ppm) {
                        return Reply::Refused(format!("bvt2: {e}"));
                    }
                    let req = Request::Param { name: "weight".into(), value: ppm as i64 };
                    let r = self.call(ctx, Level::L0, |b, c| b.on_message(c, Sender::ROOT, local(task), &req));
                    debug_assert!(r.is_ok(), "{r:?}");
                }
                let rec = self.tasks.get_mut(task).expect("present");
                rec.params.remove("share");
                rec.params.remove("share_ppm");
                rec.params.insert(name.clone(), *value);
                Reply::Ok
            }
            Request::Param { name, .. } if name == "weight" && level == 0 => {
                return Reply::refused("bvt2: the weight of a reserved-effort task is its share; set 'share'");
            }
            _ if level == 0 => self.call(ctx, Level::L0, |b, c| b.on_message(c, from, local(task), req)),
            _ => self.call(ctx, Level::L1, |b, c| b.on_message(c, from, task, req)),
        };
        self.sync(ctx);
        reply
    }

    fn pick(&mut self, ctx: &mut Ctx, cpu: CpuId) -> Option<Decision> {
        self.ensure_agg(ctx);
        // No warp sync here: the aggregate's warp follows the BE task it runs (set at
        // dispatch) and, while it waits, the earliest-EVT BE task (set when BE tasks wake,
        // block, run or change). Re-deriving it between a preemption and the decision
        // would flip it for a task that level 1 is about to keep running (§2.1 allowance).
        let d0 = self.call(ctx, Level::L0, |b, c| b.pick(c, cpu))?;
        if d0.task != AGG {
            self.picked(real(d0.task), cpu);
            return Some(Decision { task: real(d0.task), slice: d0.slice });
        }
        let Some(d1) = self.call(ctx, Level::L1, |b, c| b.pick(c, cpu)) else {
            // No BE task may run here after all: level 0's choice is void.
            self.call(ctx, Level::L0, |b, c| b.on_refused(c, cpu, d0, Refusal::NotAllowed));
            return None;
        };
        let slice = match (d0.slice, d1.slice) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self.picked(d1.task, cpu);
        Some(Decision { task: d1.task, slice })
    }

    fn on_refused(&mut self, ctx: &mut Ctx, cpu: CpuId, decision: Decision, why: Refusal) {
        let Some(rec) = self.tasks.get(decision.task) else { return };
        let (task, was) = (decision.task, rec.st);
        if rec.level == 0 {
            let d = Decision { task: local(task), slice: decision.slice };
            self.call(ctx, Level::L0, |b, c| b.on_refused(c, cpu, d, why));
        } else {
            self.call(ctx, Level::L1, |b, c| b.on_refused(c, cpu, decision, why));
            let d = Decision { task: AGG, slice: decision.slice };
            self.call(ctx, Level::L0, |b, c| b.on_refused(c, cpu, d, Refusal::NotAllowed));
        }
        match self.tasks.refused(cpu, task, why) {
            Undo::Forget => {
                self.remove(ctx, task, Detach::Released);
            }
            // The table set its state (blocked, or running elsewhere).
            Undo::Blocked | Undo::Running(_) => self.recount(task, was),
            Undo::Requeue { .. } => self.set_st(task, St::Ready),
            Undo::Nothing => {}
        }
        self.sync(ctx);
    }
}
