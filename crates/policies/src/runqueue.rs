//! The run-queue bookkeeping shared by the time-sharing policies [`crate::linux22`],
//! [`crate::unix`] and [`crate::fb`]: a task table indexed by `TaskId`, each task's state
//! (blocked, queued, picked, running), an ordered ready set keyed by a policy-specific
//! key (optionally mirrored in a per-CPU set, for linux22's CPU bonus), and the per-CPU
//! `picked` / `running` tables, with the callback steps the three policies share
//! (attach, detach, dispatch, preemption, refusal, stale-entry repair, idle-CPU kicks).
//! The policies keep only their own rules: which key a task is queued at, and when.
//!
//! A queued task's key is recorded when it is enqueued, so that it can be taken out again
//! whatever the policy has changed in its data since; a policy changes a queued task's
//! key only through [`RunQueue::set_key`] (or [`RunQueue::rebuild`]). Every operation on
//! one task is O(log n).

use std::ops::{Deref, DerefMut};

use vassal_core::{CpuId, Ctx, Ns, Refusal, TaskId, TaskState};

use crate::ordered::OrderedSet;
pub(crate) use crate::task_table::St;
use crate::task_table::{self, Tasks, Undo};

/// A task's run-queue record: whether it is a guest, where it is queued, and the
/// policy's data (reachable through `Deref`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Entry<K, T> {
    pub guest: bool,
    /// The key it is queued at, and the CPU set it is mirrored in (while `Ready`).
    queued: Option<(K, Option<CpuId>)>,
    pub data: T,
}

impl<K, T> Deref for Entry<K, T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.data
    }
}

impl<K, T> DerefMut for Entry<K, T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.data
    }
}

/// One task of a run queue: its state and its [`Entry`].
pub(crate) type Slot<K, T> = task_table::Slot<Entry<K, T>>;

#[derive(Debug)]
pub(crate) struct RunQueue<K, T> {
    /// The tasks and the per-CPU `picked` / `running` tables.
    table: Tasks<Entry<K, T>>,
    ready: OrderedSet<(K, u32)>,
    /// Per CPU: the queued tasks enqueued with that CPU as their home.
    per_cpu: Vec<OrderedSet<(K, u32)>>,
}

/// A policy's own periodic tick: the scheduler event `token` at the multiples of `every`,
/// so that its HZ does not depend on the machine's.
#[derive(Debug)]
pub(crate) struct Tick {
    every: Ns,
    token: u64,
    armed: bool,
}

impl Tick {
    pub fn new(every: Ns, token: u64) -> Self {
        Tick { every, token, armed: false }
    }

    /// Sets the next tick event unless one is set.
    pub fn arm(&mut self, ctx: &mut Ctx) {
        if !self.armed {
            let next = (ctx.now() / self.every).saturating_add(1).saturating_mul(self.every);
            self.armed = ctx.set_event(next, self.token).is_ok();
        }
    }

    /// After a tick: sets the next one while the policy has tasks (the tick stops with
    /// the last task, and restarts with the next attach).
    pub fn rearm<K: Ord + Copy, T: Copy>(&mut self, ctx: &mut Ctx, rq: &RunQueue<K, T>) {
        if !rq.is_empty() {
            self.arm(ctx);
        }
    }

    /// At a scheduler event: true if it is this tick (which is then no longer set).
    pub fn fired(&mut self, token: u64) -> bool {
        if token != self.token {
            return false;
        }
        self.armed = false;
        true
    }
}

/// True if a CPU `task` may use is idle (the dispatcher kicks it on a wake-up).
pub(crate) fn idle_cpu_for(ctx: &Ctx, task: TaskId) -> bool {
    let aff = ctx.affinity(task);
    ctx.cpus().any(|c| aff.contains(c) && ctx.running_on(c).is_none())
}

impl<K: Ord + Copy, T: Copy> RunQueue<K, T> {
    pub fn new() -> Self {
        RunQueue { table: Tasks::default(), ready: OrderedSet::new(), per_cpu: Vec::new() }
    }

    /// Sizes the per-CPU tables for a machine of `ncpus` CPUs (from `Policy::init`).
    pub fn init(&mut self, ncpus: u16) {
        self.table.init(ncpus);
        self.per_cpu = (0..self.table.ncpus()).map(|_| OrderedSet::new()).collect();
    }

    /// The number of CPUs (0 before `init`).
    pub fn ncpus(&self) -> usize {
        self.table.ncpus()
    }

    pub fn get(&self, id: TaskId) -> Option<&Slot<K, T>> {
        self.table.get(id)
    }

    /// A task's slot, to change its data (not a queued task's key: see `set_key`).
    pub fn get_mut(&mut self, id: TaskId) -> Option<&mut Slot<K, T>> {
        self.table.get_mut(id)
    }

    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }

    /// Every task's slot (for a policy's periodic recalculation; then `rebuild`).
    pub fn slots_mut(&mut self) -> impl Iterator<Item = &mut Slot<K, T>> {
        self.table.iter_mut().map(|(_, t)| t)
    }

    /// Every task this policy holds, in id order.
    pub fn ids(&self) -> impl Iterator<Item = TaskId> + '_ {
        self.table.ids()
    }

    /// The number of queued tasks.
    pub fn queued(&self) -> usize {
        self.ready.len()
    }

    /// The queued tasks, in key order.
    pub fn ready_ids(&self) -> Vec<TaskId> {
        self.ready.iter().map(|k| TaskId(k.1)).collect()
    }

    /// The task charged on `cpu`, whether or not it still runs there.
    pub fn running_on(&self, cpu: CpuId) -> Option<TaskId> {
        self.table.running_on(cpu)
    }

    /// Adds (or replaces) a task in state `st`; a queued one is then the caller's to
    /// `enqueue`, a running one is charged on its CPU unless it is a guest.
    pub fn attach(&mut self, task: TaskId, st: St, guest: bool, data: T) -> Result<(), String> {
        crate::task_index(task)?;
        if self.get(task).is_some() {
            self.dequeue(task);
            self.forget_refs(task);
        }
        self.table.insert(task, St::Blocked, Entry { guest, queued: None, data })?;
        if let St::Running(c) = st {
            self.set_state(task, st);
            if !guest {
                self.table.set_running(c, task);
            }
        }
        Ok(())
    }

    /// Forgets a task entirely.
    pub fn remove(&mut self, id: TaskId) {
        if self.get(id).is_some() {
            self.dequeue(id);
            self.forget_refs(id);
            self.table.remove(id);
        }
    }

    /// Queues a task at `key` (mirrored in `home`'s set if given); it is taken out of the
    /// ready set first if it was there.
    pub fn enqueue(&mut self, id: TaskId, key: K, home: Option<CpuId>) {
        self.dequeue(id);
        let Some(t) = self.get_mut(id) else { return };
        t.st = St::Ready;
        t.queued = Some((key, home));
        self.ready.insert((key, id.0));
        if let Some(s) = home.and_then(|c| self.per_cpu.get_mut(c.0 as usize)) {
            s.insert((key, id.0));
        }
    }

    /// Takes a queued task out of the ready set (its state is left to the caller).
    pub fn dequeue(&mut self, id: TaskId) {
        let Some(t) = self.get_mut(id) else { return };
        if t.st != St::Ready {
            return;
        }
        let Some((key, home)) = t.queued.take() else { return };
        self.ready.remove(&(key, id.0));
        if let Some(s) = home.and_then(|c| self.per_cpu.get_mut(c.0 as usize)) {
            s.remove(&(key, id.0));
        }
    }

    /// Sets a state other than `Ready` (use `enqueue` for that), leaving the ready set.
    pub fn set_state(&mut self, id: TaskId, st: St) {
        self.dequeue(id);
        if let Some(t) = self.get_mut(id) {
            t.st = st;
        }
    }

    /// Changes a queued task's key, keeping it queued (nothing if it is not queued).
    pub fn set_key(&mut self, id: TaskId, key: K) {
        let Some(t) = self.get(id) else { return };
        if t.st == St::Ready {
            let home = t.queued.and_then(|q| q.1);
            self.enqueue(id, key, home);
        }
    }

    /// Recomputes every queued task's key (after a change to all tasks' data).
    pub fn rebuild(&mut self, key: impl Fn(&T) -> K) {
        let mut keys: Vec<((K, u32), Option<CpuId>)> = Vec::new();
        for (id, t) in self.table.iter_mut() {
            if t.st != St::Ready {
                continue;
            }
            let home = t.queued.and_then(|q| q.1);
            let k = key(&t.data.data);
            t.queued = Some((k, home));
            keys.push(((k, id.0), home));
        }
        self.ready = keys.iter().map(|k| k.0).collect();
        for s in self.per_cpu.iter_mut() {
            s.clear();
        }
        for (k, home) in keys {
            if let Some(s) = home.and_then(|c| self.per_cpu.get_mut(c.0 as usize)) {
                s.insert(k);
            }
        }
    }

    /// Clears the per-CPU references to a task.
    pub fn forget_refs(&mut self, id: TaskId) {
        self.table.forget_cpu_refs(id);
    }

    /// The first queued task — of `cpu`'s own set if `own`, else of the ready set — among
    /// those whose keys satisfy `take_while` from the front, that may run on `cpu` and is
    /// not `skip`; entries the dispatcher says are not runnable are repaired on the way.
    pub fn first_allowed(
        &mut self,
        ctx: &Ctx,
        cpu: CpuId,
        own: bool,
        skip: Option<TaskId>,
        take_while: impl Fn(&K) -> bool,
    ) -> Option<TaskId> {
        loop {
            let found = {
                let set = if own { &self.per_cpu[cpu.0 as usize] } else { &self.ready };
                set.iter().take_while(|k| take_while(&k.0)).map(|k| TaskId(k.1)).find(|&id| Some(id) != skip && ctx.allowed(id, cpu))
            }?;
            match ctx.state(found) {
                TaskState::Runnable => return Some(found),
                TaskState::Running(c) => self.set_state(found, St::Running(c)),
                TaskState::Blocked => self.set_state(found, St::Blocked),
                TaskState::Dead => self.remove(found),
            }
        }
    }

    /// Records a decision: `id` is picked on `cpu`.
    pub fn pick(&mut self, id: TaskId, cpu: CpuId) {
        self.set_state(id, St::Picked(cpu));
        self.table.picked[cpu.0 as usize] = Some(id);
    }

    /// Work conservation: an idle CPU while tasks wait is asked to decide.
    pub fn kick_idle_for_queue(&self, ctx: &mut Ctx, except: CpuId) {
        if let Some(k) = self.ready.first() {
            crate::rr::kick_idle(ctx, TaskId(k.1), except);
        }
    }

    /// `on_dispatch`: `task` runs on `cpu`; it is charged there if this policy picked it
    /// or it is not a guest. None if `cpu` is unknown; else whether it is charged.
    pub fn dispatch(&mut self, task: TaskId, cpu: CpuId) -> Option<bool> {
        let ci = cpu.0 as usize;
        if ci >= self.table.ncpus() {
            return None;
        }
        let ours = self.table.picked[ci] == Some(task);
        self.table.picked[ci] = None;
        self.table.running[ci] = None;
        let Some(t) = self.get(task).copied() else { return Some(false) };
        self.set_state(task, St::Running(cpu));
        if !ours && t.guest {
            return Some(false);
        }
        // The same task may not be charged on two CPUs.
        self.table.forget_running(task);
        self.table.running[ci] = Some(task);
        Some(true)
    }

    /// `on_preempt`: the task (if running or picked) stops being charged on `cpu`. Returns
    /// its slot and whether it was charged there; the caller queues it.
    pub fn preempt(&mut self, task: TaskId, cpu: CpuId) -> Option<(Slot<K, T>, bool)> {
        let t = self.get(task).copied()?;
        if matches!(t.st, St::Ready | St::Blocked) {
            return None;
        }
        let charged = self.table.clear_running(cpu, task);
        Some((t, charged))
    }

    /// `on_refused`: undoes a pick. Returns the slot when the task is to be queued again
    /// (not allowed there, zero slice), which is the caller's to do.
    pub fn refused(&mut self, cpu: CpuId, task: TaskId, why: Refusal) -> Option<Slot<K, T>> {
        match self.table.refused(cpu, task, why) {
            Undo::Forget => self.remove(task),
            Undo::Requeue { .. } => return self.get(task).copied(),
            Undo::Nothing | Undo::Blocked | Undo::Running(_) => {}
        }
        None
    }

    /// The task charged on `cpu`, if it is still the one running there.
    pub fn charged_on(&self, ctx: &Ctx, cpu: CpuId) -> Option<(TaskId, &Slot<K, T>)> {
        let id = self.table.running_on(cpu)?;
        if ctx.running_on(cpu) != Some(id) {
            return None;
        }
        Some((id, self.get(id)?))
    }

    /// At a tick: the task charged on CPU `ci` (forgotten if it no longer runs there), if
    /// it is running there.
    pub fn tick_target(&mut self, ctx: &Ctx, ci: usize) -> Option<(TaskId, CpuId, &mut Slot<K, T>)> {
        let id = self.table.running[ci]?;
        let cpu = CpuId(ci as u16);
        if ctx.running_on(cpu) != Some(id) {
            self.table.running[ci] = None;
            return None;
        }
        let t = self.get_mut(id)?;
        (t.st == St::Running(cpu)).then_some((id, cpu, t))
    }
}
