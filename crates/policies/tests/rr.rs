//! Round robin (Go! GTE, paper 003 §4) driven through a real dispatcher: hand-computed
//! schedules, tick by tick.

mod common;

use common::*;
use vassal_core::{AttachInfo, CpuId, CpuSet, Ctx, Decision, Effect, Policy, Preempt, Refusal, Request, SchedId, TaskState};
use vassal_policies::RoundRobin;

fn rr(q_ms: u64) -> Box<dyn Policy> {
    Box::new(RoundRobin::new(ms(q_ms)))
}

#[test]
fn rr_three_tasks_take_turns() {
    let mut s = Sim::new(1, rr(10));
    let (a, b, c) = (s.add(&[], None, true), s.add(&[], None, true), s.add(&[], None, true));
    s.run_until(ms(60));
    assert_eq!(s.tasks(), vec![a, b, c, a, b, c, a]);
    assert_eq!(
        s.timeline(),
        vec![
            (0, 0, Some(10)),
            (10, 1, Some(10)),
            (20, 2, Some(10)),
            (30, 0, Some(10)),
            (40, 1, Some(10)),
            (50, 2, Some(10)),
            (60, 0, Some(10)),
        ]
    );
}

#[test]
fn rr_resched_keeps_place_and_rest_of_quantum() {
    let mut s = Sim::new(1, rr(10));
    let (a, b, c) = (s.add(&[], None, true), s.add(&[], None, true), s.add(&[], None, true));
    s.run_until(ms(4));
    // Some other scheduler asked for a decision on cpu0: A keeps its place (the head)
    // and gets the 6ms left of its quantum, then B and C follow as before.
    s.schedule(CpuId(0), Preempt::Resched);
    s.run_until(ms(39));
    assert_eq!(s.tasks(), vec![a, a, b, c, a]);
    assert_eq!(s.timeline(), vec![(0, 0, Some(10)), (4, 0, Some(6)), (10, 1, Some(10)), (20, 2, Some(10)), (30, 0, Some(10))]);
}

#[test]
fn rr_resched_after_whole_quantum_goes_to_tail() {
    let mut s = Sim::new(1, rr(10));
    let (a, b) = (s.add(&[], None, true), s.add(&[], None, true));
    // A has used all of its quantum when the reschedule comes: it is not kept at the head.
    s.now = ms(10);
    s.schedule(CpuId(0), Preempt::Resched);
    assert_eq!(s.tasks(), vec![a, b]);
}

#[test]
fn rr_preempted_by_higher_scheduler_resumes_before_others() {
    // A loaded scheduler (an rr itself) above the default rr takes cpu0 when its task
    // wakes; the default's A keeps its place and resumes with the rest of its quantum.
    let mut s = Sim::new(1, rr(10));
    let (a, b) = (s.add(&[], None, true), s.add(&[], None, true));
    let top = s.register_top("top", rr(10));
    let x = s.add(&[], None, false);
    assert_eq!(s.message(top, x, Request::Join), vassal_core::Reply::Ok);
    s.run_until(ms(3));
    s.wake(x);
    // The dispatcher may already have asked cpu0 to decide (a task of a higher scheduler
    // woke); a reschedule at the same instant changes nothing either way.
    s.schedule(CpuId(0), Preempt::Resched);
    s.run_until(ms(5));
    s.block(x);
    s.run_until(ms(30));
    assert_eq!(s.timeline(), vec![(0, 0, Some(10)), (3, 2, Some(10)), (5, 0, Some(7)), (12, 1, Some(10)), (22, 0, Some(10))]);
    assert_eq!(s.tasks()[..3], [a, x, a]);
    assert_eq!(s.tasks()[3], b);
}

#[test]
fn rr_wake_goes_to_tail_and_block_leaves_queue() {
    let mut s = Sim::new(1, rr(10));
    let (a, b, c) = (s.add(&[], None, true), s.add(&[], None, true), s.add(&[], None, true));
    s.run_until(ms(5));
    s.block(a); // B runs at 5 with a fresh quantum; queue [C]
    s.run_until(ms(7));
    s.wake(a); // queue [C, A]
    s.run_until(ms(40));
    assert_eq!(s.tasks(), vec![a, b, c, a, b]);
    assert_eq!(s.timeline(), vec![(0, 0, Some(10)), (5, 1, Some(10)), (15, 2, Some(10)), (25, 0, Some(10)), (35, 1, Some(10))]);
}

#[test]
fn rr_wake_of_only_task_runs_it_at_once() {
    let mut s = Sim::new(1, rr(10));
    let a = s.add(&[], None, false);
    assert!(s.log.is_empty());
    s.now = ms(3);
    s.wake(a);
    assert_eq!(s.timeline(), vec![(3, 0, Some(10))]);
}

#[test]
fn rr_yield_goes_to_tail() {
    let mut s = Sim::new(1, rr(10));
    let (a, b, c) = (s.add(&[], None, true), s.add(&[], None, true), s.add(&[], None, true));
    s.run_until(ms(3));
    s.yield_cpu(CpuId(0));
    s.run_until(ms(23));
    assert_eq!(s.tasks(), vec![a, b, c, a]);
    assert_eq!(s.timeline(), vec![(0, 0, Some(10)), (3, 1, Some(10)), (13, 2, Some(10)), (23, 0, Some(10))]);
}

#[test]
fn rr_exit_removes_task() {
    let mut s = Sim::new(1, rr(10));
    let (a, b, c) = (s.add(&[], None, true), s.add(&[], None, true), s.add(&[], None, true));
    s.exit(b); // queued, not running
    s.run_until(ms(2));
    s.exit(a); // running: C takes over at 2
    s.run_until(ms(30));
    assert_eq!(s.tasks(), vec![a, c, c, c]);
    assert_eq!(s.timeline(), vec![(0, 0, Some(10)), (2, 2, Some(10)), (12, 2, Some(10)), (22, 2, Some(10))]);
}

#[test]
fn rr_hand_off_takes_target_out_of_queue() {
    let mut s = Sim::new(1, rr(10));
    let (a, b, c) = (s.add(&[], None, true), s.add(&[], None, true), s.add(&[], None, true));
    s.run_until(ms(2));
    s.block_hand_off(a, c); // Go!'s block(hand_off): C runs now, without a slice
    s.run_until(ms(5));
    s.yield_cpu(CpuId(0)); // C to the tail: queue was [B], now [B, C]
    s.run_until(ms(24));
    assert_eq!(s.tasks(), vec![a, c, b, c]);
    assert_eq!(s.timeline(), vec![(0, 0, Some(10)), (2, 2, None), (5, 1, Some(10)), (15, 2, Some(10))]);
    // C was not left behind in the queue: after B and C, nothing else is waiting.
    s.run_until(ms(44));
    assert_eq!(s.tasks()[4..], [b, c]);
}

#[test]
fn rr_guest_tasks_take_turns_with_own_tasks() {
    // A task owned by a scheduler with no opinion is hosted by the default rr as a guest.
    let mut s = Sim::new(1, rr(10));
    let (a, b) = (s.add(&[], None, true), s.add(&[], None, true));
    let passive = s.register_top("passive", Box::new(Passive));
    let x = s.add(&[], None, true);
    assert_eq!(s.message(passive, x, Request::Join), vassal_core::Reply::Ok);
    assert!(s.drv.disp.is_guest(x));
    s.run_until(ms(50));
    assert_eq!(s.tasks(), vec![a, b, x, a, b, x]);
}

#[test]
fn rr_attach_running_task_keeps_it_running() {
    // X runs as a guest of the default rr; its owner is unregistered while X runs, so
    // the default attaches X in the Running state and must not lose or duplicate it.
    let mut s = Sim::new(1, rr(10));
    let passive = s.register_top("passive", Box::new(Passive));
    let a = s.add(&[], None, true);
    let x = s.add(&[], None, true);
    assert_eq!(s.message(passive, x, Request::Join), vassal_core::Reply::Ok);
    let b = s.add(&[], None, true);
    s.run_until(ms(14)); // A 0-10, X from 10
    assert_eq!(s.running_task(0), Some(x));
    s.unregister(passive); // X re-attached Running; the dispatcher asks cpu0 to decide
    s.run_until(ms(50));
    assert_eq!(
        s.timeline(),
        vec![
            (0, 0, Some(10)),
            (10, 1, Some(10)),
            (14, 1, Some(6)),
            (20, 2, Some(10)),
            (30, 0, Some(10)),
            (40, 1, Some(10)),
            (50, 2, Some(10))
        ]
    );
    assert_eq!(s.tasks(), vec![a, x, x, b, a, x, b]);
}

#[test]
fn rr_two_cpus_affinity_and_no_double_dispatch() {
    let mut s = Sim::new(2, rr(10));
    let a = s.add(&[], None, true); // cpu0 at 0
    let b = s.add(&[], Some(CpuSet::only(CpuId(1))), true); // cpu1 at 0
    let c = s.add(&[], None, true); // queued
    s.run_until(ms(50));
    // At 20 and 40 cpu0 finds B (pinned to cpu1) at the head and takes the next task.
    assert_eq!(s.on_cpu(0), vec![(0, 0), (10, 2), (20, 2), (30, 0), (40, 0), (50, 2)]);
    assert_eq!(s.on_cpu(1), vec![(0, 1), (10, 0), (20, 1), (30, 2), (40, 1), (50, 0)]);
    let _ = (a, c);
    assert_no_double_dispatch(&s);
    assert!(s.log.iter().all(|d| d.task != b || d.cpu == CpuId(1)));
    assert_eq!(s.drv.disp.stats().refused, 0);
}

#[test]
fn rr_two_cpus_fill_idle_cpu_after_double_kick() {
    // Two wake-ups while both CPUs are idle: the dispatcher kicks cpu0 for both; the
    // policy must still get the second task onto cpu1.
    let mut s = Sim::new(2, rr(10));
    let a = s.add(&[], None, false);
    let b = s.add(&[], None, false);
    assert!(s.drv.disp.wake(s.now, a, vassal_core::Wake::default()));
    assert!(s.drv.disp.wake(s.now, b, vassal_core::Wake::default()));
    s.settle();
    assert_eq!(s.running_task(0), Some(a));
    assert_eq!(s.running_task(1), Some(b));
    assert_no_double_dispatch(&s);
}

// ----- driving the policy directly -----

fn ctx_call<R>(view: &FakeView, f: impl FnOnce(&mut Ctx) -> R) -> (R, Vec<Effect>) {
    let mut fx = Vec::new();
    let mut ex = Vec::new();
    let r = {
        let mut ctx = Ctx::new(0, 2, SchedId(0), &mut fx, &mut ex, view);
        f(&mut ctx)
    };
    (r, fx)
}

#[test]
fn rr_refusals_are_handled_without_loops() {
    let all = CpuSet::first(2);
    let view = FakeView { states: vec![TaskState::Runnable; 3], affinity: vec![all; 3] };
    let mut p = RoundRobin::new(ms(10));
    let params = vassal_core::TaskParams::new();
    for i in 0..3 {
        let info = AttachInfo { state: TaskState::Runnable, params: &params, affinity: all, parent: None, guest: false };
        ctx_call(&view, |ctx| p.on_attach(ctx, t(i), &info)).0.unwrap();
    }
    let cpu = CpuId(0);
    let pick = |p: &mut RoundRobin| ctx_call(&view, |ctx| p.pick(ctx, cpu)).0.map(|d| d.task);
    // A is refused as running elsewhere: dropped until it is preempted there.
    assert_eq!(pick(&mut p), Some(t(0)));
    ctx_call(&view, |ctx| p.on_refused(ctx, cpu, Decision::run(t(0), ms(10)), Refusal::RunningElsewhere(CpuId(1))));
    // B is refused as not runnable: dropped until woken.
    assert_eq!(pick(&mut p), Some(t(1)));
    ctx_call(&view, |ctx| p.on_refused(ctx, cpu, Decision::run(t(1), ms(10)), Refusal::NotRunnable));
    // C is refused as not ours: forgotten.
    assert_eq!(pick(&mut p), Some(t(2)));
    ctx_call(&view, |ctx| p.on_refused(ctx, cpu, Decision::run(t(2), ms(10)), Refusal::NotYours));
    assert_eq!(pick(&mut p), None);
    assert!(p.queue().is_empty());
    // A comes back when preempted on cpu1, B when woken; C never.
    ctx_call(&view, |ctx| p.on_preempt(ctx, t(0), CpuId(1), Preempt::SliceExpired));
    ctx_call(&view, |ctx| p.on_wake(ctx, t(1), vassal_core::Wake::default()));
    ctx_call(&view, |ctx| p.on_wake(ctx, t(2), vassal_core::Wake::default()));
    assert_eq!(p.queue(), vec![t(0), t(1)]);
}

#[test]
fn rr_pick_skips_tasks_not_allowed_and_repairs_stale_state() {
    let view = FakeView {
        states: vec![TaskState::Runnable, TaskState::Blocked, TaskState::Runnable],
        affinity: vec![CpuSet::only(CpuId(1)), CpuSet::first(2), CpuSet::first(2)],
    };
    let mut p = RoundRobin::new(ms(10));
    let params = vassal_core::TaskParams::new();
    for i in 0..3 {
        let info = AttachInfo { state: TaskState::Runnable, params: &params, affinity: view.affinity[i], parent: None, guest: false };
        ctx_call(&view, |ctx| p.on_attach(ctx, t(i as u32), &info)).0.unwrap();
    }
    // Task 0 may not run on cpu0; task 1 is blocked as far as the dispatcher knows.
    let d = ctx_call(&view, |ctx| p.pick(ctx, CpuId(0))).0;
    assert_eq!(d, Some(Decision::run(t(2), ms(10))));
    assert_eq!(p.queue(), vec![t(0)]);
}

#[test]
fn rr_attach_refuses_dead_task() {
    let view = FakeView { states: vec![], affinity: vec![] };
    let mut p = RoundRobin::new(ms(10));
    let params = vassal_core::TaskParams::new();
    let info = AttachInfo { state: TaskState::Dead, params: &params, affinity: CpuSet::first(1), parent: None, guest: false };
    assert!(ctx_call(&view, |ctx| p.on_attach(ctx, t(0), &info)).0.is_err());
    let info = AttachInfo { state: TaskState::Runnable, params: &params, affinity: CpuSet::first(1), parent: None, guest: false };
    assert!(ctx_call(&view, |ctx| p.on_attach(ctx, t(u32::MAX), &info)).0.is_err());
    // Callbacks about unknown tasks are ignored.
    ctx_call(&view, |ctx| {
        p.on_wake(ctx, t(77), vassal_core::Wake::default());
        p.on_preempt(ctx, t(77), CpuId(0), Preempt::Resched);
        p.on_dispatch(ctx, t(77), CpuId(0));
        p.on_block(ctx, t(77), vassal_core::Block::default());
        p.on_run(ctx, t(77), CpuId(0), 5);
    });
    assert!(p.queue().is_empty());
}
