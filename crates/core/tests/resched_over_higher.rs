//! A lower scheduler's reschedule of a CPU running a higher scheduler's decision is
//! dropped (`drop_reschedules_over_higher`), but only its own: a reschedule the higher
//! scheduler asked for earlier in the same call chain must survive. Regression: a task
//! joining a loaded BVT while both CPUs ran that BVT's tasks was also attached to the
//! default as a guest; the default's call dropped the loaded BVT's own preemption request
//! made a moment before, so the newcomer waited forever (found in the Linux agent, where
//! the watchdog ejected the BVT module for it).

mod common;

use std::collections::VecDeque;

use common::effects;
use vassal_core::*;

/// A FIFO that asks CPU 0 for a new decision whenever a runnable task attaches to it
/// (as BVT does when a newcomer should preempt: `ctx.resched`).
struct Eager {
    queue: VecDeque<TaskId>,
}

impl Policy for Eager {
    fn kind(&self) -> &str {
        "eager"
    }
    fn on_attach(&mut self, ctx: &mut Ctx, task: TaskId, info: &AttachInfo) -> Result<(), String> {
        if info.state == TaskState::Runnable {
            self.queue.push_back(task);
            ctx.resched(CpuId(0)).map_err(|e| e.to_string())?;
        }
        Ok(())
    }
    fn on_detach(&mut self, _: &mut Ctx, task: TaskId, _: Detach) {
        self.queue.retain(|&t| t != task);
    }
    fn on_wake(&mut self, _: &mut Ctx, task: TaskId, _: Wake) {
        self.queue.push_back(task);
    }
    fn on_block(&mut self, _: &mut Ctx, task: TaskId, _: Block) {
        self.queue.retain(|&t| t != task);
    }
    fn on_dispatch(&mut self, _: &mut Ctx, task: TaskId, _: CpuId) {
        self.queue.retain(|&t| t != task);
    }
    fn on_preempt(&mut self, _: &mut Ctx, task: TaskId, _: CpuId, _: Preempt) {
        self.queue.push_back(task);
    }
    fn pick(&mut self, ctx: &mut Ctx, cpu: CpuId) -> Option<Decision> {
        let i = self.queue.iter().position(|&t| ctx.allowed(t, cpu))?;
        self.queue.remove(i).map(Decision::run_until_block)
    }
}

fn eager() -> Box<dyn Policy> {
    Box::new(Eager { queue: VecDeque::new() })
}

#[test]
fn a_higher_schedulers_reschedule_survives_the_defaults_guest_attach() {
    let c0 = CpuId(0);
    let mut d = Dispatcher::new(1, "def", eager(), HierarchyConfig::default());
    let top = d.register("top", eager(), Usage::Reserved { cpu_ppm: 100_000 }, Position::Top).unwrap();
    let join = |d: &mut Dispatcher, t: TaskId| d.message(0, top, Sender { task: Some(t), uid: 0 }, t, &Request::Join);
    let a = d.add_task(0, TaskParams::new(), CpuSet::NONE, None, true);
    assert_eq!(join(&mut d, a), Reply::Ok);
    effects(&mut d);
    let first = d.schedule(0, c0, Preempt::Resched).expect("a decision");
    assert_eq!((first.task, first.by), (a, top));
    effects(&mut d);
    // b joins `top`; `top` asks CPU 0 to decide again; then the default gets b as a guest
    // and asks the same, which alone is dropped (CPU 0 runs top's decision).
    let b = d.add_task(0, TaskParams::new(), CpuSet::NONE, None, true);
    effects(&mut d);
    assert_eq!(join(&mut d, b), Reply::Ok);
    let e = effects(&mut d);
    assert!(e.contains(&Effect::Resched(c0)), "top's reschedule was dropped: {e:?}");
    // And it is acted on: `top` decides again (FIFO: a was preempted to the back, b runs).
    let next = d.schedule(0, c0, Preempt::Resched).expect("a decision");
    assert_eq!((next.task, next.by), (b, top));
}
