//! `edf`, `fps`, `rr` and `wrr` take an accepted pick as the task's dispatch (`Policy::dispatches_in_pick`,
//! docs/bench.md, eighteenth round). Driven directly, without a dispatcher, to reach what a
//! dispatcher never does with them: a refused pick is undone (the task waits again and is
//! picked again), and an `on_dispatch` after the pick — from a wrapper that does not pass
//! the answer on — changes nothing.

use vassal_core::{AttachInfo, CpuId, CpuSet, Ctx, Effect, Policy, Refusal, SchedId, TaskId, TaskParams, TaskState, TaskView};
use vassal_policies::edf::Edf;
use vassal_policies::fps::FixedPriority;
use vassal_policies::rr::RoundRobin;
use vassal_policies::wrr::WeightedRoundRobin;

/// Every task runnable, allowed everywhere, owned by scheduler 0, and no CPU shown
/// running anything.
struct View;

impl TaskView for View {
    fn state(&self, _task: TaskId) -> TaskState {
        TaskState::Runnable
    }
    fn affinity(&self, _task: TaskId) -> CpuSet {
        CpuSet::first(2)
    }
    fn owner(&self, _task: TaskId) -> Option<SchedId> {
        Some(SchedId(0))
    }
    fn last_cpu(&self, _task: TaskId) -> Option<CpuId> {
        None
    }
    fn running_on(&self, _cpu: CpuId) -> Option<TaskId> {
        None
    }
}

/// Calls `f` with a context at time 0 on 2 CPUs; returns its result.
fn with_ctx<R>(f: impl FnOnce(&mut Ctx) -> R) -> R {
    let (mut fx, mut ex): (Vec<Effect>, Vec<(TaskId, bool)>) = (Vec::new(), Vec::new());
    let mut ctx = Ctx::new(0, 2, SchedId(0), &mut fx, &mut ex, &View);
    f(&mut ctx)
}

/// Two periodic tasks attached runnable: task 0 with the shorter period (the earlier
/// deadline, the higher rate-monotonic priority) and first (the head of a FIFO).
fn attach_two(p: &mut dyn Policy) {
    p.init(2);
    for (i, period) in [(0, 10_000_000), (1, 20_000_000)] {
        let params: TaskParams = [("period".to_string(), period)].into_iter().collect();
        let info = AttachInfo { state: TaskState::Runnable, params: &params, affinity: CpuSet::first(2), parent: None, guest: false };
        with_ctx(|ctx| p.on_attach(ctx, TaskId(i), &info)).unwrap();
    }
}

fn pick(p: &mut dyn Policy, cpu: u16) -> Option<TaskId> {
    with_ctx(|ctx| p.pick(ctx, CpuId(cpu))).map(|d| d.task)
}

fn policies() -> Vec<Box<dyn Policy>> {
    vec![
        Box::new(Edf::new(10_000_000)),
        Box::new(FixedPriority::new(true, None)),
        Box::new(RoundRobin::new(10_000_000)),
        Box::new(WeightedRoundRobin::new(10_000_000)),
    ]
}

#[test]
fn both_say_their_pick_is_the_dispatch() {
    for p in policies() {
        assert!(p.dispatches_in_pick(), "{}", p.kind());
    }
}

#[test]
fn a_refused_pick_waits_again() {
    for mut p in policies() {
        attach_two(p.as_mut());
        let d = with_ctx(|ctx| p.pick(ctx, CpuId(0))).unwrap();
        assert_eq!(d.task, TaskId(0), "{}", p.kind());
        with_ctx(|ctx| p.on_refused(ctx, CpuId(0), d, Refusal::NotAllowed));
        // Undone: task 0 waits again, so it is the best one to pick (not task 1).
        assert_eq!(pick(p.as_mut(), 1), Some(TaskId(0)), "{}", p.kind());
    }
}

#[test]
fn a_dispatch_told_after_the_pick_changes_nothing() {
    for mut p in policies() {
        attach_two(p.as_mut());
        assert_eq!(pick(p.as_mut(), 0), Some(TaskId(0)), "{}", p.kind());
        with_ctx(|ctx| p.on_dispatch(ctx, TaskId(0), CpuId(0)));
        // Task 0 runs on cpu0: cpu1 gets task 1, and then nothing is left.
        assert_eq!(pick(p.as_mut(), 1), Some(TaskId(1)), "{}", p.kind());
        assert_eq!(pick(p.as_mut(), 1), None, "{}", p.kind());
    }
}
