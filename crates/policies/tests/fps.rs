//! Fixed-priority preemptive scheduling driven through a real dispatcher: hand-computed
//! schedules.

mod common;

use common::*;
use vassal_core::{AttachInfo, CpuId, CpuSet, Ctx, Policy, Reply, Request, SchedId, TaskState};
use vassal_policies::{FixedPriority, ParamValue};

fn fps() -> Box<dyn Policy> {
    build("fps", &[])
}

fn prio(p: i64) -> [(&'static str, i64); 1] {
    [("priority", p)]
}

/// Rescheds carried out after time zero (the ones at zero are the dispatcher's kicks of
/// the idle CPU as tasks arrive).
fn later_rescheds(s: &Sim) -> Vec<(u64, u16)> {
    s.rescheds.iter().filter(|(at, _)| *at > 0).map(|(at, c)| (at / ms(1), c.0)).collect()
}

#[test]
fn fps_wake_preempts_lower_priority() {
    let mut s = Sim::new(1, fps());
    let l = s.add(&prio(1), None, true);
    let h = s.add(&prio(5), None, false);
    let e = s.add(&prio(1), None, false);
    s.now = ms(5);
    s.wake(h);
    assert_eq!(later_rescheds(&s), vec![(5, 0)], "waking a more important task reschedules its CPU");
    s.now = ms(8);
    s.block(h);
    s.now = ms(10);
    s.wake(e); // equal priority: no preemption
    assert_eq!(later_rescheds(&s), vec![(5, 0)]);
    s.run_until(ms(100));
    assert_eq!(s.tasks(), vec![l, h, l]);
    assert_eq!(s.timeline(), vec![(0, 0, None), (5, 1, None), (8, 0, None)]);
}

#[test]
fn fps_priority_order_and_fifo_within_level() {
    let mut s = Sim::new(1, fps());
    let a = s.add(&prio(1), None, true); // runs at once
    let b = s.add(&prio(3), None, true); // preempts A
    let c = s.add(&prio(3), None, true);
    let d = s.add(&prio(2), None, true);
    for (i, task) in [b, c, d].into_iter().enumerate() {
        s.now = ms(10 * (i as u64 + 1));
        s.block(task);
    }
    assert_eq!(s.tasks(), vec![a, b, c, d, a]);
    assert_eq!(s.timeline(), vec![(0, 0, None), (0, 1, None), (10, 2, None), (20, 3, None), (30, 0, None)]);
}

#[test]
fn fps_quantum_round_robin_among_equal_priorities() {
    let mut s = Sim::new(1, build("fps", &[("quantum", dur("10ms"))]));
    let a = s.add(&prio(2), None, true);
    let b = s.add(&prio(2), None, true);
    let c = s.add(&prio(1), None, true);
    s.run_until(ms(35));
    s.block(b);
    s.run_until(ms(50));
    s.block(a);
    assert_eq!(s.tasks(), vec![a, b, a, b, a, a, c]);
    assert_eq!(
        s.timeline(),
        vec![
            (0, 0, Some(10)),
            (10, 1, Some(10)),
            (20, 0, Some(10)),
            (30, 1, Some(10)),
            (35, 0, Some(10)),
            (45, 0, Some(10)),
            (50, 2, Some(10)),
        ]
    );
}

#[test]
fn fps_preempted_task_returns_to_head_of_its_level() {
    let mut s = Sim::new(1, build("fps", &[("quantum", dur("10ms"))]));
    let a = s.add(&prio(1), None, true);
    let b = s.add(&prio(1), None, true);
    let h = s.add(&prio(5), None, false);
    s.run_until(ms(4));
    s.wake(h);
    s.run_until(ms(7));
    s.block(h);
    s.run_until(ms(20));
    // A resumes before B, with the 6ms left of its quantum.
    assert_eq!(s.tasks(), vec![a, h, a, b]);
    assert_eq!(s.timeline(), vec![(0, 0, Some(10)), (4, 2, Some(10)), (7, 0, Some(6)), (13, 1, Some(10))]);
}

#[test]
fn fps_yield_goes_to_tail_of_its_level() {
    let mut s = Sim::new(1, fps());
    let a = s.add(&prio(1), None, true);
    let b = s.add(&prio(1), None, true);
    let c = s.add(&prio(0), None, true);
    s.now = ms(3);
    s.yield_cpu(CpuId(0));
    s.now = ms(6);
    s.yield_cpu(CpuId(0));
    assert_eq!(s.tasks(), vec![a, b, a]);
    let _ = c;
}

#[test]
fn fps_rate_monotonic_orders_by_period() {
    let mut s = Sim::new(1, build("fps", &[("rm", ParamValue::Bool(true))]));
    let t0 = s.add(&[("period", 30 * ms(1) as i64)], None, true);
    let t1 = s.add(&[("period", 10 * ms(1) as i64)], None, true); // preempts T0
    let t2 = s.add(&[("period", 20 * ms(1) as i64)], None, true);
    let t3 = s.add(&[("period", 10 * ms(1) as i64), ("priority", 99)], None, true); // tie: T1 first
    let t4 = s.add(&[], None, true); // no period: below every periodic task
    assert_eq!(later_rescheds(&s), vec![]);
    assert_eq!(s.rescheds.len(), 2, "the kick for T0 and the preemption by T1");
    for (i, task) in [t1, t3, t2, t0].into_iter().enumerate() {
        s.now = ms(i as u64 + 1);
        s.block(task);
    }
    s.now = ms(5);
    s.wake(t3); // preempts T4
    assert_eq!(later_rescheds(&s), vec![(5, 0)]);
    assert_eq!(s.tasks(), vec![t0, t1, t3, t2, t0, t4, t3]);
}

#[test]
fn fps_param_message_changes_priority_with_preemption() {
    let mut s = Sim::new(1, fps());
    let def = s.drv.disp.default_sched();
    let a = s.add(&prio(3), None, true);
    let b = s.add(&prio(1), None, true);
    s.now = ms(1);
    assert_eq!(s.message(def, b, Request::Param { name: "priority".into(), value: 5 }), Reply::Ok);
    assert_eq!(s.running_task(0), Some(b));
    s.now = ms(2);
    // Lowered below the waiting A: B is preempted.
    assert_eq!(s.message(def, b, Request::Param { name: "priority".into(), value: 0 }), Reply::Ok);
    assert_eq!(s.running_task(0), Some(a));
    assert_eq!(s.timeline(), vec![(0, 0, None), (1, 1, None), (2, 0, None)]);
    assert_eq!(later_rescheds(&s), vec![(1, 0), (2, 0)]);
    // Raising a queued task to the running task's level does not preempt.
    assert_eq!(s.message(def, b, Request::Param { name: "priority".into(), value: 3 }), Reply::Ok);
    assert_eq!(s.running_task(0), Some(a));

    let refused = |r: Reply, word: &str| match r {
        Reply::Refused(why) => assert!(why.contains(word), "{why:?} should name {word}"),
        r => panic!("expected a refusal naming {word}, got {r:?}"),
    };
    refused(s.message(def, b, Request::Param { name: "weight".into(), value: 1 }), "weight");
    refused(s.message(def, b, Request::Param { name: "period".into(), value: 1 }), "period");
    refused(s.message(def, b, Request::Warp { on: true }), "fps");
}

#[test]
fn fps_rm_param_message_takes_period() {
    let mut s = Sim::new(1, build("fps", &[("rm", ParamValue::Bool(true))]));
    let def = s.drv.disp.default_sched();
    let a = s.add(&[("period", 10)], None, true);
    let b = s.add(&[("period", 20)], None, true);
    s.now = ms(1);
    match s.message(def, b, Request::Param { name: "priority".into(), value: 100 }) {
        Reply::Refused(why) => assert!(why.contains("period")),
        r => panic!("{r:?}"),
    }
    match s.message(def, b, Request::Param { name: "period".into(), value: -4 }) {
        Reply::Refused(why) => assert!(why.contains("period")),
        r => panic!("{r:?}"),
    }
    assert_eq!(s.running_task(0), Some(a));
    assert_eq!(s.message(def, b, Request::Param { name: "period".into(), value: 5 }), Reply::Ok);
    assert_eq!(s.running_task(0), Some(b));
}

#[test]
fn fps_two_cpus_preempts_least_important() {
    let mut s = Sim::new(2, fps());
    let l1 = s.add(&prio(1), None, true); // cpu0
    let l2 = s.add(&prio(2), None, true); // cpu1 (idle): nothing preempted
    let h = s.add(&prio(5), None, false);
    assert_eq!(s.on_cpu(1), vec![(0, l2.0)]);
    s.now = ms(5);
    s.wake(h);
    assert_eq!(later_rescheds(&s), vec![(5, 0)], "the CPU running the least important task");
    assert_eq!(s.on_cpu(0), vec![(0, l1.0), (5, h.0)]);
    assert_eq!(s.on_cpu(1), vec![(0, l2.0)]);
    assert_no_double_dispatch(&s);
}

#[test]
fn fps_two_cpus_affinity_and_cascade() {
    let mut s = Sim::new(2, fps());
    let l1 = s.add(&prio(1), None, true); // cpu0
    let l2 = s.add(&prio(2), None, true); // cpu1
    let h = s.add(&prio(5), Some(CpuSet::only(CpuId(1))), false);
    s.now = ms(5);
    s.wake(h); // may only use cpu1: preempts L2 there, and L2 then preempts L1 on cpu0
    assert_eq!(s.on_cpu(1), vec![(0, l2.0), (5, h.0)]);
    assert_eq!(s.on_cpu(0), vec![(0, l1.0), (5, l2.0)]);
    s.now = ms(8);
    s.block(h);
    assert_eq!(s.on_cpu(1), vec![(0, l2.0), (5, h.0), (8, l1.0)]);
    assert!(s.log.iter().all(|d| d.task != h || d.cpu == CpuId(1)));
    assert_no_double_dispatch(&s);
    assert_eq!(s.drv.disp.stats().refused, 0);
}

#[test]
fn fps_malformed_period_is_refused() {
    let mut s = Sim::new(1, build("rr", &[]));
    let top = s.register_top("rm", build("fps", &[("rm", ParamValue::Bool(true))]));
    let bad = s.add(&[("period", 0)], None, true);
    match s.message(top, bad, Request::Join) {
        Reply::Refused(why) => assert!(why.contains("period"), "{why}"),
        r => panic!("{r:?}"),
    }
    assert_eq!(s.drv.disp.owner(bad), Some(s.drv.disp.default_sched()));
    let good = s.add(&[("period", 1000)], None, true);
    assert_eq!(s.message(top, good, Request::Join), Reply::Ok);

    // Directly: a negative period.
    let view = FakeView { states: vec![TaskState::Runnable], affinity: vec![CpuSet::first(1)] };
    let (mut fx, mut ex) = (Vec::new(), Vec::new());
    let mut ctx = Ctx::new(0, 1, SchedId(0), &mut fx, &mut ex, &view);
    let mut p = FixedPriority::new(true, None);
    let params = params(&[("period", -3)]);
    let info = AttachInfo { state: TaskState::Runnable, params: &params, affinity: CpuSet::first(1), parent: None, guest: false };
    let err = p.on_attach(&mut ctx, t(0), &info).unwrap_err();
    assert!(err.contains("period") && err.contains("-3"), "{err}");
    assert_eq!(p.pick(&mut ctx, CpuId(0)), None);
}
