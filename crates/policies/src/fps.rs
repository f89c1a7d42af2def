//! Fixed-priority preemptive scheduling (FPS): the fixed-priority baseline the BVT paper
//! compares against (paper 001 §5.1, "a fixed-priority scheduler (FPS)"), with optional
//! rate-monotonic priority assignment (Liu & Layland).
//!
//! Rules:
//! - per-task parameter "priority" (an integer, default 0): a larger number is more
//!   important. (The BVT paper numbers priorities the other way: its "priority 1
//!   (highest)" is the largest number here.)
//! - policy parameter `rm` (default false): rate-monotonic assignment instead. The
//!   priority comes from the task parameter "period" (ns, > 0): the shorter the period,
//!   the higher the priority. Equal periods are one priority (docs/jobs.md): an equal
//!   period never preempts a running job, and among the waiting ones (without a
//!   `quantum`) the earlier-released job goes first, then the lower task id. A job's
//!   release is what the mechanism tells ([`Policy::on_job`]), else its wake time. Tasks
//!   without a period share one level below every periodic task.
//! - a CPU runs the highest-priority runnable task that may run there; within one level
//!   tasks are served first in, first out;
//! - policy parameter `quantum` (default none): with a quantum, tasks of equal priority
//!   share the CPU round robin (slice expired -> tail of its level); without one a task
//!   runs until it blocks, yields or is preempted;
//! - preemption: when a task wakes up, is attached runnable, or has its priority raised,
//!   and it is more important than the least important task of this scheduler running on
//!   a CPU it may use (and no such CPU is idle), that CPU is asked to reschedule;
//! - a task preempted by a reschedule goes back to the head of its level (keeping the
//!   rest of its quantum); one whose slice expired, or that yielded, to the tail;
//! - `Request::Param { name: "priority" }` (or "period" under `rm`) changes a task's
//!   priority at once, with the same preemption check; a lowered running task is
//!   preempted if a more important one is waiting.
//!
//! Multi-CPU: it is global FPS. A preempted task, or the head of the ready queue after a
//! dispatch, may in turn preempt a less important task (or take an idle CPU) elsewhere.
//!
//! Cost: the ready queue is one FIFO per priority level (an intrusive doubly linked list
//! over a vector indexed by task id) in a priority array (crate::levels, as Linux's
//! rt.c: a level per rank some attached task has, and a bitmap of the non-empty ones),
//! so wake, block, preempt and `pick` cost O(log L) for L distinct priorities (a binary
//! search, no allocation) and O(1) within a level; `pick` walks past tasks whose affinity
//! excludes the CPU. A rank's level is made when its first task attaches and goes with
//! its last (O(L)). The preemption check is O(number of CPUs).

use std::cmp::Reverse;

use vassal_core::{
    AttachInfo, Block, CpuId, CpuSet, Ctx, Decision, Detach, Job, Ns, Policy, Preempt, Refusal, Reply, Request, Sender, TaskId, TaskParams,
    TaskState, Wake,
};

use crate::asked::{Ask, Asked};
use crate::levels::{Ends, Levels, NIL};
use crate::task_table::{Slot, St, Tasks, Undo};

/// A task's rank: smaller is more important. (priority, tie-break).
type Rank = (Reverse<i64>, u32);
/// A job's place in the order under `rm` (without a quantum): (rank, release, task).
type Order = (Rank, Ns, u32);

/// A task's rank, and its place in its level's FIFO (while `Ready`).
#[derive(Clone, Copy, Debug)]
struct Node {
    rank: Rank,
    /// The index of its rank's level in `levels` (kept in step as levels come and go).
    level: u32,
    prev: u32,
    next: u32,
    /// Time used of the current quantum.
    used: Ns,
    /// Its current job's release (under `rm`, the order among equal periods).
    release: Ns,
    /// The mechanism announced the job the task's next wake starts.
    announced: bool,
}

/// A node's level before it has one (while it is attached).
const NO_LEVEL: u32 = u32::MAX;

/// The rank of tasks without a period under rate-monotonic assignment.
const NO_PERIOD: Rank = (Reverse(i64::MIN), u32::MAX);

/// Fixed-priority preemptive scheduling. See the module documentation.
#[derive(Debug)]
pub struct FixedPriority {
    rm: bool,
    quantum: Option<Ns>,
    /// The tasks, and per CPU this scheduler's task running there.
    table: Tasks<Node>,
    /// The ready queue: one FIFO per rank of an attached task, most important first.
    levels: Levels<Rank>,
    /// Per CPU: a decision asked for and not yet made.
    asked: Asked<Order>,
}

impl FixedPriority {
    /// `rm`: rate-monotonic priorities from "period"; `quantum`: round robin among equal
    /// priorities (None: run until block or preemption; Some(0) is taken as 1ns).
    pub fn new(rm: bool, quantum: Option<Ns>) -> Self {
        FixedPriority {
            rm,
            quantum: quantum.map(|q| q.max(1)),
            table: Tasks::default(),
            levels: Levels::default(),
            asked: Asked::default(),
        }
    }

    pub fn rate_monotonic(&self) -> bool {
        self.rm
    }
    pub fn quantum(&self) -> Option<Ns> {
        self.quantum
    }

    /// The effective priority of an attached task (under `rm`, minus its period; tasks
    /// without a period: `i64::MIN`).
    pub fn priority_of(&self, task: TaskId) -> Option<i64> {
        self.node(task).map(|n| n.rank.0 .0)
    }

    /// The ready queue, most important first (O(n); for tests and reports).
    pub fn queue(&self) -> Vec<TaskId> {
        let mut out = Vec::new();
        for lvl in self.levels.queued() {
            let mut i = lvl.head;
            while i != NIL {
                out.push(TaskId(i));
                i = self.n(i).next;
            }
        }
        out
    }

    /// How many tasks are queued ahead of `task` (counting at most `n`).
    fn queued_before(&self, task: TaskId, n: usize) -> usize {
        let mut count = 0;
        for lvl in self.levels.queued() {
            let mut i = lvl.head;
            while i != NIL {
                if i == task.0 || count == n {
                    return count;
                }
                count += 1;
                i = self.n(i).next;
            }
        }
        count
    }

    /// The most important queued task, if any.
    fn first_ready(&self) -> Option<TaskId> {
        self.levels.first().map(|l| TaskId(l.head))
    }

    fn node(&self, task: TaskId) -> Option<&Slot<Node>> {
        self.table.get(task)
    }

    /// The node of a task known to be attached (queue links only name attached tasks).
    fn n(&self, i: u32) -> &Slot<Node> {
        self.table.get(TaskId(i)).expect("a queued task is attached")
    }

    fn n_mut(&mut self, i: u32) -> &mut Slot<Node> {
        self.table.get_mut(TaskId(i)).expect("a queued task is attached")
    }

    fn rank_for(&self, _task: TaskId, prio: i64) -> Rank {
        (Reverse(prio), 0)
    }

    /// Under `rm` without a quantum, a level is ordered by (release, task id).
    fn by_release(&self) -> bool {
        self.rm && self.quantum.is_none()
    }

    /// A task's order within its level under [`Self::by_release`].
    fn order(&self, i: u32) -> (Ns, u32) {
        (self.n(i).release, i)
    }

    /// The rank a task's parameters give it, or why they are refused.
    fn rank_from_params(&self, task: TaskId, params: &TaskParams) -> Result<Rank, String> {
        if self.rm {
            match params.get("period") {
                None => Ok(NO_PERIOD),
                Some(&p) => self.rank_from_period(task, p),
            }
        } else {
            Ok(self.rank_for(task, params.get("priority").copied().unwrap_or(0)))
        }
    }

    fn rank_from_period(&self, task: TaskId, period: i64) -> Result<Rank, String> {
        if period <= 0 {
            Err(format!("fps: {task} period {period} must be a positive number of ns"))
        } else {
            Ok(self.rank_for(task, -period))
        }
    }

    /// Queues `i` at the head or the tail of its level (under [`Self::by_release`]: in
    /// its place by (release, task id)).
    fn enqueue(&mut self, i: u32, at_head: bool) {
        let k = self.n(i).level as usize;
        let Ends { head, tail } = self.levels.ends(k);
        if self.by_release() && head != NIL {
            // Walk back from the tail past the later ones (usually none).
            let me = self.order(i);
            let mut after = tail;
            while after != NIL && self.order(after) > me {
                after = self.n(after).prev;
            }
            if after != NIL {
                let next = self.n(after).next;
                self.n_mut(after).next = i;
                if next == NIL {
                    self.levels.set_ends(k, Ends { head, tail: i });
                } else {
                    self.n_mut(next).prev = i;
                }
                let n = self.n_mut(i);
                (n.prev, n.next) = (after, next);
                n.st = St::Ready;
                return;
            }
            return self.enqueue_at(i, k, head, tail, true);
        }
        self.enqueue_at(i, k, head, tail, at_head)
    }

    fn enqueue_at(&mut self, i: u32, k: usize, head: u32, tail: u32, at_head: bool) {
        let (ends, links) = if head == NIL {
            (Ends { head: i, tail: i }, (NIL, NIL))
        } else if at_head {
            self.n_mut(head).prev = i;
            (Ends { head: i, tail }, (NIL, head))
        } else {
            self.n_mut(tail).next = i;
            (Ends { head, tail: i }, (tail, NIL))
        };
        self.levels.set_ends(k, ends);
        let n = self.n_mut(i);
        (n.prev, n.next) = links;
        n.st = St::Ready;
    }

    /// Takes queued `i` out of its level's FIFO.
    fn unlink(&mut self, i: u32) {
        let Node { prev, next, level, .. } = **self.n(i);
        let k = level as usize;
        let mut ends = self.levels.ends(k);
        if prev == NIL {
            ends.head = next;
        }
        if next == NIL {
            ends.tail = prev;
        }
        self.levels.set_ends(k, ends);
        if prev != NIL {
            self.n_mut(prev).next = next;
        }
        if next != NIL {
            self.n_mut(next).prev = prev;
        }
        let n = self.n_mut(i);
        (n.prev, n.next) = (NIL, NIL);
    }

    /// Sets the state of `i`: out of the ready queue and off its CPU first.
    fn set(&mut self, i: u32, st: St) {
        let old = self.n(i).st;
        match old {
            St::Ready => self.unlink(i),
            St::Running(c) if self.table.clear_running(c, TaskId(i)) => self.asked.done(c),
            _ => {}
        }
        self.n_mut(i).st = st;
        match st {
            St::Running(c) => {
                if (c.0 as usize) < self.table.ncpus() {
                    self.table.set_running(c, TaskId(i));
                    self.asked.done(c);
                }
            }
            St::Picked(_) | St::Ready | St::Blocked => {}
        }
    }

    /// After a dispatch on `cpu`: the head of the ready queue may in turn preempt a less
    /// important task (or take an idle CPU) elsewhere.
    fn check_after_dispatch(&mut self, ctx: &mut Ctx, cpu: CpuId) {
        if ctx.ncpus() > 1 {
            if let Some(first) = self.first_ready() {
                self.preempt_check(ctx, first, Some(cpu), true);
            }
        }
    }

    /// Takes `task` off its queue and CPU, and forgets it.
    fn forget(&mut self, task: TaskId) {
        if let Some(n) = self.node(task) {
            let rank = n.rank;
            self.set(task.0, St::Blocked);
            self.table.remove(task);
            self.leave_level(rank);
        }
    }

    /// If `task` (ready) is more important than the least important task of this
    /// scheduler running on a CPU it may use (other than `except`), asks that CPU to
    /// reschedule. If such a CPU is idle instead, nothing is preempted (with `kick_idle`,
    /// the idle CPU is asked to decide).
    fn preempt_check(&mut self, ctx: &mut Ctx, task: TaskId, except: Option<CpuId>, kick_idle: bool) {
        let Some(r) = self.node(task).map(|n| n.rank) else { return };
        let aff = ctx.affinity(task);
        // The CPU first, then whether an asked one serves the task anyway: both only read,
        // and most checks find no CPU, so the count of tasks queued ahead is mostly skipped.
        let Some(c) = self.cpu_to_ask(ctx, r, aff, except, kick_idle) else { return };
        if !self.asked.served((r, self.n(task.0).release, task.0), aff, except, |n| self.queued_before(task, n)) {
            self.asked.ask(ctx, c);
        }
    }

    /// The CPU a ready task of rank `r` would ask to decide: the first idle one it may use
    /// (only with `kick_idle`: an idle CPU it may use means no preemption either), or else
    /// the one running the least important task of this scheduler, by rank, then
    /// (release, task id), if that rank is below `r`. CPUs asked already and `except` are
    /// passed over.
    fn cpu_to_ask(&self, ctx: &Ctx, r: Rank, aff: CpuSet, except: Option<CpuId>, kick_idle: bool) -> Option<CpuId> {
        let mut victim: Option<(CpuId, (Rank, Ns, u32))> = None;
        for c in self.asked.candidates(aff, except, ctx.ncpus()) {
            match self.table.running_on(c) {
                Some(t) => {
                    let rt = self.node(t).map_or((NO_PERIOD, 0, t.0), |n| (n.rank, n.release, t.0));
                    if rt.0 > r && !matches!(victim, Some((_, v)) if v >= rt) {
                        victim = Some((c, rt));
                    }
                }
                None if ctx.running_on(c).is_none() => return kick_idle.then_some(c),
                // Another scheduler's task: not this policy's to preempt.
                None => {}
            }
        }
        victim.map(|(c, _)| c)
    }

    /// Gives unqueued `i` a new rank (and moves it to that rank's level).
    fn rerank(&mut self, i: u32, rank: Rank) {
        let old = std::mem::replace(&mut self.n_mut(i).rank, rank);
        self.join_level(rank);
        self.leave_level(old);
        self.n_mut(i).level = self.level_of(rank);
    }

    /// The level of `rank`, which an attached task has.
    fn level_of(&self, rank: Rank) -> u32 {
        self.levels.index(rank).expect("an attached task's rank has a level") as u32
    }

    /// One more task has `rank`: a new level shifts the indices tasks keep.
    fn join_level(&mut self, rank: Rank) {
        if let Some(k) = self.levels.add_user(rank) {
            for (_, n) in self.table.iter_mut() {
                if n.level >= k as u32 && n.level != NO_LEVEL {
                    n.level += 1;
                }
            }
        }
    }

    /// One task less has `rank`: a level gone shifts the indices tasks keep.
    fn leave_level(&mut self, rank: Rank) {
        if let Some(k) = self.levels.remove_user(rank) {
            for (_, n) in self.table.iter_mut() {
                if n.level > k as u32 && n.level != NO_LEVEL {
                    n.level -= 1;
                }
            }
        }
    }

    /// After the rank of `task` changed: requeue it and check preemption both ways.
    fn reprioritize(&mut self, ctx: &mut Ctx, task: TaskId, rank: Rank) {
        let i = task.0;
        match self.n(i).st {
            St::Ready => {
                self.set(i, St::Blocked);
                self.rerank(i, rank);
                self.enqueue(i, false);
                self.preempt_check(ctx, task, None, false);
            }
            _ => {
                self.rerank(i, rank);
                // A running task may have become less important than a waiting one.
                if let Some(first) = self.first_ready() {
                    self.preempt_check(ctx, first, None, false);
                }
            }
        }
    }
}

impl Policy for FixedPriority {
    fn kind(&self) -> &str {
        "fps"
    }
    /// Only the quantum needs how long a task ran.
    fn accounts_runs(&self) -> bool {
        self.quantum.is_some()
    }
    /// A task picked runs from the pick (see `pick`); `on_dispatch` is for hand-offs.
    fn dispatches_in_pick(&self) -> bool {
        true
    }

    fn init(&mut self, ncpus: u16) {
        self.table.init(ncpus);
        self.asked.init(self.table.ncpus());
    }

    fn on_attach(&mut self, ctx: &mut Ctx, task: TaskId, info: &AttachInfo) -> Result<(), String> {
        crate::task_index(task)?;
        let rank = self.rank_from_params(task, info.params)?;
        let st = St::of_attach(task, info)?;
        self.forget(task);
        let release = ctx.now();
        self.table.insert(task, St::Blocked, Node { rank, level: NO_LEVEL, prev: NIL, next: NIL, used: 0, release, announced: false })?;
        self.join_level(rank);
        self.n_mut(task.0).level = self.level_of(rank);
        match st {
            St::Ready => {
                self.enqueue(task.0, false);
                self.preempt_check(ctx, task, None, false);
            }
            St::Running(c) => self.set(task.0, St::Running(c)),
            St::Blocked | St::Picked(_) => self.set(task.0, St::Blocked),
        }
        Ok(())
    }

    fn on_detach(&mut self, _ctx: &mut Ctx, task: TaskId, _why: Detach) {
        self.forget(task);
    }

    fn on_wake(&mut self, ctx: &mut Ctx, task: TaskId, _wake: Wake) {
        if self.node(task).map(|n| n.st) == Some(St::Blocked) {
            let now = ctx.now();
            let n = self.n_mut(task.0);
            n.used = 0;
            if !std::mem::take(&mut n.announced) {
                n.release = now;
            }
            self.enqueue(task.0, false);
            self.preempt_check(ctx, task, None, false);
        }
    }

    fn on_job(&mut self, ctx: &mut Ctx, task: TaskId, job: Job) {
        let Some(n) = self.node(task).copied() else { return };
        let m = self.n_mut(task.0);
        m.release = job.release;
        m.announced = n.st == St::Blocked;
        if !self.by_release() {
            return;
        }
        match n.st {
            // Its place among equals moves (a backlogged task's next job).
            St::Ready => {
                self.unlink(task.0);
                self.enqueue(task.0, false);
            }
            // Its job completed, a scheduling point: its CPU is free for the most
            // important waiting job; its next job competes like any other (crate::asked).
            St::Running(c) => self.asked.ask_free(ctx, c, (n.rank, job.release, task.0)),
            St::Blocked | St::Picked(_) => {}
        }
    }

    fn on_block(&mut self, _ctx: &mut Ctx, task: TaskId, _block: Block) {
        if self.node(task).is_some() {
            self.n_mut(task.0).used = 0;
            self.set(task.0, St::Blocked);
        }
    }

    fn on_dispatch(&mut self, ctx: &mut Ctx, task: TaskId, cpu: CpuId) {
        match self.node(task) {
            // Already running there since this policy picked it (`dispatches_in_pick`).
            Some(n) if n.st == St::Running(cpu) => return,
            Some(_) => self.set(task.0, St::Running(cpu)),
            None => {}
        }
        self.check_after_dispatch(ctx, cpu);
    }

    fn on_preempt(&mut self, ctx: &mut Ctx, task: TaskId, cpu: CpuId, why: Preempt) {
        let Some(n) = self.node(task).copied() else { return };
        if matches!(n.st, St::Ready | St::Blocked) {
            return;
        }
        let keep = why == Preempt::Resched && !matches!(self.quantum, Some(q) if n.used >= q);
        if !keep {
            self.n_mut(task.0).used = 0;
        }
        // Its job completed here (crate::asked): it may be picked again at once, so it
        // looks elsewhere only after this decision (the check after each dispatch).
        let completed = matches!(self.asked.get(cpu), Ask::Free(_));
        // Off its CPU (keeping its level, which it rejoins at once), then queued.
        self.set(task.0, St::Picked(cpu));
        self.enqueue(task.0, keep);
        self.asked.done(cpu);
        if ctx.ncpus() > 1 && !completed {
            self.preempt_check(ctx, task, Some(cpu), true);
        }
    }

    fn on_run(&mut self, _ctx: &mut Ctx, task: TaskId, _cpu: CpuId, ran: Ns) {
        if let Some(n) = self.table.get_mut(task) {
            n.used = n.used.saturating_add(ran);
        }
    }

    fn on_message(&mut self, ctx: &mut Ctx, _from: Sender, task: TaskId, req: &Request) -> Reply {
        let Request::Param { name, value } = req else {
            return Reply::refused(format!("fps does not understand {req:?}"));
        };
        if self.node(task).is_none() {
            return Reply::refused(format!("fps: {task} is not attached to this scheduler"));
        }
        let rank = match (name.as_str(), self.rm) {
            ("priority", false) => self.rank_for(task, *value),
            ("period", true) => match self.rank_from_period(task, *value) {
                Ok(r) => r,
                Err(why) => return Reply::Refused(why),
            },
            ("priority", true) => return Reply::refused("fps with rm = true takes priorities from 'period', not 'priority'"),
            ("period", false) => return Reply::refused("fps: 'period' is only used with rm = true; set 'priority'"),
            _ => return Reply::refused(format!("fps has no task parameter '{name}' (it knows: priority, period)")),
        };
        self.reprioritize(ctx, task, rank);
        Reply::Ok
    }

    fn pick(&mut self, ctx: &mut Ctx, cpu: CpuId) -> Option<Decision> {
        self.asked.done(cpu);
        loop {
            // The first ready task allowed here; a task the dispatcher sees otherwise
            // (a missed notification) is repaired and the walk restarts.
            let mut repair = None;
            let mut found = None;
            'levels: for lvl in self.levels.queued() {
                let mut i = lvl.head;
                while i != NIL {
                    let task = TaskId(i);
                    if ctx.allowed(task, cpu) {
                        match ctx.state(task) {
                            TaskState::Runnable => found = Some(i),
                            st => repair = Some((i, st)),
                        }
                        break 'levels;
                    }
                    i = self.n(i).next;
                }
            }
            if let Some(i) = found {
                // Its dispatch (`dispatches_in_pick`): it runs here from now on.
                self.set(i, St::Running(cpu));
                self.check_after_dispatch(ctx, cpu);
                let used = self.n(i).used;
                let task = TaskId(i);
                return Some(match self.quantum {
                    Some(q) => Decision::run(task, q.saturating_sub(used).max(1)),
                    None => Decision::run_until_block(task),
                });
            }
            match repair? {
                (i, TaskState::Running(c)) => self.set(i, St::Running(c)),
                (i, TaskState::Dead) => self.forget(TaskId(i)),
                (i, _) => self.set(i, St::Blocked),
            }
        }
    }

    fn on_refused(&mut self, _ctx: &mut Ctx, cpu: CpuId, decision: Decision, why: Refusal) {
        let task = decision.task;
        let i = task.0;
        // Its pick took the task as running (`pick`): undone there first.
        match self.table.refused_pick(cpu, task, why) {
            Undo::Forget => self.forget(task),
            Undo::Blocked => {
                self.n_mut(i).used = 0;
                self.set(i, St::Blocked)
            }
            Undo::Running(c) => self.set(i, St::Running(c)),
            Undo::Requeue { zero_slice: false } => self.enqueue(i, true),
            Undo::Requeue { zero_slice: true } => {
                self.n_mut(i).used = 0;
                self.enqueue(i, false)
            }
            Undo::Nothing => {}
        }
    }
}
