//! A policy shared between the dispatcher and someone who wants to look inside it
//! (tests, a report of a policy's internal state): the dispatcher owns a `Shared`, which
//! forwards every callback to the policy behind the mutex.

use std::sync::{Arc, Mutex, MutexGuard};

use crate::ids::{CpuId, TaskId};
use crate::policy::{
    AttachInfo, Block, Ctx, Decision, Detach, Job, Policy, PolicyLog, Preempt, Refusal, Reply, Request, Sender, VirtualTime, Wake,
};
use crate::time::Ns;

/// Forwards every [`Policy`] callback to `P` behind an `Arc<Mutex<_>>`.
pub struct Shared<P> {
    inner: Arc<Mutex<P>>,
    kind: String,
}

impl<P: Policy> Shared<P> {
    /// Wraps `policy`; returns the wrapper (for the dispatcher) and a handle to it.
    pub fn new(policy: P) -> (Shared<P>, Arc<Mutex<P>>) {
        let inner = Arc::new(Mutex::new(policy));
        (Shared::of(&inner), inner)
    }

    /// A wrapper around an existing handle.
    pub fn of(inner: &Arc<Mutex<P>>) -> Shared<P> {
        let kind = Shared::lock(inner).kind().to_string();
        Shared { inner: Arc::clone(inner), kind }
    }

    // A panic while the lock was held already failed whoever held it; the policy's
    // state is still the best there is, so go on with it.
    fn lock(inner: &Arc<Mutex<P>>) -> MutexGuard<'_, P> {
        inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn get(&self) -> MutexGuard<'_, P> {
        Shared::lock(&self.inner)
    }
}

impl<P: Policy> Policy for Shared<P> {
    fn kind(&self) -> &str {
        &self.kind
    }
    fn init(&mut self, ncpus: u16) {
        self.get().init(ncpus)
    }
    fn on_attach(&mut self, ctx: &mut Ctx, task: TaskId, info: &AttachInfo) -> Result<(), String> {
        self.get().on_attach(ctx, task, info)
    }
    fn on_detach(&mut self, ctx: &mut Ctx, task: TaskId, why: Detach) {
        self.get().on_detach(ctx, task, why)
    }
    fn on_wake(&mut self, ctx: &mut Ctx, task: TaskId, wake: Wake) {
        self.get().on_wake(ctx, task, wake)
    }
    fn on_job(&mut self, ctx: &mut Ctx, task: TaskId, job: Job) {
        self.get().on_job(ctx, task, job)
    }
    fn on_block(&mut self, ctx: &mut Ctx, task: TaskId, block: Block) {
        self.get().on_block(ctx, task, block)
    }
    fn on_dispatch(&mut self, ctx: &mut Ctx, task: TaskId, cpu: CpuId) {
        self.get().on_dispatch(ctx, task, cpu)
    }
    fn on_preempt(&mut self, ctx: &mut Ctx, task: TaskId, cpu: CpuId, why: Preempt) {
        self.get().on_preempt(ctx, task, cpu, why)
    }
    fn on_run(&mut self, ctx: &mut Ctx, task: TaskId, cpu: CpuId, ran: Ns) {
        self.get().on_run(ctx, task, cpu, ran)
    }
    fn on_tick(&mut self, ctx: &mut Ctx, cpu: CpuId) {
        self.get().on_tick(ctx, cpu)
    }
    fn on_event(&mut self, ctx: &mut Ctx, token: u64) {
        self.get().on_event(ctx, token)
    }
    fn on_message(&mut self, ctx: &mut Ctx, from: Sender, task: TaskId, req: &Request) -> Reply {
        self.get().on_message(ctx, from, task, req)
    }
    fn pick(&mut self, ctx: &mut Ctx, cpu: CpuId) -> Option<Decision> {
        self.get().pick(ctx, cpu)
    }
    fn on_refused(&mut self, ctx: &mut Ctx, cpu: CpuId, decision: Decision, why: Refusal) {
        self.get().on_refused(ctx, cpu, decision, why)
    }
    fn drain_log(&mut self, out: &mut Vec<PolicyLog>) {
        self.get().drain_log(out)
    }
    fn virtual_time(&self, task: TaskId) -> Option<VirtualTime> {
        self.get().virtual_time(task)
    }
}
