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

use std::collections::BTreeSet;
use std::ops::{Deref, DerefMut};

use vassal_core::{AttachInfo, CpuId, Ctx, Ns, Refusal, TaskId, TaskState};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum St {
    Blocked,
    /// In the ready set.
    Queued,
    /// Returned by `pick` on this CPU; `on_dispatch` or `on_refused` follows.
    Picked(CpuId),
    Running(CpuId),
}

/// One task: its state, whether it is a guest, where it is queued, and the policy's data
/// (reachable through `Deref`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Slot<K, T> {
    pub st: St,
    pub guest: bool,
    /// The key it is queued at, and the CPU set it is mirrored in (while `Queued`).
    queued: Option<(K, Option<CpuId>)>,
    pub data: T,
}

impl<K, T> Deref for Slot<K, T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.data
    }
}

impl<K, T> DerefMut for Slot<K, T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.data
    }
}

#[derive(Debug)]
pub(crate) struct RunQueue<K, T> {
    tasks: Vec<Option<Slot<K, T>>>,
    ready: BTreeSet<(K, u32)>,
    /// Per CPU: the queued tasks enqueued with that CPU as their home.
    per_cpu: Vec<BTreeSet<(K, u32)>>,
    /// Per CPU: the task the policy picked and has not yet seen dispatched.
    pub picked: Vec<Option<TaskId>>,
    /// Per CPU: the task running there that the policy charges.
    pub running: Vec<Option<TaskId>>,
}

/// The state a task attached in `info` starts in (a dead task is refused).
pub(crate) fn attach_state(task: TaskId, info: &AttachInfo) -> Result<St, String> {
    Ok(match info.state {
        TaskState::Runnable => St::Queued,
        TaskState::Running(c) => St::Running(c),
        TaskState::Blocked => St::Blocked,
        TaskState::Dead => return Err(format!("{task} has exited")),
    })
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
        RunQueue { tasks: Vec::new(), ready: BTreeSet::new(), per_cpu: Vec::new(), picked: Vec::new(), running: Vec::new() }
    }

    /// Sizes the per-CPU tables on the first callback; true if it did now.
    pub fn ensure(&mut self, ctx: &Ctx) -> bool {
        if !self.running.is_empty() {
            return false;
        }
        let n = ctx.ncpus().max(1) as usize;
        self.per_cpu = (0..n).map(|_| BTreeSet::new()).collect();
        self.picked = vec![None; n];
        self.running = vec![None; n];
        true
    }

    /// The number of CPUs (0 before the first callback).
    pub fn ncpus(&self) -> usize {
        self.running.len()
    }

    pub fn get(&self, id: TaskId) -> Option<&Slot<K, T>> {
        self.tasks.get(id.0 as usize).and_then(|t| t.as_ref())
    }

    /// A task's slot, to change its data (not a queued task's key: see `set_key`).
    pub fn get_mut(&mut self, id: TaskId) -> Option<&mut Slot<K, T>> {
        self.tasks.get_mut(id.0 as usize).and_then(|t| t.as_mut())
    }

    pub fn is_empty(&self) -> bool {
        self.tasks.iter().all(|t| t.is_none())
    }

    /// Every task's slot (for a policy's periodic recalculation; then `rebuild`).
    pub fn slots_mut(&mut self) -> impl Iterator<Item = &mut Slot<K, T>> {
        self.tasks.iter_mut().flatten()
    }

    /// Every task this policy holds, in id order.
    pub fn ids(&self) -> impl Iterator<Item = TaskId> + '_ {
        self.tasks.iter().enumerate().filter(|(_, t)| t.is_some()).map(|(i, _)| TaskId(i as u32))
    }

    /// The number of queued tasks.
    pub fn queued(&self) -> usize {
        self.ready.len()
    }

    /// The queued tasks, in key order.
    pub fn ready_ids(&self) -> Vec<TaskId> {
        self.ready.iter().map(|k| TaskId(k.1)).collect()
    }

    /// Adds (or replaces) a task in state `st`; a queued one is then the caller's to
    /// `enqueue`, a running one is charged on its CPU unless it is a guest.
    pub fn attach(&mut self, task: TaskId, st: St, guest: bool, data: T) -> Result<(), String> {
        let idx = crate::task_index(task)?;
        if idx >= self.tasks.len() {
            self.tasks.resize(idx + 1, None);
        }
        if self.get(task).is_some() {
            self.dequeue(task);
            self.forget_refs(task);
        }
        self.tasks[idx] = Some(Slot { st: St::Blocked, guest, queued: None, data });
        if let St::Running(c) = st {
            self.set_state(task, st);
            if !guest {
                if let Some(r) = self.running.get_mut(c.0 as usize) {
                    *r = Some(task);
                }
            }
        }
        Ok(())
    }

    /// Forgets a task entirely.
    pub fn remove(&mut self, id: TaskId) {
        if self.get(id).is_some() {
            self.dequeue(id);
            self.forget_refs(id);
            self.tasks[id.0 as usize] = None;
        }
    }

    /// Queues a task at `key` (mirrored in `home`'s set if given); it is taken out of the
    /// ready set first if it was there.
    pub fn enqueue(&mut self, id: TaskId, key: K, home: Option<CpuId>) {
        self.dequeue(id);
        let Some(t) = self.get_mut(id) else { return };
        t.st = St::Queued;
        t.queued = Some((key, home));
        self.ready.insert((key, id.0));
        if let Some(s) = home.and_then(|c| self.per_cpu.get_mut(c.0 as usize)) {
            s.insert((key, id.0));
        }
    }

    /// Takes a queued task out of the ready set (its state is left to the caller).
    pub fn dequeue(&mut self, id: TaskId) {
        let Some(t) = self.get_mut(id) else { return };
        if t.st != St::Queued {
            return;
        }
        let Some((key, home)) = t.queued.take() else { return };
        self.ready.remove(&(key, id.0));
        if let Some(s) = home.and_then(|c| self.per_cpu.get_mut(c.0 as usize)) {
            s.remove(&(key, id.0));
        }
    }

    /// Sets a state other than `Queued` (use `enqueue` for that), leaving the ready set.
    pub fn set_state(&mut self, id: TaskId, st: St) {
        self.dequeue(id);
        if let Some(t) = self.get_mut(id) {
            t.st = st;
        }
    }

    /// Changes a queued task's key, keeping it queued (nothing if it is not queued).
    pub fn set_key(&mut self, id: TaskId, key: K) {
        let Some(t) = self.get(id) else { return };
        if t.st == St::Queued {
            let home = t.queued.and_then(|q| q.1);
            self.enqueue(id, key, home);
        }
    }

    /// Recomputes every queued task's key (after a change to all tasks' data).
    pub fn rebuild(&mut self, key: impl Fn(&T) -> K) {
        let mut keys: Vec<((K, u32), Option<CpuId>)> = Vec::new();
        for (i, t) in self.tasks.iter_mut().enumerate() {
            let Some(t) = t.as_mut().filter(|t| t.st == St::Queued) else { continue };
            let home = t.queued.and_then(|q| q.1);
            let k = key(&t.data);
            t.queued = Some((k, home));
            keys.push(((k, i as u32), home));
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
        for r in self.running.iter_mut().chain(self.picked.iter_mut()) {
            if *r == Some(id) {
                *r = None;
            }
        }
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
        self.picked[cpu.0 as usize] = Some(id);
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
        if ci >= self.running.len() {
            return None;
        }
        let ours = self.picked[ci] == Some(task);
        self.picked[ci] = None;
        self.running[ci] = None;
        let Some(t) = self.get(task).copied() else { return Some(false) };
        self.set_state(task, St::Running(cpu));
        if !ours && t.guest {
            return Some(false);
        }
        // The same task may not be charged on two CPUs.
        self.forget_running(task);
        self.running[ci] = Some(task);
        Some(true)
    }

    fn forget_running(&mut self, id: TaskId) {
        for r in self.running.iter_mut() {
            if *r == Some(id) {
                *r = None;
            }
        }
    }

    /// `on_preempt`: the task (if running or picked) stops being charged on `cpu`. Returns
    /// its slot and whether it was charged there; the caller queues it.
    pub fn preempt(&mut self, task: TaskId, cpu: CpuId) -> Option<(Slot<K, T>, bool)> {
        let t = self.get(task).copied()?;
        if matches!(t.st, St::Queued | St::Blocked) {
            return None;
        }
        let ci = cpu.0 as usize;
        let charged = self.running.get(ci).copied().flatten() == Some(task);
        if charged {
            self.running[ci] = None;
        }
        Some((t, charged))
    }

    /// `on_refused`: undoes a pick. Returns the slot when the task is to be queued again
    /// (not allowed there, zero slice), which is the caller's to do.
    pub fn refused(&mut self, cpu: CpuId, task: TaskId, why: Refusal) -> Option<Slot<K, T>> {
        if let Some(p) = self.picked.get_mut(cpu.0 as usize) {
            if *p == Some(task) {
                *p = None;
            }
        }
        let t = self.get(task).copied()?;
        if !matches!(t.st, St::Picked(_)) {
            return None;
        }
        match why {
            Refusal::NoSuchTask | Refusal::NotYours => self.remove(task),
            Refusal::NotRunnable => self.set_state(task, St::Blocked),
            Refusal::RunningElsewhere(c) => self.set_state(task, St::Running(c)),
            Refusal::NotAllowed | Refusal::ZeroSlice => return Some(t),
        }
        None
    }

    /// The task charged on `cpu`, if it is still the one running there.
    pub fn charged_on(&self, ctx: &Ctx, cpu: CpuId) -> Option<(TaskId, &Slot<K, T>)> {
        let id = self.running.get(cpu.0 as usize).copied().flatten()?;
        if ctx.running_on(cpu) != Some(id) {
            return None;
        }
        Some((id, self.get(id)?))
    }

    /// At a tick: the task charged on CPU `ci` (forgotten if it no longer runs there), if
    /// it is running there.
    pub fn tick_target(&mut self, ctx: &Ctx, ci: usize) -> Option<(TaskId, CpuId, &mut Slot<K, T>)> {
        let id = self.running[ci]?;
        let cpu = CpuId(ci as u16);
        if ctx.running_on(cpu) != Some(id) {
            self.running[ci] = None;
            return None;
        }
        let t = self.get_mut(id)?;
        (t.st == St::Running(cpu)).then_some((id, cpu, t))
    }
}
