//! Weighted round robin (the BVT paper's WRR baseline, paper 001 §5.1) driven through a
//! real dispatcher: hand-computed schedules.

mod common;

use common::*;
use vassal_core::{AttachInfo, CpuId, CpuSet, Ctx, Policy, Preempt, Reply, Request, SchedId, TaskState};
use vassal_policies::WeightedRoundRobin;

fn wrr(q_ms: u64) -> Box<dyn Policy> {
    Box::new(WeightedRoundRobin::new(ms(q_ms)))
}

#[test]
fn wrr_weights_two_to_one_give_slices_2q_and_q() {
    let mut s = Sim::new(1, wrr(10));
    let a = s.add(&[("weight", 2)], None, true);
    let b = s.add(&[("weight", 1)], None, true);
    s.run_until(ms(90));
    assert_eq!(s.tasks(), vec![a, b, a, b, a, b, a]);
    assert_eq!(
        s.timeline(),
        vec![
            (0, 0, Some(20)),
            (20, 1, Some(10)),
            (30, 0, Some(20)),
            (50, 1, Some(10)),
            (60, 0, Some(20)),
            (80, 1, Some(10)),
            (90, 0, Some(20)),
        ]
    );
}

#[test]
fn wrr_default_weight_is_one() {
    let mut s = Sim::new(1, build("wrr", &[("quantum", dur("5ms"))]));
    let a = s.add(&[], None, true);
    let b = s.add(&[("weight", 3)], None, true);
    s.run_until(ms(25));
    assert_eq!(s.tasks(), vec![a, b, a, b]);
    assert_eq!(s.timeline(), vec![(0, 0, Some(5)), (5, 1, Some(15)), (20, 0, Some(5)), (25, 1, Some(15))]);
}

#[test]
fn wrr_resched_keeps_rest_of_turn_and_place() {
    let mut s = Sim::new(1, wrr(10));
    let a = s.add(&[("weight", 3)], None, true);
    let b = s.add(&[], None, true);
    s.run_until(ms(12));
    s.schedule(CpuId(0), Preempt::Resched);
    s.run_until(ms(40));
    assert_eq!(s.tasks(), vec![a, a, b, a]);
    assert_eq!(s.timeline(), vec![(0, 0, Some(30)), (12, 0, Some(18)), (30, 1, Some(10)), (40, 0, Some(30))]);
}

#[test]
fn wrr_block_and_wake_start_a_fresh_turn_at_the_tail() {
    let mut s = Sim::new(1, wrr(10));
    let a = s.add(&[("weight", 2)], None, true);
    let b = s.add(&[("weight", 1)], None, true);
    let c = s.add(&[("weight", 1)], None, true);
    s.run_until(ms(5));
    s.block(a); // B at 5
    s.wake(a); // queue [C, A]
    s.run_until(ms(35));
    assert_eq!(s.tasks(), vec![a, b, c, a]);
    assert_eq!(s.timeline(), vec![(0, 0, Some(20)), (5, 1, Some(10)), (15, 2, Some(10)), (25, 0, Some(20))]);
}

#[test]
fn wrr_weight_message() {
    let mut s = Sim::new(1, wrr(10));
    let def = s.drv.disp.default_sched();
    let a = s.add(&[], None, true);
    let b = s.add(&[], None, true);
    assert_eq!(s.message(def, b, Request::Param { name: "weight".into(), value: 4 }), Reply::Ok);
    for bad in [0, -2] {
        match s.message(def, b, Request::Param { name: "weight".into(), value: bad }) {
            Reply::Refused(why) => assert!(why.contains("weight") && why.contains(&bad.to_string()), "{why}"),
            r => panic!("{r:?}"),
        }
    }
    match s.message(def, b, Request::Param { name: "priority".into(), value: 1 }) {
        Reply::Refused(why) => assert!(why.contains("priority"), "{why}"),
        r => panic!("{r:?}"),
    }
    s.run_until(ms(60));
    assert_eq!(s.timeline(), vec![(0, 0, Some(10)), (10, 1, Some(40)), (50, 0, Some(10)), (60, 1, Some(40))]);
    let _ = a;
}

#[test]
fn wrr_malformed_weight_is_refused() {
    let mut s = Sim::new(1, build("rr", &[]));
    let top = s.register_top("wrr", wrr(10));
    for w in [0, -1] {
        let task = s.add(&[("weight", w)], None, true);
        match s.message(top, task, Request::Join) {
            Reply::Refused(why) => assert!(why.contains("weight"), "{why}"),
            r => panic!("weight {w}: {r:?}"),
        }
        assert_eq!(s.drv.disp.owner(task), Some(s.drv.disp.default_sched()));
    }
    let huge = s.add(&[("weight", i64::MAX)], None, true);
    assert!(matches!(s.message(top, huge, Request::Join), Reply::Refused(_)));

    let view = FakeView { states: vec![TaskState::Runnable], affinity: vec![CpuSet::first(1)] };
    let (mut fx, mut ex) = (Vec::new(), Vec::new());
    let mut ctx = Ctx::new(0, 1, SchedId(0), &mut fx, &mut ex, &view);
    let mut p = WeightedRoundRobin::new(ms(10));
    let params = params(&[("weight", -7)]);
    let info = AttachInfo { state: TaskState::Runnable, params: &params, affinity: CpuSet::first(1), parent: None, guest: false };
    let err = p.on_attach(&mut ctx, t(0), &info).unwrap_err();
    assert!(err.contains("weight") && err.contains("-7"), "{err}");
    assert_eq!(p.pick(&mut ctx, CpuId(0)), None);
}

#[test]
fn wrr_two_cpus_affinity_and_no_double_dispatch() {
    let mut s = Sim::new(2, wrr(10));
    let a = s.add(&[("weight", 2)], Some(CpuSet::only(CpuId(0))), true); // cpu0, 20ms turns
    let b = s.add(&[], None, true); // cpu1
    let c = s.add(&[], None, true); // queued
    s.run_until(ms(40));
    // At 20 cpu0 takes B from the head ([B, A]); cpu1 then finds A (pinned to cpu0) at
    // the head and runs C again. At 30 A is at the head and goes to cpu0.
    assert_eq!(s.on_cpu(0), vec![(0, a.0), (20, b.0), (30, a.0)]);
    assert_eq!(s.on_cpu(1), vec![(0, b.0), (10, c.0), (20, c.0), (30, b.0), (40, c.0)]);
    assert!(s.log.iter().all(|d| d.task != a || d.cpu == CpuId(0)));
    assert_no_double_dispatch(&s);
}
