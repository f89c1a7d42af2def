//! The standard UNIX scheduler (paper 004 §3, kind "unix") driven through a real
//! `vassal_core::Dispatcher`: hand-computed schedules, tick by tick. The policy's clock is
//! its own scheduler event (`unix::TICK_TOKEN`); the harness fires it at every multiple of
//! the tick. Priorities: numerically lowest runs first; V7 PUSER = 50, A = 16.

mod common;

use std::sync::{Arc, Mutex};

use common::*;
use vassal_core::{CpuId, CpuSet, Ns, Preempt, Reply, Request, Shared, TaskId};
use vassal_policies::unix::{Unix, UnixConfig, UnixTaskInfo, Variant, DEFAULT_TICK, TICK_TOKEN};
use vassal_policies::ParamValue;

fn setup(ncpus: u16, cfg: UnixConfig) -> (Sim, Arc<Mutex<Unix>>) {
    let p = Arc::new(Mutex::new(Unix::new(cfg)));
    (Sim::new(ncpus, Box::new(Shared::of(&p))), p)
}

/// V7 with a 10 ms tick (HZ = 100): readable timelines.
fn v7_10ms() -> UnixConfig {
    UnixConfig { tick: ms(10), ..UnixConfig::new(Variant::V7) }
}

/// Advances to `until` ns, firing the policy's tick at every multiple of `tick` on the way
/// (a tick at `until` itself included).
fn tick_to_ns(s: &mut Sim, tick: Ns, until: Ns) {
    loop {
        let next = (s.now / tick + 1) * tick;
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

fn tick_to(s: &mut Sim, until_ms: u64) {
    tick_to_ns(s, ms(10), ms(until_ms));
}

/// `n` ticks of the default 60 Hz clock.
fn ticks(n: u64) -> Ns {
    n * DEFAULT_TICK
}

fn info(p: &Arc<Mutex<Unix>>, t: TaskId) -> UnixTaskInfo {
    p.lock().unwrap().task_info(t).unwrap()
}

fn ticks_pri(p: &Arc<Mutex<Unix>>, t: TaskId) -> (u32, i32) {
    let i = info(p, t);
    (i.ticks, i.pri)
}

#[test]
fn variant_constants_and_formulas() {
    // §3: pri = ticks / A + PUSER (+ nice); A = 16 (V6, V7), 2 (S5). Capped at 127.
    assert_eq!(Variant::V7.user_pri(0, 0), 50);
    assert_eq!(Variant::V7.user_pri(255, 0), 50 + 15);
    assert_eq!(Variant::V7.user_pri(47, 3), 50 + 2 + 3);
    assert_eq!(Variant::V6.user_pri(255, 20), 127); // 100 + 15 + 20 capped
    assert_eq!(Variant::V6.user_pri(255, 5), 100 + 15 + 5);
    assert_eq!(Variant::S5.user_pri(255, 20), 127); // 127 + 60 + 20 capped
    assert_eq!(Variant::S5.user_pri(31, 0), 60 + 15);
    // Decay: V6 −10 (never below 0), V7 ×4/5 + nice, S5 ×3/5 + nice, rounding toward 0.
    assert_eq!(Variant::V6.decay(60, 0), 50);
    assert_eq!(Variant::V6.decay(7, 0), 0);
    assert_eq!(Variant::V6.decay(60, 5), 50); // V6 does not add nice in the decay
    assert_eq!(Variant::V7.decay(60, 0), 48);
    assert_eq!(Variant::V7.decay(59, 0), 47); // 47.2
    assert_eq!(Variant::V7.decay(255, 20), 224);
    assert_eq!(Variant::V7.decay(3, -20), 0);
    assert_eq!(Variant::V7.decay(255, 60), 255);
    assert_eq!(Variant::S5.decay(60, 0), 36);
    assert_eq!(Variant::S5.decay(59, 0), 35); // 35.4
                                              // Kernel-mode priorities are all better than PUSER.
    for v in [Variant::V6, Variant::V7, Variant::S5] {
        assert!(v.pswp() < v.pribio() && v.pribio() < v.ttipri() && v.ttipri() < v.ttopri() && v.ttopri() < v.puser());
    }
    assert_eq!((Variant::V7.pribio(), Variant::V7.ttipri(), Variant::V7.ttopri()), (20, 28, 29));
    assert_eq!(UnixConfig::default().hz(), 60);
    assert_eq!(UnixConfig::default().variant, Variant::V7);
}

#[test]
fn tick_count_and_decay_after_one_second_per_variant() {
    // One CPU-bound task alone, the default 60 Hz clock. After 59 ticks its tick count is
    // 59 and its priority still PUSER (user priorities are recomputed once a second); the
    // 60th tick (1 s) adds one more and then decays: V6 60 − 10 = 50, pri 50/16 + 100 =
    // 103; V7 60·4/5 = 48, pri 48/16 + 50 = 53; S5 60·3/5 = 36, pri 36/2 + 60 = 78.
    // After 2 s (60 more ticks): V6 110 − 10 = 100 → 106; V7 108·4/5 = 86 → 55;
    // S5 96·3/5 = 57 → 88.
    for (v, one, two) in [(Variant::V6, (50, 103), (100, 106)), (Variant::V7, (48, 53), (86, 55)), (Variant::S5, (36, 78), (57, 88))] {
        let (mut s, p) = setup(1, UnixConfig::new(v));
        let a = s.add(&[], None, true);
        assert_eq!(ticks_pri(&p, a), (0, v.puser()), "{v:?}");
        tick_to_ns(&mut s, DEFAULT_TICK, ticks(59));
        assert_eq!(ticks_pri(&p, a), (59, v.puser()), "{v:?}");
        assert_eq!(p.lock().unwrap().decays(), 0);
        tick_to_ns(&mut s, DEFAULT_TICK, ticks(60));
        assert_eq!(ticks_pri(&p, a), one, "{v:?}");
        assert_eq!(p.lock().unwrap().decays(), 1);
        tick_to_ns(&mut s, DEFAULT_TICK, ticks(120));
        assert_eq!(ticks_pri(&p, a), two, "{v:?}");
        assert_eq!(s.running_task(0), Some(a));
    }
}

#[test]
fn tick_count_saturates_at_255() {
    // A 1 ms clock (HZ = 1000): 1000 ticks a second, but the count stops at 255; the decay
    // then gives V7 255·4/5 = 204 (pri 204/16 + 50 = 62).
    let (mut s, p) = setup(1, UnixConfig { tick: ms(1), ..UnixConfig::new(Variant::V7) });
    let a = s.add(&[], None, true);
    tick_to_ns(&mut s, ms(1), ms(999));
    assert_eq!(info(&p, a).ticks, 255);
    tick_to_ns(&mut s, ms(1), ms(1000));
    assert_eq!(ticks_pri(&p, a), (204, 62));
}

#[test]
fn nice_enters_the_decay_and_the_priority() {
    // 60 ticks in the first second, then the decay:
    // V7 nice 5: 60·4/5 + 5 = 53, pri 53/16 + 50 + 5 = 58.
    // S5 nice −5: 60·3/5 − 5 = 31, pri 31/2 + 60 − 5 = 70.
    // V6 nice 5: 60 − 10 = 50 (no nice in V6's decay), pri 50/16 + 100 + 5 = 108.
    for (v, nice, want) in [(Variant::V7, 5, (53, 58)), (Variant::S5, -5, (31, 70)), (Variant::V6, 5, (50, 108))] {
        let (mut s, p) = setup(1, UnixConfig::new(v));
        let a = s.add(&[("nice", nice)], None, true);
        assert_eq!(ticks_pri(&p, a), (0, v.puser() + nice as i32), "{v:?}");
        tick_to_ns(&mut s, DEFAULT_TICK, ticks(60));
        assert_eq!(ticks_pri(&p, a), want, "{v:?}");
    }
    // A niced sleeper's count grows by nice every second in V7: 0 → 20 → 16 + 20 = 36 →
    // 28 + 20 = 48; a negative nice drains it (never below 0).
    let (mut s, p) = setup(1, v7_10ms());
    let _h = s.add(&[], None, true);
    let slow = s.add(&[("nice", 20)], None, false);
    let fast = s.add(&[("nice", -20)], None, false);
    tick_to(&mut s, 1000);
    assert_eq!(info(&p, slow).ticks, 20);
    tick_to(&mut s, 3000);
    assert_eq!(info(&p, slow).ticks, 48);
    assert_eq!(info(&p, fast).ticks, 0);
    // Asleep, both keep their kernel-mode (wait) priority: PRIBIO by default.
    assert_eq!((info(&p, slow).pri, info(&p, slow).kernel), (20, true));
}

#[test]
fn lowest_priority_runs_first_and_decay_alternates_cpu_hogs() {
    // V7, 10 ms tick (100 ticks a second). A runs 0–1 s: 100 ticks → 80, pri 80/16 + 50 =
    // 55; B (0 ticks, pri 50) is now strictly better: B runs 1–2 s (100 → 80, pri 55)
    // while A decays to 64 (pri 54): A runs 2–3 s (164 → 131, pri 58), B decays to 64
    // (54): B; at 4 s B 131 (58), A 131·4/5 = 104 (56): A.
    let (mut s, p) = setup(1, v7_10ms());
    let a = s.add(&[], None, true);
    let b = s.add(&[], None, true);
    tick_to(&mut s, 1000);
    assert_eq!((ticks_pri(&p, a), ticks_pri(&p, b)), ((80, 55), (0, 50)));
    tick_to(&mut s, 4000);
    assert_eq!(s.on_cpu(0), vec![(0, a.0), (1000, b.0), (2000, a.0), (3000, b.0), (4000, a.0)]);
    assert_eq!((ticks_pri(&p, a), ticks_pri(&p, b)), ((104, 56), (131, 58)));
}

#[test]
fn equal_priorities_rotate_once_a_second_in_v7() {
    // A runs 0–1 s and decays to 80 (pri 55); B, nice 5 and never run, decays to
    // 0·4/5 + 5 = 5 (pri 0 + 50 + 5 = 55): equal. V7's once-a-second reschedule puts A
    // behind B, so B runs; with the rotation off (resched_secs = 0) A, not strictly worse,
    // runs on.
    for (secs, want) in [(1, vec![(0, 0), (1000, 1)]), (0, vec![(0, 0)])] {
        let (mut s, p) = setup(1, UnixConfig { resched_secs: secs, ..v7_10ms() });
        let a = s.add(&[], None, true);
        let b = s.add(&[("nice", 5)], None, true);
        tick_to(&mut s, 1500);
        assert_eq!((ticks_pri(&p, a).1, ticks_pri(&p, b).1), (55, 55));
        assert_eq!(s.on_cpu(0), want, "resched_secs {secs}");
    }
    // V6 rotates every 4 s only: an equal-priority task waits past the first second.
    assert_eq!(UnixConfig::new(Variant::V6).resched_secs, 4);
}

#[test]
fn kernel_priority_after_wake_preempts_a_user_mode_task() {
    // A (user mode, pri 50) runs; B sleeps on terminal input (TTIPRI 28). B's wake-up at
    // 500 ms preempts A at once. B runs in kernel mode until its first tick (510 ms), then
    // returns to user mode at 1/16 + 50 = 50 — not worse than A's 50, so it runs on. It
    // blocks at 520 ms and sleeps at 28 again; A runs.
    let (mut s, p) = setup(1, v7_10ms());
    let a = s.add(&[], None, true);
    let b = s.add(&[("wait_pri", 28)], None, false);
    assert_eq!((info(&p, b).pri, info(&p, b).kernel), (28, true));
    tick_to(&mut s, 500);
    assert_eq!(ticks_pri(&p, a), (50, 50));
    s.wake(b);
    assert_eq!(s.running_task(0), Some(b));
    assert_eq!((info(&p, b).pri, info(&p, b).kernel), (28, true));
    tick_to(&mut s, 510);
    assert_eq!((info(&p, b).ticks, info(&p, b).pri, info(&p, b).kernel), (1, 50, false));
    assert_eq!(s.running_task(0), Some(b));
    tick_to(&mut s, 520);
    s.block(b);
    assert_eq!((info(&p, b).pri, info(&p, b).kernel), (28, true));
    assert_eq!(s.on_cpu(0), vec![(0, a.0), (500, b.0), (520, a.0)]);
}

#[test]
fn a_task_in_kernel_mode_is_preempted_only_when_it_returns_to_user_mode() {
    // B (TTIPRI 28) wakes at 500 ms and preempts A. C (PRIBIO 20, better) wakes at 505 ms
    // while B is still in kernel mode: no preemption. At B's first tick (510 ms) B returns
    // to user mode (pri 50) and C is better: C runs. At C's first tick (520 ms) C returns
    // to user mode (pri 50) and runs on: A and B (50) are not better.
    let (mut s, p) = setup(1, v7_10ms());
    let a = s.add(&[], None, true);
    let b = s.add(&[("wait_pri", 28)], None, false);
    let c = s.add(&[("wait_pri", 20)], None, false);
    tick_to(&mut s, 500);
    s.wake(b);
    tick_to(&mut s, 505);
    s.wake(c);
    assert_eq!(s.running_task(0), Some(b));
    assert_eq!(p.lock().unwrap().ready(), vec![c, a]);
    tick_to(&mut s, 510);
    assert_eq!(s.running_task(0), Some(c));
    tick_to(&mut s, 530);
    assert_eq!(s.on_cpu(0), vec![(0, a.0), (500, b.0), (510, c.0)]);
    assert_eq!((info(&p, c).pri, info(&p, c).kernel), (50, false));
    // The ready list: A became ready (preempted) before B.
    assert_eq!(p.lock().unwrap().ready(), vec![a, b]);
}

#[test]
fn wake_preempts_the_cpu_with_the_worst_user_priority() {
    // Two CPUs: A (nice 10, pri 60) on CPU 0, B (pri 50) on CPU 1. C wakes at a kernel
    // priority: it takes CPU 0 from A, the worse. D wakes next: CPU 0 runs C in kernel
    // mode (not preemptible), so D takes CPU 1 from B.
    let (mut s, _p) = setup(2, v7_10ms());
    let a = s.add(&[("nice", 10)], None, true);
    let b = s.add(&[], None, true);
    let c = s.add(&[], None, false);
    let d = s.add(&[], None, false);
    assert_eq!((s.running_task(0), s.running_task(1)), (Some(a), Some(b)));
    tick_to(&mut s, 100);
    s.wake(c);
    assert_eq!((s.running_task(0), s.running_task(1)), (Some(c), Some(b)));
    s.wake(d);
    assert_eq!((s.running_task(0), s.running_task(1)), (Some(c), Some(d)));
    assert_no_double_dispatch(&s);
}

#[test]
fn sleepers_decay_and_keep_their_kernel_priority() {
    // A runs 0–500 ms (50 ticks) and sleeps: 1 s → 40, 2 s → 32, 3 s → 25 (25.6), its
    // priority the wait priority throughout. Woken at 3.5 s it preempts H at once.
    let (mut s, p) = setup(1, v7_10ms());
    let a = s.add(&[], None, true);
    let h = s.add(&[], None, true);
    tick_to(&mut s, 500);
    s.block(a);
    tick_to(&mut s, 1000);
    assert_eq!(ticks_pri(&p, a), (40, 20));
    tick_to(&mut s, 3000);
    assert_eq!(ticks_pri(&p, a), (25, 20));
    tick_to(&mut s, 3500);
    s.wake(a);
    assert_eq!(s.running_task(0), Some(a));
    tick_to(&mut s, 3510);
    // Back in user mode: 26/16 + 50 = 51, worse than H? H ran 0.5–3.5 s; its priority is
    // worse still, so A runs on.
    assert_eq!(ticks_pri(&p, a), (26, 51));
    assert!(info(&p, h).pri > 51, "{:?}", info(&p, h));
    assert_eq!(s.running_task(0), Some(a));
}

#[test]
fn messages_set_nice_and_wait_pri() {
    let (mut s, p) = setup(1, v7_10ms());
    let sched = s.drv.disp.default_sched();
    let a = s.add(&[], None, true);
    let b = s.add(&[], None, true);
    // nice takes effect at once for a user-mode task: B (pri 50) → 50 + 10 = 60.
    assert_eq!(s.message(sched, b, Request::Param { name: "nice".into(), value: 10 }), Reply::Ok);
    assert_eq!(info(&p, b).pri, 60);
    // wait_pri: the priority the task sleeps at when it next blocks.
    assert_eq!(s.message(sched, a, Request::Param { name: "wait_pri".into(), value: 29 }), Reply::Ok);
    s.block(a);
    assert_eq!((info(&p, a).pri, info(&p, a).kernel), (29, true));
    for (name, value) in [("nice", 21), ("nice", -21), ("wait_pri", 50), ("wait_pri", -1), ("priority", 3)] {
        let r = s.message(sched, b, Request::Param { name: name.into(), value });
        assert!(matches!(&r, Reply::Refused(e) if e.contains(name)), "{name} {value}: {r:?}");
    }
    assert!(!s.message(sched, b, Request::Warp { on: true }).is_ok());
}

#[test]
fn registry_builds_unix_and_checks_params() {
    use std::collections::BTreeMap;
    let map = |kv: &[(&str, ParamValue)]| -> BTreeMap<String, ParamValue> { kv.iter().map(|(k, v)| (k.to_string(), v.clone())).collect() };
    assert!(vassal_policies::kinds().iter().any(|(k, _)| *k == "unix"));
    assert_eq!(build("unix", &[]).kind(), "unix");
    for v in ["v6", "v7", "s5"] {
        let pol = build("unix", &[("variant", ParamValue::Str(v.into())), ("tick", dur("10ms"))]);
        assert_eq!(pol.kind(), "unix");
    }
    build("unix", &[("variant", ParamValue::Str("v6".into())), ("wait_pri", ParamValue::Int(-50))]);
    build("unix", &[("resched_secs", ParamValue::Int(0))]);
    for (kv, word) in [
        (vec![("variant", ParamValue::Str("v8".into()))], "variant"),
        (vec![("tick", dur("0ms"))], "tick"),
        (vec![("wait_pri", ParamValue::Int(50))], "wait_pri"),
        (vec![("variant", ParamValue::Str("s5".into())), ("wait_pri", ParamValue::Int(60))], "wait_pri"),
        (vec![("quantum", dur("10ms"))], "quantum"),
    ] {
        match vassal_policies::build("unix", &map(&kv)) {
            Ok(_) => panic!("{kv:?} accepted"),
            Err(e) => assert!(e.contains(word), "{e}"),
        }
    }
    // Tasks: other policies' parameters are ignored; bad values of nice and wait_pri are
    // refused at attach with a message.
    let mut s = Sim::new(1, build("unix", &[]));
    s.add(&[("priority", 99), ("weight", 4), ("period", 1_000_000)], None, true);
    let e = s.drv.disp.try_add_task(0, params(&[("nice", 30)]), CpuSet::first(1), None, true).unwrap_err().1;
    assert!(e.contains("nice"), "{e}");
    let e = s.drv.disp.try_add_task(0, params(&[("wait_pri", 50)]), CpuSet::first(1), None, false).unwrap_err().1;
    assert!(e.contains("wait_pri"), "{e}");
}

#[test]
fn a_new_task_inherits_its_parents_nice() {
    let (mut s, p) = setup(1, v7_10ms());
    let a = s.add(&[("nice", 7)], None, true);
    let child = s.drv.disp.add_task(0, params(&[]), CpuSet::first(1), Some(a), true);
    s.settle();
    assert_eq!((info(&p, child).nice, info(&p, child).pri), (7, 57));
}

#[test]
fn many_tasks_pick_in_priority_order() {
    // 20,000 ready tasks with nice −20..=19: every decision takes the best, without a scan.
    let (mut s, p) = setup(1, v7_10ms());
    let h = s.add(&[], None, true);
    for i in 0..20_000i64 {
        s.add(&[("nice", i % 40 - 20)], None, true);
    }
    s.block(h);
    for _ in 0..100 {
        let t = s.running_task(0).unwrap();
        assert_eq!(info(&p, t).nice, -20);
        s.block(t);
    }
}

#[test]
fn random_operations_keep_cpus_busy_and_the_dispatcher_consistent() {
    for variant in [Variant::V6, Variant::V7, Variant::S5] {
        let (mut s, _p) = setup(3, UnixConfig { tick: ms(10), ..UnixConfig::new(variant) });
        random_ops_unix(&mut s, ms(10), 0x2545_f491_4f6c_dd1d ^ variant as u64);
    }
}

/// The shared random operations (common::random_ops) with unix's parameters: nice and
/// wait channel per task, nice by message, time in whole ticks.
fn random_ops_unix(s: &mut Sim, tick: Ns, seed: u64) {
    random_ops(
        s,
        &RandomOps {
            seed,
            steps: 4000,
            params: &|rnd| vec![("nice", rnd(41) as i64 - 20), ("wait_pri", rnd(50) as i64), ("priority", 7)],
            advance: &|s, _| {
                let next = (s.now / tick + 1) * tick;
                tick_to_ns(s, tick, next);
            },
            message: &|rnd| ("nice", rnd(41) as i64 - 20),
        },
    );
}

fn fire(s: &mut Sim, at: Ns) {
    s.run_until(at);
    let sched = s.drv.disp.default_sched();
    s.drv.disp.fire_event(s.now, sched, TICK_TOKEN);
    s.settle();
}

#[test]
fn a_late_tick_still_decays_and_a_task_dispatched_at_a_tick_is_not_charged() {
    // A machine that delivers scheduler events only at its own ticks may deliver this
    // policy's tick late. Ticks at 10..=990 ms (99), then one late at 1015 ms: its index
    // (101) has crossed 100, so the second's decay happens: A 100 → 80.
    let (mut s, p) = setup(1, v7_10ms());
    let a = s.add(&[], None, true);
    let b = s.add(&[("wait_pri", 28)], None, false);
    tick_to(&mut s, 990);
    assert_eq!(info(&p, a).ticks, 99);
    fire(&mut s, ms(1015));
    assert_eq!(ticks_pri(&p, a), (80, 55));
    assert_eq!(p.lock().unwrap().decays(), 1);
    // B wakes at 1030 ms and preempts A; the tick delivered at that same instant does not
    // charge B (it has not run) and leaves it in kernel mode; the next one does both.
    s.run_until(ms(1030));
    s.wake(b);
    fire(&mut s, ms(1030));
    assert_eq!((info(&p, b).ticks, info(&p, b).pri, info(&p, b).kernel), (0, 28, true));
    fire(&mut s, ms(1040));
    assert_eq!((info(&p, b).ticks, info(&p, b).pri, info(&p, b).kernel), (1, 50, false));
    assert_eq!(s.running_task(0), Some(b));
}

#[test]
fn a_reschedule_in_kernel_mode_keeps_the_kernel_priority() {
    // B (TTIPRI 28) wakes and preempts A. The mechanism reschedules B's CPU at once (as
    // the dispatcher may): B, in kernel mode, keeps 28 and runs on.
    let (mut s, p) = setup(1, v7_10ms());
    let a = s.add(&[], None, true);
    let b = s.add(&[("wait_pri", 28)], None, false);
    tick_to(&mut s, 50);
    s.wake(b);
    s.schedule(CpuId(0), Preempt::Resched);
    assert_eq!(s.running_task(0), Some(b));
    assert_eq!((info(&p, b).pri, info(&p, b).kernel), (28, true));
    // A yield is a return to user mode: B (0 ticks: pri 50) goes behind A (50).
    s.yield_cpu(CpuId(0));
    assert_eq!((info(&p, b).pri, info(&p, b).kernel), (50, false));
    assert_eq!(s.running_task(0), Some(a));
}
