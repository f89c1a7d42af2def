//! Vassal's sample real-time scheduler (paper 000 §5): a task asks to be run at a precise
//! time, and the scheduler makes it runnable exactly then with a scheduler event.
//!
//! The paper's thread (its code snippet) sends JOIN, then in a loop SET(delay): "run me
//! `delay` from now". Rules:
//! - **Join** (`on_attach`): the task is marked exclusive (`Ctx::set_exclusive`), so the
//!   default scheduler cannot run it as a guest — in particular not early. Until it asks
//!   for a time it is *eligible*: this scheduler runs it (it sits above the default).
//! - **Set { delay }** from the task (or root): the target is `now + delay`, relative to
//!   the time of the request as in the paper's `SET(300 − estimate)`. The scheduler arms
//!   a scheduler event at `target − lead` (`lead`: the paper's T_predicted, the time a
//!   wake-up takes through the critical path; default 0), the task becomes *ineligible*
//!   — `pick` never names it, and being exclusive nobody else runs it, so it waits — and
//!   if it is running its CPU is rescheduled. The reply is `Ok`.
//! - **The event** (`on_event`): the task becomes eligible and the scheduler calls
//!   `ctx.resched` on the CPU it last ran on (or its first allowed CPU), so it runs at once:
//!   the dispatcher re-queries top-down and this scheduler answers first. (The dispatcher
//!   re-queries by itself only on wake-ups and joins; after a scheduler event it is the
//!   policy's job.)
//! - **Refusals are immediate** (§5: "if it is unable to satisfy the thread's request, it
//!   informs it right away"): a delay of 0, a delay below `min_delay`, a target earlier
//!   than the task's pending one, a task that has not joined, a sender that is neither
//!   the task nor root, and — when `spin = false` — a delay shorter than the clock can
//!   resolve. A refused request changes nothing. A later target replaces a pending one.
//! - **Spinning** (§5: "if the requested time constraint cannot be met because it is very
//!   short (e.g. 200µs), we choose to spin in a loop"): a delay below `resolution` (the
//!   clock's granularity: the tick length under a tick clock, 0 with one-shot timers) or
//!   not longer than `lead` arms no event; the task simply stays eligible and keeps the
//!   CPU, busy-waiting until its target in the paper. In the simulator a task that stays
//!   eligible makes progress with its next phase at once (the engine has no busy-wait), so
//!   a spun wake-up is observed early by up to `delay`; the spin's CPU cost is not
//!   charged. With `spin = false` such requests are refused instead.
//!
//! Among eligible tasks that may run on a CPU, `pick` names the one with the earliest
//! target (tasks without one last, then by id) and lets it run until it blocks, asks for
//! a time, or is rescheduled. Eligible runnable tasks are kept ordered by that key, so a
//! decision is O(log n) (the paper's 116-line proof of concept scanned; a benchmark
//! runs every policy with 100,000 tasks).
//!
//! Parameters: `lead` (duration, default 0), `resolution` (duration, default 0),
//! `min_delay` (duration, default 0: only a zero delay is refused), `spin` (bool, default
//! true).

use vassal_core::{AttachInfo, Block, CpuId, Ctx, Decision, Detach, Ns, Policy, Preempt, Reply, Request, Sender, TaskId, TaskState, Wake};

use crate::ordered::OrderedSet;
use crate::params::Params;
use crate::task_table::{St, Tasks};

/// A joined task (its state is the table's: it is idle, runnable and not running, when `Ready`).
#[derive(Clone, Copy, Debug, Default)]
struct Entry {
    /// The time it asked to run at (the last accepted SET), if any.
    target: Option<Ns>,
    /// An event is armed for it and it is not eligible until it fires.
    waiting: bool,
    /// Its key in `ready`, if it is there.
    queued: Option<(Ns, u32)>,
}

/// Vassal's sample real-time scheduler. See the module documentation.
#[derive(Debug)]
pub struct Timed {
    lead: Ns,
    resolution: Ns,
    min_delay: Ns,
    spin: bool,
    tasks: Tasks<Entry>,
    /// Eligible (joined, not waiting), runnable, not running: by (target, task).
    ready: OrderedSet<(Ns, u32)>,
}

impl Timed {
    pub fn new(lead: Ns, resolution: Ns, min_delay: Ns, spin: bool) -> Self {
        Timed { lead, resolution, min_delay, spin, tasks: Tasks::default(), ready: OrderedSet::new() }
    }
    /// Puts the task in `ready` exactly when it is eligible and idle, under its current key.
    fn sync(&mut self, task: TaskId) {
        let Some(e) = self.tasks.get_mut(task) else { return };
        let want = (!e.waiting && e.st == St::Ready).then(|| (e.target.unwrap_or(Ns::MAX), task.0));
        if e.queued != want {
            if let Some(k) = e.queued.take() {
                self.ready.remove(&k);
            }
            if let Some(k) = want {
                self.ready.insert(k);
            }
            e.queued = want;
        }
    }
    fn set_st(&mut self, task: TaskId, st: St) {
        if let Some(e) = self.tasks.get_mut(task) {
            e.st = st;
            self.sync(task);
        }
    }
    fn entry(&self, task: TaskId) -> Option<&Entry> {
        self.tasks.get(task).map(|e| &e.data)
    }
    /// The time `task` asked to run at, if it has asked.
    pub fn target(&self, task: TaskId) -> Option<Ns> {
        self.entry(task).and_then(|e| e.target)
    }
    /// Whether `task` waits for its scheduler event (is not eligible).
    pub fn waiting(&self, task: TaskId) -> bool {
        self.entry(task).is_some_and(|e| e.waiting)
    }
    fn token(task: TaskId) -> u64 {
        task.0 as u64
    }
    fn set(&mut self, ctx: &mut Ctx, from: Sender, task: TaskId, delay: Ns) -> Reply {
        let Some(e) = self.entry(task).copied() else {
            return Reply::refused(format!("{task} has not joined this scheduler"));
        };
        if from.task != Some(task) && !from.is_root() {
            return Reply::refused(format!("only {task} itself or root may set its time"));
        }
        if delay == 0 {
            return Reply::refused("a delay of 0 cannot be met: the time is already past");
        }
        if delay < self.min_delay {
            return Reply::refused(format!("delay {delay} ns is below the minimum of {} ns", self.min_delay));
        }
        let now = ctx.now();
        let target = now.saturating_add(delay);
        if e.waiting {
            if let Some(pending) = e.target.filter(|&p| target < p) {
                return Reply::refused(format!("target {target} ns is earlier than the pending one at {pending} ns"));
            }
        }
        let spin = delay < self.resolution || delay <= self.lead;
        if spin && !self.spin {
            return Reply::refused(format!(
                "delay {delay} ns is shorter than the clock can resolve ({} ns, lead {} ns) and spinning is off",
                self.resolution, self.lead
            ));
        }
        if !spin && ctx.set_event(target - self.lead, Self::token(task)).is_err() {
            return Reply::refused("event time in the past"); // unreachable: delay > lead
        }
        let Some(e) = self.tasks.get_mut(task) else { return Reply::refused(format!("{task} has not joined this scheduler")) };
        e.target = Some(target);
        if spin {
            // Busy-wait: stays eligible, no event (see the module documentation).
            if e.waiting {
                e.waiting = false;
                ctx.cancel_event(Self::token(task));
            }
            self.sync(task);
            return Reply::Ok;
        }
        e.waiting = true;
        self.sync(task);
        if let TaskState::Running(cpu) = ctx.state(task) {
            let _ = ctx.resched(cpu);
        }
        Reply::Ok
    }
}

/// Builds a `timed` scheduler from its parameters (see the module documentation).
pub fn build(p: &mut Params) -> Result<Timed, String> {
    let lead = p.duration("lead", 0)?;
    let resolution = p.duration("resolution", 0)?;
    let min_delay = p.duration("min_delay", 0)?;
    let spin = p.bool("spin", true)?;
    Ok(Timed::new(lead, resolution, min_delay, spin))
}

impl Policy for Timed {
    fn kind(&self) -> &str {
        "timed"
    }
    /// It never uses how long a task ran (no `on_run`).
    fn accounts_runs(&self) -> bool {
        false
    }
    fn on_attach(&mut self, ctx: &mut Ctx, task: TaskId, info: &AttachInfo) -> Result<(), String> {
        crate::task_index(task)?;
        let st = St::of_attach(task, info)?;
        self.tasks.insert(task, st, Entry::default())?;
        self.sync(task);
        // Only this scheduler may run it: the default must not run it before its time.
        ctx.set_exclusive(task, true).map_err(|e| e.to_string())?;
        Ok(())
    }
    fn on_detach(&mut self, ctx: &mut Ctx, task: TaskId, _why: Detach) {
        if let Some(e) = self.tasks.remove(task) {
            if e.waiting {
                ctx.cancel_event(Self::token(task));
            }
            if let Some(k) = e.queued {
                self.ready.remove(&k);
            }
        }
    }
    fn on_wake(&mut self, _ctx: &mut Ctx, task: TaskId, _wake: Wake) {
        self.set_st(task, St::Ready);
    }
    fn on_block(&mut self, _ctx: &mut Ctx, task: TaskId, _block: Block) {
        self.set_st(task, St::Blocked);
    }
    fn on_dispatch(&mut self, _ctx: &mut Ctx, task: TaskId, cpu: CpuId) {
        self.set_st(task, St::Running(cpu));
    }
    fn on_preempt(&mut self, _ctx: &mut Ctx, task: TaskId, _cpu: CpuId, _why: Preempt) {
        self.set_st(task, St::Ready);
    }
    fn on_event(&mut self, ctx: &mut Ctx, token: u64) {
        let Ok(raw) = u32::try_from(token) else { return };
        let task = TaskId(raw);
        let Some(e) = self.tasks.get_mut(task).filter(|e| e.waiting) else { return };
        e.waiting = false;
        self.sync(task);
        let aff = ctx.affinity(task);
        let cpu = ctx.last_cpu(task).filter(|&c| aff.contains(c)).or_else(|| ctx.cpus().find(|&c| aff.contains(c)));
        if let Some(cpu) = cpu {
            let _ = ctx.resched(cpu);
        }
    }
    fn on_message(&mut self, ctx: &mut Ctx, from: Sender, task: TaskId, req: &Request) -> Reply {
        match req {
            Request::Set { delay } => self.set(ctx, from, task, *delay),
            other => Reply::refused(format!("timed does not understand {other:?}")),
        }
    }
    fn pick(&mut self, ctx: &mut Ctx, cpu: CpuId) -> Option<Decision> {
        // The earliest target first; affinity may pass over a few.
        self.ready
            .iter()
            .map(|&(_, i)| TaskId(i))
            .find(|&t| ctx.allowed(t, cpu) && ctx.state(t) == TaskState::Runnable)
            .map(Decision::run_until_block)
    }
}
