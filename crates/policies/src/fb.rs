//! The FB (feedback queue) CPU scheduler of paper 004 (the study of UNIX CPU and swap
//! scheduling, §4.1), kind "fb" — the modified scheduler that
//! replaces the standard UNIX one (§3, see [`crate::unix`]). The paper gives the structure
//! but not the quantum table or the default base level; those are this module's choices
//! and say so.
//!
//! Rules:
//! - every task is at one of 32 levels, 0 the worst and 31 the best (§4.1: numerically
//!   highest runs first, the reverse of the standard UNIX numbering). The CPU goes to the
//!   ready task of the highest level; among equal levels, to the one that became ready
//!   first (the ready list is ordered by level, FIFO within a level).
//! - levels 16–31 are real time (§4.1): such a task runs until it blocks or a task of a
//!   higher level preempts it — no quantum, no level changes, no boost (it stays at its
//!   base level). The paper's real-time tasks are also never swapped out: `swap_advice`
//!   lists them as resident for a swapping mechanism (vassal-sim's swap scheduler).
//! - levels 0–15 are time-sharing (§4.1). Each level has a quantum, longer at the lower
//!   levels: quantum(l) = `quantum` + (15 − l) · `quantum_step` (policy parameters, default
//!   50 ms and 25 ms: 50 ms at level 15, 225 ms at level 8, 425 ms at level 0 — our choice,
//!   the paper gives no numbers). A task that uses all of its quantum drops one level, but
//!   never below its base level, and gets the quantum of its new level; it goes behind the
//!   tasks of that level. The quantum is measured exactly (the slice given to the
//!   dispatcher is the rest of the quantum), not in clock ticks.
//! - each task has a base level (§4.1: "analogous to the nice value"): the per-task
//!   parameter `base` (0..=31; default the parent's, else the policy parameter `base`,
//!   default 8 — our choice, the middle of the time-sharing range), or a
//!   `Param { name: "base" }` message. A new task starts at its base level.
//! - when a task blocks, its level rises to base + the increment of the event it awaits
//!   (§4.1: 6 terminal input, 4 terminal output, 2 disk I/O), at most 15 (boosting never
//!   makes a time-sharing task real time), with a fresh quantum of that level. The
//!   simulator's block carries only `voluntary`, so the increment is the per-task
//!   parameter `wake_boost` (0..=15), or a `Param { name: "wake_boost" }` message sent
//!   before the task blocks, default the policy parameter `wake_boost`, default 2 (disk).
//!   A woken task joins the back of its level.
//! - preemption (§4.1: "a process executing in user mode is preempted by a higher priority
//!   process becoming loaded and ready"): on a wake-up, the CPU (allowed to the woken task)
//!   running this policy's task of the lowest level, if strictly lower than the woken
//!   task's, is rescheduled. A task preempted before its quantum ran out keeps the rest of
//!   it and returns to the *front* of its level; a task that yields goes to the back of
//!   its level with the rest of its quantum.
//! - a base level changed by message takes effect at once: a time-sharing task below its
//!   new base rises to it; a task whose base becomes real time moves to it; a real-time
//!   task whose base becomes time-sharing moves to it.
//!
//! A guest (a task of a higher scheduler that this one hosts as the default) is charged
//! quantum only while this policy's own decision runs it.
//!
//! Cost: the ready tasks are kept in a `BTreeSet` ordered by (level descending, ready
//! order): O(log n) per decision, wake, block and preemption (plus a walk past tasks whose
//! affinity excludes the CPU); a wake-up also looks at each CPU once, O(ncpus). No
//! periodic work at all (§4: the FB dispatching decision "can simply select the first
//! loaded process in the list"). Decisions use no floating point.

use std::cmp::Reverse;

use vassal_core::{
    AttachInfo, Block, CpuId, Ctx, Decision, Detach, Ns, Policy, Preempt, Refusal, Reply, Request, Sender, SwapAdvice, TaskId, Wake, MS,
};

use crate::params::Params;
use crate::runqueue::{self, RunQueue, St};

/// The number of levels.
pub const LEVELS: u8 = 32;
/// The best level.
pub const MAX_LEVEL: u8 = 31;
/// The lowest real-time level; 0..=15 are time-sharing.
pub const RT_MIN: u8 = 16;
/// The best time-sharing level.
pub const TS_MAX: u8 = 15;
/// §4.1's level increments on wake-up, by awaited event.
pub const BOOST_TERMINAL_INPUT: u8 = 6;
pub const BOOST_TERMINAL_OUTPUT: u8 = 4;
pub const BOOST_DISK: u8 = 2;

/// Scheduler-wide parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FbConfig {
    /// The quantum at level 15 (the shortest).
    pub quantum: Ns,
    /// How much longer the quantum is at each level below 15.
    pub quantum_step: Ns,
    /// The base level of a task without a `base` of its own.
    pub base: u8,
    /// The wake-up increment of a task without a `wake_boost` of its own.
    pub wake_boost: u8,
}

impl Default for FbConfig {
    fn default() -> Self {
        FbConfig { quantum: 50 * MS, quantum_step: 25 * MS, base: 8, wake_boost: BOOST_DISK }
    }
}

impl FbConfig {
    /// The quantum of a time-sharing level (real-time levels have none).
    pub fn quantum(&self, level: u8) -> Option<Ns> {
        (level <= TS_MAX).then(|| self.quantum.saturating_add(self.quantum_step.saturating_mul((TS_MAX - level) as Ns)))
    }
}

/// Builds the policy from its scenario parameters (`quantum`, `quantum_step`, `base`,
/// `wake_boost`).
pub fn build(p: &mut Params) -> Result<Fb, String> {
    let d = FbConfig::default();
    let quantum = p.duration("quantum", d.quantum)?;
    if quantum == 0 {
        return Err("fb parameter 'quantum': must be greater than zero".into());
    }
    let quantum_step = p.duration("quantum_step", d.quantum_step)?;
    let base = p.int("base", d.base as i64, 0..=MAX_LEVEL as i64)? as u8;
    let wake_boost = p.int("wake_boost", d.wake_boost as i64, 0..=TS_MAX as i64)? as u8;
    Ok(Fb::new(FbConfig { quantum, quantum_step, base, wake_boost }))
}

/// The level a task blocking with this base and increment waits at (§4.1).
pub fn boosted(base: u8, boost: u8) -> u8 {
    if base >= RT_MIN {
        base
    } else {
        (base + boost).min(TS_MAX)
    }
}

#[derive(Clone, Copy, Debug)]
struct Task {
    base: u8,
    level: u8,
    /// The rest of the quantum at this level (time-sharing levels).
    left: Ns,
    wake_boost: u8,
    /// Ready order within the level: smaller is nearer the front.
    pos: i64,
}

impl Task {
    /// The ready-list key: (level, descending; ready order).
    fn key(&self) -> Key {
        (Reverse(self.level), self.pos)
    }
}

/// (level, descending; ready order).
type Key = (Reverse<u8>, i64);

/// A task's state, for inspection (tests, reports).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FbTaskInfo {
    pub base: u8,
    pub level: u8,
    /// The rest of its quantum (None at a real-time level).
    pub left: Option<Ns>,
    pub wake_boost: u8,
    pub runnable: bool,
}

/// The FB scheduler. See the module documentation.
#[derive(Debug)]
pub struct Fb {
    cfg: FbConfig,
    /// The tasks and the ready list; per CPU, the task charged quantum there.
    rq: RunQueue<Key, Task>,
    front: i64,
    back: i64,
}

impl Fb {
    pub fn new(cfg: FbConfig) -> Self {
        let cfg = FbConfig { quantum: cfg.quantum.max(1), base: cfg.base.min(MAX_LEVEL), wake_boost: cfg.wake_boost.min(TS_MAX), ..cfg };
        Fb { cfg, rq: RunQueue::new(), front: 0, back: 0 }
    }

    pub fn config(&self) -> FbConfig {
        self.cfg
    }

    pub fn task_info(&self, task: TaskId) -> Option<FbTaskInfo> {
        self.rq.get(task).map(|t| FbTaskInfo {
            base: t.base,
            level: t.level,
            left: (t.level <= TS_MAX).then_some(t.left),
            wake_boost: t.wake_boost,
            runnable: t.st != St::Blocked,
        })
    }

    /// The ready (runnable, not running) tasks, in list order (best first).
    pub fn ready(&self) -> Vec<TaskId> {
        self.rq.ready_ids()
    }

    /// Puts a task into the ready list at the front or the back of its level.
    fn enqueue(&mut self, id: TaskId, front: bool) {
        let pos = if front {
            self.front -= 1;
            self.front
        } else {
            self.back += 1;
            self.back
        };
        let Some(t) = self.rq.get_mut(id) else { return };
        t.pos = pos;
        let key = t.key();
        self.rq.enqueue(id, key, None);
    }

    /// Moves a task to `level` with a fresh quantum (keeping its ready-list place kind).
    fn set_level(&mut self, id: TaskId, level: u8) {
        let q = self.cfg.quantum(level).unwrap_or(0);
        let Some(t) = self.rq.get_mut(id) else { return };
        t.level = level;
        t.left = q;
        let key = t.key();
        self.rq.set_key(id, key);
    }

    fn check(name: &str, value: i64) -> Result<u8, String> {
        let range = match name {
            "base" => 0..=MAX_LEVEL as i64,
            "wake_boost" => 0..=TS_MAX as i64,
            _ => return Err(format!("fb has no task parameter '{name}'")),
        };
        if range.contains(&value) {
            Ok(value as u8)
        } else {
            Err(format!("fb: task parameter {name} = {value} is out of range {}..={}", range.start(), range.end()))
        }
    }
}

impl Policy for Fb {
    fn kind(&self) -> &str {
        "fb"
    }

    fn init(&mut self, ncpus: u16) {
        self.rq.init(ncpus);
    }

    fn on_attach(&mut self, _ctx: &mut Ctx, task: TaskId, info: &AttachInfo) -> Result<(), String> {
        crate::task_index(task)?;
        let parent = info.parent.and_then(|p| self.rq.get(p)).copied();
        let base = match info.params.get("base") {
            Some(&b) => Self::check("base", b)?,
            None => parent.map_or(self.cfg.base, |p| p.base),
        };
        let wake_boost = match info.params.get("wake_boost") {
            Some(&b) => Self::check("wake_boost", b)?,
            None => self.cfg.wake_boost,
        };
        let st = St::of_attach(task, info)?;
        let level = if st == St::Blocked { boosted(base, wake_boost) } else { base };
        let t = Task { base, level, left: self.cfg.quantum(level).unwrap_or(0), wake_boost, pos: 0 };
        self.rq.attach(task, st, info.guest, t)?;
        if st == St::Ready {
            self.enqueue(task, false);
        }
        Ok(())
    }

    fn on_detach(&mut self, _ctx: &mut Ctx, task: TaskId, _why: Detach) {
        self.rq.remove(task);
    }

    fn on_wake(&mut self, ctx: &mut Ctx, task: TaskId, _wake: Wake) {
        let Some(t) = self.rq.get(task).copied() else { return };
        if t.st != St::Blocked {
            return;
        }
        self.enqueue(task, false);
        // An idle CPU is the dispatcher's to kick; otherwise preempt this policy's task of
        // the lowest level, if lower than the woken one.
        if runqueue::idle_cpu_for(ctx, task) {
            return;
        }
        let aff = ctx.affinity(task);
        let mut lowest: Option<(u8, CpuId)> = None;
        for c in ctx.cpus().filter(|&c| aff.contains(c)) {
            let Some((_, ct)) = self.rq.charged_on(ctx, c) else { continue };
            if ct.st == St::Running(c) && ct.level < t.level && lowest.is_none_or(|l| ct.level < l.0) {
                lowest = Some((ct.level, c));
            }
        }
        if let Some((_, c)) = lowest {
            let _ = ctx.resched(c);
        }
    }

    fn on_block(&mut self, _ctx: &mut Ctx, task: TaskId, _block: Block) {
        let Some(t) = self.rq.get(task).copied() else { return };
        self.rq.set_state(task, St::Blocked);
        self.rq.forget_refs(task);
        // Blocking raises the level to base + the awaited event's increment (§4.1).
        self.set_level(task, boosted(t.base, t.wake_boost));
    }

    fn on_dispatch(&mut self, ctx: &mut Ctx, task: TaskId, cpu: CpuId) {
        if self.rq.dispatch(task, cpu).is_some() {
            self.rq.kick_idle_for_queue(ctx, cpu);
        }
    }

    fn on_run(&mut self, _ctx: &mut Ctx, task: TaskId, cpu: CpuId, ran: Ns) {
        if self.rq.running_on(cpu) != Some(task) {
            return;
        }
        if let Some(t) = self.rq.get_mut(task) {
            if t.level <= TS_MAX {
                t.left = t.left.saturating_sub(ran);
            }
        }
    }

    fn on_preempt(&mut self, ctx: &mut Ctx, task: TaskId, cpu: CpuId, why: Preempt) {
        let Some((t, charged)) = self.rq.preempt(task, cpu) else { return };
        let ts = t.level <= TS_MAX;
        if ts && charged && (why == Preempt::SliceExpired || t.left == 0) {
            // A full quantum used: one level down, never below base, at the back.
            let level = if t.level > t.base { t.level - 1 } else { t.level };
            self.set_level(task, level);
            self.enqueue(task, false);
        } else if why == Preempt::Yield {
            self.enqueue(task, false);
        } else {
            // Preempted by a better task: the front of its level, with the rest of its quantum.
            self.enqueue(task, true);
        }
        crate::rr::kick_idle(ctx, task, cpu);
    }

    fn on_message(&mut self, _ctx: &mut Ctx, _from: Sender, task: TaskId, req: &Request) -> Reply {
        let Request::Param { name, value } = req else {
            return Reply::refused(format!("fb does not understand {req:?}"));
        };
        let v = match Self::check(name, *value) {
            Ok(v) => v,
            Err(e) => return Reply::refused(e),
        };
        let Some(t) = self.rq.get_mut(task) else {
            return Reply::refused(format!("{task} is not scheduled by fb"));
        };
        if name == "wake_boost" {
            t.wake_boost = v;
            return Reply::Ok;
        }
        t.base = v;
        let level = if v >= RT_MIN || t.level >= RT_MIN || t.level < v { v } else { t.level };
        if level != t.level {
            self.set_level(task, level);
        }
        Reply::Ok
    }

    fn pick(&mut self, ctx: &mut Ctx, cpu: CpuId) -> Option<Decision> {
        if cpu.0 as usize >= self.rq.ncpus() {
            return None;
        }
        let id = self.rq.first_allowed(ctx, cpu, false, None, |_| true)?;
        let t = *self.rq.get(id)?;
        self.rq.pick(id, cpu);
        Some(if t.level <= TS_MAX { Decision::run(id, t.left.max(1)) } else { Decision::run_until_block(id) })
    }

    fn on_refused(&mut self, _ctx: &mut Ctx, cpu: CpuId, decision: Decision, why: Refusal) {
        let task = decision.task;
        if let Some(t) = self.rq.refused(cpu, task, why) {
            self.rq.enqueue(task, t.key(), None);
        }
    }

    /// §4.2: the ready list, highest level first (swapped-out tasks stay in it; `pick`
    /// skips them, "the first loaded process in the list"), and §4.1: tasks at real-time
    /// levels are never swapped out.
    fn swap_advice(&self) -> Option<SwapAdvice> {
        let resident = self.rq.ids().filter(|&id| self.rq.get(id).is_some_and(|t| t.level >= RT_MIN)).collect();
        Some(SwapAdvice { ready: self.rq.ready_ids(), resident })
    }
}
