//! The agent's mechanism: `vassal_core::Dispatcher` driven by real time and real
//! threads, and its decisions turned into kernel state (paper 002's priority technique).
//! [`Agent`] is that state, guarded by one mutex shared by the broker and the dispatcher;
//! its methods are spread over files by concern:
//! - `membership`: joining and leaving, the threads of a managed process, their ledger;
//! - `pass`: the dispatcher's pass (BPF events or polls, then decisions), and its deadline;
//! - `enforcement`: real-time grants and budgets, and the kernel state decisions become;
//! - `modules`: schedulers registered at run time, loaded modules and their containment;
//! - `status`: what the schedulers noted, and the reports of `ctl status/tasks/hierarchy`.
//!
//! **Unit of scheduling: the thread** (issue 17). A vassal task is one thread (a TID),
//! so a multithreaded process runs on as many CPUs as its threads are selected for; a
//! process is a *group* of its threads ([`Group`]): clients name processes, ownership
//! is a process's, and a process's parameters go to each of its threads, its weight
//! divided among them (`membership`, "Weights").
//!
//! Invariants: every thread of a managed process is a task of the dispatcher, adopted at
//! join or as soon as it is seen (BPF new-thread events, rescans), forgotten when it
//! exits; a thread's original state is in the guardian's ledger before the agent changes
//! it, and every thread of a process is restored when the process is unmanaged; after
//! every change (`settle`) the kernel state of each task whose decision, grant or owner
//! may have changed is recomputed and applied where it differs from what was applied
//! last (the others are not visited: a pass costs what changed, not what is managed);
//! a task is real-time only under a grant with budget left (`enforcement`).

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use vassal_core::{Dispatcher, Driver, HierarchyConfig, Ns, Position, SchedId, TaskId, CPU_PPM, MS, SEC};

use crate::budget::Bucket;
use crate::config::Config;
use crate::guardian::{Ledger, Slot};
use crate::kernel::{self, CpuClock, RunTime, StatFile};
use crate::wire::EjectionRow;

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
/// watched). Every process due within half of it is re-listed at the same pass, so the
/// re-listings of all processes come together, one pass per `RESCAN_BPF`.
pub const RESCAN_BPF: Ns = 5 * SEC;
/// A parked thread (neither selected nor armed) is polled at every `PARKED_EVERY`-th
/// pass only (staggered by task), and the passes come up to `PARKED_EVERY` ticks apart
/// while nothing changes (see `next_deadline`).
pub const PARKED_EVERY: u64 = 4;
/// With BPF events, threads the agent believes blocked are read from /proc at an audit
/// at the first pass `AUDIT_EVERY` after the last one (a pass of its own after twice
/// that), at most `AUDIT_READS` per audit (round robin), for a wake the kernel ran no
/// tracepoint program for (pass.rs, `audit`).
pub const AUDIT_EVERY: Ns = 20 * MS;
pub const AUDIT_READS: usize = 8;
/// Latency samples kept per task.
const LAT_SAMPLES: usize = 1024;
/// The window of the share figures of `ctl tasks` and `ctl hierarchy`.
pub const SHARE_WINDOW: Ns = SEC;
/// CPU-time samples are kept at most this often (one window holds ~10).
const SAMPLE_EVERY: Ns = 100 * MS;

/// How a selected task runs in the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunClass {
    /// SCHED_FIFO `run_priority`: under a real-time grant.
    Fifo,
    /// SCHED_OTHER: best effort, at its own nice (None: the agent leaves the nice as the
    /// thread has it), or at this one (a loaded best-effort scheduler's
    /// `loaded_best_effort_nice`).
    Other(Option<i8>),
}

/// What the agent made of a thread in the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KState {
    /// Not yet touched (just adopted).
    Untouched,
    Run {
        cpu: u16,
        class: RunClass,
    },
    Armed {
        cpu: u16,
    },
    Parked,
    /// Blocked, best effort: with its own affinity, in the fair class (`fair`: SCHED_OTHER
    /// at its own nice, the kernel runs it the instant it wakes) or parked (SCHED_IDLE: it
    /// runs at once only where nothing else is eligible): fair with `best_effort_sleep =
    /// "fair"` and no warp (enforcement.rs, *sleeping*).
    Sleeping {
        fair: bool,
    },
    /// Parked, and its process stopped (SIGSTOP): the hard cap (enforcement.rs, *held*).
    Held,
}

/// A managed thread: one vassal task.
struct Managed {
    tid: i32,
    /// Its process (the [`Group`]).
    pid: i32,
    slot: Slot,
    stat: StatFile,
    runtime: RunTime,
    /// Its original nice and affinity (from the ledger): what a best-effort selection
    /// gets back after the agent set another nice (`niced`), and what a sleeping thread
    /// waits with.
    nice0: i8,
    affinity0: kernel::Mask,
    /// The agent set its nice (a loaded best-effort scheduler's selection).
    niced: bool,
    applied: KState,
    want: KState,
    /// Its tid is in the BPF map: its blocks and wakes come as events (else it is polled).
    watched: bool,
    /// Runnable, as the BPF events last said (read from /proc when it was adopted).
    run: bool,
    /// The one CPU the agent bound it to (None: still its own affinity). A parked thread
    /// stays where it was bound (enforcement.rs, *parked*).
    bound: Option<u16>,
    /// Its bits in the BPF map `quiet` (`crate::bpf::QUIET_WAKE`, `QUIET_BLOCK`; 0: not
    /// in it): its wakes, or its blocks too, do not wake the dispatcher (pass.rs, "Quiet
    /// wakes and blocks").
    quiet: u8,
    /// A block of it was among the BPF events since the last pass (a quiet block and a
    /// wake before the pass are a block and a wake to replay, not nothing).
    blocked_seen: bool,
    /// Its CPU time as its last BPF event told it, if that event was a block: exact
    /// while it stays blocked, so the pass that takes the event reads no schedstat.
    blocked_cpu_ns: Option<u64>,
    /// Its CPU time (schedstat) when last read, and when.
    cpu_ns: u64,
    read_at: Ns,
    /// CPU it used that the dispatcher has not been told of yet (see `poll`).
    unaccounted: u64,
    joined_cpu_ns: u64,
    /// Parameters set for this thread alone (`--tid`): they override its process's.
    own: BTreeMap<String, i64>,
    /// The weight its scheduler was last given (its process's, divided: `membership`).
    weight: i64,
    last_cpu: Option<u16>,
    /// When the agent saw it become runnable and it has not been selected since.
    runnable_since: Option<Ns>,
    lat: VecDeque<u32>,
    /// (time, CPU time) samples, at most one per `SAMPLE_EVERY`, over the last
    /// `SHARE_WINDOW` and one more, for the share figure.
    samples: VecDeque<(Ns, u64)>,
    /// The earliest wake among the BPF events about it since the last pass (its BPF
    /// time), for the wake-to-run latency, and the CPU the kernel woke it on.
    woke_at: Option<Ns>,
    woke_on: Option<u16>,
    /// The grant its real-time kernel state draws on now (None: not real-time).
    rt: Option<RtBy>,
    /// What is left of that grant's budget for it, ns (`Ns::MAX`: no budget applies).
    rt_left: Ns,
    /// The grant it was real-time under at some time since its CPU time was last read:
    /// what the CPU used meanwhile is charged to (conservatively, all of it).
    rt_since_read: Option<RtBy>,
    /// The scheduler whose decision it ran under since its CPU time was last read (for
    /// the schedulers' measured shares).
    ran_under: Option<SchedId>,
    /// Real-time CPU used since it last blocked: its warp episode (BVT §2.2).
    episode_rt: Ns,
    /// The share its reservations hold, ppm of one CPU (counted against
    /// `max_rt_per_uid` for a non-root owner, and shown as granted).
    reserved_ppm: u64,
    /// What its schedulers said about it lately (their logs: a reservation removed, a
    /// warp limit reached), newest last, for `ctl tasks`.
    notes: VecDeque<String>,
}

/// A managed process: the group of its threads (docs/agent.md, "Unit of scheduling").
struct Group {
    pid: i32,
    uid: u32,
    /// Its threads' tasks, by tid.
    threads: BTreeMap<i32, u32>,
    /// The parameters it joined with or was given (each thread gets them, the weight
    /// divided; a thread's own override them).
    params: BTreeMap<String, i64>,
    /// The scheduler it joined: the threads it creates join it too.
    sched: SchedId,
    /// Its process CPU clock, and a timer on it: the bound on an armed thread's unseen
    /// run (quiet wakes) and the end of a real-time budget (crate::budget), whichever
    /// comes first, for all its threads (Linux keeps CPU timers on another process's
    /// threads to that process).
    clock: CpuClock,
    timer: Option<kernel::CpuTimer>,
    /// The CPU-clock value `timer` is set to fire at (0: disarmed).
    timer_at: u64,
    /// A thread of it was read since the timer was last set (its CPU time moved on: the
    /// timer is set again from the process clock at the next `enforce`).
    read_since_timer: bool,
    /// What the timer was last set for: quiet wakes, and the least budget then left.
    timer_quiet: bool,
    timer_left: Ns,
    /// The agent has stopped the process (SIGSTOP) and not yet continued it.
    stopped: bool,
    rescanned: Ns,
    /// How often it is re-listed (`RESCAN` polling, `RESCAN_BPF` with BPF events).
    rescan_every: Ns,
    /// CPU time of its threads that exited while managed.
    gone_cpu_ns: u64,
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

/// Where the dispatcher learns of blocks and wakes (docs/agent.md, "Event source").
pub enum Source {
    /// Polling /proc/TID/wchan (or stat) at passes that come every 1–`PARKED_EVERY` ticks.
    Poll,
    /// BPF events on the scheduler tracepoints; a pass only when something needs deciding.
    Bpf(Box<crate::bpf::EventSource>),
}

/// The CPU time a scheduler's decisions gave its tasks (for its measured share).
#[derive(Default)]
struct SchedUse {
    total: u64,
    /// (time, total) samples, as `Managed::samples`.
    samples: VecDeque<(Ns, u64)>,
}

/// The agent's state, guarded by one mutex shared by the broker and the dispatcher.
pub struct Agent {
    pub cfg: Config,
    /// The dispatcher, with the scheduler events it was asked for and the CPUs waiting
    /// for a decision (vassal_core::driver; `pass` is the agent's side of it).
    drv: Driver,
    ncpus: u16,
    /// Managed threads by tid, and their tasks (keyed by task id).
    by_tid: BTreeMap<i32, TaskId>,
    tasks: BTreeMap<u32, Managed>,
    /// Managed processes by pid.
    groups: BTreeMap<i32, Group>,
    slice_end: Vec<Option<Ns>>,
    ledger: Ledger,
    pub next_tick: Ns,
    // ----- what a pass and `enforce` visit (so their cost does not grow with idle
    // threads): each a set of task ids -----
    /// Tasks BPF events named since the last pass (or whose process's CPU-clock timer
    /// fired).
    evented: BTreeSet<u32>,
    /// Tasks whose decision, runnability or parameters changed since the last `enforce`.
    dirty: BTreeSet<u32>,
    /// Every task must be visited at the next `enforce` (a scheduler registered,
    /// unregistered, loaded, unloaded or ejected).
    all_dirty: bool,
    /// Tasks whose kernel state depends on time: real-time now (a grant draws on a
    /// budget), armed, held back by a spent budget, or owned by a loaded scheduler (whose
    /// exclusivity and share may change at any of its events).
    watch: BTreeSet<u32>,
    /// Tasks whose kernel state could not be applied yet (retried at the next tick).
    unsettled: BTreeSet<u32>,
    /// Runnable tasks the agent parked or held: while there is one, every block wakes the
    /// dispatcher (the CPU it frees may be theirs); what the BPF map `waiting` last said.
    waiting: BTreeSet<u32>,
    waiting_told: Option<bool>,
    /// Tasks its threads' BPF map could not take (polled, as with `events = "poll"`).
    unwatched: BTreeSet<u32>,
    /// Processes by when they are re-listed next.
    rescans: BTreeSet<(Ns, i32)>,
    /// No task is selected, armed or waiting for its kernel state: the passes need
    /// not come every tick when polling (see `next_deadline`).
    quiet: bool,
    /// Passes come every `backoff` ticks (polling): 1 after a pass that saw a change (a
    /// wake, a block, a scheduler event, a decision that changes what runs on a CPU),
    /// doubled after each pass that saw none, up to `PARKED_EVERY`.
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
    /// `vassal agent --trace FILE`: the decisions as a Chrome or Perfetto trace
    /// (crate::decisions).
    chrome: Option<crate::decisions::DecisionTrace>,
    /// Loaded policy modules (issue 8), by scheduler name: the file each came from.
    modules: BTreeMap<String, String>,
    /// Modules ejected (the last [`MAX_EJECTIONS`]), oldest first, for `status`.
    ejections: VecDeque<EjectionRow>,
    /// The event source (polling until `set_source`).
    source: Source,
    /// Events drained at a pass (kept to reuse its allocation).
    ev_buf: Vec<crate::bpf::Event>,
    /// BPF events seen (for `status`).
    pub bpf_events: u64,
    /// Wakes the BPF programs missed, told when the thread was seen running (crate::bpf)
    /// or found runnable by an audit (pass.rs, `audit`).
    pub missed_wakes: u64,
    /// The next audit (BPF events), the task id it starts from, and whether some thread
    /// is one it would read (as of the last pass).
    next_audit: Ns,
    audit_from: u32,
    audit_wanted: bool,
    /// Runs of armed or fair-class sleeping threads replayed (`replay_run`), sleeps of
    /// running ones (`replay_sleep`), and CPU-clock bounds that fired
    /// (`cpu_timers_fired`), for `status`.
    pub replayed_runs: u64,
    pub replayed_sleeps: u64,
    pub bounds_fired: u64,
    /// When the last pass ran.
    last_pass: Ns,
    /// Real-time budgets (crate::budget): per loaded scheduler, per non-root uid.
    sched_budgets: BTreeMap<u32, Bucket>,
    uid_budgets: BTreeMap<u32, Bucket>,
    /// The earliest time a budget that holds a task back refills enough (a pass then
    /// gives it back its kernel state).
    throttled_until: Option<Ns>,
    /// Tasks the agent took off every CPU (`Dispatcher::set_loaded(false)`) because the
    /// reserved or hard-time scheduler that owns them has used its declared share
    /// (enforcement.rs, "Shares"), until when its budget refills.
    unloaded: BTreeMap<u32, Ns>,
    /// CPU time given by each scheduler's decisions, for `ctl hierarchy`.
    sched_use: BTreeMap<u32, SchedUse>,
    /// The guardian's pid: never managed, like the agent itself.
    guardian_pid: i32,
    /// The kernel refused RLIMIT_RTTIME on another user's process (`set_backstop`).
    pub backstop_refused: bool,
}

/// How many ejections `status` remembers.
pub const MAX_EJECTIONS: usize = 64;

/// What went wrong setting the agent up.
pub type SetupError = String;

/// Keeps `(now, value)` in `samples` if the last sample is `SAMPLE_EVERY` old, dropping
/// those older than one window before the newest.
fn sample(samples: &mut VecDeque<(Ns, u64)>, now: Ns, value: u64) {
    if samples.back().is_none_or(|&(t, _)| now >= t + SAMPLE_EVERY) {
        samples.push_back((now, value));
    }
    while samples.len() > 2 && samples[1].0 + SHARE_WINDOW <= now {
        samples.pop_front();
    }
}

/// The share of one CPU that `value` grew by over the last window: from the sample
/// that starts it to `(now, value)`, a value read at `now`. (Pairing a value with the
/// time it was read is what keeps a busy loop at 100%: the figure before issue 17 divided
/// the latest CPU time by the time of the latest 100 ms sample, up to 100 ms older.)
fn share(samples: &VecDeque<(Ns, u64)>, now: Ns, value: u64) -> f64 {
    let Some(&(t0, v0)) = samples.iter().find(|&&(t, _)| t + SHARE_WINDOW >= now).or(samples.back()) else {
        return 0.0;
    };
    if now <= t0 {
        return 0.0;
    }
    value.saturating_sub(v0) as f64 / (now - t0) as f64
}

impl Agent {
    pub fn new(cfg: Config, ledger: Ledger, now: Ns) -> Result<Agent, SetupError> {
        let chrome = match &cfg.trace {
            Some(path) => Some(
                crate::decisions::DecisionTrace::create(path, now, kernel::online_cpus())
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
            by_tid: BTreeMap::new(),
            tasks: BTreeMap::new(),
            groups: BTreeMap::new(),
            slice_end: vec![None; ncpus as usize],
            ledger,
            next_tick: now,
            evented: BTreeSet::new(),
            dirty: BTreeSet::new(),
            all_dirty: false,
            watch: BTreeSet::new(),
            unsettled: BTreeSet::new(),
            waiting: BTreeSet::new(),
            waiting_told: None,
            unwatched: BTreeSet::new(),
            rescans: BTreeSet::new(),
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
            missed_wakes: 0,
            next_audit: now,
            audit_from: 0,
            audit_wanted: false,
            replayed_runs: 0,
            replayed_sleeps: 0,
            bounds_fired: 0,
            last_pass: now,
            sched_budgets: BTreeMap::new(),
            uid_budgets: BTreeMap::new(),
            throttled_until: None,
            unloaded: BTreeMap::new(),
            sched_use: BTreeMap::new(),
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
    /// Managed processes.
    pub fn managed(&self) -> usize {
        self.groups.len()
    }
    /// Managed threads.
    pub fn managed_threads(&self) -> usize {
        self.tasks.len()
    }
    /// The task of a managed thread.
    pub fn task_of(&self, tid: i32) -> Option<TaskId> {
        self.by_tid.get(&tid).copied()
    }
    pub fn lookup(&self, name: &str) -> Option<SchedId> {
        self.drv.disp.lookup(name)
    }
    /// A parameter's current value: thread `tid`'s own if it has one, else its process's.
    pub fn param(&self, pid: i32, tid: Option<i32>, name: &str) -> Option<i64> {
        let own = tid.and_then(|t| self.by_tid.get(&t)).and_then(|t| self.tasks.get(&t.0)).and_then(|m| m.own.get(name).copied());
        own.or_else(|| self.groups.get(&pid)?.params.get(name).copied())
    }
    /// The uid a managed process was joined for.
    pub fn uid_of_task(&self, pid: i32) -> Option<u32> {
        self.groups.get(&pid).map(|g| g.uid)
    }

    /// Marks a task for the next `enforce`.
    fn touch(&mut self, id: u32) {
        self.dirty.insert(id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_share_pairs_each_cpu_time_with_when_it_was_read() {
        // A busy loop: its CPU time grows as fast as the clock. Samples every 100 ms; a
        // figure asked 90 ms after the last sample, with the CPU time read then, is 1.
        let mut s = VecDeque::new();
        for k in 0..=20u64 {
            sample(&mut s, k * 100 * MS, k * 100 * MS);
        }
        assert!(s.len() <= 12, "{} samples kept", s.len());
        let now = 2_090 * MS;
        assert!((share(&s, now, now) - 1.0).abs() < 1e-9, "{}", share(&s, now, now));
        // The old figure: the newest CPU time over the newest sample's time.
        let (t0, c0) = s[0];
        let old = (now - c0) as f64 / (s.back().unwrap().0 - t0) as f64;
        assert!(old > 1.08, "the old pairing gave {old}");
        // Half a CPU over the window.
        let mut h = VecDeque::new();
        for k in 0..=20u64 {
            sample(&mut h, k * 100 * MS, k * 50 * MS);
        }
        assert!((share(&h, 2_000 * MS, 1_000 * MS) - 0.5).abs() < 1e-9);
        assert_eq!(share(&VecDeque::new(), 5, 5), 0.0);
    }
}
