//! Round robin as a loadable module: a copy of vassal's built-in `rr` (Go!'s GTE round
//! robin, paper 003 §4) written with the SDK, as the first example.
//!
//! Rules (as crates/policies/src/rr.rs):
//! - one global FIFO run queue; a CPU takes the first task in it that may run there, for
//!   one `quantum` (parameter, default 10ms);
//! - a woken or newly attached runnable task joins the tail;
//! - a task whose slice expired, or that yielded, goes to the tail with a fresh quantum;
//! - a task preempted by a reschedule before its quantum ended goes back to the head and
//!   keeps the rest of its quantum;
//! - a blocked or detached task leaves the queue.
//!
//! Parameters: `quantum` (duration), `reserved` (the CPU share declared to the hierarchy,
//! in CPUs; default 0.5).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use vassal_sdk::*;

struct Rr {
    quantum: Ns,
    queue: VecDeque<TaskId>,
    /// Quantum used so far by each attached task.
    used: BTreeMap<TaskId, Ns>,
    /// The tasks in `queue` (so that removing one that is not queued costs no scan).
    queued: BTreeSet<TaskId>,
}

impl Rr {
    fn remove(&mut self, t: TaskId) {
        if self.queued.remove(&t) {
            self.queue.retain(|&q| q != t);
        }
    }
    fn push_back(&mut self, t: TaskId) {
        if self.queued.insert(t) {
            self.queue.push_back(t);
        }
    }
    fn push_front(&mut self, t: TaskId) {
        if self.queued.insert(t) {
            self.queue.push_front(t);
        }
    }
}

impl Policy for Rr {
    fn kind(&self) -> &str {
        "rr.wasm"
    }
    fn on_attach(&mut self, _ctx: &mut Ctx, task: TaskId, info: &AttachInfo) -> Result<(), String> {
        self.used.insert(task, 0);
        if info.state == TaskState::Runnable {
            self.push_back(task);
        }
        Ok(())
    }
    fn on_detach(&mut self, _ctx: &mut Ctx, task: TaskId, _why: Detach) {
        self.used.remove(&task);
        self.remove(task);
    }
    fn on_wake(&mut self, _ctx: &mut Ctx, task: TaskId, _wake: Wake) {
        if let Some(u) = self.used.get_mut(&task) {
            *u = 0;
            self.push_back(task);
        }
    }
    fn on_block(&mut self, _ctx: &mut Ctx, task: TaskId, _block: Block) {
        self.remove(task);
    }
    fn on_dispatch(&mut self, _ctx: &mut Ctx, task: TaskId, _cpu: CpuId) {
        // Dispatched without being picked (a hand-off, or a guest run by its owner).
        self.remove(task);
    }
    fn on_run(&mut self, _ctx: &mut Ctx, task: TaskId, _cpu: CpuId, ran: Ns) {
        if let Some(u) = self.used.get_mut(&task) {
            *u = u.saturating_add(ran);
        }
    }
    fn on_preempt(&mut self, _ctx: &mut Ctx, task: TaskId, _cpu: CpuId, why: Preempt) {
        let Some(u) = self.used.get_mut(&task) else { return };
        if why == Preempt::Resched && *u < self.quantum {
            self.push_front(task);
        } else {
            *u = 0;
            self.push_back(task);
        }
    }
    fn pick(&mut self, ctx: &mut Ctx, cpu: CpuId) -> Option<Decision> {
        let i = self.queue.iter().position(|&t| ctx.allowed(t, cpu))?;
        let t = self.queue.remove(i)?;
        self.queued.remove(&t);
        let used = self.used.get(&t).copied().unwrap_or(0);
        Some(Decision::run(t, self.quantum.saturating_sub(used).max(1)))
    }
    fn on_refused(&mut self, _ctx: &mut Ctx, _cpu: CpuId, d: Decision, _why: Refusal) {
        // Not run after all: back to the head if it is still ours.
        if self.used.contains_key(&d.task) {
            self.push_front(d.task);
        }
    }
}

fn build(p: &Params, _ncpus: u16) -> Result<Setup, String> {
    let quantum = p.duration("quantum", 10 * MS)?;
    if quantum == 0 {
        return Err("parameter 'quantum' must be positive".into());
    }
    let usage = p.reserved_usage(0.5)?;
    Ok(Setup { policy: Box::new(Rr { quantum, queue: VecDeque::new(), used: BTreeMap::new(), queued: BTreeSet::new() }), usage })
}

vassal_sdk::export_policy!(build);
