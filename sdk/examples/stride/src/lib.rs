//! Stride scheduling (Waldspurger & Weihl, "Stride Scheduling: Deterministic
//! Proportional-Share Resource Management", MIT/LCS/TM-528, 1995) as a loadable module.
//!
//! Rules:
//! - each task holds `tickets` (task parameter, default 100); its *stride* is
//!   STRIDE1 / tickets;
//! - each task has a *pass*; a CPU runs the runnable task with the smallest pass (ties:
//!   smaller task id) for one `quantum` (scheduler parameter, default 10ms);
//! - a task that ran `ran` ns advances its pass by stride · ran / quantum (the paper's
//!   fractional-quantum charge), the remainder carried exactly so nothing drifts;
//! - a task joining or waking starts no earlier than the *global pass* (the smallest pass
//!   of the runnable tasks), so a sleeper does not bank credit (the paper's
//!   global_pass/remain bookkeeping, simplified to a lower bound).
//!
//! Parameters: `quantum` (duration), `reserved` (declared CPU share, default 0.5).

use std::collections::{BTreeMap, BTreeSet};
use vassal_sdk::*;

const STRIDE1: u128 = 1 << 20;

struct Task {
    stride: u128,
    pass: u128,
    /// Carried remainder of stride·ran, in units of 1/quantum.
    rem: u128,
    queued: bool,
}

struct Stride {
    quantum: Ns,
    tasks: BTreeMap<TaskId, Task>,
    /// (pass, task) of the runnable, not running tasks.
    queue: BTreeSet<(u128, TaskId)>,
}

impl Stride {
    fn global_pass(&self) -> u128 {
        self.queue.first().map_or(0, |&(p, _)| p)
    }
    fn enqueue(&mut self, t: TaskId) {
        let gp = self.global_pass();
        if let Some(k) = self.tasks.get_mut(&t) {
            if !k.queued {
                k.pass = k.pass.max(gp);
                k.queued = true;
                self.queue.insert((k.pass, t));
            }
        }
    }
    fn dequeue(&mut self, t: TaskId) {
        if let Some(k) = self.tasks.get_mut(&t) {
            if k.queued {
                k.queued = false;
                self.queue.remove(&(k.pass, t));
            }
        }
    }
}

impl Policy for Stride {
    fn kind(&self) -> &str {
        "stride.wasm"
    }
    fn on_attach(&mut self, _ctx: &mut Ctx, task: TaskId, info: &AttachInfo) -> Result<(), String> {
        let tickets = info.params.get("tickets").copied().unwrap_or(100);
        if !(1..=1_000_000).contains(&tickets) {
            return Err(format!("tickets must be 1..=1000000, not {tickets}"));
        }
        let gp = self.global_pass();
        self.tasks.insert(task, Task { stride: STRIDE1 / tickets as u128, pass: gp, rem: 0, queued: false });
        if info.state == TaskState::Runnable {
            self.enqueue(task);
        }
        Ok(())
    }
    fn on_detach(&mut self, _ctx: &mut Ctx, task: TaskId, _why: Detach) {
        self.dequeue(task);
        self.tasks.remove(&task);
    }
    fn on_wake(&mut self, _ctx: &mut Ctx, task: TaskId, _wake: Wake) {
        self.enqueue(task);
    }
    fn on_block(&mut self, _ctx: &mut Ctx, task: TaskId, _block: Block) {
        self.dequeue(task);
    }
    fn on_dispatch(&mut self, _ctx: &mut Ctx, task: TaskId, _cpu: CpuId) {
        self.dequeue(task);
    }
    fn on_run(&mut self, _ctx: &mut Ctx, task: TaskId, _cpu: CpuId, ran: Ns) {
        let q = self.quantum as u128;
        if let Some(k) = self.tasks.get_mut(&task) {
            let total = k.stride * ran as u128 + k.rem;
            k.pass += total / q;
            k.rem = total % q;
        }
    }
    fn on_preempt(&mut self, _ctx: &mut Ctx, task: TaskId, _cpu: CpuId, _why: Preempt) {
        if let Some(k) = self.tasks.get_mut(&task) {
            k.queued = true;
            self.queue.insert((k.pass, task));
        }
    }
    fn pick(&mut self, ctx: &mut Ctx, cpu: CpuId) -> Option<Decision> {
        let &(pass, t) = self.queue.iter().find(|&&(_, t)| ctx.allowed(t, cpu))?;
        self.queue.remove(&(pass, t));
        if let Some(k) = self.tasks.get_mut(&t) {
            k.queued = false;
        }
        Some(Decision::run(t, self.quantum))
    }
    fn on_refused(&mut self, _ctx: &mut Ctx, _cpu: CpuId, d: Decision, _why: Refusal) {
        if let Some(k) = self.tasks.get_mut(&d.task) {
            if !k.queued {
                k.queued = true;
                self.queue.insert((k.pass, d.task));
            }
        }
    }
}

fn build(p: &Params, _ncpus: u16) -> Result<Setup, String> {
    let quantum = p.duration("quantum", 10 * MS)?;
    if quantum == 0 {
        return Err("parameter 'quantum' must be positive".into());
    }
    let usage = p.reserved_usage(0.5)?;
    Ok(Setup { policy: Box::new(Stride { quantum, tasks: BTreeMap::new(), queue: BTreeSet::new() }), usage })
}

vassal_sdk::export_policy!(build);
