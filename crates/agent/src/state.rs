//! The agent's mechanism: `vassal_core::Dispatcher` driven by real time and real
//! processes, and its decisions turned into kernel state (paper 002's priority technique).
//!
//! **Unit of scheduling: the process.** A vassal task is one process (thread group), as
//! in paper 002 ("our scheduler is a *process* scheduler", §2.1): clients name pids,
//! SO_PEERCRED names a pid and uid, ownership and budgets belong to the application, and
//! the process CPU clock is its CPU use. Every thread of a managed process gets the same
//! kernel state — a selected process is bound to the one CPU it was selected for, like
//! paper 002's SetProcessAffinityMask — so a multithreaded process runs on one CPU at a
//! time. Threads are listed at join and re-listed every [`RESCAN`] (with BPF, a new
//! thread is adopted at the pass its creation event brings). Raised threads carry
//! SCHED_RESET_ON_FORK, so a thread or child created in between starts at SCHED_OTHER,
//! nice 0 — but bound where its creator was bound, and the child of a parked thread at
//! SCHED_IDLE. So the ledger (crate::guardian) records, besides each thread's original,
//! the process's *template* (its main thread's original, at join), and a thread adopted
//! later gets as its original what it would have had without the agent: inherited from
//! its creator's original when a BPF event named the creator, else from the template
//! (`late_original`). Unmanaging a process restores each recorded thread, then sets the
//! threads it has that are not recorded yet from the template (`unmanage`).
//!
//! **Kernel state of a managed process** (recomputed after every change, applied only
//! where it differs from what was applied last):
//! - *selected* (the dispatcher runs it on CPU c): bound to c; SCHED_FIFO `run_priority`
//!   under a real-time grant with budget left (below), else SCHED_OTHER (so unmanaged
//!   time-sharing work keeps its share: paper 002's 1 − r; `best_effort_run = "fifo"`
//!   gives root's best-effort tasks FIFO) — or held, if it is exclusive to a loaded
//!   scheduler whose declared share is spent;
//! - *armed* (blocked, with a real-time grant): bound to the CPU it last ran on at SCHED_FIFO
//!   `run_priority + 1`, so the instant it wakes the kernel dispatches it, ahead of
//!   whatever the agent selected there — the agent only learns of the wake at its next
//!   poll. This is "raising a task ahead of its release time": a task that sleeps until
//!   its next release (a frame, a timed SET) is already at its running priority when the
//!   timer fires. If the policy would not have picked it, the next pass parks it again:
//!   a wrong guess costs at most one tick;
//! - *held* (runnable, not selected, and exclusive to a loaded scheduler — a reservation
//!   holder outside its slots, a task over its budget): parked, and its process stopped
//!   with SIGSTOP, continued (SIGCONT) when it is selected again. This is the hard cap:
//!   SCHED_IDLE alone is not one. Measured (2026-11-22, perf sched_switch): a task demoted
//!   from SCHED_FIFO to SCHED_IDLE leaves its CPU within ~30 µs, but the kernel's fair
//!   class (EEVDF) places it at zero lag, i.e. *eligible*, and when the time-sharing task
//!   beside it has used its slice (at the next 4 ms kernel tick, HZ = 250) EEVDF picks the
//!   idle task if it is the only eligible one, and slice protection (RUN_TO_PARITY) keeps
//!   it there until the following tick: one whole 4 ms tick per parking, whatever its
//!   weight. A reservation of 0.25 of 20 ms periods got 0.29–0.32 of a CPU that way;
//!   held, 0.25. The guardian continues a held process (the ledger names it);
//! - *parked* (everything else): SCHED_IDLE, bound where the agent last bound it (its own
//!   affinity if it never was) — it runs when nothing else on its CPU is eligible (see
//!   *held*: up to one kernel tick per parking). Staying bound saves an affinity call at
//!   each parking, and another when it is selected on that CPU again.
//!
//! **Real-time grants** (`rt_grant`, crate::budget; docs/agent.md, "Security model"). A
//! selected task is real-time only under the grant of the scheduler that decided: a
//! loaded scheduler's declared usage (paper 000 §8), or the default scheduler's warp (BVT
//! §2.2: one episode, wake to block, of at most the warp time limit); a blocked one under
//! the grant it would wake into. A non-root task's grants also draw on its uid's budget.
//! CPU used while real-time is charged at the next read of the process's CPU clock; a
//! timer on that clock fires when the budget left is used up, so a grant ends within one
//! kernel tick of its budget whatever else happens.
//!
//! **Events** (`Source`; docs/agent.md, "Event source"). With BPF (crate::bpf) each
//! block or wake of a managed thread arrives as an event that wakes the dispatcher; a
//! pass drains them (`take_events`), sets the threads' runnable flags and reads the CPU
//! clocks of the processes they name and of the selected ones. Polling (the fallback), a
//! pass reads a managed thread's runnability from a kept-open /proc/TID/wchan (or stat);
//! selected and armed processes are read at every pass, parked ones at every
//! `PARKED_EVERY`-th, and polls come every tick while passes see changes and back off to
//! `PARKED_EVERY` ticks while they see none. Either way a change of runnability becomes
//! `Dispatcher::wake`/`block`, and CPU used since the last pass (process CPU clock)
//! becomes `Dispatcher::account`. Scheduler events are waited for exactly (absolute
//! CLOCK_MONOTONIC times), slice ends to the next tick (a slice overruns by less than one
//! tick); see `Agent::next_deadline`. With BPF a block or wake is acted on one dispatcher
//! wake-up after it happens; polling, up to one tick late while things change, up to
//! `PARKED_EVERY` ticks after a quiet spell. An armed task waits for neither.
//!
//! **Quiet wakes** (BPF source). The kernel runs an armed task the instant it wakes, so
//! waking the dispatcher for that wake buys nothing when the policy will pick it anyway,
//! and a 60 fps task's wakes were a third of all passes. An armed process of the default
//! scheduler (a warped BVT task; not one exclusive to a loaded scheduler, whose wake
//! outside its slots must be held at once) therefore has its threads marked in the BPF map
//! (`bpf::QUIET_WAKE`): their wakes wait in the ring buffer for the next pass, while
//! blocks still wake the dispatcher. A pass that finds such a process woken and blocked
//! again replays its run to the policy in order (`replay_run`): wake, the decisions that
//! follow, the CPU it used, block. A process that wakes and does not block again is
//! bounded by a POSIX timer on its CPU clock (`kernel::CpuTimer`), set at each pass to one
//! tick of CPU past what it has used: the kernel checks it at its own tick, so an armed
//! task runs unseen for at most one agent tick of CPU plus one kernel tick (4 ms at
//! HZ = 250) — a runaway warped task is then dispatched, and its warp limit applies, from
//! that pass on. The timer's signal is read from a signalfd in the dispatcher's wait set.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use vassal_core::{
    Block, CpuId, CpuSet, Dispatcher, Effect, HierarchyConfig, Ns, Position, Preempt, Reply, Request, SchedId, Sender, TaskId, TaskState,
    Wake, CPU_PPM, MS, SEC,
};

use crate::budget::Bucket;
use crate::config::{to_params, BestEffortRun, Config};
use crate::guardian::{Ledger, Slot};
use crate::kernel::{self, CpuClock, StatFile, RESET_ON_FORK};
use crate::wire::{Answer, EjectionRow, SchedRow, TaskRow};

/// How often the threads of a managed process are re-listed (polling).
pub const RESCAN: Ns = 250 * MS;
/// The same with BPF events, which tell new threads and exits as they happen: the
/// re-listing only catches what they cannot (a thread started before its process was
/// watched, a zombie leader), and samples the share figure. Every process due within
/// half of it is re-listed at the same pass, so the re-listings of all processes come
/// together, one pass per `RESCAN_BPF`.
pub const RESCAN_BPF: Ns = SEC;
/// A parked process (neither selected nor armed) is polled at every `PARKED_EVERY`-th
/// pass only (staggered by task), and the passes come up to `PARKED_EVERY` ticks apart
/// while nothing changes (see `next_deadline`).
pub const PARKED_EVERY: u64 = 4;
/// Latency samples kept per task.
const LAT_SAMPLES: usize = 1024;

/// What the agent made of a process in the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KState {
    /// Not yet touched (just joined).
    Untouched,
    Run {
        cpu: u16,
        fifo: bool,
    },
    Armed {
        cpu: u16,
    },
    Parked,
    /// Parked, and the process stopped (SIGSTOP): the hard cap (module documentation).
    Held,
}

struct Thread {
    tid: i32,
    slot: Slot,
    stat: StatFile,
    applied: KState,
    /// Its tid is in the BPF map: its blocks and wakes come as events (else it is polled).
    watched: bool,
    /// Runnable, as the BPF events last said (read from /proc when it was adopted).
    run: bool,
    /// The one CPU the agent bound it to (None: still its own affinity). A parked thread
    /// stays where it was bound (module documentation, *parked*).
    bound: Option<u16>,
    /// Its wakes are quiet in the BPF map (`bpf::QUIET_WAKE`; see "Quiet wakes").
    quiet: bool,
}

impl Thread {
    /// Whether the thread is runnable: as the BPF events last said if it is watched, else
    /// read from /proc (an error: it is gone). A held thread is stopped by the agent, not
    /// blocked: it counts as runnable (it was when it was stopped, and it cannot block
    /// while stopped), whatever wchan says or the event of its stop (a switch-out in
    /// state T).
    fn runnable(&mut self) -> std::io::Result<bool> {
        let r = if self.watched { self.run } else { self.stat.runnable()? };
        Ok(r || self.applied == KState::Held)
    }
}

struct Managed {
    pid: i32,
    uid: u32,
    threads: Vec<Thread>,
    clock: CpuClock,
    cpu_ns: u64,
    /// CPU it used that the dispatcher has not been told of yet (see `poll`).
    unaccounted: u64,
    joined_cpu_ns: u64,
    params: BTreeMap<String, i64>,
    last_cpu: Option<u16>,
    /// When the agent saw it become runnable and it has not been selected since.
    runnable_since: Option<Ns>,
    lat: VecDeque<u32>,
    /// (time, CPU clock) samples, one per 100 ms, for the one-second share.
    samples: VecDeque<(Ns, u64)>,
    rescanned: Ns,
    want: KState,
    /// The agent has stopped the process (SIGSTOP) and not yet continued it.
    stopped: bool,
    /// BPF events about it arrived since the last pass.
    evented: bool,
    /// The earliest wake among them (its BPF time), for the wake-to-run latency.
    woke_at: Option<Ns>,
    /// A timer on its CPU clock: the bound on an armed process's unseen run (quiet wakes)
    /// and the end of its real-time budget (crate::budget), whichever comes first.
    bound: Option<kernel::CpuTimer>,
    /// The CPU-clock value `bound` is set to fire at (0: disarmed).
    bound_at: u64,
    /// The grant its real-time kernel state draws on now (None: not real-time).
    rt: Option<RtBy>,
    /// The grant it was real-time under at some time since its CPU clock was last read:
    /// what the CPU used meanwhile is charged to (conservatively, all of it).
    rt_since_read: Option<RtBy>,
    /// Real-time CPU used since it last blocked: its warp episode (BVT §2.2).
    episode_rt: Ns,
    /// The share its reservations hold, ppm of one CPU (counted against
    /// `max_rt_per_uid` for a non-root owner).
    reserved_ppm: u64,
    /// What its schedulers said about it lately (their logs: a reservation removed, a
    /// warp limit reached), newest last, for `ctl tasks`.
    notes: VecDeque<String>,
}

/// The grant under which a task is real-time (crate::budget).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RtBy {
    /// A loaded scheduler's decision (or its exclusive task, armed): its declared usage.
    Sched(SchedId),
    /// A warped task of the default scheduler: its warp time limit per episode.
    Warp,
    /// `best_effort_run = "fifo"`, for a root-owned task.
    BestEffort,
}

/// Notes kept per task for `ctl tasks`.
const NOTES: usize = 4;

impl Managed {
    /// Armed with quiet wakes: every thread's wakes are quiet in the BPF map (see "Quiet
    /// wakes" in the module documentation).
    fn quiet_wakes(&self) -> bool {
        matches!(self.want, KState::Armed { .. }) && !self.threads.is_empty() && self.threads.iter().all(|t| t.quiet)
    }
}

/// Where the dispatcher learns of blocks and wakes (docs/agent.md, "Event source").
pub enum Source {
    /// Polling /proc/TID/wchan (or stat) at passes that come every 1–`PARKED_EVERY` ticks.
    Poll,
    /// BPF events on the scheduler tracepoints; a pass only when something needs deciding.
    Bpf(Box<crate::bpf::EventSource>),
}

/// The agent's state, guarded by one mutex shared by the broker and the dispatcher.
pub struct Agent {
    pub cfg: Config,
    disp: Dispatcher,
    ncpus: u16,
    by_pid: BTreeMap<i32, TaskId>,
    tasks: BTreeMap<u32, Managed>,
    events: BTreeSet<(Ns, u32, u64)>,
    event_at: BTreeMap<(u32, u64), Ns>,
    slice_end: Vec<Option<Ns>>,
    ledger: Ledger,
    effects: Vec<Effect>,
    /// CPUs whose task blocked or left: they need a decision.
    pending_resched: BTreeSet<u16>,
    /// CPUs whose slice ran out.
    pending_expired: BTreeSet<u16>,
    pub next_tick: Ns,
    /// No process is selected, armed or waiting for its kernel state: the passes need
    /// not come every tick (see `next_deadline`).
    quiet: bool,
    /// Passes come every `backoff` ticks: 1 after a pass that saw a change (a wake, a
    /// block, a scheduler event, a decision that changes what runs on a CPU), doubled
    /// after each pass that saw none, up to `PARKED_EVERY`.
    backoff: u64,
    /// Changes seen so far (as above).
    changes: u64,
    pub passes: u64,
    pub started: Ns,
    /// Errors of kernel calls, counted (a task that vanished mid-call is not an error).
    pub kernel_errors: u64,
    /// $VASSAL_AGENT_TRACE: a file prefix to log every pass, wake, block and decision to
    /// (debugging; the file is PREFIX.PID, so the agents of `repro --real` keep theirs).
    trace: Option<std::io::BufWriter<std::fs::File>>,
    /// `vassal agent --trace FILE`: the decisions as a Chrome trace (crate::chrome).
    chrome: Option<crate::chrome::ChromeTrace>,
    /// Loaded policy modules (issue 8), by scheduler name: the file each came from.
    modules: BTreeMap<String, String>,
    /// Modules ejected (the last [`MAX_EJECTIONS`]), oldest first, for `status`.
    ejections: VecDeque<EjectionRow>,
    /// The event source (polling until `set_source`).
    source: Source,
    /// Events drained at a pass (kept to reuse its allocation).
    ev_buf: Vec<crate::bpf::Event>,
    /// BPF events seen, and those about tids no longer managed (for `status`).
    pub bpf_events: u64,
    /// Runs of armed processes replayed (`replay_run`), and CPU-clock bounds that fired
    /// (`cpu_timers_fired`), for `status`.
    pub replayed_runs: u64,
    pub bounds_fired: u64,
    /// When the last pass ran.
    last_pass: Ns,
    /// Some thread's kernel state could not be applied yet (retried at the next tick).
    unapplied: bool,
    /// Real-time budgets (crate::budget): per loaded scheduler, per non-root uid.
    sched_budgets: BTreeMap<u32, Bucket>,
    uid_budgets: BTreeMap<u32, Bucket>,
    /// The earliest time a budget that holds a task back from real time refills enough
    /// (a pass then gives it back its kernel state).
    throttled_until: Option<Ns>,
    /// The guardian's pid: never managed, like the agent itself.
    guardian_pid: i32,
    /// The kernel refused RLIMIT_RTTIME on another user's process (`set_backstop`).
    pub backstop_refused: bool,
}

/// How many ejections `status` remembers.
pub const MAX_EJECTIONS: usize = 64;

/// A module's scheduler-level parameters as given in the config or on the wire.
fn module_params(p: &BTreeMap<String, crate::config::Value>) -> BTreeMap<String, vassal_module::ModuleParam> {
    use crate::config::Value;
    use vassal_module::ModuleParam;
    p.iter()
        .map(|(k, v)| {
            let v = match v {
                Value::Bool(b) => ModuleParam::Bool(*b),
                Value::Int(i) => ModuleParam::Int(*i),
                Value::Float(f) => ModuleParam::Float(*f),
                Value::Str(s) => ModuleParam::Str(s.clone()),
            };
            (k.clone(), v)
        })
        .collect()
}

/// "KIND, USAGE" of scheduler `name`, for the agent's log.
fn describe_sched(disp: &Dispatcher, name: &str) -> String {
    disp.schedulers().into_iter().find(|s| s.name == name).map_or_else(String::new, |s| format!("{}, {}", s.kind, s.usage.describe()))
}

/// What went wrong setting the agent up.
pub type SetupError = String;

impl Agent {
    pub fn new(cfg: Config, ledger: Ledger, now: Ns) -> Result<Agent, SetupError> {
        let chrome = match &cfg.trace {
            Some(path) => Some(
                crate::chrome::ChromeTrace::create(path, now, kernel::online_cpus())
                    .map_err(|e| format!("--trace {}: {e}", path.display()))?,
            ),
            None => None,
        };
        let ncpus = kernel::online_cpus();
        let default = vassal_policies::build(&cfg.default.kind, &to_params(&cfg.default.params))?;
        let be_ppm = ((1.0 - cfg.rt_fraction) * ncpus as f64 * CPU_PPM as f64).round() as u64;
        let hcfg = HierarchyConfig { min_best_effort_ppm: Some(be_ppm) };
        let mut disp = Dispatcher::new(ncpus, &cfg.default.kind, default, hcfg);
        let mut modules = BTreeMap::new();
        for s in &cfg.schedulers {
            // Listed top-down: each goes just above the default, below the ones before it.
            let pos = match disp.schedulers().len() {
                1 => Position::Top,
                _ => Position::Above(disp.default_sched()),
            };
            if let Some(path) = &s.module {
                // A policy module (docs/modules.md): loaded and contained like `ctl load`.
                let opts =
                    vassal_module::LoadOptions { params: module_params(&s.params), watchdog: s.watchdog_ns()?, ..Default::default() };
                let place = vassal_module::Placement::Above(cfg.default.kind.clone());
                let place = if pos == Position::Top { vassal_module::Placement::Top } else { place };
                vassal_module::load(&mut disp, std::path::Path::new(path), &s.name, &place, &opts)
                    .map_err(|e| format!("scheduler '{}': module {path}: {e}", s.name))?;
                eprintln!("vassal agent: loaded module {path} as scheduler '{}' ({})", s.name, describe_sched(&disp, &s.name));
                modules.insert(s.name.clone(), path.clone());
                continue;
            }
            let p = vassal_policies::build(&s.kind, &to_params(&s.params)).map_err(|e| format!("scheduler '{}': {e}", s.name))?;
            let usage = s.usage()?.to_usage(ncpus).map_err(|e| format!("scheduler '{}': {e}", s.name))?;
            disp.register(&s.name, p, usage, pos).map_err(|e| e.to_string())?;
        }
        Ok(Agent {
            cfg,
            disp,
            ncpus,
            by_pid: BTreeMap::new(),
            tasks: BTreeMap::new(),
            events: BTreeSet::new(),
            event_at: BTreeMap::new(),
            slice_end: vec![None; ncpus as usize],
            ledger,
            effects: Vec::new(),
            pending_resched: BTreeSet::new(),
            pending_expired: BTreeSet::new(),
            next_tick: now,
            quiet: false,
            backoff: 1,
            changes: 0,
            passes: 0,
            started: now,
            kernel_errors: 0,
            modules,
            ejections: VecDeque::new(),
            trace: std::env::var("VASSAL_AGENT_TRACE")
                .ok()
                .and_then(|p| std::fs::File::create(format!("{p}.{}", std::process::id())).ok())
                .map(std::io::BufWriter::new),
            chrome,
            source: Source::Poll,
            ev_buf: Vec::new(),
            bpf_events: 0,
            replayed_runs: 0,
            bounds_fired: 0,
            last_pass: now,
            unapplied: false,
            sched_budgets: BTreeMap::new(),
            uid_budgets: BTreeMap::new(),
            throttled_until: None,
            guardian_pid: 0,
            backstop_refused: false,
        })
    }

    /// Names the guardian process (it is never managed).
    pub fn set_guardian(&mut self, pid: i32) {
        self.guardian_pid = pid;
    }

    /// Sets the event source (at start, before any process is managed).
    pub fn set_source(&mut self, source: Source) {
        assert!(self.tasks.is_empty(), "the event source is chosen before any process is managed");
        self.source = source;
    }
    /// "bpf" or "poll".
    pub fn source_name(&self) -> &'static str {
        match self.source {
            Source::Poll => "poll",
            Source::Bpf(_) => "bpf",
        }
    }
    /// The BPF ring buffer's fd, for the dispatcher's epoll set.
    pub fn event_fd(&self) -> Option<std::os::fd::RawFd> {
        match &self.source {
            Source::Poll => None,
            Source::Bpf(s) => Some(s.fd()),
        }
    }

    pub fn ncpus(&self) -> u16 {
        self.ncpus
    }
    pub fn managed(&self) -> usize {
        self.tasks.len()
    }
    pub fn task_of(&self, pid: i32) -> Option<TaskId> {
        self.by_pid.get(&pid).copied()
    }
    pub fn lookup(&self, name: &str) -> Option<SchedId> {
        self.disp.lookup(name)
    }
    pub fn param(&self, pid: i32, name: &str) -> Option<i64> {
        let t = self.by_pid.get(&pid)?;
        self.tasks.get(&t.0)?.params.get(name).copied()
    }
    pub fn uid_of_task(&self, pid: i32) -> Option<u32> {
        let t = self.by_pid.get(&pid)?;
        self.tasks.get(&t.0).map(|m| m.uid)
    }

    /// The earliest time the dispatcher must run again: the next poll, scheduler event or
    /// slice end. Scheduler events are waited for exactly (absolute CLOCK_MONOTONIC
    /// times), slice ends to the first tick at or after them. Polls come every tick
    /// after a pass that saw a change, and back off (2, then `PARKED_EVERY` ticks) while passes see none; when no process is
    /// selected or armed (nothing runs that a block could stop, and no blocked task would
    /// be run by the kernel the instant it wakes) they come every `PARKED_EVERY` ticks.
    /// So a block or wake is seen within one tick while things change and within
    /// `PARKED_EVERY` ticks after a quiet spell.
    ///
    /// With BPF events there are no polls: a pass comes at a BPF event (the ring buffer
    /// wakes the dispatcher), at a broker call, at a scheduler event (exact), at the first
    /// tick at or after a slice end, at the next tick while some kernel state could not
    /// be applied, at the processes' rescans (every `RESCAN_BPF`), and at least once a
    /// second.
    pub fn next_deadline(&self) -> Ns {
        let tick = self.cfg.tick;
        let mut d = if let Source::Bpf(_) = self.source {
            let mut d = self.last_pass.saturating_add(SEC);
            if self.unapplied {
                d = d.min(self.next_tick);
            }
            if let Some(r) = self.tasks.values().map(|m| m.rescanned + RESCAN_BPF).min() {
                d = d.min(r);
            }
            d
        } else {
            let every = if self.quiet { PARKED_EVERY } else { self.backoff };
            self.next_tick + (every - 1) * tick
        };
        if let Some(&(at, _, _)) = self.events.first() {
            d = d.min(at);
        }
        // A slice end is acted on within one tick after it. Polling, at the first poll
        // (tick) at or after it: slice ends add no wake-ups of their own. With BPF
        // events, at the first pass at or after it, whatever brings that pass, and one
        // tick after it at the latest: a slice end that another pass can take adds no
        // wake-up (the passes of a 60 fps video's blocks, the other CPU's slice ends).
        let bpf = matches!(self.source, Source::Bpf(_));
        for &e in self.slice_end.iter().flatten() {
            let latest = if bpf { e.saturating_add(tick) } else { self.next_tick + e.saturating_sub(self.next_tick).div_ceil(tick) * tick };
            d = d.min(latest);
        }
        // A contained module's watchdog expiry is a deadline of its own.
        if let Some(w) = self.disp.next_watchdog() {
            d = d.min(w);
        }
        // A budget that held a task back from real time refills then.
        if let Some(t) = self.throttled_until {
            d = d.min(t);
        }
        d
    }

    /// The CPUs the dispatcher thread should run on (a bit mask), or None: it may stay
    /// where it is (so a task's arm-run-arm cycle costs no affinity change).
    /// - Not on the CPU of a process armed with loud wakes: it runs the instant it wakes,
    ///   and its wake also wakes the dispatcher, which (at a higher priority) would
    ///   preempt the very task it woke for.
    /// - On the CPU of a process armed with quiet wakes, if there is one: its wakes do not
    ///   wake the dispatcher, its blocks do, and a wake-up from the CPU the dispatcher
    ///   sleeps on costs it a third of one from another CPU (measured on this VM: ~5 µs of
    ///   CPU against ~18 µs, where the cross-CPU wake-up also leaves an idle or busy CPU).
    pub fn dispatcher_cpus(&self) -> Option<u64> {
        let all = if self.ncpus >= 64 { u64::MAX } else { (1u64 << self.ncpus) - 1 };
        let (mut loud, mut quiet) = (0u64, 0u64);
        for m in self.tasks.values() {
            if let KState::Armed { cpu } = m.want {
                if cpu < 64 {
                    *(if m.quiet_wakes() { &mut quiet } else { &mut loud }) |= 1u64 << cpu;
                }
            }
        }
        let free = all & !loud;
        if free & quiet != 0 {
            Some(free & quiet)
        } else if loud == 0 {
            None
        } else if free != 0 {
            Some(free)
        } else {
            Some(all)
        }
    }

    /// The warp time limit the agent enforces on a warped task's episode: its own
    /// `warp_limit`, and for a non-root owner never more than `max_warp_limit` (0, no
    /// limit, is root's only). `Ns::MAX`: none.
    fn warp_limit_of(&self, m: &Managed) -> Ns {
        let own = m.params.get("warp_limit").copied().filter(|&l| l > 0).map(|l| l as Ns);
        match (m.uid, own) {
            (0, l) => l.unwrap_or(Ns::MAX),
            (_, l) => l.unwrap_or(Ns::MAX).min(self.cfg.max_warp_limit),
        }
    }

    /// The real-time grant `task` may hold now (crate::budget; docs/agent.md, "Security
    /// model"), and the CPU it may still use under it. A selected task is real-time only
    /// under the grant of the scheduler that decided: a loaded scheduler's (its declared
    /// usage), or, for the default scheduler, its warp (a warp episode, bounded by the
    /// warp time limit) — a task the default scheduler runs for a loaded scheduler that
    /// deferred (a guest: a reservation holder outside its reservation, or one whose
    /// reservation was removed) is best effort. A blocked task is armed under the grant it
    /// would wake into. Every grant of a non-root task also draws on its uid's budget. A
    /// grant whose budget is spent is withheld, and `throttled_until` says when it
    /// refills; an outright `None` in the first place means not real-time at all.
    fn rt_grant(&mut self, now: Ns, id: u32) -> (Option<RtBy>, Ns) {
        let task = TaskId(id);
        let default = self.disp.default_sched();
        let Some(m) = self.tasks.get(&id) else {
            return (None, 0);
        };
        let warped = m.params.get("warp").is_some_and(|&w| w > 0);
        let by = match self.disp.state(task) {
            TaskState::Running(_) => match self.disp.ran_by(task) {
                Some(s) if s != default => RtBy::Sched(s),
                _ if warped => RtBy::Warp,
                _ if self.cfg.best_effort_run == BestEffortRun::Fifo && m.uid == 0 => RtBy::BestEffort,
                _ => return (None, 0),
            },
            TaskState::Blocked => match self.disp.owner(task) {
                Some(s) if s != default && !self.disp.is_guest(task) => RtBy::Sched(s),
                _ if warped => RtBy::Warp,
                _ => return (None, 0),
            },
            _ => return (None, 0),
        };
        // A real-time run starts only with one tick of budget (or all a shallow budget
        // holds), and goes on while any is left.
        let need = if m.rt.is_some() { 1 } else { self.cfg.tick };
        let (uid, window, episode_rt) = (m.uid, self.cfg.rt_window, m.episode_rt);
        let mut left = Ns::MAX;
        let mut ok = true;
        let mut refill: Option<Ns> = None;
        let mut take = |b: &mut Bucket| {
            left = left.min(b.left(now));
            match b.ready_at(now, need) {
                Some(t) if t <= now => {}
                t => {
                    ok = false;
                    // Back when every spent budget has refilled: the latest of them.
                    if let Some(t) = t {
                        refill = Some(refill.map_or(t, |r: Ns| r.max(t)));
                    }
                }
            }
        };
        if let RtBy::Sched(s) = by {
            let rate = self.disp.usage(s).map_or(0, |u| u.demand_ppm());
            take(self.sched_budgets.entry(s.0).or_insert_with(|| Bucket::new(rate, window, now)));
        }
        if uid != 0 {
            let rate = self.cfg.max_rt_per_uid_ppm;
            take(self.uid_budgets.entry(uid).or_insert_with(|| Bucket::new(rate, window, now)));
        }
        if by == RtBy::Warp {
            // The episode's budget refills only when it blocks (no deadline for it).
            let m = &self.tasks[&id];
            left = left.min(self.warp_limit_of(m).saturating_sub(episode_rt));
            ok &= left > 0;
        }
        if !ok {
            if let Some(t) = refill {
                self.throttled_until = Some(self.throttled_until.map_or(t, |u| u.min(t)));
            }
            return (None, 0);
        }
        (Some(by), left)
    }

    // ----- joining and leaving -----

    /// Starts managing `pid` (owned by `uid`): its threads' states, and its template (its
    /// main thread's state, for the threads it creates later: crate::guardian), go into
    /// the ledger before anything is changed, and the default scheduler gets it with
    /// `params`.
    fn manage(&mut self, now: Ns, pid: i32, uid: u32, params: &BTreeMap<String, i64>) -> Result<TaskId, String> {
        let clock = CpuClock::of_process(pid).map_err(|e| format!("process {pid}: {e}"))?;
        let cpu_ns = clock.read().map_err(|e| format!("process {pid}: {e}"))?;
        let mut threads = Vec::new();
        let tids = kernel::threads(pid).map_err(|e| format!("process {pid}: {e}"))?;
        let mut failed = None;
        for tid in tids {
            match self.adopt_thread(pid, tid, None) {
                Ok(t) => threads.push(t),
                Err(e) => {
                    failed = Some(format!("process {pid} thread {tid}: {e}"));
                    break;
                }
            }
        }
        // Its template: the main thread's original (crate::guardian).
        let main = threads.iter().find(|t| t.tid == pid).map(|t| self.ledger.saved(t.slot));
        let failed = failed.or_else(|| match main {
            Some((_, start, s)) => self.ledger.save_process(pid, start, &s).is_none().then(|| "the guardian's ledger is full".to_string()),
            None => Some(format!("process {pid}: its main thread is gone")),
        });
        if let Some(e) = failed {
            for t in threads {
                self.unwatch(t.tid);
                self.ledger.clear(t.slot);
            }
            return Err(e);
        }
        let runnable = threads.iter().any(|t| t.run);
        // The process's own affinity, as the ledger saved it for its first thread.
        let affinity = CpuSet(threads.first().map_or(u64::MAX, |t| self.ledger.saved(t.slot).2.affinity[0]));
        match self.disp.try_add_task(now, params.clone(), affinity, None, runnable) {
            Ok(task) => {
                // With BPF events, an armed process's wakes may be quiet, bounded by this
                // timer (its signal carries the task id).
                // The bound of quiet wakes and of real-time budgets (its signal carries
                // the task id).
                let bound = kernel::CpuTimer::new(&clock, task.0).ok();
                // The kernel's backstop on a non-root process's real time (RLIMIT_RTTIME:
                // SIGXCPU, then SIGKILL), should the agent ever fail to demote it.
                if uid != 0 {
                    self.set_backstop(pid);
                }
                self.by_pid.insert(pid, task);
                self.tasks.insert(
                    task.0,
                    Managed {
                        pid,
                        uid,
                        threads,
                        clock,
                        cpu_ns,
                        unaccounted: 0,
                        joined_cpu_ns: cpu_ns,
                        params: params.clone(),
                        last_cpu: None,
                        runnable_since: runnable.then_some(now),
                        lat: VecDeque::new(),
                        samples: VecDeque::from([(now, cpu_ns)]),
                        rescanned: now,
                        want: KState::Untouched,
                        evented: false,
                        woke_at: None,
                        stopped: false,
                        bound,
                        bound_at: 0,
                        rt: None,
                        rt_since_read: None,
                        episode_rt: 0,
                        reserved_ppm: 0,
                        notes: VecDeque::new(),
                    },
                );
                Ok(task)
            }
            Err((_, why)) => {
                for t in threads {
                    self.unwatch(t.tid);
                    self.ledger.clear(t.slot);
                }
                self.ledger.forget_process(pid);
                Err(why)
            }
        }
    }

    /// Starts managing thread `tid` of `pid`: records its original state in the ledger —
    /// `original`, or (None) the state it has now — and watches it (BPF). A thread listed
    /// at join has its own state as original. One created later is given the state it
    /// would have had without the agent (`late_original`), because it inherited the state
    /// the agent gave its creator (one CPU, SCHED_IDLE: SCHED_RESET_ON_FORK resets neither).
    fn adopt_thread(&mut self, pid: i32, tid: i32, original: Option<kernel::SchedState>) -> Result<Thread, String> {
        let start = kernel::start_time(tid).map_err(|e| e.to_string())?;
        let now = kernel::get_sched(tid).map_err(|e| e.to_string())?;
        // SCHED_DEADLINE parameters cannot be saved and restored with sched_setscheduler.
        if now.policy & !RESET_ON_FORK == libc::SCHED_DEADLINE {
            return Err("a SCHED_DEADLINE thread cannot be managed".into());
        }
        let saved = original.unwrap_or(now);
        let mut stat = StatFile::open(tid).map_err(|e| e.to_string())?;
        let slot = self.ledger.save(tid, start, &saved).ok_or("the guardian's ledger is full")?;
        // Its state is read after its tid went into the BPF map: every block or wake from
        // then on comes as an event, so the flag ends as the last event says. A full map
        // means it is polled.
        let watched = match &mut self.source {
            Source::Bpf(s) => s.watch(tid, pid),
            Source::Poll => false,
        };
        let run = stat.state().is_ok_and(|s| s == b'R');
        Ok(Thread { tid, slot, stat, applied: KState::Untouched, watched, run, quiet: false, bound: None })
    }

    /// The original state of a thread that the process of task `id` created after it
    /// joined: the state it inherited from its creator's original (`kernel::inherited`),
    /// if the creator is known (the BPF new-thread event names it) and recorded; else
    /// from the process's template, its main thread's original. A change the process
    /// itself made to the new thread before the agent adopted it is not kept.
    fn late_original(&self, id: u32, creator: Option<i32>) -> Option<kernel::SchedState> {
        let m = self.tasks.get(&id)?;
        let recorded = creator.and_then(|c| m.threads.iter().find(|t| t.tid == c)).map(|t| self.ledger.saved(t.slot).2);
        recorded.or_else(|| self.ledger.template(m.pid)).map(|s| kernel::inherited(&s))
    }

    fn unwatch(&mut self, tid: i32) {
        if let Source::Bpf(s) = &mut self.source {
            s.unwatch(tid);
        }
    }

    /// JOIN: manage `pid` if it is not yet, then move it to `sched`. Permission and
    /// ceilings were checked by the broker.
    pub fn join(&mut self, now: Ns, pid: i32, uid: u32, sched: Option<SchedId>, params: &BTreeMap<String, i64>) -> Answer {
        let (task, fresh) = match self.by_pid.get(&pid) {
            Some(&t) => (t, false),
            None => match self.check_manageable(pid).and_then(|()| self.manage(now, pid, uid, params)) {
                Ok(t) => (t, true),
                Err(e) => return Answer::refused(e),
            },
        };
        if !fresh {
            // Already managed: new parameters go to its scheduler one by one.
            let owner = self.disp.owner(task).unwrap_or(self.disp.default_sched());
            for (k, v) in params {
                let r =
                    self.disp.message(now, owner, Sender { task: Some(task), uid }, task, &Request::Param { name: k.clone(), value: *v });
                if let Reply::Refused(why) = r {
                    self.settle(now);
                    return Answer::refused(format!("parameter {k}: {why}"));
                }
                if let Some(m) = self.tasks.get_mut(&task.0) {
                    m.params.insert(k.clone(), *v);
                }
            }
        }
        let target = sched.unwrap_or(self.disp.default_sched());
        let reply = self.disp.message(now, target, Sender { task: Some(task), uid }, task, &Request::Join);
        if let Reply::Refused(why) = reply {
            if fresh {
                self.unmanage(now, task);
            }
            self.settle(now);
            return Answer::refused(why);
        }
        self.settle(now);
        // Its owner now: `target`, unless a loaded module was ejected meanwhile (settle).
        let owner = self.disp.owner(task).unwrap_or(target);
        let name = self.disp.sched_name(owner).unwrap_or("?").to_string();
        Answer::Joined { task: task.0, sched: name }
    }

    /// LEAVE: back to the default scheduler.
    pub fn leave(&mut self, now: Ns, pid: i32, uid: u32) -> Answer {
        let Some(&task) = self.by_pid.get(&pid) else {
            return Answer::refused(format!("process {pid} is not managed"));
        };
        let owner = self.disp.owner(task).unwrap_or(self.disp.default_sched());
        let r = self.disp.message(now, owner, Sender { task: Some(task), uid }, task, &Request::Leave);
        self.settle(now);
        r.into()
    }

    /// Stops managing `pid`, restoring its threads.
    pub fn release(&mut self, now: Ns, pid: i32) -> Answer {
        let Some(&task) = self.by_pid.get(&pid) else {
            return Answer::refused(format!("process {pid} is not managed"));
        };
        self.unmanage(now, task);
        self.settle(now);
        Answer::Ok
    }

    /// Stops managing `task` and restores every thread of its process: each recorded one
    /// to its original state (and continued, if the agent had stopped it), then the
    /// threads the ledger does not know yet (created since the last adoption) from the
    /// process's template (`Ledger::restore_process`), and its RLIMIT_RTTIME. Also when its
    /// main thread is gone (`poll`): the process exited, or only its leader did, and the
    /// threads that leader left must not stay as the agent set them either (for a process
    /// that exited this finds nothing).
    fn unmanage(&mut self, now: Ns, task: TaskId) {
        if let Some(cpu) = self.disp.remove_task(now, task) {
            self.effects_push_resched(cpu);
        }
        if let Some(m) = self.tasks.remove(&task.0) {
            self.by_pid.remove(&m.pid);
            let mut restored = Vec::with_capacity(m.threads.len());
            for t in m.threads {
                self.unwatch(t.tid);
                // Continues the process too if the agent had stopped it (held).
                if self.ledger.restore(t.slot) {
                    restored.push(t.tid);
                }
                self.ledger.clear(t.slot);
            }
            self.ledger.restore_process(m.pid, &restored);
        }
    }

    /// Lowers a non-root process's RLIMIT_RTTIME to the backstop (`rt_backstop`; SIGKILL
    /// at twice it), never raising it, after noting what it was in the process's template
    /// (every restore of the process, the guardian's too, gives it back). The
    /// kernel counts a thread's real-time CPU since it last woke: the agent's grants keep
    /// that below `rt_backstop` (a warp episode ends at the warp limit; a spent budget
    /// holds or demotes the task, and a hold is a stop, after which the count starts again).
    fn set_backstop(&mut self, pid: i32) {
        let us = self.cfg.rt_backstop / 1000;
        let ledger = &mut self.ledger;
        let r = kernel::rttime(pid).and_then(|old| {
            // Into the process's template first: every restore gives it back. (No template:
            // the process is not managed, so it is left alone.)
            if !ledger.save_rttime(pid, old) {
                return Ok(());
            }
            kernel::set_rttime(pid, kernel::Rlimit { soft: old.soft.min(us), hard: old.hard.min(2 * us) })
        });
        match r {
            Ok(_) => {}
            // Another user's limits need CAP_SYS_RESOURCE, which some containers drop:
            // the budgets and their CPU-clock timers then stand alone (said once).
            Err(e) if e.raw_os_error() == Some(libc::EPERM) => {
                if !self.backstop_refused {
                    self.backstop_refused = true;
                    eprintln!("vassal agent: the kernel refuses to set RLIMIT_RTTIME of other users' processes (no CAP_SYS_RESOURCE): non-root tasks have no kernel backstop, only the agent's real-time budgets");
                }
            }
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
            Err(_) => self.kernel_errors += 1,
        }
    }

    /// Refuses to manage the mechanism itself (docs/agent.md, "Security model"): the
    /// agent, its guardian, PID 1 and kernel threads — parking any of them at SCHED_IDLE
    /// would stall the agent, its restore or the whole machine — and a thread id that is
    /// not a process's (clients name processes).
    fn check_manageable(&self, pid: i32) -> Result<(), String> {
        if pid <= 0 {
            return Err(format!("no process {pid}"));
        }
        if pid == 1 {
            return Err("process 1 (init) is never managed".into());
        }
        let tgid = kernel::tgid(pid).map_err(|_| format!("no process {pid}"))?;
        if tgid != pid {
            return Err(format!("{pid} is a thread of process {tgid}; name the process"));
        }
        if pid == std::process::id() as i32 {
            return Err(format!("process {pid} is the agent itself; it is never managed"));
        }
        if pid == self.guardian_pid {
            return Err(format!("process {pid} is the agent's guardian; it is never managed"));
        }
        if kernel::is_kernel_thread(pid).unwrap_or(false) {
            return Err(format!("process {pid} is a kernel thread; kernel threads are never managed"));
        }
        Ok(())
    }

    fn effects_push_resched(&mut self, cpu: CpuId) {
        self.slice_end[cpu.0 as usize] = None;
        self.pending_resched.insert(cpu.0);
    }

    /// MessageToScheduler about `pid` (to its owner when `sched` is None).
    pub fn message(&mut self, now: Ns, sched: Option<SchedId>, pid: i32, uid: u32, req: &Request) -> Answer {
        let Some(&task) = self.by_pid.get(&pid) else {
            return Answer::refused(format!("process {pid} is not managed"));
        };
        // A non-root uid's reservations together stay within `max_rt_per_uid`.
        let reserve = match req {
            Request::Reserve { util, .. } | Request::Modify { util, .. } if util.is_finite() && *util > 0.0 => {
                Some((util.min(1.0) * CPU_PPM as f64).round() as u64)
            }
            _ => None,
        };
        if let (Some(ppm), true) = (reserve, uid != 0) {
            let owner = self.tasks[&task.0].uid;
            let others: u64 = self.tasks.iter().filter(|(&t, m)| t != task.0 && m.uid == owner).map(|(_, m)| m.reserved_ppm).sum();
            let most = self.cfg.max_rt_per_uid_ppm;
            if others + ppm > most {
                return Answer::refused(format!(
                    "uid {owner} would hold {:.4} CPUs of reservations; a non-root uid may hold at most {:.4} (max_rt_per_uid)",
                    (others + ppm) as f64 / CPU_PPM as f64,
                    most as f64 / CPU_PPM as f64
                ));
            }
        }
        let to = sched.or(self.disp.owner(task)).unwrap_or(self.disp.default_sched());
        let r = self.disp.message(now, to, Sender { task: Some(task), uid }, task, req);
        if let Some(m) = self.tasks.get_mut(&task.0) {
            match (&r, req) {
                (Reply::Ok, Request::Param { name, value }) => {
                    m.params.insert(name.clone(), *value);
                }
                (Reply::Ok, Request::Reserve { .. } | Request::Modify { .. }) => m.reserved_ppm = reserve.unwrap_or(0),
                // Freed, or refused because it was removed already: nothing held either way.
                (_, Request::Free | Request::Leave) => m.reserved_ppm = 0,
                _ => {}
            }
        }
        self.settle(now);
        r.into()
    }

    pub fn register(
        &mut self,
        now: Ns,
        name: &str,
        kind: &str,
        params: &BTreeMap<String, crate::config::Value>,
        usage: &crate::config::UsageSpec,
        above: Option<&str>,
    ) -> Answer {
        let policy = match vassal_policies::build(kind, &to_params(params)) {
            Ok(p) => p,
            Err(e) => return Answer::refused(e),
        };
        let usage = match usage.to_usage(self.ncpus) {
            Ok(u) => u,
            Err(e) => return Answer::refused(e),
        };
        let pos = match above {
            None => Position::Top,
            Some(a) => match self.disp.lookup(a) {
                Some(id) => Position::Above(id),
                None => return Answer::refused(format!("no scheduler named '{a}'")),
            },
        };
        let r = match self.disp.register(name, policy, usage, pos) {
            Ok(_) => Answer::Ok,
            Err(e) => Answer::refused(e.to_string()),
        };
        self.settle(now);
        r
    }

    pub fn unregister(&mut self, now: Ns, name: &str) -> Answer {
        let Some(id) = self.disp.lookup(name) else {
            return Answer::refused(format!("no scheduler named '{name}'"));
        };
        let r = match self.disp.unregister(now, id) {
            Ok(_) => {
                if let Some(path) = self.modules.remove(name) {
                    eprintln!("vassal agent: module scheduler '{name}' ({path}) unregistered; its tasks went to the default scheduler");
                }
                Answer::Ok
            }
            Err(e) => Answer::refused(e.to_string()),
        };
        self.settle(now);
        r
    }

    // ----- loadable modules (issue 8; docs/modules.md) -----

    /// `vassal ctl load`, first half, called *without* the agent's lock: reads, compiles
    /// and initialises the module in `path` for `ncpus` CPUs (wasmtime's Cranelift takes
    /// 3–6 ms for a small module, ~0.9 s for BVT the first time), so the dispatcher never
    /// waits for a compilation. Returns it with the time it took.
    pub fn open_module(
        ncpus: u16,
        path: &str,
        params: &BTreeMap<String, crate::config::Value>,
    ) -> (Result<vassal_module::Opened, vassal_module::LoadError>, Ns) {
        let t0 = kernel::now_ns();
        let r = vassal_module::open_file(std::path::Path::new(path), ncpus, &module_params(params), vassal_module::Limits::default());
        (r, kernel::now_ns().saturating_sub(t0))
    }

    /// `vassal ctl load`, second half: the module `opened` (by [`Agent::open_module`],
    /// in `took`) becomes scheduler `name` at `place`, contained with `watchdog`, if its
    /// declared usage passes the conflict check; nothing changes if it does not, or if it
    /// did not open, and the refusal says why. Logged either way.
    #[allow(clippy::too_many_arguments)]
    pub fn load(
        &mut self,
        now: Ns,
        path: &str,
        name: &str,
        place: &vassal_module::Placement,
        opened: Result<vassal_module::Opened, vassal_module::LoadError>,
        took: Ns,
        watchdog: Option<Ns>,
    ) -> Answer {
        let r = opened.and_then(|m| vassal_module::register_opened(&mut self.disp, m, name, place, watchdog));
        let answer = match r {
            Ok(_) => {
                eprintln!(
                    "vassal agent: loaded module {path} as scheduler '{name}' ({}) at {place:?}, watchdog {}, opened in {:.1} ms outside the dispatcher's lock",
                    describe_sched(&self.disp, name),
                    watchdog.map_or("none".into(), vassal_core::fmt_duration),
                    took as f64 / 1e6
                );
                self.modules.insert(name.to_string(), path.to_string());
                Answer::Ok
            }
            Err(e) => {
                eprintln!("vassal agent: load of module {path} as scheduler '{name}' refused: {e}");
                Answer::refused(format!("module {path}: {e}"))
            }
        };
        self.settle(now);
        answer
    }

    /// `vassal ctl unload`: each task of module scheduler `name` goes to the scheduler
    /// below it (`Dispatcher::unregister_to_below`); the running ones' CPUs are decided
    /// again at once, so no task is lost or left parked.
    pub fn unload(&mut self, now: Ns, name: &str) -> Answer {
        let Some(path) = self.modules.get(name).cloned() else {
            return Answer::refused(match self.disp.lookup(name) {
                Some(_) => format!("'{name}' is a built-in scheduler, not a loaded module (use unregister)"),
                None => format!("no module named '{name}' is loaded"),
            });
        };
        let r = match vassal_module::unload(&mut self.disp, now, name) {
            Ok(moved) => {
                self.modules.remove(name);
                eprintln!("vassal agent: unloaded module scheduler '{name}' ({path}); tasks {}", self.describe_moved(&moved));
                Answer::Ok
            }
            Err(e) => Answer::refused(e.to_string()),
        };
        self.settle(now);
        r
    }

    /// "PID -> SCHEDULER" for each moved task.
    fn moved_rows(&self, moved: &[(TaskId, SchedId)]) -> Vec<String> {
        moved
            .iter()
            .map(|(t, s)| {
                let pid = self.tasks.get(&t.0).map_or_else(|| format!("{t}"), |m| m.pid.to_string());
                format!("{pid} -> {}", self.disp.sched_name(*s).unwrap_or("?"))
            })
            .collect()
    }

    fn describe_moved(&self, moved: &[(TaskId, SchedId)]) -> String {
        format!("[{}]", self.moved_rows(moved).join(", "))
    }

    /// The containment duty of the mechanism (docs/modules.md): ejects every contained
    /// module that failed (a fault, an invalid decision) or whose watchdog expired, logs
    /// it and keeps it for `status`. Called at every round of `settle`, so before any
    /// decision is taken after a failure; the next watchdog expiry is one of the
    /// dispatcher's deadlines (`next_deadline`), so it fires one dispatcher wake-up after
    /// its limit.
    fn contain(&mut self, now: Ns) {
        for e in self.disp.eject_failed(now) {
            let module = self.modules.remove(&e.name).unwrap_or_default();
            let moved = self.moved_rows(&e.moved);
            eprintln!("vassal agent: module scheduler '{}' ({module}) ejected: {}; tasks [{}]", e.name, e.reason, moved.join(", "));
            if self.ejections.len() == MAX_EJECTIONS {
                self.ejections.pop_front();
            }
            self.ejections.push_back(EjectionRow { at_ns: e.at, name: e.name, module, reason: e.reason, moved });
        }
    }

    /// Modules ejected so far (the last [`MAX_EJECTIONS`]), for `status`.
    pub fn ejections(&self) -> Vec<EjectionRow> {
        self.ejections.iter().cloned().collect()
    }

    // ----- the dispatcher's pass -----

    /// One pass of the dispatcher at `now`: poll the managed processes that need it (see
    /// `poll`), fire due events, deliver due ticks, end expired slices, decide, and apply.
    pub fn pass(&mut self, now: Ns) {
        self.passes += 1;
        self.last_pass = now;
        let changes = self.changes;
        self.take_events();
        if let Some(tr) = self.trace.as_mut() {
            // What brought this pass: its events, and how far the next scheduler event
            // and each CPU's slice end are (µs; negative: due).
            use std::io::Write;
            let us = |t: Ns| (t as i64 - now as i64) / 1000;
            let slices: Vec<Option<i64>> = self.slice_end.iter().map(|e| e.map(us)).collect();
            let event = self.events.first().map(|e| us(e.0));
            let _ = writeln!(tr, "{} pass: {} BPF events, scheduler event {event:?}, slice ends {slices:?}", now / 1000, self.ev_buf.len());
        }
        self.poll(now);
        while let Some(&(at, sched, token)) = self.events.first() {
            if at > now {
                break;
            }
            self.events.pop_first();
            self.event_at.remove(&(sched, token));
            self.changes += 1;
            if let Some(t) = self.chrome.as_mut() {
                t.event(now, self.disp.sched_name(SchedId(sched)).unwrap_or("?"));
            }
            self.disp.fire_event(now, SchedId(sched), token);
        }
        // Every tick that fell due since the last pass is delivered (the passes may be
        // up to PARKED_EVERY ticks apart when polling, up to a second with BPF events), so
        // a policy counting ticks keeps its count; more than that behind (a host stall),
        // the tick grid restarts at now. (No built-in policy acts on the machine's ticks:
        // one that must act at a time sets a scheduler event, as linux22 does for its own
        // tick, and gets a pass exactly then.)
        let tick = self.cfg.tick;
        let most = match self.source {
            Source::Poll => PARKED_EVERY,
            Source::Bpf(_) => (SEC / tick).max(1),
        };
        let mut delivered = 0;
        while now >= self.next_tick && delivered < most {
            for c in 0..self.ncpus {
                self.disp.tick(now, CpuId(c));
            }
            delivered += 1;
            self.next_tick += tick;
        }
        if now >= self.next_tick {
            self.next_tick = now + tick;
        }
        for c in 0..self.ncpus as usize {
            if self.slice_end[c].is_some_and(|e| e <= now) {
                self.slice_end[c] = None;
                self.pending_expired.insert(c as u16);
            }
        }
        self.settle(now);
        self.unapplied = self.tasks.values().any(|m| m.threads.iter().any(|t| t.applied != m.want));
        self.backoff = if self.changes != changes { 1 } else { (self.backoff * 2).min(PARKED_EVERY) };
        if let Some(t) = self.chrome.as_mut() {
            t.flush();
        }
    }

    /// Drains the BPF ring buffer (BPF source): each block or wake sets its thread's
    /// runnable flag (the last event wins: the ring buffer's order is the kernel's, see
    /// crate::bpf), and marks its process for this pass's `poll`; an exit or a new thread
    /// makes the process rescanned now.
    fn take_events(&mut self) {
        use crate::bpf::Kind;
        let Source::Bpf(src) = &mut self.source else {
            return;
        };
        let mut evs = std::mem::take(&mut self.ev_buf);
        evs.clear();
        src.drain(&mut evs);
        self.bpf_events += evs.len() as u64;
        for e in &evs {
            let Some(&task) = self.by_pid.get(&e.tgid) else {
                continue;
            };
            let Some(m) = self.tasks.get_mut(&task.0) else {
                continue;
            };
            m.evented = true;
            if e.exited() {
                m.rescanned = 0;
            }
            if e.kind == Kind::New {
                // Adopted now, with the original it would have had without the agent
                // (from its creator's, which the event names); if that fails, the rescan
                // at this pass tries again.
                if !m.threads.iter().any(|t| t.tid == e.tid) {
                    let original = self.late_original(task.0, Some(e.creator));
                    match self.adopt_thread(e.tgid, e.tid, original) {
                        Ok(t) => self.tasks.get_mut(&task.0).expect("looked up").threads.push(t),
                        Err(_) => self.tasks.get_mut(&task.0).expect("looked up").rescanned = 0,
                    }
                }
                continue;
            }
            let woke = e.kind == Kind::Wake;
            if let Some(t) = m.threads.iter_mut().find(|t| t.tid == e.tid) {
                t.run = woke;
            }
            if woke && m.woke_at.is_none() {
                m.woke_at = Some(e.time);
            }
        }
        self.ev_buf = evs;
    }

    /// Reads each process's runnability and CPU clock and tells the dispatcher. Polling:
    /// runnability from /proc (see below for which processes); BPF: from the events'
    /// flags, for the processes events named, the selected ones (their CPU use), those
    /// with a thread the map could not take (polled), and any at a rescan.
    fn poll(&mut self, now: Ns) {
        let ids: Vec<u32> = self.tasks.keys().copied().collect();
        let bpf = matches!(self.source, Source::Bpf(_));
        let all = !bpf && (self.quiet || self.backoff > 1);
        for id in ids {
            let task = TaskId(id);
            let selected = matches!(self.disp.state(task), TaskState::Running(_));
            let m = self.tasks.get_mut(&id).expect("listed");
            let rescan = if bpf { now + RESCAN_BPF / 2 >= m.rescanned + RESCAN_BPF } else { now >= m.rescanned + RESCAN };
            // Polled at every pass: a selected process (its block frees a CPU), an armed
            // one (the kernel runs it the instant it wakes; the policy must hear of it),
            // one whose kernel state is not applied yet, and any at a rescan; a parked one
            // every PARKED_EVERY-th pass (staggered by task), or at every pass while the
            // passes are PARKED_EVERY ticks apart.
            let unsettled = m.want == KState::Untouched || m.threads.iter().any(|t| t.applied != m.want);
            let armed = matches!(m.want, KState::Armed { .. });
            let wanted = if bpf {
                selected || unsettled || rescan || m.evented || m.threads.iter().any(|t| !t.watched)
            } else {
                all || selected || armed || unsettled || rescan || (self.passes + id as u64).is_multiple_of(PARKED_EVERY)
            };
            if !wanted {
                continue;
            }
            m.evented = false;
            let woke_at = m.woke_at.take();
            // Runnable if any thread is; gone if the main thread is (its stat line is read
            // at each rescan: through wchan a zombie would look runnable).
            let mut runnable = false;
            let mut gone = false;
            for (i, t) in m.threads.iter_mut().enumerate() {
                let main = i == 0 && t.tid == m.pid;
                match t.runnable() {
                    Ok(r) => runnable |= r,
                    Err(_) if main => gone = true,
                    Err(_) => {}
                }
                if main && rescan && matches!(t.stat.state(), Ok(b'Z' | b'X') | Err(_)) {
                    gone = true;
                }
            }
            let cpu_now = m.clock.read();
            if gone || cpu_now.is_err() {
                self.unmanage(now, task);
                continue;
            }
            let cpu_now = cpu_now.expect("checked");
            let ran = cpu_now.saturating_sub(m.cpu_ns);
            m.cpu_ns = cpu_now;
            m.unaccounted += ran;
            // Real-time CPU is charged to the grants it ran under (crate::budget).
            if let Some(by) = std::mem::replace(&mut m.rt_since_read, m.rt) {
                if ran > 0 {
                    m.episode_rt += ran;
                    if let RtBy::Sched(s) = by {
                        if let Some(b) = self.sched_budgets.get_mut(&s.0) {
                            b.charge(now, ran);
                        }
                    }
                    if let Some(b) = self.uid_budgets.get_mut(&m.uid) {
                        b.charge(now, ran);
                    }
                }
            }
            if m.samples.back().is_none_or(|&(t, _)| now >= t + 100 * MS) {
                m.samples.push_back((now, cpu_now));
                while m.samples.len() > 11 {
                    m.samples.pop_front();
                }
            }
            let last_cpu = m.last_cpu;
            // CPU used is told to the dispatcher while it has the task running. A task also
            // runs when the dispatcher does not know it: armed, from its wake until the
            // next poll; parked, on a CPU nothing else wants. That time is told at its next
            // dispatch, with the run it started, rather than as a separate run: a policy
            // charging whole quanta per run (BVT's mcu, §2) would otherwise charge a full
            // mcu for each sliver. Past one second untold it is told anyway.
            let unaccounted = m.unaccounted;
            let cpu = match self.disp.state(task) {
                TaskState::Running(c) => Some(c),
                _ if unaccounted >= SEC => Some(CpuId(last_cpu.unwrap_or(0))),
                _ => None,
            };
            if let (Some(cpu), true) = (cpu, unaccounted > 0) {
                m.unaccounted = 0;
                self.disp.account(now, task, cpu, unaccounted);
            }
            let st = self.disp.state(task);
            if let Some(tr) = self.trace.as_mut() {
                use std::io::Write;
                if runnable != st.is_runnable() || ran > 0 {
                    let _ = writeln!(tr, "{} {task} ran {ran} {st:?} -> runnable={runnable}", now / 1000);
                }
            }
            if runnable != st.is_runnable() {
                self.changes += 1;
                if let (Some(t), Some(m)) = (self.chrome.as_mut(), self.tasks.get(&task.0)) {
                    t.runnable(now, m.pid as u32, runnable);
                }
            }
            // An armed task is already running where it was armed (the kernel ran it the
            // instant it woke): policies may prefer that CPU (`Wake::cpu`).
            let armed = self.tasks.get(&id).and_then(|m| match m.want {
                KState::Armed { cpu } => Some(CpuId(cpu)),
                _ => None,
            });
            if runnable && st == TaskState::Blocked {
                self.disp.wake(now, task, Wake { voluntary: true, cpu: armed, ..Wake::default() });
                if let Some(m) = self.tasks.get_mut(&id) {
                    m.runnable_since = Some(woke_at.map_or(now, |w| w.min(now)));
                }
            } else if !runnable && st.is_runnable() {
                if let Some(cpu) = self.disp.block(now, task, Block { voluntary: true }) {
                    self.effects_push_resched(cpu);
                }
                if let Some(m) = self.tasks.get_mut(&id) {
                    m.runnable_since = None;
                    // A voluntary block ends a warp episode (BVT §2.2).
                    m.episode_rt = 0;
                }
            } else if let (Some(cpu), Some(_), false) = (armed, woke_at, runnable) {
                self.replay_run(now, task, cpu);
            }
            if rescan {
                self.rescan(now, id);
            }
        }
    }

    /// An armed process woke and blocked again since the last pass (a quiet wake, or a run
    /// shorter than the dispatcher's wake-up): the kernel ran it on `cpu`, where it was
    /// armed, the instant it woke. The policy is told what happened, in order: the wake
    /// (and the decisions it leads to), the CPU it used (told at its dispatch, as for any
    /// run), the block. All at `now`: a pass runs on one clock. If the policy would not
    /// have run it, what it used stays untold until its next dispatch (see `poll`). No
    /// latency sample: the agent did not dispatch it, the kernel did.
    fn replay_run(&mut self, now: Ns, task: TaskId, cpu: CpuId) {
        self.changes += 1;
        self.replayed_runs += 1;
        self.disp.wake(now, task, Wake { voluntary: true, cpu: Some(cpu), ..Wake::default() });
        if let Some(m) = self.tasks.get_mut(&task.0) {
            m.runnable_since = None;
        }
        self.decide(now);
        if let (TaskState::Running(c), Some(m)) = (self.disp.state(task), self.tasks.get_mut(&task.0)) {
            let ran = std::mem::take(&mut m.unaccounted);
            if ran > 0 {
                self.disp.account(now, task, c, ran);
            }
        }
        if let Some(c) = self.disp.block(now, task, Block { voluntary: true }) {
            self.effects_push_resched(c);
        }
        if let Some(m) = self.tasks.get_mut(&task.0) {
            m.episode_rt = 0;
        }
        if let Some(tr) = self.trace.as_mut() {
            use std::io::Write;
            let _ = writeln!(tr, "{} {task} replayed a run on {cpu}", now / 1000);
        }
    }

    /// The CPU-clock timers of these tasks (the values their signals carried: task ids)
    /// fired: each such process is read at this pass, and its timer set again from there.
    pub fn cpu_timers_fired(&mut self, tasks: &[u64]) {
        for &t in tasks {
            if let Some(m) = u32::try_from(t).ok().and_then(|t| self.tasks.get_mut(&t)).filter(|m| m.bound_at != 0) {
                m.evented = true;
                m.bound_at = 0;
                self.bounds_fired += 1;
            }
        }
    }

    /// Re-lists a process's threads: new ones are saved, with the original they would
    /// have had without the agent (`late_original`, from the template: a rescan does not
    /// know their creators), and given the process's state.
    fn rescan(&mut self, now: Ns, id: u32) {
        let Some(m) = self.tasks.get_mut(&id) else {
            return;
        };
        m.rescanned = now;
        let Ok(tids) = kernel::threads(m.pid) else {
            return;
        };
        let known: BTreeSet<i32> = m.threads.iter().map(|t| t.tid).collect();
        let now_set: BTreeSet<i32> = tids.iter().copied().collect();
        let mut gone = Vec::new();
        m.threads.retain(|t| {
            let keep = now_set.contains(&t.tid);
            if !keep {
                gone.push((t.slot, t.tid));
            }
            keep
        });
        let pid = m.pid;
        for (s, tid) in gone {
            self.unwatch(tid);
            self.ledger.clear(s);
        }
        let original = self.late_original(id, None);
        for tid in tids.into_iter().filter(|t| !known.contains(t)) {
            if let Ok(t) = self.adopt_thread(pid, tid, original) {
                if let Some(m) = self.tasks.get_mut(&id) {
                    m.threads.push(t);
                }
            }
        }
    }

    /// Carries out what the policies asked (events, reschedules), then applies the
    /// resulting decisions to the kernel.
    pub fn settle(&mut self, now: Ns) {
        self.decide(now);
        self.take_notes();
        self.enforce(now);
    }

    /// What the schedulers logged (`Dispatcher::drain_logs`): each note about a task is
    /// kept with it for `ctl tasks` (the last [`NOTES`]), and a loaded scheduler's notes
    /// go to the agent's log too (e.g. rtserver removing a misbehaving task's reservation,
    /// paper 002 §2.3), so the task's owner and the administrator both see it.
    fn take_notes(&mut self) {
        let logs = self.disp.drain_logs();
        if logs.is_empty() {
            return;
        }
        let default = self.disp.sched_name(self.disp.default_sched()).unwrap_or("").to_string();
        for (sched, l) in logs {
            let Some(m) = l.task.and_then(|t| self.tasks.get_mut(&t.0)) else {
                continue;
            };
            if sched != default {
                eprintln!("vassal agent: scheduler '{sched}' about process {} (uid {}): {}", m.pid, m.uid, l.text);
            }
            if m.notes.len() == NOTES {
                m.notes.pop_front();
            }
            m.notes.push_back(format!("{sched}: {}", l.text));
        }
    }

    /// Carries out what the policies asked (events, reschedules): the decisions, not yet
    /// applied to the kernel.
    fn decide(&mut self, now: Ns) {
        for _round in 0..1000 {
            // Containment of loaded modules (issue 8): a module that failed since the last
            // round is ejected before anything else is decided.
            self.contain(now);
            let mut effects = std::mem::take(&mut self.effects);
            self.disp.drain_effects(&mut effects);
            let mut resched: BTreeMap<u16, Preempt> = BTreeMap::new();
            for c in std::mem::take(&mut self.pending_expired) {
                resched.insert(c, Preempt::SliceExpired);
            }
            for c in std::mem::take(&mut self.pending_resched) {
                resched.insert(c, Preempt::Resched);
            }
            for e in effects.drain(..) {
                match e {
                    Effect::SetEvent { sched, token, at } => {
                        if let Some(old) = self.event_at.insert((sched.0, token), at) {
                            self.events.remove(&(old, sched.0, token));
                        }
                        self.events.insert((at, sched.0, token));
                    }
                    Effect::CancelEvent { sched, token } => {
                        if let Some(old) = self.event_at.remove(&(sched.0, token)) {
                            self.events.remove(&(old, sched.0, token));
                        }
                    }
                    Effect::Resched(cpu) => {
                        resched.entry(cpu.0).or_insert(Preempt::Resched);
                    }
                }
            }
            self.effects = effects;
            if resched.is_empty() {
                break;
            }
            for (c, why) in resched {
                let before = self.disp.running(CpuId(c));
                let d = self.disp.schedule(now, CpuId(c), why);
                // A decision that changes what runs is a change (one that keeps the same
                // task running is not: the kernel state stays as it is).
                if d.map(|d| d.task) != before {
                    self.changes += 1;
                }
                if let Some(tr) = self.trace.as_mut() {
                    use std::io::Write;
                    let _ = writeln!(tr, "{} schedule cpu{c} {why:?} -> {d:?}", now / 1000);
                }
                if let Some(t) = self.chrome.as_mut() {
                    let by = d.and_then(|d| Some((self.tasks.get(&d.task.0)?.pid as u32, self.disp.sched_name(d.by).unwrap_or("?"))));
                    t.decision(now, c, by);
                }
                self.slice_end[c as usize] = d.and_then(|d| d.slice).map(|s| now.saturating_add(s));
                if let Some(d) = d {
                    if let Some(m) = self.tasks.get_mut(&d.task.0) {
                        m.last_cpu = Some(c);
                        if let Some(since) = m.runnable_since.take() {
                            if m.lat.len() == LAT_SAMPLES {
                                m.lat.pop_front();
                            }
                            m.lat.push_back(((now - since) / 1000).min(u32::MAX as u64) as u32);
                        }
                    }
                }
            }
        }
    }

    /// Applies the dispatcher's decisions as kernel state (see the module documentation).
    fn enforce(&mut self, now: Ns) {
        let run_prio = self.cfg.run_priority;
        let ids: Vec<u32> = self.tasks.keys().copied().collect();
        let mut quiet = true;
        self.throttled_until = None;
        for id in ids {
            let task = TaskId(id);
            // Real time only under a grant with budget left (crate::budget): a selected
            // task without one runs best effort, or — exclusive to a loaded scheduler
            // whose declared share is spent — is held like a reservation outside its slots.
            let (rt, left) = self.rt_grant(now, id);
            let m = &self.tasks[&id];
            let want = match self.disp.state(task) {
                TaskState::Running(_) if rt.is_none() && self.hard_capped(task) => KState::Held,
                TaskState::Running(c) => KState::Run { cpu: c.0, fifo: rt.is_some() },
                TaskState::Blocked if rt.is_some() => KState::Armed { cpu: m.last_cpu.unwrap_or(0) },
                TaskState::Runnable if self.hard_capped(task) => KState::Held,
                _ => KState::Parked,
            };
            let m = self.tasks.get_mut(&id).expect("listed");
            m.want = want;
            m.rt = rt;
            if rt.is_some() {
                m.rt_since_read = rt;
            }
            quiet &= matches!(want, KState::Parked | KState::Held);
            if let KState::Run { cpu, .. } = want {
                m.last_cpu = Some(cpu);
            }
            for t in &mut m.threads {
                // A held thread is first parked; the stop below makes it held.
                let goal = if want == KState::Held { KState::Parked } else { want };
                if t.applied == want || t.applied == goal {
                    continue;
                }
                // Bound first, to the one CPU of a selected or armed thread; a thread
                // already bound there (it was selected, armed or parked there) only changes
                // policy: an affinity call is saved at every wake, block and parking.
                let cpu = match goal {
                    KState::Run { cpu, .. } | KState::Armed { cpu } => Some(cpu),
                    _ => None,
                };
                let mut r = Ok(());
                if let Some(cpu) = cpu.filter(|&c| t.bound != Some(c)) {
                    r = kernel::set_affinity(t.tid, &kernel::one_cpu(cpu));
                    if r.is_ok() {
                        t.bound = Some(cpu);
                    }
                }
                let r = r.and_then(|_| match goal {
                    KState::Run { fifo: true, .. } => kernel::set_policy(t.tid, libc::SCHED_FIFO | RESET_ON_FORK, run_prio),
                    KState::Run { fifo: false, .. } => kernel::set_policy(t.tid, libc::SCHED_OTHER | RESET_ON_FORK, 0),
                    KState::Armed { .. } => kernel::set_policy(t.tid, libc::SCHED_FIFO | RESET_ON_FORK, run_prio + 1),
                    KState::Parked => kernel::set_policy(t.tid, libc::SCHED_IDLE | RESET_ON_FORK, 0),
                    KState::Untouched | KState::Held => Ok(()),
                });
                match r {
                    // Leaving held: the thread is parked now (the SIGCONT below releases it).
                    Ok(()) => t.applied = goal,
                    Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
                    Err(_) => self.kernel_errors += 1,
                }
            }
            // Held: parked first (the kernel switches a running task out at once, ~30 µs),
            // then stopped (the stop takes effect when it next gets a CPU, so at once).
            if want == KState::Held && !self.tasks[&id].stopped {
                self.hold(id);
            }
            self.release_or_mark(id);
            let quiet_wakes = matches!(want, KState::Armed { .. }) && !self.hard_capped(task);
            self.set_quiet(id, quiet_wakes, if rt.is_some() { left } else { Ns::MAX });
            let m = &self.tasks[&id];
            quiet &= m.threads.iter().all(|t| t.applied == want);
        }
        self.quiet = quiet;
    }

    /// Makes an armed process's wakes quiet, or not (module documentation, "Quiet
    /// wakes"), and sets its CPU-clock timer: one tick of CPU past what it has used when
    /// quiet, and at most `left` past it (the real-time budget it may still use,
    /// crate::budget; `Ns::MAX`: none); disarmed when neither applies. Each of its
    /// threads armed in the kernel is marked in the BPF map when quiet. A process without
    /// a timer, or with a thread the map does not watch, is never quiet.
    fn set_quiet(&mut self, id: u32, want: bool, left: Ns) {
        let tick = self.cfg.tick;
        let mut src = match &mut self.source {
            Source::Bpf(src) => Some(src),
            Source::Poll => None,
        };
        let Some(m) = self.tasks.get_mut(&id) else {
            return;
        };
        let quiet = want && src.is_some() && m.bound.is_some() && m.threads.iter().all(|t| t.watched && t.applied == m.want);
        // Quiet: the timer first, then the map; not quiet: the map first. A quiet wake is
        // never unbounded.
        if !quiet {
            for t in m.threads.iter_mut().filter(|t| t.quiet) {
                if src.as_mut().is_some_and(|s| s.set_quiet_wake(t.tid, m.pid, false)) {
                    t.quiet = false;
                }
            }
        }
        let budget = if left == Ns::MAX { 0 } else { m.cpu_ns.saturating_add(left.max(1)) };
        let at = match (quiet, budget) {
            (true, 0) => m.cpu_ns + tick,
            (true, b) => b.min(m.cpu_ns + tick),
            (false, b) => b,
        };
        if m.bound_at != at {
            match m.bound.as_mut().map_or(Ok(()), |b| b.set(at)) {
                Ok(()) => m.bound_at = at,
                Err(_) => {
                    self.kernel_errors += 1;
                    return;
                }
            }
        }
        if let (true, Some(src)) = (quiet, src) {
            for t in m.threads.iter_mut().filter(|t| !t.quiet) {
                if src.set_quiet_wake(t.tid, m.pid, true) {
                    t.quiet = true;
                }
            }
        }
    }

    /// Whether a runnable task the dispatcher did not select must not run at all: it is
    /// exclusive to a loaded scheduler (a reservation holder outside its slots, a task
    /// over its budget; paper 002's reserved process at its "waiting priority"), so no
    /// scheduler below may run it, and SCHED_IDLE alone would still give it up to a 4 ms
    /// kernel tick per parking (module documentation, *held*).
    fn hard_capped(&self, task: TaskId) -> bool {
        self.disp.owner(task).is_some_and(|o| o != self.disp.default_sched()) && !self.disp.is_guest(task)
    }

    /// Stops (SIGSTOP) a parked process that should be held, if it is really runnable: a
    /// process whose threads all blocked already is only parked, so that a task that asked
    /// for a later time (`timed`) sleeps on its own timer and the next poll sees the block.
    /// The ledger names the process before the SIGSTOP (the guardian continues it).
    fn hold(&mut self, id: u32) {
        let Some(m) = self.tasks.get_mut(&id) else {
            return;
        };
        if !m.threads.iter().all(|t| t.applied == KState::Parked) {
            return;
        }
        let pid = m.pid;
        let mut runnable = false;
        for t in &mut m.threads {
            runnable |= t.stat.runnable().unwrap_or(false);
        }
        if !runnable {
            return;
        }
        for t in &m.threads {
            self.ledger.set_stopped(t.slot, Some(pid));
        }
        match kernel::signal_process(pid, libc::SIGSTOP) {
            Ok(()) => m.stopped = true,
            Err(e) => {
                for t in &m.threads {
                    self.ledger.set_stopped(t.slot, None);
                }
                if e.raw_os_error() != Some(libc::ESRCH) {
                    self.kernel_errors += 1;
                }
            }
        }
    }

    /// After a process's threads got their new state: continues (SIGCONT) a stopped
    /// process that should no longer be held, and clears the ledger's note after it; or
    /// marks the parked threads of a stopped process held.
    fn release_or_mark(&mut self, id: u32) {
        let Some(m) = self.tasks.get_mut(&id) else {
            return;
        };
        if !m.stopped {
            return;
        }
        let pid = m.pid;
        if m.want == KState::Held {
            for t in m.threads.iter_mut().filter(|t| t.applied == KState::Parked) {
                // Noted already, except a thread listed since the stop.
                self.ledger.set_stopped(t.slot, Some(pid));
                t.applied = KState::Held;
            }
            return;
        }
        match kernel::signal_process(pid, libc::SIGCONT) {
            Err(e) if e.raw_os_error() != Some(libc::ESRCH) => self.kernel_errors += 1,
            _ => {
                m.stopped = false;
                for t in &m.threads {
                    self.ledger.set_stopped(t.slot, None);
                }
            }
        }
    }

    /// Restores every managed process and forgets it (orderly shutdown).
    pub fn restore_all(&mut self, now: Ns) {
        let ids: Vec<u32> = self.tasks.keys().copied().collect();
        for id in ids {
            self.unmanage(now, TaskId(id));
        }
        self.ledger.restore_all();
        if let Some(t) = self.chrome.as_mut() {
            t.finish(now);
        }
    }

    // ----- reports -----

    pub fn hierarchy(&self) -> Answer {
        let mut counts: BTreeMap<u32, usize> = BTreeMap::new();
        for &id in self.tasks.keys() {
            if let Some(o) = self.disp.owner(TaskId(id)) {
                *counts.entry(o.0).or_default() += 1;
            }
        }
        let schedulers = self
            .disp
            .schedulers()
            .into_iter()
            .map(|s| SchedRow {
                tasks: counts.get(&s.id.0).copied().unwrap_or(0),
                module: self.modules.get(&s.name).cloned(),
                name: s.name,
                kind: s.kind,
                usage: s.usage.describe(),
                decided: s.decided,
                refused: s.refused,
            })
            .collect();
        Answer::Hierarchy { schedulers }
    }

    pub fn task_rows(&self) -> Vec<TaskRow> {
        let now = kernel::now_ns();
        self.tasks
            .iter()
            .map(|(&id, m)| {
                let task = TaskId(id);
                let (t0, c0) = m.samples.front().copied().unwrap_or((0, 0));
                let (t1, c1) = (m.samples.back().map_or(0, |s| s.0).max(t0), m.cpu_ns);
                let share = if t1 > t0 { c1.saturating_sub(c0) as f64 / (t1 - t0) as f64 } else { 0.0 };
                let mut lat: Vec<u32> = m.lat.iter().copied().collect();
                lat.sort_unstable();
                let pct = |p: f64| {
                    if lat.is_empty() {
                        0.0
                    } else {
                        lat[((lat.len() - 1) as f64 * p).round() as usize] as f64
                    }
                };
                TaskRow {
                    pid: m.pid,
                    uid: m.uid,
                    task: id,
                    sched: self.disp.owner(task).and_then(|o| self.disp.sched_name(o)).unwrap_or("?").to_string(),
                    threads: m.threads.len(),
                    state: match self.disp.state(task) {
                        TaskState::Running(c) => format!("running on {c}"),
                        TaskState::Runnable => "runnable".into(),
                        TaskState::Blocked => "blocked".into(),
                        TaskState::Dead => "exited".into(),
                    },
                    kernel: match m.want {
                        KState::Untouched => "untouched".into(),
                        KState::Run { cpu, fifo: true } => {
                            format!("fifo{} cpu{cpu}", self.cfg.run_priority)
                        }
                        KState::Run { cpu, fifo: false } => format!("other cpu{cpu}"),
                        KState::Armed { cpu } => {
                            format!("armed fifo{} cpu{cpu}", self.cfg.run_priority + 1)
                        }
                        KState::Parked => "idle".into(),
                        KState::Held => "idle, stopped".into(),
                    },
                    cpu_ns: m.cpu_ns - m.joined_cpu_ns,
                    share,
                    latency_p50_us: pct(0.5),
                    latency_p99_us: pct(0.99),
                    budget_ns: match self.disp.state(task) {
                        TaskState::Running(c) => self.slice_end[c.0 as usize].map(|e| e.saturating_sub(now)),
                        _ => None,
                    },
                    params: m.params.clone(),
                    notes: m.notes.iter().cloned().collect(),
                }
            })
            .collect()
    }

    /// How many ledger records are valid (for tests: one per managed thread).
    pub fn ledger_records(&self) -> usize {
        self.ledger.valid()
    }

    pub fn uptime(&self, now: Ns) -> Ns {
        now.saturating_sub(self.started).max(1)
    }
}
