//! The validated scenario: what the simulator runs. `scenario` builds it from TOML
//! (with file/line errors); tests and benchmarks may also build it directly.

use std::collections::BTreeMap;

use vassal_core::{CpuSet, Ns, TaskParams, Usage};

/// A random (or constant) duration. Sampled with the task's own seeded RNG.
#[derive(Clone, Debug, PartialEq)]
pub enum Dist {
    Const(Ns),
    /// Uniform in [lo, hi].
    Uniform(Ns, Ns),
    /// Exponential with this mean.
    Exp(Ns),
    /// Normal(mean, sd), clipped at 0.
    Normal(Ns, Ns),
}

/// How the machine's clock delivers timers (paper 000 §2 and BVT footnote 2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClockMode {
    /// A periodic tick at HZ: slice expiries, scheduler events and timer waits happen
    /// only at tick boundaries (like NT's HAL).
    Tick,
    /// One-shot precise timers.
    OneShot,
}

/// Unscheduled time (interrupts, DPCs): on each CPU, gaps drawn from `interval`, each
/// stealing `duration` from whatever runs; and as many further independent sources as
/// `also` lists (e.g. paper 000's rare ~0.5 ms stretches beside the frequent short ones).
#[derive(Clone, Debug, PartialEq)]
pub struct Unscheduled {
    pub interval: Dist,
    pub duration: Dist,
    pub also: Vec<UnscheduledSource>,
}

/// One further source of unscheduled time: gaps from `interval`, stretches from `duration`.
#[derive(Clone, Debug, PartialEq)]
pub struct UnscheduledSource {
    pub interval: Dist,
    pub duration: Dist,
}

impl Unscheduled {
    /// Source `k`'s (interval, duration): 0 is the first, then `also` in order.
    pub fn source(&self, k: usize) -> Option<(&Dist, &Dist)> {
        match k {
            0 => Some((&self.interval, &self.duration)),
            _ => self.also.get(k - 1).map(|s| (&s.interval, &s.duration)),
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Machine {
    pub cpus: u16,
    pub clock: ClockMode,
    /// Ticks per second; 0 = no ticks (only with one-shot timers).
    pub hz: u32,
    /// The tick's period when it is not 1 s / `hz` (a clock whose "1 ms" is really
    /// 1,003,200 ns, as NT's x86 HAL's: experiments/vassal/table2-mmtimer.toml); `None`:
    /// 1 s / `hz`.
    pub tick: Option<Ns>,
    pub switch_cost: Ns,
    pub migration_cost: Ns,
    /// How long after its time a task wakes from a timed wait of its own (any voluntary
    /// sleep or timer: the machine's timer interrupt and wake-up path; 0 = at once).
    pub wake_latency: Ns,
    pub unscheduled: Option<Unscheduled>,
    /// Least share left to best-effort work (None: the hierarchy's default).
    pub min_best_effort_ppm: Option<u64>,
}

/// A policy by kind name with its parameters (interpreted by vassal-policies).
#[derive(Clone, Debug, PartialEq)]
pub struct PolicySpec {
    pub kind: String,
    pub params: BTreeMap<String, vassal_policies::ParamValue>,
}

/// A scheduler in the hierarchy besides the default.
#[derive(Clone, Debug, PartialEq)]
pub struct SchedulerSpec {
    pub name: String,
    pub policy: PolicySpec,
    pub usage: Usage,
    /// Registered at this time (0 = at start), on top of those registered before it
    /// (schedulers listed earlier in the file sit higher when loaded at the same time).
    pub load_at: Ns,
    pub unload_at: Option<Ns>,
}

/// A message a scripted task sends to a scheduler.
#[derive(Clone, Debug, PartialEq)]
pub struct SendSpec {
    pub to: String,
    pub request: vassal_core::Request,
    /// The task the request is about (`reserve(pid, ...)`); None: the sender itself.
    pub task: Option<String>,
}

/// One step of a scripted task.
#[derive(Clone, Debug, PartialEq)]
pub enum Phase {
    Run(Dist),
    /// Voluntary sleep.
    Sleep(Dist),
    /// Involuntary block (e.g. a page fault) of this length.
    Fault(Dist),
    /// Sleep until the next expiry of a periodic timer with this period (first expiry one
    /// period after the phase is first reached). Quantised to ticks under the tick clock.
    Timer(Ns),
    Yield,
    Send(SendSpec),
    Join(String),
    Leave,
    /// Go!'s block(hand_off): sleep for the duration and hand the CPU to the named task.
    HandOff {
        to: String,
        sleep: Dist,
    },
    /// A long wait (paper 004 §2: "blocked for a long I/O operation (for example, writing
    /// to an interactive terminal) is said to be waiting"), voluntary, of this length.
    /// Every other block is a short one ("sleeping") to the swap scheduler.
    Terminal(Dist),
    /// The phases before this one run this many times in all (≥ 1), then the script goes
    /// on with the next phase.
    Times(u64),
    /// Run until this much real time has passed since the phase began, however much CPU
    /// that took (rt-app's `runtime` event: a busy loop that watches the clock). Time
    /// spent preempted counts.
    RunWall(Dist),
    /// rt-app's `timer` event on timer number `timer` (rt-app's timer refs): the task's
    /// own timer, or with `shared` one timer of the scenario that every task naming it
    /// advances (rt-app's timers not named `unique…`). The timer's next expiry is its
    /// previous one plus `period` (the first one period after the task's start, as
    /// Debian's rt-app 1.0 counts it from the thread's start and `delay`; for a shared
    /// timer, the start of the first task to use it); the task sleeps until then. If that is already past it
    /// does not sleep; in `relative` mode the timer then restarts from now, in absolute
    /// mode it keeps its schedule (and later expiries may be past too). Quantised to
    /// ticks under the tick clock.
    RtTimer {
        period: Ns,
        relative: bool,
        timer: usize,
        shared: bool,
    },
    /// A synchronisation or self-scheduling step (rt-app's mutexes, condition variables,
    /// barriers, suspend/resume, per-phase policy and affinity). It is carried out while
    /// the task holds a CPU: a task that reaches one while waking first gets dispatched.
    Sync(SyncOp),
    /// A disk transfer of this length on the named drive ([`crate::disk`]): the task
    /// queues behind the drive's other requests (one is served at a time) and sleeps
    /// until its own ends; a short I/O to the swap scheduler, locked in memory while its
    /// transfer is under way (V7 `physio`).
    Io {
        disk: String,
        time: Dist,
    },
    /// Change the task's image by this many KB (paper 004 §2's expanding process; V7
    /// `sbrk`/`expand()`): shrinking frees its tail, growing needs a hole of the whole new
    /// size or the task swaps itself out ([`crate::swap::Swapper::grow`]). Carried out on
    /// a CPU. Without a `[memory]` section it does nothing. `once`: only the first time
    /// the script reaches it (an area V7 `malloc` takes with `sbrk` and never gives back),
    /// later passes go straight on.
    Grow {
        kb: i64,
        once: bool,
    },
}

/// What a [`Phase::Sync`] does. Names are the scenario's: every task naming the same
/// mutex (condition variable, barrier) shares it.
#[derive(Clone, Debug, PartialEq)]
pub enum SyncOp {
    /// Take the mutex, waiting (blocked) while another task holds it; waiters get it in
    /// order of importance (see [`SchedSel`]), first come first served among equals.
    /// With `inherit` (priority inheritance), a holder runs with the scheduling of its
    /// most important waiter while that is more important than its own.
    Lock { mutex: String, inherit: bool },
    /// Release it: the first waiter takes it and is woken.
    Unlock(String),
    /// pthread_cond_wait: release `mutex`, block on `cond`; once woken, take `mutex`
    /// again (waiting for it if it is held) before going on.
    Wait { cond: String, mutex: String },
    /// Wake the longest waiter on `cond`, if any (a signal nobody waits for is lost).
    Signal(String),
    /// Wake every waiter on `cond`.
    Broadcast(String),
    /// Signal `cond`, then wait on it with `mutex` (rt-app's `sync`).
    SignalWait { cond: String, mutex: String },
    /// Block until the condition `cond` is broadcast (rt-app's `suspend`).
    Suspend(String),
    /// Broadcast `cond` (rt-app's `resume`).
    Resume(String),
    /// rt-app's barrier with `users` arrivals: the last to arrive wakes the others.
    Barrier { name: String, users: u64 },
    /// Set the task's own affinity.
    Affinity(CpuSet),
    /// Change the task's own scheduling: join `scheduler` (None: the default) and set
    /// its parameters.
    Sched(SchedSel),
    /// States the scheduling the task was created with (its `scheduler` and `params`),
    /// as the parameters to set there, for priority inheritance to restore. Takes no CPU
    /// and changes nothing; only its first pass counts.
    Init(SchedSel),
}

/// A task's scheduling: its scheduler and the parameters it sets there. For priority
/// inheritance, one is more important than another when its scheduler sits higher in
/// the hierarchy; in the same scheduler, when its `priority` parameter is larger or its
/// `deadline` parameter shorter (no other parameter orders tasks).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SchedSel {
    pub scheduler: Option<String>,
    pub params: Vec<(String, i64)>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Behaviour {
    /// Runs forever, or for `work` in all and then exits.
    Cpu { work: Option<Ns> },
    /// A job every `period` (first at `offset`), each needing `exec`, due `deadline` after
    /// release. `jobs`: how many (None: forever). A job released while the previous one is
    /// unfinished queues behind it.
    Periodic { period: Ns, offset: Ns, exec: Dist, deadline: Ns, jobs: Option<u64> },
    /// A media player paced by its previous frame (mpeg_play, BVT paper 001 §4): it decodes
    /// a frame (`exec`), and shows it at its ideal time — the previous frame's display
    /// time plus `period` (the first at start + offset + period) — or at once if decoding
    /// ran past it. A frame shown more than `late_after` after its ideal time is late. A
    /// late player slows down (the next ideal time follows the late display) rather than
    /// catching up. Frames count as jobs: met = on time, missed = late.
    /// `read`: before decoding each frame it reads its data, a transfer of this length on
    /// the named drive ([`crate::disk`]), queued behind the drive's other requests.
    Player { period: Ns, offset: Ns, exec: Dist, late_after: Ns, read: Option<(String, Dist)> },
    /// Bursts of CPU separated by think time (blocked, voluntary); response = burst
    /// completion − burst start.
    Interactive { burst: Dist, think: Dist },
    /// Alternates running and sleeping; with `disk`, each sleep is a transfer of that
    /// length on the named drive ([`crate::disk`]), queued behind its other requests.
    Io { run: Dist, sleep: Dist, voluntary: bool, disk: Option<String> },
    /// Phases in order; `repeat` loops them, else the task exits after the last.
    Script { phases: Vec<Phase>, repeat: bool },
    /// An interrupt handler thread: blocked until an interrupt on `vector` is delivered,
    /// then runs `work` per interrupt (Go! §4, BVT §2.3).
    Handler { vector: u32, work: Dist },
    /// A kind the scenario language does not know, run by a behaviour registered with
    /// the simulation ([`crate::behave::Registry`]; e.g. vassal-lab's `randres`).
    Other(OtherKind),
}

/// A behaviour table of a kind the scenario language does not know: its keys as written,
/// with their positions, for the registered factory to validate.
#[derive(Clone, Debug, PartialEq)]
pub struct OtherKind {
    pub kind: String,
    /// The task it belongs to.
    pub task: String,
    /// The scenario file, and the 1-based line and column of the `kind` value.
    pub file: String,
    pub at: (usize, usize),
    /// Its other keys in file order.
    pub params: Vec<(String, OtherParam)>,
}

/// One key of an [`OtherKind`] table.
#[derive(Clone, Debug, PartialEq)]
pub struct OtherParam {
    /// None for a built-in behaviour key (the registered kind cannot have it).
    pub value: Option<toml::Value>,
    /// 1-based line and column of the value.
    pub at: (usize, usize),
}

#[derive(Clone, Debug, PartialEq)]
pub struct TaskSpec {
    pub name: String,
    pub start: Ns,
    /// Joins this scheduler at start (None: stays with the default).
    pub scheduler: Option<String>,
    pub affinity: CpuSet,
    pub params: TaskParams,
    /// Runs as this uid (for ownership checks in messages); 0 = root.
    pub uid: u32,
    pub behaviour: Behaviour,
    /// At this time the task turns into an infinite loop (a runaway fault).
    pub loop_at: Option<Ns>,
}

/// An interrupt source (Go!'s idisp): delivers to the handler task attached to `vector`.
#[derive(Clone, Debug, PartialEq)]
pub struct InterruptSpec {
    pub vector: u32,
    /// Gaps between interrupts.
    pub every: Dist,
    /// Start time of the first gap.
    pub start: Ns,
    /// Flag deliveries for low-latency dispatch (BVT's SA_BVT_WARP analogue).
    pub warp: bool,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Scenario {
    pub name: String,
    pub machine: Machine,
    /// The default (bottom) scheduler.
    pub default_name: String,
    pub default_policy: PolicySpec,
    /// Other schedulers, in file order.
    pub schedulers: Vec<SchedulerSpec>,
    pub tasks: Vec<TaskSpec>,
    pub interrupts: Vec<InterruptSpec>,
    /// Main memory and swapping (paper 004 §2); None: every image always in memory.
    pub memory: Option<Memory>,
    /// Simulated horizon.
    pub until: Ns,
    pub seed: u64,
}

impl Scenario {
    /// `tasks` on `machine` under one default scheduler named "default" running `policy`:
    /// no loaded schedulers, interrupts or memory model; seed 1.
    pub fn of_tasks(name: &str, machine: Machine, policy: PolicySpec, tasks: Vec<TaskSpec>, until: Ns) -> Self {
        Scenario {
            name: name.into(),
            machine,
            default_name: "default".into(),
            default_policy: policy,
            schedulers: vec![],
            tasks,
            interrupts: vec![],
            memory: None,
            until,
            seed: 1,
        }
    }
}

/// Main memory, the swap device and the swap scheduler's strategies, with each task's
/// image size.
#[derive(Clone, Debug, PartialEq)]
pub struct Memory {
    pub config: crate::swap::MemoryConfig,
    /// Task i's image, KB (≥ 1, at most the memory size).
    pub sizes: Vec<u64>,
    /// Task i's shared text segment (an index into `texts`), if it names one.
    pub text_of: Vec<Option<usize>>,
    /// The shared text segments' sizes, KB, in the order of their names.
    pub texts: Vec<u64>,
}
