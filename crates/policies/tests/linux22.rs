//! The Linux 2.2 scheduler (the BVT paper's baseline, paper 001 §4) driven through a real
//! `vassal_core::Dispatcher`: hand-computed schedules, tick by tick (tick = 10 ms,
//! DEF_PRIORITY = 20 ticks). The policy's tick is its own scheduler event
//! (`linux22::TICK_TOKEN`); the harness fires it at every multiple of 10 ms.

mod common;

use std::sync::{Arc, Mutex};

use common::*;
use vassal_core::{CpuId, CpuSet, Ns, Reply, Request, Shared, TaskId};
use vassal_policies::linux22::{self, nice_to_priority, Linux22, Linux22Config, TICK_TOKEN};

const TICK: Ns = 10_000_000;

fn setup(ncpus: u16, cfg: Linux22Config) -> (Sim, Arc<Mutex<Linux22>>) {
    let p = Arc::new(Mutex::new(Linux22::new(cfg)));
    (Sim::new(ncpus, Box::new(Shared::of(&p))), p)
}

fn default_cfg() -> Linux22Config {
    Linux22Config::default()
}

/// Advances to `until` (ms), firing the policy's tick at every multiple of 10 ms on the way
/// (a tick at `until` itself included).
fn tick_to(s: &mut Sim, until_ms: u64) {
    let until = ms(until_ms);
    loop {
        let next = (s.now / TICK + 1) * TICK;
        if next > until {
            break;
        }
        s.run_until(next);
        let sched = s.drv.disp.default_sched();
        s.drv.disp.fire_event(s.now, sched, TICK_TOKEN);
        s.settle();
    }
    s.run_until(until);
}

fn counter(p: &Arc<Mutex<Linux22>>, t: TaskId) -> u32 {
    p.lock().unwrap().task_info(t).unwrap().counter
}

#[test]
fn nice_maps_to_priority_as_in_sys_setpriority() {
    assert_eq!(nice_to_priority(0, 20), 20);
    assert_eq!(nice_to_priority(5, 20), 15);
    assert_eq!(nice_to_priority(10, 20), 10);
    assert_eq!(nice_to_priority(19, 20), 1);
    assert_eq!(nice_to_priority(20, 20), 1);
    assert_eq!(nice_to_priority(-10, 20), 30);
    assert_eq!(nice_to_priority(-20, 20), 40);
}

#[test]
fn two_hogs_epochs_and_the_mm_bonus() {
    // A and B, 20 ticks each. A runs 0-200 ms (counter 20 -> 0), then B (goodness 40 beats
    // A's 0) 200-400. At 400 both are at 0: a new epoch gives both 0/2 + 20 = 20, and B,
    // the task just running, wins the tie with its +1 (2.2's same-mm bonus) and runs on;
    // at 600 A (20) beats B (0); at 800 the next epoch keeps A.
    let (mut s, p) = setup(1, default_cfg());
    let a = s.add(&[], None, true);
    let b = s.add(&[], None, true);
    assert_eq!((counter(&p, a), counter(&p, b)), (20, 20));
    tick_to(&mut s, 190);
    assert_eq!(counter(&p, a), 1);
    tick_to(&mut s, 1000);
    assert_eq!(s.on_cpu(0), vec![(0, a.0), (200, b.0), (400, b.0), (600, a.0), (800, a.0), (1000, b.0)]);
    assert_eq!(p.lock().unwrap().epochs(), 2);
}

#[test]
fn epoch_recalculation_halves_sleepers_and_sleeper_preempts_on_wake() {
    let (mut s, p) = setup(1, default_cfg());
    let a = s.add(&[], None, true);
    let b = s.add(&[], None, true);
    // A runs 0-200 ms; B from 200. B blocks at 250 with 15 ticks left.
    tick_to(&mut s, 250);
    assert_eq!(s.running_task(0), Some(b));
    assert_eq!(counter(&p, b), 15);
    s.block(b);
    // A (counter 0) is the only candidate: goodness 0 ends the epoch. Every task is
    // recalculated, the sleeper too: A = 0/2 + 20 = 20, B = 15/2 + 20 = 27.
    assert_eq!(p.lock().unwrap().epochs(), 1);
    assert_eq!((counter(&p, a), counter(&p, b)), (20, 27));
    assert_eq!(s.running_task(0), Some(a));
    // A runs 5 ticks (counter 15). B wakes at 300: goodness 27 + 20 = 47 beats A's
    // 15 + 20 + 1 = 36, so B preempts A at once.
    tick_to(&mut s, 300);
    assert_eq!(counter(&p, a), 15);
    s.wake(b);
    assert_eq!(s.running_task(0), Some(b));
    assert_eq!(s.on_cpu(0), vec![(0, a.0), (200, b.0), (250, a.0), (300, b.0)]);
    // B runs its 27 ticks (until 570), then A with 15 (until 720), then a new epoch:
    // A (prev) 0/2 + 20 = 20 + 1 beats B's 20: A runs on.
    tick_to(&mut s, 720);
    assert_eq!(s.on_cpu(0)[4..], [(570, a.0), (720, a.0)]);
    assert_eq!(p.lock().unwrap().epochs(), 2);
}

#[test]
fn waking_task_with_lower_goodness_does_not_preempt() {
    let (mut s, p) = setup(1, default_cfg());
    let a = s.add(&[], None, true);
    let b = s.add(&[("priority", 5)], None, false);
    tick_to(&mut s, 100);
    // A: 10 + 20 + 1 = 31; B: 5 + 5 = 10.
    s.wake(b);
    assert_eq!(s.running_task(0), Some(a));
    // When A's counter runs out (200 ms) B runs its 5 ticks.
    tick_to(&mut s, 260);
    assert_eq!(s.on_cpu(0), vec![(0, a.0), (200, b.0), (250, a.0)]);
    // At 250 both counters are 0: the new epoch gives B 0/2 + 5.
    assert_eq!(counter(&p, b), 5);
    assert_eq!(p.lock().unwrap().epochs(), 1);
}

#[test]
fn goodness_orders_by_counter_plus_priority() {
    // X runs first; A (priority 30), B (10) and C (5) wait. When X blocks at 0 the order
    // is A (60), B (20), C (10), each running out its counter; at 450 all runnable tasks
    // are at 0: a new epoch gives A 30, B 10, C 5 and the sleeping X 20/2 + 20 = 30, and
    // A (60) beats C, the task just running (5 + 5 + 1 = 11).
    let (mut s, p) = setup(1, default_cfg());
    let x = s.add(&[], None, true);
    let c = s.add(&[("priority", 5)], None, true);
    let b = s.add(&[("priority", 10)], None, true);
    let a = s.add(&[("priority", 30)], None, true);
    s.block(x);
    tick_to(&mut s, 460);
    assert_eq!(s.on_cpu(0), vec![(0, x.0), (0, a.0), (300, b.0), (400, c.0), (450, a.0)]);
    assert_eq!(counter(&p, x), 30);
    assert_eq!(counter(&p, c), 5);
}

#[test]
fn equal_goodness_goes_to_the_most_recently_woken() {
    // 2.2's add_to_runqueue puts a woken task at the front of the run queue; with equal
    // goodness the earlier in the queue wins.
    let (mut s, _p) = setup(1, default_cfg());
    let h = s.add(&[], None, true);
    let a = s.add(&[], None, false);
    let b = s.add(&[], None, false);
    s.wake(a);
    s.wake(b);
    s.block(h);
    assert_eq!(s.tasks(), vec![h, b]);
}

#[test]
fn yield_passes_the_cpu_for_one_decision() {
    let (mut s, _p) = setup(1, default_cfg());
    let a = s.add(&[], None, true);
    let b = s.add(&[("priority", 1)], None, true);
    tick_to(&mut s, 20);
    // A yields: goodness -1 for this decision, so B (1 + 1 = 2) runs, even though A's
    // goodness (18 + 20) is far higher. B's counter runs out after 1 tick: A again.
    s.yield_cpu(CpuId(0));
    tick_to(&mut s, 40);
    assert_eq!(s.on_cpu(0), vec![(0, a.0), (20, b.0), (30, a.0)]);
}

/// The SMP scenario of the affinity tests: returns (sim, A, D) at the moment CPU 1 has to
/// choose between A (last ran on CPU 1, counter 25, priority 30: 55) and D (never ran,
/// counter 30, priority 30: 60).
fn smp_choice(cfg: Linux22Config) -> (Sim, TaskId, TaskId, TaskId) {
    let (mut s, _p) = setup(2, cfg);
    let cpu0 = CpuSet::first(1);
    let cpu1 = CpuSet(0b10);
    let h0 = s.add(&[], Some(cpu0), true);
    let a = s.add(&[("priority", 30)], None, true);
    assert_eq!(s.running_task(1), Some(a));
    tick_to(&mut s, 50); // A: 30 -> 25
    let h1 = s.add(&[], Some(cpu1), true);
    // A yields: H1 (40) takes CPU 1; A waits with its 25 ticks, last run on CPU 1.
    s.yield_cpu(CpuId(1));
    assert_eq!(s.running_task(1), Some(h1));
    let d = s.add(&[("priority", 30)], None, true);
    tick_to(&mut s, 60);
    s.block(h1);
    (s, a, d, h0)
}

#[test]
fn smp_cpu_bonus_keeps_a_task_on_its_last_cpu() {
    // PROC_CHANGE_PENALTY = 15: on CPU 1, A is worth 25 + 30 + 15 = 70 against D's 60.
    let (mut s, a, d, h0) = smp_choice(default_cfg());
    assert_eq!(s.running_task(1), Some(a));
    // CPU 0 then takes D (60; H0's CPU, but D never ran there).
    s.block(h0);
    assert_eq!(s.running_task(0), Some(d));
    assert_eq!(s.on_cpu(1), vec![(0, 1), (50, 2), (60, 1)]);
    assert_no_double_dispatch(&s);
}

#[test]
fn smp_without_cpu_bonus_goodness_alone_decides() {
    let (s, a, d, _h0) = smp_choice(Linux22Config { cpu_bonus: 0, ..default_cfg() });
    assert_eq!(s.running_task(1), Some(d));
    assert_ne!(s.running_task(0), Some(a));
}

#[test]
fn smp_wake_preempts_where_goodness_gains_most() {
    // Two CPUs running A and B, 5 ticks left each: each is worth 5 + 20 + 15 (its CPU)
    // + 1 (just running) = 41 where it runs. A woken W (20 + 20 = 40, no CPU bonus)
    // preempts neither; W2 (priority 25: 50) beats both and takes the first CPU with the
    // largest gain, CPU 0.
    let (mut s, _p) = setup(2, default_cfg());
    let a = s.add(&[], None, true);
    let b = s.add(&[], None, true);
    assert_eq!((s.running_task(0), s.running_task(1)), (Some(a), Some(b)));
    let w = s.add(&[], None, false);
    let w2 = s.add(&[("priority", 25)], None, false);
    tick_to(&mut s, 50);
    s.block(b);
    s.wake(b); // B runs again at once on the idle CPU 1 with its 15 ticks
    assert_eq!(s.running_task(1), Some(b));
    tick_to(&mut s, 150); // A and B: 5 ticks left each
    s.wake(w);
    assert_eq!((s.running_task(0), s.running_task(1)), (Some(a), Some(b)));
    s.wake(w2);
    assert_eq!(s.running_task(0), Some(w2));
    assert_no_double_dispatch(&s);
}

#[test]
fn many_tasks_pick_in_goodness_order() {
    // 20,000 queued tasks with priorities 1..=40: every decision takes the best remaining
    // (highest counter + priority), found without scanning the queue.
    let (mut s, p) = setup(1, default_cfg());
    let h = s.add(&[], None, true);
    let n = 20_000u32;
    let ids: Vec<TaskId> = (0..n).map(|i| s.add(&[("priority", (i % 40 + 1) as i64)], None, true)).collect();
    s.block(h);
    let mut seen = Vec::new();
    for _ in 0..100 {
        let t = s.running_task(0).unwrap();
        seen.push(p.lock().unwrap().task_info(t).unwrap().priority);
        s.block(t);
    }
    assert!(seen.iter().all(|&prio| prio == 40), "{seen:?}");
    assert_eq!(p.lock().unwrap().queued(), n as usize - 101); // one runs
    assert!(ids.len() == n as usize);
}

#[test]
fn registry_builds_linux22_and_checks_params() {
    let pol = build("linux22", &[("tick", dur("4ms")), ("priority", vassal_policies::ParamValue::Int(10))]);
    assert_eq!(pol.kind(), "linux22");
    let map: std::collections::BTreeMap<String, vassal_policies::ParamValue> = [("tick".to_string(), dur("0ms"))].into_iter().collect();
    assert!(vassal_policies::build("linux22", &map).is_err());
    let map: std::collections::BTreeMap<String, vassal_policies::ParamValue> = [("quantum".to_string(), dur("10ms"))].into_iter().collect();
    assert!(vassal_policies::build("linux22", &map).is_err());
    assert!(vassal_policies::kinds().iter().any(|(k, _)| *k == "linux22"));
    let _ = linux22::DEF_PRIORITY;
}

#[test]
fn random_operations_keep_cpus_busy_and_the_dispatcher_consistent() {
    // Mixed priorities, ticks on the policy's 10 ms grid, nice by message.
    let (mut s, _p) = setup(3, default_cfg());
    random_ops(
        &mut s,
        &RandomOps {
            seed: 0x2545_f491_4f6c_dd1d,
            steps: 3000,
            params: &|rnd| vec![("priority", 1 + rnd(40) as i64)],
            advance: &|s, _| {
                let next = (s.now / TICK + 1) * TICK;
                tick_to(s, next / 1_000_000);
            },
            message: &|rnd| ("nice", rnd(41) as i64 - 20),
        },
    );
}

#[test]
fn out_of_range_priority_and_nice_are_clamped() {
    // Task parameters are shared by every policy (fps reads `priority` as well), so a
    // value outside 1..=1000 is clamped rather than refused.
    let (mut s, p) = setup(1, default_cfg());
    let a = s.add(&[("priority", 0)], None, false);
    let b = s.add(&[("priority", 5000)], None, false);
    let c = s.add(&[("nice", -99)], None, false);
    let d = s.add(&[("nice", 7)], None, false);
    let prio = |t| p.lock().unwrap().task_info(t).unwrap().priority;
    assert_eq!((prio(a), prio(b), prio(c), prio(d)), (1, 1000, 40, 13));
    // A message sets it while the task is queued.
    let sched = s.drv.disp.default_sched();
    assert_eq!(s.message(sched, a, Request::Param { name: "nice".into(), value: -5 }), Reply::Ok);
    assert_eq!(prio(a), 25);
    assert!(!s.message(sched, a, Request::Param { name: "weight".into(), value: 2 }).is_ok());
}
