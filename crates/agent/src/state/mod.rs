//! The agent's mechanism: `vassal_core::Dispatcher` driven by real time and real
//! processes, and its decisions turned into kernel state (paper 002's priority technique).
//! [`Agent`] is that state, guarded by one mutex shared by the broker and the dispatcher;
//! its methods are spread over files by concern:
//! - `membership`: joining and leaving, the threads of a managed process, their ledger;
//! - `pass`: the dispatcher's pass (BPF events or polls, then decisions), and its deadline;
//! - `enforcement`: real-time grants and budgets, and the kernel state decisions become;
//! - `modules`: schedulers registered at run time, loaded modules and their containment;
//! - `status`: what the schedulers noted, and the reports of `ctl status/tasks/hierarchy`.
//!
//! Invariants: a vassal task is one process, and every thread of it gets the same kernel
//! state (`membership`); a thread's original state is in the guardian's ledger before the
//! agent changes it, and is restored when its process is unmanaged; after every change
//! (`settle`) the kernel state of each managed process is recomputed from the decisions
//! and applied where it differs from what was applied last; a task is real-time only
//! under a grant with budget left (`enforcement`).

use std::collections::{BTreeMap, VecDeque};

use vassal_core::{Dispatcher, Driver, HierarchyConfig, Ns, Position, Reply, Request, SchedId, Sender, TaskId, CPU_PPM, MS, SEC};

use crate::budget::Bucket;
use crate::config::Config;
use crate::guardian::{Ledger, Slot};
use crate::kernel::{self, CpuClock, StatFile};
use crate::wire::{Answer, EjectionRow};

mod enforcement;
mod membership;
mod modules;
mod pass;
mod status;

use modules::describe_sched;

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
    /// Parked, and the process stopped (SIGSTOP): the hard cap (enforcement.rs, *held*).
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
    /// stays where it was bound (enforcement.rs, *parked*).
    bound: Option<u16>,
    /// Its wakes are quiet in the BPF map (`bpf::QUIET_WAKE`; pass.rs, "Quiet wakes").
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
    /// Armed with quiet wakes: every thread's wakes are quiet in the BPF map (pass.rs, "Quiet
    /// wakes").
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
    /// The dispatcher, with the scheduler events it was asked for and the CPUs waiting
    /// for a decision (vassal_core::driver; `pass` is the agent's side of it).
    drv: Driver,
    ncpus: u16,
    by_pid: BTreeMap<i32, TaskId>,
    tasks: BTreeMap<u32, Managed>,
    slice_end: Vec<Option<Ns>>,
    ledger: Ledger,
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
        let default = vassal_policies::build(&cfg.default.kind, &cfg.default.params)?;
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
                let opts = vassal_module::LoadOptions { params: s.params.clone(), watchdog: s.watchdog_ns()?, ..Default::default() };
                let place = vassal_module::Placement::Above(cfg.default.kind.clone());
                let place = if pos == Position::Top { vassal_module::Placement::Top } else { place };
                vassal_module::load(&mut disp, std::path::Path::new(path), &s.name, &place, &opts)
                    .map_err(|e| format!("scheduler '{}': module {path}: {e}", s.name))?;
                eprintln!("vassal agent: loaded module {path} as scheduler '{}' ({})", s.name, describe_sched(&disp, &s.name));
                modules.insert(s.name.clone(), path.clone());
                continue;
            }
            let p = vassal_policies::build(&s.kind, &s.params).map_err(|e| format!("scheduler '{}': {e}", s.name))?;
            let usage = s.usage()?.to_usage(ncpus).map_err(|e| format!("scheduler '{}': {e}", s.name))?;
            disp.register(&s.name, p, usage, pos).map_err(|e| e.to_string())?;
        }
        Ok(Agent {
            cfg,
            drv: Driver::new(disp),
            ncpus,
            by_pid: BTreeMap::new(),
            tasks: BTreeMap::new(),
            slice_end: vec![None; ncpus as usize],
            ledger,
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
        self.drv.disp.lookup(name)
    }
    pub fn param(&self, pid: i32, name: &str) -> Option<i64> {
        let t = self.by_pid.get(&pid)?;
        self.tasks.get(&t.0)?.params.get(name).copied()
    }
    pub fn uid_of_task(&self, pid: i32) -> Option<u32> {
        let t = self.by_pid.get(&pid)?;
        self.tasks.get(&t.0).map(|m| m.uid)
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
        let to = sched.or(self.drv.disp.owner(task)).unwrap_or(self.drv.disp.default_sched());
        let r = self.drv.disp.message(now, to, Sender { task: Some(task), uid }, task, req);
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
}
