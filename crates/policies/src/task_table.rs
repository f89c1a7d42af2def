//! The one task table of the built-in policies (like ghOSt's `TaskAllocator<T>`): per-task
//! policy data `T` indexed by `TaskId`, each task's state ([`St`]: blocked, ready, picked
//! on a CPU, running on a CPU) kept in one place, the per-CPU `picked` / `running` tables
//! (entries `R`, at least the task), a FIFO sequence counter, and what every policy's
//! `on_refused` does alike ([`Tasks::refused`]). The policies keep their own queues and
//! rules; this holds only what they do alike.
//!
//! Invariants: the per-CPU tables are sized once, by [`Tasks::init`] from the policy's
//! `Policy::init`, and never grow; before that (a policy driven directly, without a
//! dispatcher) every per-CPU operation is a no-op. A task's data is reachable through
//! its [`Slot`] by `Deref`; only the policy changes a task's state, through `st`.

use std::ops::{Deref, DerefMut};

use vassal_core::{AttachInfo, CpuId, Refusal, TaskId, TaskState};

/// Where a task is, as far as its policy knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum St {
    Blocked,
    /// In the policy's ready queue(s).
    Ready,
    /// Returned by `pick` on this CPU; `on_dispatch` or `on_refused` follows.
    Picked(CpuId),
    Running(CpuId),
}

impl St {
    /// The state a task attached in `info` starts in (a dead task is refused).
    pub fn of_attach(task: TaskId, info: &AttachInfo) -> Result<St, String> {
        Ok(match info.state {
            TaskState::Runnable => St::Ready,
            TaskState::Running(c) => St::Running(c),
            TaskState::Blocked => St::Blocked,
            TaskState::Dead => return Err(format!("{task} has exited")),
        })
    }
}

/// What a per-CPU `picked` / `running` entry records: at least the task.
pub(crate) trait CpuEntry: Copy {
    fn task(&self) -> TaskId;
}

impl CpuEntry for TaskId {
    fn task(&self) -> TaskId {
        *self
    }
}

/// One task: its state and the policy's data (reachable through `Deref`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Slot<T> {
    pub st: St,
    pub data: T,
}

impl<T> Deref for Slot<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.data
    }
}

impl<T> DerefMut for Slot<T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.data
    }
}

/// What `on_refused` leaves to the policy after [`Tasks::refused`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Undo {
    /// The task is unknown or was not picked: nothing to undo.
    Nothing,
    /// No such task, or not ours (any more): the policy forgets it.
    Forget,
    /// It is blocked (its state is set): it will be woken before it can run again.
    Blocked,
    /// It runs on that CPU (its state is set): `on_preempt` or `on_block` there brings it back.
    Running(CpuId),
    /// Not allowed on this CPU, or a zero slice (`true`): the policy queues it again.
    Requeue { zero_slice: bool },
}

/// The tasks (policy data `T`, indexed by `TaskId`) and the per-CPU entries `R`.
#[derive(Debug)]
pub(crate) struct Tasks<T, R = TaskId> {
    slots: Vec<Option<Slot<T>>>,
    next_seq: u64,
    /// Per CPU: the entry the policy picked and has not yet seen dispatched.
    pub picked: Vec<Option<R>>,
    /// Per CPU: the entry running there that the policy charges.
    pub running: Vec<Option<R>>,
}

impl<T, R> Default for Tasks<T, R> {
    fn default() -> Self {
        Tasks { slots: Vec::new(), next_seq: 0, picked: Vec::new(), running: Vec::new() }
    }
}

impl<T, R: CpuEntry> Tasks<T, R> {
    /// Sizes the per-CPU tables for a machine of `ncpus` CPUs (from `Policy::init`).
    pub fn init(&mut self, ncpus: u16) {
        let n = ncpus.max(1) as usize;
        self.running = vec![None; n];
        self.picked = vec![None; n];
    }

    /// The number of CPUs (0 before `init`).
    pub fn ncpus(&self) -> usize {
        self.running.len()
    }

    pub fn get(&self, id: TaskId) -> Option<&Slot<T>> {
        self.slots.get(id.0 as usize).and_then(|t| t.as_ref())
    }

    pub fn get_mut(&mut self, id: TaskId) -> Option<&mut Slot<T>> {
        self.slots.get_mut(id.0 as usize).and_then(|t| t.as_mut())
    }

    pub fn contains(&self, id: TaskId) -> bool {
        self.get(id).is_some()
    }

    /// Stores (or replaces) the task's data in state `st`, growing the table; a task id
    /// too large for a table is refused (for `on_attach`).
    pub fn insert(&mut self, id: TaskId, st: St, data: T) -> Result<(), String> {
        let idx = crate::task_index(id)?;
        if idx >= self.slots.len() {
            self.slots.resize_with(idx + 1, || None);
        }
        self.slots[idx] = Some(Slot { st, data });
        Ok(())
    }

    /// Drops the task's data (its per-CPU entries are the caller's: `forget_cpu_refs`).
    pub fn remove(&mut self, id: TaskId) -> Option<Slot<T>> {
        self.slots.get_mut(id.0 as usize).and_then(|t| t.take())
    }

    /// True if no task is attached.
    pub fn is_empty(&self) -> bool {
        self.slots.iter().all(|t| t.is_none())
    }

    /// Every task, in id order.
    pub fn iter(&self) -> impl Iterator<Item = (TaskId, &Slot<T>)> {
        self.slots.iter().enumerate().filter_map(|(i, t)| t.as_ref().map(|t| (TaskId(i as u32), t)))
    }

    /// Every task, in id order, to change.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (TaskId, &mut Slot<T>)> {
        self.slots.iter_mut().enumerate().filter_map(|(i, t)| t.as_mut().map(|t| (TaskId(i as u32), t)))
    }

    /// Every task's id, in id order.
    pub fn ids(&self) -> impl Iterator<Item = TaskId> + '_ {
        self.iter().map(|(id, _)| id)
    }

    /// The next place at the tail of a FIFO.
    pub fn tail_seq(&mut self) -> u64 {
        self.next_seq += 1;
        self.next_seq
    }

    /// The entry running on CPU `c`, if any.
    pub fn running_on(&self, c: CpuId) -> Option<R> {
        self.running.get(c.0 as usize).copied().flatten()
    }

    /// Records `entry` as running on CPU `c` (a task attached while running).
    pub fn set_running(&mut self, c: CpuId, entry: R) {
        if let Some(r) = self.running.get_mut(c.0 as usize) {
            *r = Some(entry);
        }
    }

    /// Clears the `running` entry of CPU `cpu` if it is the task's; true if it was.
    pub fn clear_running(&mut self, cpu: CpuId, id: TaskId) -> bool {
        clear_if(self.running.get_mut(cpu.0 as usize), id)
    }

    /// Clears the `picked` entry of CPU `cpu` if it is the task's; true if it was.
    pub fn clear_picked(&mut self, cpu: CpuId, id: TaskId) -> bool {
        clear_if(self.picked.get_mut(cpu.0 as usize), id)
    }

    /// Clears every `running` entry of the task.
    pub fn forget_running(&mut self, id: TaskId) {
        forget_in(&mut self.running, id);
    }

    /// Clears every `running` and `picked` entry of the task (at every dispatch and
    /// block of some policies: two plain loops, not a chained iterator, as the profile
    /// of issue 16 showed).
    pub fn forget_cpu_refs(&mut self, id: TaskId) {
        forget_in(&mut self.running, id);
        forget_in(&mut self.picked, id);
    }

    /// Clears the task's per-CPU entry for a policy that keeps the invariant that a task
    /// has no `picked` / `running` entry but the one its state names (`Picked(c)`:
    /// `picked[c]` at most, `Running(c)`: `running[c]` at most, ready or blocked: none) —
    /// one entry looked at where [`Tasks::forget_cpu_refs`] sweeps every CPU twice (at
    /// every dispatch and block of `edf`: 3.6 % of a global EDF job, issue 16). Debug
    /// builds check the invariant.
    pub fn forget_named_ref(&mut self, id: TaskId) {
        match self.get(id).map(|t| t.st) {
            Some(St::Picked(c)) => {
                self.clear_picked(c, id);
            }
            Some(St::Running(c)) => {
                self.clear_running(c, id);
            }
            Some(St::Ready | St::Blocked) | None => {}
        }
        debug_assert!(
            !self.running.iter().chain(&self.picked).any(|e| e.is_some_and(|r| r.task() == id)),
            "{id} has a per-CPU entry its state ({:?}) does not name",
            self.get(id).map(|t| t.st)
        );
    }

    /// `on_refused`, the part every policy does alike: the task is no longer picked on
    /// `cpu`; if it was picked, a blocked task or one running elsewhere takes that state.
    /// The rest (forgetting it, queueing it again) is the policy's, as the answer says.
    pub fn refused(&mut self, cpu: CpuId, id: TaskId, why: Refusal) -> Undo {
        self.clear_picked(cpu, id);
        let Some(t) = self.get_mut(id) else { return Undo::Nothing };
        if !matches!(t.st, St::Picked(_)) {
            return Undo::Nothing;
        }
        match why {
            Refusal::NoSuchTask | Refusal::NotYours => Undo::Forget,
            Refusal::NotRunnable => {
                t.st = St::Blocked;
                Undo::Blocked
            }
            Refusal::RunningElsewhere(c) => {
                t.st = St::Running(c);
                Undo::Running(c)
            }
            Refusal::NotAllowed => Undo::Requeue { zero_slice: false },
            Refusal::ZeroSlice => Undo::Requeue { zero_slice: true },
        }
    }

    /// `on_refused` for a policy whose picks stand for its dispatch
    /// (`Policy::dispatches_in_pick`): the task its pick took as running on `cpu` is
    /// picked there again (its `running` entry cleared), then as [`Tasks::refused`].
    pub fn refused_pick(&mut self, cpu: CpuId, id: TaskId, why: Refusal) -> Undo {
        if let Some(t) = self.get_mut(id).filter(|t| t.st == St::Running(cpu)) {
            t.st = St::Picked(cpu);
            self.clear_running(cpu, id);
        }
        self.refused(cpu, id, why)
    }
}

/// Clears every entry of `entries` that is the task's. Branch-free per entry: which
/// entry is the task's is data the branch predictor cannot learn.
fn forget_in<R: CpuEntry>(entries: &mut [Option<R>], id: TaskId) {
    for e in entries {
        *e = e.filter(|r| r.task() != id);
    }
}

/// Clears `entry` if it is the task's; true if it was.
fn clear_if<R: CpuEntry>(entry: Option<&mut Option<R>>, id: TaskId) -> bool {
    match entry {
        Some(e) if e.is_some_and(|r| r.task() == id) => {
            *e = None;
            true
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> Tasks<()> {
        let mut t = Tasks::default();
        t.init(4);
        t.insert(TaskId(1), St::Blocked, ()).unwrap();
        t.insert(TaskId(2), St::Blocked, ()).unwrap();
        t
    }

    #[test]
    fn forget_named_ref_clears_the_entry_the_state_names_and_no_other_tasks() {
        let mut t = table();
        t.picked[2] = Some(TaskId(1));
        t.get_mut(TaskId(1)).unwrap().st = St::Picked(CpuId(2));
        t.running[3] = Some(TaskId(2));
        t.get_mut(TaskId(2)).unwrap().st = St::Running(CpuId(3));
        t.forget_named_ref(TaskId(1));
        assert_eq!(t.picked[2], None);
        assert_eq!(t.running[3], Some(TaskId(2)), "another task's entry is left alone");
        t.forget_named_ref(TaskId(2));
        assert_eq!(t.running[3], None);
    }

    #[test]
    fn a_refused_pick_taken_as_running_is_undone_there_only() {
        let mut t = table();
        t.running[2] = Some(TaskId(1));
        t.get_mut(TaskId(1)).unwrap().st = St::Running(CpuId(2));
        assert_eq!(t.refused_pick(CpuId(2), TaskId(1), Refusal::NotAllowed), Undo::Requeue { zero_slice: false });
        assert_eq!(t.running[2], None);
        // Running on another CPU than the refused decision's: not this pick's, left alone.
        t.running[3] = Some(TaskId(2));
        t.get_mut(TaskId(2)).unwrap().st = St::Running(CpuId(3));
        assert_eq!(t.refused_pick(CpuId(2), TaskId(2), Refusal::NotAllowed), Undo::Nothing);
        assert_eq!((t.running[3], t.get(TaskId(2)).unwrap().st), (Some(TaskId(2)), St::Running(CpuId(3))));
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "does not name")]
    fn forget_named_ref_catches_an_entry_the_state_does_not_name() {
        let mut t = table();
        t.running[1] = Some(TaskId(1));
        t.get_mut(TaskId(1)).unwrap().st = St::Running(CpuId(0));
        t.forget_named_ref(TaskId(1));
    }
}
