//! Property tests: random workloads through a real dispatcher on 1-4 CPUs. Every policy
//! makes only valid decisions (none refused), never runs a task on two CPUs, is work
//! conserving, and: round robin and WRR serve every runnable task within one round; FPS
//! always runs the most important tasks.

mod common;

use common::*;
use proptest::prelude::*;
use vassal_core::{CpuId, CpuSet, Policy, Preempt, Request, TaskId, TaskState};
use vassal_policies::ParamValue;

#[derive(Clone, Debug)]
enum Op {
    Add { prio: i64, weight: i64, aff: u8, runnable: bool },
    Block(usize),
    Wake(usize),
    Exit(usize),
    Advance(u64),
    Yield(u16),
    Resched(u16),
    SetPrio(usize, i64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0i64..4, 1i64..4, any::<u8>(), any::<bool>())
            .prop_map(|(prio, weight, aff, runnable)| Op::Add { prio, weight, aff, runnable }),
        2 => (0usize..16).prop_map(Op::Block),
        2 => (0usize..16).prop_map(Op::Wake),
        1 => (0usize..16).prop_map(Op::Exit),
        3 => (1u64..25).prop_map(Op::Advance),
        1 => (0u16..4).prop_map(Op::Yield),
        1 => (0u16..4).prop_map(Op::Resched),
        1 => (0usize..16, 0i64..4).prop_map(|(t, p)| Op::SetPrio(t, p)),
    ]
}

/// Runs `ops`; `check` is called after every step with the sim and each task's
/// priority and period (a task's period is its weight in ms).
fn run(ncpus: u16, policy: Box<dyn Policy>, ops: &[Op], pinned: bool, mut check: impl FnMut(&Sim, &[(i64, i64)])) -> Sim {
    let mut s = Sim::new(ncpus, policy);
    let def = s.drv.disp.default_sched();
    let mut prios: Vec<(i64, i64)> = Vec::new();
    let mut tasks: Vec<TaskId> = Vec::new();
    for op in ops {
        match *op {
            Op::Add { prio, weight, aff, runnable } => {
                let mask = if pinned { CpuSet(aff as u64 & CpuSet::first(ncpus).0) } else { CpuSet::NONE };
                let aff = if mask.is_empty() { None } else { Some(mask) };
                let period = weight * ms(1) as i64;
                let t = s.add(&[("priority", prio), ("weight", weight), ("period", period)], aff, runnable);
                tasks.push(t);
                prios.push((prio, period));
            }
            Op::Block(i) => {
                if let Some(&t) = tasks.get(i) {
                    s.block(t);
                }
            }
            Op::Wake(i) => {
                if let Some(&t) = tasks.get(i) {
                    if s.drv.disp.state(t) == TaskState::Blocked {
                        s.wake(t);
                    }
                }
            }
            Op::Exit(i) => {
                if let Some(&t) = tasks.get(i) {
                    s.exit(t);
                }
            }
            Op::Advance(n) => {
                let until = s.now + ms(n);
                s.run_until(until);
            }
            Op::Yield(c) => {
                if c < ncpus {
                    s.yield_cpu(CpuId(c));
                }
            }
            Op::Resched(c) => {
                if c < ncpus {
                    s.schedule(CpuId(c), Preempt::Resched);
                }
            }
            Op::SetPrio(i, p) => {
                if let Some(&t) = tasks.get(i) {
                    if s.drv.disp.state(t) != TaskState::Dead {
                        let r = s.message(def, t, Request::Param { name: "priority".into(), value: p });
                        if r.is_ok() {
                            prios[i].0 = p;
                        }
                    }
                }
            }
        }
        assert_eq!(s.drv.disp.stats().refused, 0, "a decision was refused");
        assert_eq!(s.overlaps, 0, "a task was dispatched while running elsewhere");
        check(&s, &prios);
    }
    s
}

fn waiting(s: &Sim, ntasks: usize) -> Vec<TaskId> {
    (0..ntasks as u32).map(TaskId).filter(|&t| s.drv.disp.state(t) == TaskState::Runnable).collect()
}

/// With no affinity constraints, no CPU is idle while a task waits.
fn work_conserving(s: &Sim) {
    let n = s.drv.disp.task_count();
    if !waiting(s, n).is_empty() {
        for c in 0..s.drv.disp.ncpus() {
            assert!(s.running_task(c).is_some(), "cpu{c} idle while {:?} wait", waiting(s, n));
        }
    }
}

/// Every task runnable throughout a long enough stretch is dispatched in it.
fn everyone_served(mut s: Sim, round: u64) {
    let n = s.drv.disp.task_count();
    let runnable: Vec<TaskId> = (0..n as u32).map(TaskId).filter(|&t| s.drv.disp.state(t).is_runnable()).collect();
    let from = s.log.len();
    let until = s.now + round;
    s.run_until(until);
    for t in runnable {
        let ran = s.log[from..].iter().any(|d| d.task == t) || s.drv.disp.state(t) != TaskState::Runnable;
        assert!(ran, "{t} was not served within {round} ns");
    }
}

fn ncpus() -> impl Strategy<Value = u16> {
    1u16..=4
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn rr_valid_fair_and_work_conserving(n in ncpus(), ops in prop::collection::vec(op(), 1..60), pinned in any::<bool>()) {
        let s = run(n, build("rr", &[("quantum", dur("10ms"))]), &ops, pinned, |s, _| if !pinned { work_conserving(s) });
        let tasks = s.drv.disp.task_count() as u64;
        everyone_served(s, (tasks + 1) * ms(10));
    }

    #[test]
    fn wrr_valid_fair_and_work_conserving(n in ncpus(), ops in prop::collection::vec(op(), 1..60), pinned in any::<bool>()) {
        let s = run(n, build("wrr", &[("quantum", dur("10ms"))]), &ops, pinned, |s, _| if !pinned { work_conserving(s) });
        let tasks = s.drv.disp.task_count() as u64;
        everyone_served(s, (tasks + 1) * 3 * ms(10));
    }

    #[test]
    fn fps_runs_the_most_important(
        n in ncpus(),
        ops in prop::collection::vec(op(), 1..60),
        quantum in any::<bool>(),
        rm in any::<bool>(),
    ) {
        let mut kv = vec![("rm", ParamValue::Bool(rm))];
        if quantum {
            kv.push(("quantum", dur("10ms")));
        }
        run(n, build("fps", &kv), &ops, false, |s, prios| {
            work_conserving(s);
            // Importance: the priority, or under rm the shorter period (an equal period
            // never preempts: docs/jobs.md).
            let imp = |t: TaskId| {
                let (prio, period) = prios[t.0 as usize];
                if rm { -period } else { prio }
            };
            let best_waiting = waiting(s, prios.len()).into_iter().map(imp).max();
            for c in 0..s.drv.disp.ncpus() {
                if let (Some(t), Some(w)) = (s.running_task(c), best_waiting) {
                    assert!(imp(t) >= w, "cpu{c} runs {t} ({:?}) while {w:?} waits", imp(t));
                }
            }
        });
    }

    #[test]
    fn fps_pinned_makes_valid_decisions(n in ncpus(), ops in prop::collection::vec(op(), 1..60), rm in any::<bool>()) {
        run(n, build("fps", &[("rm", ParamValue::Bool(rm)), ("quantum", dur("3ms"))]), &ops, true, |_, _| {});
    }
}
