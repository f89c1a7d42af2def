//! EDF: classic preemptive earliest-deadline-first scheduling of periodic tasks (Liu &
//! Layland 1973), the deadline policy beside rate-monotonic (`fps` with `rm = true`) for
//! the periodic task sets of the BVT paper's deadline comparison (paper 001 §5, issue 4).
//!
//! Rules:
//! - per-task parameters "period" (ns, > 0) and "deadline" (relative ns, > 0; default the
//!   period). A task without a period is background work, below every periodic task,
//!   served round robin with `quantum` (policy parameter, default 10 ms).
//! - **Jobs**: a periodic task that wakes from a voluntary sleep starts a new job, due at
//!   wake time + deadline (a periodic task sleeps between jobs; a task attached runnable
//!   starts one at once). An involuntary block (a page fault) does not start a new job.
//! - **Dispatch**: each CPU runs the runnable task with the earliest absolute deadline
//!   that may run there (ties: the lower task id); global EDF on several CPUs.
//! - **Preemption**: a task whose job starts preempts a CPU running one of ours with a
//!   later deadline (the latest such), unless a CPU it may use is idle.
//! - **Late jobs**: the policy is not told when a job finishes unless the task blocks, so
//!   a task still runnable at its deadline is taken to have started its next job (its
//!   deadline moves on by whole periods past now) when it stops running (slice end or
//!   preemption; the running task's slice ends at its deadline so that this is applied on
//!   time). A task waiting in the queue keeps its past deadline, as a late job does in
//!   classic EDF, so `pick` stays O(log n) however many deadlines pass. For a periodic task with deadline = period
//!   this is exactly the next job's deadline; EDF meets every deadline when the total
//!   utilisation is at most 1 (Liu & Layland's theorem 7), so it only matters in overload.
//! - `Request::Param { name: "period" | "deadline" }` changes a task's parameters from its
//!   next job on.
//!
//! Cost: one ordered ready set, so wake, block, preempt and `pick` are O(log n) plus the
//! tasks a CPU's affinity passes over; the preemption check is O(CPUs).

use std::collections::BTreeSet;

use vassal_core::{
    AttachInfo, Block, CpuId, Ctx, Decision, Detach, Ns, Policy, Preempt, Refusal, Reply, Request, Sender, TaskId, TaskParams, TaskState,
    Wake, MS,
};

use crate::params::Params;
use crate::task_table::{St, Tasks, Undo};

/// A ready task's place: (class: 0 periodic, 1 background; absolute deadline or FIFO
/// sequence; task).
type Key = (u8, u64, u32);

#[derive(Clone, Copy, Debug)]
struct Task {
    queued: Option<Key>,
    /// (period, relative deadline), None for background work.
    timing: Option<(Ns, Ns)>,
    /// The current job's absolute deadline.
    deadline: Ns,
    seq: u64,
}

impl Task {
    fn key(&self, id: TaskId) -> Key {
        match self.timing {
            Some(_) => (0, self.deadline, id.0),
            None => (1, self.seq, id.0),
        }
    }
}

/// Earliest deadline first. See the module documentation.
#[derive(Debug)]
pub struct Edf {
    quantum: Ns,
    table: Tasks<Task>,
    ready: BTreeSet<Key>,
}

/// Builds an `edf` scheduler: parameter `quantum` (duration, default 10 ms) for the
/// background round robin.
pub fn build(p: &mut Params) -> Result<Edf, String> {
    let quantum = p.duration("quantum", 10 * MS)?;
    if quantum == 0 {
        return Err("edf parameter 'quantum': must be greater than zero".into());
    }
    Ok(Edf::new(quantum))
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
    pub fn new(quantum: Ns) -> Self {
        Edf { quantum: quantum.max(1), table: Tasks::default(), ready: BTreeSet::new() }
    }

    /// The current absolute deadline of a periodic task.
    pub fn deadline_of(&self, task: TaskId) -> Option<Ns> {
        self.table.get(task).filter(|t| t.timing.is_some()).map(|t| t.deadline)
    }

    /// A runnable task past its deadline has started its next job (module docs).
    fn catch_up(&mut self, id: TaskId, now: Ns) {
        let Some(t) = self.table.get_mut(id) else { return };
        if let Some((period, _)) = t.timing {
            if t.deadline <= now {
                let k = (now - t.deadline) / period + 1;
                t.deadline = t.deadline.saturating_add(k.saturating_mul(period));
            }
        }
    }

    fn set_st(&mut self, id: TaskId, st: St) {
        let Some(t) = self.table.get(id).copied() else { return };
        if let Some(k) = t.queued {
            self.ready.remove(&k);
        }
        let queued = (st == St::Ready).then(|| t.key(id));
        if let Some(k) = queued {
            self.ready.insert(k);
        }
        if let Some(t) = self.table.get_mut(id) {
            t.st = st;
            t.queued = queued;
        }
    }

    /// A task became ready: take an idle CPU, or preempt ours running the latest deadline
    /// later than its own.
    fn check_preempt(&mut self, ctx: &mut Ctx, id: TaskId) {
        let Some(t) = self.table.get(id).copied() else { return };
        let key = t.key(id);
        let aff = ctx.affinity(id);
        let mut victim: Option<(Key, CpuId)> = None;
        for c in ctx.cpus() {
            if !aff.contains(c) {
                continue;
            }
            match ctx.running_on(c) {
                None => {
                    let _ = ctx.resched(c);
                    return;
                }
                Some(r) if self.table.running_on(c) == Some(r) => {
                    if let Some(rt) = self.table.get(r) {
                        let rk = rt.key(r);
                        if rk > key && victim.is_none_or(|(vk, _)| rk > vk) {
                            victim = Some((rk, c));
                        }
                    }
                }
                Some(_) => {}
            }
        }
        if let Some((_, c)) = victim {
            let _ = ctx.resched(c);
        }
    }
}

impl Policy for Edf {
    fn kind(&self) -> &str {
        "edf"
    }

    fn init(&mut self, ncpus: u16) {
        self.table.init(ncpus);
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
        self.table.insert(task, St::Blocked, Task { queued: None, timing, deadline, seq })?;
        if let St::Running(c) = st {
            self.table.set_running(c, task);
        }
        self.set_st(task, st);
        if st == St::Ready {
            self.check_preempt(ctx, task);
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
            if wake.voluntary {
                t.deadline = now.saturating_add(d); // a new job
            }
        }
        self.catch_up(task, now);
        self.set_st(task, St::Ready);
        self.check_preempt(ctx, task);
    }

    fn on_block(&mut self, _ctx: &mut Ctx, task: TaskId, _block: Block) {
        if self.table.get(task).is_none() {
            return;
        }
        self.set_st(task, St::Blocked);
        self.table.forget_cpu_refs(task);
    }

    fn on_dispatch(&mut self, ctx: &mut Ctx, task: TaskId, cpu: CpuId) {
        let ci = cpu.0 as usize;
        if ci >= self.table.ncpus() || self.table.get(task).is_none() {
            return;
        }
        self.table.picked[ci] = None;
        self.table.forget_cpu_refs(task);
        self.table.running[ci] = Some(task);
        self.set_st(task, St::Running(cpu));
        if let Some(&(_, _, next)) = self.ready.first() {
            crate::rr::kick_idle(ctx, TaskId(next), cpu);
        }
    }

    fn on_preempt(&mut self, ctx: &mut Ctx, task: TaskId, cpu: CpuId, why: Preempt) {
        if self.table.get(task).is_none() {
            return;
        }
        self.table.clear_running(cpu, task);
        if why != Preempt::Resched {
            let seq = self.table.tail_seq();
            if let Some(t) = self.table.get_mut(task) {
                t.seq = seq;
            }
        }
        self.catch_up(task, ctx.now());
        self.set_st(task, St::Ready);
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
        let now = ctx.now();
        loop {
            let &(class, key, raw) = self.ready.iter().find(|&&(_, _, t)| ctx.allowed(TaskId(t), cpu))?;
            let id = TaskId(raw);
            match ctx.state(id) {
                TaskState::Runnable => {
                    let slice = match (class, self.table.get(id).and_then(|t| t.timing)) {
                        (0, Some((period, _))) if key <= now => {
                            // A late job keeps its (past) deadline while it waits, as in
                            // classic EDF; it runs until the deadline its next job would
                            // have, where `on_preempt` moves it on (module docs).
                            period - (now - key) % period
                        }
                        (0, _) => key - now,
                        _ => self.quantum,
                    };
                    self.table.picked[ci] = Some(id);
                    self.set_st(id, St::Picked(cpu));
                    return Some(Decision::run(id, slice));
                }
                TaskState::Running(c) => self.set_st(id, St::Running(c)),
                TaskState::Blocked => self.set_st(id, St::Blocked),
                TaskState::Dead => self.on_detach(ctx, id, Detach::Exit),
            }
        }
    }

    fn on_refused(&mut self, ctx: &mut Ctx, cpu: CpuId, decision: Decision, why: Refusal) {
        match self.table.refused(cpu, decision.task, why) {
            Undo::Forget => self.on_detach(ctx, decision.task, Detach::Moved),
            Undo::Requeue { .. } => self.set_st(decision.task, St::Ready),
            Undo::Nothing | Undo::Blocked | Undo::Running(_) => {}
        }
    }
}
