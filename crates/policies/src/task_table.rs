//! The per-task bookkeeping shared by the deadline policies [`crate::edf`] and
//! [`crate::dbs`]: a task table indexed by `TaskId`, each task's state (blocked, ready,
//! picked, running), the per-CPU `picked` / `running` tables, and a FIFO sequence counter.
//! The policies keep their own queues and rules; this holds only what they do alike.

use vassal_core::{AttachInfo, CpuId, Ctx, TaskId, TaskState};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum St {
    Blocked,
    /// In the policy's ready queue(s).
    Ready,
    /// Returned by `pick` on this CPU; `on_dispatch` or `on_refused` follows.
    Picked(CpuId),
    Running(CpuId),
}

/// The state a task attached in `info` starts in (a dead task is refused).
pub(crate) fn attach_state(task: TaskId, info: &AttachInfo) -> Result<St, String> {
    Ok(match info.state {
        TaskState::Runnable => St::Ready,
        TaskState::Running(c) => St::Running(c),
        TaskState::Blocked => St::Blocked,
        TaskState::Dead => return Err(format!("{task} has exited")),
    })
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

/// The tasks (policy data `T`, indexed by `TaskId`) and the per-CPU entries `R`.
#[derive(Debug)]
pub(crate) struct TaskTable<T, R> {
    tasks: Vec<Option<T>>,
    next_seq: u64,
    /// Per CPU: the entry the policy picked and has not yet seen dispatched.
    pub picked: Vec<Option<R>>,
    /// Per CPU: the entry running there that the policy charges.
    pub running: Vec<Option<R>>,
}

impl<T, R> Default for TaskTable<T, R> {
    fn default() -> Self {
        TaskTable { tasks: Vec::new(), next_seq: 0, picked: Vec::new(), running: Vec::new() }
    }
}

impl<T, R: CpuEntry> TaskTable<T, R> {
    /// Sizes the per-CPU tables for the machine.
    pub fn ensure(&mut self, ctx: &Ctx) {
        let n = ctx.ncpus().max(1) as usize;
        if self.running.len() < n {
            self.running.resize(n, None);
            self.picked.resize(n, None);
        }
    }

    pub fn get(&self, id: TaskId) -> Option<&T> {
        self.tasks.get(id.0 as usize).and_then(|t| t.as_ref())
    }

    pub fn get_mut(&mut self, id: TaskId) -> Option<&mut T> {
        self.tasks.get_mut(id.0 as usize).and_then(|t| t.as_mut())
    }

    /// Stores the task's data at `idx` (from [`crate::task_index`]), growing the table.
    pub fn put(&mut self, idx: usize, t: T) {
        if idx >= self.tasks.len() {
            self.tasks.resize_with(idx + 1, || None);
        }
        self.tasks[idx] = Some(t);
    }

    /// Drops the task's data.
    pub fn remove(&mut self, id: TaskId) {
        if let Some(t) = self.tasks.get_mut(id.0 as usize) {
            *t = None;
        }
    }

    /// The next place at the tail of a FIFO.
    pub fn tail_seq(&mut self) -> u64 {
        self.next_seq += 1;
        self.next_seq
    }

    /// Records `entry` as running on CPU `c` (a task attached while running).
    pub fn set_running(&mut self, c: CpuId, entry: R) {
        if let Some(r) = self.running.get_mut(c.0 as usize) {
            *r = Some(entry);
        }
    }

    /// Clears the `running` entry of CPU `cpu` if it is the task's.
    pub fn clear_running(&mut self, cpu: CpuId, id: TaskId) {
        if let Some(r) = self.running.get_mut(cpu.0 as usize) {
            if r.is_some_and(|r| r.task() == id) {
                *r = None;
            }
        }
    }

    /// Clears the `picked` entry of CPU `cpu` if it is the task's.
    pub fn clear_picked(&mut self, cpu: CpuId, id: TaskId) {
        if let Some(p) = self.picked.get_mut(cpu.0 as usize) {
            if p.is_some_and(|p| p.task() == id) {
                *p = None;
            }
        }
    }

    /// Clears every `running` and `picked` entry of the task.
    pub fn forget_cpu_refs(&mut self, id: TaskId) {
        for r in self.running.iter_mut().chain(self.picked.iter_mut()) {
            if r.is_some_and(|r| r.task() == id) {
                *r = None;
            }
        }
    }
}
