//! BVT (paper 001) driven through the real `vassal_core::Dispatcher`, with hand-computed
//! schedules for every rule (times in mcu = 10 ms unless said otherwise).
//!
//! Virtual times are compared in the policy's units: 1 virtual mcu of a weight-1 task is
//! `vmcu(1)` = 10 ms · VT_SCALE.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use proptest::prelude::*;
use vassal_core::driver::{self, Due, Hooks};
use vassal_core::{
    AttachInfo, Block, CpuId, CpuSet, Ctx, Decision, Dispatched, Dispatcher, Driver, HierarchyConfig, Ns, Policy, Position, Preempt, Reply,
    Request, SchedId, Sender, Shared, TaskId, TaskParams, TaskState, TaskView, Usage, Wake, MS,
};
use vassal_policies::bvt::{self, Bvt, BvtConfig, BvtLogEntry, BvtLogEvent, BvtTaskInfo, WakePreempt, MAX_WEIGHT, VT_SCALE};
use vassal_policies::{ParamValue, Params};

const MCU: Ns = 10 * MS;

fn mcu(n: u64) -> Ns {
    n * MCU
}

/// n virtual mcu (what a weight-1 task's AVT advances by running n mcu).
fn vmcu(n: i128) -> i128 {
    n * MCU as i128 * VT_SCALE
}

fn params(kv: &[(&str, i64)]) -> TaskParams {
    kv.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}

fn cfg(c_mcu: u64) -> BvtConfig {
    BvtConfig { mcu: MCU, c: mcu(c_mcu), ..BvtConfig::default() }
}

const VOL: Wake = Wake { voluntary: true, interrupt: None, warp: false, cpu: None };

// ----- a policy wrapper so the test can look inside the boxed policy -----

/// A scheduler that owns tasks but never has an opinion (to make BVT a guest host).
struct Abstain;
impl Policy for Abstain {
    fn kind(&self) -> &str {
        "abstain"
    }
    fn pick(&mut self, _: &mut Ctx, _: CpuId) -> Option<Decision> {
        None
    }
}

// ----- a tiny mechanism on the driver: virtual time, slices, scheduler events, accounting -----

struct Run {
    task: TaskId,
    since: Ns,
    until: Option<Ns>,
}

type Check = Box<dyn Fn(&Sim)>;

struct Sim {
    drv: Driver,
    bvt: Arc<Mutex<Bvt>>,
    now: Ns,
    running: Vec<Option<Run>>,
    /// Every accepted decision: (time, cpu, dispatched).
    disp: Vec<(Ns, CpuId, Dispatched)>,
    /// CPU time per task.
    cpu_time: BTreeMap<TaskId, Ns>,
    /// Account running tasks at every multiple of this (a mechanism settling at ticks).
    settle_every: Option<Ns>,
    /// Called after every decision.
    check: Option<Check>,
    /// Check the dispatcher's invariants after every decision (O(tasks)).
    check_invariants: bool,
}

impl Sim {
    fn new(ncpus: u16, cfg: BvtConfig) -> Sim {
        Sim::with(ncpus, Bvt::new(cfg).unwrap())
    }

    fn with(ncpus: u16, bvt: Bvt) -> Sim {
        let bvt = Arc::new(Mutex::new(bvt));
        let d = Dispatcher::new(ncpus, "bvt", Box::new(Shared::of(&bvt)), HierarchyConfig::default());
        Sim {
            drv: Driver::new(d),
            bvt,
            now: 0,
            running: (0..ncpus).map(|_| None).collect(),
            disp: Vec::new(),
            cpu_time: BTreeMap::new(),
            settle_every: None,
            check: None,
            check_invariants: true,
        }
    }

    fn info(&self, t: TaskId) -> BvtTaskInfo {
        self.bvt.lock().unwrap().task_info(t).expect("task known to bvt")
    }

    fn log(&self) -> Vec<BvtLogEntry> {
        self.bvt.lock().unwrap().log().to_vec()
    }

    fn svt(&self) -> i128 {
        self.bvt.lock().unwrap().svt()
    }

    fn running(&self, cpu: u16) -> Option<TaskId> {
        self.drv.disp.running(CpuId(cpu))
    }

    fn ran(&self, t: TaskId) -> Ns {
        self.cpu_time.get(&t).copied().unwrap_or(0)
    }

    fn add(&mut self, p: TaskParams, runnable: bool) -> TaskId {
        self.add_full(p, CpuSet::first(self.drv.disp.ncpus()), None, runnable)
    }

    fn add_full(&mut self, p: TaskParams, aff: CpuSet, parent: Option<TaskId>, runnable: bool) -> TaskId {
        let t = self.drv.disp.add_task(self.now, p, aff, parent, runnable);
        self.settle();
        t
    }

    /// Accounts the task running on `cpu` up to now.
    fn account(&mut self, cpu: u16) {
        if let Some(r) = &mut self.running[cpu as usize] {
            let ran = self.now - r.since;
            r.since = self.now;
            let task = r.task;
            *self.cpu_time.entry(task).or_insert(0) += ran;
            self.drv.disp.account(self.now, task, CpuId(cpu), ran);
        }
    }

    fn decide(&mut self, cpu: u16, why: Preempt) {
        driver::decide(self, self.now, CpuId(cpu), why);
    }

    /// The dispatcher decided `r` on `cpu`.
    fn dispatched(&mut self, cpu: u16, r: Option<Dispatched>) {
        self.running[cpu as usize] = r.map(|d| Run { task: d.task, since: self.now, until: d.slice.map(|s| self.now + s) });
        if let Some(d) = r {
            self.disp.push((self.now, CpuId(cpu), d));
        }
        if self.check_invariants {
            self.drv.disp.check_invariants().unwrap();
        }
        if let Some(f) = self.check.take() {
            f(self);
            self.check = Some(f);
        }
    }

    /// Carries out the effects the policies asked for.
    fn settle(&mut self) {
        driver::settle(self, self.now);
    }

    /// Runs until `to`: scheduler events first, then slice expiries, in time order.
    fn advance(&mut self, to: Ns) {
        loop {
            let ev = self.drv.next_deadline();
            let sl = self.running.iter().enumerate().filter_map(|(c, r)| r.as_ref().and_then(|r| r.until).map(|u| (u, c as u16))).min();
            let tick = self.settle_every.map(|p| (self.now / p + 1) * p);
            let next = [ev, sl.map(|s| s.0), tick].into_iter().flatten().min();
            match next {
                Some(at) if at <= to => {
                    self.now = at;
                    if let Some((_, Due::Event { sched, token })) = self.drv.pop_due(at) {
                        driver::fire(self, at, sched, token);
                        self.settle();
                    } else if let Some((_, c)) = sl.filter(|s| s.0 == at) {
                        self.decide(c, Preempt::SliceExpired);
                        self.settle();
                    } else {
                        for c in 0..self.running.len() as u16 {
                            self.account(c);
                        }
                        self.settle();
                    }
                }
                _ => break,
            }
        }
        self.now = to;
    }

    fn block(&mut self, t: TaskId, voluntary: bool) {
        if let Some(c) = (0..self.running.len()).find(|&c| self.running[c].as_ref().is_some_and(|r| r.task == t)) {
            self.account(c as u16);
        }
        if let Some(cpu) = self.drv.disp.block(self.now, t, Block { voluntary }) {
            self.running[cpu.0 as usize] = None;
            self.decide(cpu.0, Preempt::Resched);
        }
        self.settle();
    }

    fn wake(&mut self, t: TaskId, w: Wake) {
        assert!(self.drv.disp.wake(self.now, t, w));
        self.settle();
    }

    fn exit(&mut self, t: TaskId) {
        if let Some(c) = (0..self.running.len()).find(|&c| self.running[c].as_ref().is_some_and(|r| r.task == t)) {
            self.account(c as u16);
        }
        if let Some(cpu) = self.drv.disp.remove_task(self.now, t) {
            self.running[cpu.0 as usize] = None;
            self.decide(cpu.0, Preempt::Resched);
        }
        self.settle();
    }

    fn yield_now(&mut self, cpu: u16) {
        self.decide(cpu, Preempt::Yield);
        self.settle();
    }

    fn msg(&mut self, t: TaskId, req: Request) -> Reply {
        let s = self.drv.disp.default_sched();
        let r = self.drv.disp.message(self.now, s, Sender::ROOT, t, &req);
        self.settle();
        r
    }

    /// (time in mcu, cpu, task) of every dispatch that changed the task on a CPU.
    fn switches(&self) -> Vec<(u64, u16, u32)> {
        let mut last: BTreeMap<u16, u32> = BTreeMap::new();
        let mut out = Vec::new();
        for &(at, cpu, d) in &self.disp {
            if last.get(&cpu.0) != Some(&d.task.0) {
                assert_eq!(at % MCU, 0, "switch at {at} is not on an mcu boundary");
                out.push((at / MCU, cpu.0, d.task.0));
                last.insert(cpu.0, d.task.0);
            }
        }
        out
    }

    /// Switches on CPU 0 as (time in mcu, task).
    fn trace0(&self) -> Vec<(u64, u32)> {
        self.switches().into_iter().filter(|s| s.1 == 0).map(|s| (s.0, s.2)).collect()
    }
}

/// |actual − fair| for every task, all runnable since 0, in ns (fair = now·w_i/Σw).
fn max_lag(sim: &Sim, tasks: &[(TaskId, u64)]) -> u128 {
    let total: u128 = tasks.iter().map(|t| t.1 as u128).sum();
    tasks
        .iter()
        .map(|&(t, w)| {
            let actual = sim.ran(t) as u128 * total;
            let fair = sim.now as u128 * w as u128;
            actual.abs_diff(fair) / total
        })
        .max()
        .unwrap()
}

impl Hooks for Sim {
    fn driver(&mut self) -> &mut Driver {
        &mut self.drv
    }
    fn account(&mut self, _now: Ns, cpu: CpuId) {
        Sim::account(self, cpu.0);
    }
    fn dispatched(&mut self, _now: Ns, cpu: CpuId, _why: Preempt, _before: Option<TaskId>, d: Option<Dispatched>) {
        Sim::dispatched(self, cpu.0, d);
    }
    fn event_time(&mut self, now: Ns, at: Ns) -> Option<Ns> {
        assert!(at >= now, "event in the past");
        Some(at)
    }
}

// ----- §2.1 weighted fair sharing (Figure 1) -----

#[test]
fn fig1_weighted_sharing_two_to_one() {
    // Figure 1: gcc has twice bigsim's weight, C = 2 mcu. gcc must get 1 virtual mcu (C/w)
    // ahead of bigsim, bigsim 2 ahead of gcc: gcc runs 6 mcu, bigsim 3, a 9-mcu window.
    let mut sim = Sim::new(1, cfg(2));
    let gcc = sim.add(params(&[("weight", 2)]), true);
    let bigsim = sim.add(params(&[("weight", 1)]), true);
    let tasks = [(gcc, 2), (bigsim, 1)];
    sim.check = Some(Box::new(move |s: &Sim| {
        // §2.1: "the error between fair share and actual allocation is never greater than
        // the context switch allowance plus one mcu".
        assert!(max_lag(s, &tasks) <= mcu(3) as u128, "lag {} at {}", max_lag(s, &tasks), s.now);
    }));
    sim.advance(mcu(38));
    assert_eq!(sim.trace0(), vec![(0, 0), (2, 1), (5, 0), (11, 1), (14, 0), (20, 1), (23, 0), (29, 1), (32, 0), (38, 1)]);
    // Exactly 2/3 and 1/3 over each 9-mcu window from 2 mcu on.
    assert_eq!((sim.ran(gcc), sim.ran(bigsim)), (mcu(2 + 6 + 6 + 6 + 6), mcu(3 + 3 + 3 + 3)));
    // AVTs: gcc 26 mcu at weight 2 = 13 virtual mcu; bigsim 12.
    assert_eq!(sim.info(gcc).avt, vmcu(13));
    assert_eq!(sim.info(bigsim).avt, vmcu(12));
    assert_eq!(sim.svt(), vmcu(12));
}

#[test]
fn decisions_use_whole_mcu_slices_until_the_crossover() {
    let mut sim = Sim::new(1, cfg(2));
    let a = sim.add(params(&[]), true);
    let b = sim.add(params(&[]), true);
    sim.advance(mcu(2));
    // b takes over at 2 with a slice of exactly 4 mcu: it must run C past a (at 2).
    let (at, _, d) = *sim.disp.last().unwrap();
    assert_eq!((at, d.task, d.slice), (mcu(2), b, Some(mcu(4))));
    sim.advance(mcu(10));
    assert_eq!(sim.trace0(), vec![(0, a.0), (2, b.0), (6, a.0), (10, b.0)]);
}

#[test]
fn equal_evt_ties_go_to_the_lower_task_id() {
    let mut sim = Sim::new(1, cfg(2));
    let a = sim.add(params(&[]), false);
    let b = sim.add(params(&[]), false);
    let c = sim.add(params(&[]), false);
    // All wake at 0 with A = SVT = 0, c first onto the idle CPU; then b and a, equal EVT.
    sim.wake(c, VOL);
    sim.wake(b, VOL);
    sim.wake(a, VOL);
    assert_eq!(sim.running(0), Some(c));
    // c runs C past them; the tie between a and b goes to the lower id, a. b (A 0) then
    // runs until C past a and c (A 2); at 8 the tie between a and c goes to a again.
    sim.advance(mcu(8));
    assert_eq!(sim.trace0(), vec![(0, c.0), (2, a.0), (4, b.0), (8, a.0)]);
}

// ----- §2 charging in whole mcu -----

#[test]
fn partial_mcu_is_charged_once_per_started_mcu() {
    let mut sim = Sim::new(1, cfg(2));
    let t = sim.add(params(&[]), true);
    sim.now = 3 * MS;
    sim.account(0);
    assert_eq!(sim.info(t).avt, vmcu(1), "3 ms rounds up to one mcu");
    sim.now = 12 * MS;
    sim.account(0);
    assert_eq!(sim.info(t).avt, vmcu(2), "the second mcu starts at 10 ms");
    sim.now = 25 * MS;
    sim.account(0);
    assert_eq!(sim.info(t).avt, vmcu(3), "25 ms in three settlements: three mcu");
    sim.now = 27 * MS;
    sim.block(t, true);
    assert_eq!(sim.info(t).avt, vmcu(3), "27 ms is still within the third mcu");
    // The rest of the third mcu is forfeited at the switch: 1 ms more starts a new mcu.
    sim.now = 40 * MS;
    sim.wake(t, VOL);
    assert_eq!(sim.running(0), Some(t));
    sim.now = 41 * MS;
    sim.block(t, true);
    assert_eq!(sim.info(t).avt, vmcu(4));
    assert_eq!(sim.ran(t), 28 * MS);
}

#[test]
fn odd_weights_are_charged_exactly_over_time() {
    // 720720 = lcm(1..16): weight 7 has an integral mcu advance; weight 17 carries a remainder.
    let mut sim = Sim::new(1, cfg(2));
    let t = sim.add(params(&[("weight", 17)]), true);
    for i in 1..=17 {
        sim.now = mcu(i);
        sim.account(0);
    }
    assert_eq!(sim.info(t).avt, vmcu(1), "17 mcu at weight 17 is exactly one virtual mcu");
}

// ----- §2.1 SVT and sleeping (Figure 2) -----

#[test]
fn fig2_voluntary_sleep_brings_avt_up_to_svt() {
    // gcc sleeps from 0 to 15 while bigsim runs alone (never accounted: the policy
    // estimates the running task's progress at the wake-up).
    let mut sim = Sim::new(1, cfg(2));
    let bigsim = sim.add(params(&[]), true);
    let gcc = sim.add(params(&[("weight", 2)]), false);
    sim.advance(mcu(15));
    sim.wake(gcc, VOL);
    assert_eq!(sim.info(gcc).avt, vmcu(15), "A_gcc ← max(A_gcc, SVT)");
    assert_eq!(sim.running(0), Some(bigsim), "equal EVT: no preemption");
    // bigsim keeps the CPU until it is C ahead (17); then they share 2:1 again.
    sim.advance(mcu(32));
    assert_eq!(sim.trace0(), vec![(0, 0), (17, 1), (23, 0), (26, 1), (32, 0)]);
    assert_eq!(sim.ran(gcc), mcu(6 + 6));
}

#[test]
fn fig2_without_the_svt_adjustment_the_sleeper_starves_the_other() {
    // The same as above with `svt_adjust = false`: gcc wakes with A = 0 while bigsim is at
    // 15, preempts it at once, and keeps the CPU until it is C/w past bigsim: A_gcc = 16
    // virtual mcu, 32 mcu of running at weight 2 (the paper's "lower thin line").
    let mut sim = Sim::new(1, BvtConfig { svt_adjust: false, ..cfg(2) });
    let bigsim = sim.add(params(&[]), true);
    let gcc = sim.add(params(&[("weight", 2)]), false);
    sim.advance(mcu(15));
    sim.wake(gcc, VOL);
    assert_eq!(sim.info(gcc).avt, 0, "no A_i ← max(A_i, SVT)");
    assert_eq!(sim.running(0), Some(gcc), "EVT 0 < 15: gcc preempts bigsim");
    sim.advance(mcu(60));
    assert_eq!(sim.trace0(), vec![(0, 0), (15, 1), (47, 0), (50, 1), (56, 0), (59, 1)]);
    assert_eq!(sim.ran(bigsim), mcu(15 + 3 + 3), "accounted up to the last switch");
}

#[test]
fn svt_adjust_is_a_scheduler_parameter() {
    let empty = BTreeMap::new();
    assert!(bvt::build(&mut Params::new("bvt", &empty)).unwrap().config().svt_adjust);
    let off: BTreeMap<String, ParamValue> = [("svt_adjust".to_string(), ParamValue::Bool(false))].into();
    let mut p = Params::new("bvt", &off);
    assert!(!bvt::build(&mut p).unwrap().config().svt_adjust);
    p.finish().unwrap();
    let bad: BTreeMap<String, ParamValue> = [("svt_adjust".to_string(), ParamValue::Int(0))].into();
    assert!(bvt::build(&mut Params::new("bvt", &bad)).is_err());
}

#[test]
fn c_weight_measures_the_allowance_in_one_weights_virtual_time() {
    // Weights 1 and 2, C = 2 mcu. §2.1 (c_weight = 0): each runs C real time past the other.
    let mut sim = Sim::new(1, cfg(2));
    sim.add(params(&[]), true);
    sim.add(params(&[("weight", 2)]), true);
    sim.advance(mcu(12));
    assert_eq!(sim.trace0(), vec![(0, 0), (2, 1), (8, 0), (11, 1)]);
    // c_weight = 2: both switch once 1 virtual mcu (C/2) past the other.
    let mut sim = Sim::new(1, BvtConfig { c_weight: 2, ..cfg(2) });
    sim.add(params(&[]), true);
    sim.add(params(&[("weight", 2)]), true);
    sim.advance(mcu(12));
    assert_eq!(sim.trace0(), vec![(0, 0), (1, 1), (5, 0), (7, 1), (11, 0)]);
    let map: BTreeMap<String, ParamValue> = [("c_weight".to_string(), ParamValue::Int(10))].into();
    let mut p = Params::new("bvt", &map);
    assert_eq!(bvt::build(&mut p).unwrap().config().c_weight, 10);
    p.finish().unwrap();
    let bad: BTreeMap<String, ParamValue> = [("c_weight".to_string(), ParamValue::Int(-1))].into();
    assert!(bvt::build(&mut Params::new("bvt", &bad)).is_err());
}

#[test]
fn fig2_involuntary_block_keeps_avt_and_holds_svt_back() {
    let mut sim = Sim::new(1, cfg(2));
    let gcc = sim.add(params(&[("weight", 2)]), true);
    let bigsim = sim.add(params(&[]), true);
    sim.block(gcc, false); // a page fault right after being dispatched
    sim.advance(mcu(10));
    sim.account(0);
    assert_eq!(sim.info(bigsim).avt, vmcu(10));
    assert_eq!(sim.svt(), 0, "the faulting task still counts in SVT");
    sim.advance(mcu(15));
    sim.wake(gcc, Wake { voluntary: false, ..VOL });
    assert_eq!(sim.info(gcc).avt, 0, "it keeps its AVT");
    // Its EVT 0 < 15: it runs at once, until 1 virtual mcu past bigsim (32 mcu).
    assert_eq!(sim.running(0), Some(gcc));
    sim.advance(mcu(50));
    assert_eq!(sim.trace0(), vec![(0, 0), (0, 1), (15, 0), (47, 1), (50, 0)]);
}

#[test]
fn voluntary_sleeper_does_not_hold_svt_and_new_tasks_start_at_svt() {
    let mut sim = Sim::new(1, cfg(2));
    let a = sim.add(params(&[]), true);
    let b = sim.add(params(&[]), true);
    sim.block(b, true);
    sim.advance(mcu(10));
    sim.account(0);
    assert_eq!(sim.svt(), vmcu(10));
    let c = sim.add(params(&[]), true);
    assert_eq!(sim.info(c).avt, vmcu(10));
    // All blocked: SVT stays where it was.
    sim.block(a, true);
    sim.block(c, true);
    assert_eq!(sim.svt(), vmcu(10));
    sim.now = mcu(100);
    sim.wake(b, VOL);
    assert_eq!(sim.info(b).avt, vmcu(10));
}

// ----- §2.2 warp (Figures 3 and 4) -----

/// Figure 1's pair plus an MPEG player (weight 1, warp 50 virtual mcu) asleep at 0.
fn fig3_setup(warp: i64, extra: &[(&str, i64)]) -> (Sim, TaskId, TaskId, TaskId) {
    let mut sim = Sim::new(1, cfg(2));
    let gcc = sim.add(params(&[("weight", 2)]), true);
    let bigsim = sim.add(params(&[]), true);
    let mut p = params(&[("warp", warp)]);
    p.extend(params(extra));
    let mpeg = sim.add(p, false);
    (sim, gcc, bigsim, mpeg)
}

#[test]
fn fig3_warped_wakeup_is_dispatched_immediately() {
    let (mut sim, gcc, _bigsim, mpeg) = fig3_setup(mcu(50) as i64, &[]);
    sim.advance(mcu(5)); // gcc (A 1) has just taken over from bigsim (A 3)
    sim.wake(mpeg, VOL);
    assert_eq!(sim.running(0), Some(mpeg));
    let i = sim.info(mpeg);
    assert_eq!(i.avt, vmcu(1), "its AVT is brought up to SVT");
    assert_eq!(i.evt, vmcu(1) - vmcu(50));
    assert!(i.warped);
    sim.advance(mcu(10));
    sim.block(mpeg, true);
    assert_eq!(sim.running(0), Some(gcc));
    sim.advance(mcu(15));
    sim.wake(mpeg, VOL);
    assert_eq!(sim.running(0), Some(mpeg), "again at the second frame");
    sim.advance(mcu(20));
    sim.block(mpeg, true);
    assert_eq!(sim.trace0(), vec![(0, 0), (2, 1), (5, 0), (5, 2), (10, 0), (15, 2), (20, 1)]);
    // It is charged for what it used: 10 mcu at weight 1 from A = 1.
    assert_eq!(sim.info(mpeg).avt, vmcu(11));
}

#[test]
fn fig3_without_warp_the_wakeup_waits() {
    let (mut sim, gcc, _bigsim, mpeg) = fig3_setup(0, &[]);
    sim.advance(mcu(5));
    sim.wake(mpeg, VOL);
    assert_eq!(sim.running(0), Some(gcc), "EVT equal to the running task's: no preemption");
}

#[test]
fn fig4_warp_time_limit_unwarps_a_looping_task() {
    // The MPEG player wakes at 5 and loops; with L = 5 mcu it is unwarped at 10.
    let (mut sim, gcc, bigsim, mpeg) = fig3_setup(mcu(50) as i64, &[("warp_limit", mcu(5) as i64)]);
    sim.advance(mcu(5));
    sim.wake(mpeg, VOL);
    assert_eq!(sim.running(0), Some(mpeg));
    sim.advance(mcu(10));
    assert_eq!(sim.running(0), Some(gcc), "unwarped at exactly L: the lowest EVT runs");
    let i = sim.info(mpeg);
    assert!(!i.warped && !i.warp_back);
    assert_eq!(i.avt, vmcu(6));
    assert_eq!(sim.log(), vec![BvtLogEntry { at: mcu(10), task: mpeg, event: BvtLogEvent::WarpLimit { warped_for: mcu(5) } }]);
    // From now on it time-slices as an ordinary task: weighted sharing resumes.
    sim.advance(mcu(100));
    assert!(!sim.info(mpeg).warped);
    let (g, b, m) = (sim.info(gcc).avt, sim.info(bigsim).avt, sim.info(mpeg).avt);
    for x in [g, b, m] {
        assert!((x - sim.svt()) <= vmcu(4), "AVTs stay within C/w + m of SVT");
    }
    // The task asks to warp again (L set, U = 0): allowed at once.
    assert_eq!(sim.msg(mpeg, Request::Warp { on: true }), Reply::Ok);
    assert!(sim.info(mpeg).warped);
    assert_eq!(sim.running(0), Some(mpeg));
}

#[test]
fn unwarp_time_requirement_defers_a_warp_request() {
    // mpeg: warp 50, L = 2, U = 20 mcu, against one batch task (weight 1, C = 2 mcu).
    let mut sim = Sim::new(1, cfg(2));
    let bigsim = sim.add(params(&[]), true);
    let mpeg = sim.add(params(&[("warp", mcu(50) as i64), ("warp_limit", mcu(2) as i64), ("unwarp", mcu(20) as i64)]), false);
    sim.advance(mcu(5));
    sim.wake(mpeg, VOL); // warped: runs at once
    sim.advance(mcu(6));
    sim.block(mpeg, true); // the episode ends at 6: no warp before 26
    sim.advance(mcu(10));
    sim.wake(mpeg, VOL); // attempts to warp within U: runs unwarped, at SVT (9)
    assert!(!sim.info(mpeg).warped);
    assert_eq!(sim.info(mpeg).avt, vmcu(9));
    assert_eq!(sim.running(0), Some(bigsim));
    sim.advance(mcu(40));
    assert_eq!(sim.trace0(), vec![(0, 0), (5, 1), (6, 0), (12, 1), (16, 0), (20, 1), (24, 0), (26, 1), (28, 0), (32, 1), (36, 0), (40, 1)]);
    assert_eq!(
        sim.log(),
        vec![
            BvtLogEntry { at: mcu(10), task: mpeg, event: BvtLogEvent::WarpDenied { until: mcu(26) } },
            BvtLogEntry { at: mcu(26), task: mpeg, event: BvtLogEvent::WarpResumed },
            BvtLogEntry { at: mcu(28), task: mpeg, event: BvtLogEvent::WarpLimit { warped_for: mcu(2) } },
        ]
    );
    let i = sim.info(mpeg);
    assert!(!i.warped && !i.warp_back);
}

#[test]
fn an_involuntary_block_does_not_end_a_warped_episode() {
    // warp 50, L = 4, U = 20 mcu. A page fault at 7 keeps the episode (and its budget) going:
    // it is unwarped at 10 after 4 mcu warped in all. A voluntary sleep at 7 ends it instead,
    // so the wake-up at 8 is within U and runs unwarped.
    for voluntary in [false, true] {
        let mut sim = Sim::new(1, cfg(2));
        let bigsim = sim.add(params(&[]), true);
        let mpeg = sim.add(params(&[("warp", mcu(50) as i64), ("warp_limit", mcu(4) as i64), ("unwarp", mcu(20) as i64)]), false);
        sim.advance(mcu(5));
        sim.wake(mpeg, VOL);
        sim.advance(mcu(7));
        sim.block(mpeg, voluntary);
        sim.advance(mcu(8));
        sim.wake(mpeg, Wake { voluntary, ..VOL });
        sim.advance(mcu(10));
        if voluntary {
            assert_eq!(sim.running(0), Some(bigsim));
            assert_eq!(sim.log(), vec![BvtLogEntry { at: mcu(8), task: mpeg, event: BvtLogEvent::WarpDenied { until: mcu(27) } }]);
        } else {
            assert_eq!(sim.trace0(), vec![(0, 0), (5, 1), (7, 0), (8, 1), (10, 0)]);
            assert_eq!(sim.info(mpeg).avt, vmcu(9), "A kept over the fault: 5 + 2 + 2");
            assert_eq!(sim.log(), vec![BvtLogEntry { at: mcu(10), task: mpeg, event: BvtLogEvent::WarpLimit { warped_for: mcu(4) } }]);
        }
    }
}

#[test]
fn exited_tasks_are_forgotten() {
    let mut sim = Sim::new(1, cfg(2));
    let a = sim.add(params(&[]), true);
    let w = sim.add(params(&[("warp", mcu(50) as i64), ("warp_limit", mcu(5) as i64)]), true);
    let b = sim.add(params(&[]), true);
    assert_eq!(sim.running(0), Some(w), "warped: it preempts at once");
    sim.advance(mcu(1));
    sim.exit(w); // its warp-limit event is cancelled; a stale one would be ignored
    assert_eq!(sim.bvt.lock().unwrap().task_count(), 2);
    assert!(sim.bvt.lock().unwrap().task_info(w).is_none());
    sim.exit(b); // queued, not running
    sim.advance(mcu(20));
    assert!(sim.disp.iter().filter(|d| d.0 > mcu(1)).all(|d| d.2.task == a));
    let r = sim.drv.disp.message(sim.now, sim.drv.disp.default_sched(), Sender::ROOT, a, &Request::Warp { on: true });
    assert_eq!(r, Reply::Ok);
}

#[test]
fn warp_on_by_message_and_by_wakeup_flag() {
    let mut sim = Sim::new(1, cfg(2));
    let batch = sim.add(params(&[]), true);
    let x = sim.add(params(&[("warp", mcu(30) as i64), ("warp_on", 0)]), true);
    assert!(!sim.info(x).warp_back);
    assert_eq!(sim.running(0), Some(batch));
    sim.advance(mcu(1));
    assert_eq!(sim.msg(x, Request::Warp { on: true }), Reply::Ok);
    assert_eq!(sim.running(0), Some(x), "warped: EVT far below the running task's");
    assert_eq!(sim.info(x).evt, sim.info(x).avt - vmcu(30));
    sim.advance(mcu(2));
    assert_eq!(sim.msg(x, Request::Warp { on: false }), Reply::Ok);
    let i = sim.info(x);
    assert!(!i.warped && !i.warp_back);
    // x ran 1 mcu (A 1), batch has A 1: x keeps the CPU until it is C ahead (§2.1).
    assert_eq!(sim.running(0), Some(x));
    sim.advance(mcu(4));
    assert_eq!(sim.running(0), Some(batch));
    // A wake-up flagged SA_BVT_WARP turns warp on.
    sim.block(x, true);
    sim.advance(mcu(6));
    sim.wake(x, Wake { warp: true, ..VOL });
    assert!(sim.info(x).warped);
    assert_eq!(sim.running(0), Some(x));
}

/// A warp given by message (`ctl set warp`, the agent's `join --param warp=...`) works as
/// one given at creation: the task runs warped at once and at each wake (§2.2's
/// warpBack), and a warp set back to 0 ends it. (It set W and left warpBack false, so
/// the task never warped: the agent's real.video.bvt_warp, 42-52 % of frames late.)
#[test]
fn warp_given_by_message_warps_at_each_wake() {
    let (mut sim, gcc, _bigsim, mpeg) = fig3_setup(0, &[]);
    let set = |v: u64| Request::Param { name: "warp".into(), value: v as i64 };
    assert_eq!(sim.msg(mpeg, set(mcu(50))), Reply::Ok);
    assert!(sim.info(mpeg).warp_back);
    sim.advance(mcu(5));
    sim.wake(mpeg, VOL);
    assert_eq!(sim.running(0), Some(mpeg), "dispatched at its wake, as in Figure 3");
    assert!(sim.info(mpeg).warped);
    sim.advance(mcu(10));
    sim.block(mpeg, true);
    sim.advance(mcu(15));
    sim.wake(mpeg, VOL);
    assert_eq!(sim.running(0), Some(mpeg), "again at the second frame");
    sim.advance(mcu(20));
    sim.block(mpeg, true);
    assert_eq!(sim.msg(mpeg, set(0)), Reply::Ok);
    let i = sim.info(mpeg);
    assert!(!i.warped && !i.warp_back);
    sim.advance(mcu(25));
    sim.wake(mpeg, VOL);
    assert_eq!(sim.running(0), Some(gcc), "without warp the wake-up waits");
}

#[test]
fn warp_never_enabled_without_a_warp_value() {
    let mut sim = Sim::new(1, cfg(2));
    let _a = sim.add(params(&[]), true);
    let b = sim.add(params(&[]), false);
    sim.wake(b, Wake { warp: true, ..VOL });
    let i = sim.info(b);
    assert!(i.warp_back && !i.warped);
    assert_eq!(i.evt, i.avt);
}

// ----- §3/§4 wake-up preemption vs the §2.1 allowance -----

#[test]
fn wake_preemption_immediate_vs_allowance() {
    for (mode, warp, expect_now) in [
        (WakePreempt::Immediate, 1, true),  // EVT 4 < 5: dispatched at once (§3)
        (WakePreempt::Allowance, 1, false), // 5 − 4 < C: waits for the crossover (§2.1)
        (WakePreempt::Allowance, 3, true),  // 5 − 2 ≥ C
    ] {
        let mut sim = Sim::new(1, BvtConfig { wake_preempt: mode, ..cfg(2) });
        let b = sim.add(params(&[]), true);
        let x = sim.add(params(&[("warp", mcu(warp) as i64)]), false);
        sim.advance(mcu(5));
        sim.wake(x, VOL);
        assert_eq!(sim.running(0) == Some(x), expect_now, "{mode:?} warp {warp}");
        if !expect_now {
            // The crossover: b (A 0 at its dispatch) must get C past x's EVT 4: at 6.
            sim.advance(mcu(6));
            assert_eq!(sim.trace0(), vec![(0, b.0), (6, x.0)]);
        }
    }
}

// ----- yield -----

#[test]
fn a_yielding_task_is_passed_over_once() {
    let mut sim = Sim::new(1, cfg(2));
    let a = sim.add(params(&[]), true);
    let b = sim.add(params(&[]), true);
    sim.now = mcu(1);
    sim.yield_now(0);
    assert_eq!(sim.running(0), Some(b));
    // Alone, a yielding task runs again.
    sim.block(a, true);
    sim.now = mcu(2);
    sim.yield_now(0);
    assert_eq!(sim.running(0), Some(b));
}

// ----- §2.4 multiprocessor -----

fn mp_first_migration(penalty_mcu: u64) -> (u64, Vec<(u64, u16, u32)>) {
    let mut sim = Sim::new(2, BvtConfig { migration_penalty: mcu(penalty_mcu), ..cfg(2) });
    for _ in 0..3 {
        sim.add(params(&[]), true);
    }
    sim.advance(mcu(12));
    let first = sim.disp.iter().find(|d| d.2.migrated).map(|d| d.0 / MCU).unwrap();
    (first, sim.switches())
}

#[test]
fn migration_penalty_keeps_tasks_on_their_cpu() {
    // Three equal tasks on two CPUs, C = 2 mcu. Without a penalty task 0 (preempted on
    // CPU 0 at 2) moves to CPU 1 at 4; with M = 3 virtual mcu CPU 1 keeps task 1 until
    // task 2 is C behind it including the penalty (9), and task 0 returns to CPU 0 at 6.
    let (first, sw) = mp_first_migration(0);
    assert_eq!(first, 4);
    assert!(sw.contains(&(4, 1, 0)));
    let (first, sw) = mp_first_migration(3);
    assert_eq!(first, 9);
    assert_eq!(sw.iter().filter(|s| s.0 <= 9).copied().collect::<Vec<_>>(), vec![(0, 0, 0), (0, 1, 1), (2, 0, 2), (6, 0, 0), (9, 1, 2)]);
}

#[test]
fn multiprocessor_shares_stay_fair() {
    // Five equal tasks on two CPUs: every task's share converges to 2/5.
    let mut sim = Sim::new(2, cfg(2));
    let ts: Vec<TaskId> = (0..5).map(|_| sim.add(params(&[]), true)).collect();
    sim.advance(mcu(1000));
    for &t in &ts {
        let r = sim.ran(t) as i128;
        assert!((r - mcu(400) as i128).abs() <= mcu(10) as i128, "{t}: {r}");
    }
}

#[test]
fn affinity_is_respected() {
    let mut sim = Sim::new(2, cfg(2));
    let pinned = sim.add_full(params(&[("warp", mcu(100) as i64)]), CpuSet::only(CpuId(1)), None, true);
    let _a = sim.add(params(&[]), true);
    let _b = sim.add(params(&[]), true);
    sim.advance(mcu(50));
    assert!(sim.disp.iter().filter(|d| d.2.task == pinned).all(|d| d.1 == CpuId(1)));
}

// ----- inheritance -----

#[test]
fn a_child_inherits_its_parents_parameters() {
    let mut sim = Sim::new(1, cfg(2));
    let parent = sim.add(params(&[("weight", 3), ("warp", mcu(7) as i64), ("warp_limit", mcu(2) as i64), ("unwarp", mcu(5) as i64)]), true);
    let child = sim.add_full(params(&[]), CpuSet::first(1), Some(parent), true);
    let i = sim.info(child);
    assert_eq!((i.weight, i.warp, i.warp_limit, i.unwarp), (3, mcu(7), mcu(2), mcu(5)));
    assert!(i.warp_back);
    // Explicit parameters of the child override what it inherits.
    let c2 = sim.add_full(params(&[("weight", 1)]), CpuSet::first(1), Some(parent), true);
    let i = sim.info(c2);
    assert_eq!((i.weight, i.warp, i.warp_limit, i.unwarp), (1, mcu(7), mcu(2), mcu(5)));
    // An unknown parent gives the defaults.
    let orphan = sim.add_full(params(&[]), CpuSet::first(1), Some(TaskId(999)), true);
    let i = sim.info(orphan);
    assert_eq!((i.weight, i.warp, i.warp_limit, i.unwarp, i.warp_back), (1, 0, 0, 0, false));
}

// ----- overflow -----

#[test]
fn virtual_time_does_not_overflow_over_a_very_long_run() {
    // Two equal tasks share one CPU for 2^63 ns (292 years) with C = 2^58 ns: each AVT
    // reaches 2^62 virtual ns (2^62 · VT_SCALE units, about 2^81.5). Debug builds trap
    // any overflow.
    let c = 1u64 << 58;
    let mut sim = Sim::new(1, BvtConfig { mcu: MCU, c, ..BvtConfig::default() });
    let a = sim.add(params(&[]), true);
    let b = sim.add(params(&[]), true);
    let end = 1u64 << 63;
    sim.advance(end);
    sim.account(0);
    for t in [a, b] {
        // Weight 1: the AVT is exactly the CPU time charged in whole mcu.
        let avt = sim.info(t).avt;
        assert!(avt >= ((1i128 << 62) - (c as i128) * 2) * VT_SCALE, "{avt}");
        assert_eq!(avt % (MCU as i128 * VT_SCALE), 0);
        assert!(avt >= sim.ran(t) as i128 * VT_SCALE);
        assert!(avt <= (sim.ran(t) + MCU) as i128 * VT_SCALE);
    }
    assert!(sim.ran(a).abs_diff(sim.ran(b)) <= c + MCU);
    // A sleeper woken now is brought up to SVT, and a huge warp still orders correctly.
    let x = sim.add(params(&[("warp", 1i64 << 62)]), false);
    sim.wake(x, VOL);
    assert_eq!(sim.info(x).avt, sim.svt().max(sim.info(x).avt));
    assert!(sim.info(x).avt >= (1i128 << 62) * VT_SCALE - 2 * (c as i128) * VT_SCALE);
    assert_eq!(sim.running(0), Some(x));
    sim.advance(end + mcu(3));
    sim.block(x, true);
    assert_eq!(sim.info(x).avt - sim.svt(), vmcu(3));
}

// ----- §6.3.2 interactivity heuristic -----

#[test]
fn interactive_heuristic_moves_warp_between_zero_and_w_int() {
    let mut sim = Sim::new(1, BvtConfig { interactive: true, w_int: mcu(4), ..cfg(2) });
    sim.settle_every = Some(MCU); // the mechanism settles accounts at every tick
    let hog = sim.add(params(&[]), true);
    let int = sim.add(params(&[]), false);
    let real_time = sim.add(params(&[("warp", 0)]), false);
    assert_eq!(sim.info(hog).interactive_level, Some(4));
    assert_eq!(sim.info(hog).warp, mcu(4));
    assert_eq!(sim.info(real_time).interactive_level, None, "an explicit warp is left alone");
    // The hog runs a quantum (C = 2 mcu) at a time without blocking: one level per quantum.
    sim.advance(mcu(2));
    assert_eq!(sim.info(hog).interactive_level, Some(3));
    sim.advance(mcu(8));
    assert_eq!(sim.info(hog).interactive_level, Some(0));
    assert_eq!(sim.info(hog).warp, 0);
    // The interactive task wakes, runs well under a quantum and sleeps: it keeps W_int and
    // is dispatched at once on each wake-up (EVT = SVT − W_int).
    for k in 1..=5u64 {
        sim.advance(mcu(10 * k));
        sim.wake(int, VOL);
        assert_eq!(sim.running(0), Some(int), "wake-up {k}");
        sim.advance(mcu(10 * k + 1));
        sim.block(int, true);
        assert_eq!(sim.info(int).interactive_level, Some(4));
        assert_eq!(sim.info(int).warp, mcu(4));
    }
    assert_eq!(sim.info(hog).interactive_level, Some(0));
    // A task that turns batch-like loses its warp; blocking early wins it back.
    sim.wake(int, VOL);
    sim.advance(mcu(90));
    assert_eq!(sim.info(int).interactive_level, Some(0), "it ran many quanta without blocking");
    assert!(sim.ran(int) >= mcu(5 + 10), "it shared the CPU: {}", sim.ran(int));
    sim.block(hog, true);
    sim.block(int, true); // after a long burst: no credit
    assert_eq!(sim.info(int).interactive_level, Some(0));
    for k in 0..4u64 {
        sim.advance(mcu(100 + 2 * k));
        sim.wake(int, VOL);
        sim.advance(mcu(100 + 2 * k + 1));
        sim.block(int, true);
        assert_eq!(sim.info(int).interactive_level, Some(k as u32 + 1));
    }
    assert_eq!(sim.info(int).warp, mcu(4));
}

// ----- messages and bad parameters -----

#[test]
fn messages_set_parameters_and_refuse_bad_values() {
    let mut sim = Sim::new(1, cfg(2));
    let t = sim.add(params(&[]), true);
    let p = |name: &str, value: i64| Request::Param { name: name.into(), value };
    assert_eq!(sim.msg(t, p("weight", 4)), Reply::Ok);
    assert_eq!(sim.msg(t, p("warp", mcu(3) as i64)), Reply::Ok);
    assert_eq!(sim.msg(t, p("warp_limit", mcu(1) as i64)), Reply::Ok);
    assert_eq!(sim.msg(t, p("unwarp", mcu(9) as i64)), Reply::Ok);
    let i = sim.info(t);
    assert_eq!((i.weight, i.warp, i.warp_limit, i.unwarp), (4, mcu(3), mcu(1), mcu(9)));
    for (name, value) in [
        ("weight", 0),
        ("weight", -2),
        ("weight", MAX_WEIGHT + 1),
        ("warp", -1),
        ("warp_limit", -1),
        ("unwarp", -5),
        ("warp", i64::MAX),
        ("priority", 3),
    ] {
        let r = sim.msg(t, p(name, value));
        assert!(matches!(&r, Reply::Refused(why) if why.contains(name)), "{name}={value}: {r:?}");
    }
    assert!(matches!(sim.msg(t, Request::Set { delay: 5 }), Reply::Refused(_)));
    // Nothing changed by the refusals.
    assert_eq!(sim.info(t).weight, 4);
}

#[test]
fn weight_change_takes_effect_on_later_charges() {
    let mut sim = Sim::new(1, cfg(2));
    let t = sim.add(params(&[]), true);
    sim.now = mcu(2);
    sim.account(0);
    assert_eq!(sim.info(t).avt, vmcu(2));
    let r = sim.msg(t, Request::Param { name: "weight".into(), value: 2 });
    assert_eq!(r, Reply::Ok);
    sim.now = mcu(4);
    sim.account(0);
    assert_eq!(sim.info(t).avt, vmcu(3));
}

struct View;
impl TaskView for View {
    fn state(&self, _: TaskId) -> TaskState {
        TaskState::Runnable
    }
    fn affinity(&self, _: TaskId) -> CpuSet {
        CpuSet::first(1)
    }
    fn owner(&self, _: TaskId) -> Option<SchedId> {
        Some(SchedId(0))
    }
    fn last_cpu(&self, _: TaskId) -> Option<CpuId> {
        None
    }
    fn running_on(&self, _: CpuId) -> Option<TaskId> {
        None
    }
}

#[test]
fn bad_task_parameters_are_refused_at_attach() {
    let mut b = Bvt::default();
    let (mut fx, mut ex) = (Vec::new(), Vec::new());
    let mut ctx = Ctx::new(0, 1, SchedId(0), &mut fx, &mut ex, &View);
    for (kv, word) in [
        (params(&[("weight", 0)]), "weight"),
        (params(&[("weight", -1)]), "weight"),
        (params(&[("weight", MAX_WEIGHT + 1)]), "weight"),
        (params(&[("warp", -1)]), "warp"),
        (params(&[("warp_limit", -1)]), "warp_limit"),
        (params(&[("unwarp", -1)]), "unwarp"),
        (params(&[("warp_on", 2)]), "warp_on"),
    ] {
        let info = AttachInfo { state: TaskState::Runnable, params: &kv, affinity: CpuSet::first(1), parent: None, guest: false };
        let e = b.on_attach(&mut ctx, TaskId(0), &info).unwrap_err();
        assert!(e.contains(word), "{e}");
    }
    assert_eq!(b.task_count(), 0);
    let ok = params(&[("weight", 5), ("other_policys_param", -7)]);
    let info = AttachInfo { state: TaskState::Runnable, params: &ok, affinity: CpuSet::first(1), parent: None, guest: false };
    assert!(b.on_attach(&mut ctx, TaskId(0), &info).is_ok());
}

#[test]
fn bad_parameters_are_refused_through_the_dispatcher() {
    let mut sim = Sim::new(1, cfg(2));
    let r = sim.drv.disp.try_add_task(0, params(&[("weight", 7), ("unwarp", -3)]), CpuSet::first(1), None, true);
    let (t, why) = r.unwrap_err();
    assert!(why.contains("unwarp"), "{why}");
    assert_eq!(sim.drv.disp.state(t), TaskState::Dead);
    // A task with good parameters may join a second BVT scheduler (a reserved-effort level).
    let upper = sim.drv.disp.register("bvt-re", Box::new(Bvt::default()), Usage::Reserved { cpu_ppm: 500_000 }, Position::Top).unwrap();
    let good = sim.add(params(&[("weight", 7)]), true);
    assert_eq!(sim.drv.disp.message(sim.now, upper, Sender::ROOT, good, &Request::Join), Reply::Ok);
    assert_eq!(sim.drv.disp.owner(good), Some(upper));
}

// ----- guests -----

#[test]
fn guests_are_run_like_own_tasks() {
    let mut sim = Sim::new(1, cfg(2));
    let own = sim.add(params(&[]), true);
    let g = sim.add(params(&[]), true);
    let upper = sim.drv.disp.register("abstain", Box::new(Abstain), Usage::Reserved { cpu_ppm: 100_000 }, Position::Top).unwrap();
    assert_eq!(sim.drv.disp.message(sim.now, upper, Sender::ROOT, g, &Request::Join), Reply::Ok);
    sim.settle();
    assert!(sim.drv.disp.is_guest(g));
    sim.advance(mcu(100));
    assert!(sim.ran(g).abs_diff(sim.ran(own)) <= mcu(3), "{} vs {}", sim.ran(g), sim.ran(own));
}

// ----- builder -----

#[test]
fn build_reads_parameters_with_the_papers_defaults() {
    let empty = BTreeMap::new();
    let mut p = Params::new("bvt", &empty);
    let b = bvt::build(&mut p).unwrap();
    p.finish().unwrap();
    let c = *b.config();
    assert_eq!((c.mcu, c.c, c.migration_penalty, c.interactive, c.w_int), (10 * MS, 200 * MS, 0, false, 200 * MS));
    assert_eq!(c.wake_preempt, WakePreempt::Immediate);
    assert_eq!(b.kind(), "bvt");

    let map: BTreeMap<String, ParamValue> = [
        ("mcu", ParamValue::Str("1ms".into())),
        ("c", ParamValue::Str("5ms".into())),
        ("migration_penalty", ParamValue::Str("2ms".into())),
        ("interactive", ParamValue::Bool(true)),
        ("wake_preempt", ParamValue::Str("allowance".into())),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let mut p = Params::new("bvt", &map);
    let c = *bvt::build(&mut p).unwrap().config();
    p.finish().unwrap();
    assert_eq!((c.mcu, c.c, c.migration_penalty, c.interactive, c.w_int), (MS, 5 * MS, 2 * MS, true, 5 * MS));
    assert_eq!(c.wake_preempt, WakePreempt::Allowance);

    let zero: BTreeMap<String, ParamValue> = [("mcu".to_string(), ParamValue::Str("0ms".into()))].into();
    assert!(bvt::build(&mut Params::new("bvt", &zero)).unwrap_err().contains("mcu"));
    let bad: BTreeMap<String, ParamValue> = [("c".to_string(), ParamValue::Int(3))].into();
    assert!(bvt::build(&mut Params::new("bvt", &bad)).is_err());
}

// ----- many tasks -----

#[test]
fn many_equal_tasks_round_robin_by_id() {
    let mut sim = Sim::new(1, cfg(1));
    sim.check_invariants = false;
    let n = 20_000u32;
    for _ in 0..n {
        sim.add(params(&[]), true);
    }
    sim.advance(mcu(200));
    // Task 0 runs first; each newcomer is C = 1 mcu behind the runner: tasks rotate by id.
    let order: Vec<u32> = sim.trace0().iter().take(6).map(|s| s.1).collect();
    assert_eq!(order, vec![0, 1, 2, 3, 4, 5]);
}

// ----- properties -----

/// Runs `weights` (all runnable from 0) for `horizon` mcu and returns the largest lag
/// seen at any decision.
fn run_shares(weights: &[u64], warps: &[u64], c_mcu: u64, horizon: u64, toggles: &[(u64, usize)]) -> (u128, Sim) {
    let mut sim = Sim::new(1, cfg(c_mcu));
    let tasks: Vec<(TaskId, u64)> =
        weights.iter().zip(warps).map(|(&w, &wp)| (sim.add(params(&[("weight", w as i64), ("warp", mcu(wp) as i64)]), true), w)).collect();
    let worst = Arc::new(Mutex::new(0u128));
    let (w2, t2) = (worst.clone(), tasks.clone());
    sim.check = Some(Box::new(move |s: &Sim| {
        let l = max_lag(s, &t2);
        let mut w = w2.lock().unwrap();
        *w = (*w).max(l);
    }));
    let mut toggles = toggles.to_vec();
    toggles.sort();
    for (at, who) in toggles {
        if at < horizon {
            sim.advance(mcu(at));
            let t = tasks[who % tasks.len()].0;
            let on = !sim.info(t).warp_back;
            assert_eq!(sim.msg(t, Request::Warp { on }), Reply::Ok);
        }
    }
    sim.advance(mcu(horizon));
    sim.account(0);
    let end = max_lag(&sim, &tasks);
    let w = *worst.lock().unwrap();
    (w.max(end), sim)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// §2.1: with all tasks runnable each one's share converges to its weight share, within
    /// (C + mcu)·n at every decision.
    #[test]
    fn shares_follow_weights(weights in prop::collection::vec(1u64..=8, 2..=6), c in 1u64..=3) {
        let n = weights.len() as u64;
        let zeros = vec![0; weights.len()];
        let (lag, _) = run_shares(&weights, &zeros, c, 600, &[]);
        prop_assert!(lag <= mcu((c + 1) * n) as u128, "lag {} > {}", lag, mcu((c + 1) * n));
    }

    /// §2.1: "the error between fair share and actual allocation is never greater than the
    /// context switch allowance plus one mcu" — for two tasks of any weights.
    #[test]
    fn two_tasks_lag_at_most_c_plus_mcu(w1 in 1u64..=16, w2 in 1u64..=16, c in 1u64..=4) {
        let (lag, _) = run_shares(&[w1, w2], &[0, 0], c, 400, &[]);
        prop_assert!(lag <= mcu(c + 1) as u128, "lag {} > {}", lag, mcu(c + 1));
    }

    /// §2.2: warping borrows from a task's future: however tasks warp and unwarp, the lag
    /// stays bounded by (C + mcu)·n plus the real time the warps are worth (Σ W_j·w_j).
    #[test]
    fn warping_never_changes_long_term_shares(
        tw in prop::collection::vec((1u64..=8, 0u64..=10), 2..=5),
        c in 1u64..=3,
        toggles in prop::collection::vec((0u64..1500, 0usize..5), 0..30),
    ) {
        let weights: Vec<u64> = tw.iter().map(|x| x.0).collect();
        let warps: Vec<u64> = tw.iter().map(|x| x.1).collect();
        let n = weights.len() as u64;
        let borrowed: u64 = tw.iter().map(|&(w, wp)| w * wp).sum();
        let bound = mcu((c + 1) * n + borrowed) as u128;
        let (lag, _) = run_shares(&weights, &warps, c, 1500, &toggles);
        prop_assert!(lag <= bound, "lag {} > {}", lag, bound);
    }
}

// ----- Wake::cpu: the mechanism already runs the woken task on a CPU -----

#[test]
fn a_wake_prefers_the_cpu_the_task_already_runs_on() {
    // Two CPU-bound tasks on two CPUs; a warped task wakes and may preempt either. Without
    // a hint BVT preempts the CPU whose task's EVT exceeds E_j by the most; with
    // `Wake::cpu` naming either CPU it preempts that one (the Linux agent's armed task is
    // already running there) — in particular the one it would not have chosen.
    let run = |hint: Option<u16>| {
        let mut sim = Sim::new(2, cfg(2));
        let _a = sim.add(params(&[]), true);
        let _b = sim.add(params(&[("weight", 2)]), true);
        let x = sim.add(params(&[("warp", mcu(100) as i64)]), false);
        sim.advance(mcu(10));
        sim.wake(x, Wake { cpu: hint.map(CpuId), ..VOL });
        (0..2u16).find(|&c| sim.running(c) == Some(x))
    };
    let default = run(None).expect("the warped task preempts a CPU");
    for hint in [0u16, 1] {
        assert_eq!(run(Some(hint)), Some(hint), "hint {hint} (without a hint: CPU {default})");
    }
}
