//! A tiny mechanism for the policy tests: drives a real `vassal_core::Dispatcher` in
//! virtual time through the `vassal_core::driver` (which carries out its effects),
//! expires slices, and logs every dispatch. Scheduler events are armed but never fired.
#![allow(dead_code)]

use std::collections::BTreeMap;

use vassal_core::driver::{self, Hooks};
use vassal_core::{
    Block, CpuId, CpuSet, Dispatched, Dispatcher, Driver, HierarchyConfig, Job, Ns, Policy, Position, Preempt, Reply, Request, SchedId,
    Sender, TaskId, TaskParams, TaskState, Usage, Wake, MS,
};

/// One accepted decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Disp {
    pub at: Ns,
    pub cpu: CpuId,
    pub task: TaskId,
    pub slice: Option<Ns>,
}

struct Run {
    task: TaskId,
    since: Ns,
    until: Option<Ns>,
}

pub struct Sim {
    pub drv: Driver,
    pub now: Ns,
    pub log: Vec<Disp>,
    /// Every `Effect::Resched` the mechanism carried out, with its time.
    pub rescheds: Vec<(Ns, CpuId)>,
    /// Dispatches of a task that the mechanism saw running on another CPU.
    pub overlaps: usize,
    running: Vec<Option<Run>>,
}

pub fn params(kv: &[(&str, i64)]) -> TaskParams {
    kv.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}

pub fn t(i: u32) -> TaskId {
    TaskId(i)
}

pub fn ms(n: u64) -> Ns {
    n * MS
}

impl Sim {
    pub fn new(ncpus: u16, policy: Box<dyn Policy>) -> Sim {
        Sim {
            drv: Driver::new(Dispatcher::new(ncpus, "default", policy, HierarchyConfig::default())),
            now: 0,
            log: Vec::new(),
            rescheds: Vec::new(),
            overlaps: 0,
            running: (0..ncpus).map(|_| None).collect(),
        }
    }

    /// Registers `policy` on top of the hierarchy.
    pub fn register_top(&mut self, name: &str, policy: Box<dyn Policy>) -> SchedId {
        self.drv.disp.register(name, policy, Usage::Reserved { cpu_ppm: 100_000 }, Position::Top).unwrap()
    }

    pub fn unregister(&mut self, id: SchedId) {
        self.drv.disp.unregister(self.now, id).unwrap();
        self.settle();
    }

    /// Adds a task (runnable or blocked) with these parameters and affinity (None: all).
    pub fn add(&mut self, kv: &[(&str, i64)], affinity: Option<CpuSet>, runnable: bool) -> TaskId {
        let aff = affinity.unwrap_or(CpuSet::first(self.drv.disp.ncpus()));
        let task = self.drv.disp.add_task(self.now, params(kv), aff, None, runnable);
        self.settle();
        task
    }

    /// Sends `req` about `task` to `sched`, as root.
    pub fn message(&mut self, sched: SchedId, task: TaskId, req: Request) -> Reply {
        let r = self.drv.disp.message(self.now, sched, Sender::ROOT, task, &req);
        self.settle();
        r
    }

    fn account_cpu(&mut self, cpu: CpuId) {
        if let Some(run) = &self.running[cpu.0 as usize] {
            let (task, ran) = (run.task, self.now - run.since);
            self.drv.disp.account(self.now, task, cpu, ran);
        }
    }

    fn started(&mut self, cpu: CpuId, d: Option<Dispatched>) {
        if let Some(d) = d {
            let elsewhere =
                self.running.iter().enumerate().any(|(c, r)| c != cpu.0 as usize && r.as_ref().is_some_and(|r| r.task == d.task));
            self.overlaps += elsewhere as usize;
        }
        self.running[cpu.0 as usize] = d.map(|d| {
            // A task re-dispatched where it was running, at the same instant (a reschedule
            // that changed nothing), is one dispatch: the later slice replaces the earlier.
            let entry = Disp { at: self.now, cpu, task: d.task, slice: d.slice };
            let last = self.log.iter_mut().rev().find(|l| l.cpu == cpu);
            match last {
                Some(l) if d.prev == Some(d.task) && l.task == d.task && l.at == self.now => *l = entry,
                _ => self.log.push(entry),
            }
            Run { task: d.task, since: self.now, until: d.slice.map(|s| self.now + s) }
        });
        // Cross-check the dispatcher's invariants and our own view of it.
        self.drv.disp.check_invariants().unwrap();
        for c in 0..self.drv.disp.ncpus() {
            let c = CpuId(c);
            assert_eq!(self.drv.disp.running(c), self.running[c.0 as usize].as_ref().map(|r| r.task), "{c}");
        }
    }

    /// A decision point on `cpu`.
    pub fn schedule(&mut self, cpu: CpuId, why: Preempt) {
        if let Some(d) = driver::decide(self, self.now, cpu, why) {
            assert!(self.drv.disp.state(d.task) == TaskState::Running(cpu));
        }
        self.settle();
    }

    /// Carries out the effects policies asked for until there are none.
    pub fn settle(&mut self) {
        driver::settle(self, self.now);
    }

    /// Advances virtual time to `until`, expiring slices on the way (lowest CPU first
    /// when several expire at once).
    pub fn run_until(&mut self, until: Ns) {
        loop {
            let next = self.running.iter().enumerate().filter_map(|(c, r)| r.as_ref().and_then(|r| r.until).map(|u| (u, c))).min();
            match next {
                Some((at, c)) if at <= until => {
                    self.now = at;
                    self.schedule(CpuId(c as u16), Preempt::SliceExpired);
                }
                _ => break,
            }
        }
        self.now = until;
    }

    pub fn block(&mut self, task: TaskId) {
        if let TaskState::Running(cpu) = self.drv.disp.state(task) {
            self.account_cpu(cpu);
        }
        if let Some(cpu) = self.drv.disp.block(self.now, task, Block { voluntary: true }) {
            self.running[cpu.0 as usize] = None;
            self.schedule(cpu, Preempt::Resched);
        }
        self.settle();
    }

    /// Blocks `task` (running on some CPU) and hands that CPU off to `target`.
    pub fn block_hand_off(&mut self, task: TaskId, target: TaskId) {
        let TaskState::Running(cpu) = self.drv.disp.state(task) else { panic!("{task} is not running") };
        self.account_cpu(cpu);
        assert_eq!(self.drv.disp.block(self.now, task, Block { voluntary: true }), Some(cpu));
        self.running[cpu.0 as usize] = None;
        let d = self.drv.disp.hand_off(self.now, cpu, target).expect("hand-off accepted");
        self.started(cpu, Some(d));
        self.settle();
    }

    pub fn wake(&mut self, task: TaskId) {
        assert!(self.drv.disp.wake(self.now, task, Wake { voluntary: true, ..Wake::default() }));
        self.settle();
    }

    pub fn exit(&mut self, task: TaskId) {
        if let TaskState::Running(cpu) = self.drv.disp.state(task) {
            self.account_cpu(cpu);
        }
        if let Some(cpu) = self.drv.disp.remove_task(self.now, task) {
            self.running[cpu.0 as usize] = None;
            self.schedule(cpu, Preempt::Resched);
        }
        self.settle();
    }

    pub fn yield_cpu(&mut self, cpu: CpuId) {
        self.schedule(cpu, Preempt::Yield);
    }

    /// The dispatched tasks, in order.
    pub fn tasks(&self) -> Vec<TaskId> {
        self.log.iter().map(|d| d.task).collect()
    }

    /// The dispatches on one CPU as (time in ms, task id).
    pub fn on_cpu(&self, cpu: u16) -> Vec<(u64, u32)> {
        self.log.iter().filter(|d| d.cpu.0 == cpu).map(|d| (d.at / MS, d.task.0)).collect()
    }

    /// (time in ms, task id, slice in ms) of every dispatch.
    pub fn timeline(&self) -> Vec<(u64, u32, Option<u64>)> {
        self.log.iter().map(|d| (d.at / MS, d.task.0, d.slice.map(|s| s / MS))).collect()
    }

    pub fn running_task(&self, cpu: u16) -> Option<TaskId> {
        self.drv.disp.running(CpuId(cpu))
    }
}

impl Hooks for Sim {
    fn driver(&mut self) -> &mut Driver {
        &mut self.drv
    }
    fn account(&mut self, _now: Ns, cpu: CpuId) {
        self.account_cpu(cpu);
    }
    fn dispatched(&mut self, _now: Ns, cpu: CpuId, _why: Preempt, _before: Option<TaskId>, d: Option<Dispatched>) {
        self.started(cpu, d);
    }
    fn rescheduling(&mut self, now: Ns, cpu: CpuId, _why: Preempt) {
        self.rescheds.push((now, cpu));
    }
}

/// Builds a policy through the registry.
pub fn build(kind: &str, kv: &[(&str, vassal_policies::ParamValue)]) -> Box<dyn Policy> {
    let map: BTreeMap<String, vassal_policies::ParamValue> = kv.iter().map(|(k, v)| (k.to_string(), v.clone())).collect();
    vassal_policies::build(kind, &map).unwrap()
}

pub fn dur(s: &str) -> vassal_policies::ParamValue {
    vassal_policies::ParamValue::Str(s.to_string())
}

/// A scheduler that owns tasks but never has an opinion (so the default scheduler runs
/// them as guests).
pub struct Passive;

impl Policy for Passive {
    fn kind(&self) -> &str {
        "passive"
    }
    fn pick(&mut self, _ctx: &mut vassal_core::Ctx, _cpu: CpuId) -> Option<vassal_core::Decision> {
        None
    }
}

/// A fixed view of tasks, for driving a policy directly without a dispatcher.
pub struct FakeView {
    pub states: Vec<TaskState>,
    pub affinity: Vec<CpuSet>,
}

impl vassal_core::TaskView for FakeView {
    fn state(&self, task: TaskId) -> TaskState {
        self.states.get(task.0 as usize).copied().unwrap_or(TaskState::Dead)
    }
    fn affinity(&self, task: TaskId) -> CpuSet {
        self.affinity.get(task.0 as usize).copied().unwrap_or(CpuSet::NONE)
    }
    fn owner(&self, _task: TaskId) -> Option<SchedId> {
        Some(SchedId(0))
    }
    fn last_cpu(&self, _task: TaskId) -> Option<CpuId> {
        None
    }
    fn running_on(&self, cpu: CpuId) -> Option<TaskId> {
        self.states.iter().position(|s| *s == TaskState::Running(cpu)).map(|i| TaskId(i as u32))
    }
}

/// No task was ever dispatched on one CPU while running on another.
pub fn assert_no_double_dispatch(s: &Sim) {
    assert_eq!(s.overlaps, 0, "a task was dispatched while running elsewhere");
    assert!(!s.log.is_empty());
}

/// A xorshift64 generator: each call `rnd(n)` gives a number in `0..n`.
pub fn xorshift(mut seed: u64) -> impl FnMut(u64) -> u64 {
    move |n| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    }
}

/// A random number source for [`RandomOps`]' closures.
pub type Rnd<'a> = &'a mut dyn FnMut(u64) -> u64;

/// What a policy's random-operations test varies (see [`random_ops`]).
pub struct RandomOps<'a> {
    pub seed: u64,
    pub steps: usize,
    /// The parameters of each of the 12 initial tasks.
    pub params: &'a dyn Fn(Rnd) -> Vec<(&'static str, i64)>,
    /// Lets time pass (the policy's tick or its timers).
    pub advance: &'a dyn Fn(&mut Sim, Rnd),
    /// A parameter message for a random task: (name, value).
    pub message: &'a dyn Fn(Rnd) -> (&'static str, i64),
}

/// Pseudo-random wakes, blocks, yields, reschedules, parameter messages, exits and passing
/// time on the 3 CPUs of `s` (a policy at the bottom), 12 tasks with mixed affinities.
/// The harness checks the dispatcher's invariants at every dispatch; here, after every
/// step: no decision refused, and no CPU idle while a runnable task may use it; at the
/// end, no task dispatched on two CPUs.
pub fn random_ops(s: &mut Sim, ops: &RandomOps) {
    let mut rnd = xorshift(ops.seed);
    let sched = s.drv.disp.default_sched();
    let affs = [CpuSet::first(3), CpuSet(0b001), CpuSet(0b110), CpuSet(0b011)];
    let mut tasks: Vec<(TaskId, CpuSet)> = Vec::new();
    for i in 0..12 {
        let kv = (ops.params)(&mut rnd);
        let aff = affs[i % affs.len()];
        tasks.push((s.add(&kv, Some(aff), i % 3 != 0), aff));
    }
    for step in 0..ops.steps {
        match rnd(12) {
            0..=3 => (ops.advance)(s, &mut rnd),
            4 | 5 => {
                let t = tasks[rnd(tasks.len() as u64) as usize].0;
                if s.drv.disp.state(t).is_runnable() {
                    s.block(t);
                }
            }
            6 | 7 => {
                let t = tasks[rnd(tasks.len() as u64) as usize].0;
                if s.drv.disp.state(t) == TaskState::Blocked {
                    s.wake(t);
                }
            }
            8 => s.yield_cpu(CpuId(rnd(3) as u16)),
            9 => s.schedule(CpuId(rnd(3) as u16), Preempt::Resched),
            10 => {
                let t = tasks[rnd(tasks.len() as u64) as usize].0;
                let (name, value) = (ops.message)(&mut rnd);
                let _ = s.message(sched, t, Request::Param { name: name.into(), value });
            }
            _ => {
                let i = rnd(tasks.len() as u64) as usize;
                let (t, aff) = tasks.remove(i);
                s.exit(t);
                tasks.push((s.add(&[], Some(aff), true), aff));
            }
        }
        assert_eq!(s.drv.disp.stats().refused, 0, "step {step}: a decision was refused");
        for c in 0..3u16 {
            if s.running_task(c).is_none() {
                let waiting = tasks.iter().find(|(t, aff)| s.drv.disp.state(*t) == TaskState::Runnable && aff.contains(CpuId(c)));
                assert!(waiting.is_none(), "step {step}: cpu{c} idle while {waiting:?} waits");
            }
        }
    }
    assert_no_double_dispatch(s);
}

/// Random steps for the test that `edf`'s check after a dispatch is skipped only when it
/// finds nothing: several wakes (and jobs announced to running tasks) at one instant
/// before the decisions, so that checks count on CPUs asked already; blocks; affinity and
/// swap changes the policy is not told of; time passing. Returns every dispatch and every
/// reschedule asked for.
pub fn random_job_run(seed: u64, ncpus: u16, policy: Box<dyn Policy>) -> (Vec<Disp>, Vec<(Ns, CpuId)>) {
    let mut rnd = xorshift(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let mut s = Sim::new(ncpus, policy);
    let all = CpuSet::first(ncpus);
    let mut tasks = Vec::new();
    for i in 0..10u64 {
        let period = ms(1 + rnd(8)) as i64;
        // Mostly free to run anywhere; some pinned to a random subset.
        let aff = if i % 3 == 0 { CpuSet((1 + rnd(all.0)) & all.0) } else { all };
        let aff = if aff.is_empty() { all } else { aff };
        let deadline = period - rnd(period as u64 / 2) as i64;
        tasks.push((s.add(&[("period", period), ("deadline", deadline), ("priority", rnd(4) as i64)], Some(aff), false), period));
    }
    for _ in 0..300 {
        match rnd(10) {
            0..=3 => {
                // A burst of wakes and next jobs at this instant, then the decisions.
                for _ in 0..1 + rnd(4) {
                    let (t, period) = tasks[rnd(tasks.len() as u64) as usize];
                    let job = Job { release: s.now, deadline: s.now + period as Ns };
                    match s.drv.disp.state(t) {
                        TaskState::Blocked => {
                            if rnd(2) == 0 {
                                s.drv.disp.job(s.now, t, job);
                            }
                            s.drv.disp.wake(s.now, t, Wake { voluntary: true, ..Wake::default() });
                        }
                        TaskState::Running(_) => s.drv.disp.job(s.now, t, job),
                        _ => {}
                    }
                }
                s.settle();
            }
            4 | 5 => {
                let (t, _) = tasks[rnd(tasks.len() as u64) as usize];
                if s.drv.disp.state(t).is_runnable() {
                    s.block(t);
                }
            }
            6 => {
                let (t, _) = tasks[rnd(tasks.len() as u64) as usize];
                let aff = CpuSet(rnd(all.0 + 1) & all.0);
                if !aff.is_empty() {
                    s.drv.disp.set_affinity(s.now, t, aff);
                    s.settle();
                }
            }
            7 => {
                let (t, _) = tasks[rnd(tasks.len() as u64) as usize];
                s.drv.disp.set_loaded(s.now, t, rnd(3) != 0);
                s.settle();
            }
            _ => {
                let until = s.now + rnd(ms(3));
                s.run_until(until);
            }
        }
    }
    (s.log.clone(), s.rescheds.clone())
}

/// A waiting job allowed more CPUs while it waits (the policy is not told): on 3 CPUs, J
/// (period 100 ms), K (10 ms) and L (150 ms) run; W (50 ms), pinned to CPU 1 where K
/// runs, wakes and waits; W's affinity then grows to every CPU; M (1 ms), pinned to CPU
/// 2, wakes and takes it from L. After that dispatch the first waiting job, W, must be
/// checked again and take CPU 0 from J. Returns the dispatches and what runs on CPU 0.
pub fn affinity_growth_run(policy: Box<dyn Policy>) -> (Vec<Disp>, Option<TaskId>) {
    let mut s = Sim::new(3, policy);
    let j = s.add(&[("period", ms(100) as i64)], None, true);
    let _k = s.add(&[("period", ms(10) as i64)], None, true);
    let l = s.add(&[("period", ms(150) as i64)], None, true);
    assert_eq!(s.running_task(0), Some(j));
    assert_eq!(s.running_task(2), Some(l));
    let w = s.add(&[("period", ms(50) as i64)], Some(CpuSet(0b010)), false);
    let m = s.add(&[("period", ms(1) as i64)], Some(CpuSet(0b100)), false);
    // A decision that leaves every job where it is (and nothing waiting).
    s.schedule(CpuId(2), Preempt::Resched);
    s.wake(w);
    assert!(s.drv.disp.set_affinity(s.now, w, CpuSet::first(3)));
    s.settle();
    s.wake(m);
    (s.log.clone(), s.running_task(0))
}
