//! DBS: the deadline-based scheduler of the BVT paper's comparison (Duda & Cheriton,
//! SOSP'99, paper 001 §5).
//!
//! §5: "Under DBS, a thread requests a reservation in the form (s, t, d), requesting t
//! units of CPU between times s and d. The scheduler accepts the request if and only if it
//! is feasible to satisfy it and all previous requests accepted at that point. It then
//! runs the accepted reservations, earliest-deadline-first, distributing any leftover
//! cycles round-robin to threads without reservations."
//!
//! Rules:
//! - **Requests**: `Request::Deadline { start, need, deadline }` (absolute ns) from the
//!   task itself or root, about a task attached here, is accepted (`Reply::Ok`) or refused
//!   with the reason (`Reply::Refused`) at once, first come first served (§5.2: "FCFS
//!   handling of reservation requests"). Whether it is accepted is decided by
//!   [`admission`] alone (validation, then the exact feasibility test of the
//!   whole set); a refusal changes nothing. A task may hold several reservations.
//! - **Active reservation**: one with `start <= now < deadline` and need left. A task's
//!   current reservation is its active one with the earliest deadline.
//! - **Dispatch**: reservations are served on CPU 0 (the paper's DBS is a uniprocessor
//!   scheduler, and the admission test is for one CPU), earliest deadline first (ties:
//!   the earlier accepted), preemptively: a reservation that becomes active (a scheduler
//!   event at its start), or whose task wakes, preempts CPU 0 when its deadline is earlier
//!   than that of what runs there, or when a task without a reservation runs there. The
//!   slice is what is left of the need or the time to the deadline, whichever is less; the
//!   time the task runs under it is charged to it (a running task whose current reservation
//!   changes — it reserved while running, or an earlier deadline of its own started — is
//!   rescheduled onto it). A reservation whose need is used up, or
//!   whose deadline comes (a scheduler event), is over; its unused need is forfeited.
//! - **Leftover time**: runnable tasks without an active reservation — tasks that never
//!   reserved, tasks between reservations, and tasks whose reservation is used up — share
//!   every CPU round robin (one FIFO, a `quantum` per turn, default 10 ms): CPU 0 runs them
//!   when no reservation is due, the other CPUs first. A task preempted by a reservation
//!   keeps its place.
//! - **Other CPUs** (a multiprocessor): a CPU other than 0 with no round-robin work runs
//!   the earliest-deadline waiting reservation, charged to it, rather than idle. Service
//!   there only lowers what CPU 0 still owes, so the accepted set stays feasible.
//! - A task whose affinity excludes CPU 0 cannot reserve (refused). Leaving the scheduler
//!   drops the task's reservations.
//!
//! A task that blocks keeps its reservations (DBS cannot know it is done): admission still
//! counts their unused need until their deadline, which is how §5.1's over-predicting
//! tasks "cause the requests of others to be denied unnecessarily"; meanwhile the CPU
//! goes to the round robin.
//!
//! Cost: the EDF and round-robin queues are ordered sets, so wake, block, preempt and
//! `pick` are O(log n) (plus the tasks a CPU's affinity passes over); a request costs the
//! admission test's O(r²) for r live reservations.

pub mod admission;

use std::collections::{BTreeMap, BTreeSet};

use vassal_core::{
    AttachInfo, Block, CpuId, Ctx, Decision, Detach, Ns, Policy, Preempt, Refusal, Reply, Request, Sender, TaskId, TaskState, Wake, MS,
};

use self::admission::Demand;
use crate::params::Params;
use crate::task_table::{CpuEntry, St, Tasks, Undo};

/// The CPU reservations are served on.
pub const RESERVATION_CPU: CpuId = CpuId(0);

/// Where a ready task is queued: EDF by (deadline, reservation id), or round robin by
/// arrival sequence.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Q {
    Edf(Ns, u64),
    Rr(u64),
}

#[derive(Clone, Debug)]
struct Task {
    queued: Option<Q>,
    /// Its live reservations (ids).
    res: Vec<u64>,
    /// Its place in the round-robin FIFO.
    seq: u64,
}

/// An accepted reservation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reservation {
    pub task: TaskId,
    pub start: Ns,
    pub need: Ns,
    pub deadline: Ns,
    /// CPU time charged to it so far.
    pub used: Ns,
}

/// What runs on a CPU by this scheduler's decision, and under which reservation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Run {
    task: TaskId,
    res: Option<u64>,
}

impl CpuEntry for Run {
    fn task(&self) -> TaskId {
        self.task
    }
}

/// Deadline-based scheduling. See the module documentation.
#[derive(Debug)]
pub struct Dbs {
    quantum: Ns,
    /// The tasks, and per CPU: picked (awaiting on_dispatch) and running.
    table: Tasks<Task, Run>,
    res: BTreeMap<u64, Reservation>,
    next_res: u64,
    edf: BTreeSet<(Ns, u64, u32)>,
    rr: BTreeSet<(u64, u32)>,
}

/// Builds a `dbs` scheduler: parameter `quantum` (duration, default 10 ms) for the round
/// robin of leftover time.
pub fn build(p: &mut Params) -> Result<Dbs, String> {
    let quantum = p.duration("quantum", 10 * MS)?;
    if quantum == 0 {
        return Err("dbs parameter 'quantum': must be greater than zero".into());
    }
    Ok(Dbs::new(quantum))
}

impl Dbs {
    pub fn new(quantum: Ns) -> Self {
        Dbs {
            quantum: quantum.max(1),
            table: Tasks::default(),
            res: BTreeMap::new(),
            next_res: 0,
            edf: BTreeSet::new(),
            rr: BTreeSet::new(),
        }
    }

    /// The live reservations, in the order they were accepted.
    pub fn reservations(&self) -> Vec<Reservation> {
        self.res.values().copied().collect()
    }

    /// The task's current reservation at `now`: active, need left, earliest deadline.
    fn current(&self, id: TaskId, now: Ns) -> Option<(Ns, u64)> {
        let t = self.table.get(id)?;
        t.res
            .iter()
            .filter_map(|r| self.res.get(r).map(|v| (r, v)))
            .filter(|(_, v)| v.start <= now && now < v.deadline && v.used < v.need)
            .map(|(&r, v)| (v.deadline, r))
            .min()
    }

    /// Puts the task in the queue its state and reservations call for (or none).
    fn sync(&mut self, id: TaskId, now: Ns) {
        let Some(t) = self.table.get(id) else { return };
        let want = if t.st == St::Ready {
            Some(match self.current(id, now) {
                Some((d, r)) => Q::Edf(d, r),
                None => Q::Rr(t.seq),
            })
        } else {
            None
        };
        let had = t.queued;
        if had == want {
            return;
        }
        match had {
            Some(Q::Edf(d, r)) => {
                self.edf.remove(&(d, r, id.0));
            }
            Some(Q::Rr(s)) => {
                self.rr.remove(&(s, id.0));
            }
            None => {}
        }
        match want {
            Some(Q::Edf(d, r)) => {
                self.edf.insert((d, r, id.0));
            }
            Some(Q::Rr(s)) => {
                self.rr.insert((s, id.0));
            }
            None => {}
        }
        if let Some(t) = self.table.get_mut(id) {
            t.queued = want;
        }
    }

    fn set_st(&mut self, id: TaskId, st: St, now: Ns) {
        if let Some(t) = self.table.get_mut(id) {
            t.st = st;
        }
        self.sync(id, now);
    }

    /// The EDF key of what runs on the reservation CPU by our decision (None: a task
    /// without a reservation, or nothing of ours).
    fn running_key(&self) -> Option<(Ns, u64)> {
        let run = self.table.running_on(RESERVATION_CPU)?;
        let r = run.res?;
        self.res.get(&r).map(|v| (v.deadline, r))
    }

    /// Preemption: the earliest ready reservation beats what CPU 0 runs; otherwise an idle
    /// CPU (not `deciding`, which is about to pick) may take it.
    fn check_edf_except(&mut self, ctx: &mut Ctx, deciding: CpuId) {
        let Some(&(d, r, t)) = self.edf.first() else { return };
        crate::rr::kick_idle(ctx, TaskId(t), deciding);
        let cpu0 = RESERVATION_CPU;
        let ours_or_idle = match ctx.running_on(cpu0) {
            None => true,
            Some(t) => self.table.running_on(cpu0).is_some_and(|run| run.task == t),
        };
        if !ours_or_idle {
            return; // a higher scheduler's task runs there; it has precedence
        }
        let beats = match self.running_key() {
            None => true,
            Some(k) => (d, r) < k,
        };
        if beats {
            let _ = ctx.resched(cpu0);
        }
    }

    /// A running task whose current reservation is not the one it runs under (it reserved
    /// while running unreserved, or a reservation of it with an earlier deadline started)
    /// is rescheduled, so that it is run — on CPU 0 — and charged under its current
    /// reservation from now on.
    fn promote_running(&mut self, ctx: &mut Ctx, task: TaskId) {
        let now = ctx.now();
        let Some((_, cur)) = self.current(task, now) else { return };
        let on = self.table.running.iter().position(|r| r.is_some_and(|r| r.task == task && r.res != Some(cur)));
        if let Some(c) = on {
            let _ = ctx.resched(CpuId(c as u16));
        }
    }

    fn check_edf(&mut self, ctx: &mut Ctx) {
        self.check_edf_except(ctx, RESERVATION_CPU);
    }

    fn event_tokens(id: u64) -> (u64, u64) {
        (id << 1, (id << 1) | 1)
    }

    /// Ends a reservation (used up, deadline passed, task gone).
    fn end_reservation(&mut self, ctx: &mut Ctx, id: u64) {
        let Some(v) = self.res.remove(&id) else { return };
        let (s, d) = Self::event_tokens(id);
        ctx.cancel_event(s);
        ctx.cancel_event(d);
        if let Some(t) = self.table.get_mut(v.task) {
            t.res.retain(|&r| r != id);
        }
        self.sync(v.task, ctx.now());
    }

    fn request(&mut self, ctx: &mut Ctx, from: Sender, task: TaskId, start: Ns, need: Ns, deadline: Ns) -> Reply {
        if self.table.get(task).is_none() {
            return Reply::refused(format!("dbs: {task} is not attached to this scheduler"));
        }
        if from.task != Some(task) && !from.is_root() {
            return Reply::refused(format!("dbs: only {task} itself or root may reserve for it"));
        }
        if !ctx.allowed(task, RESERVATION_CPU) {
            return Reply::refused(format!("dbs: {task} may not run on {RESERVATION_CPU}, where reservations are served"));
        }
        let now = ctx.now();
        let set: Vec<Demand> = self.res.values().map(|v| Demand { start: v.start, need: v.need - v.used, deadline: v.deadline }).collect();
        if let Err(why) = admission::admit(now, &set, Demand { start, need, deadline }) {
            return Reply::Refused(format!("dbs: reservation ({start} ns, {need} ns, {deadline} ns) refused: {why}"));
        }
        let id = self.next_res;
        self.next_res += 1;
        self.res.insert(id, Reservation { task, start, need, deadline, used: 0 });
        if let Some(t) = self.table.get_mut(task) {
            t.res.push(id);
        }
        let (s_tok, d_tok) = Self::event_tokens(id);
        if start > now {
            let _ = ctx.set_event(start, s_tok);
        }
        let _ = ctx.set_event(deadline, d_tok);
        self.sync(task, now);
        self.promote_running(ctx, task);
        self.check_edf(ctx);
        Reply::Ok
    }
}

impl Policy for Dbs {
    fn kind(&self) -> &str {
        "dbs"
    }

    fn init(&mut self, ncpus: u16) {
        self.table.init(ncpus);
    }

    fn on_attach(&mut self, ctx: &mut Ctx, task: TaskId, info: &AttachInfo) -> Result<(), String> {
        crate::task_index(task)?;
        let st = St::of_attach(task, info)?;
        if self.table.get(task).is_some() {
            self.on_detach(ctx, task, Detach::Moved);
        }
        let seq = self.table.tail_seq();
        self.table.insert(task, st, Task { queued: None, res: Vec::new(), seq })?;
        if let St::Running(c) = st {
            self.table.set_running(c, Run { task, res: None });
        }
        self.sync(task, ctx.now());
        Ok(())
    }

    fn on_detach(&mut self, ctx: &mut Ctx, task: TaskId, _why: Detach) {
        let Some(t) = self.table.get(task) else { return };
        for id in t.res.clone() {
            self.end_reservation(ctx, id);
        }
        self.set_st(task, St::Blocked, ctx.now());
        self.table.forget_cpu_refs(task);
        self.table.remove(task);
    }

    fn on_wake(&mut self, ctx: &mut Ctx, task: TaskId, _wake: Wake) {
        let seq = self.table.tail_seq();
        let Some(t) = self.table.get_mut(task) else { return };
        t.seq = seq;
        self.set_st(task, St::Ready, ctx.now());
        if matches!(self.table.get(task).and_then(|t| t.queued), Some(Q::Edf(..))) {
            self.check_edf(ctx);
        } else {
            crate::rr::kick_idle(ctx, task, CpuId(u16::MAX));
        }
    }

    fn on_block(&mut self, ctx: &mut Ctx, task: TaskId, _block: Block) {
        if self.table.get(task).is_none() {
            return;
        }
        self.set_st(task, St::Blocked, ctx.now());
        self.table.forget_cpu_refs(task);
    }

    fn on_dispatch(&mut self, ctx: &mut Ctx, task: TaskId, cpu: CpuId) {
        let ci = cpu.0 as usize;
        if ci >= self.table.ncpus() || self.table.get(task).is_none() {
            return;
        }
        let run = self.table.picked[ci].take().filter(|r| r.task == task).unwrap_or(Run { task, res: None });
        self.table.forget_cpu_refs(task);
        self.table.running[ci] = Some(run);
        self.set_st(task, St::Running(cpu), ctx.now());
        // Work conservation: another idle CPU may take the next task of the round robin.
        if let Some(&(_, next)) = self.rr.first() {
            crate::rr::kick_idle(ctx, TaskId(next), cpu);
        }
    }

    fn on_preempt(&mut self, ctx: &mut Ctx, task: TaskId, cpu: CpuId, why: Preempt) {
        if self.table.get(task).is_none() {
            return;
        }
        self.table.clear_running(cpu, task);
        // A used-up turn or a yield goes to the tail; a task preempted (by a reservation)
        // keeps its place.
        if why != Preempt::Resched {
            let seq = self.table.tail_seq();
            if let Some(t) = self.table.get_mut(task) {
                t.seq = seq;
            }
        }
        self.set_st(task, St::Ready, ctx.now());
        if cpu != RESERVATION_CPU {
            self.check_edf_except(ctx, cpu);
        }
    }

    fn on_run(&mut self, ctx: &mut Ctx, task: TaskId, cpu: CpuId, ran: Ns) {
        let Some(run) = self.table.running_on(cpu) else { return };
        if run.task != task {
            return;
        }
        let Some(id) = run.res else { return };
        let Some(v) = self.res.get_mut(&id) else { return };
        v.used = v.used.saturating_add(ran).min(v.need);
        if v.used >= v.need {
            self.end_reservation(ctx, id);
        }
    }

    fn on_event(&mut self, ctx: &mut Ctx, token: u64) {
        let id = token >> 1;
        let Some(v) = self.res.get(&id).copied() else { return };
        if token & 1 == 0 {
            // Its start: the reservation becomes active.
            self.sync(v.task, ctx.now());
            self.promote_running(ctx, v.task);
            self.check_edf(ctx);
        } else {
            // Its deadline: over, whatever is left of the need is forfeited.
            let under = self.table.running.iter().position(|r| r.is_some_and(|r| r.res == Some(id)));
            self.end_reservation(ctx, id);
            if let Some(c) = under {
                self.table.running[c] = Some(Run { task: v.task, res: None });
                let _ = ctx.resched(CpuId(c as u16));
            }
            self.check_edf(ctx);
        }
    }

    fn on_message(&mut self, ctx: &mut Ctx, from: Sender, task: TaskId, req: &Request) -> Reply {
        match *req {
            Request::Deadline { start, need, deadline } => self.request(ctx, from, task, start, need, deadline),
            _ => Reply::refused(format!("dbs does not understand {req:?}")),
        }
    }

    fn pick(&mut self, ctx: &mut Ctx, cpu: CpuId) -> Option<Decision> {
        let ci = cpu.0 as usize;
        if ci >= self.table.ncpus() {
            return None;
        }
        let now = ctx.now();
        loop {
            let edf = self.edf.iter().find(|&&(_, _, t)| ctx.allowed(TaskId(t), cpu)).copied();
            let rr = self.rr.iter().find(|&&(_, t)| ctx.allowed(TaskId(t), cpu)).copied();
            // CPU 0: reservations first; other CPUs: the round robin first.
            let take_edf = match (edf, rr) {
                (Some(_), Some(_)) => cpu == RESERVATION_CPU,
                (Some(_), None) => true,
                (None, Some(_)) => false,
                (None, None) => return None,
            };
            let (id, run, slice) = match (take_edf, edf, rr) {
                (true, Some((d, r, t)), _) => {
                    let v = self.res[&r];
                    (TaskId(t), Run { task: TaskId(t), res: Some(r) }, (v.need - v.used).min(d - now))
                }
                (_, _, Some((_, t))) => (TaskId(t), Run { task: TaskId(t), res: None }, self.quantum),
                _ => return None,
            };
            match ctx.state(id) {
                TaskState::Runnable => {
                    self.table.picked[ci] = Some(run);
                    self.set_st(id, St::Picked(cpu), now);
                    return Some(Decision::run(id, slice));
                }
                // A stale entry: repair it and look again.
                TaskState::Running(c) => self.set_st(id, St::Running(c), now),
                TaskState::Blocked => self.set_st(id, St::Blocked, now),
                TaskState::Dead => {
                    self.on_detach(ctx, id, Detach::Exit);
                }
            }
        }
    }

    fn on_refused(&mut self, ctx: &mut Ctx, cpu: CpuId, decision: Decision, why: Refusal) {
        match self.table.refused(cpu, decision.task, why) {
            Undo::Forget => self.on_detach(ctx, decision.task, Detach::Moved),
            Undo::Requeue { .. } => self.set_st(decision.task, St::Ready, ctx.now()),
            Undo::Nothing | Undo::Blocked | Undo::Running(_) => {}
        }
    }
}
