//! The discrete-event engine: virtual time, N CPUs, a clock model (periodic tick or
//! one-shot timers), context-switch and migration costs, unscheduled time, interrupt
//! sources delivered to handler tasks (Go! §4), hand-off on block, task behaviours, and
//! main memory with a swap scheduler (paper 004). This file holds the [`Sim`] struct and
//! its run loop; the rest is split by concern: `queue.rs` (event kinds, the keyed
//! queue), `cpu.rs` (per-CPU accounting, decisions, the scheduler hierarchy),
//! `workload.rs` (task behaviours), `report.rs` (the report) and `swapping.rs`.
//!
//! Invariants. Time is integer ns. Events at equal times run in the order they were
//! queued (a sequence number breaks ties; each CPU's own timer first), all of them before
//! the decisions they call for (docs/jobs.md), every random draw comes from a ChaCha RNG
//! seeded from the scenario seed and the task/CPU/source index, and nothing iterates a
//! hash map, so the same scenario and seed give a byte-identical report. Accounting is
//! exact: each CPU's elapsed time is split into overhead (switch, migration,
//! unscheduled time: the interval up to `busy_until`), busy and idle, settled whenever
//! anything happens on the CPU. The engine's view of each CPU and task always agrees
//! with the dispatcher's ([`Sim::check`]).
//!
//! Clock model: with `ClockMode::Tick`, slice expiries, scheduler events and timer
//! waits are rounded up to the next tick (NT's HAL, paper 000 §2); wake-ups from I/O,
//! interrupts and reschedule requests are immediate (a DISPATCH interrupt).

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use rand_chacha::ChaCha8Rng;
use vassal_core::driver::{self, Due, Hooks, RESCHED_LIMIT};
use vassal_core::{CpuId, Dispatched, Dispatcher, Driver, HierarchyConfig, Ns, Preempt, SchedId, TaskId, TaskState, VirtualTime, SEC};

use crate::behave::{Behave, Registry};
use crate::metrics::Metrics;
use crate::model::{Behaviour, Scenario};
use crate::report::Report;
use crate::swap::Swapper;

mod cpu;
mod disk;
mod queue;
mod report;
mod swapping;
mod sync;
mod workload;

use cpu::Cpu;
use queue::{Ev, Timer};
use swapping::Kernel;
pub use workload::Cx;
use workload::{rng_for, SimTask, Wait, Work};

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
    /// A task of a kind the scenario language does not know was refused by the registry.
    #[error("{0}")]
    Scenario(crate::scenario::ScenarioError),
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
    /// Every job with a deadline (periodic jobs, player frames, registered behaviours'
    /// jobs, the iterations between a script's or an rt-app thread's timer waits) that
    /// finished, in the order they finished, then those unfinished at the horizon (`end`
    /// None). Jobs abandoned by their behaviour are not listed.
    pub jobs: Vec<JobRecord>,
    /// Every step of a scripted task as it was taken, in order (a synchronisation step
    /// reached before the task held a CPU is listed when it is taken on one).
    pub steps: Vec<StepMark>,
}

/// Task `task` took step `step` (an index into its script) at `at`; for an rt-app timer,
/// `expiry` is the timer's expiry it waits for (or, if that has passed, the one it
/// missed). The lab reads rt-app's per-loop log from these (crates/lab/src/twin.rs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct StepMark {
    pub at: Ns,
    pub task: usize,
    pub step: usize,
    pub expiry: Option<Ns>,
}

/// One job: its task, release, absolute deadline and when it finished (None: unfinished
/// at the horizon). Met means `end <= deadline` (docs/jobs.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct JobRecord {
    pub task: usize,
    pub release: Ns,
    pub deadline: Ns,
    pub end: Option<Ns>,
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
    /// The disk drives the tasks' `io` phases name ([`crate::disk`]), by index.
    disks: Vec<crate::disk::Disk>,
    disk_index: BTreeMap<String, usize>,
    /// The paper 004 §5 kernel event counts.
    kernel: Kernel,
    /// While tracing: each task's last recorded virtual times.
    vt_last: Vec<Option<VirtualTime>>,
    /// When the queued watchdog check (if any) is due.
    watchdog_at: Option<Ns>,
    /// Per task: its registered behaviour (tasks of a kind the scenario language does not
    /// know; taken out while it runs).
    behaves: Vec<Option<Box<dyn Behave>>>,
    /// Mutexes, condition variables, barriers and shared timers (engine/sync.rs), when
    /// a task uses them.
    sync: Option<Box<sync::SyncState>>,
}

impl Sim {
    /// A simulation with the built-in behaviours only.
    pub fn new(sc: Scenario) -> Result<Sim, SimError> {
        Sim::with_registry(sc, &Registry::default())
    }

    /// A simulation whose tasks of kinds the scenario language does not know are made by
    /// `registry`.
    pub fn with_registry(sc: Scenario, registry: &Registry) -> Result<Sim, SimError> {
        if sc.machine.cpus == 0 || sc.machine.cpus > vassal_core::MAX_CPUS {
            return Err(SimError::Cpus(sc.machine.cpus));
        }
        let behaves = registry.behaviours(&sc).map_err(SimError::Scenario)?;
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
                run_until: None,
                rt_timers: Vec::new(),
                rt_release: None,
                io: None,
            });
        }
        let tick = match sc.machine.tick {
            Some(t) => t,
            None if sc.machine.hz > 0 => (SEC / sc.machine.hz as u64).max(1),
            None => 0,
        };
        let disk_index = disk::index(&sc);
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
            swap: sc.memory.as_ref().map(|m| Swapper::with_texts(m.config.clone(), &m.sizes, &m.text_of, &m.texts)),
            disks: vec![crate::disk::Disk::default(); disk_index.len()],
            disk_index,
            kernel: Kernel::new(sc.tasks.len()),
            vt_last: Vec::new(),
            watchdog_at: None,
            behaves,
            sync: sync::SyncState::of(&sc),
            sc: Arc::new(sc),
        };
        sim.queue_initial_events();
        Ok(sim)
    }

    /// Checks the dispatcher's and the engine's invariants after every instant (slow; for tests).
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

    /// Runs to the horizon and reports.
    pub fn run(self) -> Result<Report, SimError> {
        self.run_traced().map(|(r, _)| r)
    }

    /// Runs to the horizon; returns the report and the trace (empty unless
    /// [`Sim::record_trace`] was called).
    pub fn run_traced(mut self) -> Result<(Report, Trace), SimError> {
        while let Some(at) = self.drv.next_deadline() {
            self.now = at;
            // Every event of this instant first, then the decisions it needs (docs/jobs.md):
            // a burst completing as another task's job is released is recorded now, and
            // the task that completed is not preempted with no work left. Completions
            // come first, so policies see a completed job's CPU as free when they
            // hear of the releases.
            self.cpu_timers_due();
            while let Some((_, due)) = self.drv.pop_due(at) {
                self.metrics.events += 1;
                match due {
                    Due::Event { sched, token } => driver::fire(&mut self, at, sched, token),
                    Due::Timer(ev) => self.handle(ev),
                }
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
        self.unfinished_jobs();
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

/// Runs a scenario to its horizon, with `registry`'s behaviours.
pub fn simulate_with(sc: Scenario, registry: &Registry) -> Result<Report, SimError> {
    Sim::with_registry(sc, registry)?.run()
}
