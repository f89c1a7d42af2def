//! Vassal's sample real-time scheduler (`timed`, paper 000 §5) driven through a real
//! dispatcher, above a round-robin default. The shared test harness (`common::Sim`) does
//! not carry out scheduler events, so this file has its own small mechanism on the
//! driver that does: it fires every armed event when virtual time reaches it.

use std::collections::BTreeMap;

use vassal_core::driver::{self, Due, Hooks};
use vassal_core::{
    CpuId, CpuSet, Dispatched, Dispatcher, Driver, HierarchyConfig, Ns, Position, Preempt, Reply, Request, SchedId, Sender, TaskId,
    TaskParams, TaskState, Usage, MS, US,
};
use vassal_policies::{ParamValue, RoundRobin};

struct H {
    drv: Driver,
    now: Ns,
    /// Every reschedule carried out: (time, cpu).
    rescheds: Vec<(Ns, CpuId)>,
    /// Every accepted dispatch: (time, cpu, task).
    log: Vec<(Ns, CpuId, TaskId)>,
    rt: SchedId,
}

const CPU0: CpuId = CpuId(0);

impl H {
    /// One CPU unless `ncpus` says otherwise; an rr default (10 ms) and `timed` on top.
    fn new(ncpus: u16, params: &[(&str, &str)], spin: Option<bool>) -> H {
        let mut d = Dispatcher::new(ncpus, "default", Box::new(RoundRobin::new(10 * MS)), HierarchyConfig::default());
        let mut map: BTreeMap<String, ParamValue> = params.iter().map(|(k, v)| (k.to_string(), ParamValue::Str(v.to_string()))).collect();
        if let Some(s) = spin {
            map.insert("spin".into(), ParamValue::Bool(s));
        }
        let policy = vassal_policies::build("timed", &map).unwrap();
        let usage = Usage::HardTime { cpus: CpuSet::only(CPU0), util_ppm: 100_000 };
        let rt = d.register("rt", policy, usage, Position::Top).unwrap();
        H { drv: Driver::new(d), now: 0, rescheds: Vec::new(), log: Vec::new(), rt }
    }

    fn add(&mut self, runnable: bool) -> TaskId {
        let task = self.drv.disp.add_task(self.now, TaskParams::new(), CpuSet::first(self.drv.disp.ncpus()), None, runnable);
        self.settle();
        // A new runnable task on an idle CPU: the engine would decide there.
        for c in 0..self.drv.disp.ncpus() {
            if self.drv.disp.running(CpuId(c)).is_none() {
                self.schedule(CpuId(c));
            }
        }
        task
    }

    fn schedule(&mut self, cpu: CpuId) {
        driver::decide(self, self.now, cpu, Preempt::Resched);
        self.settle();
    }

    /// Logs a dispatch (a task kept running on its CPU is not a new one).
    fn note(&mut self, cpu: CpuId, d: Option<Dispatched>) {
        if let Some(d) = d.filter(|d| d.prev != Some(d.task)) {
            self.log.push((self.now, cpu, d.task));
        }
    }

    fn settle(&mut self) {
        driver::settle(self, self.now);
    }

    /// A message from `task` itself (uid 1000).
    fn send(&mut self, sched: SchedId, task: TaskId, req: Request) -> Reply {
        let r = self.drv.disp.message(self.now, sched, Sender { task: Some(task), uid: 1000 }, task, &req);
        self.settle();
        r
    }

    fn root_send(&mut self, task: TaskId, req: Request) -> Reply {
        let r = self.drv.disp.message(self.now, self.rt, Sender::ROOT, task, &req);
        self.settle();
        r
    }

    /// Advances to `until`, firing the events due on the way, in time order.
    fn run_until(&mut self, until: Ns) {
        while let Some((at, Due::Event { sched, token })) = self.drv.pop_due(until) {
            self.now = at;
            driver::fire(self, at, sched, token);
            self.settle();
        }
        self.now = until;
    }

    fn event_of(&self, task: TaskId) -> Option<Ns> {
        self.drv.event_at(self.rt, task.0 as u64)
    }
}

/// The harness does not account (timed's decisions do not depend on CPU time used).
impl Hooks for H {
    fn driver(&mut self) -> &mut Driver {
        &mut self.drv
    }
    fn account(&mut self, _now: Ns, _cpu: CpuId) {}
    fn dispatched(&mut self, _now: Ns, cpu: CpuId, _why: Preempt, _before: Option<TaskId>, d: Option<Dispatched>) {
        self.note(cpu, d);
        self.drv.disp.check_invariants().unwrap();
    }
    fn rescheduling(&mut self, now: Ns, cpu: CpuId, _why: Preempt) {
        self.rescheds.push((now, cpu));
    }
}

/// The default's background hog and a timed task `x` that has joined and is running.
fn setup(params: &[(&str, &str)], spin: Option<bool>) -> (H, TaskId, TaskId) {
    let mut h = H::new(1, params, spin);
    let hog = h.add(true);
    let x = h.add(true);
    let rt = h.rt;
    assert_eq!(h.send(rt, x, Request::Join), Reply::Ok);
    assert_eq!(h.drv.disp.owner(x), Some(rt));
    // Eligible with no time asked for: the loaded scheduler takes precedence over the hog.
    assert_eq!(h.drv.disp.running(CPU0), Some(x));
    (h, hog, x)
}

#[test]
fn set_arms_an_event_at_now_plus_delay_and_runs_the_task_exactly_then() {
    let (mut h, hog, x) = setup(&[], None);
    h.now = MS;
    let rt = h.rt;
    assert_eq!(h.send(rt, x, Request::Set { delay: 930 * US }), Reply::Ok);
    assert_eq!(h.event_of(x), Some(MS + 930 * US), "the event is armed at now + delay");
    // Not eligible until then: it leaves the CPU at once and the hog runs.
    assert_eq!(h.drv.disp.running(CPU0), Some(hog));
    assert_eq!(h.drv.disp.state(x), TaskState::Runnable);
    h.run_until(MS + 929 * US);
    assert_eq!(h.drv.disp.running(CPU0), Some(hog), "not run before its time");
    assert!(!h.log.iter().any(|&(at, _, t)| t == x && at > MS), "x was not dispatched early");
    h.run_until(2 * MS);
    // The event fired at 1.93 ms: the policy asked CPU 0 (where x last ran) to decide, and
    // x (above the default) was picked there and then.
    assert!(h.rescheds.contains(&(MS + 930 * US, CPU0)));
    assert_eq!(h.log.last(), Some(&(MS + 930 * US, CPU0, x)));
    assert_eq!(h.drv.disp.running(CPU0), Some(x));
    assert_eq!(h.event_of(x), None);
}

#[test]
fn lead_arms_the_event_that_much_earlier() {
    let (mut h, _hog, x) = setup(&[("lead", "20us")], None);
    let rt = h.rt;
    assert_eq!(h.send(rt, x, Request::Set { delay: MS }), Reply::Ok);
    assert_eq!(h.event_of(x), Some(MS - 20 * US), "T_predicted ahead of the target");
}

#[test]
fn requests_that_cannot_be_met_are_refused_at_once_and_change_nothing() {
    let (mut h, hog, x) = setup(&[("min_delay", "100us"), ("resolution", "1ms")], Some(false));
    let rt = h.rt;
    let refused = |r: Reply| matches!(r, Reply::Refused(_));
    // A delay of 0; below min_delay; below the clock's resolution with spinning off.
    assert!(refused(h.send(rt, x, Request::Set { delay: 0 })));
    assert!(refused(h.send(rt, x, Request::Set { delay: 50 * US })));
    assert!(refused(h.send(rt, x, Request::Set { delay: 500 * US })));
    assert!(h.drv.next_deadline().is_none(), "no event armed");
    assert_eq!(h.drv.disp.running(CPU0), Some(x), "still eligible and running");
    // Another user may not set x's time; a task that has not joined may not set one.
    let r = h.drv.disp.message(h.now, rt, Sender { task: Some(hog), uid: 1000 }, x, &Request::Set { delay: 2 * MS });
    assert!(refused(r));
    assert!(refused(h.send(rt, hog, Request::Set { delay: 2 * MS })));
    assert!(h.drv.next_deadline().is_none(), "no event armed");
    // Pending at 5 ms: root asking for an earlier time is refused; the event stays.
    assert_eq!(h.send(rt, x, Request::Set { delay: 5 * MS }), Reply::Ok);
    let before = h.rescheds.len();
    h.now = MS;
    assert!(refused(h.root_send(x, Request::Set { delay: 2 * MS })));
    assert_eq!(h.event_of(x), Some(5 * MS));
    assert_eq!(h.rescheds.len(), before);
    assert_eq!(h.drv.disp.running(CPU0), Some(hog));
    // A later one moves it.
    assert_eq!(h.root_send(x, Request::Set { delay: 6 * MS }), Reply::Ok);
    assert_eq!(h.event_of(x), Some(7 * MS));
    // Requests it does not understand are refused too.
    assert!(refused(h.send(rt, x, Request::Warp { on: true })));
}

#[test]
fn joined_tasks_are_exclusive_so_the_default_never_runs_them_early() {
    let mut h = H::new(1, &[], None);
    let x = h.add(true);
    let rt = h.rt;
    assert_eq!(h.send(rt, x, Request::Join), Reply::Ok);
    assert!(!h.drv.disp.is_guest(x), "not hosted by the default");
    assert_eq!(h.send(rt, x, Request::Set { delay: 3 * MS }), Reply::Ok);
    // Nothing else to run: the CPU idles rather than the default running x.
    assert_eq!(h.drv.disp.running(CPU0), None);
    h.schedule(CPU0);
    assert_eq!(h.drv.disp.running(CPU0), None);
    h.run_until(3 * MS);
    assert_eq!(h.drv.disp.running(CPU0), Some(x));
    assert_eq!(h.log.iter().filter(|&&(_, _, t)| t == x).map(|&(at, _, _)| at).collect::<Vec<_>>(), vec![0, 3 * MS]);
}

#[test]
fn a_delay_shorter_than_the_resolution_is_met_by_spinning() {
    let (mut h, _hog, x) = setup(&[("resolution", "1ms")], None);
    let rt = h.rt;
    assert_eq!(h.send(rt, x, Request::Set { delay: 200 * US }), Reply::Ok);
    // No event: the task stays eligible (busy-waits until its target).
    assert!(h.drv.next_deadline().is_none(), "no event armed");
    assert_eq!(h.drv.disp.running(CPU0), Some(x));
    // A delay the clock can resolve is an event again.
    assert_eq!(h.send(rt, x, Request::Set { delay: 2 * MS }), Reply::Ok);
    assert_eq!(h.event_of(x), Some(2 * MS));
}

#[test]
fn leave_returns_the_task_to_the_default_and_cancels_its_event() {
    let (mut h, hog, x) = setup(&[], None);
    let rt = h.rt;
    assert_eq!(h.send(rt, x, Request::Set { delay: 5 * MS }), Reply::Ok);
    assert_eq!(h.drv.disp.running(CPU0), Some(hog));
    h.now = MS;
    assert_eq!(h.send(rt, x, Request::Leave), Reply::Ok);
    assert_eq!(h.drv.disp.owner(x), Some(h.drv.disp.default_sched()));
    assert_eq!(h.event_of(x), None, "its event is cancelled");
    // The default round robin runs it in turn with the hog (the hog's quantum ends).
    h.now = 10 * MS;
    let d = h.drv.disp.schedule(h.now, CPU0, Preempt::SliceExpired);
    h.note(CPU0, d);
    h.settle();
    assert_eq!(h.drv.disp.running(CPU0), Some(x));
    assert!(h.log.iter().any(|&(at, _, t)| t == x && at >= MS));
}
