//! The Vassal dispatcher: an ordered hierarchy of loaded schedulers, queried top-down.
//!
//! Paper 000 §3: "the dispatcher *queries* the schedulers for which thread to run";
//! "if a higher level scheduler does not have a ready thread, then the next one (in
//! descending order) is queried". §4: RegisterScheduler / UnregisterScheduler,
//! MessageToScheduler, SetSchedulerEvent. §8: schedulers declare how they use the CPU and
//! a conflicting one is refused at load time (see [`crate::usage`]).
//!
//! Invariants (asserted by the tests and the simulator's property tests):
//! - every live task is owned by exactly one registered scheduler; new tasks start in
//!   the default scheduler (the bottom one, which cannot be unregistered);
//! - a task moves only by an explicit Join/Leave, or when its scheduler is unregistered
//!   (then it returns to the default scheduler; for a loaded module, to the scheduler
//!   below, [`Dispatcher::unregister_to_below`]) or ejected — no task is ever lost;
//! - a CPU runs at most one task and a task runs on at most one CPU;
//! - every decision is validated; an invalid one is refused, the policy is told, and the
//!   next scheduler is asked. The mechanism distrusts the policy.
//!
//! Guests: a task owned by a higher scheduler that has not marked it exclusive is also
//! attached to the default scheduler as a guest, which may run it when the owner has no
//! opinion (Vassal §3, last paragraph). The guest host gets the same state notifications
//! (wake, block, dispatch, preempt, run) as the owner. A `Ctx::set_exclusive` request
//! applies only while the scheduler that made it still owns the task (an owner may make
//! it in `on_attach`), takes effect before the next scheduler is asked, and reschedules
//! the task's CPU only if the default is running it as a guest.
//!
//! The mechanism's duties: call `account` for the running task before `schedule`/`block`
//! on its CPU; call `schedule` for every CPU returned by `block`/`remove_task` and for
//! every `Effect::Resched` drained from [`Dispatcher::drain_effects`]; arm and cancel
//! scheduler events as the drained effects say and deliver them with `fire_event`; when
//! distrusted (loaded) schedulers are contained ([`Containment`]), call `eject_failed`
//! after each event and at `next_watchdog`. Their one encoding is [`crate::driver`]
//! (effects, events, pending decisions, the livelock guard): mechanisms drive the
//! dispatcher through it rather than draining effects themselves.

use crate::ids::{CpuId, CpuSet, SchedId, TaskId};
use crate::policy::{
    AttachInfo, Block, Ctx, Decision, Detach, Effect, Job, Policy, PolicyLog, Preempt, Refusal, Reply, Request, Sender, SwapAdvice,
    TaskParams, TaskState, TaskView, View, Wake,
};
use crate::time::{fmt_duration, Ns};
use crate::usage::{check_conflict, HierarchyConfig, Usage};

/// Where to insert a newly registered scheduler.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Position {
    /// Above every other scheduler (Vassal: the loaded scheduler takes precedence).
    Top,
    Above(SchedId),
    /// Below the given one (never below the default scheduler).
    Below(SchedId),
}

/// Why a registration or unregistration was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RegisterError {
    #[error("a scheduler named '{0}' is already registered")]
    DuplicateName(String),
    #[error("no scheduler {0}")]
    NoSuchScheduler(SchedId),
    #[error("the default scheduler cannot be unregistered or placed below")]
    DefaultScheduler,
    #[error("scheduler '{name}' conflicts with the hierarchy: {reason}")]
    Conflict { name: String, reason: String },
}

/// A decision the dispatcher accepted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dispatched {
    pub task: TaskId,
    pub slice: Option<Ns>,
    /// The scheduler that made the decision.
    pub by: SchedId,
    /// The task that was running on this CPU before (may equal `task`).
    pub prev: Option<TaskId>,
    /// The task last ran on another CPU.
    pub migrated: bool,
}

/// Counters the dispatcher keeps.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DispatchStats {
    /// Calls of `schedule`.
    pub decisions: u64,
    /// Calls of some scheduler's `pick`.
    pub picks: u64,
    /// Decisions that left the CPU idle (every scheduler had no opinion).
    pub idle: u64,
    /// Decisions refused as invalid.
    pub refused: u64,
    /// Hand-offs honoured.
    pub hand_offs: u64,
}

/// A registered scheduler, as reported to the mechanism.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SchedInfo {
    pub id: SchedId,
    pub name: String,
    pub kind: String,
    pub usage: Usage,
    /// Decisions it made that were accepted.
    pub decided: u64,
    /// Decisions it made that were refused.
    pub refused: u64,
}

struct Slot {
    id: SchedId,
    name: String,
    usage: Usage,
    policy: Box<dyn Policy>,
    decided: u64,
    refused: u64,
    /// Set for a distrusted (loaded) scheduler: see [`Dispatcher::contain`].
    guard: Option<Containment>,
    /// An ejection is pending: it is asked for no more decisions.
    failing: bool,
    /// Its policy uses `on_run` ([`Policy::accounts_runs`], asked once).
    runs: bool,
    /// Its policy's own picks stand for `on_dispatch` ([`Policy::dispatches_in_pick`],
    /// asked once).
    in_pick: bool,
}

/// How the dispatcher distrusts a loaded scheduler (as Linux's sched_ext does): a contained
/// scheduler is *ejected* — unregistered, its tasks handed to the schedulers below it, the
/// reason logged — when its policy reports a [`Policy::fault`] (a module that trapped, ran
/// past its time budget in one call or exceeded its memory limit), when one of its
/// decisions is refused (a task that is not its own, not runnable, not allowed there, ...),
/// or when a runnable task it owns waits longer than `watchdog` without running.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Containment {
    pub watchdog: Option<Ns>,
}

/// A scheduler the dispatcher ejected (see [`Containment`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ejection {
    pub at: Ns,
    pub sched: SchedId,
    pub name: String,
    pub reason: String,
    /// Each of its tasks and the scheduler that took it.
    pub moved: Vec<(TaskId, SchedId)>,
}

struct TaskRec {
    state: TaskState,
    owner: SchedId,
    /// Also attached to the default scheduler as a guest.
    guest: bool,
    affinity: CpuSet,
    last_cpu: Option<CpuId>,
    params: TaskParams,
    parent: Option<TaskId>,
    /// While it runs: the scheduler whose decision (or hand-off, its owner) started it.
    ran_by: Option<SchedId>,
    /// Its image is swapped out (paper 004 §2): runnable but allowed on no CPU.
    swapped_out: bool,
    /// When it last became runnable without running (for the containment watchdog).
    waiting_since: Ns,
}

pub(crate) struct Tasks {
    recs: Vec<TaskRec>,
    cpus: Vec<Option<TaskId>>,
    /// The CPUs whose `cpus` entry is None (kept with it, for `kick_cpu`).
    idle: CpuSet,
}

impl Tasks {
    /// Records that `task` runs on `cpu`, started by `by`; whether it migrated.
    fn occupy(&mut self, cpu: CpuId, task: TaskId, by: SchedId) -> bool {
        let rec = &mut self.recs[task.0 as usize];
        let migrated = rec.last_cpu.is_some_and(|c| c != cpu);
        rec.state = TaskState::Running(cpu);
        rec.ran_by = Some(by);
        rec.last_cpu = Some(cpu);
        self.cpus[cpu.0 as usize] = Some(task);
        self.idle.0 &= !CpuSet::only(cpu).0;
        migrated
    }

    /// `task` no longer runs: the CPU it ran on, if it was running.
    fn vacate(&mut self, task: TaskId) -> Option<CpuId> {
        let rec = &mut self.recs[task.0 as usize];
        let TaskState::Running(cpu) = rec.state else { return None };
        rec.state = TaskState::Runnable;
        rec.ran_by = None;
        self.cpus[cpu.0 as usize] = None;
        self.idle.0 |= CpuSet::only(cpu).0;
        Some(cpu)
    }
}

impl TaskView for Tasks {
    #[inline]
    fn state(&self, task: TaskId) -> TaskState {
        self.recs.get(task.0 as usize).map_or(TaskState::Dead, |r| r.state)
    }
    #[inline]
    fn affinity(&self, task: TaskId) -> CpuSet {
        // A swapped-out task may run nowhere until it is loaded again.
        self.recs.get(task.0 as usize).filter(|r| !r.swapped_out).map_or(CpuSet::NONE, |r| r.affinity)
    }
    #[inline]
    fn owner(&self, task: TaskId) -> Option<SchedId> {
        self.recs.get(task.0 as usize).filter(|r| r.state != TaskState::Dead).map(|r| r.owner)
    }
    #[inline]
    fn last_cpu(&self, task: TaskId) -> Option<CpuId> {
        self.recs.get(task.0 as usize).and_then(|r| r.last_cpu)
    }
    #[inline]
    fn running_on(&self, cpu: CpuId) -> Option<TaskId> {
        self.cpus.get(cpu.0 as usize).copied().flatten()
    }
}

/// The Vassal dispatcher. See the module documentation.
pub struct Dispatcher {
    ncpus: u16,
    cfg: HierarchyConfig,
    /// Top-down; the last one is the default scheduler.
    scheds: Vec<Slot>,
    next_sched: u32,
    tasks: Tasks,
    effects: Vec<Effect>,
    /// Where `Ctx::set_exclusive` records requests during one callback.
    exclusive: Vec<(TaskId, bool)>,
    /// Requests made so far, each with the scheduler that made it: a request only
    /// applies while its maker still owns the task (see `apply_exclusive`).
    pending_exclusive: Vec<(SchedId, TaskId, bool)>,
    /// When each CPU was last asked (by `kick_cpu`) for a decision not yet made, so two
    /// wake-ups at one instant kick two idle CPUs rather than the same one twice.
    kicked_at: Vec<Option<Ns>>,
    /// Log entries of unregistered schedulers, kept until drained.
    departed_logs: Vec<(String, PolicyLog)>,
    stats: DispatchStats,
    /// Contained schedulers to eject, with the reason (see [`Dispatcher::eject_failed`]).
    pending_eject: Vec<(SchedId, String)>,
    /// Some registered policy uses `on_run` (see [`Dispatcher::accounts_runs`]).
    runs: bool,
    /// Some registered scheduler is contained (see [`Dispatcher::containing`]).
    contained: bool,
}

impl Dispatcher {
    /// A dispatcher for `ncpus` CPUs with `default` as the bottom scheduler.
    pub fn new(ncpus: u16, default_name: &str, mut default: Box<dyn Policy>, cfg: HierarchyConfig) -> Self {
        assert!(ncpus > 0 && ncpus <= crate::ids::MAX_CPUS, "1..=64 CPUs");
        default.init(ncpus);
        let (runs, in_pick) = (default.accounts_runs(), default.dispatches_in_pick());
        Dispatcher {
            ncpus,
            cfg,
            scheds: vec![Slot {
                id: SchedId(0),
                name: default_name.to_string(),
                usage: Usage::BestEffort,
                policy: default,
                decided: 0,
                refused: 0,
                guard: None,
                failing: false,
                runs,
                in_pick,
            }],
            next_sched: 1,
            tasks: Tasks { recs: Vec::new(), cpus: vec![None; ncpus as usize], idle: CpuSet::first(ncpus) },
            effects: Vec::new(),
            exclusive: Vec::new(),
            pending_exclusive: Vec::new(),
            kicked_at: vec![None; ncpus as usize],
            departed_logs: Vec::new(),
            stats: DispatchStats::default(),
            pending_eject: Vec::new(),
            runs,
            contained: false,
        }
    }

    pub fn ncpus(&self) -> u16 {
        self.ncpus
    }
    pub fn stats(&self) -> DispatchStats {
        self.stats
    }
    pub fn default_sched(&self) -> SchedId {
        self.scheds.last().expect("the default scheduler is never removed").id
    }
    /// The registered schedulers, top-down.
    pub fn schedulers(&self) -> Vec<SchedInfo> {
        self.scheds
            .iter()
            .map(|s| SchedInfo {
                id: s.id,
                name: s.name.clone(),
                kind: s.policy.kind().to_string(),
                usage: s.usage,
                decided: s.decided,
                refused: s.refused,
            })
            .collect()
    }
    pub fn lookup(&self, name: &str) -> Option<SchedId> {
        self.scheds.iter().find(|s| s.name == name).map(|s| s.id)
    }
    pub fn sched_name(&self, id: SchedId) -> Option<&str> {
        self.scheds.iter().find(|s| s.id == id).map(|s| s.name.as_str())
    }
    pub fn task_count(&self) -> usize {
        self.tasks.recs.len()
    }
    pub fn state(&self, task: TaskId) -> TaskState {
        self.tasks.state(task)
    }
    pub fn owner(&self, task: TaskId) -> Option<SchedId> {
        self.tasks.owner(task)
    }
    /// The task's virtual times as its owner keeps them (see [`Policy::virtual_time`]).
    pub fn virtual_time(&self, task: TaskId) -> Option<crate::VirtualTime> {
        let owner = self.owner(task)?;
        self.scheds.iter().find(|s| s.id == owner)?.policy.virtual_time(task)
    }
    /// While `task` runs: the scheduler whose decision (or hand-off) started it. The agent
    /// gives a task real-time kernel priority only under the grant of the scheduler that
    /// decided (docs/agent.md, "Security model").
    pub fn ran_by(&self, task: TaskId) -> Option<SchedId> {
        self.tasks.recs.get(task.0 as usize).and_then(|r| r.ran_by)
    }
    /// The CPU usage scheduler `id` declared when it was registered (paper 000 §8).
    pub fn usage(&self, id: SchedId) -> Option<Usage> {
        self.scheds.iter().find(|s| s.id == id).map(|s| s.usage)
    }
    pub fn is_guest(&self, task: TaskId) -> bool {
        self.tasks.recs.get(task.0 as usize).is_some_and(|r| r.guest)
    }
    pub fn running(&self, cpu: CpuId) -> Option<TaskId> {
        self.tasks.running_on(cpu)
    }
    pub fn params(&self, task: TaskId) -> Option<&TaskParams> {
        self.tasks.recs.get(task.0 as usize).map(|r| &r.params)
    }
    /// Every scheduler's debugging log entries (see [`Policy::drain_log`]), with the
    /// scheduler's name, in time order (stable: by scheduler top-down at equal times).
    pub fn drain_logs(&mut self) -> Vec<(String, PolicyLog)> {
        let mut all = std::mem::take(&mut self.departed_logs);
        for s in &mut self.scheds {
            let mut log = Vec::new();
            s.policy.drain_log(&mut log);
            all.extend(log.into_iter().map(|l| (s.name.clone(), l)));
        }
        all.sort_by_key(|(_, l)| l.at);
        all
    }

    /// Whether any effect waits to be drained.
    #[inline]
    pub fn has_effects(&self) -> bool {
        !self.effects.is_empty()
    }

    /// Moves the effects policies asked for into `out` (which is cleared first).
    pub fn drain_effects(&mut self, out: &mut Vec<Effect>) {
        out.clear();
        std::mem::swap(out, &mut self.effects);
    }

    fn index_of(&self, id: SchedId) -> Option<usize> {
        self.scheds.iter().position(|s| s.id == id)
    }

    // Inlined into every caller: about 30 instructions of call and `Ctx` set-up per call
    // into a policy otherwise, 3.7 % of a global EDF run (docs/bench.md, sixteenth round).
    #[inline(always)]
    fn call<R>(&mut self, idx: usize, now: Ns, f: impl FnOnce(&mut dyn Policy, &mut Ctx<'_>) -> R) -> R {
        let slot = &mut self.scheds[idx];
        let id = slot.id;
        let before = self.effects.len();
        let mut ctx = Ctx {
            now,
            ncpus: self.ncpus,
            sched: id,
            effects: &mut self.effects,
            exclusive: &mut self.exclusive,
            view: View::Dispatcher(&self.tasks),
        };
        let r = f(slot.policy.as_mut(), &mut ctx);
        if slot.guard.is_some() && !slot.failing {
            if let Some(why) = slot.policy.fault() {
                slot.failing = true;
                self.pending_eject.push((id, why));
            }
        }
        // Remember who asked, so a request never applies on behalf of another scheduler.
        if !self.exclusive.is_empty() {
            self.pending_exclusive.extend(self.exclusive.drain(..).map(|(t, e)| (id, t, e)));
        }
        self.drop_reschedules_over_higher(idx, before);
        r
    }

    /// A scheduler cannot preempt a decision made by a scheduler above it: the re-query
    /// would ask that one first anyway. Dropping such requests keeps a lower policy that
    /// misjudges what runs where (e.g. a guest its owner dispatched) from livelocking a
    /// CPU with reschedules.
    #[inline]
    fn drop_reschedules_over_higher(&mut self, idx: usize, from: usize) {
        if idx != 0 && self.effects.len() != from {
            self.drop_reschedules_over(idx, from);
        }
    }

    fn drop_reschedules_over(&mut self, idx: usize, from: usize) {
        let higher: Vec<SchedId> = self.scheds[..idx].iter().map(|s| s.id).collect();
        let (recs, cpus) = (&self.tasks.recs, &self.tasks.cpus);
        // `i` counts from the first effect: only those from `from` on are this call's.
        let mut i = 0;
        self.effects.retain(|e| {
            let keep = i < from
                || match e {
                    Effect::Resched(cpu) => !cpus
                        .get(cpu.0 as usize)
                        .copied()
                        .flatten()
                        .and_then(|t| recs[t.0 as usize].ran_by)
                        .is_some_and(|by| higher.contains(&by)),
                    _ => true,
                };
            i += 1;
            keep
        });
    }

    /// Calls `f` on the task's owner and, if it is a guest there, on the default scheduler.
    // Inlined with `start` (either alone changes nothing): 0.7 % of a global EDF run.
    #[inline(always)]
    fn notify(&mut self, task: TaskId, now: Ns, f: impl Fn(&mut dyn Policy, &mut Ctx<'_>)) {
        self.notify_but(task, now, usize::MAX, f)
    }

    /// [`Dispatcher::notify`], but scheduler `skip` (an index; `usize::MAX`: none) is not
    /// told.
    #[inline(always)]
    fn notify_but(&mut self, task: TaskId, now: Ns, skip: usize, f: impl Fn(&mut dyn Policy, &mut Ctx<'_>)) {
        let rec = &self.tasks.recs[task.0 as usize];
        let (owner, guest) = (rec.owner, rec.guest);
        if let Some(idx) = self.index_of(owner).filter(|&i| i != skip) {
            self.call(idx, now, &f);
        }
        let last = self.scheds.len() - 1;
        if guest && last != skip {
            self.call(last, now, &f);
        }
    }

    fn attach(&mut self, idx: usize, task: TaskId, now: Ns, guest: bool) -> Result<(), String> {
        let r = &self.tasks.recs[task.0 as usize];
        // Copied out: the policy call below borrows the dispatcher mutably.
        let (state, affinity, parent, params) = (r.state, r.affinity, r.parent, r.params.clone());
        self.call(idx, now, |p, ctx| p.on_attach(ctx, task, &AttachInfo { state, params: &params, affinity, parent, guest }))
    }

    fn alive(&self, task: TaskId) -> bool {
        self.tasks.recs.get(task.0 as usize).is_some_and(|r| r.state != TaskState::Dead)
    }

    fn resched_idle_cpus(&mut self) {
        for c in 0..self.ncpus {
            if self.tasks.cpus[c as usize].is_none() {
                self.effects.push(Effect::Resched(CpuId(c)));
            }
        }
    }

    /// Applies `Ctx::set_exclusive` requests made during the last callbacks. A request
    /// applies only if the scheduler that made it still owns the task (the task may have
    /// moved, or its scheduler been unregistered, since), and never to the default's own
    /// tasks (they are never guests).
    #[inline]
    fn apply_exclusive(&mut self, now: Ns) {
        if !self.pending_exclusive.is_empty() {
            self.apply_pending_exclusive(now);
        }
    }

    fn apply_pending_exclusive(&mut self, now: Ns) {
        while !self.pending_exclusive.is_empty() {
            let batch = std::mem::take(&mut self.pending_exclusive);
            let last = self.scheds.len() - 1;
            let default_id = self.scheds[last].id;
            for (by, task, exclusive) in batch {
                if !self.alive(task) {
                    continue;
                }
                let owner = self.tasks.recs[task.0 as usize].owner;
                if owner != by || owner == default_id {
                    continue;
                }
                let rec = &self.tasks.recs[task.0 as usize];
                if exclusive && rec.guest {
                    self.call(last, now, |p, ctx| p.on_detach(ctx, task, Detach::Released));
                    let rec = &mut self.tasks.recs[task.0 as usize];
                    rec.guest = false;
                    // Only a task the default is running as its guest must stop; one its
                    // owner runs (or was handed off to) keeps running.
                    if let TaskState::Running(cpu) = rec.state {
                        if rec.ran_by == Some(default_id) {
                            self.effects.push(Effect::Resched(cpu));
                        }
                    }
                } else if !exclusive && !rec.guest && self.attach(last, task, now, true).is_ok() {
                    self.tasks.recs[task.0 as usize].guest = true;
                }
            }
        }
    }

    // ----- the hierarchy -----

    /// RegisterScheduler (paper 000 §4) with the §8 conflict check.
    pub fn register(&mut self, name: &str, mut policy: Box<dyn Policy>, usage: Usage, pos: Position) -> Result<SchedId, RegisterError> {
        if self.lookup(name).is_some() {
            return Err(RegisterError::DuplicateName(name.to_string()));
        }
        let at = match pos {
            Position::Top => 0,
            Position::Above(id) => self.index_of(id).ok_or(RegisterError::NoSuchScheduler(id))?,
            Position::Below(id) => {
                let i = self.index_of(id).ok_or(RegisterError::NoSuchScheduler(id))?;
                if i == self.scheds.len() - 1 {
                    return Err(RegisterError::DefaultScheduler);
                }
                i + 1
            }
        };
        let existing: Vec<(&str, Usage)> = self.scheds[..self.scheds.len() - 1].iter().map(|s| (s.name.as_str(), s.usage)).collect();
        check_conflict(&existing, usage, at, self.ncpus, &self.cfg)
            .map_err(|reason| RegisterError::Conflict { name: name.to_string(), reason })?;
        let id = SchedId(self.next_sched);
        self.next_sched += 1;
        policy.init(self.ncpus);
        let (runs, in_pick) = (policy.accounts_runs(), policy.dispatches_in_pick());
        let slot = Slot { id, name: name.to_string(), usage, policy, decided: 0, refused: 0, guard: None, failing: false, runs, in_pick };
        self.scheds.insert(at, slot);
        self.runs |= runs;
        Ok(id)
    }

    /// UnregisterScheduler: its tasks return to the default scheduler. Returns them.
    pub fn unregister(&mut self, now: Ns, id: SchedId) -> Result<Vec<TaskId>, RegisterError> {
        let idx = self.index_of(id).ok_or(RegisterError::NoSuchScheduler(id))?;
        if idx == self.scheds.len() - 1 {
            return Err(RegisterError::DefaultScheduler);
        }
        let moved: Vec<TaskId> =
            (0..self.tasks.recs.len() as u32).map(TaskId).filter(|&t| self.alive(t) && self.tasks.recs[t.0 as usize].owner == id).collect();
        for &t in &moved {
            self.call(idx, now, |p, ctx| p.on_detach(ctx, t, Detach::Released));
        }
        let mut departing = self.scheds.remove(idx);
        self.runs = self.scheds.iter().any(|s| s.runs);
        self.contained = self.scheds.iter().any(|s| s.guard.is_some());
        let mut log = Vec::new();
        departing.policy.drain_log(&mut log);
        self.departed_logs.extend(log.into_iter().map(|l| (departing.name.clone(), l)));
        // Requests the departing scheduler made no longer apply.
        self.pending_exclusive.retain(|&(by, _, _)| by != id);
        let default = self.scheds.len() - 1;
        let default_id = self.scheds[default].id;
        for &t in &moved {
            if self.tasks.recs[t.0 as usize].guest {
                self.call(default, now, |p, ctx| p.on_detach(ctx, t, Detach::Released));
            }
            let rec = &mut self.tasks.recs[t.0 as usize];
            rec.owner = default_id;
            rec.guest = false;
            // The default scheduler must take every task; a refusal here is a policy bug
            // and the task stays owned by it regardless, so it is never lost.
            let _ = self.attach(default, t, now, false);
            if let TaskState::Running(cpu) = self.tasks.recs[t.0 as usize].state {
                self.effects.push(Effect::Resched(cpu));
            }
        }
        self.resched_idle_cpus();
        self.apply_exclusive(now);
        Ok(moved)
    }

    /// UnregisterScheduler for a loaded module (`vassal ctl unload`, a scenario's
    /// `unload_at` of a module): each of its tasks is handed to the scheduler directly below
    /// it, or, if that one's `on_attach` refuses, to the next one down; the default
    /// scheduler takes whatever is left. No task is lost or left parked: a running task's
    /// CPU is asked for a new decision and a runnable one is offered a CPU. Returns each
    /// task with the scheduler that took it.
    pub fn unregister_to_below(&mut self, now: Ns, id: SchedId) -> Result<Vec<(TaskId, SchedId)>, RegisterError> {
        let idx = self.index_of(id).ok_or(RegisterError::NoSuchScheduler(id))?;
        let last = self.scheds.len() - 1;
        if idx == last {
            return Err(RegisterError::DefaultScheduler);
        }
        let owned: Vec<TaskId> =
            (0..self.tasks.recs.len() as u32).map(TaskId).filter(|&t| self.alive(t) && self.tasks.recs[t.0 as usize].owner == id).collect();
        for &t in &owned {
            // `idx` stays valid: nothing is registered or removed while tasks move.
            for target in idx + 1..=last {
                if self.move_task(now, t, target).is_ok() {
                    break;
                }
            }
        }
        // Whatever every scheduler below refused goes to the default by force.
        self.unregister(now, id)?;
        Ok(owned.into_iter().map(|t| (t, self.tasks.recs[t.0 as usize].owner)).collect())
    }

    /// Marks a registered scheduler as distrusted: see [`Containment`]. The default
    /// scheduler cannot be contained (nothing is below it to take its tasks).
    pub fn contain(&mut self, id: SchedId, guard: Containment) -> Result<(), RegisterError> {
        let idx = self.index_of(id).ok_or(RegisterError::NoSuchScheduler(id))?;
        if idx == self.scheds.len() - 1 {
            return Err(RegisterError::DefaultScheduler);
        }
        self.scheds[idx].guard = Some(guard);
        self.contained = true;
        Ok(())
    }

    /// Ejects a scheduler now: [`Dispatcher::unregister_to_below`], with the reason
    /// recorded in the logs ([`Dispatcher::drain_logs`]) under the scheduler's name.
    pub fn eject(&mut self, now: Ns, id: SchedId, reason: &str) -> Result<Ejection, RegisterError> {
        let name = self.sched_name(id).ok_or(RegisterError::NoSuchScheduler(id))?.to_string();
        let moved = self.unregister_to_below(now, id)?;
        self.pending_eject.retain(|&(s, _)| s != id);
        let text = format!("ejected: {reason}; {} task(s) handed to the schedulers below", moved.len());
        self.departed_logs.push((name.clone(), PolicyLog { at: now, task: None, text }));
        Ok(Ejection { at: now, sched: id, name, reason: reason.to_string(), moved })
    }

    /// Whether any scheduler is contained or an ejection is pending: when not,
    /// [`Dispatcher::eject_failed`] and [`Dispatcher::next_watchdog`] have nothing to do
    /// (a mechanism may skip them after each event).
    pub fn containing(&self) -> bool {
        self.contained || !self.pending_eject.is_empty()
    }

    /// Carries out the containment of distrusted schedulers ([`Containment`]): runs the
    /// watchdog, then ejects every contained scheduler that failed since the last call.
    /// The mechanism calls this after each event it handles (cheap when nothing is
    /// contained) and, for the watchdog, at [`Dispatcher::next_watchdog`]; it then drains
    /// effects as usual (the ejection asks for new decisions).
    pub fn eject_failed(&mut self, now: Ns) -> Vec<Ejection> {
        if !self.containing() {
            return Vec::new();
        }
        for s in self.scheds.iter_mut().filter(|s| !s.failing) {
            let Some(limit) = s.guard.and_then(|g| g.watchdog) else {
                continue;
            };
            let starved = self
                .tasks
                .recs
                .iter()
                .enumerate()
                .find(|(_, r)| r.owner == s.id && r.state == TaskState::Runnable && now.saturating_sub(r.waiting_since) > limit);
            if let Some((t, r)) = starved {
                s.failing = true;
                let waited = fmt_duration(now - r.waiting_since);
                let reason = format!("watchdog: task{t} runnable but not run for {waited} (limit {})", fmt_duration(limit));
                self.pending_eject.push((s.id, reason));
            }
        }
        let pending = std::mem::take(&mut self.pending_eject);
        let mut out = Vec::new();
        for (id, reason) in pending {
            if let Ok(e) = self.eject(now, id, &reason) {
                out.push(e);
            }
        }
        out
    }

    /// The earliest time at which the watchdog of a contained scheduler could fire (one
    /// nanosecond past a waiting task's limit), if any task is waiting on one.
    pub fn next_watchdog(&self) -> Option<Ns> {
        self.scheds
            .iter()
            .filter(|s| !s.failing)
            .filter_map(|s| s.guard.and_then(|g| g.watchdog).map(|w| (s.id, w)))
            .flat_map(|(id, w)| {
                self.tasks
                    .recs
                    .iter()
                    .filter(move |r| r.owner == id && r.state == TaskState::Runnable)
                    .map(move |r| r.waiting_since.saturating_add(w).saturating_add(1))
            })
            .min()
    }

    // ----- tasks -----

    /// A new task, owned by the default scheduler (Vassal §3, "Thread Creation").
    /// A task the default scheduler refuses (e.g. a malformed parameter) is created dead;
    /// [`Dispatcher::try_add_task`] says why.
    pub fn add_task(&mut self, now: Ns, params: TaskParams, affinity: CpuSet, parent: Option<TaskId>, runnable: bool) -> TaskId {
        match self.try_add_task(now, params, affinity, parent, runnable) {
            Ok(t) => t,
            Err((t, _)) => t,
        }
    }

    /// Like [`Dispatcher::add_task`], but a refusal by the default scheduler's `on_attach`
    /// comes back with its reason (the task id is spent, and the task is dead).
    pub fn try_add_task(
        &mut self,
        now: Ns,
        params: TaskParams,
        affinity: CpuSet,
        parent: Option<TaskId>,
        runnable: bool,
    ) -> Result<TaskId, (TaskId, String)> {
        let task = TaskId(self.tasks.recs.len() as u32);
        let affinity = CpuSet(affinity.0 & CpuSet::first(self.ncpus).0);
        self.tasks.recs.push(TaskRec {
            state: if runnable { TaskState::Runnable } else { TaskState::Blocked },
            owner: self.default_sched(),
            guest: false,
            affinity: if affinity.is_empty() { CpuSet::first(self.ncpus) } else { affinity },
            last_cpu: None,
            params,
            parent,
            ran_by: None,
            swapped_out: false,
            waiting_since: now,
        });
        let default = self.scheds.len() - 1;
        if let Err(why) = self.attach(default, task, now, false) {
            self.tasks.recs[task.0 as usize].state = TaskState::Dead;
            return Err((task, why));
        }
        if runnable {
            self.kick_cpu(now, task);
        }
        self.apply_exclusive(now);
        Ok(task)
    }

    /// The task exited. Returns the CPU it was running on, which needs a decision.
    pub fn remove_task(&mut self, now: Ns, task: TaskId) -> Option<CpuId> {
        if !self.alive(task) {
            return None;
        }
        let cpu = self.stop_running(task);
        self.notify(task, now, |p, ctx| p.on_detach(ctx, task, Detach::Exit));
        let rec = &mut self.tasks.recs[task.0 as usize];
        rec.state = TaskState::Dead;
        rec.guest = false;
        self.apply_exclusive(now);
        cpu
    }

    fn stop_running(&mut self, task: TaskId) -> Option<CpuId> {
        self.tasks.vacate(task)
    }

    /// Asks for a decision on one CPU where the runnable `task` could run now: an idle
    /// CPU it may use (its last one first), else a CPU running a task that a scheduler
    /// *lower* than the task's owner decided — the loaded scheduler takes precedence
    /// (paper 000 §3, §8), so a task of a higher scheduler preempts lower schedulers'
    /// tasks without the policy having to know about them. Among those, the CPU whose
    /// decider is lowest in the hierarchy is asked (the last CPU first on a tie).
    fn kick_cpu(&mut self, now: Ns, task: TaskId) {
        self.kick_cpu_except(now, task, None);
    }

    /// [`Self::kick_cpu`], never asking `except` (a CPU whose decision just considered the
    /// task: asking it again would only repeat that decision — or, when a lower scheduler
    /// alternates between guests, preempt back and forth forever at one instant).
    // Inlined into `kick_cpu` and `schedule` (docs/bench.md, sixteenth round).
    #[inline(always)]
    fn kick_cpu_except(&mut self, now: Ns, task: TaskId, except: Option<CpuId>) {
        let rec = &self.tasks.recs[task.0 as usize];
        let allowed = if rec.swapped_out { CpuSet::NONE } else { CpuSet(rec.affinity.0 & !except.map_or(0, |c| CpuSet::only(c).0)) };
        let free = |c: CpuId| allowed.contains(c) && self.kicked_at[c.0 as usize] != Some(now);
        // The idle CPUs it may use (its last one first), through the idle set: on a busy
        // machine, the usual case, none is visited.
        let idle = CpuSet(self.tasks.idle.0 & allowed.0);
        let mut cpu = rec.last_cpu.filter(|&c| idle.contains(c) && free(c)).or_else(|| idle.iter().find(|&c| free(c)));
        if cpu.is_none() {
            let Some(owner) = self.index_of(rec.owner) else {
                return;
            };
            // No scheduler is below the lowest one: none of its tasks preempts another.
            if owner + 1 == self.scheds.len() {
                return;
            }
            let mut best: Option<(usize, bool, CpuId)> = None;
            for c in (0..self.ncpus).map(CpuId).filter(|&c| free(c)) {
                let Some(running) = self.tasks.cpus[c.0 as usize] else {
                    continue;
                };
                let Some(decider) = self.tasks.recs[running.0 as usize].ran_by.and_then(|s| self.index_of(s)) else {
                    continue;
                };
                if decider <= owner {
                    continue;
                }
                let key = (decider, rec.last_cpu == Some(c), c);
                if best.is_none_or(|b| (key.0, key.1) > (b.0, b.1)) {
                    best = Some(key);
                }
            }
            cpu = best.map(|b| b.2);
        }
        if let Some(cpu) = cpu {
            self.kicked_at[cpu.0 as usize] = Some(now);
            self.effects.push(Effect::Resched(cpu));
        }
    }

    /// A blocked task became runnable. Returns false (and changes nothing) if it was not blocked.
    pub fn wake(&mut self, now: Ns, task: TaskId, wake: Wake) -> bool {
        self.wake_job(now, task, wake, None)
    }

    /// A blocked task became runnable to start `job` (if given): its owner hears
    /// [`Policy::on_job`] and then [`Policy::on_wake`] in one visit, as if [`Self::job`]
    /// had been called just before [`Self::wake`] (the simulator's released jobs: one
    /// visit instead of two, issue 16). Returns false (and changes nothing, the job is not
    /// announced) if it was not blocked.
    pub fn wake_job(&mut self, now: Ns, task: TaskId, wake: Wake, job: Option<Job>) -> bool {
        if self.tasks.state(task) != TaskState::Blocked {
            return false;
        }
        self.tasks.recs[task.0 as usize].state = TaskState::Runnable;
        self.tasks.recs[task.0 as usize].waiting_since = now;
        self.notify(task, now, |p, ctx| {
            if let Some(job) = job {
                p.on_job(ctx, task, job);
            }
            p.on_wake(ctx, task, wake)
        });
        self.kick_cpu(now, task);
        self.apply_exclusive(now);
        true
    }

    /// `task` starts a new job: its owner is told ([`Policy::on_job`]). Call it before the
    /// wake that starts the job, or while the task runs or waits if it goes straight on
    /// to its next job.
    pub fn job(&mut self, now: Ns, task: TaskId, job: Job) {
        if self.tasks.state(task) != TaskState::Dead {
            self.notify(task, now, |p, ctx| p.on_job(ctx, task, job));
        }
    }

    /// A task stopped being runnable. Returns the CPU it was running on, which now needs a
    /// decision (the mechanism calls `schedule` or `hand_off` for it).
    pub fn block(&mut self, now: Ns, task: TaskId, block: Block) -> Option<CpuId> {
        if !self.tasks.state(task).is_runnable() {
            return None;
        }
        let cpu = self.stop_running(task);
        self.tasks.recs[task.0 as usize].state = TaskState::Blocked;
        self.notify(task, now, |p, ctx| p.on_block(ctx, task, block));
        self.apply_exclusive(now);
        cpu
    }

    /// Memory scheduling (paper 004 §2): `task`'s image is swapped out (`loaded` false) or
    /// in memory again. A swapped-out task stays runnable as far as its scheduler knows,
    /// but it is allowed on no CPU (`TaskView::affinity` is empty, a decision for it is
    /// refused as `NotAllowed`). Swapping out a running task asks its CPU for a new
    /// decision; loading a runnable one offers it an idle CPU (it preempts nobody: a
    /// swapping mechanism runs its swap scheduler as the best process, so the CPU it ran
    /// on makes a new decision when it sleeps, as in V7).
    pub fn set_loaded(&mut self, now: Ns, task: TaskId, loaded: bool) {
        let Some(rec) = self.tasks.recs.get_mut(task.0 as usize) else {
            return;
        };
        if rec.state == TaskState::Dead || rec.swapped_out != loaded {
            return;
        }
        rec.swapped_out = !loaded;
        match rec.state {
            TaskState::Running(cpu) if !loaded => self.effects.push(Effect::Resched(cpu)),
            TaskState::Runnable if loaded => self.kick_cpu(now, task),
            _ => {}
        }
    }

    /// sched_setaffinity: `task` may run only on `cpus` (limited to the machine's; an
    /// empty result is refused and changes nothing). Running on a CPU now excluded, it
    /// is preempted there (its CPU gets a decision, and the task is offered another);
    /// runnable, it is offered a CPU it may now use. Its scheduler reads the new set
    /// through `Ctx::affinity` at its next decision. Returns whether it changed.
    pub fn set_affinity(&mut self, now: Ns, task: TaskId, cpus: CpuSet) -> bool {
        let cpus = CpuSet(cpus.0 & CpuSet::first(self.ncpus).0);
        let Some(rec) = self.tasks.recs.get_mut(task.0 as usize) else {
            return false;
        };
        if rec.state == TaskState::Dead || cpus.is_empty() || rec.affinity == cpus {
            return false;
        }
        rec.affinity = cpus;
        match rec.state {
            TaskState::Running(cpu) if !cpus.contains(cpu) => self.effects.push(Effect::Resched(cpu)),
            TaskState::Runnable => self.kick_cpu(now, task),
            _ => {}
        }
        true
    }

    /// Whether `task`'s image is in memory (see [`Dispatcher::set_loaded`]).
    pub fn is_loaded(&self, task: TaskId) -> bool {
        self.tasks.recs.get(task.0 as usize).is_some_and(|r| !r.swapped_out)
    }

    /// The schedulers' [`Policy::swap_advice`], top-down: the ready orders concatenated
    /// (a task listed by a higher scheduler keeps that place), the resident sets joined.
    /// None when no scheduler keeps a ready order.
    pub fn swap_advice(&self) -> Option<SwapAdvice> {
        let mut out: Option<SwapAdvice> = None;
        let mut seen = std::collections::BTreeSet::new();
        for s in &self.scheds {
            if let Some(a) = s.policy.swap_advice() {
                let o = out.get_or_insert_with(SwapAdvice::default);
                o.ready.extend(a.ready.into_iter().filter(|t| seen.insert(*t)));
                o.resident.extend(a.resident);
            }
        }
        out
    }

    /// Whether some registered policy uses `on_run` ([`Policy::accounts_runs`]). While
    /// none does, [`Dispatcher::account`] tells no policy anything, and a mechanism need
    /// not account the running tasks before a wake-up.
    pub fn accounts_runs(&self) -> bool {
        self.runs
    }

    /// Accounting: `task` ran `ran` ns on `cpu`.
    pub fn account(&mut self, now: Ns, task: TaskId, cpu: CpuId, ran: Ns) {
        if self.runs && self.alive(task) {
            self.notify(task, now, |p, ctx| p.on_run(ctx, task, cpu, ran));
            self.apply_exclusive(now);
        }
    }

    /// A clock tick on `cpu`, delivered to every scheduler top-down.
    pub fn tick(&mut self, now: Ns, cpu: CpuId) {
        for idx in 0..self.scheds.len() {
            self.call(idx, now, |p, ctx| p.on_tick(ctx, cpu));
        }
        self.apply_exclusive(now);
    }

    /// A scheduler event fired. Events of schedulers no longer registered are dropped
    /// (returns false).
    pub fn fire_event(&mut self, now: Ns, sched: SchedId, token: u64) -> bool {
        let Some(idx) = self.index_of(sched) else {
            return false;
        };
        self.call(idx, now, |p, ctx| p.on_event(ctx, token));
        self.resched_idle_cpus();
        self.apply_exclusive(now);
        true
    }

    /// MessageToScheduler (paper 000 §4): a request about `task` from `from` to `sched`.
    /// Join and Leave move the task (only the task itself or root may); anything else
    /// goes to the scheduler's `on_message`.
    pub fn message(&mut self, now: Ns, sched: SchedId, from: Sender, task: TaskId, req: &Request) -> Reply {
        let Some(idx) = self.index_of(sched) else {
            return Reply::refused(format!("no scheduler {sched}"));
        };
        if !self.alive(task) {
            return Reply::refused(format!("no live task {task}"));
        }
        let reply = match req {
            Request::Join | Request::Leave => {
                if from.task != Some(task) && !from.is_root() {
                    return Reply::refused(format!("only {task} itself or root may move it"));
                }
                let target = if matches!(req, Request::Join) { idx } else { self.scheds.len() - 1 };
                self.move_task(now, task, target)
            }
            _ => self.call(idx, now, |p, ctx| p.on_message(ctx, from, task, req)),
        };
        self.resched_idle_cpus();
        self.apply_exclusive(now);
        reply
    }

    fn move_task(&mut self, now: Ns, task: TaskId, target: usize) -> Reply {
        let target_id = self.scheds[target].id;
        let old = self.tasks.recs[task.0 as usize].owner;
        if old == target_id {
            return Reply::Ok;
        }
        let default = self.scheds.len() - 1;
        let was_guest = self.tasks.recs[task.0 as usize].guest;
        if target == default && was_guest {
            // Joining the default: it already holds the task as a guest; re-attach as owner.
            self.call(default, now, |p, ctx| p.on_detach(ctx, task, Detach::Released));
            self.tasks.recs[task.0 as usize].guest = false;
        }
        // The target is the owner while it is asked, so its `on_attach` may already use
        // owner-only calls such as `Ctx::set_exclusive`; a refusal undoes it.
        self.tasks.recs[task.0 as usize].owner = target_id;
        self.tasks.recs[task.0 as usize].waiting_since = now;
        if let Err(why) = self.attach(target, task, now, false) {
            self.tasks.recs[task.0 as usize].owner = old;
            if target == default && was_guest {
                let guest = self.attach(default, task, now, true).is_ok();
                self.tasks.recs[task.0 as usize].guest = guest;
            }
            return Reply::Refused(why);
        }
        let old_idx = self.index_of(old).expect("owner is registered");
        self.call(old_idx, now, |p, ctx| p.on_detach(ctx, task, Detach::Moved));
        if target != default && !was_guest {
            // Non-exclusive to start with: the default scheduler hosts it as a guest —
            // unless the new owner marked it exclusive in `on_attach` (its last word on it).
            let wants_exclusive =
                self.pending_exclusive.iter().rev().find(|&&(by, t, _)| by == target_id && t == task).is_some_and(|&(_, _, e)| e);
            if !wants_exclusive {
                let guest = self.attach(default, task, now, true).is_ok();
                self.tasks.recs[task.0 as usize].guest = guest;
            }
        }
        match self.tasks.recs[task.0 as usize].state {
            TaskState::Running(cpu) => self.effects.push(Effect::Resched(cpu)),
            TaskState::Runnable => self.kick_cpu(now, task),
            _ => {}
        }
        Reply::Ok
    }

    // ----- decisions -----

    fn validate(&self, idx: usize, cpu: CpuId, d: Decision) -> Result<(), Refusal> {
        let rec = self.tasks.recs.get(d.task.0 as usize).ok_or(Refusal::NoSuchTask)?;
        if rec.state == TaskState::Dead {
            return Err(Refusal::NoSuchTask);
        }
        let is_default = idx == self.scheds.len() - 1;
        if rec.owner != self.scheds[idx].id && !(is_default && rec.guest) {
            return Err(Refusal::NotYours);
        }
        match rec.state {
            TaskState::Blocked | TaskState::Dead => return Err(Refusal::NotRunnable),
            TaskState::Running(c) => return Err(Refusal::RunningElsewhere(c)),
            TaskState::Runnable => {}
        }
        if !rec.affinity.contains(cpu) || rec.swapped_out {
            return Err(Refusal::NotAllowed);
        }
        if d.slice == Some(0) {
            return Err(Refusal::ZeroSlice);
        }
        Ok(())
    }

    // Inlined into `schedule` and `hand_off`, with `notify` (docs/bench.md, sixteenth round).
    #[inline(always)]
    fn start(&mut self, now: Ns, cpu: CpuId, task: TaskId, by: SchedId) -> bool {
        self.start_but(now, cpu, task, by, usize::MAX)
    }

    /// [`Dispatcher::start`] of a decision of scheduler `idx`'s `pick`: that scheduler is
    /// not told `on_dispatch` if its picks stand for it ([`Policy::dispatches_in_pick`]).
    #[inline(always)]
    fn start_picked(&mut self, now: Ns, cpu: CpuId, task: TaskId, idx: usize) -> bool {
        let slot = &self.scheds[idx];
        let skip = if slot.in_pick { idx } else { usize::MAX };
        self.start_but(now, cpu, task, slot.id, skip)
    }

    #[inline(always)]
    fn start_but(&mut self, now: Ns, cpu: CpuId, task: TaskId, by: SchedId, skip: usize) -> bool {
        let migrated = self.tasks.occupy(cpu, task, by);
        self.notify_but(task, now, skip, |p, ctx| p.on_dispatch(ctx, task, cpu));
        migrated
    }

    /// A decision point on `cpu`: the running task (if any) is preempted for `why` and the
    /// schedulers are queried top-down until one gives a valid decision. `None`: idle.
    pub fn schedule(&mut self, now: Ns, cpu: CpuId, why: Preempt) -> Option<Dispatched> {
        self.stats.decisions += 1;
        self.kicked_at[cpu.0 as usize] = None;
        let prev = self.tasks.cpus[cpu.0 as usize];
        if let Some(t) = prev {
            self.stop_running(t);
            self.tasks.recs[t.0 as usize].waiting_since = now;
            self.notify(t, now, |p, ctx| p.on_preempt(ctx, t, cpu, why));
        }
        let mut result = None;
        for idx in 0..self.scheds.len() {
            // Exclusivity asked for in an earlier callback (even an earlier pick of this
            // decision) holds before the next scheduler is asked.
            self.apply_exclusive(now);
            if self.scheds[idx].failing {
                continue;
            }
            self.stats.picks += 1;
            let Some(d) = self.call(idx, now, |p, ctx| p.pick(ctx, cpu)) else {
                continue;
            };
            match self.validate(idx, cpu, d) {
                Ok(()) => {
                    self.scheds[idx].decided += 1;
                    let by = self.scheds[idx].id;
                    let migrated = self.start_picked(now, cpu, d.task, idx);
                    result = Some(Dispatched { task: d.task, slice: d.slice, by, prev, migrated });
                    break;
                }
                Err(why) => {
                    self.stats.refused += 1;
                    self.scheds[idx].refused += 1;
                    self.call(idx, now, |p, ctx| p.on_refused(ctx, cpu, d, why));
                    let slot = &mut self.scheds[idx];
                    if slot.guard.is_some() && !slot.failing {
                        slot.failing = true;
                        let reason = format!("invalid decision ({} on {cpu}): {why}", d.task);
                        self.pending_eject.push((slot.id, reason));
                    }
                }
            }
        }
        if result.is_none() {
            self.stats.idle += 1;
        }
        self.apply_exclusive(now);
        // The preempted task is runnable again: another CPU may be free for it (not this
        // one, whose schedulers were all just asked with it runnable).
        if let Some(t) = prev.filter(|&t| self.tasks.state(t) == TaskState::Runnable) {
            self.kick_cpu_except(now, t, Some(cpu));
        }
        result
    }

    /// Go!'s `block(hand_off)`: a directed yield. `cpu` must be idle (its task just
    /// blocked); `target` runs there if it is runnable, not running and allowed. The
    /// owner is told with `on_dispatch`; no scheduler is queried.
    pub fn hand_off(&mut self, now: Ns, cpu: CpuId, target: TaskId) -> Result<Dispatched, Refusal> {
        if let Some(k) = self.kicked_at.get_mut(cpu.0 as usize) {
            *k = None;
        }
        let rec = self.tasks.recs.get(target.0 as usize).ok_or(Refusal::NoSuchTask)?;
        match rec.state {
            TaskState::Dead => return Err(Refusal::NoSuchTask),
            TaskState::Blocked => return Err(Refusal::NotRunnable),
            TaskState::Running(c) => return Err(Refusal::RunningElsewhere(c)),
            TaskState::Runnable => {}
        }
        if !rec.affinity.contains(cpu) || rec.swapped_out {
            return Err(Refusal::NotAllowed);
        }
        if self.tasks.cpus[cpu.0 as usize].is_some() {
            return Err(Refusal::RunningElsewhere(cpu));
        }
        let by = rec.owner;
        self.stats.hand_offs += 1;
        let migrated = self.start(now, cpu, target, by);
        self.apply_exclusive(now);
        Ok(Dispatched { task: target, slice: None, by, prev: None, migrated })
    }

    /// Checks the dispatcher's invariants; for tests and the simulator's debug checks.
    pub fn check_invariants(&self) -> Result<(), String> {
        let idle: CpuSet = (0..self.ncpus).map(CpuId).filter(|c| self.tasks.cpus[c.0 as usize].is_none()).collect();
        if idle != self.tasks.idle {
            return Err(format!("the idle set is {:#x}, the CPUs say {:#x}", self.tasks.idle.0, idle.0));
        }
        for (c, t) in self.tasks.cpus.iter().enumerate() {
            if let Some(t) = t {
                let st = self.tasks.state(*t);
                if st != TaskState::Running(CpuId(c as u16)) {
                    return Err(format!("cpu{c} runs {t} whose state is {st:?}"));
                }
            }
        }
        let ids: Vec<SchedId> = self.scheds.iter().map(|s| s.id).collect();
        for (i, r) in self.tasks.recs.iter().enumerate() {
            if r.state == TaskState::Dead {
                continue;
            }
            if !ids.contains(&r.owner) {
                return Err(format!("task{i} is owned by unregistered {}", r.owner));
            }
            if r.guest && r.owner == self.default_sched() {
                return Err(format!("task{i} is a guest of its own owner"));
            }
            if matches!(r.state, TaskState::Running(_)) != r.ran_by.is_some() {
                return Err(format!("task{i} is {:?} but was started by {:?}", r.state, r.ran_by));
            }
            if let TaskState::Running(c) = r.state {
                if self.tasks.cpus[c.0 as usize] != Some(TaskId(i as u32)) {
                    return Err(format!("task{i} thinks it runs on {c}, which runs {:?}", self.tasks.cpus[c.0 as usize]));
                }
            }
        }
        Ok(())
    }
}
