//! A small scriptable FIFO policy for the dispatcher tests.
//!
//! Every callback it receives is appended to a log shared by all the test policies of one
//! test (`Arc<Mutex<Vec<String>>>`), prefixed with the scheduler's name, so a test can
//! check the exact order of callbacks across schedulers. Knobs (shared with the test
//! through [`Probe`], so they can be turned after the policy is boxed and registered)
//! script its behaviour: refuse attach, answer `pick` from a script (possibly bogus
//! decisions), stay silent, mark tasks exclusive on attach, and so on. Messages
//! (`Request::Param`, `Request::Set`) let a test make the policy call `Ctx` methods
//! (`set_exclusive`, `set_event`, `cancel_event`, `resched`) from inside a callback.

#![allow(dead_code)]

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};

use vassal_core::*;

pub type Log = Arc<Mutex<Vec<String>>>;

pub fn new_log() -> Log {
    Arc::new(Mutex::new(Vec::new()))
}

/// Takes (and clears) the log.
pub fn take(log: &Log) -> Vec<String> {
    std::mem::take(&mut *log.lock().unwrap())
}

/// The knobs of one [`TestPolicy`].
#[derive(Default, Debug)]
pub struct Knobs {
    /// `on_attach` refuses with this reason (owner attaches only; guests are accepted
    /// unless `refuse_guest` is also set).
    pub refuse_attach: Option<String>,
    /// `on_attach` with `guest == true` refuses.
    pub refuse_guest: bool,
    /// Scripted answers to `pick`, consumed one per call, before the FIFO logic.
    pub script: VecDeque<Option<Decision>>,
    /// No opinion ever (unless the script says otherwise).
    pub silent: bool,
    /// The slice it gives (None: run until block).
    pub slice: Option<Ns>,
    /// On attach as owner, call `ctx.set_exclusive(task, true)`.
    pub exclusive_on_attach: bool,
    /// On `on_detach(Moved)`, call `ctx.set_exclusive(task, true)` (a confused policy).
    pub exclusive_on_detach: bool,
    /// On `on_dispatch`, call `ctx.set_exclusive(task, true)`.
    pub exclusive_on_dispatch: bool,
    /// During the next `pick`, call `ctx.set_exclusive(task, flag)` first.
    pub exclusive_on_pick: Option<(TaskId, bool)>,
    /// On every `on_event`, arm this (absolute time, token) event.
    pub rearm: Option<(Ns, u64)>,
    /// Results of the `Ctx` calls it made (for the test to inspect).
    pub ctx_results: Vec<String>,
    /// `accounts_runs` says false (asked when the policy is given to the dispatcher).
    pub ignores_runs: bool,
    /// `dispatches_in_pick` says true (asked likewise).
    pub dispatches_in_pick: bool,
}

/// The test's handle on one policy.
#[derive(Clone)]
pub struct Probe {
    pub log: Log,
    pub knobs: Arc<Mutex<Knobs>>,
    pub queue: Arc<Mutex<VecDeque<TaskId>>>,
    /// The tasks it currently holds, by its own account of on_attach/on_detach:
    /// task -> attached as a guest.
    pub members: Arc<Mutex<BTreeMap<TaskId, bool>>>,
}

impl Probe {
    pub fn members(&self) -> BTreeMap<TaskId, bool> {
        self.members.lock().unwrap().clone()
    }
    pub fn knobs(&self) -> std::sync::MutexGuard<'_, Knobs> {
        self.knobs.lock().unwrap()
    }
    pub fn queue(&self) -> Vec<TaskId> {
        self.queue.lock().unwrap().iter().copied().collect()
    }
    pub fn script(&self, d: Option<Decision>) {
        self.knobs().script.push_back(d);
    }
}

/// A FIFO policy that logs every callback.
pub struct TestPolicy {
    name: String,
    log: Log,
    knobs: Arc<Mutex<Knobs>>,
    /// Runnable, not running tasks it holds (owned or as a guest), FIFO.
    queue: Arc<Mutex<VecDeque<TaskId>>>,
    members: Arc<Mutex<BTreeMap<TaskId, bool>>>,
}

impl TestPolicy {
    pub fn boxed(name: &str, log: &Log) -> (Box<dyn Policy>, Probe) {
        let knobs = Arc::new(Mutex::new(Knobs::default()));
        let queue = Arc::new(Mutex::new(VecDeque::new()));
        let members = Arc::new(Mutex::new(BTreeMap::new()));
        let probe = Probe { log: log.clone(), knobs: knobs.clone(), queue: queue.clone(), members: members.clone() };
        (Box::new(TestPolicy { name: name.to_string(), log: log.clone(), knobs, queue, members }), probe)
    }

    fn log(&self, s: String) {
        self.log.lock().unwrap().push(format!("{}: {}", self.name, s));
    }
    fn enqueue(&self, t: TaskId) {
        let mut q = self.queue.lock().unwrap();
        if !q.contains(&t) {
            q.push_back(t);
        }
    }
    fn dequeue(&self, t: TaskId) {
        self.queue.lock().unwrap().retain(|&x| x != t);
    }
    fn note(&self, what: String) {
        self.knobs.lock().unwrap().ctx_results.push(what);
    }
}

impl Policy for TestPolicy {
    fn kind(&self) -> &str {
        "test-fifo"
    }

    fn on_attach(&mut self, ctx: &mut Ctx, task: TaskId, info: &AttachInfo) -> Result<(), String> {
        self.log(format!("attach {task} guest={} state={:?}", info.guest, info.state));
        let (refuse, refuse_guest, excl) = {
            let k = self.knobs.lock().unwrap();
            (k.refuse_attach.clone(), k.refuse_guest, k.exclusive_on_attach)
        };
        if info.guest && refuse_guest {
            return Err(format!("{} takes no guests", self.name));
        }
        if !info.guest {
            if let Some(why) = refuse {
                return Err(why);
            }
            if excl {
                let r = ctx.set_exclusive(task, true);
                self.note(format!("set_exclusive({task}) on attach: {r:?}"));
            }
        }
        if info.state == TaskState::Runnable {
            self.enqueue(task);
        }
        self.members.lock().unwrap().insert(task, info.guest);
        Ok(())
    }

    fn on_detach(&mut self, ctx: &mut Ctx, task: TaskId, why: Detach) {
        self.log(format!("detach {task} {why:?}"));
        self.dequeue(task);
        self.members.lock().unwrap().remove(&task);
        if why == Detach::Moved && self.knobs.lock().unwrap().exclusive_on_detach {
            let r = ctx.set_exclusive(task, true);
            self.note(format!("set_exclusive({task}) on detach: {r:?}"));
        }
    }

    fn on_wake(&mut self, _ctx: &mut Ctx, task: TaskId, _wake: Wake) {
        self.log(format!("wake {task}"));
        self.enqueue(task);
    }

    fn on_job(&mut self, _ctx: &mut Ctx, task: TaskId, job: Job) {
        self.log(format!("job {task} {}-{}", job.release, job.deadline));
    }

    fn on_block(&mut self, _ctx: &mut Ctx, task: TaskId, _block: Block) {
        self.log(format!("block {task}"));
        self.dequeue(task);
    }

    fn on_dispatch(&mut self, ctx: &mut Ctx, task: TaskId, cpu: CpuId) {
        self.log(format!("dispatch {task} {cpu}"));
        self.dequeue(task);
        if self.knobs.lock().unwrap().exclusive_on_dispatch {
            let r = ctx.set_exclusive(task, true);
            self.note(format!("set_exclusive({task}) on dispatch: {r:?}"));
        }
    }

    fn on_preempt(&mut self, _ctx: &mut Ctx, task: TaskId, cpu: CpuId, why: Preempt) {
        self.log(format!("preempt {task} {cpu} {why:?}"));
        self.enqueue(task);
    }

    fn on_run(&mut self, _ctx: &mut Ctx, task: TaskId, cpu: CpuId, ran: Ns) {
        self.log(format!("run {task} {cpu} {ran}"));
    }

    fn accounts_runs(&self) -> bool {
        !self.knobs.lock().unwrap().ignores_runs
    }

    fn dispatches_in_pick(&self) -> bool {
        self.knobs.lock().unwrap().dispatches_in_pick
    }

    fn on_tick(&mut self, _ctx: &mut Ctx, cpu: CpuId) {
        self.log(format!("tick {cpu}"));
    }

    fn on_event(&mut self, ctx: &mut Ctx, token: u64) {
        self.log(format!("event {token}"));
        let rearm = self.knobs.lock().unwrap().rearm;
        if let Some((at, tok)) = rearm {
            let r = ctx.set_event(at, tok);
            self.note(format!("set_event({at}, {tok}): {r:?}"));
        }
    }

    fn on_message(&mut self, ctx: &mut Ctx, from: Sender, task: TaskId, req: &Request) -> Reply {
        self.log(format!("message {task} {req:?} from {:?}", from.task));
        match req {
            Request::Set { delay } => {
                let at = ctx.now() + delay;
                match ctx.set_event(at, task.0 as u64) {
                    Ok(()) => Reply::Value(at as i64),
                    Err(e) => Reply::refused(e.to_string()),
                }
            }
            Request::Param { name, value } => match name.as_str() {
                "exclusive" => match ctx.set_exclusive(task, *value != 0) {
                    Ok(()) => Reply::Ok,
                    Err(e) => Reply::refused(e.to_string()),
                },
                // an absolute event time, token = the task id
                "event_at" => match ctx.set_event(*value as Ns, task.0 as u64) {
                    Ok(()) => Reply::Ok,
                    Err(e) => Reply::refused(e.to_string()),
                },
                "cancel" => {
                    ctx.cancel_event(*value as u64);
                    Reply::Ok
                }
                "resched" => match ctx.resched(CpuId(*value as u16)) {
                    Ok(()) => Reply::Ok,
                    Err(e) => Reply::refused(e.to_string()),
                },
                "echo" => Reply::Value(*value),
                _ => Reply::refused(format!("unknown parameter {name}")),
            },
            _ => Reply::refused(format!("{} does not understand {req:?}", self.kind())),
        }
    }

    fn pick(&mut self, ctx: &mut Ctx, cpu: CpuId) -> Option<Decision> {
        self.log(format!("pick {cpu}"));
        let excl = self.knobs.lock().unwrap().exclusive_on_pick.take();
        if let Some((t, flag)) = excl {
            let r = ctx.set_exclusive(t, flag);
            self.note(format!("set_exclusive({t}, {flag}) on pick: {r:?}"));
        }
        let (scripted, silent, slice) = {
            let mut k = self.knobs.lock().unwrap();
            (k.script.pop_front(), k.silent, k.slice)
        };
        if let Some(d) = scripted {
            return d;
        }
        if silent {
            return None;
        }
        let q = self.queue.lock().unwrap();
        q.iter().copied().find(|&t| ctx.state(t) == TaskState::Runnable && ctx.allowed(t, cpu)).map(|task| Decision { task, slice })
    }

    fn on_refused(&mut self, _ctx: &mut Ctx, cpu: CpuId, decision: Decision, why: Refusal) {
        self.log(format!("refused {cpu} {} {why:?}", decision.task));
    }
}

// ----- helpers -----

pub const USER: u32 = 1000;

pub fn me(task: TaskId) -> Sender {
    Sender { task: Some(task), uid: USER }
}

pub fn reserved(pct: u64) -> Usage {
    Usage::Reserved { cpu_ppm: pct * 10_000 }
}

pub fn hard(cpus: &[u16], pct: u64) -> Usage {
    Usage::HardTime { cpus: cpus.iter().map(|&c| CpuId(c)).collect(), util_ppm: pct * 10_000 }
}

/// A dispatcher over `ncpus` CPUs whose default scheduler is a [`TestPolicy`] named "def".
pub fn dispatcher(ncpus: u16) -> (Dispatcher, Probe, Log) {
    let log = new_log();
    let (p, probe) = TestPolicy::boxed("def", &log);
    (Dispatcher::new(ncpus, "def", p, HierarchyConfig::default()), probe, log)
}

/// Registers a [`TestPolicy`] named `name` with a reserved share of `pct`% of one CPU.
pub fn add_sched(d: &mut Dispatcher, log: &Log, name: &str, pct: u64, pos: Position) -> (SchedId, Probe) {
    let (p, probe) = TestPolicy::boxed(name, log);
    let id = d.register(name, p, reserved(pct), pos).expect("registration");
    (id, probe)
}

pub fn task(d: &mut Dispatcher) -> TaskId {
    d.add_task(0, TaskParams::new(), CpuSet::NONE, None, true)
}

pub fn blocked_task(d: &mut Dispatcher) -> TaskId {
    d.add_task(0, TaskParams::new(), CpuSet::NONE, None, false)
}

pub fn pinned(d: &mut Dispatcher, cpus: &[u16]) -> TaskId {
    d.add_task(0, TaskParams::new(), cpus.iter().map(|&c| CpuId(c)).collect(), None, true)
}

/// What the dispatcher asked the mechanism for since the last call (the dispatcher tests
/// check the effects themselves; a mechanism carries them out through `vassal_core::driver`).
pub fn effects(d: &mut Dispatcher) -> Vec<Effect> {
    let mut out = Vec::new();
    d.drain_effects(&mut out);
    out
}

pub fn join(d: &mut Dispatcher, s: SchedId, t: TaskId) -> Reply {
    d.message(0, s, me(t), t, &Request::Join)
}

pub fn param(name: &str, value: i64) -> Request {
    Request::Param { name: name.to_string(), value }
}

pub fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}
