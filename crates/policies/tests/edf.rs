//! Preemptive EDF for periodic tasks, through a real dispatcher (the shared harness).

mod common;

use common::*;
use vassal_core::{CpuId, CpuSet, Reply, Request, TaskId};
use vassal_policies::ParamValue;

fn edf() -> Box<dyn vassal_core::Policy> {
    build("edf", &[("quantum", dur("10ms"))])
}

const CPU0: CpuId = CpuId(0);

#[test]
fn the_earliest_deadline_runs_and_a_waking_earlier_deadline_preempts() {
    let mut s = Sim::new(1, edf());
    let bg = s.add(&[], None, true);
    assert_eq!(s.running_task(0), Some(bg));
    // Periodic tasks are above background work: attached runnable, a job starts at once.
    let late = s.add(&[("period", ms(100) as i64)], None, true);
    assert_eq!(s.running_task(0), Some(late), "deadline 100 ms beats background work");
    let soon = s.add(&[("period", ms(50) as i64), ("deadline", ms(20) as i64)], None, false);
    s.now = ms(1);
    s.wake(soon);
    assert_eq!(s.running_task(0), Some(soon), "deadline 21 ms preempts deadline 100 ms");
    s.block(soon);
    assert_eq!(s.running_task(0), Some(late));
    s.block(late);
    assert_eq!(s.running_task(0), Some(bg));
    // A new job of `late` at 30 ms (due 130 ms) loses to one of `soon` at 31 ms (due 51 ms).
    s.now = ms(30);
    s.wake(late);
    s.now = ms(31);
    s.wake(soon);
    assert_eq!(s.running_task(0), Some(soon));
    assert_eq!(s.on_cpu(0).last(), Some(&(31, soon.0)));
}

#[test]
fn a_late_job_keeps_its_deadline_by_default() {
    let mut s = Sim::new(1, edf());
    let a = s.add(&[("period", ms(10) as i64)], None, true); // due 10
    let b = s.add(&[("period", ms(15) as i64)], None, true); // due 15
                                                             // a never blocks and is never told of a new job: textbook EDF keeps its deadline (10),
                                                             // earlier than b's, however late it runs.
    s.run_until(ms(40));
    assert_eq!(s.running_task(0), Some(a));
    assert_eq!(s.timeline().len(), 1, "{:?}", s.timeline());
    let _ = b;
}

#[test]
fn with_late_next_period_a_runnable_task_past_its_deadline_moves_on_to_its_next_job() {
    let mut s = Sim::new(1, build("edf", &[("quantum", dur("10ms")), ("late", ParamValue::Str("next-period".into()))]));
    let a = s.add(&[("period", ms(10) as i64)], None, true); // due 10, then 20, ...
    let b = s.add(&[("period", ms(15) as i64)], None, true); // due 15
    assert_eq!(s.running_task(0), Some(a));
    // a never blocks: at its deadline (10 ms) it is taken to be on its next job (due 20),
    // so b (due 15) runs; at 15 b's deadline passes (due 30) and a (20) runs again.
    s.run_until(ms(10));
    assert_eq!(s.running_task(0), Some(b));
    s.run_until(ms(15));
    assert_eq!(s.running_task(0), Some(a));
    assert_eq!(s.timeline()[..3], [(0, a.0, Some(10)), (10, b.0, Some(5)), (15, a.0, Some(5))]);
}

#[test]
fn global_edf_preempts_the_latest_deadline_of_several_cpus() {
    let mut s = Sim::new(2, edf());
    let a = s.add(&[("period", ms(100) as i64)], None, true);
    let b = s.add(&[("period", ms(50) as i64)], None, true);
    let c = s.add(&[("period", ms(10) as i64)], None, false);
    assert_eq!([s.running_task(0), s.running_task(1)], [Some(a), Some(b)]);
    s.wake(c);
    let on: Vec<Option<TaskId>> = vec![s.running_task(0), s.running_task(1)];
    assert!(on.contains(&Some(c)) && on.contains(&Some(b)), "c (due 10 ms) took a's CPU: {on:?}");
    s.yield_cpu(CPU0);
    assert_no_double_dispatch(&s);
}

#[test]
fn bad_parameters_are_refused_at_attach_and_by_message() {
    let mut s = Sim::new(1, edf());
    let err = s.drv.disp.try_add_task(0, params(&[("period", 0)]), CpuSet::first(1), None, true).unwrap_err().1;
    assert!(err.contains("period") && err.contains("positive"), "{err}");
    let err = s.drv.disp.try_add_task(0, params(&[("deadline", 5)]), CpuSet::first(1), None, true).unwrap_err().1;
    assert!(err.contains("no period"), "{err}");
    let t = s.add(&[("period", ms(10) as i64)], None, true);
    let sched = s.drv.disp.default_sched();
    let r = s.message(sched, t, Request::Param { name: "deadline".into(), value: -1 });
    assert!(matches!(r, Reply::Refused(ref e) if e.contains("positive")), "{r:?}");
    let r = s.message(sched, t, Request::Param { name: "weight".into(), value: 1 });
    assert!(matches!(r, Reply::Refused(ref e) if e.contains("period, deadline")), "{r:?}");
    assert_eq!(s.message(sched, t, Request::Param { name: "deadline".into(), value: ms(5) as i64 }), Reply::Ok);
    let e = vassal_policies::build("edf", &[("quantum".to_string(), dur("0ms"))].into_iter().collect()).err().unwrap();
    assert!(e.contains("quantum"), "{e}");
    let e = vassal_policies::build("edf", &[("bogus".to_string(), ParamValue::Int(1))].into_iter().collect()).err().unwrap();
    assert!(e.contains("bogus"), "{e}");
}

#[test]
fn background_tasks_share_round_robin() {
    let mut s = Sim::new(1, edf());
    let x = s.add(&[], None, true);
    let y = s.add(&[], None, true);
    s.run_until(ms(40));
    let order: Vec<TaskId> = s.tasks();
    assert_eq!(order, vec![x, y, x, y, x]);
}

/// The check of the best waiting job after each dispatch is skipped when it cannot find
/// anything (edf's `check_first`): with the skip and without it, every decision and every
/// reschedule asked for is the same, on 1-4 CPUs, with pinned tasks, affinity changes and
/// swapped-out tasks.
#[test]
fn the_check_after_a_dispatch_is_skipped_only_when_it_finds_nothing() {
    let mut dispatches = 0;
    for seed in 0..400 {
        for ncpus in 1..=4 {
            let fast = random_job_run(seed, ncpus, Box::new(vassal_policies::edf::Edf::new(ms(10))));
            let reference = random_job_run(seed, ncpus, Box::new(vassal_policies::edf::Edf::new(ms(10)).checking_after_every_dispatch()));
            assert_eq!(fast, reference, "seed {seed}, {ncpus} CPUs");
            dispatches += fast.0.len();
        }
    }
    assert!(dispatches > 100_000, "the runs dispatch: {dispatches}");
}

/// A job whose affinity grows while it waits is checked again after the next dispatch,
/// with the skip as without it (see `affinity_growth_run`).
#[test]
fn a_waiting_job_allowed_more_cpus_is_checked_again() {
    let fast = affinity_growth_run(Box::new(vassal_policies::edf::Edf::new(ms(10))));
    let reference = affinity_growth_run(Box::new(vassal_policies::edf::Edf::new(ms(10)).checking_after_every_dispatch()));
    assert_eq!(fast, reference);
    assert_eq!(fast.1, Some(TaskId(3)), "W took CPU 0 from J");
}
