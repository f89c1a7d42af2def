//! Round robin: the scheduler of Go!'s GTE library OS (paper 003 §4, "simple,
//! round-robin, single-priority, preemptive scheduling"), where every timer tick
//! suspends the current thread and resumes the next one.
//!
//! Rules:
//! - one global FIFO run queue of runnable tasks; a CPU takes the first task in it that
//!   may run there (the head, unless its affinity excludes this CPU) for one `quantum`
//!   (policy parameter, default 10ms);
//! - a woken or newly attached runnable task joins the tail;
//! - a task whose slice expired, or that yielded, goes to the tail with a fresh quantum;
//! - a task preempted by a reschedule before its quantum ended (`Preempt::Resched`) goes
//!   back to the head and keeps its place: its next slice is the rest of its quantum
//!   (Go!'s tick boundary does not move because something else ran in between);
//! - a blocked or detached task leaves the queue; a task dispatched without being picked
//!   (a hand-off, or a guest run by its owner) leaves the queue while it runs.
//!
//! Guests (tasks owned by a higher scheduler that this one hosts as the default) are
//! treated like its own tasks; the dispatcher validates every decision. Interrupt
//! wake-ups (Go!'s `idisp`) are ordinary wake-ups here: they join the tail.
//!
//! Cost: the queue is an intrusive doubly linked list over a vector indexed by task id,
//! so wake, block, preempt, dispatch and removal are O(1), and `pick` is O(1) whenever
//! the head may run on the CPU (it walks past tasks whose affinity excludes the CPU).
//!
//! `FifoCore` holds the queue and the per-task turn budget; weighted round robin
//! ([`crate::wrr`]) uses the same core with a budget of weight × quantum.

use vassal_core::{AttachInfo, Block, CpuId, Ctx, Decision, Detach, Ns, Policy, Preempt, Refusal, TaskId, TaskState, Wake};

use crate::task_table::{Slot, St, Tasks, Undo};

const NIL: u32 = u32::MAX;

/// A task's place in the queue (while `Ready`) and its turn.
#[derive(Clone, Copy, Debug)]
struct Node {
    prev: u32,
    next: u32,
    /// The length of one full turn.
    budget: Ns,
    /// How much of the current turn has been used.
    used: Ns,
}

/// A FIFO run queue of tasks, each with a per-turn budget. See the module documentation.
#[derive(Debug)]
pub(crate) struct FifoCore {
    table: Tasks<Node>,
    head: u32,
    tail: u32,
    len: usize,
}

impl FifoCore {
    pub(crate) fn new() -> Self {
        FifoCore { table: Tasks::default(), head: NIL, tail: NIL, len: 0 }
    }

    /// Number of queued tasks.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The queued tasks, head first (for tests and reports; O(n)).
    pub(crate) fn queue(&self) -> Vec<TaskId> {
        let mut out = Vec::with_capacity(self.len);
        let mut i = self.head;
        while i != NIL {
            out.push(TaskId(i));
            i = self.n(i).next;
        }
        out
    }

    /// The node of a task known to be attached (queue links only name attached tasks).
    fn n(&self, i: u32) -> &Slot<Node> {
        self.table.get(TaskId(i)).expect("a queued task is attached")
    }

    fn n_mut(&mut self, i: u32) -> &mut Slot<Node> {
        self.table.get_mut(TaskId(i)).expect("a queued task is attached")
    }

    pub(crate) fn is_attached(&self, task: TaskId) -> bool {
        self.table.contains(task)
    }

    fn push_back(&mut self, i: u32) {
        let tail = self.tail;
        let n = self.n_mut(i);
        n.prev = tail;
        n.next = NIL;
        n.st = St::Ready;
        if tail == NIL {
            self.head = i;
        } else {
            self.n_mut(tail).next = i;
        }
        self.tail = i;
        self.len += 1;
    }

    fn push_front(&mut self, i: u32) {
        let head = self.head;
        let n = self.n_mut(i);
        n.prev = NIL;
        n.next = head;
        n.st = St::Ready;
        if head == NIL {
            self.tail = i;
        } else {
            self.n_mut(head).prev = i;
        }
        self.head = i;
        self.len += 1;
    }

    /// Removes `i` from the queue if it is there; its state is left to the caller.
    fn unlink(&mut self, i: u32) {
        let Some(&Slot { st, data: Node { prev, next, .. } }) = self.table.get(TaskId(i)) else { return };
        if st != St::Ready {
            return;
        }
        if prev == NIL {
            self.head = next;
        } else {
            self.n_mut(prev).next = next;
        }
        if next == NIL {
            self.tail = prev;
        } else {
            self.n_mut(next).prev = prev;
        }
        let n = self.n_mut(i);
        n.prev = NIL;
        n.next = NIL;
        self.len -= 1;
    }

    /// Sets the state of `i`, taking it out of the queue first.
    fn set(&mut self, i: u32, st: St) {
        self.unlink(i);
        self.n_mut(i).st = st;
    }

    /// Takes `task` out of the queue and forgets it.
    fn forget(&mut self, task: TaskId) {
        self.unlink(task.0);
        self.table.remove(task);
    }

    /// Attaches `task` with a turn budget of `budget` (> 0) ns.
    pub(crate) fn attach(&mut self, task: TaskId, info: &AttachInfo, budget: Ns) -> Result<(), String> {
        crate::task_index(task)?;
        self.forget(task);
        let st = St::of_attach(task, info)?;
        self.table.insert(task, St::Blocked, Node { prev: NIL, next: NIL, budget: budget.max(1), used: 0 })?;
        match st {
            St::Ready => self.push_back(task.0),
            st => self.n_mut(task.0).st = st,
        }
        Ok(())
    }

    /// Changes the turn budget of an attached task (takes effect from its next slice).
    pub(crate) fn set_budget(&mut self, task: TaskId, budget: Ns) -> bool {
        match self.table.get_mut(task) {
            Some(n) => {
                n.budget = budget.max(1);
                true
            }
            None => false,
        }
    }

    pub(crate) fn detach(&mut self, task: TaskId) {
        self.forget(task);
    }

    pub(crate) fn wake(&mut self, task: TaskId) {
        if let Some(n) = self.table.get_mut(task) {
            if n.st == St::Blocked {
                n.used = 0;
                self.push_back(task.0);
            }
        }
    }

    pub(crate) fn block(&mut self, task: TaskId) {
        if let Some(n) = self.table.get_mut(task) {
            n.used = 0;
            self.set(task.0, St::Blocked);
        }
    }

    pub(crate) fn dispatch(&mut self, ctx: &mut Ctx, task: TaskId, cpu: CpuId) {
        match self.table.get(task) {
            // Already running there since `pick` took it (`dispatches_in_pick`).
            Some(n) if n.st == St::Running(cpu) => return,
            // A hand-off (or a guest run by its owner) is taken out of the queue too.
            Some(_) => self.set(task.0, St::Running(cpu)),
            None => {}
        }
        self.after_dispatch(ctx, cpu);
    }

    /// Work conservation: a CPU left idle while tasks wait (e.g. two wake-ups kicked the
    /// same idle CPU) is asked to decide.
    fn after_dispatch(&mut self, ctx: &mut Ctx, cpu: CpuId) {
        if self.head != NIL {
            kick_idle(ctx, TaskId(self.head), cpu);
        }
    }

    pub(crate) fn preempt(&mut self, ctx: &mut Ctx, task: TaskId, cpu: CpuId, why: Preempt) {
        let Some(n) = self.table.get_mut(task) else { return };
        if matches!(n.st, St::Ready | St::Blocked) {
            return;
        }
        if why == Preempt::Resched && n.used < n.budget {
            // Preempted before its turn ended: it keeps its place and the rest of its turn.
            self.push_front(task.0);
        } else {
            n.used = 0;
            self.push_back(task.0);
        }
        // This CPU may be taken by a higher scheduler: let an idle one have the task.
        kick_idle(ctx, task, cpu);
    }

    pub(crate) fn run(&mut self, task: TaskId, ran: Ns) {
        if let Some(n) = self.table.get_mut(task) {
            n.used = n.used.saturating_add(ran);
        }
    }

    pub(crate) fn pick(&mut self, ctx: &mut Ctx, cpu: CpuId) -> Option<Decision> {
        let mut i = self.head;
        while i != NIL {
            let next = self.n(i).next;
            let task = TaskId(i);
            if ctx.allowed(task, cpu) {
                // The dispatcher's view is the truth; a disagreement is repaired here
                // rather than refused later.
                match ctx.state(task) {
                    TaskState::Runnable => {
                        // Its dispatch (`dispatches_in_pick`): it runs here from now on.
                        self.set(i, St::Running(cpu));
                        self.after_dispatch(ctx, cpu);
                        let n = self.n(i);
                        let slice = n.budget.saturating_sub(n.used).max(1);
                        return Some(Decision::run(task, slice));
                    }
                    TaskState::Running(c) => self.set(i, St::Running(c)),
                    TaskState::Blocked => self.block(task),
                    TaskState::Dead => self.forget(task),
                }
            }
            i = next;
        }
        None
    }

    pub(crate) fn refused(&mut self, cpu: CpuId, decision: Decision, why: Refusal) {
        let task = decision.task;
        // Its pick took the task as running (`pick`): undone there first.
        match self.table.refused_pick(cpu, task, why) {
            // Not ours to run (any more): forget it rather than offer it again.
            Undo::Forget => self.forget(task),
            // It will be woken (on_wake) before it can run again.
            Undo::Blocked => self.block(task),
            // Keep its place; `pick` checks affinity, so it is not offered here again.
            Undo::Requeue { zero_slice: false } => self.push_front(task.0),
            Undo::Requeue { zero_slice: true } => {
                self.n_mut(task.0).used = 0;
                self.push_back(task.0);
            }
            // on_preempt or on_block for that CPU will bring it back.
            Undo::Running(_) | Undo::Nothing => {}
        }
    }
}

/// Asks one idle CPU (other than `except`) that `task` may use to make a decision.
/// O(number of CPUs); nothing to do on one CPU.
pub(crate) fn kick_idle(ctx: &mut Ctx, task: TaskId, except: CpuId) {
    if ctx.ncpus() < 2 {
        return;
    }
    let aff = ctx.affinity(task);
    let found = ctx.cpus().find(|&c| c != except && aff.contains(c) && ctx.running_on(c).is_none());
    if let Some(c) = found {
        let _ = ctx.resched(c);
    }
}

/// Go!'s round robin. See the module documentation.
#[derive(Debug)]
pub struct RoundRobin {
    quantum: Ns,
    core: FifoCore,
}

impl RoundRobin {
    /// A round robin with this quantum (ns, > 0; zero is taken as 1ns).
    pub fn new(quantum: Ns) -> Self {
        RoundRobin { quantum: quantum.max(1), core: FifoCore::new() }
    }
    pub fn quantum(&self) -> Ns {
        self.quantum
    }
    /// The run queue, head first (O(n); for tests and reports).
    pub fn queue(&self) -> Vec<TaskId> {
        self.core.queue()
    }
    /// Number of queued (runnable, not running) tasks.
    pub fn queued(&self) -> usize {
        self.core.len()
    }
}

impl Policy for RoundRobin {
    fn kind(&self) -> &str {
        "rr"
    }
    fn on_attach(&mut self, _ctx: &mut Ctx, task: TaskId, info: &AttachInfo) -> Result<(), String> {
        self.core.attach(task, info, self.quantum)
    }
    fn on_detach(&mut self, _ctx: &mut Ctx, task: TaskId, _why: Detach) {
        self.core.detach(task);
    }
    fn on_wake(&mut self, _ctx: &mut Ctx, task: TaskId, _wake: Wake) {
        self.core.wake(task);
    }
    fn on_block(&mut self, _ctx: &mut Ctx, task: TaskId, _block: Block) {
        self.core.block(task);
    }
    fn on_dispatch(&mut self, ctx: &mut Ctx, task: TaskId, cpu: CpuId) {
        self.core.dispatch(ctx, task, cpu);
    }
    fn on_preempt(&mut self, ctx: &mut Ctx, task: TaskId, cpu: CpuId, why: Preempt) {
        self.core.preempt(ctx, task, cpu, why);
    }
    fn on_run(&mut self, _ctx: &mut Ctx, task: TaskId, _cpu: CpuId, ran: Ns) {
        self.core.run(task, ran);
    }
    fn pick(&mut self, ctx: &mut Ctx, cpu: CpuId) -> Option<Decision> {
        self.core.pick(ctx, cpu)
    }
    /// A task picked runs from the pick (`FifoCore::pick`); `on_dispatch` is for hand-offs.
    fn dispatches_in_pick(&self) -> bool {
        true
    }
    fn on_refused(&mut self, _ctx: &mut Ctx, cpu: CpuId, decision: Decision, why: Refusal) {
        self.core.refused(cpu, decision, why);
    }
}
