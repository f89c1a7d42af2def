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

use std::collections::VecDeque;
use vassal_sdk::*;

struct Rr {
    quantum: Ns,
    queue: VecDeque<TaskId>,
    /// Per task id (dense vectors: every instruction of a module is interpreted, so a
    /// vector index beats a tree lookup): quantum used so far (None: not attached) ...
    used: Vec<Option<Ns>>,
    /// ... and whether it is in `queue` (so removing one that is not costs no scan).
    queued: Vec<bool>,
}

impl Rr {
    fn slot(&mut self, t: TaskId) -> &mut Option<Ns> {
        let i = t.0 as usize;
        if i >= self.used.len() {
            self.used.resize(i + 1, None);
            self.queued.resize(i + 1, false);
        }
        &mut self.used[i]
    }
    fn used(&self, t: TaskId) -> Option<Ns> {
        self.used.get(t.0 as usize).copied().flatten()
    }
    fn remove(&mut self, t: TaskId) {
        if let Some(q) = self.queued.get_mut(t.0 as usize).filter(|q| **q) {
            *q = false;
            self.queue.retain(|&x| x != t);
        }
    }
    /// Queues an attached task not yet queued, at the back or the front.
    fn push(&mut self, t: TaskId, front: bool) {
        if self.used(t).is_none() || self.queued[t.0 as usize] {
            return;
        }
        self.queued[t.0 as usize] = true;
        if front {
            self.queue.push_front(t)
        } else {
            self.queue.push_back(t)
        }
    }
}

impl Policy for Rr {
    fn kind(&self) -> &str {
        "rr.wasm"
    }
    fn on_attach(&mut self, _ctx: &mut Ctx, task: TaskId, info: &AttachInfo) -> Result<(), String> {
        *self.slot(task) = Some(0);
        if info.state == TaskState::Runnable {
            self.push(task, false);
        }
        Ok(())
    }
    fn on_detach(&mut self, _ctx: &mut Ctx, task: TaskId, _why: Detach) {
        self.remove(task);
        *self.slot(task) = None;
    }
    fn on_wake(&mut self, _ctx: &mut Ctx, task: TaskId, _wake: Wake) {
        if self.used(task).is_some() {
            *self.slot(task) = Some(0);
            self.push(task, false);
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
        if let Some(u) = self.used(task) {
            *self.slot(task) = Some(u.saturating_add(ran));
        }
    }
    fn on_preempt(&mut self, _ctx: &mut Ctx, task: TaskId, _cpu: CpuId, why: Preempt) {
        let Some(u) = self.used(task) else { return };
        if why == Preempt::Resched && u < self.quantum {
            self.push(task, true);
        } else {
            *self.slot(task) = Some(0);
            self.push(task, false);
        }
    }
    fn pick(&mut self, ctx: &mut Ctx, cpu: CpuId) -> Option<Decision> {
        let i = self.queue.iter().position(|&t| ctx.allowed(t, cpu))?;
        let t = self.queue.remove(i)?;
        self.queued[t.0 as usize] = false;
        let used = self.used(t).unwrap_or(0);
        Some(Decision::run(t, self.quantum.saturating_sub(used).max(1)))
    }
    fn on_refused(&mut self, _ctx: &mut Ctx, _cpu: CpuId, d: Decision, _why: Refusal) {
        // Not run after all: back to the head if it is still ours.
        self.push(d.task, true);
    }
}

fn build(p: &Params, _ncpus: u16) -> Result<Setup, String> {
    let quantum = p.duration("quantum", 10 * MS)?;
    if quantum == 0 {
        return Err("parameter 'quantum' must be positive".into());
    }
    let usage = p.reserved_usage(0.5)?;
    Ok(Setup { policy: Box::new(Rr { quantum, queue: VecDeque::new(), used: Vec::new(), queued: Vec::new() }), usage })
}

vassal_sdk::export_policy!(build);
