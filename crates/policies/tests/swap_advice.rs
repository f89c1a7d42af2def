//! Swapping seen by the CPU schedulers (paper 004 §2, §4.1–4.2), through a real
//! `vassal_core::Dispatcher`: a task whose image is swapped out stays in the ready list
//! but is never dispatched ("the first loaded process in the list", §4.1); the ready list
//! is what priority swap-in reads (§4.2); real-time FB levels stay resident (§4.1).

mod common;

use common::*;
use vassal_core::{CpuId, Preempt, SwapAdvice};

fn fb() -> Box<dyn vassal_core::Policy> {
    build("fb", &[])
}

#[test]
fn fb_skips_a_swapped_out_task_and_runs_it_once_loaded() {
    // A (base 8) and B (base 10) ready; B is swapped out: A runs although B ranks first.
    let mut s = Sim::new(1, fb());
    let a = s.add(&[("base", 8)], None, false);
    let b = s.add(&[("base", 10)], None, false);
    s.drv.disp.set_loaded(0, b, false);
    s.wake(a);
    s.wake(b);
    assert_eq!(s.running_task(0), Some(a));
    // The ready list still holds B, first: priority swap-in would choose it.
    assert_eq!(s.drv.disp.swap_advice(), Some(SwapAdvice { ready: vec![b], resident: vec![] }));
    // Loaded again: the swap scheduler that loaded it ran as the best process and gave
    // up the CPU (a reschedule), and B, "loaded and ready" at a higher level, runs.
    s.drv.disp.set_loaded(0, b, true);
    s.settle();
    assert_eq!(s.running_task(0), Some(a), "loading alone preempts nobody");
    s.schedule(CpuId(0), Preempt::Resched);
    assert_eq!(s.running_task(0), Some(b));
    assert_eq!(s.drv.disp.swap_advice().unwrap().ready, vec![a]);
}

#[test]
fn swapping_out_the_running_task_takes_its_cpu() {
    let mut s = Sim::new(1, fb());
    let a = s.add(&[], None, true);
    let b = s.add(&[], None, true);
    assert_eq!(s.running_task(0), Some(a));
    s.drv.disp.set_loaded(0, a, false);
    s.settle();
    assert_eq!(s.running_task(0), Some(b));
    // With B blocked and A out, the CPU idles although A is runnable.
    s.block(b);
    assert_eq!(s.running_task(0), None);
    assert!(!s.drv.disp.is_loaded(a));
    s.drv.disp.set_loaded(0, a, true);
    s.settle();
    assert_eq!(s.running_task(0), Some(a));
}

#[test]
fn fb_real_time_levels_are_resident() {
    let mut s = Sim::new(1, fb());
    let rt = s.add(&[("base", 16)], None, false);
    let ts = s.add(&[("base", 15)], None, false);
    let advice = s.drv.disp.swap_advice().unwrap();
    assert_eq!(advice.resident, vec![rt]);
    assert!(!advice.resident.contains(&ts));
}

#[test]
fn unix_ready_order_is_by_priority_with_swapped_out_tasks_included() {
    // Both sleep at PRIBIO; A runs until its first tick makes it a user-mode task of
    // tick count > 0, while B, swapped out, waits at its kernel priority: B ranks first.
    let mut s = Sim::new(1, build("unix", &[]));
    let a = s.add(&[], None, true);
    let b = s.add(&[], None, false);
    s.drv.disp.set_loaded(0, b, false);
    s.wake(b);
    assert_eq!(s.running_task(0), Some(a));
    s.schedule(CpuId(0), Preempt::Resched);
    assert_eq!(s.running_task(0), Some(a), "B is out: A runs on");
    assert_eq!(s.drv.disp.swap_advice().unwrap().ready, vec![b]);
}

#[test]
fn a_policy_without_an_order_gives_no_advice() {
    let s = Sim::new(1, build("rr", &[]));
    assert_eq!(s.drv.disp.swap_advice(), None);
}
