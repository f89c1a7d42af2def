//! The FB scheduler (paper 004 §4.1, kind "fb") driven through a real
//! `vassal_core::Dispatcher`: hand-computed schedules. Levels 0–31, 31 best; 16–31 real
//! time. The tests use quantum(l) = 10 ms + (15 − l) · 10 ms: 20 ms at level 14, 80 ms at
//! level 8, 160 ms at level 0.

mod common;

use std::sync::{Arc, Mutex};

use common::*;
use vassal_core::{CpuSet, Reply, Request, Shared, TaskId};
use vassal_policies::fb::{boosted, Fb, FbConfig, FbTaskInfo, BOOST_DISK, BOOST_TERMINAL_INPUT, BOOST_TERMINAL_OUTPUT};
use vassal_policies::ParamValue;

fn setup(ncpus: u16, cfg: FbConfig) -> (Sim, Arc<Mutex<Fb>>) {
    let p = Arc::new(Mutex::new(Fb::new(cfg)));
    (Sim::new(ncpus, Box::new(Shared::of(&p))), p)
}

fn cfg() -> FbConfig {
    FbConfig { quantum: ms(10), quantum_step: ms(10), ..FbConfig::default() }
}

fn info(p: &Arc<Mutex<Fb>>, t: TaskId) -> FbTaskInfo {
    p.lock().unwrap().task_info(t).unwrap()
}

fn level(p: &Arc<Mutex<Fb>>, t: TaskId) -> u8 {
    info(p, t).level
}

#[test]
fn quantum_table_is_longer_at_lower_levels() {
    let c = cfg();
    assert_eq!((c.quantum(15), c.quantum(14), c.quantum(8), c.quantum(0)), (Some(ms(10)), Some(ms(20)), Some(ms(80)), Some(ms(160))));
    assert_eq!((c.quantum(16), c.quantum(31)), (None, None));
    let d = FbConfig::default();
    assert_eq!((d.quantum(15), d.quantum(8), d.quantum(0)), (Some(ms(50)), Some(ms(225)), Some(ms(425))));
    assert_eq!((d.base, d.wake_boost), (8, BOOST_DISK));
}

#[test]
fn a_full_quantum_drops_a_level_never_below_base() {
    // A (base 8) sleeps on terminal input (+6): level 14. Woken at 0 it runs alone; each
    // full quantum drops it one level with the next level's (longer) quantum: 14 (20 ms),
    // 13 (30), 12 (40), 11 (50), 10 (60), 9 (70), 8 (80) — and it stays at its base 8.
    let (mut s, p) = setup(1, cfg());
    let a = s.add(&[("wake_boost", 6)], None, false);
    assert_eq!(level(&p, a), 14);
    s.wake(a);
    s.run_until(ms(440));
    assert_eq!(
        s.timeline(),
        vec![
            (0, a.0, Some(20)),
            (20, a.0, Some(30)),
            (50, a.0, Some(40)),
            (90, a.0, Some(50)),
            (140, a.0, Some(60)),
            (200, a.0, Some(70)),
            (270, a.0, Some(80)),
            (350, a.0, Some(80)),
            (430, a.0, Some(80)),
        ]
    );
    assert_eq!(level(&p, a), 8);
}

#[test]
fn a_task_that_drops_goes_behind_its_new_level() {
    // B (base 9) runs; A (base 8, disk +2: level 10) wakes at 0 and preempts it; B keeps the
    // front of level 9 with the rest of its quantum (70 ms). A uses its 60 ms and drops to
    // 9, behind B: B 60–130, A 130–200 (its level-9 quantum) and drops to its base 8, where
    // B (base 9) starves it.
    let (mut s, p) = setup(1, cfg());
    let a = s.add(&[], None, false);
    let b = s.add(&[("base", 9)], None, true);
    assert_eq!(level(&p, a), 10);
    s.wake(a);
    s.run_until(ms(400));
    assert_eq!(
        s.timeline(),
        vec![
            (0, b.0, Some(70)),
            (0, a.0, Some(60)),
            (60, b.0, Some(70)),
            (130, a.0, Some(70)),
            (200, b.0, Some(70)),
            (270, b.0, Some(70)),
            (340, b.0, Some(70)),
        ]
    );
    assert_eq!((level(&p, a), level(&p, b)), (8, 9));
}

#[test]
fn ready_list_is_ordered_by_level_fifo_within_a_level() {
    let (mut s, p) = setup(1, cfg());
    let h = s.add(&[("base", 15)], None, true);
    let a = s.add(&[("base", 3)], None, true);
    let b = s.add(&[("base", 9)], None, true);
    let c = s.add(&[("base", 9)], None, true);
    let d = s.add(&[("base", 5)], None, true);
    assert_eq!(p.lock().unwrap().ready(), vec![b, c, d, a]);
    s.block(h);
    assert_eq!(p.lock().unwrap().ready(), vec![c, d, a]);
    s.run_until(ms(150));
    assert_eq!(s.on_cpu(0), vec![(0, h.0), (0, b.0), (70, c.0), (140, b.0)]);
    assert_eq!(p.lock().unwrap().ready(), vec![c, d, a]);
    s.block(b);
    s.block(c);
    assert_eq!(s.running_task(0), Some(d));
    s.block(d);
    assert_eq!(s.running_task(0), Some(a));
}

#[test]
fn blocking_raises_the_level_by_the_awaited_event() {
    assert_eq!((BOOST_TERMINAL_INPUT, BOOST_TERMINAL_OUTPUT, BOOST_DISK), (6, 4, 2));
    assert_eq!(boosted(8, 6), 14);
    assert_eq!(boosted(12, 6), 15); // never into the real-time levels
    assert_eq!(boosted(20, 6), 20); // real time: no boost
    let (mut s, p) = setup(1, cfg());
    let h = s.add(&[("base", 15)], None, true);
    let tin = s.add(&[("wake_boost", 6)], None, true);
    let tout = s.add(&[("wake_boost", 4)], None, true);
    let disk = s.add(&[], None, true);
    let low = s.add(&[("base", 0), ("wake_boost", 6)], None, true);
    let high = s.add(&[("base", 12), ("wake_boost", 6)], None, true);
    for t in [tin, tout, disk, low, high] {
        assert_eq!(level(&p, t), info(&p, t).base);
        s.block(t);
    }
    assert_eq!([tin, tout, disk, low, high].map(|t| level(&p, t)), [14, 12, 10, 6, 15]);
    // A fresh quantum of the new level.
    assert_eq!(info(&p, tin).left, Some(ms(20)));
    // The increment can be set by message before blocking.
    let sched = s.drv.disp.default_sched();
    s.wake(disk);
    assert_eq!(s.message(sched, disk, Request::Param { name: "wake_boost".into(), value: 4 }), Reply::Ok);
    s.block(disk);
    assert_eq!(level(&p, disk), 12);
    assert_eq!(s.running_task(0), Some(h));
}

#[test]
fn a_boosted_wake_preempts_a_lower_level() {
    // A (base 8, quantum 80 ms) runs; B (base 8) sleeps on terminal output: level 12. B
    // wakes at 30 ms and preempts A, which keeps the front of level 8 and the 50 ms left of
    // its quantum. B runs down the levels 12 (40 ms), 11 (50), 10 (60), 9 (70) to its base
    // 8, behind A: A finishes its quantum (250–300), then B (300–380).
    let (mut s, p) = setup(1, cfg());
    let a = s.add(&[], None, true);
    let b = s.add(&[("wake_boost", 4)], None, false);
    s.run_until(ms(30));
    s.wake(b);
    assert_eq!(s.running_task(0), Some(b));
    assert_eq!(info(&p, a).left, Some(ms(50)));
    s.run_until(ms(300));
    assert_eq!(
        s.timeline(),
        vec![
            (0, a.0, Some(80)),
            (30, b.0, Some(40)),
            (70, b.0, Some(50)),
            (120, b.0, Some(60)),
            (180, b.0, Some(70)),
            (250, a.0, Some(50)),
            (300, b.0, Some(80)),
        ]
    );
    // A wake at an equal level does not preempt.
    let c = s.add(&[("wake_boost", 0)], None, false);
    assert_eq!(level(&p, c), 8);
    s.wake(c);
    assert_eq!(s.running_task(0), Some(b));
}

#[test]
fn real_time_levels_preempt_and_are_not_time_sliced() {
    let (mut s, p) = setup(1, cfg());
    let a = s.add(&[], None, true);
    let r = s.add(&[("base", 20), ("wake_boost", 6)], None, false);
    let r2 = s.add(&[("base", 25)], None, false);
    let t = s.add(&[("wake_boost", 6)], None, false);
    assert_eq!((level(&p, r), info(&p, r).left), (20, None));
    s.run_until(ms(10));
    s.wake(r);
    // R runs until it blocks: no slice, no level change, for as long as it likes.
    s.run_until(ms(1000));
    assert_eq!(s.timeline(), vec![(0, a.0, Some(80)), (10, r.0, None)]);
    // A boosted time-sharing task (level 14) does not preempt real time; a higher real-time
    // level does, and the preempted R resumes before any time-sharing task.
    s.wake(t);
    assert_eq!(s.running_task(0), Some(r));
    s.wake(r2);
    assert_eq!(s.running_task(0), Some(r2));
    s.run_until(ms(1010));
    s.block(r2);
    assert_eq!(s.running_task(0), Some(r));
    s.run_until(ms(1020));
    s.block(r);
    assert_eq!(level(&p, r), 20);
    assert_eq!(s.running_task(0), Some(t));
    assert_eq!(s.timeline(), vec![(0, a.0, Some(80)), (10, r.0, None), (1000, r2.0, None), (1010, r.0, None), (1020, t.0, Some(20))]);
}

#[test]
fn messages_change_the_base_level() {
    let (mut s, p) = setup(1, cfg());
    let sched = s.drv.disp.default_sched();
    let h = s.add(&[("base", 15)], None, true);
    let a = s.add(&[("base", 2)], None, true);
    // Raised base: the level follows up to it.
    assert_eq!(s.message(sched, a, Request::Param { name: "base".into(), value: 6 }), Reply::Ok);
    assert_eq!((info(&p, a).base, level(&p, a)), (6, 6));
    // Into real time: it moves there, and preempts nothing until it wakes or H leaves.
    assert_eq!(s.message(sched, a, Request::Param { name: "base".into(), value: 17 }), Reply::Ok);
    assert_eq!((level(&p, a), info(&p, a).left), (17, None));
    s.block(h);
    assert_eq!(s.running_task(0), Some(a));
    assert_eq!(s.timeline().last(), Some(&(0, a.0, None)));
    // Back to time-sharing.
    assert_eq!(s.message(sched, a, Request::Param { name: "base".into(), value: 4 }), Reply::Ok);
    assert_eq!(level(&p, a), 4);
    for (name, value) in [("base", 32), ("base", -1), ("wake_boost", 16), ("priority", 3)] {
        let r = s.message(sched, a, Request::Param { name: name.into(), value });
        assert!(matches!(&r, Reply::Refused(e) if e.contains(name)), "{name} {value}: {r:?}");
    }
    assert!(!s.message(sched, a, Request::Warp { on: true }).is_ok());
}

#[test]
fn registry_builds_fb_and_checks_params() {
    use std::collections::BTreeMap;
    let map = |kv: &[(&str, ParamValue)]| -> BTreeMap<String, ParamValue> { kv.iter().map(|(k, v)| (k.to_string(), v.clone())).collect() };
    assert!(vassal_policies::kinds().iter().any(|(k, _)| *k == "fb"));
    assert_eq!(build("fb", &[]).kind(), "fb");
    build(
        "fb",
        &[("quantum", dur("20ms")), ("quantum_step", dur("0ms")), ("base", ParamValue::Int(0)), ("wake_boost", ParamValue::Int(6))],
    );
    for (kv, word) in [
        (vec![("quantum", dur("0ms"))], "quantum"),
        (vec![("quantum", ParamValue::Int(5))], "quantum"),
        (vec![("base", ParamValue::Int(32))], "base"),
        (vec![("wake_boost", ParamValue::Int(16))], "wake_boost"),
        (vec![("tick", dur("10ms"))], "tick"),
    ] {
        match vassal_policies::build("fb", &map(&kv)) {
            Ok(_) => panic!("{kv:?} accepted"),
            Err(e) => assert!(e.contains(word), "{e}"),
        }
    }
    // The default base level is a policy parameter.
    let mut s = Sim::new(1, build("fb", &[("base", ParamValue::Int(3)), ("quantum", dur("10ms")), ("quantum_step", dur("10ms"))]));
    s.add(&[("priority", 99), ("weight", 4), ("period", 1_000_000)], None, true);
    assert_eq!(s.timeline(), vec![(0, 0, Some(130))]);
    let e = s.drv.disp.try_add_task(0, params(&[("base", 40)]), CpuSet::first(1), None, true).unwrap_err().1;
    assert!(e.contains("base"), "{e}");
    let e = s.drv.disp.try_add_task(0, params(&[("wake_boost", -1)]), CpuSet::first(1), None, false).unwrap_err().1;
    assert!(e.contains("wake_boost"), "{e}");
}

#[test]
fn a_new_task_inherits_its_parents_base() {
    let (mut s, p) = setup(1, cfg());
    let a = s.add(&[("base", 11)], None, true);
    let child = s.drv.disp.add_task(0, params(&[]), CpuSet::first(1), Some(a), true);
    s.settle();
    assert_eq!((info(&p, child).base, level(&p, child)), (11, 11));
}

#[test]
fn many_tasks_pick_in_level_order() {
    let (mut s, p) = setup(1, cfg());
    let h = s.add(&[("base", 31)], None, true);
    for i in 0..20_000i64 {
        s.add(&[("base", i % 16)], None, true);
    }
    s.block(h);
    for _ in 0..100 {
        let t = s.running_task(0).unwrap();
        assert_eq!(level(&p, t), 15);
        s.block(t);
    }
}

#[test]
fn random_operations_keep_cpus_busy_and_the_dispatcher_consistent() {
    let (mut s, _p) = setup(3, cfg());
    random_ops(
        &mut s,
        &RandomOps {
            seed: 0x9e37_79b9_7f4a_7c15,
            steps: 4000,
            params: &|rnd| vec![("base", rnd(20) as i64), ("wake_boost", rnd(7) as i64), ("priority", 7)],
            advance: &|s, rnd| {
                let until = s.now + ms(rnd(30));
                s.run_until(until);
            },
            message: &|rnd| ("base", rnd(32) as i64),
        },
    );
}
