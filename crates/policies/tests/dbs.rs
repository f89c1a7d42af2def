//! DBS (BVT paper 001 §5): admission (`dbs::admission`) and dispatching (`dbs`), driven
//! through a real dispatcher. The shared harness (`common::Sim`) does not fire scheduler
//! events, which DBS needs (a reservation becomes active at its start), so this file has
//! a small mechanism of its own on the driver: slices, accounting, scheduler events, in
//! time order.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use proptest::prelude::*;
use vassal_core::driver::{self, Due, Hooks};
use vassal_core::{
    Block, CpuId, CpuSet, Dispatched, Dispatcher, Driver, HierarchyConfig, Ns, Preempt, Reply, Request, SchedId, Sender, Shared, TaskId,
    TaskParams, Wake, MS,
};
use vassal_policies::dbs::admission::{admit, feasible, validate, Demand, MAX_TIME};
use vassal_policies::dbs::{Dbs, Reservation};

const CPU0: CpuId = CpuId(0);

struct H {
    drv: Driver,
    dbs: Arc<Mutex<Dbs>>,
    sched: SchedId,
    now: Ns,
    /// Per CPU: (task, since, slice end).
    running: Vec<Option<(TaskId, Ns, Option<Ns>)>>,
    /// Every dispatch: (time, cpu, task).
    log: Vec<(Ns, CpuId, TaskId)>,
    /// CPU time each task received.
    cpu: BTreeMap<TaskId, Ns>,
}

impl H {
    fn new(ncpus: u16) -> H {
        let (policy, dbs) = Shared::new(Dbs::new(10 * MS));
        let d = Dispatcher::new(ncpus, "dbs", Box::new(policy), HierarchyConfig::default());
        let sched = d.default_sched();
        H { drv: Driver::new(d), dbs, sched, now: 0, running: vec![None; ncpus as usize], log: Vec::new(), cpu: BTreeMap::new() }
    }

    fn add(&mut self, runnable: bool) -> TaskId {
        let all = CpuSet::first(self.drv.disp.ncpus());
        self.add_on(runnable, all)
    }

    fn add_on(&mut self, runnable: bool, aff: CpuSet) -> TaskId {
        let t = self.drv.disp.add_task(self.now, TaskParams::new(), aff, None, runnable);
        self.settle();
        self.fill_idle();
        t
    }

    fn fill_idle(&mut self) {
        for c in 0..self.drv.disp.ncpus() {
            if self.running[c as usize].is_none() {
                self.schedule(CpuId(c), Preempt::Resched);
            }
        }
    }

    fn account(&mut self, cpu: CpuId) {
        if let Some((t, since, until)) = self.running[cpu.0 as usize] {
            let ran = self.now - since;
            if ran > 0 {
                self.drv.disp.account(self.now, t, cpu, ran);
                *self.cpu.entry(t).or_default() += ran;
            }
            self.running[cpu.0 as usize] = Some((t, self.now, until));
        }
    }

    fn account_all(&mut self) {
        for c in 0..self.drv.disp.ncpus() {
            self.account(CpuId(c));
        }
    }

    fn schedule(&mut self, cpu: CpuId, why: Preempt) {
        driver::decide(self, self.now, cpu, why);
        self.settle();
    }

    /// The dispatcher decided `d` on `cpu`.
    fn dispatched(&mut self, cpu: CpuId, d: Option<Dispatched>) {
        self.drv.disp.check_invariants().unwrap();
        if let Some(d) = d {
            if d.prev != Some(d.task) || self.log.last().is_none_or(|l| l.2 != d.task) {
                self.log.push((self.now, cpu, d.task));
            }
        }
        self.running[cpu.0 as usize] = d.map(|d| (d.task, self.now, d.slice.map(|s| self.now + s)));
    }

    fn settle(&mut self) {
        driver::settle(self, self.now);
    }

    /// Advances to `until`: scheduler events and slice ends, in time order.
    fn run_until(&mut self, until: Ns) {
        loop {
            let ev = self.drv.next_deadline();
            let slice = self.running.iter().enumerate().filter_map(|(c, r)| r.and_then(|r| r.2).map(|u| (u, c))).min();
            match (ev, slice) {
                (Some(at), s) if at <= until && s.is_none_or(|(u, _)| at <= u) => {
                    self.now = at;
                    if let Some((_, Due::Event { sched, token })) = self.drv.pop_due(at) {
                        driver::fire(self, at, sched, token);
                    }
                    self.settle();
                }
                (_, Some((u, c))) if u <= until => {
                    self.now = u;
                    self.schedule(CpuId(c as u16), Preempt::SliceExpired);
                }
                _ => break,
            }
        }
        self.now = until;
        self.account_all();
    }

    fn block(&mut self, t: TaskId) {
        self.account_all();
        if let Some(c) = self.drv.disp.block(self.now, t, Block { voluntary: true }) {
            self.running[c.0 as usize] = None;
            self.settle();
            self.schedule(c, Preempt::Resched);
        }
        self.settle();
    }

    fn wake(&mut self, t: TaskId) {
        self.account_all();
        self.drv.disp.wake(self.now, t, Wake { voluntary: true, ..Wake::default() });
        self.settle();
        self.fill_idle();
    }

    /// `task` asks for the reservation (s, t, d).
    fn reserve(&mut self, task: TaskId, start: Ns, need: Ns, deadline: Ns) -> Reply {
        self.account_all();
        let req = Request::Deadline { start, need, deadline };
        let r = self.drv.disp.message(self.now, self.sched, Sender { task: Some(task), uid: 1000 }, task, &req);
        self.settle();
        r
    }

    fn reservations(&self) -> Vec<Reservation> {
        self.dbs.lock().unwrap().reservations()
    }

    fn on(&self, cpu: CpuId) -> Option<TaskId> {
        self.drv.disp.running(cpu)
    }

    fn cpu_of(&self, t: TaskId) -> Ns {
        self.cpu.get(&t).copied().unwrap_or(0)
    }
}

impl Hooks for H {
    fn driver(&mut self) -> &mut Driver {
        &mut self.drv
    }
    fn account(&mut self, _now: Ns, cpu: CpuId) {
        H::account(self, cpu);
    }
    fn dispatched(&mut self, _now: Ns, cpu: CpuId, _why: Preempt, _before: Option<TaskId>, d: Option<Dispatched>) {
        H::dispatched(self, cpu, d);
    }
    fn before_event(&mut self, _now: Ns, _sched: SchedId) {
        self.account_all();
    }
}

fn refused(r: Reply) -> String {
    match r {
        Reply::Refused(why) => why,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

// ----- admission -----

#[test]
fn validation_refuses_malformed_requests_with_a_reason() {
    let now = 100;
    assert!(validate(now, 100, 10, 200).is_ok());
    let cases: [(Ns, Ns, Ns, &str); 7] = [
        (150, 10, 120, "not after start"),            // d < s
        (150, 10, 150, "not after start"),            // d = s
        (100, 101, 200, "exceeds the window"),        // t > d - s
        (100, 0, 200, "need of 0"),                   // t = 0
        (50, 10, 200, "in the past"),                 // s < now
        (100, 10, Ns::MAX, "beyond"),                 // an overflowed (saturated) deadline
        (MAX_TIME + 1, 10, MAX_TIME + 100, "beyond"), // absurd times
    ];
    for (s, t, d, what) in cases {
        let e = validate(now, s, t, d).expect_err(&format!("({s}, {t}, {d}) accepted"));
        assert!(e.contains(what), "({s}, {t}, {d}): {e}");
    }
}

#[test]
fn feasibility_is_exact_to_the_nanosecond() {
    let set = [Demand { start: 0, need: 5 * MS, deadline: 10 * MS }];
    // Exactly full: 10 ms of need in [0, 10 ms].
    assert!(admit(0, &set, Demand { start: 0, need: 5 * MS, deadline: 10 * MS }).is_ok());
    // One ns more is refused.
    let e = admit(0, &set, Demand { start: 0, need: 5 * MS + 1, deadline: 10 * MS }).unwrap_err();
    assert!(e.contains("infeasible"), "{e}");
    // The total fits [0, 10], but two jobs inside [4, 6] need 3 ms of its 2 ms.
    let set = [Demand { start: 4 * MS, need: 2 * MS, deadline: 6 * MS }];
    assert!(admit(0, &set, Demand { start: 4 * MS, need: MS, deadline: 6 * MS }).is_err());
    assert!(admit(0, &set, Demand { start: 0, need: 8 * MS, deadline: 10 * MS }).is_ok());
    assert!(admit(0, &set, Demand { start: 0, need: 8 * MS + 1, deadline: 10 * MS }).is_err());
    // A reservation that started counts from now with what is left of it.
    let started = [Demand { start: 0, need: 3 * MS, deadline: 10 * MS }];
    assert!(feasible(6 * MS, &started).is_ok());
    assert!(feasible(8 * MS, &started).is_err(), "3 ms left in 2 ms");
}

/// Preemptive EDF on one CPU in whole time units: does every job get its need by its
/// deadline? The reference the feasibility test must agree with.
fn edf_meets_all(jobs: &[(u64, u64, u64)]) -> bool {
    let mut left: Vec<u64> = jobs.iter().map(|j| j.1).collect();
    let end = jobs.iter().map(|j| j.2).max().unwrap_or(0);
    for t in 0..end {
        let pick = (0..jobs.len()).filter(|&i| jobs[i].0 <= t && left[i] > 0).min_by_key(|&i| (jobs[i].2, i));
        if let Some(i) = pick {
            if t >= jobs[i].2 {
                return false;
            }
            left[i] -= 1;
        }
        if (0..jobs.len()).any(|i| left[i] > 0 && jobs[i].2 <= t + 1) {
            return false;
        }
    }
    left.iter().all(|&l| l == 0)
}

proptest! {
    #[test]
    fn feasibility_agrees_with_an_edf_schedule(raw in prop::collection::vec((0u64..20, 1u64..8, 1u64..12), 1..7)) {
        // (start, need, window) -> (start, need, deadline) with need <= window.
        let jobs: Vec<(u64, u64, u64)> = raw.iter().map(|&(s, n, w)| (s, n.min(w), s + w)).collect();
        let set: Vec<Demand> = jobs.iter().map(|&(s, n, d)| Demand { start: s, need: n, deadline: d }).collect();
        prop_assert_eq!(feasible(0, &set).is_ok(), edf_meets_all(&jobs), "{:?}", jobs);
    }
}

// ----- requests through the scheduler -----

#[test]
fn bad_requests_are_refused_and_leave_every_reservation_untouched() {
    let mut h = H::new(1);
    let a = h.add(true);
    let b = h.add(true);
    assert_eq!(h.reserve(a, 10 * MS, 5 * MS, 20 * MS), Reply::Ok);
    assert_eq!(h.reserve(b, 20 * MS, 5 * MS, 40 * MS), Reply::Ok);
    h.run_until(12 * MS);
    let before = h.reservations();
    assert_eq!(before.len(), 2);
    let now = h.now;
    let bad: [(Ns, Ns, Ns, &str); 7] = [
        (30 * MS, MS, 25 * MS, "not after start"),
        (30 * MS, 11 * MS, 40 * MS, "exceeds the window"),
        (30 * MS, 0, 40 * MS, "need of 0"),
        (now - 1, MS, 40 * MS, "in the past"),
        (30 * MS, MS, Ns::MAX, "beyond"),
        (20 * MS, 16 * MS, 40 * MS, "infeasible"), // b's 5 ms + 16 ms in [20, 40]
        (12 * MS, 6 * MS, 20 * MS, "infeasible"),  // with a's 3 ms left in [12, 20]
    ];
    for (s, t, d, what) in bad {
        let why = refused(h.reserve(b, s, t, d));
        assert!(why.contains(what), "({s}, {t}, {d}): {why}");
        assert_eq!(h.reservations(), before, "a refused request changed the reservations");
    }
    // Someone else may not reserve for b.
    let req = Request::Deadline { start: 30 * MS, need: MS, deadline: 40 * MS };
    let r = h.drv.disp.message(h.now, h.sched, Sender { task: Some(a), uid: 1000 }, b, &req);
    assert!(refused(r).contains("only"));
    assert_eq!(h.reservations(), before);
    // A request that fits exactly is still accepted afterwards.
    assert_eq!(h.reserve(b, 20 * MS, 15 * MS, 40 * MS), Reply::Ok);
}

#[test]
fn reservations_run_earliest_deadline_first_and_leftover_time_round_robin() {
    let mut h = H::new(1);
    let hog = h.add(true);
    let x = h.add(true);
    let y = h.add(true);
    assert_eq!(h.on(CPU0), Some(hog));
    // y: 4 ms by 30 ms; x: 4 ms in [10, 20] — accepted first come, first served.
    assert_eq!(h.reserve(y, 0, 4 * MS, 30 * MS), Reply::Ok);
    // y's reservation is active at once and preempts the hog (which has none).
    assert_eq!(h.on(CPU0), Some(y));
    assert_eq!(h.reserve(x, 10 * MS, 4 * MS, 20 * MS), Reply::Ok);
    h.run_until(4 * MS);
    assert_eq!(h.cpu_of(y), 4 * MS, "y got exactly its need");
    // Used up: y is now a task without a reservation, sharing the leftover time.
    assert!(h.reservations().iter().all(|r| r.task != y));
    h.run_until(10 * MS);
    assert_eq!(h.on(CPU0), Some(x), "x's reservation starts at 10 ms and preempts the round robin");
    h.run_until(14 * MS);
    assert_eq!(h.cpu_of(x), 4 * MS);
    assert_ne!(h.on(CPU0), Some(x), "x is not run beyond its reservation while others wait");
    // Leftover time: hog and y share it round robin (10 ms turns); y's first turn started
    // at 4 ms, preempted at 10 ms, kept its place.
    h.run_until(60 * MS);
    let (hog_t, y_t) = (h.cpu_of(hog), h.cpu_of(y));
    assert_eq!(h.cpu_of(x) + hog_t + y_t, 60 * MS, "work conserving");
    assert!(hog_t.abs_diff(y_t - 4 * MS) <= 10 * MS, "round robin: hog {hog_t}, y {y_t}");
}

#[test]
fn an_earlier_deadline_preempts_a_later_one() {
    let mut h = H::new(1);
    let a = h.add(true);
    let b = h.add(true);
    assert_eq!(h.reserve(a, 0, 10 * MS, 50 * MS), Reply::Ok);
    assert_eq!(h.on(CPU0), Some(a));
    h.run_until(2 * MS);
    assert_eq!(h.reserve(b, 5 * MS, 3 * MS, 10 * MS), Reply::Ok);
    h.run_until(5 * MS);
    assert_eq!(h.on(CPU0), Some(b), "b's earlier deadline takes the CPU at its start");
    h.run_until(8 * MS);
    assert_eq!(h.cpu_of(b), 3 * MS);
    assert_eq!(h.on(CPU0), Some(a));
    h.run_until(13 * MS);
    assert_eq!(h.cpu_of(a), 10 * MS, "a's 10 ms are done at 13 ms, well before its deadline");
    assert!(h.reservations().is_empty());
}

#[test]
fn a_blocked_task_keeps_its_reservation_for_admission_until_its_deadline() {
    let mut h = H::new(1);
    let hog = h.add(true);
    let a = h.add(true);
    let b = h.add(true);
    // a over-reserves 8 ms in [0, 10] but blocks after 2 ms.
    assert_eq!(h.reserve(a, 0, 8 * MS, 10 * MS), Reply::Ok);
    h.run_until(2 * MS);
    h.block(a);
    assert_eq!(h.on(CPU0), Some(hog), "the unused reservation's time goes to the round robin");
    // Its 6 ms are still held: b cannot have 5 ms in [2, 10] ...
    assert!(refused(h.reserve(b, 2 * MS, 5 * MS, 10 * MS)).contains("infeasible"));
    // ... until a's deadline passes and its reservation is dropped.
    h.run_until(10 * MS);
    assert!(h.reservations().is_empty());
    assert_eq!(h.reserve(b, 10 * MS, 5 * MS, 15 * MS), Reply::Ok);
}

#[test]
fn reservations_are_served_on_cpu0_and_other_cpus_run_the_round_robin() {
    let mut h = H::new(2);
    let hog1 = h.add(true);
    let hog2 = h.add(true);
    let r = h.add(true);
    assert_eq!(h.reserve(r, MS, 5 * MS, 20 * MS), Reply::Ok);
    h.run_until(MS);
    assert_eq!(h.on(CPU0), Some(r));
    assert_ne!(h.on(CpuId(1)), Some(r));
    h.run_until(6 * MS);
    assert_eq!(h.cpu_of(r), 5 * MS, "its need, on cpu0, from 1 ms to 6 ms");
    assert_eq!(h.cpu_of(hog1) + h.cpu_of(hog2) + h.cpu_of(r), 12 * MS, "both CPUs busy throughout");
    // A task that may not run on CPU 0 cannot reserve.
    let pinned = h.add_on(false, CpuSet::only(CpuId(1)));
    assert!(refused(h.reserve(pinned, 10 * MS, MS, 20 * MS)).contains("cpu0"));
}

#[test]
fn a_task_waking_inside_its_reservation_preempts_the_round_robin() {
    let mut h = H::new(1);
    let hog = h.add(true);
    let a = h.add(false);
    assert_eq!(h.reserve(a, 5 * MS, 2 * MS, 20 * MS), Reply::Ok);
    h.run_until(7 * MS);
    assert_eq!(h.on(CPU0), Some(hog), "a is asleep: its reservation's time goes to the round robin");
    h.wake(a);
    assert_eq!(h.on(CPU0), Some(a), "woken inside its window with its need left: it runs at once");
    h.run_until(9 * MS);
    assert_eq!(h.cpu_of(a), 2 * MS);
    assert!(h.reservations().is_empty());
    // Without a reservation it waits its turn behind the hog.
    h.block(a);
    h.wake(a);
    assert_eq!(h.on(CPU0), Some(hog));
}

// ----- properties -----

#[derive(Clone, Debug)]
enum Op {
    AddPlain,
    AddReserver,
    Block(usize),
    Wake(usize),
    /// (reserver, start offset, need, window), in ms.
    Reserve(usize, u64, u64, u64),
    Advance(u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        1 => Just(Op::AddPlain),
        1 => Just(Op::AddReserver),
        1 => (0usize..8).prop_map(Op::Block),
        1 => (0usize..8).prop_map(Op::Wake),
        3 => (0usize..4, 0u64..20, 1u64..10, 1u64..30).prop_map(|(r, s, t, w)| Op::Reserve(r, s, t, w)),
        3 => (1u64..15).prop_map(Op::Advance),
    ]
}

proptest! {
    /// Reserved tasks that never block always get their reservations: the live set stays
    /// feasible as time passes (EDF serves it), every decision is valid, a CPU is idle only
    /// when nothing it may run is waiting, and nothing runs on two CPUs.
    #[test]
    fn accepted_reservations_stay_feasible_and_decisions_are_valid(
        ncpus in 1u16..3,
        ops in prop::collection::vec(op(), 1..60),
    ) {
        let mut h = H::new(ncpus);
        let mut plain: Vec<TaskId> = Vec::new();
        let mut reservers: Vec<TaskId> = Vec::new();
        for op in ops {
            match op {
                Op::AddPlain => plain.push(h.add(true)),
                Op::AddReserver => reservers.push(h.add(true)),
                Op::Block(i) => if let Some(&t) = plain.get(i) {
                    if h.drv.disp.state(t).is_runnable() { h.block(t); }
                },
                Op::Wake(i) => if let Some(&t) = plain.get(i) {
                    if h.drv.disp.state(t) == vassal_core::TaskState::Blocked { h.wake(t); }
                },
                Op::Reserve(i, s, t, w) => if let Some(&task) = reservers.get(i) {
                    let start = h.now + s * MS;
                    let _ = h.reserve(task, start, t.min(w) * MS, start + w * MS);
                },
                Op::Advance(n) => { let until = h.now + n * MS; h.run_until(until); }
            }
            let live: Vec<Demand> = h.reservations().iter()
                .map(|r| Demand { start: r.start, need: r.need - r.used, deadline: r.deadline }).collect();
            prop_assert!(feasible(h.now, &live).is_ok(), "at {}: {:?}", h.now, h.reservations());
            prop_assert!(h.reservations().iter().all(|r| r.deadline > h.now), "an expired reservation is still live");
            prop_assert_eq!(h.drv.disp.stats().refused, 0);
            let running: Vec<TaskId> = (0..ncpus).filter_map(|c| h.on(CpuId(c))).collect();
            let mut dedup = running.clone();
            dedup.sort();
            dedup.dedup();
            prop_assert_eq!(dedup.len(), running.len(), "a task on two CPUs");
            let waiting = plain.iter().chain(&reservers).any(|&t| h.drv.disp.state(t) == vassal_core::TaskState::Runnable);
            if waiting {
                prop_assert!((0..ncpus).all(|c| h.on(CpuId(c)).is_some()), "a CPU idles while a task waits");
            }
        }
    }
}
