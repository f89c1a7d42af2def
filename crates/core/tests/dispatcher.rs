//! Scenario tests of the Vassal dispatcher (crates/core/src/hierarchy.rs), each with exact
//! expected outcomes: which scheduler decides, which callbacks each policy receives and
//! in which order, which effects come out.

mod common;

use common::*;
use vassal_core::*;

const C0: CpuId = CpuId(0);
const C1: CpuId = CpuId(1);

fn names(d: &Dispatcher) -> Vec<String> {
    d.schedulers().into_iter().map(|s| s.name).collect()
}

fn info(d: &Dispatcher, id: SchedId) -> SchedInfo {
    d.schedulers().into_iter().find(|s| s.id == id).expect("registered")
}

// ----------------------------------------------------------------------------------
// top-down querying
// ----------------------------------------------------------------------------------

#[test]
fn higher_scheduler_decision_wins_and_none_falls_through() {
    let (mut d, defp, log) = dispatcher(1);
    let (lo, lop) = add_sched(&mut d, &log, "lo", 20, Position::Top);
    let (hi, hip) = add_sched(&mut d, &log, "hi", 20, Position::Top);
    assert_eq!(names(&d), ["hi", "lo", "def"]);
    let a = task(&mut d);
    let b = task(&mut d);
    assert_eq!(join(&mut d, hi, a), Reply::Ok);
    assert_eq!(join(&mut d, lo, b), Reply::Ok);
    take(&log);

    // hi has a task: its decision wins, nobody below is asked.
    let got = d.schedule(0, C0, Preempt::Resched).unwrap();
    assert_eq!(got, Dispatched { task: a, slice: None, by: hi, prev: None, migrated: false });
    assert_eq!(take(&log), s(&["hi: pick cpu0", "hi: dispatch task0 cpu0", "def: dispatch task0 cpu0"]));
    assert_eq!(d.running(C0), Some(a));
    assert_eq!(d.state(a), TaskState::Running(C0));

    // hi has no opinion: lo decides.
    hip.knobs().silent = true;
    let got = d.schedule(10, C0, Preempt::SliceExpired).unwrap();
    assert_eq!(got, Dispatched { task: b, slice: None, by: lo, prev: Some(a), migrated: false });
    assert_eq!(
        take(&log),
        s(&[
            "hi: preempt task0 cpu0 SliceExpired",
            "def: preempt task0 cpu0 SliceExpired",
            "hi: pick cpu0",
            "lo: pick cpu0",
            "lo: dispatch task1 cpu0",
            "def: dispatch task1 cpu0",
        ])
    );
    assert_eq!(d.state(a), TaskState::Runnable);

    // everybody has no opinion: idle.
    lop.knobs().silent = true;
    defp.knobs().silent = true;
    let before = d.stats();
    assert_eq!(d.schedule(20, C0, Preempt::Resched), None);
    assert_eq!(
        take(&log),
        s(&["lo: preempt task1 cpu0 Resched", "def: preempt task1 cpu0 Resched", "hi: pick cpu0", "lo: pick cpu0", "def: pick cpu0",])
    );
    assert_eq!(d.running(C0), None);
    assert_eq!(d.state(b), TaskState::Runnable);
    let after = d.stats();
    assert_eq!(after.decisions, before.decisions + 1);
    assert_eq!(after.picks, before.picks + 3);
    assert_eq!(after.idle, before.idle + 1);
    assert_eq!(after.refused, before.refused);

    assert_eq!(info(&d, hi).decided, 1);
    assert_eq!(info(&d, lo).decided, 1);
    assert_eq!(info(&d, d.default_sched()).decided, 0);
    d.check_invariants().unwrap();
}

#[test]
fn default_decides_when_nobody_above_has_an_opinion() {
    let (mut d, defp, log) = dispatcher(1);
    let (_hi, _hip) = add_sched(&mut d, &log, "hi", 20, Position::Top);
    defp.knobs().slice = Some(3 * MS);
    let t = task(&mut d);
    take(&log);
    let got = d.schedule(0, C0, Preempt::Resched).unwrap();
    assert_eq!(got, Dispatched { task: t, slice: Some(3 * MS), by: d.default_sched(), prev: None, migrated: false });
    assert_eq!(take(&log), s(&["hi: pick cpu0", "def: pick cpu0", "def: dispatch task0 cpu0"]));
}

#[test]
fn empty_hierarchy_with_no_tasks_is_idle() {
    let (mut d, _defp, log) = dispatcher(2);
    assert_eq!(d.schedule(0, C1, Preempt::Resched), None);
    assert_eq!(take(&log), s(&["def: pick cpu1"]));
    assert_eq!(d.stats(), DispatchStats { decisions: 1, picks: 1, idle: 1, refused: 0, hand_offs: 0 });
}

#[test]
fn repicking_the_preempted_task_and_migration_flag() {
    let (mut d, defp, log) = dispatcher(2);
    let t = task(&mut d);
    let got = d.schedule(0, C0, Preempt::Resched).unwrap();
    assert_eq!(got, Dispatched { task: t, slice: None, by: SchedId(0), prev: None, migrated: false });
    // The preempted task is requeued before pick, so the FIFO may pick it again.
    take(&log);
    let got = d.schedule(5, C0, Preempt::SliceExpired).unwrap();
    assert_eq!(got, Dispatched { task: t, slice: None, by: SchedId(0), prev: Some(t), migrated: false });
    assert_eq!(take(&log), s(&["def: preempt task0 cpu0 SliceExpired", "def: pick cpu0", "def: dispatch task0 cpu0"]));
    // Idle cpu0, then run it on cpu1: migrated.
    defp.script(None);
    assert_eq!(d.schedule(6, C0, Preempt::Yield), None);
    let got = d.schedule(7, C1, Preempt::Resched).unwrap();
    assert_eq!(got, Dispatched { task: t, slice: None, by: SchedId(0), prev: None, migrated: true });
    d.check_invariants().unwrap();
}

// ----------------------------------------------------------------------------------
// ownership: new tasks, Join, Leave
// ----------------------------------------------------------------------------------

#[test]
fn new_tasks_are_owned_by_the_default() {
    let (mut d, defp, log) = dispatcher(2);
    assert_eq!(d.default_sched(), SchedId(0));
    let t = task(&mut d);
    assert_eq!(d.owner(t), Some(d.default_sched()));
    assert!(!d.is_guest(t));
    assert_eq!(d.state(t), TaskState::Runnable);
    assert_eq!(take(&log), s(&["def: attach task0 guest=false state=Runnable"]));
    assert_eq!(effects(&mut d), [Effect::Resched(C0)]);

    let b = blocked_task(&mut d);
    assert_eq!(d.state(b), TaskState::Blocked);
    assert_eq!(take(&log), s(&["def: attach task1 guest=false state=Blocked"]));
    assert_eq!(effects(&mut d), []);

    // A runnable task pinned to cpu1 kicks cpu1.
    let p = pinned(&mut d, &[1]);
    assert_eq!(effects(&mut d), [Effect::Resched(C1)]);

    // Parameters and parent are kept.
    let mut params = TaskParams::new();
    params.insert("weight".into(), 3);
    let c = d.add_task(0, params.clone(), CpuSet::NONE, Some(t), true);
    assert_eq!(d.params(c), Some(&params));
    assert_eq!(d.owner(c), Some(SchedId(0)));
    assert_eq!(defp.members().len(), 4);
    assert!(defp.members().values().all(|&g| !g));
    assert_eq!(d.owner(p), Some(SchedId(0)));
    assert_eq!(d.task_count(), 4);
    d.check_invariants().unwrap();
}

#[test]
fn join_moves_the_task_and_leave_returns_it() {
    let (mut d, defp, log) = dispatcher(1);
    let (hi, hip) = add_sched(&mut d, &log, "hi", 20, Position::Top);
    let t = task(&mut d);
    take(&log);

    assert_eq!(join(&mut d, hi, t), Reply::Ok);
    assert_eq!(d.owner(t), Some(hi));
    assert!(d.is_guest(t));
    assert_eq!(
        take(&log),
        s(&["hi: attach task0 guest=false state=Runnable", "def: detach task0 Moved", "def: attach task0 guest=true state=Runnable",])
    );
    assert_eq!(hip.members().into_iter().collect::<Vec<_>>(), [(t, false)]);
    assert_eq!(defp.members().into_iter().collect::<Vec<_>>(), [(t, true)]);

    // Joining the scheduler it is in: Ok, nothing happens.
    assert_eq!(join(&mut d, hi, t), Reply::Ok);
    assert_eq!(take(&log), Vec::<String>::new());

    // Leave: back to the default, which stops hosting it as a guest and owns it.
    assert_eq!(d.message(0, hi, me(t), t, &Request::Leave), Reply::Ok);
    assert_eq!(d.owner(t), Some(SchedId(0)));
    assert!(!d.is_guest(t));
    assert_eq!(take(&log), s(&["def: detach task0 Released", "def: attach task0 guest=false state=Runnable", "hi: detach task0 Moved",]));
    assert!(hip.members().is_empty());
    assert_eq!(defp.members().into_iter().collect::<Vec<_>>(), [(t, false)]);

    // Leave when already in the default: Ok, nothing happens.
    assert_eq!(d.message(0, SchedId(0), me(t), t, &Request::Leave), Reply::Ok);
    assert_eq!(take(&log), Vec::<String>::new());
    d.check_invariants().unwrap();
}

#[test]
fn join_between_two_loaded_schedulers_keeps_the_guest() {
    let (mut d, defp, log) = dispatcher(1);
    let (lo, lop) = add_sched(&mut d, &log, "lo", 20, Position::Top);
    let (hi, hip) = add_sched(&mut d, &log, "hi", 20, Position::Top);
    let t = task(&mut d);
    assert_eq!(join(&mut d, hi, t), Reply::Ok);
    take(&log);
    assert_eq!(join(&mut d, lo, t), Reply::Ok);
    assert_eq!(take(&log), s(&["lo: attach task0 guest=false state=Runnable", "hi: detach task0 Moved"]));
    assert_eq!(d.owner(t), Some(lo));
    assert!(d.is_guest(t));
    assert!(hip.members().is_empty());
    assert_eq!(lop.members().get(&t), Some(&false));
    assert_eq!(defp.members().get(&t), Some(&true));

    // Exclusive in lo, then moved to hi: it starts non-exclusive there, a guest again.
    assert_eq!(d.message(0, lo, me(t), t, &param("exclusive", 1)), Reply::Ok);
    assert!(!d.is_guest(t));
    take(&log);
    assert_eq!(join(&mut d, hi, t), Reply::Ok);
    assert_eq!(
        take(&log),
        s(&["hi: attach task0 guest=false state=Runnable", "lo: detach task0 Moved", "def: attach task0 guest=true state=Runnable",])
    );
    assert!(d.is_guest(t));
    d.check_invariants().unwrap();
}

#[test]
fn a_refusing_on_attach_leaves_the_task_where_it_was() {
    let (mut d, defp, log) = dispatcher(1);
    let (lo, lop) = add_sched(&mut d, &log, "lo", 20, Position::Top);
    let (hi, _hip) = add_sched(&mut d, &log, "hi", 20, Position::Top);
    let t = task(&mut d);
    lop.knobs().refuse_attach = Some("lo is full".into());

    // From the default.
    take(&log);
    assert_eq!(join(&mut d, lo, t), Reply::Refused("lo is full".into()));
    assert_eq!(take(&log), s(&["lo: attach task0 guest=false state=Runnable"]));
    assert_eq!(d.owner(t), Some(SchedId(0)));
    assert!(!d.is_guest(t));
    assert_eq!(defp.members().get(&t), Some(&false));

    // From a loaded scheduler, as a guest of the default.
    assert_eq!(join(&mut d, hi, t), Reply::Ok);
    take(&log);
    assert_eq!(join(&mut d, lo, t), Reply::Refused("lo is full".into()));
    assert_eq!(take(&log), s(&["lo: attach task0 guest=false state=Runnable"]));
    assert_eq!(d.owner(t), Some(hi));
    assert!(d.is_guest(t));
    assert!(lop.members().is_empty());
    d.check_invariants().unwrap();
}

#[test]
fn a_default_that_refuses_guests_makes_the_task_exclusive() {
    let (mut d, defp, log) = dispatcher(1);
    let (hi, _hip) = add_sched(&mut d, &log, "hi", 20, Position::Top);
    defp.knobs().refuse_guest = true;
    let t = task(&mut d);
    take(&log);
    assert_eq!(join(&mut d, hi, t), Reply::Ok);
    assert_eq!(
        take(&log),
        s(&["hi: attach task0 guest=false state=Runnable", "def: detach task0 Moved", "def: attach task0 guest=true state=Runnable",])
    );
    assert_eq!(d.owner(t), Some(hi));
    assert!(!d.is_guest(t));
    assert!(defp.members().is_empty());
    d.check_invariants().unwrap();
}

#[test]
fn only_the_task_itself_or_root_may_move_it() {
    let (mut d, _defp, log) = dispatcher(1);
    let (hi, _hip) = add_sched(&mut d, &log, "hi", 20, Position::Top);
    let t = task(&mut d);
    let other = task(&mut d);
    take(&log);

    let stranger = Sender { task: Some(other), uid: USER };
    let nobody = Sender { task: None, uid: USER };
    for from in [stranger, nobody] {
        for req in [Request::Join, Request::Leave] {
            let r = d.message(0, hi, from, t, &req);
            assert!(matches!(&r, Reply::Refused(why) if why.contains("task0")), "{r:?}");
        }
    }
    assert_eq!(take(&log), Vec::<String>::new());
    assert_eq!(d.owner(t), Some(SchedId(0)));

    // Root may, whatever task it sends from.
    assert_eq!(d.message(0, hi, Sender::ROOT, t, &Request::Join), Reply::Ok);
    assert_eq!(d.owner(t), Some(hi));
    let root_task = Sender { task: Some(other), uid: 0 };
    assert_eq!(d.message(0, hi, root_task, t, &Request::Leave), Reply::Ok);
    assert_eq!(d.owner(t), Some(SchedId(0)));
    // The task itself may.
    assert_eq!(d.message(0, hi, me(t), t, &Request::Join), Reply::Ok);
    assert_eq!(d.owner(t), Some(hi));
    assert_eq!(d.owner(other), Some(SchedId(0)));
    d.check_invariants().unwrap();
}

#[test]
fn joining_a_running_task_reschedules_its_cpu() {
    let (mut d, _defp, log) = dispatcher(1);
    let (hi, _hip) = add_sched(&mut d, &log, "hi", 20, Position::Top);
    let t = task(&mut d);
    d.schedule(0, C0, Preempt::Resched).unwrap();
    effects(&mut d);
    take(&log);
    assert_eq!(join(&mut d, hi, t), Reply::Ok);
    assert_eq!(
        take(&log),
        s(&[
            "hi: attach task0 guest=false state=Running(CpuId(0))",
            "def: detach task0 Moved",
            "def: attach task0 guest=true state=Running(CpuId(0))",
        ])
    );
    assert_eq!(effects(&mut d), [Effect::Resched(C0)]);
    // The new owner and its guest host are told of the preemption; the new owner decides.
    let got = d.schedule(1, C0, Preempt::Resched).unwrap();
    assert_eq!(got, Dispatched { task: t, slice: None, by: hi, prev: Some(t), migrated: false });
    assert_eq!(
        take(&log),
        s(&[
            "hi: preempt task0 cpu0 Resched",
            "def: preempt task0 cpu0 Resched",
            "hi: pick cpu0",
            "hi: dispatch task0 cpu0",
            "def: dispatch task0 cpu0",
        ])
    );
}

#[test]
fn moving_a_dead_task_or_to_an_unknown_scheduler_is_refused() {
    let (mut d, _defp, log) = dispatcher(1);
    let (hi, _hip) = add_sched(&mut d, &log, "hi", 20, Position::Top);
    let t = task(&mut d);
    let r = d.message(0, SchedId(77), me(t), t, &Request::Join);
    assert_eq!(r, Reply::Refused("no scheduler sched77".into()));
    d.remove_task(0, t);
    take(&log);
    let r = d.message(0, hi, Sender::ROOT, t, &Request::Join);
    assert_eq!(r, Reply::Refused("no live task task0".into()));
    let r = d.message(0, hi, Sender::ROOT, TaskId(9), &Request::Join);
    assert_eq!(r, Reply::Refused("no live task task9".into()));
    assert_eq!(take(&log), Vec::<String>::new());
}

// ----------------------------------------------------------------------------------
// unregister
// ----------------------------------------------------------------------------------

#[test]
fn unregister_returns_every_task_to_the_default() {
    let (mut d, defp, log) = dispatcher(2);
    let (hi, hip) = add_sched(&mut d, &log, "hi", 20, Position::Top);
    let t0 = task(&mut d);
    let t1 = task(&mut d);
    let t2 = task(&mut d);
    let t3 = task(&mut d);
    for t in [t0, t1, t2] {
        assert_eq!(join(&mut d, hi, t), Reply::Ok);
    }
    // t0 runs on cpu0 (picked by hi), t1 is exclusive to hi, t2 is blocked, t3 stays in def.
    assert_eq!(d.schedule(0, C0, Preempt::Resched).unwrap().by, hi);
    assert_eq!(d.running(C0), Some(t0));
    assert_eq!(d.message(0, hi, me(t1), t1, &param("exclusive", 1)), Reply::Ok);
    assert_eq!(d.block(0, t2, Block::default()), None);
    assert!(d.fire_event(0, hi, 1));
    effects(&mut d);
    take(&log);

    assert_eq!(d.unregister(5, hi), Ok(vec![t0, t1, t2]));
    assert_eq!(
        take(&log),
        s(&[
            "hi: detach task0 Released",
            "hi: detach task1 Released",
            "hi: detach task2 Released",
            "def: detach task0 Released",
            "def: attach task0 guest=false state=Running(CpuId(0))",
            "def: attach task1 guest=false state=Runnable",
            "def: detach task2 Released",
            "def: attach task2 guest=false state=Blocked",
        ])
    );
    // The running task's CPU and the idle one are asked for a new decision.
    assert_eq!(effects(&mut d), [Effect::Resched(C0), Effect::Resched(C1)]);
    for t in [t0, t1, t2, t3] {
        assert_eq!(d.owner(t), Some(SchedId(0)), "{t}");
        assert!(!d.is_guest(t));
    }
    assert_eq!(d.state(t0), TaskState::Running(C0));
    assert_eq!(d.state(t2), TaskState::Blocked);
    assert!(hip.members().is_empty());
    assert_eq!(defp.members().into_iter().collect::<Vec<_>>(), [(t0, false), (t1, false), (t2, false), (t3, false)]);
    assert_eq!(names(&d), ["def"]);
    assert_eq!(d.lookup("hi"), None);
    assert_eq!(d.sched_name(hi), None);
    d.check_invariants().unwrap();

    // Events of the departed scheduler are dropped; messages to it refused.
    assert!(!d.fire_event(6, hi, 1));
    assert!(matches!(d.message(6, hi, me(t0), t0, &param("echo", 1)), Reply::Refused(_)));
    assert_eq!(d.unregister(6, hi), Err(RegisterError::NoSuchScheduler(hi)));
    assert_eq!(take(&log), Vec::<String>::new());

    // The running task is now preempted on behalf of its new owner only.
    let got = d.schedule(7, C0, Preempt::Resched).unwrap();
    assert_eq!(got.by, SchedId(0));
    assert_eq!(got.prev, Some(t0));
    assert_eq!(got.task, t3); // first in def's FIFO
    assert_eq!(take(&log), s(&["def: preempt task0 cpu0 Resched", "def: pick cpu0", "def: dispatch task3 cpu0"]));
}

#[test]
fn unregister_in_the_middle_keeps_the_rest_in_order() {
    let (mut d, _defp, log) = dispatcher(2);
    let (c, _) = add_sched(&mut d, &log, "c", 10, Position::Top);
    let (b, bp) = add_sched(&mut d, &log, "b", 10, Position::Top);
    let (a, _) = add_sched(&mut d, &log, "a", 10, Position::Top);
    assert_eq!(names(&d), ["a", "b", "c", "def"]);
    let t = task(&mut d);
    assert_eq!(join(&mut d, b, t), Reply::Ok);
    assert_eq!(d.unregister(0, b), Ok(vec![t]));
    assert_eq!(names(&d), ["a", "c", "def"]);
    assert_eq!(d.owner(t), Some(SchedId(0)));
    assert!(bp.members().is_empty());
    // ids are never reused
    let (b2, _) = add_sched(&mut d, &log, "b", 10, Position::Below(a));
    assert_ne!(b2, b);
    assert!(b2.0 > c.0 && b2.0 > a.0);
    assert_eq!(names(&d), ["a", "b", "c", "def"]);
    assert!(!d.fire_event(0, b, 0));
    assert!(d.fire_event(0, b2, 0));
}

#[test]
fn the_default_scheduler_cannot_be_unregistered() {
    let (mut d, _defp, log) = dispatcher(1);
    let t = task(&mut d);
    take(&log);
    assert_eq!(d.unregister(0, SchedId(0)), Err(RegisterError::DefaultScheduler));
    assert_eq!(d.unregister(0, SchedId(5)), Err(RegisterError::NoSuchScheduler(SchedId(5))));
    assert_eq!(d.owner(t), Some(SchedId(0)));
    assert_eq!(take(&log), Vec::<String>::new());
}

#[test]
fn events_of_an_unregistered_scheduler_are_dropped() {
    let (mut d, _defp, log) = dispatcher(1);
    let (hi, _hip) = add_sched(&mut d, &log, "hi", 20, Position::Top);
    take(&log);
    assert!(d.fire_event(0, hi, 42));
    assert_eq!(take(&log), s(&["hi: event 42"]));
    d.unregister(0, hi).unwrap();
    assert!(!d.fire_event(1, hi, 42));
    assert!(!d.fire_event(1, SchedId(99), 42));
    assert_eq!(take(&log), Vec::<String>::new());
}

// ----------------------------------------------------------------------------------
// registration (Vassal §8 conflicts, order, names, positions)
// ----------------------------------------------------------------------------------

fn try_reg(d: &mut Dispatcher, log: &Log, name: &str, usage: Usage, pos: Position) -> Result<SchedId, RegisterError> {
    let (p, _) = TestPolicy::boxed(name, log);
    d.register(name, p, usage, pos)
}

fn conflict(r: Result<SchedId, RegisterError>, name: &str, needle: &str) {
    match r {
        Err(RegisterError::Conflict { name: n, reason }) => {
            assert_eq!(n, name);
            assert!(reason.contains(needle), "reason {reason:?} lacks {needle:?}");
        }
        other => panic!("expected a conflict mentioning {needle:?}, got {other:?}"),
    }
}

#[test]
fn two_hard_time_schedulers_on_one_cpu_conflict() {
    let (mut d, _, log) = dispatcher(2);
    let rt1 = try_reg(&mut d, &log, "rt1", hard(&[0], 30), Position::Top).unwrap();
    conflict(try_reg(&mut d, &log, "rt2", hard(&[0, 1], 10), Position::Top), "rt2", "'rt1'");
    conflict(try_reg(&mut d, &log, "rt2", hard(&[0], 10), Position::Below(rt1)), "rt2", "'rt1'");
    assert_eq!(names(&d), ["rt1", "def"]);
    // On the other CPU: fine.
    try_reg(&mut d, &log, "rt2", hard(&[1], 10), Position::Top).unwrap();
    assert_eq!(names(&d), ["rt2", "rt1", "def"]);
    // After rt1 leaves, cpu0 is free for hard time again.
    d.unregister(0, rt1).unwrap();
    try_reg(&mut d, &log, "rt3", hard(&[0], 50), Position::Top).unwrap();
}

#[test]
fn demands_over_the_cpus_are_refused() {
    let (mut d, _, log) = dispatcher(2);
    try_reg(&mut d, &log, "a", reserved(150), Position::Top).unwrap();
    conflict(try_reg(&mut d, &log, "b", reserved(60), Position::Top), "b", "exceed the 2 CPU");
    // hard time counts as util x CPUs
    conflict(try_reg(&mut d, &log, "rt", hard(&[0, 1], 30), Position::Top), "rt", "exceed");
    assert_eq!(names(&d), ["a", "def"]);
}

#[test]
fn best_effort_must_keep_its_minimum() {
    // 2 CPUs: the default minimum is 5% of the machine = 10% of one CPU.
    let (mut d, _, log) = dispatcher(2);
    try_reg(&mut d, &log, "a", reserved(190), Position::Top).unwrap();
    let (mut d, _, log) = dispatcher(2);
    conflict(try_reg(&mut d, &log, "a", reserved(195), Position::Top), "a", "best-effort");
    let (mut d, _, log) = dispatcher(2);
    try_reg(&mut d, &log, "a", reserved(100), Position::Top).unwrap();
    conflict(try_reg(&mut d, &log, "b", reserved(91), Position::Top), "b", "under the guaranteed minimum");
    try_reg(&mut d, &log, "b", reserved(90), Position::Top).unwrap();

    // A configured minimum.
    let log = new_log();
    let (p, _) = TestPolicy::boxed("def", &log);
    let cfg = HierarchyConfig { min_best_effort_ppm: Some(500_000) };
    let mut d = Dispatcher::new(1, "def", p, cfg);
    conflict(try_reg(&mut d, &log, "a", reserved(51), Position::Top), "a", "best-effort");
    try_reg(&mut d, &log, "a", reserved(50), Position::Top).unwrap();
}

#[test]
fn a_best_effort_loaded_scheduler_sits_below_the_reserved_ones() {
    // Issue 17: a loaded scheduler may declare best effort (no guarantee); it must sit
    // below every scheduler with one.
    let (mut d, _, log) = dispatcher(4);
    try_reg(&mut d, &log, "res", reserved(50), Position::Top).unwrap();
    conflict(try_reg(&mut d, &log, "be", Usage::BestEffort, Position::Top), "be", "'res'");
    try_reg(&mut d, &log, "be", Usage::BestEffort, Position::Above(SchedId(0))).unwrap();
    assert_eq!(names(&d), ["res", "be", "def"]);
    assert_eq!(d.schedulers()[2].usage, Usage::BestEffort);
    assert_eq!(d.schedulers()[2].kind, "test-fifo");
}

#[test]
fn malformed_usages_are_refused() {
    let (mut d, _, log) = dispatcher(2);
    conflict(try_reg(&mut d, &log, "x", hard(&[2], 10), Position::Top), "x", "subset");
    conflict(try_reg(&mut d, &log, "x", hard(&[], 10), Position::Top), "x", "subset");
    conflict(try_reg(&mut d, &log, "x", hard(&[0], 0), Position::Top), "x", "utilisation");
    conflict(
        try_reg(&mut d, &log, "x", Usage::HardTime { cpus: CpuSet::only(C0), util_ppm: CPU_PPM + 1 }, Position::Top),
        "x",
        "utilisation",
    );
    conflict(try_reg(&mut d, &log, "x", reserved(0), Position::Top), "x", "zero");
    assert_eq!(names(&d), ["def"]);
}

#[test]
fn huge_reservations_do_not_overflow_the_demand_sum() {
    // Regression: the demand sum overflowed (a panic in debug builds; in release builds it
    // wrapped around to a tiny demand and the reservation was accepted).
    let (mut d, _, log) = dispatcher(2);
    try_reg(&mut d, &log, "a", reserved(10), Position::Top).unwrap();
    conflict(try_reg(&mut d, &log, "b", Usage::Reserved { cpu_ppm: u64::MAX }, Position::Top), "b", "exceed");
    conflict(try_reg(&mut d, &log, "b", Usage::Reserved { cpu_ppm: u64::MAX - 50_000 }, Position::Top), "b", "exceed");
    assert_eq!(names(&d), ["a", "def"]);
    let cfg = HierarchyConfig::default();
    assert!(check_conflict(&[("a", reserved(10))], Usage::Reserved { cpu_ppm: u64::MAX }, 0, 2, &cfg).is_err());
    assert!(
        check_conflict(&[("a", reserved(10)), ("b", reserved(10))], Usage::Reserved { cpu_ppm: u64::MAX - 100_000 }, 0, 2, &cfg).is_err()
    );
}

#[test]
fn order_hard_time_above_reserved() {
    let (mut d, _, log) = dispatcher(2);
    let share = try_reg(&mut d, &log, "share", reserved(20), Position::Top).unwrap();
    conflict(try_reg(&mut d, &log, "rt", hard(&[0], 20), Position::Below(share)), "rt", "'share'");
    conflict(try_reg(&mut d, &log, "rt", hard(&[0], 20), Position::Above(SchedId(0))), "rt", "place it higher");
    let rt = try_reg(&mut d, &log, "rt", hard(&[0], 20), Position::Above(share)).unwrap();
    assert_eq!(names(&d), ["rt", "share", "def"]);
    // A reserved scheduler above a hard-time one: refused.
    conflict(try_reg(&mut d, &log, "r2", reserved(10), Position::Top), "r2", "place it lower");
    conflict(try_reg(&mut d, &log, "r2", reserved(10), Position::Above(rt)), "r2", "'rt'");
    // Between them, or below share: fine.
    let r2 = try_reg(&mut d, &log, "r2", reserved(10), Position::Below(rt)).unwrap();
    let r3 = try_reg(&mut d, &log, "r3", reserved(10), Position::Above(SchedId(0))).unwrap();
    assert_eq!(names(&d), ["rt", "r2", "share", "r3", "def"]);
    // Another hard time on cpu1: only at the top of the hard-time band.
    conflict(try_reg(&mut d, &log, "rt2", hard(&[1], 10), Position::Below(r2)), "rt2", "place it higher");
    let rt2 = try_reg(&mut d, &log, "rt2", hard(&[1], 10), Position::Below(rt)).unwrap();
    assert_eq!(names(&d), ["rt", "rt2", "r2", "share", "r3", "def"]);
    let ids: Vec<SchedId> = d.schedulers().iter().map(|s| s.id).collect();
    assert_eq!(ids, [rt, rt2, r2, share, r3, SchedId(0)]);
}

#[test]
fn duplicate_names_are_refused() {
    let (mut d, _, log) = dispatcher(2);
    try_reg(&mut d, &log, "a", reserved(10), Position::Top).unwrap();
    assert_eq!(try_reg(&mut d, &log, "a", reserved(10), Position::Top), Err(RegisterError::DuplicateName("a".into())));
    assert_eq!(try_reg(&mut d, &log, "def", reserved(10), Position::Top), Err(RegisterError::DuplicateName("def".into())));
    assert_eq!(names(&d), ["a", "def"]);
}

#[test]
fn positions_place_the_scheduler_where_asked() {
    let (mut d, _, log) = dispatcher(2);
    let a = try_reg(&mut d, &log, "a", reserved(10), Position::Top).unwrap();
    assert_eq!(names(&d), ["a", "def"]);
    let b = try_reg(&mut d, &log, "b", reserved(10), Position::Top).unwrap();
    assert_eq!(names(&d), ["b", "a", "def"]);
    try_reg(&mut d, &log, "c", reserved(10), Position::Above(a)).unwrap();
    assert_eq!(names(&d), ["b", "c", "a", "def"]);
    try_reg(&mut d, &log, "e", reserved(10), Position::Below(b)).unwrap();
    assert_eq!(names(&d), ["b", "e", "c", "a", "def"]);
    try_reg(&mut d, &log, "f", reserved(10), Position::Below(a)).unwrap();
    assert_eq!(names(&d), ["b", "e", "c", "a", "f", "def"]);
    try_reg(&mut d, &log, "g", reserved(10), Position::Above(SchedId(0))).unwrap();
    assert_eq!(names(&d), ["b", "e", "c", "a", "f", "g", "def"]);
    try_reg(&mut d, &log, "h", reserved(10), Position::Above(b)).unwrap();
    assert_eq!(names(&d), ["h", "b", "e", "c", "a", "f", "g", "def"]);

    assert_eq!(try_reg(&mut d, &log, "x", reserved(10), Position::Below(SchedId(0))), Err(RegisterError::DefaultScheduler));
    assert_eq!(try_reg(&mut d, &log, "x", reserved(10), Position::Above(SchedId(99))), Err(RegisterError::NoSuchScheduler(SchedId(99))));
    assert_eq!(try_reg(&mut d, &log, "x", reserved(10), Position::Below(SchedId(99))), Err(RegisterError::NoSuchScheduler(SchedId(99))));
    assert_eq!(d.schedulers().last().unwrap().id, d.default_sched());
    assert_eq!(d.lookup("e"), Some(SchedId(4)));
    assert_eq!(d.sched_name(SchedId(4)), Some("e"));
}

// ----------------------------------------------------------------------------------
// validation of decisions
// ----------------------------------------------------------------------------------

/// A 2-CPU dispatcher with "hi" above the default; `u` (task0) is a runnable task of the
/// default, which will be picked when hi's decision is refused.
fn validation_setup() -> (Dispatcher, SchedId, Probe, Probe, Log, TaskId) {
    let (mut d, defp, log) = dispatcher(2);
    let (hi, hip) = add_sched(&mut d, &log, "hi", 20, Position::Top);
    let u = task(&mut d);
    (d, hi, hip, defp, log, u)
}

/// Scripts hi to decide `bad` on `cpu`, schedules, and checks that it was refused for
/// `why`, hi was told, and the default then ran u.
#[allow(clippy::too_many_arguments)]
fn expect_refused(d: &mut Dispatcher, hi: SchedId, hip: &Probe, log: &Log, u: TaskId, cpu: CpuId, bad: Decision, why: Refusal) {
    take(log);
    hip.script(Some(bad));
    let refused_before = d.stats().refused;
    let hi_refused = info(d, hi).refused;
    let got = d.schedule(0, cpu, Preempt::Resched).unwrap();
    assert_eq!(got.task, u);
    assert_eq!(got.by, SchedId(0));
    let l = take(log);
    assert_eq!(
        l[..4],
        s(&[
            &format!("hi: pick {cpu}"),
            &format!("hi: refused {cpu} {} {why:?}", bad.task),
            &format!("def: pick {cpu}"),
            &format!("def: dispatch {u} {cpu}"),
        ])[..],
        "{l:?}"
    );
    assert_eq!(d.stats().refused, refused_before + 1);
    assert_eq!(info(d, hi).refused, hi_refused + 1);
    d.check_invariants().unwrap();
}

#[test]
fn refuses_a_blocked_task() {
    let (mut d, hi, hip, _defp, log, u) = validation_setup();
    let t = blocked_task(&mut d);
    assert_eq!(join(&mut d, hi, t), Reply::Ok);
    expect_refused(&mut d, hi, &hip, &log, u, C0, Decision::run(t, MS), Refusal::NotRunnable);
    assert_eq!(d.state(t), TaskState::Blocked);
}

#[test]
fn refuses_a_task_running_on_another_cpu() {
    let (mut d, hi, hip, _defp, log, u) = validation_setup();
    let t = task(&mut d);
    assert_eq!(join(&mut d, hi, t), Reply::Ok);
    assert_eq!(d.schedule(0, C1, Preempt::Resched).unwrap().task, t);
    expect_refused(&mut d, hi, &hip, &log, u, C0, Decision::run(t, MS), Refusal::RunningElsewhere(C1));
    assert_eq!(d.state(t), TaskState::Running(C1));
    assert_eq!(d.running(C1), Some(t));
}

#[test]
fn refuses_a_task_not_allowed_on_the_cpu() {
    let (mut d, hi, hip, _defp, log, u) = validation_setup();
    let t = pinned(&mut d, &[1]);
    assert_eq!(join(&mut d, hi, t), Reply::Ok);
    expect_refused(&mut d, hi, &hip, &log, u, C0, Decision::run_until_block(t), Refusal::NotAllowed);
    assert_eq!(d.state(t), TaskState::Runnable);
}

#[test]
fn refuses_a_task_of_another_scheduler() {
    let (mut d, hi, hip, _defp, log, u) = validation_setup();
    let (lo, _lop) = add_sched(&mut d, &log, "lo", 20, Position::Below(hi));
    let t = task(&mut d);
    assert_eq!(join(&mut d, lo, t), Reply::Ok);
    take(&log);
    hip.script(Some(Decision::run(t, MS)));
    let got = d.schedule(0, C0, Preempt::Resched).unwrap();
    assert_eq!((got.task, got.by), (t, lo));
    assert_eq!(
        take(&log),
        s(&["hi: pick cpu0", "hi: refused cpu0 task1 NotYours", "lo: pick cpu0", "lo: dispatch task1 cpu0", "def: dispatch task1 cpu0"])
    );
    // A task owned by the default (a guest nowhere) is not hi's either.
    hip.script(Some(Decision::run(u, MS)));
    let got = d.schedule(0, C1, Preempt::Resched).unwrap();
    assert_eq!((got.task, got.by), (u, SchedId(0)));
    assert_eq!(
        take(&log),
        s(&["hi: pick cpu1", "hi: refused cpu1 task0 NotYours", "lo: pick cpu1", "def: pick cpu1", "def: dispatch task0 cpu1"])
    );
    assert_eq!(info(&d, hi).refused, 2);
    assert_eq!(d.stats().refused, 2);
}

#[test]
fn refuses_a_dead_task() {
    let (mut d, hi, hip, _defp, log, u) = validation_setup();
    let t = task(&mut d);
    assert_eq!(join(&mut d, hi, t), Reply::Ok);
    assert_eq!(d.remove_task(0, t), None);
    expect_refused(&mut d, hi, &hip, &log, u, C0, Decision::run(t, MS), Refusal::NoSuchTask);
}

#[test]
fn refuses_an_unknown_task() {
    let (mut d, hi, hip, _defp, log, u) = validation_setup();
    expect_refused(&mut d, hi, &hip, &log, u, C1, Decision::run(TaskId(1000), MS), Refusal::NoSuchTask);
}

#[test]
fn refuses_a_zero_slice() {
    let (mut d, hi, hip, _defp, log, u) = validation_setup();
    let t = task(&mut d);
    assert_eq!(join(&mut d, hi, t), Reply::Ok);
    // t is also a guest of def, behind u in def's FIFO.
    expect_refused(&mut d, hi, &hip, &log, u, C0, Decision::run(t, 0), Refusal::ZeroSlice);
    assert_eq!(d.state(t), TaskState::Runnable);
    // A slice of None is not zero: accepted.
    hip.script(Some(Decision::run_until_block(t)));
    let got = d.schedule(0, C1, Preempt::Resched).unwrap();
    assert_eq!((got.task, got.by, got.slice), (t, hi, None));
}

#[test]
fn every_refusal_is_told_and_the_next_scheduler_asked() {
    // Several schedulers refused in one decision.
    let (mut d, defp, log) = dispatcher(1);
    let (lo, lop) = add_sched(&mut d, &log, "lo", 20, Position::Top);
    let (hi, hip) = add_sched(&mut d, &log, "hi", 20, Position::Top);
    let t = task(&mut d);
    assert_eq!(join(&mut d, lo, t), Reply::Ok);
    hip.script(Some(Decision::run(t, 5)));
    lop.script(Some(Decision::run(t, 0)));
    defp.script(Some(Decision::run(TaskId(3), 5)));
    take(&log);
    assert_eq!(d.schedule(0, C0, Preempt::Resched), None);
    assert_eq!(
        take(&log),
        s(&[
            "hi: pick cpu0",
            "hi: refused cpu0 task0 NotYours",
            "lo: pick cpu0",
            "lo: refused cpu0 task0 ZeroSlice",
            "def: pick cpu0",
            "def: refused cpu0 task3 NoSuchTask",
        ])
    );
    let st = d.stats();
    assert_eq!((st.refused, st.idle), (3, 1));
    assert_eq!((info(&d, hi).refused, info(&d, lo).refused, info(&d, SchedId(0)).refused), (1, 1, 1));
}

// ----------------------------------------------------------------------------------
// guests and exclusivity
// ----------------------------------------------------------------------------------

#[test]
fn the_default_may_run_a_guest_until_the_owner_makes_it_exclusive() {
    let (mut d, defp, log) = dispatcher(1);
    let (hi, hip) = add_sched(&mut d, &log, "hi", 20, Position::Top);
    let t = task(&mut d);
    assert_eq!(join(&mut d, hi, t), Reply::Ok);
    assert!(d.is_guest(t));
    assert_eq!(defp.queue(), [t]);

    // The owner has no opinion: the default runs its guest.
    hip.knobs().silent = true;
    take(&log);
    let got = d.schedule(0, C0, Preempt::Resched).unwrap();
    assert_eq!(got, Dispatched { task: t, slice: None, by: SchedId(0), prev: None, migrated: false });
    assert_eq!(take(&log), s(&["hi: pick cpu0", "def: pick cpu0", "hi: dispatch task0 cpu0", "def: dispatch task0 cpu0"]));
    assert_eq!(d.block(1, t, Block { voluntary: true }), Some(C0));
    assert_eq!(take(&log), s(&["hi: block task0", "def: block task0"]));
    assert!(d.wake(2, t, Wake::default()));
    assert_eq!(take(&log), s(&["hi: wake task0", "def: wake task0"]));
    effects(&mut d);

    // The owner marks it exclusive: the default is told it lost the guest.
    assert_eq!(d.message(3, hi, me(t), t, &param("exclusive", 1)), Reply::Ok);
    assert_eq!(
        take(&log),
        s(&["hi: message task0 Param { name: \"exclusive\", value: 1 } from Some(TaskId(0))", "def: detach task0 Released"])
    );
    assert!(!d.is_guest(t));
    assert_eq!(d.owner(t), Some(hi));
    assert!(defp.members().is_empty());
    // Marking it again changes nothing.
    assert_eq!(d.message(3, hi, me(t), t, &param("exclusive", 1)), Reply::Ok);
    assert_eq!(take(&log).len(), 1);

    // The default may no longer run it.
    defp.script(Some(Decision::run(t, MS)));
    assert_eq!(d.schedule(4, C0, Preempt::Resched), None);
    assert_eq!(take(&log), s(&["hi: pick cpu0", "def: pick cpu0", "def: refused cpu0 task0 NotYours"]));
    // State notifications no longer reach the default.
    d.account(5, t, C0, 7);
    assert_eq!(take(&log), s(&["hi: run task0 cpu0 7"]));

    // Released again: the default hosts it again.
    assert_eq!(d.message(6, hi, me(t), t, &param("exclusive", 0)), Reply::Ok);
    assert_eq!(take(&log)[1..], s(&["def: attach task0 guest=true state=Runnable"])[..]);
    assert!(d.is_guest(t));
    let got = d.schedule(7, C0, Preempt::Resched).unwrap();
    assert_eq!(got.by, SchedId(0));
    d.check_invariants().unwrap();
}

#[test]
fn only_the_owner_may_mark_a_task_exclusive() {
    let (mut d, _defp, log) = dispatcher(1);
    let (lo, _lop) = add_sched(&mut d, &log, "lo", 20, Position::Top);
    let (hi, _hip) = add_sched(&mut d, &log, "hi", 20, Position::Top);
    let t = task(&mut d);
    assert_eq!(join(&mut d, lo, t), Reply::Ok);
    let r = d.message(0, hi, me(t), t, &param("exclusive", 1));
    assert_eq!(r, Reply::Refused(CtxError::NotYours(t).to_string()));
    assert!(d.is_guest(t));
    // The default's own tasks are never guests; marking them exclusive is a no-op.
    let u = task(&mut d);
    assert_eq!(d.message(0, SchedId(0), me(u), u, &param("exclusive", 1)), Reply::Ok);
    assert_eq!(d.message(0, SchedId(0), me(u), u, &param("exclusive", 0)), Reply::Ok);
    assert!(!d.is_guest(u));
    d.check_invariants().unwrap();
}

#[test]
fn making_a_guest_exclusive_while_the_default_runs_it_reschedules() {
    let (mut d, defp, log) = dispatcher(2);
    let (hi, hip) = add_sched(&mut d, &log, "hi", 20, Position::Top);
    let t = task(&mut d);
    assert_eq!(join(&mut d, hi, t), Reply::Ok);
    hip.knobs().silent = true;
    assert_eq!(d.schedule(0, C1, Preempt::Resched).unwrap().by, SchedId(0));
    // Keep cpu0 busy so no idle-CPU effects muddle the check.
    let u = task(&mut d);
    assert_eq!(d.schedule(0, C0, Preempt::Resched).unwrap().task, u);
    effects(&mut d);
    take(&log);
    assert_eq!(d.message(1, hi, me(t), t, &param("exclusive", 1)), Reply::Ok);
    assert_eq!(effects(&mut d), [Effect::Resched(C1)]);
    // The mechanism obeys: the default is not told of the preemption (no longer its guest).
    hip.knobs().silent = false;
    take(&log);
    let got = d.schedule(2, C1, Preempt::Resched).unwrap();
    assert_eq!(got, Dispatched { task: t, slice: None, by: hi, prev: Some(t), migrated: false });
    assert_eq!(take(&log), s(&["hi: preempt task0 cpu1 Resched", "hi: pick cpu1", "hi: dispatch task0 cpu1"]));
    let _ = defp;
}

#[test]
fn making_its_own_running_task_exclusive_does_not_preempt_it() {
    // Regression: marking exclusive a task the owner itself is running pushed a spurious
    // Resched for its CPU (only a task the default runs as a guest must stop).
    let (mut d, _defp, log) = dispatcher(1);
    let (hi, hip) = add_sched(&mut d, &log, "hi", 20, Position::Top);
    let t = task(&mut d);
    assert_eq!(join(&mut d, hi, t), Reply::Ok);
    hip.knobs().exclusive_on_dispatch = true;
    effects(&mut d);
    take(&log);
    let got = d.schedule(0, C0, Preempt::Resched).unwrap();
    assert_eq!(got.by, hi);
    assert_eq!(hip.knobs().ctx_results, s(&["set_exclusive(task0) on dispatch: Ok(())"]));
    assert_eq!(take(&log), s(&["hi: pick cpu0", "hi: dispatch task0 cpu0", "def: dispatch task0 cpu0", "def: detach task0 Released"]));
    assert!(!d.is_guest(t));
    assert_eq!(effects(&mut d), []);
    // A hand-off on behalf of the owner is not the default running it either.
    assert_eq!(d.block(1, t, Block::default()), Some(C0));
    assert!(d.wake(2, t, Wake::default()));
    assert_eq!(d.message(3, hi, me(t), t, &param("exclusive", 0)), Reply::Ok);
    assert!(d.is_guest(t));
    hip.knobs().exclusive_on_dispatch = false;
    assert_eq!(d.hand_off(4, C0, t).unwrap().by, hi);
    effects(&mut d);
    assert_eq!(d.message(5, hi, me(t), t, &param("exclusive", 1)), Reply::Ok);
    assert_eq!(effects(&mut d), []);
}

#[test]
fn exclusive_on_attach_takes_effect() {
    // Regression: on_attach could not mark the task exclusive (the dispatcher made the
    // new owner the owner only after on_attach returned, so set_exclusive said NotYours).
    let (mut d, defp, log) = dispatcher(1);
    let (hi, hip) = add_sched(&mut d, &log, "hi", 20, Position::Top);
    hip.knobs().exclusive_on_attach = true;
    let t = task(&mut d);
    take(&log);
    assert_eq!(join(&mut d, hi, t), Reply::Ok);
    assert_eq!(hip.knobs().ctx_results, s(&["set_exclusive(task0) on attach: Ok(())"]));
    assert!(!d.is_guest(t));
    assert_eq!(d.owner(t), Some(hi));
    // The default just loses its task; it is never offered as a guest.
    assert_eq!(take(&log), s(&["hi: attach task0 guest=false state=Runnable", "def: detach task0 Moved"]));
    assert!(defp.members().is_empty());
    d.check_invariants().unwrap();

    // From one loaded scheduler to another that wants it exclusive: the guest is released.
    let (lo, lop) = add_sched(&mut d, &log, "lo", 10, Position::Below(hi));
    let u = task(&mut d);
    assert_eq!(join(&mut d, hi, u), Reply::Ok);
    assert!(!d.is_guest(u));
    assert_eq!(d.message(0, hi, me(u), u, &param("exclusive", 0)), Reply::Ok);
    assert!(d.is_guest(u));
    lop.knobs().exclusive_on_attach = true;
    take(&log);
    assert_eq!(join(&mut d, lo, u), Reply::Ok);
    assert_eq!(take(&log), s(&["lo: attach task1 guest=false state=Runnable", "hi: detach task1 Moved", "def: detach task1 Released"]));
    assert!(!d.is_guest(u));
    d.check_invariants().unwrap();
}

#[test]
fn an_old_owners_request_does_not_apply_to_the_new_owner() {
    // Regression: set_exclusive requests were not tied to the scheduler that made them, so
    // a request the old owner made while the task was being moved was applied after the
    // move, on behalf of the new owner.
    let (mut d, defp, log) = dispatcher(1);
    let (lo, _lop) = add_sched(&mut d, &log, "lo", 10, Position::Top);
    let (hi, hip) = add_sched(&mut d, &log, "hi", 10, Position::Top);
    let t = task(&mut d);
    assert_eq!(join(&mut d, hi, t), Reply::Ok);
    hip.knobs().exclusive_on_detach = true;
    take(&log);
    assert_eq!(join(&mut d, lo, t), Reply::Ok);
    assert_eq!(d.owner(t), Some(lo));
    assert!(d.is_guest(t), "lo never asked for exclusivity");
    assert_eq!(defp.members().get(&t), Some(&true));
    assert_eq!(take(&log), s(&["lo: attach task0 guest=false state=Runnable", "hi: detach task0 Moved"]));
    assert_eq!(hip.knobs().ctx_results, s(&[&format!("set_exclusive(task0) on detach: {:?}", Err::<(), _>(CtxError::NotYours(t)))]));
}

#[test]
fn exclusivity_takes_effect_within_the_same_decision() {
    // Regression: a set_exclusive made during the owner's pick was applied only after
    // the whole decision, so the default could run the task in the same decision.
    let (mut d, defp, log) = dispatcher(1);
    let (hi, hip) = add_sched(&mut d, &log, "hi", 20, Position::Top);
    let t = task(&mut d);
    assert_eq!(join(&mut d, hi, t), Reply::Ok);
    {
        let mut k = hip.knobs();
        k.silent = true;
        k.exclusive_on_pick = Some((t, true));
    }
    take(&log);
    assert_eq!(d.schedule(0, C0, Preempt::Resched), None);
    assert_eq!(take(&log), s(&["hi: pick cpu0", "def: detach task0 Released", "def: pick cpu0"]));
    assert!(!d.is_guest(t));
    assert_eq!(d.running(C0), None);
    let _ = defp;
}

#[test]
fn a_guest_that_joins_the_default_is_owned_by_it() {
    let (mut d, defp, log) = dispatcher(1);
    let (hi, _hip) = add_sched(&mut d, &log, "hi", 20, Position::Top);
    let t = task(&mut d);
    assert_eq!(join(&mut d, hi, t), Reply::Ok);
    take(&log);
    assert_eq!(join(&mut d, SchedId(0), t), Reply::Ok);
    assert_eq!(take(&log), s(&["def: detach task0 Released", "def: attach task0 guest=false state=Runnable", "hi: detach task0 Moved"]));
    assert!(!d.is_guest(t));
    assert_eq!(defp.members().get(&t), Some(&false));

    // The default refuses to take it back as owner: it stays where it was (a guest).
    assert_eq!(join(&mut d, hi, t), Reply::Ok);
    defp.knobs().refuse_attach = Some("no".into());
    assert_eq!(join(&mut d, SchedId(0), t), Reply::Refused("no".into()));
    assert_eq!(d.owner(t), Some(hi));
    assert!(d.is_guest(t));
    assert_eq!(defp.members().get(&t), Some(&true));
    d.check_invariants().unwrap();
}

#[test]
fn a_refused_join_to_the_default_reflects_whether_it_took_the_guest_back() {
    // Regression: when the default refused to own a guest (Join/Leave) and then also
    // refused to take it back as a guest, the task was still marked its guest.
    let (mut d, defp, log) = dispatcher(1);
    let (hi, _hip) = add_sched(&mut d, &log, "hi", 20, Position::Top);
    let t = task(&mut d);
    assert_eq!(join(&mut d, hi, t), Reply::Ok);
    {
        let mut k = defp.knobs();
        k.refuse_attach = Some("no".into());
        k.refuse_guest = true;
    }
    take(&log);
    assert_eq!(d.message(0, hi, me(t), t, &Request::Leave), Reply::Refused("no".into()));
    assert_eq!(
        take(&log),
        s(&["def: detach task0 Released", "def: attach task0 guest=false state=Runnable", "def: attach task0 guest=true state=Runnable",])
    );
    assert_eq!(d.owner(t), Some(hi));
    assert!(!d.is_guest(t));
    assert!(defp.members().is_empty());
    d.check_invariants().unwrap();
}

// ----------------------------------------------------------------------------------
// messages
// ----------------------------------------------------------------------------------

#[test]
fn messages_reach_the_named_scheduler_and_the_reply_comes_back() {
    let (mut d, _defp, log) = dispatcher(1);
    let (lo, _lop) = add_sched(&mut d, &log, "lo", 20, Position::Top);
    let (hi, _hip) = add_sched(&mut d, &log, "hi", 20, Position::Top);
    let t = task(&mut d);
    let other = task(&mut d);
    take(&log);
    assert_eq!(d.message(0, lo, me(t), t, &param("echo", 42)), Reply::Value(42));
    assert_eq!(take(&log), s(&["lo: message task0 Param { name: \"echo\", value: 42 } from Some(TaskId(0))"]));
    // Any sender may send a non-moving request; the policy decides.
    let from = Sender { task: Some(other), uid: USER };
    assert_eq!(d.message(0, hi, from, t, &param("echo", -1)), Reply::Value(-1));
    assert_eq!(take(&log), s(&["hi: message task0 Param { name: \"echo\", value: -1 } from Some(TaskId(1))"]));
    assert_eq!(
        d.message(0, hi, me(t), t, &Request::Warp { on: true }),
        Reply::Refused("test-fifo does not understand Warp { on: true }".into())
    );
    assert_eq!(d.message(0, SchedId(0), me(t), t, &param("nope", 0)), Reply::Refused("unknown parameter nope".into()));
    take(&log);
    assert_eq!(d.message(0, SchedId(42), me(t), t, &param("echo", 1)), Reply::Refused("no scheduler sched42".into()));
    assert_eq!(take(&log), Vec::<String>::new());
    // Ownership is not changed by messages.
    assert_eq!(d.owner(t), Some(SchedId(0)));
}

// ----------------------------------------------------------------------------------
// hand-off
// ----------------------------------------------------------------------------------

#[test]
fn hand_off_runs_the_target_without_asking_anyone() {
    let (mut d, _defp, log) = dispatcher(2);
    let (hi, _hip) = add_sched(&mut d, &log, "hi", 20, Position::Top);
    let a = task(&mut d);
    let b = task(&mut d);
    assert_eq!(join(&mut d, hi, b), Reply::Ok);
    let got = d.schedule(0, C0, Preempt::Resched).unwrap();
    assert_eq!((got.task, got.by), (b, hi));
    // Make a run on cpu0 (hand b off is not possible: it runs); move b off first.
    assert_eq!(d.block(1, b, Block::default()), Some(C0));
    let got = d.schedule(1, C0, Preempt::Resched).unwrap();
    assert_eq!(got.task, a);
    assert!(d.wake(2, b, Wake::default()));
    // a blocks and hands cpu0 to b.
    assert_eq!(d.block(3, a, Block { voluntary: true }), Some(C0));
    take(&log);
    let picks = d.stats().picks;
    let got = d.hand_off(3, C0, b).unwrap();
    assert_eq!(got, Dispatched { task: b, slice: None, by: hi, prev: None, migrated: false });
    assert_eq!(take(&log), s(&["hi: dispatch task1 cpu0", "def: dispatch task1 cpu0"]));
    assert_eq!(d.stats().picks, picks);
    assert_eq!(d.stats().hand_offs, 1);
    assert_eq!(d.running(C0), Some(b));
    assert_eq!(d.state(b), TaskState::Running(C0));
    // Hand-off to a task that last ran elsewhere is a migration.
    assert_eq!(d.block(4, b, Block::default()), Some(C0));
    assert!(d.wake(5, b, Wake::default()));
    assert!(d.wake(5, a, Wake::default()));
    assert!(d.hand_off(6, C1, b).unwrap().migrated);
    d.check_invariants().unwrap();
}

#[test]
fn hand_off_refusals() {
    let (mut d, _defp, log) = dispatcher(2);
    let blocked = blocked_task(&mut d);
    let runs = task(&mut d);
    let only1 = pinned(&mut d, &[1]);
    let gone = task(&mut d);
    d.remove_task(0, gone);
    assert_eq!(d.schedule(0, C1, Preempt::Resched).unwrap().task, runs);
    take(&log);
    assert_eq!(d.hand_off(0, C0, blocked), Err(Refusal::NotRunnable));
    assert_eq!(d.hand_off(0, C0, runs), Err(Refusal::RunningElsewhere(C1)));
    assert_eq!(d.hand_off(0, C0, only1), Err(Refusal::NotAllowed));
    assert_eq!(d.hand_off(0, C0, gone), Err(Refusal::NoSuchTask));
    assert_eq!(d.hand_off(0, C0, TaskId(77)), Err(Refusal::NoSuchTask));
    // A busy CPU is refused.
    let free = task(&mut d);
    assert_eq!(d.hand_off(0, C1, free), Err(Refusal::RunningElsewhere(C1)));
    // A CPU that does not exist.
    assert_eq!(d.hand_off(0, CpuId(5), free), Err(Refusal::NotAllowed));
    take(&log);
    assert_eq!(d.stats().hand_offs, 0);
    assert_eq!(d.running(C0), None);
    assert_eq!(d.state(free), TaskState::Runnable);
    d.check_invariants().unwrap();
}

// ----------------------------------------------------------------------------------
// callback order
// ----------------------------------------------------------------------------------

#[test]
fn preempt_precedes_pick_and_accounting_reaches_owner_and_host() {
    let (mut d, _defp, log) = dispatcher(1);
    let (hi, _hip) = add_sched(&mut d, &log, "hi", 20, Position::Top);
    let t = task(&mut d);
    let u = task(&mut d);
    assert_eq!(join(&mut d, hi, t), Reply::Ok);
    d.schedule(0, C0, Preempt::Resched).unwrap();
    take(&log);
    d.account(100, t, C0, 100);
    assert_eq!(take(&log), s(&["hi: run task0 cpu0 100", "def: run task0 cpu0 100"]));
    let got = d.schedule(100, C0, Preempt::Yield).unwrap();
    assert_eq!((got.task, got.prev), (t, Some(t)));
    assert_eq!(
        take(&log),
        s(&[
            "hi: preempt task0 cpu0 Yield",
            "def: preempt task0 cpu0 Yield",
            "hi: pick cpu0",
            "hi: dispatch task0 cpu0",
            "def: dispatch task0 cpu0",
        ])
    );
    // A task of the default only: only the default hears about it.
    d.account(150, u, C0, 1);
    assert_eq!(take(&log), s(&["def: run task1 cpu0 1"]));
    // Dead tasks are not accounted.
    d.remove_task(160, u);
    take(&log);
    d.account(170, u, C0, 1);
    assert_eq!(take(&log), Vec::<String>::new());
}

/// `on_run` goes out only while some registered policy uses it (`Policy::accounts_runs`),
/// and then to the task's owner and host as before; the answer follows registrations.
#[test]
fn accounting_is_sent_only_while_a_policy_uses_it() {
    let log = new_log();
    let (p, defp) = TestPolicy::boxed("def", &log);
    defp.knobs().ignores_runs = true;
    let mut d = Dispatcher::new(1, "def", p, HierarchyConfig::default());
    assert!(!d.accounts_runs());
    let t = task(&mut d);
    d.schedule(0, C0, Preempt::Resched).unwrap();
    take(&log);
    d.account(100, t, C0, 100);
    assert_eq!(take(&log), Vec::<String>::new());

    // A policy that uses it joins the hierarchy: every policy hears of runs again.
    let (hi, _hip) = add_sched(&mut d, &log, "hi", 20, Position::Top);
    assert!(d.accounts_runs());
    assert_eq!(join(&mut d, hi, t), Reply::Ok);
    take(&log);
    d.account(200, t, C0, 50);
    assert_eq!(take(&log), s(&["hi: run task0 cpu0 50", "def: run task0 cpu0 50"]));

    // It leaves: silence again.
    d.unregister(300, hi).unwrap();
    assert!(!d.accounts_runs());
    take(&log);
    d.account(400, t, C0, 100);
    assert_eq!(take(&log), Vec::<String>::new());
}

/// A policy whose picks stand for its dispatch (`Policy::dispatches_in_pick`) hears no
/// `on_dispatch` for a decision of its own pick — the owner of a guest it picked still
/// does — but does for a hand-off, and still hears of a refused pick.
#[test]
fn a_pick_stands_for_the_dispatch_when_the_policy_says_so() {
    let log = new_log();
    let (p, defp) = TestPolicy::boxed("def", &log);
    defp.knobs().dispatches_in_pick = true;
    let mut d = Dispatcher::new(1, "def", p, HierarchyConfig::default());
    let (hi, hip) = add_sched(&mut d, &log, "hi", 20, Position::Top);
    hip.knobs().silent = true;
    let a = task(&mut d);
    take(&log);
    assert_eq!(d.schedule(0, C0, Preempt::Resched).unwrap().task, a);
    assert_eq!(take(&log), s(&["hi: pick cpu0", "def: pick cpu0"]));

    // A guest of the default, owned by "hi": its owner hears of the dispatch.
    let b = task(&mut d);
    assert_eq!(join(&mut d, hi, b), Reply::Ok);
    assert_eq!(d.block(1, a, Block::default()), Some(C0));
    take(&log);
    assert_eq!(d.schedule(1, C0, Preempt::Resched).unwrap().task, b);
    assert_eq!(take(&log), s(&["hi: pick cpu0", "def: pick cpu0", "hi: dispatch task1 cpu0"]));

    // A hand-off is no pick: both hear of it.
    assert_eq!(d.block(2, b, Block::default()), Some(C0));
    assert!(d.wake(3, a, Wake::default()));
    take(&log);
    d.hand_off(3, C0, a).unwrap();
    assert_eq!(take(&log), s(&["def: dispatch task0 cpu0"]));

    // A refused pick is still told.
    assert_eq!(d.block(4, a, Block::default()), Some(C0));
    assert!(d.wake(5, a, Wake::default()));
    defp.knobs().script.push_back(Some(Decision::run(b, 1_000)));
    take(&log);
    assert_eq!(d.schedule(5, C0, Preempt::Resched), None);
    assert_eq!(take(&log), s(&["hi: pick cpu0", "def: pick cpu0", "def: refused cpu0 task1 NotRunnable"]));
    d.check_invariants().unwrap();
}

/// A job's start may come with its wake (`wake_job`): the owner hears the job and then
/// the wake, as from `job` then `wake`, and nothing for a task that is not blocked.
#[test]
fn a_job_comes_with_its_wake_as_if_announced_just_before() {
    let job = Job { release: 10, deadline: 30 };
    let (mut d, _defp, log) = dispatcher(1);
    let t = blocked_task(&mut d);
    take(&log);
    assert!(d.wake_job(10, t, Wake::default(), Some(job)));
    let fused = (take(&log), effects(&mut d), d.state(t));
    assert_eq!(fused.0, s(&["def: job task0 10-30", "def: wake task0"]));

    let (mut d, _defp, log) = dispatcher(1);
    let t = blocked_task(&mut d);
    take(&log);
    d.job(10, t, job);
    assert!(d.wake(10, t, Wake::default()));
    assert_eq!((take(&log), effects(&mut d), d.state(t)), fused);

    // Runnable already: refused, and the job is not announced.
    let (mut d, _defp, log) = dispatcher(1);
    let t = task(&mut d);
    take(&log);
    assert!(!d.wake_job(10, t, Wake::default(), Some(job)));
    assert_eq!(take(&log), Vec::<String>::new());
}

#[test]
fn ticks_go_to_every_scheduler_top_down() {
    let (mut d, _defp, log) = dispatcher(2);
    let (_lo, _) = add_sched(&mut d, &log, "lo", 20, Position::Top);
    let (_hi, _) = add_sched(&mut d, &log, "hi", 20, Position::Top);
    take(&log);
    d.tick(0, C1);
    assert_eq!(take(&log), s(&["hi: tick cpu1", "lo: tick cpu1", "def: tick cpu1"]));
}

#[test]
fn wake_block_and_remove() {
    let (mut d, _defp, log) = dispatcher(2);
    let (hi, _hip) = add_sched(&mut d, &log, "hi", 20, Position::Top);
    let t = blocked_task(&mut d);
    assert_eq!(join(&mut d, hi, t), Reply::Ok);
    // The CPUs are idle: waking kicks the first one it may use.
    effects(&mut d);
    take(&log);
    assert!(d.wake(1, t, Wake { voluntary: true, interrupt: None, warp: false, cpu: None }));
    assert_eq!(take(&log), s(&["hi: wake task0", "def: wake task0"]));
    assert_eq!(effects(&mut d), [Effect::Resched(C0)]);
    assert!(!d.wake(1, t, Wake::default()), "already runnable");
    assert_eq!(take(&log), Vec::<String>::new());
    // Run it on cpu1, then wake after blocking: its last CPU is kicked first.
    let got = d.schedule(2, C1, Preempt::Resched).unwrap();
    assert_eq!(got.task, t);
    assert_eq!(d.block(3, t, Block::default()), Some(C1));
    assert_eq!(d.state(t), TaskState::Blocked);
    assert_eq!(d.running(C1), None);
    assert_eq!(d.block(3, t, Block::default()), None, "already blocked");
    effects(&mut d);
    assert!(d.wake(4, t, Wake::default()));
    assert_eq!(effects(&mut d), [Effect::Resched(C1)]);
    // Exit while running: owner and host are told, the CPU is returned.
    d.schedule(5, C1, Preempt::Resched).unwrap();
    take(&log);
    assert_eq!(d.remove_task(6, t), Some(C1));
    assert_eq!(take(&log), s(&["hi: detach task0 Exit", "def: detach task0 Exit"]));
    assert_eq!(d.state(t), TaskState::Dead);
    assert_eq!(d.owner(t), None);
    assert!(!d.is_guest(t));
    assert_eq!(d.running(C1), None);
    assert_eq!(d.remove_task(6, t), None);
    assert!(!d.wake(7, t, Wake::default()));
    assert_eq!(d.block(7, t, Block::default()), None);
    assert_eq!(take(&log), Vec::<String>::new());
    assert_eq!(d.state(TaskId(55)), TaskState::Dead);
    assert_eq!(d.owner(TaskId(55)), None);
    d.check_invariants().unwrap();
}

// ----------------------------------------------------------------------------------
// Ctx and effects
// ----------------------------------------------------------------------------------

struct NoTasks;
impl TaskView for NoTasks {
    fn state(&self, _: TaskId) -> TaskState {
        TaskState::Dead
    }
    fn affinity(&self, _: TaskId) -> CpuSet {
        CpuSet::NONE
    }
    fn owner(&self, _: TaskId) -> Option<SchedId> {
        None
    }
    fn last_cpu(&self, _: TaskId) -> Option<CpuId> {
        None
    }
    fn running_on(&self, _: CpuId) -> Option<TaskId> {
        None
    }
}

#[test]
fn ctx_refuses_events_in_the_past_and_records_effects() {
    let mut effects = Vec::new();
    let mut excl = Vec::new();
    let view = NoTasks;
    let mut ctx = Ctx::new(1_000, 2, SchedId(3), &mut effects, &mut excl, &view);
    assert_eq!(ctx.set_event(999, 1), Err(CtxError::EventInPast { at: 999, now: 1_000 }));
    assert_eq!(ctx.set_event(1_000, 2), Ok(()));
    ctx.cancel_event(2);
    assert_eq!(ctx.resched(C1), Ok(()));
    assert_eq!(ctx.resched(CpuId(2)), Err(CtxError::NoSuchCpu(CpuId(2))));
    assert_eq!(ctx.set_exclusive(TaskId(0), true), Err(CtxError::NotYours(TaskId(0))));
    assert_eq!(ctx.cpus().collect::<Vec<_>>(), [C0, C1]);
    assert_eq!((ctx.now(), ctx.ncpus(), ctx.sched()), (1_000, 2, SchedId(3)));
    assert_eq!(
        effects,
        [
            Effect::SetEvent { sched: SchedId(3), token: 2, at: 1_000 },
            Effect::CancelEvent { sched: SchedId(3), token: 2 },
            Effect::Resched(C1),
        ]
    );
    assert!(excl.is_empty());
}

#[test]
fn effects_come_out_of_drain_effects() {
    let (mut d, _defp, log) = dispatcher(1);
    let (hi, hip) = add_sched(&mut d, &log, "hi", 20, Position::Top);
    let t = task(&mut d);
    // Keep the only CPU busy so the dispatcher adds no idle-CPU reschedules.
    d.schedule(0, C0, Preempt::Resched).unwrap();
    effects(&mut d);

    let r = d.message(100, hi, me(t), t, &param("event_at", 50));
    assert_eq!(r, Reply::Refused("event time 50 ns is in the past (now 100 ns)".into()));
    assert_eq!(effects(&mut d), []);

    assert_eq!(d.message(100, hi, me(t), t, &Request::Set { delay: 25 }), Reply::Value(125));
    assert_eq!(d.message(100, hi, me(t), t, &param("event_at", 100)), Reply::Ok);
    assert_eq!(d.message(100, hi, me(t), t, &param("cancel", 0)), Reply::Ok);
    assert_eq!(d.message(100, hi, me(t), t, &param("resched", 0)), Reply::Ok);
    assert_eq!(d.message(100, hi, me(t), t, &param("resched", 1)), Reply::Refused("no such CPU cpu1".into()));
    let mut out = vec![Effect::Resched(CpuId(9))]; // cleared first
    d.drain_effects(&mut out);
    assert_eq!(
        out,
        [
            Effect::SetEvent { sched: hi, token: 0, at: 125 },
            Effect::SetEvent { sched: hi, token: 0, at: 100 },
            Effect::CancelEvent { sched: hi, token: 0 },
            Effect::Resched(C0),
        ]
    );
    d.drain_effects(&mut out);
    assert!(out.is_empty());

    // An event handler may arm the next event; a fired event offers idle CPUs a decision.
    hip.knobs().rearm = Some((200, 9));
    assert_eq!(d.block(150, t, Block::default()), Some(C0));
    effects(&mut d);
    take(&log);
    assert!(d.fire_event(150, hi, 0));
    assert_eq!(take(&log), s(&["hi: event 0"]));
    assert_eq!(effects(&mut d), [Effect::SetEvent { sched: hi, token: 9, at: 200 }, Effect::Resched(C0)]);
    // Re-arming in the past is an error the policy sees.
    hip.knobs().rearm = Some((10, 9));
    assert!(d.fire_event(300, hi, 9));
    assert_eq!(effects(&mut d), [Effect::Resched(C0)]);
    assert_eq!(hip.knobs().ctx_results, s(&["set_event(200, 9): Ok(())", "set_event(10, 9): Err(EventInPast { at: 10, now: 300 })"]));
}

#[test]
fn a_waking_task_of_a_higher_scheduler_preempts_a_lower_schedulers_cpu() {
    // Vassal §3/§8: the loaded scheduler takes precedence. Two CPUs run default tasks;
    // when a task owned by "hi" wakes, the dispatcher asks for a new decision on one of
    // them, preferring the task's last CPU — the policy need not know what runs there.
    let (mut d, _defp, log) = dispatcher(2);
    let (hi, _hip) = add_sched(&mut d, &log, "hi", 20, Position::Top);
    let a = task(&mut d);
    let b = task(&mut d);
    let t = blocked_task(&mut d);
    assert_eq!(join(&mut d, hi, t), Reply::Ok);
    assert_eq!(d.schedule(0, C0, Preempt::Resched).unwrap().task, a);
    assert_eq!(d.schedule(0, C1, Preempt::Resched).unwrap().task, b);
    effects(&mut d);
    assert!(d.wake(1, t, Wake::default()));
    assert_eq!(effects(&mut d), [Effect::Resched(C0)], "no idle CPU: the first CPU running a lower scheduler's task");
    // It runs on cpu1 once; next time cpu1 (its last CPU) is preferred.
    d.schedule(1, C1, Preempt::Resched).unwrap();
    assert_eq!(d.running(C1), Some(t));
    d.block(2, t, Block::default());
    assert_eq!(d.schedule(2, C1, Preempt::Resched).unwrap().task, b);
    effects(&mut d);
    assert!(d.wake(3, t, Wake::default()));
    assert_eq!(effects(&mut d), [Effect::Resched(C1)]);
    // A task of the default scheduler waking never preempts: nothing is lower.
    d.block(4, a, Block::default());
    let c = d.schedule(4, C0, Preempt::Resched).unwrap().task;
    assert_ne!(c, a);
    effects(&mut d);
    assert!(d.wake(5, a, Wake::default()));
    assert_eq!(effects(&mut d), Vec::<Effect>::new());
}
