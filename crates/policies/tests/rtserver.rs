//! The soft real-time server (paper 002 §2): the broker's admission test (eqs. 1–3), the
//! dispatch table (non-preemptive rate monotonic), and the policy's API — every bad
//! request refused with a reason and nothing changed. The policy is driven directly here
//! (a fake task view and `Ctx::new`), so the tests can compare its whole reservation set
//! and both tables before and after. Dispatching over time (slots, frame swap, overrun
//! protection) is tested through the simulator in crates/sim/tests/rtserver.rs.

use std::collections::BTreeMap;

use vassal_core::{
    AttachInfo, CpuId, CpuSet, Ctx, Effect, Ns, Policy, Reply, Request, SchedId, Sender, TaskId, TaskParams, TaskState, TaskView, MS,
};
use vassal_policies::rtserver::admission::{eqs_2_3, f, Broker, Failure, Mode};
use vassal_policies::rtserver::table::{build_column, Job, Table};
use vassal_policies::rtserver::{exec_time, Reservation, RtServer};
use vassal_policies::ParamValue;

fn t(i: u32) -> TaskId {
    TaskId(i)
}

fn job(task: u32, e_ms: u64, p_ms: u64, seq: u64) -> Job {
    Job { task: t(task), e: e_ms * MS, p: p_ms * MS, seq }
}

// ----- the broker and the table, pure -----

#[test]
fn f_is_ceil_plus_one_for_any_sign() {
    assert_eq!(f(140, 40), 5); // ceil(3.5) + 1
    assert_eq!(f(60, 40), 3);
    assert_eq!(f(80, 40), 3); // exact division: 2 + 1
    assert_eq!(f(0, 40), 1);
    assert_eq!(f(-10, 40), 1); // ceil(-0.25) = 0
    assert_eq!(f(-40, 40), 0);
}

#[test]
fn table2_columns_come_out_of_non_preemptive_rate_monotonic() {
    // Paper 002 Table 2: processor #1 runs 100 (20/40) and 101 (20/160), #2 runs 102
    // (20/40) and 103 (20/80); 20 ms slots, 160 ms frame.
    let c1 = build_column(20 * MS, 160 * MS, &[job(100, 20, 40, 0), job(101, 20, 160, 1)]).unwrap();
    let c2 = build_column(20 * MS, 160 * MS, &[job(102, 20, 40, 2), job(103, 20, 80, 3)]).unwrap();
    let own = |c: &[Option<TaskId>]| c.iter().map(|s| s.map_or(0, |t| t.0)).collect::<Vec<_>>();
    assert_eq!(own(&c1), [100, 101, 100, 0, 100, 0, 100, 0]);
    assert_eq!(own(&c2), [102, 103, 102, 0, 102, 103, 102, 0]);
    let table = Table { slot: 20 * MS, cols: vec![c1, c2] };
    assert_eq!(table.free_slots(), (5, 16), "31.25% = 5/16 left to time-sharing");
    assert_eq!(table.slots_of(t(103)), 2);
    assert!(table.render(|t| t.0.to_string()).starts_with("  0     0ms-20ms         100       102\n"));
}

#[test]
fn the_table_is_non_preemptive_and_reports_the_job_that_misses() {
    // A 60 ms job every 160 ms started first blocks a 20/40 task past its deadline:
    // released at 0 with nothing else pending, the long job (lower priority) could not
    // start before the short one — RM picks the 40 ms task first, then the long job runs
    // 3 slots non-preemptively from 20 ms to 80 ms, so the short job released at 40 ms
    // finishes at 100 ms > 80 ms.
    let miss = build_column(20 * MS, 160 * MS, &[job(1, 20, 40, 0), job(2, 60, 160, 1)]).unwrap_err();
    assert_eq!((miss.task, miss.release), (t(1), 40 * MS));
    // Preemptively it would fit (utilisation 0.875); the equations refuse it too (eq. 2:
    // 40 < 20 + 60).
    assert!(matches!(eqs_2_3(0, &[job(1, 20, 40, 0), job(2, 60, 160, 1)]), Err(Failure::Eq2 { .. })));
    // e is rounded up to whole slots: 21 ms takes two 20 ms slots.
    let col = build_column(20 * MS, 80 * MS, &[job(1, 21, 80, 0)]).unwrap();
    assert_eq!(col.iter().filter(|s| s.is_some()).count(), 2);
}

#[test]
fn eqs_2_and_3_as_printed() {
    // Table 2's processor #1: eq. 2: 40 ≥ 20 + 20; eq. 3 for 101: 160 ≥ 20 + 20 + 20·F(140, 40) = 140.
    assert_eq!(eqs_2_3(0, &[job(100, 20, 40, 0), job(101, 20, 160, 1)]), Ok(()));
    // Its processor #2 fails eq. 3 for 103: 80 < 20 + 20 + 20·F(60, 40) = 100.
    assert_eq!(
        eqs_2_3(1, &[job(102, 20, 40, 0), job(103, 20, 80, 1)]),
        Err(Failure::Eq3 { cpu: 1, task: t(103), lhs: 80 * MS, rhs: 100 * MS as u128 })
    );
    // eq. 2: the shortest period must hold its own e and the longest other e.
    assert_eq!(eqs_2_3(0, &[job(1, 10, 40, 0), job(2, 40, 160, 1)]), Err(Failure::Eq2 { cpu: 0, lhs: 40 * MS, rhs: 50 * MS as u128 }));
    // A lone reservation of a whole CPU passes both (max over an empty set is 0).
    assert_eq!(eqs_2_3(0, &[job(1, 50, 50, 0)]), Ok(()));
}

fn broker(ncpus: u16, r: (u64, u64), mode: Mode) -> Broker {
    Broker::new(20 * MS, 160 * MS, ncpus, r.0, r.1, mode)
}

#[test]
fn first_fit_eq1_exactness_and_avail() {
    let all = CpuSet::first(2);
    let mut b = broker(2, (11, 16), Mode::Eqs);
    assert_eq!(b.avail(), (11, 8), "r·N = 11/8 CPUs before any reservation");
    assert_eq!(b.admit(t(100), 20 * MS, 40 * MS, all, 0), Ok(0));
    assert_eq!(b.admit(t(101), 20 * MS, 160 * MS, all, 0), Ok(0));
    // 102 fails eq. 3 on CPU 0 (101's test: 160 < 240) and goes to CPU 1.
    assert_eq!(b.admit(t(102), 20 * MS, 40 * MS, all, 0), Ok(1));
    // 103 fails eq. 3 on both.
    let rej = b.admit(t(103), 20 * MS, 80 * MS, all, 0).unwrap_err();
    assert_eq!(rej.codes(), [3, 3]);
    assert!(rej.to_string().contains("eq. 3 fails"), "{rej}");
    // 1/8 CPU left: 11/8 − (1/2 + 1/8 + 1/2).
    assert_eq!(b.avail(), (1, 4));
    // eq. 1 with exact equality: 1/4 more fills r·N exactly and passes; a nanosecond more fails.
    let mut b1 = broker(1, (3, 4), Mode::Table);
    assert_eq!(b1.admit(t(1), 20 * MS, 40 * MS, all, 0), Ok(0));
    assert!(b1.trial(t(2), 40 * MS, 160 * MS, all).is_ok());
    assert_eq!(b1.trial(t(2), 40 * MS + 1, 160 * MS, all).unwrap_err().codes(), [1]);
    // Affinity: a task that may only run on CPU 1 is never placed on CPU 0.
    let mut b2 = broker(2, (1, 1), Mode::Eqs);
    assert_eq!(b2.admit(t(1), 20 * MS, 40 * MS, CpuSet::only(CpuId(1)), 0), Ok(1));
}

#[test]
fn periods_must_tile_the_frame() {
    let b = broker(1, (4, 5), Mode::Eqs);
    assert!(b.check_period(0).unwrap_err().contains("period 0"));
    assert!(b.check_period(50 * MS).unwrap_err().contains("multiple of the"));
    assert!(b.check_period(320 * MS).unwrap_err().contains("longer than"));
    assert!(b.check_period(u64::MAX).is_err());
    for p in [20, 40, 80, 160] {
        assert_eq!(b.check_period(p * MS), Ok(()));
    }
}

#[test]
fn exec_time_validates_util_before_converting() {
    assert_eq!(exec_time(0.125, 160 * MS), Ok(20 * MS));
    assert_eq!(exec_time(0.8, 50 * MS), Ok(40 * MS), "E = U·P exact to the ns");
    assert_eq!(exec_time(1.0, 50 * MS), Ok(50 * MS));
    for bad in [0.0, -0.5, 1.0000001, f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
        assert!(exec_time(bad, 40 * MS).is_err(), "{bad}");
    }
    assert!(exec_time(1e-12, 40 * MS).unwrap_err().contains("less than 1 ns"));
}

// ----- the policy, driven directly -----

/// A fake task view: every task is owned by the server (sched 1), runnable, on any CPU.
struct View {
    states: BTreeMap<TaskId, TaskState>,
    affinity: BTreeMap<TaskId, CpuSet>,
}

impl TaskView for View {
    fn state(&self, task: TaskId) -> TaskState {
        self.states.get(&task).copied().unwrap_or(TaskState::Dead)
    }
    fn affinity(&self, task: TaskId) -> CpuSet {
        self.affinity.get(&task).copied().unwrap_or(CpuSet::first(2))
    }
    fn owner(&self, task: TaskId) -> Option<SchedId> {
        self.states.contains_key(&task).then_some(SchedId(1))
    }
    fn last_cpu(&self, _task: TaskId) -> Option<CpuId> {
        None
    }
    fn running_on(&self, _cpu: CpuId) -> Option<TaskId> {
        None
    }
}

struct P {
    s: RtServer,
    view: View,
    now: Ns,
    effects: Vec<Effect>,
    exclusive: Vec<(TaskId, bool)>,
}

impl P {
    fn new(params: &[(&str, ParamValue)]) -> P {
        let map: BTreeMap<String, ParamValue> = params.iter().map(|(k, v)| (k.to_string(), v.clone())).collect();
        let mut p = vassal_policies::params::Params::new("rtserver", &map);
        let mut s = vassal_policies::rtserver::build(&mut p).unwrap();
        p.finish().unwrap();
        s.init(2); // the dispatcher's call: the machine has 2 CPUs (as in `Ctx::new` below)
        P { s, view: View { states: BTreeMap::new(), affinity: BTreeMap::new() }, now: 0, effects: vec![], exclusive: vec![] }
    }
    fn attach(&mut self, i: u32) {
        self.view.states.insert(t(i), TaskState::Runnable);
        let params = TaskParams::new();
        let info = AttachInfo { state: TaskState::Runnable, params: &params, affinity: CpuSet::first(2), parent: None, guest: false };
        let mut ctx = Ctx::new(self.now, 2, SchedId(1), &mut self.effects, &mut self.exclusive, &self.view);
        self.s.on_attach(&mut ctx, t(i), &info).unwrap();
    }
    fn msg(&mut self, from: Sender, task: u32, req: Request) -> Reply {
        let mut ctx = Ctx::new(self.now, 2, SchedId(1), &mut self.effects, &mut self.exclusive, &self.view);
        self.s.on_message(&mut ctx, from, t(task), &req)
    }
    /// Everything a request could change: the reservations and both tables.
    fn snapshot(&self) -> (Vec<Reservation>, Table, Table) {
        let res = self.s.broker().map(|b| b.reservations().copied().collect()).unwrap_or_default();
        (res, self.s.pending_table().clone(), self.s.active_table().clone())
    }
}

fn me(task: u32, uid: u32) -> Sender {
    Sender { task: Some(t(task)), uid }
}

fn reserve(util: f64, period_ms: u64) -> Request {
    Request::Reserve { util, period: period_ms * MS }
}

fn refused(r: &Reply) -> &str {
    match r {
        Reply::Refused(why) => why,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn reserve_free_modify_avail_and_ownership() {
    // r = 1/2 of each of the 2 CPUs: one CPU's worth may be reserved.
    let mut p = P::new(&[("r", ParamValue::Str("1/2".into()))]);
    for i in 1..=4 {
        p.attach(i);
    }
    assert_eq!(p.msg(me(1, 1000), 1, reserve(0.5, 40)), Reply::Ok);
    assert_eq!(p.exclusive.last(), Some(&(t(1), true)), "a reserved task runs only in its slots");
    assert!(p.effects.iter().any(|e| matches!(e, Effect::SetEvent { at, .. } if *at == 20 * MS)), "next slot boundary");
    // Root may reserve for another task; the owner is the uid that reserved.
    assert_eq!(p.msg(Sender::ROOT, 2, reserve(0.125, 160)), Reply::Ok);
    assert_eq!(p.msg(Sender::ROOT, 3, Request::Avail), Reply::Fraction { num: 3, den: 8 });
    // The broker's table is pending; the dispatcher's copy changes only at a frame boundary.
    assert_eq!(p.s.pending_table().slots_of(t(1)), 4);
    assert_eq!(p.s.active_table().slots_of(t(1)), 0);
    // Modify by the owner: admitted as if the old one were gone.
    assert_eq!(p.msg(me(3, 1000), 1, Request::Modify { util: 0.25, period: 80 * MS }), Reply::Ok);
    assert_eq!(p.s.broker().unwrap().get(t(1)).map(|r| (r.e, r.p, r.owner)), Some((20 * MS, 80 * MS, 1000)));
    // A modify that fails (eq. 1: 1 + 1/8 > r·N = 1) keeps the old reservation.
    let before = p.snapshot();
    refused(&p.msg(me(1, 1000), 1, Request::Modify { util: 1.0, period: 160 * MS }));
    assert_eq!(p.snapshot(), before);
    // Free by root.
    assert_eq!(p.msg(Sender::ROOT, 2, Request::Free), Reply::Ok);
    assert!(p.s.broker().unwrap().get(t(2)).is_none());
    assert_eq!(p.exclusive.last(), Some(&(t(2), false)), "back to time-sharing");
}

#[test]
fn bad_requests_are_refused_with_a_reason_and_change_nothing() {
    let mut p = P::new(&[("r", ParamValue::Float(0.5))]);
    for i in 1..=3 {
        p.attach(i);
    }
    assert_eq!(p.msg(me(1, 1000), 1, reserve(0.5, 40)), Reply::Ok);
    let before = p.snapshot();
    let cases: Vec<(Sender, u32, Request, &str)> = vec![
        (me(2, 1000), 2, reserve(0.0, 40), "out of range"),
        (me(2, 1000), 2, reserve(-0.1, 40), "out of range"),
        (me(2, 1000), 2, reserve(1.5, 40), "out of range"),
        (me(2, 1000), 2, reserve(f64::NAN, 40), "NaN"),
        (me(2, 1000), 2, reserve(f64::INFINITY, 40), "out of range"),
        (me(2, 1000), 2, Request::Reserve { util: 0.1, period: 0 }, "period 0"),
        (me(2, 1000), 2, Request::Reserve { util: 0.1, period: u64::MAX }, "longer than"),
        (me(2, 1000), 2, Request::Reserve { util: 0.1, period: 30 * MS }, "multiple of"),
        (Sender::ROOT, 99, reserve(0.1, 40), "unknown pid"),
        (Sender::ROOT, 99, Request::Free, "unknown pid"),
        (me(2, 1000), 3, reserve(0.1, 40), "only task3 itself or root"),
        (me(1, 1000), 1, reserve(0.1, 40), "already has a reservation"),
        (me(2, 2000), 1, Request::Free, "only its owner (uid 1000) or root"),
        (me(2, 2000), 1, Request::Modify { util: 0.1, period: 40 * MS }, "only its owner"),
        (me(2, 1000), 2, Request::Free, "no reservation to free"),
        (me(2, 1000), 2, Request::Modify { util: 0.1, period: 40 * MS }, "no reservation to modify"),
        (me(1, 1000), 1, Request::Modify { util: f64::NAN, period: 40 * MS }, "NaN"),
        (me(2, 1000), 2, reserve(0.9, 40), "eq. 1 fails"),
        (me(2, 1000), 2, Request::Warp { on: true }, "does not understand"),
    ];
    for (from, task, req, why) in cases {
        let r = p.msg(from, task, req.clone());
        let text = refused(&r);
        assert!(text.contains(why), "{req:?} from {from:?}: '{text}' does not say '{why}'");
        assert_eq!(p.snapshot(), before, "{req:?} changed the reservations or a table");
    }
    // The owner's (other) task of the same uid may free it.
    assert_eq!(p.msg(me(2, 1000), 1, Request::Free), Reply::Ok);
}

#[test]
fn parameters_are_checked_when_built() {
    let build = |kv: &[(&str, ParamValue)]| {
        let map: BTreeMap<String, ParamValue> = kv.iter().map(|(k, v)| (k.to_string(), v.clone())).collect();
        vassal_policies::build("rtserver", &map).map(|_| ())
    };
    let s = |v: &str| ParamValue::Str(v.into());
    assert_eq!(build(&[]), Ok(()));
    assert_eq!(build(&[("r", ParamValue::Float(0.6875)), ("slot", s("10ms")), ("frame", s("50ms"))]), Ok(()));
    for (kv, why) in [
        (vec![("frame", s("150ms"))], "whole number"),
        (vec![("slot", s("0ms"))], "greater than zero"),
        (vec![("r", ParamValue::Float(1.5))], "not in (0, 1]"),
        (vec![("r", ParamValue::Int(0))], "not in (0, 1]"),
        (vec![("r", ParamValue::Float(f64::NAN))], "expected a fraction"),
        (vec![("r", s("1/0"))], "denominator 0"),
        (vec![("admission", s("edf"))], "expected one of"),
        (vec![("overrun_periods", ParamValue::Int(10))], "less than overrun_window"),
        (vec![("bogus", ParamValue::Int(1))], "no parameter(s) bogus"),
    ] {
        let e = build(&kv).unwrap_err();
        assert!(e.contains(why), "{kv:?}: '{e}' does not say '{why}'");
    }
}

#[test]
fn the_declared_usage_is_r_times_the_cpus_and_passes_the_conflict_check() {
    use vassal_core::{check_conflict, HierarchyConfig, Usage};
    let p = P::new(&[("r", ParamValue::Float(0.9))]);
    assert_eq!(p.s.usage(2), Usage::Reserved { cpu_ppm: 1_800_000 });
    assert_eq!(check_conflict(&[], p.s.usage(2), 0, 2, &HierarchyConfig::default()), Ok(()));
    // r = 1 would leave time-sharing nothing: the hierarchy refuses to load it.
    let p = P::new(&[("r", ParamValue::Int(1))]);
    let e = check_conflict(&[], p.s.usage(2), 0, 2, &HierarchyConfig::default()).unwrap_err();
    assert!(e.contains("best-effort"), "{e}");
    // Only the CPUs it reserves on count.
    let p = P::new(&[("r", ParamValue::Str("1/2".into())), ("cpus", ParamValue::Int(1))]);
    assert_eq!(p.s.usage(4), Usage::Reserved { cpu_ppm: 500_000 });
}
