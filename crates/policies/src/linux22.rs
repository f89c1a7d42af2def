//! The Linux 2.2 / 2.3 time-sharing scheduler (SCHED_OTHER), the baseline of the BVT paper
//! (paper 001 §4: "standard Linux scheduling with default parameter settings", Linux
//! 2.3.17; and the UNIX-scheduling issue). Source: Linux 2.2 `kernel/sched.c`
//! (`schedule`, `goodness`, `reschedule_idle`), `kernel/timer.c` (`update_process_times`)
//! and `kernel/sys.c` (`sys_setpriority`).
//!
//! Rules:
//! - every task has a static `priority` in ticks (DEF_PRIORITY = 20 ticks at HZ = 100, i.e.
//!   200 ms; policy parameter `priority`) and a `counter`, the ticks it has left in this
//!   epoch. A task's `priority` comes from its task parameter `priority` (ticks, clamped
//!   to 1..=1000), else from `nice` (clamped to -20..=20) as in 2.2's sys_setpriority — nice n ≥ 0:
//!   DEF − (n·DEF + 10)/20 (at least 1); n < 0: DEF + (|n|·DEF + 10)/20 (nice 0 → 20,
//!   nice 19 → 1, nice −20 → 40 with DEF = 20) — else DEF. A task attached (created or
//!   joining) starts with counter = priority (2.2 split the parent's counter at fork; not
//!   modelled).
//! - the clock: every `tick` (policy parameter, default 10 ms — HZ = 100) the task running
//!   on each CPU has its counter decremented; at 0 the CPU is asked to reschedule
//!   (`need_resched`). The tick is this policy's own periodic scheduler event at the
//!   multiples of `tick`, so it does not depend on the machine's HZ. Time between ticks is
//!   not charged (Linux samples: a task that always sleeps before the tick runs free).
//! - goodness(p, cpu) = 0 if p.counter = 0; otherwise counter + priority, + `cpu_bonus` if
//!   p last ran on this CPU (PROC_CHANGE_PENALTY, 15 on i386; SMP only, as 2.2 compiles it
//!   only `#ifdef __SMP__`), + 1 for the task that was just running on this CPU (2.2's
//!   `p->mm == this_mm`: every task is its own process, so only `prev` shares the mm).
//! - `pick` (schedule()): `prev`, if still runnable, is considered first and the others must
//!   beat it strictly; among the others the one earliest in the run queue wins ties. A
//!   waking task is added at the front of the run queue (2.2's add_to_runqueue); a task
//!   that stays runnable keeps its place; `sched_yield` moves the task to the end and
//!   gives it goodness −1 for that one decision (SCHED_YIELD).
//! - epoch end: when the best goodness among the tasks that may run on this CPU is 0
//!   (every one of them has counter 0), *all* tasks — runnable, running elsewhere and
//!   sleeping — are recalculated counter ← counter/2 + priority, and the choice is made
//!   again. A sleeper thus accumulates up to 2·priority − 1 (39 ticks) and is favoured
//!   when it wakes: this is how 2.2 favours interactive tasks. (On SMP, as in 2.2, tasks
//!   running on other CPUs do not delay the epoch end.)
//! - wake-up (reschedule_idle): an idle CPU the task may use is left to the dispatcher,
//!   which kicks it; otherwise the CPU running one of this policy's tasks where the
//!   preemption goodness goodness(p, cpu) − goodness(running, cpu) (the running task
//!   getting its CPU and mm bonuses) is largest and positive is rescheduled. (2.2's SMP
//!   path only compared with the waker's CPU, which the simulator does not have; this is
//!   the 2.4 form.)
//! - a task blocked keeps its counter; a task preempted (counter expired, or a better task
//!   woke) stays runnable and keeps its place in the run queue.
//!
//! A guest (a task of a higher scheduler that this one hosts as the default) is charged
//! ticks only while this policy's own decision runs it.
//!
//! Cost: the runnable, not-running tasks are kept in a `BTreeSet` ordered by (goodness
//! without bonuses, run-queue position), plus one such set per CPU for the tasks that last
//! ran there (on SMP with `cpu_bonus` > 0). The best task for a CPU is the better of the
//! first allowed entry of the global set and the first allowed entry of that CPU's set
//! (+ `cpu_bonus`), compared against `prev`: O(log n) per decision, wake, block and
//! preemption (plus a walk past tasks whose affinity excludes the CPU). The epoch
//! recalculation is O(n log n) over all tasks, inherent to the algorithm (2.2 walked the
//! whole task list) — once per epoch, which lasts at least one tick per runnable task.

use std::cmp::Reverse;

use vassal_core::{
    AttachInfo, Block, CpuId, Ctx, Decision, Detach, Ns, Policy, Preempt, Refusal, Reply, Request, Sender, TaskId, TaskState, Wake, MS,
};

use crate::params::Params;
use crate::runqueue::{self, RunQueue, St, Tick};

/// The token of this policy's periodic tick event.
pub const TICK_TOKEN: u64 = 1;
/// DEF_PRIORITY of Linux 2.2 at HZ = 100: 20 ticks.
pub const DEF_PRIORITY: u32 = 20;
/// PROC_CHANGE_PENALTY of Linux 2.2 on i386.
pub const PROC_CHANGE_PENALTY: u32 = 15;
/// The largest priority (ticks) accepted.
pub const MAX_PRIORITY: i64 = 1000;

/// Scheduler-wide parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Linux22Config {
    /// Tick length (1/HZ).
    pub tick: Ns,
    /// DEF_PRIORITY, ticks: a task's priority when it has no `priority` or `nice`.
    pub priority: u32,
    /// Goodness bonus for the CPU a task last ran on (PROC_CHANGE_PENALTY; SMP only).
    pub cpu_bonus: u32,
}

impl Default for Linux22Config {
    fn default() -> Self {
        Linux22Config { tick: 10 * MS, priority: DEF_PRIORITY, cpu_bonus: PROC_CHANGE_PENALTY }
    }
}

/// Builds the policy from its scenario parameters (`tick`, `priority`, `cpu_bonus`).
pub fn build(p: &mut Params) -> Result<Linux22, String> {
    let d = Linux22Config::default();
    let tick = p.duration("tick", d.tick)?;
    if tick == 0 {
        return Err("linux22 parameter 'tick': must be greater than zero".into());
    }
    let priority = p.int("priority", d.priority as i64, 1..=MAX_PRIORITY)? as u32;
    let cpu_bonus = p.int("cpu_bonus", d.cpu_bonus as i64, 0..=MAX_PRIORITY)? as u32;
    Ok(Linux22::new(Linux22Config { tick, priority, cpu_bonus }))
}

/// 2.2's sys_setpriority: nice → priority in ticks, for a DEF_PRIORITY of `def`.
pub fn nice_to_priority(nice: i64, def: u32) -> u32 {
    let def = def as i64;
    let n = nice.clamp(-20, 20);
    let step = (n.abs() * def + 10) / 20;
    let p = if n >= 0 { def - step } else { def + step };
    p.clamp(1, MAX_PRIORITY) as u32
}

#[derive(Clone, Copy, Debug)]
struct Task {
    counter: u32,
    priority: u32,
    /// Run-queue position: smaller is nearer the front.
    pos: i64,
    last_cpu: Option<CpuId>,
}

impl Task {
    /// Goodness without the CPU and mm bonuses.
    fn base(&self) -> u32 {
        if self.counter == 0 {
            0
        } else {
            self.counter + self.priority
        }
    }

    /// The run-queue key: (goodness without bonuses, descending; run-queue position).
    fn key(&self) -> Key {
        (Reverse(self.base()), self.pos)
    }
}

/// (goodness without bonuses, descending; run-queue position).
type Key = (Reverse<u32>, i64);

/// A task's state, for inspection (tests, reports).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Linux22TaskInfo {
    pub counter: u32,
    pub priority: u32,
    pub runnable: bool,
}

/// The Linux 2.2 scheduler. See the module documentation.
#[derive(Debug)]
pub struct Linux22 {
    cfg: Linux22Config,
    /// The tasks, the run queue, and per CPU the queued tasks that last ran there (SMP
    /// with a CPU bonus only).
    rq: RunQueue<Key, Task>,
    front: i64,
    back: i64,
    /// Per CPU: the task just preempted there (prev), whether it yielded, and when.
    prev: Vec<Option<(TaskId, bool, Ns)>>,
    tick: Tick,
    epochs: u64,
}

impl Linux22 {
    pub fn new(cfg: Linux22Config) -> Self {
        Linux22 {
            cfg: Linux22Config { tick: cfg.tick.max(1), priority: cfg.priority.max(1), ..cfg },
            rq: RunQueue::new(),
            front: 0,
            back: 0,
            prev: Vec::new(),
            tick: Tick::new(cfg.tick.max(1), TICK_TOKEN),
            epochs: 0,
        }
    }

    pub fn config(&self) -> Linux22Config {
        self.cfg
    }

    /// Number of epoch recalculations so far.
    pub fn epochs(&self) -> u64 {
        self.epochs
    }

    pub fn task_info(&self, task: TaskId) -> Option<Linux22TaskInfo> {
        self.rq.get(task).map(|t| Linux22TaskInfo { counter: t.counter, priority: t.priority, runnable: !matches!(t.st, St::Blocked) })
    }

    /// Number of queued (runnable, not running) tasks.
    pub fn queued(&self) -> usize {
        self.rq.queued()
    }

    fn smp(&self) -> bool {
        self.rq.ncpus() > 1
    }

    fn use_per_cpu(&self) -> bool {
        self.smp() && self.cfg.cpu_bonus > 0
    }

    /// Puts a task into the run queue (and the set of the CPU it last ran on).
    fn enqueue(&mut self, id: TaskId) {
        let Some(t) = self.rq.get(id) else { return };
        let home = if self.use_per_cpu() { t.last_cpu } else { None };
        self.rq.enqueue(id, t.key(), home);
    }

    fn forget_prev(&mut self, id: TaskId) {
        for p in self.prev.iter_mut() {
            if p.is_some_and(|p| p.0 == id) {
                *p = None;
            }
        }
    }

    /// goodness(p, cpu) for a task other than the one just running on `cpu`.
    fn goodness(&self, t: &Task, cpu: CpuId) -> i64 {
        let b = t.base();
        if b == 0 {
            return 0;
        }
        let bonus = if self.smp() && t.last_cpu == Some(cpu) { self.cfg.cpu_bonus } else { 0 };
        (b + bonus) as i64
    }

    /// goodness of the task that is (or was just) running on `cpu`: + the mm bonus.
    fn goodness_prev(&self, t: &Task, cpu: CpuId) -> i64 {
        let g = self.goodness(t, cpu);
        if g == 0 {
            0
        } else {
            g + 1
        }
    }

    /// Epoch end: counter ← counter/2 + priority for every task; the run queue is rebuilt.
    fn recalculate(&mut self) {
        self.epochs += 1;
        for t in self.rq.slots_mut() {
            t.counter = t.counter / 2 + t.priority;
        }
        self.rq.rebuild(Task::key);
    }
}

impl Policy for Linux22 {
    fn kind(&self) -> &str {
        "linux22"
    }
    /// It never uses how long a task ran (no `on_run`).
    fn accounts_runs(&self) -> bool {
        false
    }

    fn init(&mut self, ncpus: u16) {
        self.rq.init(ncpus);
        self.prev = vec![None; self.rq.ncpus()];
    }

    fn on_attach(&mut self, ctx: &mut Ctx, task: TaskId, info: &AttachInfo) -> Result<(), String> {
        crate::task_index(task)?;
        // Out-of-range values are clamped, not refused: task parameters are shared by all
        // policies (fps reads `priority` too), and 2.2's sys_setpriority clamps nice.
        let priority = match (info.params.get("priority"), info.params.get("nice")) {
            (Some(&p), _) => p.clamp(1, MAX_PRIORITY) as u32,
            (None, Some(&n)) => nice_to_priority(n, self.cfg.priority),
            (None, None) => info.parent.and_then(|p| self.rq.get(p)).map_or(self.cfg.priority, |p| p.priority),
        };
        let st = St::of_attach(task, info)?;
        if self.rq.get(task).is_some() {
            self.forget_prev(task);
        }
        self.front -= 1;
        let t = Task { counter: priority, priority, pos: self.front, last_cpu: ctx.last_cpu(task) };
        self.rq.attach(task, st, info.guest, t)?;
        if st == St::Ready {
            self.enqueue(task);
        }
        self.tick.arm(ctx);
        Ok(())
    }

    fn on_detach(&mut self, _ctx: &mut Ctx, task: TaskId, _why: Detach) {
        if self.rq.get(task).is_some() {
            self.forget_prev(task);
        }
        self.rq.remove(task);
    }

    fn on_wake(&mut self, ctx: &mut Ctx, task: TaskId, _wake: Wake) {
        if self.rq.get(task).is_none_or(|t| t.st != St::Blocked) {
            return;
        }
        // add_to_runqueue: the front of the run queue.
        self.front -= 1;
        let pos = self.front;
        if let Some(t) = self.rq.get_mut(task) {
            t.pos = pos;
        }
        self.enqueue(task);
        // reschedule_idle: an idle CPU is the dispatcher's to kick; otherwise preempt where
        // the preemption goodness is largest and positive.
        if runqueue::idle_cpu_for(ctx, task) {
            return;
        }
        let aff = ctx.affinity(task);
        let t = self.rq.get(task).unwrap().data.data;
        let mut best: Option<(i64, CpuId)> = None;
        for c in ctx.cpus().filter(|&c| aff.contains(c)) {
            let Some((_, ct)) = self.rq.charged_on(ctx, c) else { continue };
            let diff = self.goodness(&t, c) - self.goodness_prev(ct, c);
            if diff > 0 && best.is_none_or(|b| diff > b.0) {
                best = Some((diff, c));
            }
        }
        if let Some((_, c)) = best {
            let _ = ctx.resched(c);
        }
    }

    fn on_block(&mut self, _ctx: &mut Ctx, task: TaskId, _block: Block) {
        if self.rq.get(task).is_none() {
            return;
        }
        self.rq.set_state(task, St::Blocked);
        self.rq.forget_refs(task);
    }

    fn on_dispatch(&mut self, ctx: &mut Ctx, task: TaskId, cpu: CpuId) {
        if self.rq.dispatch(task, cpu).is_none() {
            return;
        }
        self.prev[cpu.0 as usize] = None;
        if let Some(t) = self.rq.get_mut(task) {
            t.last_cpu = Some(cpu);
        }
        // Work conservation: an idle CPU while tasks wait is asked to decide.
        self.rq.kick_idle_for_queue(ctx, cpu);
    }

    fn on_preempt(&mut self, ctx: &mut Ctx, task: TaskId, cpu: CpuId, why: Preempt) {
        if self.rq.preempt(task, cpu).is_none() {
            return;
        }
        if why == Preempt::Yield {
            // sys_sched_yield: move_last_runqueue, and goodness −1 for this decision.
            self.back += 1;
            let pos = self.back;
            if let Some(t) = self.rq.get_mut(task) {
                t.pos = pos;
            }
        }
        self.enqueue(task);
        if let Some(p) = self.prev.get_mut(cpu.0 as usize) {
            *p = Some((task, why == Preempt::Yield, ctx.now()));
        }
        crate::rr::kick_idle(ctx, task, cpu);
    }

    fn on_tick(&mut self, _ctx: &mut Ctx, _cpu: CpuId) {
        // The machine's ticks are not used: this policy keeps its own tick (TICK_TOKEN), so
        // its HZ does not depend on the machine's.
    }

    fn on_event(&mut self, ctx: &mut Ctx, token: u64) {
        if !self.tick.fired(token) {
            return;
        }
        // update_process_times on every CPU: --counter; at 0, need_resched.
        for ci in 0..self.rq.ncpus() {
            let Some((_, cpu, t)) = self.rq.tick_target(ctx, ci) else { continue };
            t.counter = t.counter.saturating_sub(1);
            if t.counter == 0 {
                let _ = ctx.resched(cpu);
            }
        }
        self.tick.rearm(ctx, &self.rq);
    }

    fn on_message(&mut self, _ctx: &mut Ctx, _from: Sender, task: TaskId, req: &Request) -> Reply {
        let Request::Param { name, value } = req else {
            return Reply::refused(format!("linux22 does not understand {req:?}"));
        };
        let priority = match name.as_str() {
            "priority" if (1..=MAX_PRIORITY).contains(value) => *value as u32,
            "nice" if (-20..=20).contains(value) => nice_to_priority(*value, self.cfg.priority),
            "priority" | "nice" => return Reply::refused(format!("linux22: {name} {value} is out of range")),
            _ => return Reply::refused(format!("linux22 has no task parameter '{name}'")),
        };
        let Some(t) = self.rq.get_mut(task) else {
            return Reply::refused(format!("{task} is not scheduled by linux22"));
        };
        t.priority = priority;
        let key = t.key();
        self.rq.set_key(task, key);
        Reply::Ok
    }

    fn pick(&mut self, ctx: &mut Ctx, cpu: CpuId) -> Option<Decision> {
        let ci = cpu.0 as usize;
        if ci >= self.prev.len() {
            return None;
        }
        let now = ctx.now();
        let mut prev = self.prev[ci].take().filter(|p| p.2 == now).map(|p| (p.0, p.1));
        for _ in 0..2 {
            // prev first (still_running): the others must beat it strictly.
            let mut best: Option<(i64, TaskId)> = None;
            if let Some((p, yielded)) = prev {
                let ok = self.rq.get(p).is_some_and(|t| t.st == St::Ready) && ctx.allowed(p, cpu) && ctx.state(p) == TaskState::Runnable;
                if ok {
                    let g = if yielded { -1 } else { self.goodness_prev(self.rq.get(p).unwrap(), cpu) };
                    best = Some((g, p));
                } else {
                    prev = None;
                }
            }
            let skip = prev.map(|p| p.0);
            // The best of the others: the first allowed of the global queue (by goodness
            // without bonus, then run-queue position), or the first allowed of this CPU's
            // queue with the CPU bonus.
            let mut cands: Vec<TaskId> = Vec::with_capacity(2);
            cands.extend(self.rq.first_allowed(ctx, cpu, false, skip, |_| true));
            if self.use_per_cpu() {
                cands.extend(self.rq.first_allowed(ctx, cpu, true, skip, |_| true));
            }
            let mut other: Option<(i64, i64, TaskId)> = None;
            for id in cands {
                let t = self.rq.get(id).unwrap();
                let g = self.goodness(t, cpu);
                if other.is_none_or(|o| (g, Reverse(t.pos)) > (o.0, Reverse(o.1))) {
                    other = Some((g, t.pos, id));
                }
            }
            if let Some((g, _, id)) = other {
                if best.is_none_or(|b| g > b.0) {
                    best = Some((g, id));
                }
            }
            let (g, id) = best?;
            if g == 0 {
                // Every candidate has used its counter: a new epoch.
                self.recalculate();
                prev = prev.map(|p| (p.0, false));
                continue;
            }
            self.rq.pick(id, cpu);
            return Some(Decision::run_until_block(id));
        }
        None
    }

    fn on_refused(&mut self, _ctx: &mut Ctx, cpu: CpuId, decision: Decision, why: Refusal) {
        let task = decision.task;
        let picked = self.rq.get(task).is_some_and(|t| matches!(t.st, St::Picked(_)));
        if self.rq.refused(cpu, task, why).is_some() {
            self.enqueue(task);
        } else if picked && self.rq.get(task).is_none() {
            self.forget_prev(task);
        }
    }
}
