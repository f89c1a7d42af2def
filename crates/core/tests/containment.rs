//! Containment of distrusted schedulers in the dispatcher (issue 8): `contain`,
//! `eject_failed` (invalid decisions, the watchdog), `eject` and `unregister_to_below`,
//! with the scriptable test policy — the mechanism does not depend on WebAssembly.

mod common;

use common::*;
use vassal_core::*;

const C0: CpuId = CpuId(0);

fn names(d: &Dispatcher) -> Vec<String> {
    d.schedulers().into_iter().map(|s| s.name).collect()
}

#[test]
fn unregister_to_below_hands_tasks_to_the_next_scheduler_down() {
    let (mut d, _defp, log) = dispatcher(1);
    let (lo, _lop) = add_sched(&mut d, &log, "lo", 20, Position::Top);
    let (hi, _hip) = add_sched(&mut d, &log, "hi", 20, Position::Top);
    let a = task(&mut d);
    let b = blocked_task(&mut d);
    assert_eq!(join(&mut d, hi, a), Reply::Ok);
    assert_eq!(join(&mut d, hi, b), Reply::Ok);
    assert_eq!(d.schedule(0, C0, Preempt::Resched).unwrap().task, a);
    let moved = d.unregister_to_below(5, hi).unwrap();
    assert_eq!(moved, vec![(a, lo), (b, lo)]);
    assert_eq!(names(&d), ["lo", "def"]);
    assert_eq!((d.owner(a), d.owner(b)), (Some(lo), Some(lo)));
    // The running task's CPU is asked for a new decision; lo now runs it.
    let fx = effects(&mut d);
    assert!(fx.contains(&Effect::Resched(C0)), "{fx:?}");
    assert_eq!(d.schedule(5, C0, Preempt::Resched).map(|x| (x.task, x.by)), Some((a, lo)));
    d.check_invariants().unwrap();
}

#[test]
fn a_refusing_scheduler_below_is_skipped_and_the_default_takes_the_rest() {
    let (mut d, _defp, log) = dispatcher(1);
    let (lo, lop) = add_sched(&mut d, &log, "lo", 20, Position::Top);
    let (hi, _hip) = add_sched(&mut d, &log, "hi", 20, Position::Top);
    let a = task(&mut d);
    assert_eq!(join(&mut d, hi, a), Reply::Ok);
    lop.knobs().refuse_attach = Some("full".into());
    let moved = d.unregister_to_below(0, hi).unwrap();
    assert_eq!(moved, vec![(a, d.default_sched())]);
    assert_ne!(d.owner(a), Some(lo));
    d.check_invariants().unwrap();
}

#[test]
fn the_default_scheduler_cannot_be_contained_or_unregistered_to_below() {
    let (mut d, _defp, _log) = dispatcher(1);
    let def = d.default_sched();
    assert_eq!(d.contain(def, Containment { watchdog: None }), Err(RegisterError::DefaultScheduler));
    assert_eq!(d.unregister_to_below(0, def), Err(RegisterError::DefaultScheduler));
    assert_eq!(d.contain(SchedId(99), Containment { watchdog: None }), Err(RegisterError::NoSuchScheduler(SchedId(99))));
}

#[test]
fn an_invalid_decision_ejects_a_contained_scheduler_only() {
    let (mut d, _defp, log) = dispatcher(1);
    let (free, freep) = add_sched(&mut d, &log, "free", 20, Position::Top);
    let (jail, jailp) = add_sched(&mut d, &log, "jail", 20, Position::Top);
    assert!(!d.containing());
    d.contain(jail, Containment { watchdog: None }).unwrap();
    assert!(d.containing());
    let a = task(&mut d);
    let other = task(&mut d);
    assert_eq!(join(&mut d, jail, a), Reply::Ok);
    assert_eq!(join(&mut d, free, other), Reply::Ok);
    // An uncontained scheduler's bad decision is only refused (the old behaviour).
    freep.knobs().script.push_back(Some(Decision::run_until_block(a)));
    jailp.knobs().silent = true;
    d.schedule(0, C0, Preempt::Resched);
    assert_eq!(d.stats().refused, 1);
    assert!(d.eject_failed(0).is_empty());
    assert_eq!(names(&d), ["jail", "free", "def"]);
    // The contained one picks a task that is not its own: refused, and ejected.
    jailp.knobs().silent = false;
    jailp.script(Some(Decision::run_until_block(other)));
    let got = d.schedule(1, C0, Preempt::Resched).unwrap();
    assert_ne!(got.by, jail, "a scheduler further down decided");
    let ej = d.eject_failed(1);
    assert_eq!(ej.len(), 1);
    assert_eq!(ej[0].name, "jail");
    assert_eq!(ej[0].reason, "invalid decision (task1 on cpu0): task belongs to another scheduler");
    assert_eq!(ej[0].moved, vec![(a, free)]);
    assert_eq!(names(&d), ["free", "def"]);
    // Nothing is contained any more: the mechanism may skip containment after each event.
    assert!(!d.containing());
    let logs = d.drain_logs();
    assert!(logs.iter().any(|(n, l)| n == "jail" && l.text.starts_with("ejected: invalid decision")), "{logs:?}");
    d.check_invariants().unwrap();
}

#[test]
fn the_watchdog_ejects_a_scheduler_that_leaves_a_runnable_task_waiting() {
    let (mut d, _defp, log) = dispatcher(1);
    let (jail, jailp) = add_sched(&mut d, &log, "jail", 20, Position::Top);
    d.contain(jail, Containment { watchdog: Some(100) }).unwrap();
    jailp.knobs().exclusive_on_attach = true; // the default may not run it as a guest
    jailp.knobs().silent = true;
    let a = task(&mut d);
    assert_eq!(join(&mut d, jail, a), Reply::Ok);
    assert_eq!(d.schedule(0, C0, Preempt::Resched), None, "nobody runs it");
    // It became runnable at 0 (joining resets the wait): due one ns past the limit.
    assert_eq!(d.next_watchdog(), Some(101));
    assert!(d.eject_failed(100).is_empty(), "not yet: exactly at the limit");
    let ej = d.eject_failed(101);
    assert_eq!(ej.len(), 1, "ejected one ns past the limit");
    assert!(ej[0].reason.starts_with("watchdog: task0 runnable but not run for 101ns"), "{}", ej[0].reason);
    assert_eq!(d.owner(a), Some(d.default_sched()));
    assert_eq!(d.next_watchdog(), None);
    assert_eq!(d.schedule(101, C0, Preempt::Resched).map(|x| x.task), Some(a), "served by the default now");
}

#[test]
fn a_served_task_does_not_trip_the_watchdog() {
    let (mut d, _defp, log) = dispatcher(1);
    let (jail, _jailp) = add_sched(&mut d, &log, "jail", 20, Position::Top);
    d.contain(jail, Containment { watchdog: Some(100) }).unwrap();
    let a = task(&mut d);
    let b = task(&mut d);
    join(&mut d, jail, a);
    join(&mut d, jail, b);
    // A FIFO that switches every 50 ns keeps both tasks' waits under 100 ns.
    let mut now = 0;
    while now < 1000 {
        d.schedule(now, C0, Preempt::SliceExpired);
        assert!(d.eject_failed(now).is_empty(), "at {now}");
        now += 50;
    }
}
