//! EDF: classic preemptive earliest-deadline-first scheduling of periodic tasks (Liu &
//! Layland 1973), the deadline policy beside rate-monotonic (`fps` with `rm = true`) for
//! the periodic task sets of the BVT paper's deadline comparison (paper 001 §5, issue 4).
//! The job, tie and late-job rules are stated once for all of vassal in docs/jobs.md.
//!
//! Rules:
//! - per-task parameters "period" (ns, > 0) and "deadline" (relative ns, > 0; default the
//!   period). A task without a period is background work, below every periodic task,
//!   served round robin with `quantum` (policy parameter, default 10 ms).
//! - **Jobs**: when the mechanism tells the policy a job's release and absolute deadline
//!   ([`Policy::on_job`]: the simulator's periodic tasks), that is the task's current job.
//!   Otherwise a periodic task that wakes from a voluntary sleep starts a new job, released
//!   then and due at wake time + deadline (a task attached runnable starts one at once); an
//!   involuntary block (a page fault) does not start a new job.
//! - **Dispatch**: each CPU runs the runnable task whose current job has the earliest
//!   absolute deadline, among those that may run there; among equal deadlines the
//!   earlier-released job, then the lower task id. Global EDF on several CPUs.
//! - **Preemption**: a job preempts the CPU running the latest-deadline job of ours (by the
//!   same order) only if that deadline is *strictly* later than its own — an equal
//!   deadline never preempts (SCHED_DEADLINE compares strictly) — unless a CPU it may use
//!   is idle. After every dispatch the best waiting job is checked again, so several jobs
//!   released at one instant preempt several CPUs.
//! - **Late jobs**, policy parameter `late`:
//!   - `"keep"` (default, textbook EDF): a job keeps its absolute deadline until it
//!     completes, however late; the next job of the task starts when the mechanism says
//!     so, or when the task next wakes.
//!   - `"next-period"` (vassal's rule before issue 16; an anti-domino rule, not EDF): the
//!     policy ignores the mechanism's jobs; a task still runnable at its deadline is taken
//!     to have started its next job (its deadline moves on by whole periods past now) when
//!     it stops running (slice end or preemption; the running task's slice ends at its
//!     deadline so that this is applied on time). A task waiting in the queue keeps its
//!     past deadline. In overload this reports far fewer misses than EDF would have.
//! - `Request::Param { name: "period" | "deadline" }` changes a task's parameters from its
//!   next job on.
//!
//! Cost: one ordered ready set, so wake, block, preempt and `pick` are O(log n) plus the
//! tasks a CPU's affinity passes over; the preemption check is O(CPUs).

use vassal_core::{
    AttachInfo, Block, CpuId, CpuSet, Ctx, Decision, Detach, Job, Ns, Policy, Preempt, Refusal, Reply, Request, Sender, TaskId, TaskParams,
    TaskState, Wake, MS,
};

use crate::asked::{Ask, Asked};
use crate::ordered::OrderedSet;
use crate::params::Params;
use crate::task_table::{St, Tasks, Undo};

/// A task's place in the order: (class: 0 periodic, 1 background; absolute deadline or
/// FIFO sequence; release (0 for background); task). Smaller goes first.
type Key = (u8, u64, u64, u32);

/// The part of a key a preemption compares: (class, deadline or sequence).
fn primary(k: Key) -> (u8, u64) {
    (k.0, k.1)
}

/// Whether a task allowed on `aff` may run on every CPU of the machine.
fn everywhere(ctx: &Ctx, aff: CpuSet) -> bool {
    let all = CpuSet::first(ctx.ncpus());
    aff.0 & all.0 == all.0
}

/// What happens to a job still unfinished at its deadline (module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Late {
    /// Textbook EDF: it keeps its deadline until it completes.
    Keep,
    /// vassal's rule before issue 16: it is taken to have started its next job.
    NextPeriod,
}

#[derive(Clone, Copy, Debug)]
struct Task {
    queued: Option<Key>,
    /// (period, relative deadline), None for background work.
    timing: Option<(Ns, Ns)>,
    /// The current job's release and absolute deadline.
    release: Ns,
    deadline: Ns,
    /// The mechanism has announced the job the task's next wake starts.
    announced: bool,
    seq: u64,
}

impl Task {
    fn key(&self, id: TaskId) -> Key {
        match self.timing {
            Some(_) => (0, self.deadline, self.release, id.0),
            None => (1, self.seq, 0, id.0),
        }
    }
}

/// Earliest deadline first. See the module documentation.
#[derive(Debug)]
pub struct Edf {
    quantum: Ns,
    late: Late,
    table: Tasks<Task>,
    ready: OrderedSet<Key>,
    /// Per CPU: a decision asked for and not yet made.
    asked: Asked<Key>,
    /// Whether the check after a dispatch may find work ([`Edf::check_first`]): set when
    /// a waiting job may have lost the CPU it counted on or a better job waits where it
    /// may not run; cleared when the best waiting job, allowed everywhere, preempts
    /// nothing and no CPU is asked.
    recheck: bool,
    /// Never clear `recheck`: the reference the skip is tested against.
    always_recheck: bool,
}

/// Builds an `edf` scheduler: parameters `quantum` (duration, default 10 ms) for the
/// background round robin, `late` ("keep", the default, or "next-period").
pub fn build(p: &mut Params) -> Result<Edf, String> {
    let quantum = p.duration("quantum", 10 * MS)?;
    if quantum == 0 {
        return Err("edf parameter 'quantum': must be greater than zero".into());
    }
    let late = match p.choice("late", "keep", &["keep", "next-period"])?.as_str() {
        "keep" => Late::Keep,
        _ => Late::NextPeriod,
    };
    Ok(Edf::with_late(quantum, late))
}

fn positive(task: TaskId, name: &str, v: i64) -> Result<Ns, String> {
    if v <= 0 {
        Err(format!("edf: {task} {name} {v} must be a positive number of ns"))
    } else {
        Ok(v as Ns)
    }
}

fn timing_of(task: TaskId, params: &TaskParams) -> Result<Option<(Ns, Ns)>, String> {
    let Some(&p) = params.get("period") else {
        if params.contains_key("deadline") {
            return Err(format!("edf: {task} has a deadline but no period"));
        }
        return Ok(None);
    };
    let period = positive(task, "period", p)?;
    let deadline = match params.get("deadline") {
        Some(&d) => positive(task, "deadline", d)?,
        None => period,
    };
    Ok(Some((period, deadline)))
}

impl Edf {
    /// Textbook EDF (late jobs keep their deadline).
    pub fn new(quantum: Ns) -> Self {
        Edf::with_late(quantum, Late::Keep)
    }

    pub fn with_late(quantum: Ns, late: Late) -> Self {
        Edf {
            quantum: quantum.max(1),
            late,
            table: Tasks::default(),
            ready: OrderedSet::new(),
            asked: Asked::default(),
            recheck: true,
            always_recheck: false,
        }
    }

    /// Checks the best waiting job after every dispatch, never skipping it (see
    /// `check_first`): the same decisions, more work; tests compare the two.
    pub fn checking_after_every_dispatch(mut self) -> Self {
        self.always_recheck = true;
        self
    }

    pub fn late(&self) -> Late {
        self.late
    }

    /// The current absolute deadline of a periodic task.
    pub fn deadline_of(&self, task: TaskId) -> Option<Ns> {
        self.table.get(task).filter(|t| t.timing.is_some()).map(|t| t.deadline)
    }

    /// Under `late = "next-period"`: a runnable task past its deadline has started its
    /// next job (module docs).
    fn catch_up(&mut self, id: TaskId, now: Ns) {
        if self.late != Late::NextPeriod {
            return;
        }
        let Some(t) = self.table.get_mut(id) else { return };
        if let Some((period, _)) = t.timing {
            if t.deadline <= now {
                let k = (now - t.deadline) / period + 1;
                t.deadline = t.deadline.saturating_add(k.saturating_mul(period));
            }
        }
    }

    fn set_st(&mut self, id: TaskId, st: St) {
        let Some(t) = self.table.get_mut(id) else { return };
        let was = t.queued;
        let queued = (st == St::Ready).then(|| t.key(id));
        t.st = st;
        t.queued = queued;
        if let Some(k) = was {
            self.ready.remove(&k);
        }
        if let Some(k) = queued {
            self.ready.insert(k);
        }
    }

    /// A task is ready (woken, attached, preempted, or the best waiting after a
    /// dispatch): unless a CPU already asked to decide will take it (crate::asked), take
    /// an idle CPU, or else preempt the CPU running the latest of our jobs if its
    /// deadline is strictly later than this one's. `except` is left alone.
    fn check_preempt(&mut self, ctx: &mut Ctx, id: TaskId, except: Option<CpuId>) {
        let Some(key) = self.table.get(id).map(|t| t.key(id)) else { return };
        let aff = ctx.affinity(id);
        if !everywhere(ctx, aff) {
            // It may be allowed more CPUs later without this policy being told.
            self.recheck = true;
        }
        let ready = &self.ready;
        if self.asked.served(key, aff, except, |n| ready.iter().take_while(|&&k| k < key).take(n).count()) {
            // Counted on an asked CPU a better job may take after all.
            self.recheck = true;
            return;
        }
        let mut victim: Option<(Key, CpuId)> = None;
        for c in self.asked.candidates(aff, except, ctx.ncpus()) {
            match ctx.running_on(c) {
                None => {
                    self.asked.ask(ctx, c);
                    return;
                }
                Some(r) if self.table.running_on(c) == Some(r) => {
                    if let Some(rt) = self.table.get(r) {
                        let rk = rt.key(r);
                        if primary(rk) > primary(key) && victim.is_none_or(|(vk, _)| rk > vk) {
                            victim = Some((rk, c));
                        }
                    }
                }
                Some(_) => {}
            }
        }
        if let Some((_, c)) = victim {
            self.asked.ask(ctx, c);
        }
    }

    /// The best waiting job, if any, may now preempt or take an idle CPU (after every
    /// dispatch: several jobs released at one instant preempt several CPUs).
    ///
    /// Skipped while `recheck` is clear and that job may run on every CPU, because then
    /// it cannot find anything: when `recheck` was last cleared the best waiting job
    /// preempted nothing on any CPU and no CPU was asked, so every running job was at
    /// least as good as every waiting one. Since then each new waiting job was checked
    /// when it became ready; every check that counted on an asked CPU instead of asking
    /// one set `recheck`, and so did every check of a job not allowed on every CPU (its
    /// affinity may grow, or it may be swapped in, while it waits: the policy is not
    /// told) and a job that completed and went straight on to its next without a check
    /// (`on_preempt`); each dispatch took the best waiting job the CPU allows, or set
    /// `recheck` in `pick` when a better one was not allowed there; a refused decision
    /// and an attached task set it too. So no running job is worse than a waiting one it
    /// could give way to.
    /// `except`: a CPU not to look at (the one whose dispatch is being decided in `pick`,
    /// already this job's though the mechanism does not show it yet: it is no victim, as
    /// the job just picked is at least as good as the best waiting one allowed there).
    fn check_first(&mut self, ctx: &mut Ctx, except: Option<CpuId>) {
        let Some(&(_, _, _, first)) = self.ready.first() else {
            self.recheck = self.always_recheck;
            return;
        };
        let first = TaskId(first);
        let everywhere = everywhere(ctx, ctx.affinity(first));
        if !self.recheck && everywhere {
            return;
        }
        self.check_preempt(ctx, first, except);
        if everywhere && self.asked.is_empty() && !self.always_recheck {
            self.recheck = false;
        }
    }
}

impl Policy for Edf {
    fn kind(&self) -> &str {
        "edf"
    }
    /// It never uses how long a task ran (no `on_run`).
    fn accounts_runs(&self) -> bool {
        false
    }
    /// A job picked runs from the pick (see `pick`); `on_dispatch` is for hand-offs.
    fn dispatches_in_pick(&self) -> bool {
        true
    }

    fn init(&mut self, ncpus: u16) {
        self.table.init(ncpus);
        self.asked.init(self.table.ncpus());
    }

    fn on_attach(&mut self, ctx: &mut Ctx, task: TaskId, info: &AttachInfo) -> Result<(), String> {
        crate::task_index(task)?;
        let timing = timing_of(task, info.params)?;
        let st = St::of_attach(task, info)?;
        if self.table.get(task).is_some() {
            self.on_detach(ctx, task, Detach::Moved);
        }
        let now = ctx.now();
        let deadline = timing.map_or(0, |(_, d)| now.saturating_add(d));
        let seq = self.table.tail_seq();
        self.table.insert(task, St::Blocked, Task { queued: None, timing, release: now, deadline, announced: false, seq })?;
        if let St::Running(c) = st {
            self.table.set_running(c, task);
        }
        // A job that did not come through pick may be running now (check_first).
        self.recheck = true;
        self.set_st(task, st);
        if st == St::Ready {
            self.check_preempt(ctx, task, None);
        }
        Ok(())
    }

    fn on_detach(&mut self, _ctx: &mut Ctx, task: TaskId, _why: Detach) {
        if self.table.get(task).is_none() {
            return;
        }
        self.set_st(task, St::Blocked);
        self.table.forget_cpu_refs(task);
        self.table.remove(task);
    }

    fn on_wake(&mut self, ctx: &mut Ctx, task: TaskId, wake: Wake) {
        let now = ctx.now();
        let seq = self.table.tail_seq();
        let Some(t) = self.table.get_mut(task) else { return };
        t.seq = seq;
        if let Some((_, d)) = t.timing {
            if wake.voluntary && !t.announced {
                // a new job, released now
                t.release = now;
                t.deadline = now.saturating_add(d);
            }
        }
        t.announced = false;
        self.catch_up(task, now);
        self.set_st(task, St::Ready);
        self.check_preempt(ctx, task, None);
    }

    fn on_job(&mut self, ctx: &mut Ctx, task: TaskId, job: Job) {
        if self.late == Late::NextPeriod {
            return; // the old rule works from wakes and deadlines only
        }
        let Some(t) = self.table.get(task).copied() else { return };
        if t.timing.is_none() {
            return;
        }
        let Some(slot) = self.table.get_mut(task) else { return };
        (slot.release, slot.deadline) = (job.release, job.deadline);
        slot.announced = t.st == St::Blocked;
        let new_key = slot.key(task);
        match t.st {
            // Re-keyed in the queue (set_st queues it under its new key).
            St::Ready => {
                self.set_st(task, St::Ready);
                self.check_preempt(ctx, task, None);
            }
            // Its job completed, a scheduling point: its CPU is free for the best waiting
            // job, its next job competes like any other (crate::asked).
            St::Running(c) => {
                self.asked.ask_free(ctx, c, new_key);
            }
            St::Blocked | St::Picked(_) => {}
        }
    }

    fn on_block(&mut self, _ctx: &mut Ctx, task: TaskId, _block: Block) {
        if self.table.get(task).is_none() {
            return;
        }
        self.table.forget_named_ref(task);
        self.set_st(task, St::Blocked);
    }

    fn on_dispatch(&mut self, ctx: &mut Ctx, task: TaskId, cpu: CpuId) {
        let ci = cpu.0 as usize;
        let Some(t) = self.table.get(task) else { return };
        if ci >= self.table.ncpus() || (t.st == St::Running(cpu) && self.table.running[ci] == Some(task)) {
            // Already running there since this policy picked it (`dispatches_in_pick`).
            return;
        }
        self.table.picked[ci] = None;
        self.table.forget_named_ref(task);
        self.table.running[ci] = Some(task);
        self.asked.done(cpu);
        self.set_st(task, St::Running(cpu));
        // The best waiting job may belong on another CPU (several released at once).
        self.check_first(ctx, None);
    }

    fn on_preempt(&mut self, ctx: &mut Ctx, task: TaskId, cpu: CpuId, why: Preempt) {
        if self.table.get(task).is_none() {
            return;
        }
        self.table.forget_named_ref(task);
        // Its job completed here (crate::asked): it may be picked again at once, so it
        // looks elsewhere only after this decision (the check after each dispatch).
        let completed = matches!(self.asked.get(cpu), Ask::Free(_));
        self.asked.done(cpu);
        if why != Preempt::Resched {
            let seq = self.table.tail_seq();
            if let Some(t) = self.table.get_mut(task) {
                t.seq = seq;
            }
        }
        self.catch_up(task, ctx.now());
        self.set_st(task, St::Ready);
        if ctx.ncpus() > 1 {
            if completed {
                // Not checked now: the check after this decision must run (check_first).
                self.recheck = true;
            } else {
                // Preempted here, it may preempt a later job elsewhere.
                self.check_preempt(ctx, task, Some(cpu));
            }
        }
    }

    fn on_message(&mut self, _ctx: &mut Ctx, _from: Sender, task: TaskId, req: &Request) -> Reply {
        let Request::Param { name, value } = req else {
            return Reply::refused(format!("edf does not understand {req:?}"));
        };
        let Some(t) = self.table.get(task).copied() else {
            return Reply::refused(format!("edf: {task} is not attached to this scheduler"));
        };
        let v = match positive(task, name, *value) {
            Ok(v) => v,
            Err(e) => return Reply::Refused(e),
        };
        let timing = match (name.as_str(), t.timing) {
            ("period", Some((_, d))) => (v, d),
            ("period", None) => (v, v),
            ("deadline", Some((p, _))) => (p, v),
            ("deadline", None) => return Reply::refused(format!("edf: {task} has no period; set its period first")),
            _ => return Reply::refused(format!("edf has no task parameter '{name}' (it knows: period, deadline)")),
        };
        if let Some(t) = self.table.get_mut(task) {
            t.timing = Some(timing);
        }
        Reply::Ok
    }

    fn pick(&mut self, ctx: &mut Ctx, cpu: CpuId) -> Option<Decision> {
        let ci = cpu.0 as usize;
        if ci >= self.table.ncpus() {
            return None;
        }
        self.asked.done(cpu);
        let now = ctx.now();
        loop {
            // Usually the first job may run here; else the first one that may.
            let &(class, key, _, raw) = match self.ready.first() {
                Some(k) if ctx.allowed(TaskId(k.3), cpu) => k,
                first => {
                    // A better job may not run here (see check_first).
                    self.recheck |= first.is_some();
                    self.ready.iter().find(|&&(_, _, _, t)| ctx.allowed(TaskId(t), cpu))?
                }
            };
            let id = TaskId(raw);
            match ctx.state(id) {
                TaskState::Runnable => {
                    let slice = match (class, self.table.get(id).and_then(|t| t.timing), self.late) {
                        // Textbook: a job runs until it completes or is preempted.
                        (0, _, Late::Keep) => None,
                        (0, Some((period, _)), Late::NextPeriod) if key <= now => {
                            // A late job keeps its (past) deadline while it waits, as in
                            // classic EDF; it runs until the deadline its next job would
                            // have, where `on_preempt` moves it on (module docs).
                            Some(period - (now - key) % period)
                        }
                        (0, _, Late::NextPeriod) => Some(key - now),
                        _ => Some(self.quantum),
                    };
                    // Its dispatch (`dispatches_in_pick`): it runs here from now on, and
                    // the best job left waiting may belong on another CPU (several
                    // released at once), as after any dispatch.
                    self.table.running[ci] = Some(id);
                    self.set_st(id, St::Running(cpu));
                    self.check_first(ctx, Some(cpu));
                    return Some(match slice {
                        Some(s) => Decision::run(id, s),
                        None => Decision::run_until_block(id),
                    });
                }
                TaskState::Running(c) => self.set_st(id, St::Running(c)),
                TaskState::Blocked => self.set_st(id, St::Blocked),
                TaskState::Dead => self.on_detach(ctx, id, Detach::Exit),
            }
        }
    }

    fn on_refused(&mut self, ctx: &mut Ctx, cpu: CpuId, decision: Decision, why: Refusal) {
        // Its pick took the task as running (`pick`): undone there first.
        match self.table.refused_pick(cpu, decision.task, why) {
            Undo::Forget => self.on_detach(ctx, decision.task, Detach::Moved),
            Undo::Requeue { .. } => {
                self.set_st(decision.task, St::Ready);
                self.recheck = true;
            }
            Undo::Nothing | Undo::Blocked | Undo::Running(_) => {}
        }
    }
}
