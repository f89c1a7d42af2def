//! The discrete-event engine: virtual time, N CPUs, a clock model (periodic tick or
//! one-shot timers), context-switch and migration costs, unscheduled time, interrupt
//! sources delivered to handler tasks (Go! §4), hand-off on block, task behaviours, and
//! main memory with a swap scheduler (paper 004; the hooks are in `engine/swapping.rs`).
//!
//! Time is integer ns. Events at equal times run in the order they were queued (a
//! sequence number breaks ties), every random draw comes from a ChaCha RNG seeded from
//! the scenario seed and the task/CPU/source index, and nothing iterates a hash map, so
//! the same scenario and seed give a byte-identical report.
//!
//! Accounting is exact: each CPU's elapsed time is split into overhead (switch,
//! migration, unscheduled time: the interval up to `busy_until`), busy (a task making
//! progress) and idle, settled whenever anything happens on the CPU.
//!
//! Clock model: with `ClockMode::Tick`, slice expiries, scheduler events and timer
//! waits are rounded up to the next tick (NT's HAL, paper 000 §2); wake-ups from I/O,
//! interrupts and reschedule requests are immediate (a DISPATCH interrupt).

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::Distribution;
use vassal_core::driver::{self, Due, Hooks, RESCHED_LIMIT};
use vassal_core::{
    Block, CpuId, Dispatched, Dispatcher, Driver, HierarchyConfig, Ns, Position, Preempt, Reply, Request, SchedId, Sender, TaskId,
    TaskState, VirtualTime, Wake, SEC,
};

use crate::metrics::Metrics;
use crate::model::{Behaviour, ClockMode, Dist, Phase, Scenario};
use crate::report::{CpuReport, Report, SchedReport, TaskReport, Totals};
use crate::swap::Swapper;

mod swapping;
use swapping::Kernel;

mod randres;

/// Infinite work (a CPU hog, a runaway loop).
const FOREVER: Ns = Ns::MAX;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SimError {
    #[error("default scheduler '{name}': {reason}")]
    DefaultPolicy { name: String, reason: String },
    #[error("invariant violated at {now} ns: {what}")]
    Invariant { now: Ns, what: String },
    #[error("scenario has {0} CPUs; expected 1..=64")]
    Cpus(u16),
    #[error("task '{task}': the default scheduler '{sched}' refused it: {reason}")]
    TaskRefused { task: String, sched: String, reason: String },
}

/// An engine event. Scheduler events are the driver's own ([`Due::Event`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ev {
    LoadSched(usize),
    UnloadSched(usize),
    TaskStart(usize),
    /// The end of a task's timed wait (timer [`Timer::Wake`]).
    TaskWake(usize),
    JobRelease(usize),
    LoopFault(usize),
    /// A CPU's burst completion or slice end (timer [`Timer::Cpu`]).
    CpuTimer(u16),
    Tick,
    Interrupt(usize),
    Unscheduled(u16),
    /// The swap scheduler wakes (a transfer ended, its once-a-second retry, or a wake-up;
    /// timer [`Timer::Swap`]).
    Swap,
    /// A randres job's deadline (timer [`Timer::Randres`]).
    RandresDeadline(usize),
    /// A contained module's watchdog may fire now (see `Sim::contain`).
    Watchdog,
}

/// The keys of the engine's timers that are re-armed or cancelled: each names at most
/// one queued event (see [`vassal_core::Timers`]); the other events are one-shot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Timer {
    Cpu(u16),
    Wake(usize),
    Swap,
    Randres(usize),
}

#[derive(Default)]
struct Cpu {
    current: Option<usize>,
    slice_end: Option<Ns>,
    /// Overhead (switch, migration, unscheduled time) runs until this time.
    busy_until: Ns,
    /// Time up to which this CPU is accounted.
    settled: Ns,
}

/// What the current burst of work is for, to record its response when it completes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Work {
    Plain,
    Job {
        release: Ns,
        deadline: Ns,
    },
    /// A player's frame, to be shown at `ideal`.
    Frame {
        ideal: Ns,
    },
    Burst {
        start: Ns,
    },
    Irq {
        arrival: Ns,
    },
}

/// What a task not running or runnable waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Wait {
    None,
    NotStarted,
    Timer { voluntary: bool },
    Job,
    Interrupt,
    Exited,
}

struct SimTask {
    id: TaskId,
    rng: ChaCha8Rng,
    remaining: Ns,
    work: Work,
    wait: Wait,
    phase: usize,
    timer_target: Option<Ns>,
    jobs: VecDeque<(Ns, Ns)>,
    released: u64,
    irqs: VecDeque<Ns>,
    looping: bool,
    /// Its current block is a long (terminal) wait, not a short I/O (paper 004 §2).
    waiting: bool,
    /// Per script phase: how many times a `times` phase has sent the script back.
    loops: Vec<u64>,
    randres: randres::State,
    /// During a `RunWall` phase: the real time at which it ends.
    run_until: Option<Ns>,
    /// The last expiry of each of the task's rt-app timers (`RtTimer`), by number.
    rt_timers: Vec<Option<Ns>>,
}

/// What a task does next, decided by its behaviour.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    Run,
    Yield,
    Block { voluntary: bool, wake_at: Option<Ns>, hand_off: Option<usize> },
    Exit,
}

fn sample(d: &Dist, rng: &mut ChaCha8Rng) -> Ns {
    match *d {
        Dist::Const(v) => v,
        Dist::Uniform(lo, hi) => rng.gen_range(lo.min(hi)..=hi.max(lo)),
        Dist::Exp(mean) => {
            if mean == 0 {
                return 0;
            }
            let e = rand_distr::Exp1;
            let x: f64 = e.sample(rng);
            (x * mean as f64).round().min(u64::MAX as f64 / 2.0) as Ns
        }
        Dist::Normal(mean, sd) => {
            let z: f64 = rand_distr::StandardNormal.sample(rng);
            (mean as f64 + z * sd as f64).round().max(0.0) as Ns
        }
    }
}

fn rng_for(seed: u64, salt: u64, index: u64) -> ChaCha8Rng {
    let mut r = ChaCha8Rng::seed_from_u64(seed);
    r.set_stream(salt.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ index);
    r
}

/// A span of time during which `task` held `cpu` (switch cost included), and the
/// scheduler whose decision put it there.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Slice {
    pub cpu: u16,
    pub task: usize,
    pub start: Ns,
    pub end: Ns,
    pub by: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum MarkKind {
    Wake,
    Block,
    Exit,
    /// The swap scheduler took the task's image out of main memory (paper 004 §4.3).
    SwapOut,
    /// Its image is back in memory.
    SwapIn,
}

/// A point event of a task.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Mark {
    pub at: Ns,
    pub task: usize,
    pub kind: MarkKind,
}

/// What happened when, for plots, trace files and metrics over time. Recorded only on
/// request ([`Sim::record_trace`]).
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct Trace {
    pub slices: Vec<Slice>,
    pub marks: Vec<Mark>,
    /// Virtual times of tasks whose policy keeps them (BVT's A_i and E_i), recorded
    /// whenever one changes: each value holds until the task's next sample.
    pub vtimes: Vec<VtSample>,
    /// Scheduler events (Vassal's SetSchedulerEvent) as they fired: (time, scheduler).
    pub events: Vec<(Ns, String)>,
}

/// A task's virtual times (see [`vassal_core::VirtualTime`]) from time `at` on, in
/// virtual ns.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct VtSample {
    pub at: Ns,
    pub task: usize,
    pub actual: f64,
    pub effective: f64,
}

/// A simulation of one scenario.
pub struct Sim {
    /// Shared so behaviour code can read the scenario while the engine changes.
    sc: Arc<Scenario>,
    now: Ns,
    /// The dispatcher, the engine's event queue (with the scheduler events) and the
    /// pending decisions.
    drv: Driver<Timer, Ev>,
    cpus: Vec<Cpu>,
    tasks: Vec<SimTask>,
    sched_ids: Vec<Option<SchedId>>,
    handlers: BTreeMap<u32, Vec<usize>>,
    task_index: BTreeMap<String, usize>,
    cpu_rngs: Vec<ChaCha8Rng>,
    irq_rngs: Vec<ChaCha8Rng>,
    tick: Ns,
    metrics: Metrics,
    checks: bool,
    trace: Option<Trace>,
    /// Per CPU: the open slice (task, start, decider).
    open: Vec<Option<(usize, Ns, String)>>,
    /// Main memory and the swap scheduler (scenarios with `[memory]`).
    swap: Option<Swapper>,
    /// The paper 004 §5 kernel event counts.
    kernel: Kernel,
    /// While tracing: each task's last recorded virtual times.
    vt_last: Vec<Option<VirtualTime>>,
    /// When the queued watchdog check (if any) is due.
    watchdog_at: Option<Ns>,
}

impl Sim {
    pub fn new(sc: Scenario) -> Result<Sim, SimError> {
        if sc.machine.cpus == 0 || sc.machine.cpus > vassal_core::MAX_CPUS {
            return Err(SimError::Cpus(sc.machine.cpus));
        }
        let default = vassal_policies::build(&sc.default_policy.kind, &sc.default_policy.params)
            .map_err(|reason| SimError::DefaultPolicy { name: sc.default_name.clone(), reason })?;
        let cfg = HierarchyConfig { min_best_effort_ppm: sc.machine.min_best_effort_ppm };
        let mut disp = Dispatcher::new(sc.machine.cpus, &sc.default_name, default, cfg);
        let n = sc.machine.cpus as usize;
        let mut tasks = Vec::with_capacity(sc.tasks.len());
        let mut handlers: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
        let mut task_index = BTreeMap::new();
        for (i, spec) in sc.tasks.iter().enumerate() {
            let id = disp
                .try_add_task(0, spec.params.clone(), spec.affinity, None, false)
                .map_err(|(_, reason)| SimError::TaskRefused { task: spec.name.clone(), sched: sc.default_name.clone(), reason })?;
            if let Behaviour::Handler { vector, .. } = spec.behaviour {
                handlers.entry(vector).or_default().push(i);
            }
            task_index.insert(spec.name.clone(), i);
            tasks.push(SimTask {
                id,
                rng: rng_for(sc.seed, 1, i as u64),
                remaining: 0,
                work: Work::Plain,
                wait: Wait::NotStarted,
                phase: 0,
                timer_target: None,
                jobs: VecDeque::new(),
                released: 0,
                irqs: VecDeque::new(),
                looping: false,
                waiting: false,
                loops: Vec::new(),
                randres: randres::State::default(),
                run_until: None,
                rt_timers: Vec::new(),
            });
        }
        let tick = if sc.machine.hz > 0 { (SEC / sc.machine.hz as u64).max(1) } else { 0 };
        let metrics = Metrics::new(sc.machine.cpus, sc.tasks.iter().map(|t| t.name.clone()));
        let mut sim = Sim {
            now: 0,
            drv: Driver::new(disp),
            cpus: (0..n).map(|_| Cpu::default()).collect(),
            tasks,
            sched_ids: vec![None; sc.schedulers.len()],
            handlers,
            task_index,
            cpu_rngs: (0..n).map(|c| rng_for(sc.seed, 2, c as u64)).collect(),
            irq_rngs: (0..sc.interrupts.len()).map(|k| rng_for(sc.seed, 3, k as u64)).collect(),
            tick,
            metrics,
            checks: false,
            trace: None,
            open: vec![None; n],
            swap: sc.memory.as_ref().map(|m| Swapper::new(m.config.clone(), &m.sizes)),
            kernel: Kernel::new(sc.tasks.len()),
            vt_last: Vec::new(),
            watchdog_at: None,
            sc: Arc::new(sc),
        };
        sim.queue_initial_events();
        Ok(sim)
    }

    /// Checks the dispatcher's and the engine's invariants after every event (slow; for tests).
    pub fn set_checks(&mut self, on: bool) {
        self.checks = on;
    }

    /// Records a [`Trace`] of the run (see [`Sim::run_traced`]).
    pub fn record_trace(&mut self) {
        self.trace = Some(Trace::default());
        self.vt_last = vec![None; self.tasks.len()];
    }

    /// While tracing: records the virtual times that changed since the last sample.
    fn sample_virtual_times(&mut self) {
        let Some(trace) = &mut self.trace else { return };
        for (i, t) in self.tasks.iter().enumerate() {
            let vt = self.drv.disp.virtual_time(t.id);
            if vt != self.vt_last[i] {
                if let Some(v) = vt {
                    trace.vtimes.push(VtSample { at: self.now, task: i, actual: v.actual, effective: v.effective });
                }
                self.vt_last[i] = vt;
            }
        }
    }

    pub(super) fn mark(&mut self, task: usize, kind: MarkKind) {
        if let Some(t) = &mut self.trace {
            t.marks.push(Mark { at: self.now, task, kind });
        }
    }

    /// Closes CPU `c`'s open slice and opens one for `next` (None: idle).
    fn slice(&mut self, c: usize, next: Option<(usize, &str)>) {
        let Some(trace) = &mut self.trace else { return };
        let now = self.now;
        if let (Some((t, _, _)), Some((n, _))) = (&self.open[c], next) {
            if *t == n {
                return; // the same task goes on
            }
        }
        if let Some((task, start, by)) = self.open[c].take() {
            if now > start {
                trace.slices.push(Slice { cpu: c as u16, task, start, end: now, by });
            }
        }
        self.open[c] = next.map(|(t, by)| (t, now, by.to_string()));
    }

    /// Queues a one-shot event (none past the horizon).
    fn push(&mut self, at: Ns, ev: Ev) {
        if at <= self.sc.until {
            self.drv.add_timer(at, ev);
        }
    }

    /// Arms timer `key` at `at`, replacing its queued event (past the horizon: cancels it).
    fn set_timer(&mut self, at: Ns, key: Timer, ev: Ev) {
        if at <= self.sc.until {
            self.drv.set_timer(at, key, ev);
        } else {
            self.drv.cancel_timer(key);
        }
    }

    /// Rounds a timer expiry up to the clock's resolution.
    fn quantise(&self, at: Ns) -> Ns {
        match self.sc.machine.clock {
            ClockMode::OneShot => at,
            ClockMode::Tick => at.div_ceil(self.tick).saturating_mul(self.tick),
        }
    }

    fn queue_initial_events(&mut self) {
        let sc = Arc::clone(&self.sc);
        for (k, s) in sc.schedulers.iter().enumerate() {
            self.push(s.load_at, Ev::LoadSched(k));
            if let Some(t) = s.unload_at {
                self.push(t, Ev::UnloadSched(k));
            }
        }
        for (i, t) in sc.tasks.iter().enumerate() {
            self.push(t.start, Ev::TaskStart(i));
            if let Behaviour::Periodic { offset, .. } = t.behaviour {
                self.push(t.start.saturating_add(offset), Ev::JobRelease(i));
            }
            if let Some(at) = t.loop_at {
                self.push(at, Ev::LoopFault(i));
            }
        }
        if self.tick > 0 {
            self.push(self.tick, Ev::Tick);
        }
        for k in 0..self.sc.interrupts.len() {
            let gap = sample(&self.sc.interrupts[k].every, &mut self.irq_rngs[k]).max(1);
            self.push(self.sc.interrupts[k].start.saturating_add(gap), Ev::Interrupt(k));
        }
        if let Some(u) = &sc.machine.unscheduled {
            for c in 0..self.cpus.len() {
                let gap = sample(&u.interval, &mut self.cpu_rngs[c]).max(1);
                self.push(gap, Ev::Unscheduled(c as u16));
            }
        }
    }

    /// Runs to the horizon and reports.
    pub fn run(self) -> Result<Report, SimError> {
        self.run_traced().map(|(r, _)| r)
    }

    /// Runs to the horizon; returns the report and the trace (empty unless
    /// [`Sim::record_trace`] was called).
    pub fn run_traced(mut self) -> Result<(Report, Trace), SimError> {
        while let Some((at, due)) = self.drv.pop_due(Ns::MAX) {
            self.now = at;
            self.metrics.events += 1;
            match due {
                Due::Event { sched, token } => driver::fire(&mut self, at, sched, token),
                Due::Timer(ev) => self.handle(ev),
            }
            self.flush();
            if self.trace.is_some() {
                self.sample_virtual_times();
            }
            self.contain();
            if self.checks {
                self.check().map_err(|what| SimError::Invariant { now: self.now, what })?;
            }
        }
        self.now = self.sc.until;
        for c in 0..self.cpus.len() {
            self.settle(c);
        }
        if self.checks {
            self.check().map_err(|what| SimError::Invariant { now: self.now, what })?;
        }
        for c in 0..self.cpus.len() {
            self.slice(c, None);
        }
        let trace = self.trace.take().unwrap_or_default();
        Ok((self.report(), trace))
    }

    /// The engine's invariants (beyond the dispatcher's own).
    pub fn check(&self) -> Result<(), String> {
        self.drv.disp.check_invariants()?;
        for (c, cpu) in self.cpus.iter().enumerate() {
            let d = self.drv.disp.running(CpuId(c as u16)).map(|t| t.0 as usize);
            if d != cpu.current {
                return Err(format!("cpu{c}: engine runs {:?}, dispatcher says {:?}", cpu.current, d));
            }
            let m = &self.metrics.cpus[c];
            if m.busy_ns + m.overhead_ns > cpu.settled {
                return Err(format!("cpu{c}: busy {} + overhead {} exceed elapsed {}", m.busy_ns, m.overhead_ns, cpu.settled));
            }
        }
        for (i, t) in self.tasks.iter().enumerate() {
            let st = self.drv.disp.state(t.id);
            let waiting = !matches!(t.wait, Wait::None);
            if st.is_runnable() == waiting && !matches!(t.wait, Wait::Exited) {
                return Err(format!("task {} is {st:?} but the engine has it waiting for {:?}", self.sc.tasks[i].name, t.wait));
            }
            if matches!(t.wait, Wait::Exited) != (st == TaskState::Dead) {
                return Err(format!("task {} exit state disagrees ({st:?})", self.sc.tasks[i].name));
            }
        }
        self.swap_check()
    }

    // ----- accounting -----

    /// Accounts CPU `c` up to now: overhead until `busy_until`, then progress of the
    /// running task (or idle).
    fn settle(&mut self, c: usize) {
        let now = self.now;
        let cpu = &mut self.cpus[c];
        if now <= cpu.settled {
            return;
        }
        let from = cpu.settled;
        let ov_end = now.min(cpu.busy_until);
        if ov_end > from {
            self.metrics.overhead(c, ov_end - from);
        }
        let run_from = from.max(cpu.busy_until);
        cpu.settled = now;
        if cpu.current.is_none() && now > run_from {
            self.swap_idle(now - run_from);
        }
        let cpu = &mut self.cpus[c];
        if let Some(i) = cpu.current {
            if now > run_from {
                let ran = now - run_from;
                let t = &mut self.tasks[i];
                if t.remaining != FOREVER {
                    t.remaining = t.remaining.saturating_sub(ran);
                }
                self.metrics.ran(i, c, ran);
                self.drv.disp.account(now, t.id, CpuId(c as u16), ran);
            }
        }
    }

    fn settle_all(&mut self) {
        for c in 0..self.cpus.len() {
            self.settle(c);
        }
    }

    /// Plans the next event on CPU `c`: the current burst's completion or its slice end.
    fn replan(&mut self, c: usize) {
        let now = self.now;
        let cpu = &mut self.cpus[c];
        let at = match cpu.current {
            None => FOREVER,
            Some(i) => {
                let remaining = self.tasks[i].remaining;
                let done = if remaining == FOREVER { FOREVER } else { now.max(cpu.busy_until).saturating_add(remaining) };
                done.min(cpu.slice_end.unwrap_or(FOREVER))
            }
        };
        let at = (at != FOREVER).then_some(at);
        let key = Timer::Cpu(c as u16);
        if at == self.drv.timer_at(key) {
            return; // the queued timer is still right
        }
        match at {
            Some(at) => self.set_timer(at, key, Ev::CpuTimer(c as u16)),
            None => self.drv.cancel_timer(key),
        }
    }

    // ----- decisions -----

    /// A decision on CPU `c` (through the driver: accounted first, then [`Sim::dispatched`]).
    fn schedule(&mut self, c: usize, why: Preempt) {
        driver::decide(self, self.now, CpuId(c as u16), why);
    }

    /// The dispatcher decided `d` on CPU `c`.
    fn dispatched(&mut self, c: usize, d: Option<Dispatched>) {
        // `current` stays the task this CPU switches from, for start()'s switch cost.
        let prev = self.cpus[c].current;
        if let Some(p) = prev.filter(|&p| d.map(|d| d.task) != Some(self.tasks[p].id)) {
            self.metrics.runnable(p, self.now);
        }
        match d {
            Some(d) => self.start(c, d),
            None => {
                self.cpus[c].current = None;
                self.cpus[c].slice_end = None;
                self.slice(c, None);
                self.replan(c);
            }
        }
    }

    fn start(&mut self, c: usize, d: Dispatched) {
        let i = d.task.0 as usize;
        let now = self.now;
        if self.cpus[c].current != Some(i) {
            let m = &self.sc.machine;
            let cost = m.switch_cost + if d.migrated { m.migration_cost } else { 0 };
            let cpu = &mut self.cpus[c];
            cpu.busy_until = cpu.busy_until.max(now).saturating_add(cost);
            self.metrics.switched_in(i, d.migrated);
        }
        self.kernel.dispatches += 1;
        let slice_end = d.slice.map(|s| self.quantise(now.saturating_add(s)));
        if self.trace.is_some() {
            let by = self.drv.disp.sched_name(d.by).unwrap_or("?").to_string();
            self.slice(c, Some((i, &by)));
        }
        let cpu = &mut self.cpus[c];
        cpu.current = Some(i);
        cpu.slice_end = slice_end;
        let run_from = now.max(cpu.busy_until);
        if let Some(until) = self.tasks[i].run_until {
            // a wall-clock run ends at its time, however long the task waited
            self.tasks[i].remaining = until.saturating_sub(run_from);
        }
        self.metrics.started(i, run_from);
        self.replan(c);
    }

    /// Applies the effects policies asked for and makes every pending decision, until
    /// nothing is left to do at this instant (the driver's settle).
    fn flush(&mut self) {
        driver::settle(self, self.now);
    }

    // ----- events -----

    fn handle(&mut self, ev: Ev) {
        match ev {
            Ev::LoadSched(k) => self.load_sched(k),
            Ev::UnloadSched(k) => self.unload_sched(k),
            Ev::TaskStart(i) => {
                if let Some(name) = self.sc.tasks[i].scheduler.clone() {
                    self.send(i, &name, Request::Join);
                }
                self.tasks[i].wait = Wait::Timer { voluntary: true };
                self.swap_start(i);
                self.resume(i);
            }
            Ev::TaskWake(i) => {
                if matches!(self.tasks[i].wait, Wait::Timer { .. }) {
                    self.resume(i);
                }
            }
            Ev::JobRelease(i) => self.release_job(i),
            Ev::LoopFault(i) => self.loop_fault(i),
            Ev::CpuTimer(c) => {
                let c = c as usize;
                self.settle(c);
                let Some(i) = self.cpus[c].current else { return };
                if self.tasks[i].remaining == 0 {
                    self.after_burst(i, c);
                } else if self.cpus[c].slice_end.is_some_and(|e| e <= self.now) {
                    self.schedule(c, Preempt::SliceExpired);
                } else {
                    self.replan(c);
                }
            }
            Ev::Tick => {
                for c in 0..self.cpus.len() {
                    self.settle(c);
                    self.drv.disp.tick(self.now, CpuId(c as u16));
                }
                self.push(self.now.saturating_add(self.tick), Ev::Tick);
            }
            Ev::Interrupt(k) => self.interrupt(k),
            Ev::Swap => self.swap_event(),
            Ev::RandresDeadline(i) => self.randres_deadline(i),
            Ev::Watchdog => self.watchdog_at = None,
            Ev::Unscheduled(c) => {
                let c = c as usize;
                self.settle(c);
                let Some(u) = self.sc.machine.unscheduled.as_ref() else { return };
                let dur = sample(&u.duration, &mut self.cpu_rngs[c]);
                let gap = sample(&u.interval, &mut self.cpu_rngs[c]).max(1);
                let cpu = &mut self.cpus[c];
                cpu.busy_until = cpu.busy_until.max(self.now).saturating_add(dur);
                self.replan(c);
                self.push(self.now.saturating_add(gap), Ev::Unscheduled(c as u16));
            }
        }
    }

    /// Containment of loaded modules (issue 8): ejects the ones that failed, and queues a
    /// check for when a watchdog could next fire.
    fn contain(&mut self) {
        let ejected = self.drv.disp.eject_failed(self.now);
        if !ejected.is_empty() {
            for e in &ejected {
                let to: Vec<String> = e
                    .moved
                    .iter()
                    .map(|(t, s)| {
                        let task = self.sc.tasks.get(t.0 as usize).map_or_else(|| t.to_string(), |x| x.name.clone());
                        format!("{task} -> {}", self.drv.disp.sched_name(*s).unwrap_or("?"))
                    })
                    .collect();
                self.metrics.note(self.now, format!("scheduler '{}' ejected: {} [{}]", e.name, e.reason, to.join(", ")));
                if let Some(k) = self.sched_ids.iter().position(|&id| id == Some(e.sched)) {
                    self.sched_ids[k] = None;
                }
            }
            self.settle_all();
            self.flush();
        }
        if let Some(at) = self.drv.disp.next_watchdog() {
            if self.watchdog_at.is_none_or(|w| at < w) {
                self.watchdog_at = Some(at);
                self.push(at, Ev::Watchdog);
            }
        }
    }

    fn load_sched(&mut self, k: usize) {
        let spec = self.sc.schedulers[k].clone();
        if crate::modules::module_path(&spec.policy).is_some() {
            return self.load_module(k);
        }
        let policy = match vassal_policies::build(&spec.policy.kind, &spec.policy.params) {
            Ok(p) => p,
            Err(e) => {
                self.metrics.note(self.now, format!("scheduler '{}' not loaded: {e}", spec.name));
                return;
            }
        };
        // Schedulers listed earlier in the file sit higher.
        let pos = (0..k).rev().find_map(|j| self.sched_ids[j]).map_or(Position::Top, Position::Below);
        match self.drv.disp.register(&spec.name, policy, spec.usage, pos) {
            Ok(id) => {
                self.sched_ids[k] = Some(id);
                self.metrics.note(self.now, format!("scheduler '{}' ({}) loaded", spec.name, spec.policy.kind));
            }
            Err(e) => self.metrics.note(self.now, format!("scheduler '{}' refused: {e}", spec.name)),
        }
    }

    /// Loads a module scheduler: its declared usage goes through the conflict check, and
    /// it is contained ([`vassal_core::Containment`], watchdog [`vassal_module::DEFAULT_WATCHDOG`]).
    fn load_module(&mut self, k: usize) {
        let spec = self.sc.schedulers[k].clone();
        let module = match crate::modules::build_module(&spec.policy, self.sc.machine.cpus) {
            Ok(m) => m,
            Err(e) => return self.metrics.note(self.now, format!("scheduler '{}' not loaded: {e}", spec.name)),
        };
        let (usage, what) = (module.usage, format!("{} ({})", module.policy.kind(), module.label));
        let pos = (0..k).rev().find_map(|j| self.sched_ids[j]).map_or(Position::Top, Position::Below);
        match self.drv.disp.register(&spec.name, module.policy, usage, pos) {
            Ok(id) => {
                let guard = vassal_core::Containment { watchdog: Some(vassal_module::DEFAULT_WATCHDOG) };
                self.drv.disp.contain(id, guard).expect("a scheduler just registered above the default");
                self.sched_ids[k] = Some(id);
                self.metrics.note(self.now, format!("scheduler '{}' loaded from module {what}, {}", spec.name, usage.describe()));
            }
            Err(e) => self.metrics.note(self.now, format!("scheduler '{}' refused: {e}", spec.name)),
        }
    }

    fn unload_sched(&mut self, k: usize) {
        let Some(id) = self.sched_ids[k].take() else { return };
        self.settle_all();
        if crate::modules::module_path(&self.sc.schedulers[k].policy).is_some() {
            // A module's tasks go to the scheduler below it (issue 8).
            let name = self.sc.schedulers[k].name.clone();
            match self.drv.disp.unregister_to_below(self.now, id) {
                Ok(moved) => {
                    let to: Vec<String> = moved
                        .iter()
                        .map(|(t, s)| format!("{} -> {}", self.sc.tasks[t.0 as usize].name, self.drv.disp.sched_name(*s).unwrap_or("?")))
                        .collect();
                    self.metrics.note(self.now, format!("module scheduler '{name}' unloaded [{}]", to.join(", ")))
                }
                Err(e) => self.metrics.note(self.now, format!("unloading '{name}' failed: {e}")),
            }
            return;
        }
        match self.drv.disp.unregister(self.now, id) {
            Ok(moved) => self.metrics.note(
                self.now,
                format!("scheduler '{}' unloaded; {} task(s) returned to the default", self.sc.schedulers[k].name, moved.len()),
            ),
            Err(e) => self.metrics.note(self.now, format!("unloading '{}' failed: {e}", self.sc.schedulers[k].name)),
        }
    }

    /// Sends a message from task `i` to the scheduler named `to`, about task `about`
    /// (None: task `i` itself).
    fn send(&mut self, i: usize, to: &str, req: Request) -> Reply {
        self.send_about(i, None, to, req)
    }

    fn send_about(&mut self, i: usize, about: Option<usize>, to: &str, req: Request) -> Reply {
        let spec = &self.sc.tasks[i];
        let from = Sender { task: Some(self.tasks[i].id), uid: spec.uid };
        let subject = self.tasks[about.unwrap_or(i)].id;
        let sched = match req {
            Request::Leave => self.drv.disp.owner(self.tasks[i].id),
            _ => self.drv.disp.lookup(to),
        };
        self.metrics.tasks[i].messages += 1;
        self.kernel.syscalls += 1;
        let reply = match sched {
            Some(s) => {
                self.settle_all();
                self.drv.disp.message(self.now, s, from, subject, &req)
            }
            None => Reply::refused(format!("no scheduler named '{to}' is loaded")),
        };
        if let Reply::Refused(why) = &reply {
            self.metrics.tasks[i].refused_messages += 1;
            let name = self.sc.tasks[i].name.clone();
            self.metrics.note(self.now, format!("{name}: {req:?} to '{to}' refused: {why}"));
        }
        reply
    }

    // ----- task behaviour -----

    /// Decides what task `i` does next; loads its next burst of work when it is `Run`.
    fn step(&mut self, i: usize) -> Step {
        let now = self.now;
        self.tasks[i].waiting = false;
        if self.tasks[i].looping {
            let t = &mut self.tasks[i];
            t.remaining = FOREVER;
            t.work = Work::Plain;
            return Step::Run;
        }
        let behaviour = &self.sc.tasks[i].behaviour;
        let t = &mut self.tasks[i];
        match behaviour {
            Behaviour::Cpu { work } => {
                if t.phase == 0 {
                    t.phase = 1;
                    t.remaining = work.unwrap_or(FOREVER);
                    t.work = Work::Plain;
                    Step::Run
                } else {
                    Step::Exit
                }
            }
            Behaviour::Periodic { exec, jobs, .. } => {
                if let Some(&(release, deadline)) = t.jobs.front() {
                    t.remaining = sample(exec, &mut t.rng);
                    t.work = Work::Job { release, deadline };
                    Step::Run
                } else if jobs.is_some_and(|n| t.released >= n) {
                    Step::Exit
                } else {
                    t.wait = Wait::Job;
                    Step::Block { voluntary: true, wake_at: None, hand_off: None }
                }
            }
            Behaviour::Player { period, offset, exec, .. } => {
                // phase 2: the decoded frame waits for its display time (the next ideal
                // time minus one period); otherwise decode the next frame.
                if t.phase == 2 {
                    t.phase = 1;
                    let show = t.timer_target.map_or(now, |next| next - period);
                    return Step::Block { voluntary: true, wake_at: Some(show), hand_off: None };
                }
                t.phase = 1;
                let ideal = *t.timer_target.get_or_insert(now.saturating_add(*offset).saturating_add(*period));
                t.remaining = sample(exec, &mut t.rng);
                t.work = Work::Frame { ideal };
                Step::Run
            }
            Behaviour::Interactive { burst, think } => {
                t.phase ^= 1;
                if t.phase == 1 {
                    t.remaining = sample(burst, &mut t.rng);
                    t.work = Work::Burst { start: now };
                    Step::Run
                } else {
                    let wake_at = now.saturating_add(sample(think, &mut t.rng));
                    Step::Block { voluntary: true, wake_at: Some(wake_at), hand_off: None }
                }
            }
            Behaviour::Io { run, sleep, voluntary } => {
                t.phase ^= 1;
                if t.phase == 1 {
                    t.remaining = sample(run, &mut t.rng);
                    t.work = Work::Plain;
                    Step::Run
                } else {
                    let wake_at = now.saturating_add(sample(sleep, &mut t.rng));
                    Step::Block { voluntary: *voluntary, wake_at: Some(wake_at), hand_off: None }
                }
            }
            Behaviour::Handler { work, .. } => {
                if let Some(arrival) = t.irqs.pop_front() {
                    t.remaining = sample(work, &mut t.rng);
                    t.work = Work::Irq { arrival };
                    Step::Run
                } else {
                    t.wait = Wait::Interrupt;
                    Step::Block { voluntary: true, wake_at: None, hand_off: None }
                }
            }
            Behaviour::Script { .. } => self.step_script(i),
            Behaviour::Randres(_) => self.step_randres(i),
        }
    }

    fn step_script(&mut self, i: usize) -> Step {
        let sc = Arc::clone(&self.sc);
        let Behaviour::Script { phases, repeat } = &sc.tasks[i].behaviour else { unreachable!() };
        let (len, repeat) = (phases.len(), *repeat);
        // A script whose whole loop takes no time would spin forever at one instant.
        for _ in 0..=2 * len {
            let now = self.now;
            let t = &mut self.tasks[i];
            if t.phase >= len {
                if !repeat || len == 0 {
                    return Step::Exit;
                }
                t.phase = 0;
            }
            let phase = &phases[t.phase];
            t.phase += 1;
            t.run_until = None;
            match phase {
                Phase::Run(d) => {
                    t.remaining = sample(d, &mut t.rng);
                    t.work = Work::Plain;
                    return Step::Run;
                }
                Phase::Sleep(d) => {
                    let wake_at = now.saturating_add(sample(d, &mut t.rng));
                    return Step::Block { voluntary: true, wake_at: Some(wake_at), hand_off: None };
                }
                Phase::Terminal(d) => {
                    t.waiting = true;
                    let wake_at = now.saturating_add(sample(d, &mut t.rng));
                    return Step::Block { voluntary: true, wake_at: Some(wake_at), hand_off: None };
                }
                &Phase::Times(k) => {
                    let p = t.phase - 1;
                    if t.loops.len() <= p {
                        t.loops.resize(p + 1, 0);
                    }
                    t.loops[p] += 1;
                    if t.loops[p] < k {
                        t.phase = 0;
                    } else {
                        t.loops[p] = 0;
                    }
                }
                Phase::Fault(d) => {
                    let wake_at = now.saturating_add(sample(d, &mut t.rng));
                    return Step::Block { voluntary: false, wake_at: Some(wake_at), hand_off: None };
                }
                &Phase::Timer(period) => {
                    self.metrics.iteration(i, false, now);
                    let t = &mut self.tasks[i];
                    let mut target = t.timer_target.map_or(now, |p| p).saturating_add(period);
                    if target < now {
                        // missed expiries are skipped: the next one after now
                        target = target.saturating_add((now - target).div_ceil(period.max(1)).saturating_mul(period));
                    }
                    t.timer_target = Some(target);
                    return Step::Block { voluntary: true, wake_at: Some(target), hand_off: None };
                }
                Phase::Yield => {
                    t.remaining = 0;
                    return Step::Yield;
                }
                Phase::RunWall(d) => {
                    let wall = sample(d, &mut t.rng);
                    t.remaining = wall;
                    t.run_until = Some(now.saturating_add(wall));
                    t.work = Work::Plain;
                    return Step::Run;
                }
                &Phase::RtTimer { period, relative, timer } => {
                    self.metrics.iteration(i, false, now);
                    let t = &mut self.tasks[i];
                    if t.rt_timers.len() <= timer {
                        t.rt_timers.resize(timer + 1, None);
                    }
                    let next = t.rt_timers[timer].unwrap_or(now).saturating_add(period);
                    if now < next {
                        t.rt_timers[timer] = Some(next);
                        return Step::Block { voluntary: true, wake_at: Some(next), hand_off: None };
                    }
                    // late: no sleep (rt-app); relative mode restarts the timer from now
                    t.rt_timers[timer] = Some(if relative { now } else { next });
                }
                Phase::HandOff { to, sleep } => {
                    let wake_at = now.saturating_add(sample(sleep, &mut t.rng));
                    let hand_off = self.task_index.get(to).copied();
                    return Step::Block { voluntary: true, wake_at: Some(wake_at), hand_off };
                }
                Phase::Send(s) => {
                    if matches!(s.request, Request::Set { .. }) {
                        self.metrics.iteration(i, true, now);
                    }
                    let about = s.task.as_ref().and_then(|n| self.task_index.get(n).copied());
                    let req = match s.request {
                        // A script's deadline request is relative to when it is sent.
                        Request::Deadline { start, need, deadline } => {
                            Request::Deadline { start: now.saturating_add(start), need, deadline: now.saturating_add(deadline) }
                        }
                        ref r => r.clone(),
                    };
                    self.send_about(i, about, &s.to, req);
                }
                Phase::Join(name) => {
                    self.send(i, name, Request::Join);
                }
                Phase::Leave => {
                    self.send(i, "", Request::Leave);
                }
            }
        }
        let name = self.sc.tasks[i].name.clone();
        self.metrics.note(self.now, format!("{name}: script makes no progress; task exits"));
        Step::Exit
    }

    /// Records the response of the burst that just completed.
    fn complete(&mut self, i: usize) {
        let now = self.now;
        match self.tasks[i].work {
            Work::Plain => {}
            Work::Job { release, deadline } => {
                self.tasks[i].jobs.pop_front();
                self.metrics.job(i, release, now, deadline);
            }
            Work::Burst { start } | Work::Irq { arrival: start } => self.metrics.response(i, now - start),
            Work::Frame { ideal } => {
                let Behaviour::Player { period, late_after, .. } = self.sc.tasks[i].behaviour else { unreachable!() };
                // Shown at its ideal time, or now if decoding ran past it (§4: "on time"
                // is within late_after of the ideal time based on the previous frame).
                let shown = now.max(ideal);
                self.metrics.job(i, ideal.saturating_sub(period), shown, ideal.saturating_add(late_after));
                let t = &mut self.tasks[i];
                t.timer_target = Some(shown.saturating_add(period));
                if now < ideal {
                    t.phase = 2; // sleep until it is shown
                }
            }
        }
        self.tasks[i].work = Work::Plain;
    }

    /// A task that is not runnable continues its behaviour (start, timer, job, interrupt).
    fn resume(&mut self, i: usize) {
        let voluntary = match self.tasks[i].wait {
            Wait::Timer { voluntary } => voluntary,
            Wait::Exited | Wait::None => return,
            _ => true,
        };
        let step = self.step(i);
        self.resume_with(i, step, Wake { voluntary, ..Wake::default() });
    }

    fn resume_with(&mut self, i: usize, step: Step, wake: Wake) {
        match step {
            Step::Run | Step::Yield => {
                self.tasks[i].wait = Wait::None;
                self.mark(i, MarkKind::Wake);
                // Policies compare the waking task with the running ones: settle accounts first.
                self.settle_all();
                self.drv.disp.wake(self.now, self.tasks[i].id, wake);
                self.metrics.runnable(i, self.now);
                self.swap_ready(i);
            }
            Step::Block { voluntary, wake_at, .. } => {
                self.swap_blocked(i);
                self.arm_wait(i, voluntary, wake_at)
            }
            Step::Exit => self.exit(i),
        }
    }

    fn arm_wait(&mut self, i: usize, voluntary: bool, wake_at: Option<Ns>) {
        if let Some(at) = wake_at {
            self.tasks[i].wait = Wait::Timer { voluntary };
            let at = if voluntary { self.quantise(at) } else { at };
            self.set_timer(at.max(self.now), Timer::Wake(i), Ev::TaskWake(i));
        }
    }

    /// The running task `i` on CPU `c` finished its burst of work.
    fn after_burst(&mut self, i: usize, c: usize) {
        self.complete(i);
        match self.step(i) {
            Step::Run => self.replan(c),
            Step::Yield => {
                self.kernel.syscalls += 1;
                self.schedule(c, Preempt::Yield)
            }
            Step::Block { voluntary, wake_at, hand_off } => {
                // A hand-off target finishes the giver's slice (Go!'s directed yield
                // donates the rest of the time slice).
                let inherited = self.cpus[c].slice_end;
                self.drv.disp.block(self.now, self.tasks[i].id, Block { voluntary });
                self.kernel.syscalls += u64::from(voluntary);
                self.swap_blocked(i);
                self.metrics.blocked(i);
                self.mark(i, MarkKind::Block);
                self.cpus[c].current = None;
                self.slice(c, None);
                if wake_at.is_some() {
                    self.arm_wait(i, voluntary, wake_at);
                }
                let handed = hand_off.and_then(|h| self.drv.disp.hand_off(self.now, CpuId(c as u16), self.tasks[h].id).ok());
                match handed {
                    Some(d) => {
                        self.start(c, d);
                        self.cpus[c].slice_end = inherited;
                        self.replan(c);
                    }
                    None => self.schedule(c, Preempt::Resched),
                }
            }
            Step::Exit => self.exit(i), // frees the CPU and makes its next decision
        }
    }

    fn exit(&mut self, i: usize) {
        self.swap_exit(i);
        self.mark(i, MarkKind::Exit);
        let t = &mut self.tasks[i];
        t.wait = Wait::Exited;
        let id = t.id;
        self.drv.cancel_timer(Timer::Wake(i));
        if let Some(c) = self.drv.disp.remove_task(self.now, id) {
            let c = c.0 as usize;
            self.cpus[c].current = None;
            self.slice(c, None);
            self.schedule(c, Preempt::Resched);
        }
        self.metrics.blocked(i);
    }

    fn release_job(&mut self, i: usize) {
        let Behaviour::Periodic { period, deadline, jobs, .. } = self.sc.tasks[i].behaviour else { return };
        let t = &mut self.tasks[i];
        if matches!(t.wait, Wait::Exited | Wait::NotStarted) || jobs.is_some_and(|n| t.released >= n) {
            return;
        }
        t.released += 1;
        t.jobs.push_back((self.now, self.now.saturating_add(deadline)));
        let more = jobs.is_none_or(|n| t.released < n);
        if matches!(t.wait, Wait::Job) {
            self.resume(i);
        }
        if more {
            self.push(self.now.saturating_add(period), Ev::JobRelease(i));
        }
    }

    fn interrupt(&mut self, k: usize) {
        let src = self.sc.interrupts[k].clone();
        self.metrics.interrupts += 1;
        let handlers = self.handlers.get(&src.vector).cloned().unwrap_or_default();
        for h in handlers {
            if matches!(self.tasks[h].wait, Wait::Exited | Wait::NotStarted) {
                continue;
            }
            self.tasks[h].irqs.push_back(self.now);
            if self.tasks[h].wait == Wait::Interrupt {
                let step = self.step(h);
                let wake = Wake { voluntary: true, interrupt: Some(src.vector), warp: src.warp, cpu: None };
                self.resume_with(h, step, wake);
            }
        }
        let gap = sample(&src.every, &mut self.irq_rngs[k]).max(1);
        self.push(self.now.saturating_add(gap), Ev::Interrupt(k));
    }

    /// The task turns into an infinite loop.
    fn loop_fault(&mut self, i: usize) {
        let name = self.sc.tasks[i].name.clone();
        let t = &mut self.tasks[i];
        if matches!(t.wait, Wait::Exited) {
            return;
        }
        t.looping = true;
        t.remaining = FOREVER;
        t.work = Work::Plain;
        self.metrics.note(self.now, format!("{name}: fault — now an infinite loop"));
        match self.drv.disp.state(self.tasks[i].id) {
            TaskState::Running(c) => {
                self.settle(c.0 as usize);
                self.tasks[i].remaining = FOREVER;
                self.replan(c.0 as usize);
            }
            TaskState::Blocked => {
                if matches!(self.tasks[i].wait, Wait::NotStarted) {
                    return; // it starts looping when it starts
                }
                self.drv.cancel_timer(Timer::Wake(i));
                self.resume_with(i, Step::Run, Wake { voluntary: true, ..Wake::default() });
            }
            _ => {}
        }
    }

    // ----- the report -----

    fn report(mut self) -> Report {
        let mut log = std::mem::take(&mut self.metrics.log);
        for (sched, l) in self.drv.disp.drain_logs() {
            let who = l.task.and_then(|t| self.sc.tasks.get(t.0 as usize)).map_or(String::new(), |t| format!("{}: ", t.name));
            log.push((l.at, format!("[{sched}] {who}{}", l.text)));
        }
        log.sort_by_key(|(at, _)| *at);
        let elapsed = self.sc.until;
        let total: Ns = self.metrics.tasks.iter().map(|t| t.cpu_ns).sum();
        let tasks = self
            .metrics
            .tasks
            .iter()
            .zip(&self.tasks)
            .map(|(m, t)| TaskReport {
                name: m.name.clone(),
                scheduler: self.drv.disp.owner(t.id).and_then(|s| self.drv.disp.sched_name(s)).unwrap_or("-").to_string(),
                cpu_ns: m.cpu_ns,
                share: if total > 0 { m.cpu_ns as f64 / total as f64 } else { 0.0 },
                cpu_frac: if elapsed > 0 { m.cpu_ns as f64 / elapsed as f64 } else { 0.0 },
                latency: m.latency.summary(),
                response: m.response.summary(),
                jobs_met: m.jobs_met,
                jobs_missed: m.jobs_missed,
                lateness: m.lateness.summary(),
                iterations: m.iterations.summary(),
                switches: m.switches,
                migrations: m.migrations,
                messages: m.messages,
                refused_messages: m.refused_messages,
            })
            .collect();
        let cpus = self
            .metrics
            .cpus
            .iter()
            .enumerate()
            .map(|(c, m)| CpuReport {
                cpu: c as u16,
                busy_ns: m.busy_ns,
                overhead_ns: m.overhead_ns,
                idle_ns: elapsed.saturating_sub(m.busy_ns + m.overhead_ns),
                utilisation: if elapsed > 0 { m.busy_ns as f64 / elapsed as f64 } else { 0.0 },
            })
            .collect();
        let stats = self.drv.disp.stats();
        let schedulers = self
            .drv
            .disp
            .schedulers()
            .into_iter()
            .map(|s| SchedReport { name: s.name, kind: s.kind, usage: s.usage.describe(), decided: s.decided, refused: s.refused })
            .collect();
        Report {
            scenario: self.sc.name.clone(),
            seed: self.sc.seed,
            elapsed_ns: elapsed,
            tasks,
            cpus,
            schedulers,
            totals: Totals {
                // Every event queued up to the horizon, the superseded ones too (the
                // engine used to pop those and discard them by a generation count).
                events: self.metrics.events + self.drv.dropped_timers(),
                decisions: stats.decisions,
                picks: stats.picks,
                idle_decisions: stats.idle,
                refused_decisions: stats.refused,
                hand_offs: stats.hand_offs,
                switches: self.metrics.switches,
                migrations: self.metrics.migrations,
                interrupts: self.metrics.interrupts,
                overhead_ns: self.metrics.cpus.iter().map(|c| c.overhead_ns).sum(),
            },
            kernel: self.kernel_report(),
            log: log.iter().map(|(at, text)| crate::metrics::log_line(*at, text)).collect(),
        }
    }
}

/// The engine's side of the driver: accounting, dispatching, its clock.
impl Hooks<Timer, Ev> for Sim {
    fn driver(&mut self) -> &mut Driver<Timer, Ev> {
        &mut self.drv
    }
    fn account(&mut self, _now: Ns, cpu: CpuId) {
        self.settle(cpu.0 as usize);
    }
    fn dispatched(&mut self, _now: Ns, cpu: CpuId, _why: Preempt, _before: Option<TaskId>, d: Option<Dispatched>) {
        Sim::dispatched(self, cpu.0 as usize, d);
    }
    /// Under the tick clock, scheduler events are rounded up to the next tick; none past
    /// the horizon is queued.
    fn event_time(&mut self, now: Ns, at: Ns) -> Option<Ns> {
        let at = self.quantise(at.max(now));
        (at <= self.sc.until).then_some(at)
    }
    fn before_event(&mut self, now: Ns, sched: SchedId) {
        if let Some(t) = &mut self.trace {
            t.events.push((now, self.drv.disp.sched_name(sched).unwrap_or("?").to_string()));
        }
        self.settle_all();
    }
    fn livelock(&mut self, now: Ns, cpu: CpuId) {
        self.metrics.note(now, format!("{cpu}: over {RESCHED_LIMIT} reschedules at one instant; ignoring more"));
    }
}

/// Runs a scenario to its horizon.
pub fn simulate(sc: Scenario) -> Result<Report, SimError> {
    Sim::new(sc)?.run()
}
