//! The policy interface: what a scheduler is told, and the one question it answers.
//!
//! A policy is a state machine (docs/design.md, "Policy is separate from mechanism"). The mechanism — the
//! simulator or the Linux agent — tells it what happened through the `on_*` callbacks
//! and asks it [`Policy::pick`]: "which task should run on this CPU next, and for how
//! long?" It may answer "no opinion" (`None`), and the dispatcher asks the next scheduler
//! down the hierarchy (Vassal, paper 000 §3–4: the decision_maker returns a thread or
//! NULL). Every callback but `pick` is optional, as in sched_ext.
//!
//! Who calls what, and when (all calls come from the [`crate::Dispatcher`]):
//! - `on_attach` / `on_detach`: a task joined / left this scheduler (or exited). A task
//!   is owned by exactly one scheduler. The default (bottom) scheduler may also hold a
//!   task as a *guest* (see [`AttachInfo::guest`]).
//! - `on_wake`: a blocked task became runnable. `on_block`: a task stopped being runnable.
//! - `on_dispatch`: the task now runs on `cpu` (it was picked, or handed off to). Not
//!   called for a decision of the policy's own `pick` when its
//!   [`Policy::dispatches_in_pick`] is true.
//! - `on_preempt`: the task stopped running on `cpu` but is still runnable (slice over,
//!   reschedule, yield). It is always called *before* `pick` for that CPU, like Linux's
//!   put_prev_task, so the policy can requeue the task and may pick it again.
//! - `on_run`: accounting — the task ran `ran` ns on `cpu` (called before `on_preempt`/
//!   `on_block`, and whenever the mechanism settles accounts). Only for policies whose
//!   [`Policy::accounts_runs`] is true (the default).
//! - `on_tick`: a clock tick on `cpu` (both clock models deliver ticks when HZ > 0).
//! - `on_event`: a scheduler event this policy armed with [`Ctx::set_event`] fired
//!   (Vassal's SetSchedulerEvent). The dispatcher then offers idle CPUs a decision.
//! - `on_message`: a task sent this scheduler a request (Vassal's MessageToScheduler).
//! - `on_refused`: the dispatcher refused a decision (see [`Refusal`]); the task did not run.
//!
//! A policy never reads a clock ([`Ctx::now`] is the time it is told), never blocks and
//! makes no syscall. Time is integer nanoseconds; decisions use no floating point.

use std::collections::BTreeMap;

use crate::ids::{CpuId, CpuSet, SchedId, TaskId};
pub use crate::request::{Reply, Request};
use crate::time::Ns;

/// The answer to `pick`: run `task` on this CPU; ask again after `slice` ns at the latest
/// (`None`: until it blocks, yields, or a reschedule is requested).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decision {
    pub task: TaskId,
    pub slice: Option<Ns>,
}

impl Decision {
    pub fn run(task: TaskId, slice: Ns) -> Self {
        Decision { task, slice: Some(slice) }
    }
    pub fn run_until_block(task: TaskId) -> Self {
        Decision { task, slice: None }
    }
}

/// Why the dispatcher refused a decision. The policy is told through `on_refused`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// No such task, or it has exited.
    NoSuchTask,
    /// The task belongs to another scheduler (and this one is not its default-scheduler host).
    NotYours,
    /// The task is blocked.
    NotRunnable,
    /// The task is running on another CPU.
    RunningElsewhere(CpuId),
    /// The task's affinity does not include this CPU.
    NotAllowed,
    /// A slice of zero length.
    ZeroSlice,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::NoSuchTask => write!(f, "no such task"),
            Refusal::NotYours => write!(f, "task belongs to another scheduler"),
            Refusal::NotRunnable => write!(f, "task is not runnable"),
            Refusal::RunningElsewhere(c) => write!(f, "task is already running on {c}"),
            Refusal::NotAllowed => write!(f, "task may not run on this CPU"),
            Refusal::ZeroSlice => write!(f, "slice of zero length"),
        }
    }
}

/// How a blocked task became runnable.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Wake {
    /// Its sleep was voluntary (it waited for I/O, a timer, input). False for an
    /// involuntary block such as a page fault (BVT §2.2 treats the two differently).
    pub voluntary: bool,
    /// Woken by an interrupt on this vector (Go! §4: an interrupt handler thread).
    pub interrupt: Option<u32>,
    /// The wake-up is flagged for low-latency dispatch (BVT's SA_BVT_WARP analogue).
    pub warp: bool,
    /// The CPU the task is already running on: set by a mechanism whose kernel starts a
    /// woken task before the dispatcher hears of the wake (the Linux agent's *armed*
    /// tasks, docs/agent.md). A policy choosing which CPU to preempt for it may prefer
    /// this one, so the task need not be moved. None in the simulator.
    pub cpu: Option<CpuId>,
}

/// A job of a task (docs/jobs.md): the unit of work a real-time workload releases, with
/// its release time and absolute deadline — SCHED_DEADLINE's job, paper 002's per-period
/// reservation. Told by a mechanism whose workload knows its jobs (the simulator's
/// periodic tasks, player frames, registered behaviours' jobs); never by the Linux agent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Job {
    pub release: Ns,
    /// Absolute deadline.
    pub deadline: Ns,
}

/// How a task stopped being runnable.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Block {
    /// Voluntary sleep (I/O, timer, input) versus an involuntary block (page fault).
    pub voluntary: bool,
}

/// Why a running task stopped running while still runnable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Preempt {
    /// The slice the policy gave it ran out.
    SliceExpired,
    /// A scheduler asked for a new decision on this CPU ([`Ctx::resched`]), or the
    /// hierarchy changed.
    Resched,
    /// The task yielded the CPU.
    Yield,
}

/// Why a task left a scheduler.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Detach {
    /// The task exited.
    Exit,
    /// The task joined another scheduler or left this one.
    Moved,
    /// This scheduler is being unregistered (its tasks return to the default scheduler),
    /// or the task became exclusive to its owner (a guest leaves the default scheduler).
    Released,
}

/// The state of a task as the dispatcher sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TaskState {
    Runnable,
    Running(CpuId),
    Blocked,
    Dead,
}

impl TaskState {
    pub fn is_runnable(self) -> bool {
        matches!(self, TaskState::Runnable | TaskState::Running(_))
    }
}

/// Per-task scheduling parameters, by name (e.g. "priority", "weight", "quantum" in ns,
/// "warp"). Policies read the ones they know; the scenario or client supplies them.
pub type TaskParams = BTreeMap<String, i64>;

/// What a policy learns about a task when it is attached.
#[derive(Clone, Debug)]
pub struct AttachInfo<'a> {
    pub state: TaskState,
    pub params: &'a TaskParams,
    pub affinity: CpuSet,
    /// The task that created this one, for "a new task inherits its parent's parameters".
    pub parent: Option<TaskId>,
    /// True when the default scheduler is given a task owned by a higher scheduler that
    /// has not marked it exclusive: the default may run it when its owner has no
    /// opinion (Vassal §3: "a thread not selected by the sample scheduler can typically
    /// still be selected by the default scheduler").
    pub guest: bool,
}

/// Who sent a message: for ownership checks (only a reservation's owner or root, ...).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sender {
    pub task: Option<TaskId>,
    pub uid: u32,
}

impl Sender {
    pub const ROOT: Sender = Sender { task: None, uid: 0 };
    pub fn is_root(&self) -> bool {
        self.uid == 0
    }
}

/// Something a policy asked the mechanism to do, carried out after the callback returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Effect {
    /// Call `on_event(token)` of `sched` at time `at` (Vassal's SetSchedulerEvent). A new
    /// event with the same token replaces the old one.
    SetEvent { sched: SchedId, token: u64, at: Ns },
    /// Cancel the event with this token (CancelSchedulerEvent).
    CancelEvent { sched: SchedId, token: u64 },
    /// Make a new decision on this CPU now (preemption).
    Resched(CpuId),
}

/// An error a policy can get back from the mechanism.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CtxError {
    #[error("event time {at} ns is in the past (now {now} ns)")]
    EventInPast { at: Ns, now: Ns },
    #[error("no such CPU {0}")]
    NoSuchCpu(CpuId),
    #[error("{0} is not owned by this scheduler")]
    NotYours(TaskId),
}

/// What a policy may see and do during a callback.
pub struct Ctx<'a> {
    pub(crate) now: Ns,
    pub(crate) ncpus: u16,
    pub(crate) sched: SchedId,
    pub(crate) effects: &'a mut Vec<Effect>,
    pub(crate) exclusive: &'a mut Vec<(TaskId, bool)>,
    pub(crate) view: View<'a>,
}

/// What a context reads tasks from: the dispatcher's own table, called directly (a
/// policy reads it in nearly every callback, and this spares a virtual call each time),
/// or any other [`TaskView`] (tests, benchmarks, policies that wrap a view).
#[derive(Clone, Copy)]
pub(crate) enum View<'a> {
    Dispatcher(&'a crate::hierarchy::Tasks),
    Other(&'a dyn TaskView),
}

/// Reads through a [`View`]: the same call on either kind.
macro_rules! read {
    ($view:expr, $f:ident($arg:expr)) => {
        match $view {
            View::Dispatcher(t) => t.$f($arg),
            View::Other(v) => v.$f($arg),
        }
    };
}

/// Read-only facts about tasks that a policy may consult.
pub trait TaskView {
    fn state(&self, task: TaskId) -> TaskState;
    fn affinity(&self, task: TaskId) -> CpuSet;
    fn owner(&self, task: TaskId) -> Option<SchedId>;
    fn last_cpu(&self, task: TaskId) -> Option<CpuId>;
    fn running_on(&self, cpu: CpuId) -> Option<TaskId>;
}

impl<'a> Ctx<'a> {
    /// Builds a context over caller-owned buffers: for mechanisms that drive a policy
    /// directly (tests, benchmarks, loaded-module hosts).
    #[inline]
    pub fn new(
        now: Ns,
        ncpus: u16,
        sched: SchedId,
        effects: &'a mut Vec<Effect>,
        exclusive: &'a mut Vec<(TaskId, bool)>,
        view: &'a dyn TaskView,
    ) -> Self {
        Ctx { now, ncpus, sched, effects, exclusive, view: View::Other(view) }
    }
    /// The current time, as told by the mechanism.
    #[inline]
    pub fn now(&self) -> Ns {
        self.now
    }
    #[inline]
    pub fn ncpus(&self) -> u16 {
        self.ncpus
    }
    #[inline]
    pub fn cpus(&self) -> impl Iterator<Item = CpuId> {
        (0..self.ncpus).map(CpuId)
    }
    /// This scheduler's id.
    #[inline]
    pub fn sched(&self) -> SchedId {
        self.sched
    }
    /// Arms a scheduler event: `on_event(token)` is called at `at` (>= now). Re-arming a
    /// token moves it. Scheduling an event in the past is an error, never a silent clamp.
    #[inline]
    pub fn set_event(&mut self, at: Ns, token: u64) -> Result<(), CtxError> {
        if at < self.now {
            return Err(CtxError::EventInPast { at, now: self.now });
        }
        self.effects.push(Effect::SetEvent { sched: self.sched, token, at });
        Ok(())
    }
    #[inline]
    pub fn cancel_event(&mut self, token: u64) {
        self.effects.push(Effect::CancelEvent { sched: self.sched, token });
    }
    /// Asks for a new decision on `cpu` (e.g. a better task woke up).
    #[inline]
    pub fn resched(&mut self, cpu: CpuId) -> Result<(), CtxError> {
        if cpu.0 >= self.ncpus {
            return Err(CtxError::NoSuchCpu(cpu));
        }
        self.effects.push(Effect::Resched(cpu));
        Ok(())
    }
    /// Marks a task this scheduler owns as exclusively its own (no lower scheduler may
    /// run it), or releases it to be run by the default scheduler when this one has no
    /// opinion. Tasks start non-exclusive.
    #[inline]
    pub fn set_exclusive(&mut self, task: TaskId, exclusive: bool) -> Result<(), CtxError> {
        if read!(self.view, owner(task)) != Some(self.sched) {
            return Err(CtxError::NotYours(task));
        }
        self.exclusive.push((task, exclusive));
        Ok(())
    }
    #[inline]
    pub fn state(&self, task: TaskId) -> TaskState {
        read!(self.view, state(task))
    }
    #[inline]
    pub fn allowed(&self, task: TaskId, cpu: CpuId) -> bool {
        read!(self.view, affinity(task)).contains(cpu)
    }
    #[inline]
    pub fn affinity(&self, task: TaskId) -> CpuSet {
        read!(self.view, affinity(task))
    }
    #[inline]
    pub fn last_cpu(&self, task: TaskId) -> Option<CpuId> {
        read!(self.view, last_cpu(task))
    }
    /// The scheduler that owns `task` (None: no such live task).
    #[inline]
    pub fn owner(&self, task: TaskId) -> Option<SchedId> {
        read!(self.view, owner(task))
    }
    /// The task running on `cpu`, whoever owns it.
    #[inline]
    pub fn running_on(&self, cpu: CpuId) -> Option<TaskId> {
        read!(self.view, running_on(cpu))
    }
}

/// A scheduling policy. See the module documentation for who calls what.
pub trait Policy: Send {
    /// The policy's kind, e.g. "rr", "fps", "bvt".
    fn kind(&self) -> &str;

    /// Called once, before any other callback, when the scheduler is given to the
    /// dispatcher (the default scheduler by [`crate::Dispatcher::new`], the others by
    /// [`crate::Dispatcher::register`]), like sched_ext's `init`: the policy sizes its
    /// per-CPU state for the machine's `ncpus` CPUs here, once.
    fn init(&mut self, _ncpus: u16) {}

    /// A task joined this scheduler. Refusing (admission control) leaves it where it was.
    fn on_attach(&mut self, _ctx: &mut Ctx, _task: TaskId, _info: &AttachInfo) -> Result<(), String> {
        Ok(())
    }
    fn on_detach(&mut self, _ctx: &mut Ctx, _task: TaskId, _why: Detach) {}
    fn on_wake(&mut self, _ctx: &mut Ctx, _task: TaskId, _wake: Wake) {}
    /// `task` starts a new job (its previous one, if any, has just ended). For a blocked
    /// task this comes just before the wake that starts the job; for a runnable or
    /// running one, the task went straight on from one job to the next (its next job was
    /// already released: a late or backlogged task). Only mechanisms that know their
    /// workload's jobs call it (docs/jobs.md).
    fn on_job(&mut self, _ctx: &mut Ctx, _task: TaskId, _job: Job) {}
    fn on_block(&mut self, _ctx: &mut Ctx, _task: TaskId, _block: Block) {}
    fn on_dispatch(&mut self, _ctx: &mut Ctx, _task: TaskId, _cpu: CpuId) {}
    fn on_preempt(&mut self, _ctx: &mut Ctx, _task: TaskId, _cpu: CpuId, _why: Preempt) {}
    fn on_run(&mut self, _ctx: &mut Ctx, _task: TaskId, _cpu: CpuId, _ran: Ns) {}
    /// Whether this policy uses `on_run`, asked once when it is given to the dispatcher.
    /// While no registered policy does, the dispatcher sends no `on_run` and the
    /// mechanism need not account the running tasks before a wake-up (the simulator
    /// skips that work: issue 16). A policy that ignores how long its tasks ran (EDF,
    /// fixed priorities without a quantum) says false.
    fn accounts_runs(&self) -> bool {
        true
    }
    /// Whether an accepted decision of this policy's own `pick` is its dispatch, asked
    /// once when the policy is given to the dispatcher. If true, the dispatcher does not
    /// call `on_dispatch` for it: the policy took the task as running on the CPU when it
    /// picked it, and a refused decision comes back through `on_refused` as always (the
    /// policy undoes the dispatch there). A dispatch it did not pick (a hand-off, a guest
    /// its owner picked) still gets `on_dispatch`, and an `on_dispatch` for a task the
    /// policy already runs there must change nothing (a wrapper such as
    /// [`crate::Shared`] may not pass this answer on). One call into the policy fewer
    /// per decision: `edf`, `fps`, `rr` and `wrr` say true (docs/bench.md, eighteenth
    /// round).
    fn dispatches_in_pick(&self) -> bool {
        false
    }
    fn on_tick(&mut self, _ctx: &mut Ctx, _cpu: CpuId) {}
    fn on_event(&mut self, _ctx: &mut Ctx, _token: u64) {}
    fn on_message(&mut self, _ctx: &mut Ctx, _from: Sender, _task: TaskId, req: &Request) -> Reply {
        Reply::refused(format!("{} does not understand {req:?}", self.kind()))
    }
    /// Which task should run on `cpu` next, and for how long — or `None`, no opinion.
    fn pick(&mut self, ctx: &mut Ctx, cpu: CpuId) -> Option<Decision>;
    fn on_refused(&mut self, _ctx: &mut Ctx, _cpu: CpuId, _decision: Decision, _why: Refusal) {}
    /// Memory scheduling (paper 004 §4.2, priority swap-in): the tasks this policy holds
    /// ready — runnable and not running, *including those whose images are swapped out*
    /// (which it cannot dispatch: a swapped-out task is allowed on no CPU) — in its ready
    /// order, best first, and the tasks that must never be swapped out (e.g. FB's
    /// real-time levels, §4.1). Asked by a swapping mechanism whenever its swap
    /// scheduler decides; `None` (the default): the policy keeps no such order, and the
    /// mechanism swaps in by its standard rule.
    fn swap_advice(&self) -> Option<SwapAdvice> {
        None
    }
    /// Moves the policy's debugging log entries (e.g. BVT's warp-limit events, end of
    /// §2.2) into `out`. The mechanism shows them in its report.
    fn drain_log(&mut self, _out: &mut Vec<PolicyLog>) {}
    /// A policy that has failed for good (a loaded module that trapped, ran past its time
    /// budget or exceeded its memory limit) says why. It must then be inert: `pick` returns
    /// `None` and the callbacks do nothing. The dispatcher ejects a *contained* scheduler
    /// whose policy reports a fault ([`crate::Dispatcher::contain`]). Built-in policies
    /// never fail.
    fn fault(&self) -> Option<String> {
        None
    }
    /// The task's virtual times, for policies that keep them (BVT's A_i and E_i, paper
    /// 001 §2), for plots. The simulator asks only while it records a trace; the default
    /// keeps none.
    fn virtual_time(&self, _task: TaskId) -> Option<VirtualTime> {
        None
    }
}

/// A task's virtual times as a policy keeps them (BVT paper 001 §2: the actual virtual
/// time A_i and the effective virtual time E_i = A_i − (warp ? W_i : 0)), in virtual
/// nanoseconds (a weight-1 task's A_i advances one virtual ns per ns it is charged).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct VirtualTime {
    pub actual: f64,
    pub effective: f64,
}

/// A policy's answer to [`Policy::swap_advice`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SwapAdvice {
    /// Ready tasks, best first (the CPU scheduler's ready list).
    pub ready: Vec<TaskId>,
    /// Tasks that must stay in memory.
    pub resident: Vec<TaskId>,
}

/// One entry of a policy's debugging log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicyLog {
    pub at: Ns,
    pub task: Option<TaskId>,
    pub text: String,
}
