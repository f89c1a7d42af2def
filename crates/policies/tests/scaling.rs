//! Decision cost against the number of runnable tasks (10, 1,000, 100,000): run with
//! `cargo test --release -p vassal-policies --test scaling -- --ignored --nocapture`.
//! Ignored by default: timings are meaningless in debug builds and on a loaded machine.

mod common;

use std::time::Instant;

use common::*;
use vassal_core::{CpuId, CpuSet, Dispatcher, HierarchyConfig, Policy, Preempt, TaskParams};
use vassal_policies::ParamValue;

/// A policy kind, its parameters, and whether tasks get varied priorities and weights.
type Case = (&'static str, Vec<(&'static str, ParamValue)>, bool);

/// ns per decision (account + schedule with slice expiry) with `n` runnable tasks.
fn cost(policy: Box<dyn Policy>, n: usize, prios: bool) -> f64 {
    let mut d = Dispatcher::new(1, "default", policy, HierarchyConfig::default());
    for i in 0..n {
        let p: TaskParams = if prios { params(&[("priority", (i % 8) as i64), ("weight", 1 + (i % 3) as i64)]) } else { TaskParams::new() };
        d.add_task(0, p, CpuSet::first(1), None, true);
    }
    let mut fx = Vec::new();
    d.drain_effects(&mut fx);
    let cpu = CpuId(0);
    let mut now = 0;
    d.schedule(now, cpu, Preempt::Resched);
    let rounds = 400_000u64;
    let start = Instant::now();
    for i in 0..rounds {
        now += 1_000;
        if let Some(t) = d.running(cpu) {
            d.account(now, t, cpu, 1_000);
        }
        // Mostly slice expiries, with yields and reschedules mixed in.
        let why = match i % 4 {
            0 => Preempt::Resched,
            1 => Preempt::Yield,
            _ => Preempt::SliceExpired,
        };
        d.schedule(now, cpu, why);
        d.drain_effects(&mut fx);
    }
    start.elapsed().as_nanos() as f64 / rounds as f64
}

#[test]
#[ignore]
fn decision_cost_scales() {
    let kinds: [Case; 4] = [
        ("rr", vec![], false),
        ("wrr", vec![], true),
        ("fps", vec![], true),
        ("fps", vec![("quantum", dur("1ms"))], true),
    ];
    for (kind, kv, prios) in kinds {
        let c: Vec<f64> = [10, 1_000, 100_000].iter().map(|&n| cost(build(kind, &kv), n, prios)).collect();
        println!("{kind:>4} {kv:?}: {:.0} / {:.0} / {:.0} ns per decision; ratio {:.2}", c[0], c[1], c[2], c[2] / c[0]);
    }
}

/// A view with O(1) answers, for driving a policy without a dispatcher.
struct BenchView {
    states: Vec<vassal_core::TaskState>,
    running: Option<vassal_core::TaskId>,
}

impl vassal_core::TaskView for BenchView {
    fn state(&self, task: vassal_core::TaskId) -> vassal_core::TaskState {
        self.states.get(task.0 as usize).copied().unwrap_or(vassal_core::TaskState::Dead)
    }
    fn affinity(&self, _task: vassal_core::TaskId) -> CpuSet {
        CpuSet::first(1)
    }
    fn owner(&self, _task: vassal_core::TaskId) -> Option<vassal_core::SchedId> {
        Some(vassal_core::SchedId(0))
    }
    fn last_cpu(&self, _task: vassal_core::TaskId) -> Option<CpuId> {
        Some(CpuId(0))
    }
    fn running_on(&self, _cpu: CpuId) -> Option<vassal_core::TaskId> {
        self.running
    }
}

/// ns per decision driving the policy alone: on_run, on_preempt, pick, on_dispatch.
fn direct_cost(mut p: Box<dyn Policy>, n: usize, prios: bool) -> f64 {
    use vassal_core::{AttachInfo, Ctx, SchedId, TaskId, TaskState};
    let mut view = BenchView { states: vec![TaskState::Runnable; n], running: None };
    let (mut fx, mut ex) = (Vec::new(), Vec::new());
    for i in 0..n {
        let prm: TaskParams = if prios {
            params(&[("priority", (i % 8) as i64), ("period", 1_000_000 + ((i * 7919) % n) as i64)])
        } else {
            TaskParams::new()
        };
        let info = AttachInfo { state: TaskState::Runnable, params: &prm, affinity: CpuSet::first(1), parent: None, guest: false };
        let mut ctx = Ctx::new(0, 1, SchedId(0), &mut fx, &mut ex, &view);
        p.on_attach(&mut ctx, TaskId(i as u32), &info).unwrap();
    }
    let cpu = CpuId(0);
    let mut cur: Option<TaskId> = None;
    let rounds = 1_000_000u64;
    let start = Instant::now();
    for r in 0..rounds {
        if let Some(t) = cur {
            view.states[t.0 as usize] = TaskState::Runnable;
            view.running = None;
            let mut ctx = Ctx::new(r, 1, SchedId(0), &mut fx, &mut ex, &view);
            p.on_run(&mut ctx, t, cpu, 1_000);
            let why = if r % 4 == 0 { Preempt::Resched } else { Preempt::SliceExpired };
            p.on_preempt(&mut ctx, t, cpu, why);
        }
        let d = {
            let mut ctx = Ctx::new(r, 1, SchedId(0), &mut fx, &mut ex, &view);
            p.pick(&mut ctx, cpu)
        };
        let t = d.expect("a decision").task;
        view.states[t.0 as usize] = TaskState::Running(cpu);
        view.running = Some(t);
        let mut ctx = Ctx::new(r, 1, SchedId(0), &mut fx, &mut ex, &view);
        p.on_dispatch(&mut ctx, t, cpu);
        cur = Some(t);
        fx.clear();
    }
    start.elapsed().as_nanos() as f64 / rounds as f64
}

#[test]
#[ignore]
fn direct_decision_cost_scales() {
    let kinds: [Case; 6] = [
        ("rr", vec![], false),
        ("wrr", vec![], false),
        ("fps", vec![], false),
        ("fps", vec![("quantum", dur("1ms"))], true),
        ("fps", vec![("rm", ParamValue::Bool(true))], false),
        ("fps", vec![("rm", ParamValue::Bool(true)), ("quantum", dur("1ms"))], true),
    ];
    for (kind, kv, prios) in kinds {
        let c: Vec<f64> = [10, 1_000, 100_000].iter().map(|&n| direct_cost(build(kind, &kv), n, prios)).collect();
        println!("direct {kind:>4} {kv:?} prios={prios}: {:.1} / {:.1} / {:.1} ns; ratio {:.2}", c[0], c[1], c[2], c[2] / c[0]);
    }
}
