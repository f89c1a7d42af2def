//! The standard UNIX CPU scheduler of V6, V7 and System V (paper 004, the study of UNIX
//! CPU and swap scheduling, §2–§3), kind "unix". Where §3 is
//! silent the constants and the order of operations are those of the V6/V7 sources
//! (`clock.c`, `slp.c: setpri, setrun, swtch`, `param.h`, `tty.h`); each such rule says so.
//!
//! Rules:
//! - every task has a tick count (V7's `p_cpu`, 0..=255). The clock interrupts every
//!   `tick` (policy parameter, default 16 666 667 ns: §3's 16.7 ms, the PDP-11's 60 Hz line
//!   clock); at each tick the tick count of the task this policy is running on each CPU is
//!   incremented, up to 255 (§3). The tick is this policy's own periodic scheduler event
//!   (`TICK_TOKEN`, at the multiples of `tick`), so it does not depend on the machine's HZ.
//!   Time between ticks is not charged (UNIX samples: a task that always blocks before the
//!   tick runs free); a task dispatched at the very instant of a tick has not run and is
//!   not charged by it (on a machine whose clock delivers scheduler events only at its own
//!   ticks, wake-ups and this policy's ticks coincide systematically).
//! - once a second — at every HZ-th tick, HZ = round(1 s / tick) (60 by default), after
//!   that tick's increment, as V7's `lbolt` does (precisely: at the first tick event whose
//!   index, time / tick, reaches the next multiple of HZ, so that a late event cannot skip
//!   a second) — the tick count of *every* task (running,
//!   ready and asleep) decays (§3): V6 cpu ← max(cpu − 10, 0); V7 cpu ← cpu·4/5 + nice;
//!   S5 cpu ← cpu·3/5 + nice, clamped to 0..=255. Integer arithmetic, rounding toward zero
//!   before nice is added — exactly V7's `(p_cpu & 0377)*SCHMAG + p_nice - NZERO` with
//!   SCHMAG = 8/10 (4/5 and 3/5 are the same integer results as 8/10 and 6/10). V6's
//!   `clock.c` does not add nice in the decay; V7 and S5 do (§3: "the nice value
//!   influences the rate of decay of the tick count").
//! - user-mode priority (§3): pri = cpu / A + PUSER + nice, capped at 127 (`setpri`), with
//!   A = 16 (V6, V7) or 2 (S5) and PUSER = 100 (V6), 50 (V7), 60 (S5). Numerically lowest
//!   runs first. A user-mode priority is recomputed only at the once-a-second decay and
//!   when the task returns to user mode (V7's `setpri` calls), not at every tick: a task's
//!   priority is constant within a second.
//! - `nice` (per-task parameter or `Param` message, −20..=20, default the parent's, else
//!   0): added to the priority (all variants) and to the decayed tick count (V7, S5), so a
//!   niced task both ranks lower now and forgets its CPU use more slowly.
//! - kernel-mode priorities (§3: "a process in kernel mode has a priority determined by the
//!   event it last blocked for"): a task that blocks sleeps at its wait priority — the
//!   per-task parameter `wait_pri` (or a `Param { name: "wait_pri" }` message sent before
//!   it blocks), default the policy parameter `wait_pri`, default PRIBIO (disk). Values are
//!   in the variant's scale: V7/S5 PSWP 0, PINOD 10, PRIBIO 20, TTIPRI 28 (terminal input),
//!   TTOPRI 29 (terminal output), PWAIT 30, PSLEP 40 (S5 39); V6 PSWP −100, PRIBIO −50,
//!   TTIPRI 10, TTOPRI 20, PWAIT 40, PSLEP 90; anything from PSWP to PUSER − 1 is accepted.
//!   All are better than every user-mode priority, so a woken task runs before every
//!   user-mode task. The simulator's block carries only `voluntary`; an involuntary block
//!   sleeps at the same `wait_pri`.
//! - return to user mode: a woken task keeps its kernel priority while it waits and after
//!   it is dispatched, until its first clock tick while running (or until it yields) — the
//!   modelled system-call return path, at most one tick long. Then its user priority is
//!   recomputed from its tick count (V6/V7 trap exit `setpri`). While it runs in kernel
//!   mode it is not preempted by a wake-up (§3 preempts only a process "executing in user
//!   mode"); if a better task became ready meanwhile, it is preempted when it returns to
//!   user mode (V7's `runrun` is acted on at trap exit). If the mechanism or a higher
//!   scheduler takes its CPU while it is in kernel mode, it keeps its kernel priority and
//!   its place in the ready order. A block always sets the wait priority anew.
//! - a user-mode task that loses its CPU (a reschedule this policy asked for, or one the
//!   mechanism or a higher scheduler made) becomes ready anew at its user priority; the
//!   best ready task is picked (V7 switches only when `runrun` is set; every reschedule is
//!   treated as one).
//! - dispatching (§3): the ready task with the numerically lowest priority runs; among
//!   equal priorities the one that became ready first (V7's `swtch` takes the last of its
//!   LIFO run queue with `<=`). A task preempted or rotated becomes ready anew (V7's
//!   `qswtch`: it goes behind the tasks of its priority).
//! - preemption (§3: "a process executing in user mode is preempted if a better priority
//!   process becomes loaded and ready"): on a wake-up, the CPU (allowed to the woken task)
//!   running this policy's user-mode task of the worst priority, if strictly worse than
//!   the woken task's, is rescheduled (V7 `setrun`: `if (p_pri < curpri) runrun++`). At
//!   each decay, a CPU whose running user-mode task is now worse than a ready one is
//!   rescheduled (V7 `setpri`).
//! - rotation: every `resched_secs` seconds (at the decay tick) every CPU running a
//!   user-mode task of this policy is rescheduled, which round-robins tasks of equal
//!   priority (V7 and S5 `clock.c`: `runrun++` once a second, default 1; V6: every 4
//!   seconds, `(time[1]&03) == 0`, default 4; 0: never). The paper does not describe this.
//! - a new task starts with tick count 0 in user mode; a task attached while blocked sleeps
//!   at its wait priority.
//!
//! A guest (a task of a higher scheduler that this one hosts as the default) is charged
//! ticks only while this policy's own decision runs it.
//!
//! Cost: the ready tasks are kept in a `BTreeSet` ordered by (priority, ready order):
//! O(log n) per decision, wake, block and preemption (plus a walk past tasks whose affinity
//! excludes the CPU); a wake-up also looks at each CPU once, O(ncpus). The once-a-second
//! decay is O(n log n) over all tasks, inherent to the algorithm (§4 problem 1: "the
//! system must frequently update the tick counts and recompute the priority of each
//! process"). Decisions use no floating point.

use vassal_core::{
    AttachInfo, Block, CpuId, Ctx, Decision, Detach, Ns, Policy, Preempt, Refusal, Reply, Request, Sender, SwapAdvice, TaskId, Wake,
};

use crate::params::Params;
use crate::runqueue::{self, RunQueue, St, Tick};

/// The token of this policy's periodic clock tick.
pub const TICK_TOKEN: u64 = 1;
/// 1/60 s, §3's 16.7 ms clock interrupt (rounded to the nearest ns).
pub const DEFAULT_TICK: Ns = 16_666_667;
/// The largest tick count (§3).
pub const MAX_TICKS: u32 = 255;
/// The worst priority (`setpri` caps at 127).
pub const MAX_PRI: i32 = 127;
/// The nice range accepted.
pub const NICE_RANGE: std::ops::RangeInclusive<i64> = -20..=20;

const SECOND: Ns = 1_000_000_000;

/// Which standard UNIX.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Variant {
    V6,
    V7,
    S5,
}

impl Variant {
    pub fn parse(s: &str) -> Option<Variant> {
        match s {
            "v6" => Some(Variant::V6),
            "v7" => Some(Variant::V7),
            "s5" => Some(Variant::S5),
            _ => None,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Variant::V6 => "v6",
            Variant::V7 => "v7",
            Variant::S5 => "s5",
        }
    }
    /// PUSER: the best user-mode priority, worse than every kernel-mode one.
    pub fn puser(self) -> i32 {
        match self {
            Variant::V6 => 100,
            Variant::V7 => 50,
            Variant::S5 => 60,
        }
    }
    /// PSWP: the best kernel-mode priority.
    pub fn pswp(self) -> i32 {
        match self {
            Variant::V6 => -100,
            _ => 0,
        }
    }
    /// PRIBIO: the priority of a task asleep on disk I/O (the default wait priority).
    pub fn pribio(self) -> i32 {
        match self {
            Variant::V6 => -50,
            _ => 20,
        }
    }
    /// TTIPRI: asleep on terminal input.
    pub fn ttipri(self) -> i32 {
        match self {
            Variant::V6 => 10,
            _ => 28,
        }
    }
    /// TTOPRI: asleep on terminal output.
    pub fn ttopri(self) -> i32 {
        match self {
            Variant::V6 => 20,
            _ => 29,
        }
    }
    /// The divisor A of §3's priority formula.
    pub fn divisor(self) -> u32 {
        match self {
            Variant::S5 => 2,
            _ => 16,
        }
    }
    /// The default rotation period in seconds (`runrun++` in `clock.c`).
    pub fn resched_secs(self) -> u32 {
        match self {
            Variant::V6 => 4,
            _ => 1,
        }
    }
    /// The once-a-second decay of a tick count.
    pub fn decay(self, cpu: u32, nice: i32) -> u32 {
        let c = cpu.min(MAX_TICKS) as i64;
        let d = match self {
            Variant::V6 => c - 10,
            Variant::V7 => c * 4 / 5 + nice as i64,
            Variant::S5 => c * 3 / 5 + nice as i64,
        };
        d.clamp(0, MAX_TICKS as i64) as u32
    }
    /// The user-mode priority for a tick count and nice value (`setpri`).
    pub fn user_pri(self, cpu: u32, nice: i32) -> i32 {
        let p = (cpu.min(MAX_TICKS) / self.divisor()) as i32 + self.puser() + nice;
        p.min(MAX_PRI)
    }
    /// The wait priorities accepted: PSWP ..= PUSER − 1.
    pub fn wait_range(self) -> std::ops::RangeInclusive<i64> {
        self.pswp() as i64..=(self.puser() - 1) as i64
    }
}

/// Scheduler-wide parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UnixConfig {
    pub variant: Variant,
    /// The clock interrupt period.
    pub tick: Ns,
    /// The wait priority of a task without a `wait_pri` of its own.
    pub wait_pri: i32,
    /// Every this many seconds the running user-mode tasks are rescheduled (0: never).
    pub resched_secs: u32,
}

impl UnixConfig {
    pub fn new(variant: Variant) -> Self {
        UnixConfig { variant, tick: DEFAULT_TICK, wait_pri: variant.pribio(), resched_secs: variant.resched_secs() }
    }
    /// Ticks per second: round(1 s / tick), at least 1.
    pub fn hz(&self) -> u64 {
        ((SECOND + self.tick / 2) / self.tick.max(1)).max(1)
    }
}

impl Default for UnixConfig {
    fn default() -> Self {
        UnixConfig::new(Variant::V7)
    }
}

/// Builds the policy from its scenario parameters (`variant`, `tick`, `wait_pri`,
/// `resched_secs`).
pub fn build(p: &mut Params) -> Result<Unix, String> {
    let v = p.choice("variant", "v7", &["v6", "v7", "s5"])?;
    let variant = Variant::parse(&v).unwrap_or(Variant::V7);
    let d = UnixConfig::new(variant);
    let tick = p.duration("tick", d.tick)?;
    if tick == 0 {
        return Err("unix parameter 'tick': must be greater than zero".into());
    }
    let wait_pri = p.int("wait_pri", d.wait_pri as i64, variant.wait_range())? as i32;
    let resched_secs = p.int("resched_secs", d.resched_secs as i64, 0..=3600)? as u32;
    Ok(Unix::new(UnixConfig { variant, tick, wait_pri, resched_secs }))
}

#[derive(Clone, Copy, Debug)]
struct Task {
    /// The tick count (`p_cpu`).
    cpu: u32,
    nice: i32,
    /// The current priority (`p_pri`): a kernel-mode one while `kernel`.
    pri: i32,
    kernel: bool,
    /// The priority it sleeps at when it next blocks.
    wait_pri: i32,
    /// Ready order: smaller became ready earlier.
    seq: u64,
}

impl Task {
    /// The ready-set key: (priority, ready order).
    fn key(&self) -> Key {
        (self.pri, self.seq)
    }
}

/// (priority, ready order).
type Key = (i32, u64);

/// A task's state, for inspection (tests, reports).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UnixTaskInfo {
    /// The tick count.
    pub ticks: u32,
    pub nice: i32,
    pub pri: i32,
    /// True while `pri` is a kernel-mode priority.
    pub kernel: bool,
    pub wait_pri: i32,
    pub runnable: bool,
}

/// The standard UNIX scheduler. See the module documentation.
#[derive(Debug)]
pub struct Unix {
    cfg: UnixConfig,
    hz: u64,
    rq: RunQueue<Key, Task>,
    seq: u64,
    /// Per CPU: when the task charged there was dispatched.
    since: Vec<Ns>,
    /// The index (time / tick) of the last tick handled.
    last_tick: u64,
    tick: Tick,
    decays: u64,
}

impl Unix {
    pub fn new(cfg: UnixConfig) -> Self {
        let cfg = UnixConfig { tick: cfg.tick.max(1), ..cfg };
        Unix {
            hz: cfg.hz(),
            cfg,
            rq: RunQueue::new(),
            seq: 0,
            since: Vec::new(),
            last_tick: 0,
            tick: Tick::new(cfg.tick, TICK_TOKEN),
            decays: 0,
        }
    }

    pub fn config(&self) -> UnixConfig {
        self.cfg
    }

    /// Number of once-a-second decays so far.
    pub fn decays(&self) -> u64 {
        self.decays
    }

    pub fn task_info(&self, task: TaskId) -> Option<UnixTaskInfo> {
        self.rq.get(task).map(|t| UnixTaskInfo {
            ticks: t.cpu,
            nice: t.nice,
            pri: t.pri,
            kernel: t.kernel,
            wait_pri: t.wait_pri,
            runnable: t.st != St::Blocked,
        })
    }

    /// The ready (runnable, not running) tasks, best first.
    pub fn ready(&self) -> Vec<TaskId> {
        self.rq.ready_ids()
    }

    /// Makes a task ready anew: behind the ready tasks of its priority.
    fn enqueue(&mut self, id: TaskId) {
        self.seq += 1;
        let seq = self.seq;
        let Some(t) = self.rq.get_mut(id) else { return };
        t.seq = seq;
        let key = t.key();
        self.rq.enqueue(id, key, None);
    }

    /// Changes a task's priority, keeping its place in the ready order.
    fn set_pri(&mut self, id: TaskId, pri: i32, kernel: bool) {
        let Some(t) = self.rq.get_mut(id) else { return };
        t.pri = pri;
        t.kernel = kernel;
        let key = t.key();
        self.rq.set_key(id, key);
    }

    /// The task returns to user mode: its priority is recomputed from its tick count.
    fn return_to_user(&mut self, id: TaskId) {
        if let Some(t) = self.rq.get(id).copied() {
            if t.kernel {
                self.set_pri(id, self.cfg.variant.user_pri(t.cpu, t.nice), false);
            }
        }
    }

    /// The first ready task that may run on `cpu` with a priority strictly better than
    /// `better_than` (if given); stale entries are repaired on the way.
    fn first_allowed(&mut self, ctx: &Ctx, cpu: CpuId, better_than: Option<i32>) -> Option<TaskId> {
        self.rq.first_allowed(ctx, cpu, false, None, |k| better_than.is_none_or(|b| k.0 < b))
    }

    /// The task of this policy running in user mode on `cpu`, with its priority.
    fn running_user(&self, ctx: &Ctx, cpu: CpuId) -> Option<(TaskId, i32)> {
        let (id, t) = self.rq.charged_on(ctx, cpu)?;
        (t.st == St::Running(cpu) && !t.kernel).then_some((id, t.pri))
    }

    /// The once-a-second decay of every task's tick count, and the recomputation of the
    /// user-mode priorities.
    fn decay(&mut self) {
        self.decays += 1;
        let v = self.cfg.variant;
        for t in self.rq.slots_mut() {
            t.cpu = v.decay(t.cpu, t.nice);
            if !t.kernel {
                t.pri = v.user_pri(t.cpu, t.nice);
            }
        }
        self.rq.rebuild(Task::key);
    }

    fn param(&self, name: &str, value: i64) -> Result<(), String> {
        let ok = match name {
            "nice" => NICE_RANGE.contains(&value),
            "wait_pri" => self.cfg.variant.wait_range().contains(&value),
            _ => return Err(format!("unix has no task parameter '{name}'")),
        };
        if ok {
            Ok(())
        } else {
            let r = if name == "nice" { NICE_RANGE } else { self.cfg.variant.wait_range() };
            Err(format!("unix ({}): task parameter {name} = {value} is out of range {}..={}", self.cfg.variant.name(), r.start(), r.end()))
        }
    }
}

impl Policy for Unix {
    fn kind(&self) -> &str {
        "unix"
    }
    /// It never uses how long a task ran (no `on_run`).
    fn accounts_runs(&self) -> bool {
        false
    }

    fn init(&mut self, ncpus: u16) {
        self.rq.init(ncpus);
        self.since = vec![0; self.rq.ncpus()];
    }

    fn on_attach(&mut self, ctx: &mut Ctx, task: TaskId, info: &AttachInfo) -> Result<(), String> {
        crate::task_index(task)?;
        let parent = info.parent.and_then(|p| self.rq.get(p)).copied();
        let nice = match info.params.get("nice") {
            Some(&n) => {
                self.param("nice", n)?;
                n as i32
            }
            None => parent.map_or(0, |p| p.nice),
        };
        let wait_pri = match info.params.get("wait_pri") {
            Some(&w) => {
                self.param("wait_pri", w)?;
                w as i32
            }
            None => self.cfg.wait_pri,
        };
        let st = St::of_attach(task, info)?;
        let asleep = st == St::Blocked;
        let t = Task {
            cpu: 0,
            nice,
            pri: if asleep { wait_pri } else { self.cfg.variant.user_pri(0, nice) },
            kernel: asleep,
            wait_pri,
            seq: 0,
        };
        self.rq.attach(task, st, info.guest, t)?;
        if st == St::Ready {
            self.enqueue(task);
        }
        self.tick.arm(ctx);
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
        // setrun: ready at the priority it slept at (a kernel-mode priority).
        self.enqueue(task);
        // An idle CPU is the dispatcher's to kick; otherwise preempt the worst user-mode
        // task of this policy that is strictly worse than the woken one.
        if runqueue::idle_cpu_for(ctx, task) {
            return;
        }
        let aff = ctx.affinity(task);
        let pri = t.pri;
        let mut worst: Option<(i32, CpuId)> = None;
        for c in ctx.cpus().filter(|&c| aff.contains(c)) {
            if let Some((_, p)) = self.running_user(ctx, c) {
                if p > pri && worst.is_none_or(|w| p > w.0) {
                    worst = Some((p, c));
                }
            }
        }
        if let Some((_, c)) = worst {
            let _ = ctx.resched(c);
        }
    }

    fn on_block(&mut self, _ctx: &mut Ctx, task: TaskId, _block: Block) {
        let Some(t) = self.rq.get(task).copied() else { return };
        self.rq.set_state(task, St::Blocked);
        // sleep(chan, pri): it sleeps at its wait priority.
        if let Some(tm) = self.rq.get_mut(task) {
            tm.pri = t.wait_pri;
            tm.kernel = true;
        }
        self.rq.forget_refs(task);
    }

    fn on_dispatch(&mut self, ctx: &mut Ctx, task: TaskId, cpu: CpuId) {
        let Some(charged) = self.rq.dispatch(task, cpu) else { return };
        if charged {
            self.since[cpu.0 as usize] = ctx.now();
        }
        self.rq.kick_idle_for_queue(ctx, cpu);
    }

    fn on_preempt(&mut self, ctx: &mut Ctx, task: TaskId, cpu: CpuId, why: Preempt) {
        let Some((t, _)) = self.rq.preempt(task, cpu) else { return };
        if t.kernel && why != Preempt::Yield {
            // A task in kernel mode is not preempted (§3 preempts only user mode): a
            // reschedule asked by the mechanism or a higher scheduler leaves it its kernel
            // priority and its place in the ready order.
            self.rq.enqueue(task, t.key(), None);
        } else {
            // It leaves the CPU through user mode (trap exit: setpri), and qswtch makes it
            // ready anew, behind the tasks of its priority.
            self.return_to_user(task);
            self.enqueue(task);
        }
        crate::rr::kick_idle(ctx, task, cpu);
    }

    fn on_event(&mut self, ctx: &mut Ctx, token: u64) {
        if !self.tick.fired(token) {
            return;
        }
        // The clock interrupt on every CPU: ++p_cpu (at most 255) for the running task; a
        // task woken into kernel mode returns to user mode at its first tick, and is
        // preempted then if a better task became ready meanwhile.
        for ci in 0..self.rq.ncpus() {
            let Some((id, cpu, t)) = self.rq.tick_target(ctx, ci) else { continue };
            if self.since[ci] == ctx.now() {
                // Dispatched at this very instant: it has not run, so it is not charged.
                continue;
            }
            t.cpu = (t.cpu + 1).min(MAX_TICKS);
            let kernel = t.kernel;
            if kernel {
                self.return_to_user(id);
                let pri = self.rq.get(id).map_or(MAX_PRI, |t| t.pri);
                if self.first_allowed(ctx, cpu, Some(pri)).is_some() {
                    let _ = ctx.resched(cpu);
                }
            }
        }
        // A second has passed when the tick index crossed a multiple of HZ (a late event —
        // a machine whose clock delivers scheduler events only at its own ticks — may skip
        // an index; the decay is not skipped with it).
        let index = ctx.now() / self.cfg.tick;
        let crossed = index / self.hz > self.last_tick / self.hz;
        self.last_tick = self.last_tick.max(index);
        if crossed {
            self.decay();
            let secs = index / self.hz;
            let rotate = self.cfg.resched_secs > 0 && secs.is_multiple_of(self.cfg.resched_secs as u64);
            for c in 0..self.rq.ncpus() {
                let cpu = CpuId(c as u16);
                let Some((_, pri)) = self.running_user(ctx, cpu) else { continue };
                if rotate || self.first_allowed(ctx, cpu, Some(pri)).is_some() {
                    let _ = ctx.resched(cpu);
                }
            }
        }
        self.tick.rearm(ctx, &self.rq);
    }

    fn on_message(&mut self, _ctx: &mut Ctx, _from: Sender, task: TaskId, req: &Request) -> Reply {
        let Request::Param { name, value } = req else {
            return Reply::refused(format!("unix does not understand {req:?}"));
        };
        if let Err(e) = self.param(name, *value) {
            return Reply::refused(e);
        }
        let Some(t) = self.rq.get(task).copied() else {
            return Reply::refused(format!("{task} is not scheduled by unix"));
        };
        match name.as_str() {
            "nice" => {
                let nice = *value as i32;
                if let Some(tm) = self.rq.get_mut(task) {
                    tm.nice = nice;
                }
                // A user-mode priority follows at once (V7's nice(2) calls no setpri; the
                // change would otherwise wait for the next decay).
                if !t.kernel {
                    self.set_pri(task, self.cfg.variant.user_pri(t.cpu, nice), false);
                }
            }
            _ => {
                if let Some(tm) = self.rq.get_mut(task) {
                    tm.wait_pri = *value as i32;
                }
            }
        }
        Reply::Ok
    }

    fn pick(&mut self, ctx: &mut Ctx, cpu: CpuId) -> Option<Decision> {
        if cpu.0 as usize >= self.rq.ncpus() {
            return None;
        }
        let id = self.first_allowed(ctx, cpu, None)?;
        self.rq.pick(id, cpu);
        Some(Decision::run_until_block(id))
    }

    /// Paper 004 §3 notes the standard swap-in decision ignores the CPU priority; the
    /// ready order (best priority first, swapped-out tasks included — `pick` skips them
    /// as `swtch` looks for "the loaded, ready process with the best priority") is given
    /// so that a priority swap-in strategy can be paired with this scheduler too. No
    /// task is pinned in memory.
    fn swap_advice(&self) -> Option<SwapAdvice> {
        Some(SwapAdvice { ready: self.ready(), resident: Vec::new() })
    }

    fn on_refused(&mut self, _ctx: &mut Ctx, cpu: CpuId, decision: Decision, why: Refusal) {
        let task = decision.task;
        if let Some(t) = self.rq.refused(cpu, task, why) {
            // Back to its place in the ready order.
            self.rq.enqueue(task, t.key(), None);
        }
    }
}
