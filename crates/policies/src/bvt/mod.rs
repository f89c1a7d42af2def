//! BVT: Borrowed-Virtual-Time scheduling (Duda & Cheriton, SOSP'99; paper 001).
//!
//! Every task has an *actual virtual time* A_i (AVT), advanced by its CPU use divided by its
//! weight, and an *effective virtual time* E_i = A_i − (warp ? W_i : 0) (EVT, §2). Each CPU
//! runs the runnable task with the earliest EVT. A latency-sensitive task *warps* back W_i
//! in virtual time to be dispatched early; it borrows from its own future allocation, so
//! long-term weighted sharing is unchanged (§2.2).
//!
//! Rules implemented here (the section is cited again at each place in the code):
//! - §2: E_i = A_i − (warp ? W_i : 0); dispatch the runnable task with the smallest E_i
//!   (ties: smaller A_i, then smaller task id).
//! - §2: running time is rounded up to whole *minimum charging units* (mcu) and a task
//!   that ran k mcu is charged k·m_i, m_i the *mcu advance* ∝ 1/w_i (§2.1, §3, §6.1).
//! - §2.1: the running task i is switched for runnable j when E_j ≤ E_i − C/w_i (C, the
//!   *context switch allowance*, is real time; C/w_i is what i's AVT advances by
//!   running C). `pick` keeps the task that was just running until that crossover and
//!   gives it a slice that ends exactly there (§3, the "context-switch countdown").
//!   (`c_weight = w` replaces C/w_i by C/w for every task: one virtual allowance, which
//!   the paper's Table 5 fits better; off by default.)
//! - §2.1: *scheduler virtual time* SVT = min A_j over runnable tasks; a task waking from a
//!   voluntary sleep gets A_i ← max(A_i, SVT). A task blocked involuntarily (page
//!   fault) keeps counting in the SVT minimum and keeps its A_i. (`svt_adjust = false`
//!   turns the adjustment off, only to show Figure 2's starvation without it.)
//! - §3/§4: a waking task is dispatched immediately if its EVT is less than the running
//!   task's (configurable: `wake_preempt = "allowance"` applies the §2.1 C-rule to
//!   wake-ups too).
//! - §2.2: warp is enabled by `Request::Warp { on }` (the system call) or by a wake-up with
//!   `Wake::warp` (SA_BVT_WARP, also §2.3 for interrupt threads). Warp time limit L_i:
//!   after running warped L_i the task is unwarped (a one-shot scheduler event gets
//!   control exactly at the limit, footnote 2) and stays unwarped until it asks again;
//!   unwarp time requirement U_i: a task that asks to warp within U_i of its last warped
//!   episode ending (limit, explicit unwarp, or block) runs unwarped until U_i has
//!   passed. Both are recorded in a debugging log ([`Bvt::log`], end of §2.2).
//! - §2.4: on a multiprocessor each CPU runs the earliest-EVT task allowed on it, with a
//!   migration penalty M added (for the comparison) to the EVT of a task that last
//!   ran on another CPU.
//! - §3/§6.3.2: a new task inherits its parent's weight, warp, L and U.
//! - §6.3.2: optional interactivity heuristic: a task's warp moves between 0 and W_int
//!   according to whether it blocks before using a quantum (C).
//!
//! Files: this one (the policy's state and callbacks), `vt.rs` (charging, the C rule, SVT),
//! `warp.rs` (§2.2's warp, limit and unwarp requirement), [`two_level`] (§2.5's two levels,
//! the `bvt2` kind), [`plan`] and [`admission`] (§6.1's configuration).
//!
//! # Representation (no floating point anywhere)
//!
//! - **Virtual time** is an `i128` in units of 1/[`VT_SCALE`] of a *virtual nanosecond*;
//!   one virtual ns is what a weight-1 task's AVT advances by running 1 ns. Warp W_i,
//!   the migration penalty M and W_int are given in virtual ns.
//! - **Weights and mcu advances** (§3: "m_i = 1/w_i, which must be an integer"; §6.1 scales
//!   reciprocals to integers): the mcu advance is the rational m_i = mcu·VT_SCALE / w_i.
//!   Each task carries the remainder `frac` ∈ [0, w_i) of its charges, so after being charged
//!   n mcu in total its AVT has advanced by exactly ⌊(n·mcu·VT_SCALE + frac₀)/w_i⌋ — never
//!   drifting. VT_SCALE = 720720 = lcm(1..16), so with the default mcu m_i is an exact
//!   integer for every weight 1..16 (and many more) and `frac` stays 0.
//! - **Partial mcu** (§2: "a thread that runs for t has this amount rounded up to the next
//!   multiple k of mcu and then charged for k"): each mcu is charged when it is *started*.
//!   A task keeps `credit`, the part of its last charged mcu it has not used yet; `on_run(ran)`
//!   first consumes credit and charges ⌈(ran − credit)/mcu⌉ more mcu. Several `on_run` calls
//!   within one dispatch therefore charge each started mcu exactly once. When the task stops
//!   running (blocks, or another task is dispatched on its CPU) the unused credit is forfeited:
//!   that is the paper's rounding up "per context switch", which charges the switch to the
//!   task that was switched out. Credit survives a preemption only when the same task is
//!   dispatched again on the same CPU at the same instant (no real context switch happened).
//! - **Overflow**: all virtual times are `i128` and never renormalised. Times are u64 ns
//!   (< 2^64), weights ≤ 2^20, warps/penalties ≤ 2^62 virtual ns, so an AVT stays below
//!   ~2^64·2^20 (plus one mcu per dispatch) and every product formed here (w_i·ΔE, C·VT_SCALE)
//!   stays below 2^110, far from 2^127. (The paper's 32-bit kernel subtracted 0x60000000 from
//!   all virtual times when SVT passed 0x70000000, §3; a 128-bit integer makes that
//!   unnecessary and keeps the ordered run queue untouched.)
//! - **Run queue**: a `BTreeSet` of (E, A, task) for runnable, not-running tasks, and a
//!   `BTreeSet` of (A, task) for the SVT minimum (runnable, running and involuntarily blocked
//!   tasks), so a decision is O(log n) (the paper's Linux version scanned an unsorted list).
//!   With affinity restrictions or a migration penalty `pick` scans from the head only until
//!   no later entry can win.
//!
//! # Semantics chosen where the paper is silent
//!
//! - The running task's AVT is only as fresh as its last `on_run`; when a task wakes, the
//!   running tasks' progress since then is estimated from the clock (the paper advances the
//!   running thread's AVT whenever the scheduler is invoked, §3) for the SVT and preemption
//!   comparisons. Nothing is charged from the estimate.
//! - A warped episode starts when warp is requested (message, warp wake-up, attach with
//!   warp on) or when a task with warp enabled wakes from a voluntary sleep; it ends at a
//!   voluntary block, an explicit unwarp, or the warp time limit. L_i bounds the wall-clock
//!   time run warped in one episode; an involuntary block does not end the episode.
//! - When the warp limit is hit, warp is disabled (§2.2: it "remains unwarped until it
//!   explicitly sets its state to warped again"); a request made within U_i is deferred,
//!   logged, and honoured by a scheduler event when U_i has passed.
//! - A new (or newly attached) task starts at A = SVT, as if it had been runnable but not
//!   dispatched (the §2.1 argument for waking tasks).
//! - Multiprocessor: a waking task preempts the CPU whose running task it beats by the most;
//!   otherwise every CPU whose running task would reach the §2.1 crossover against it
//!   before its slice ends gets a scheduler event at that time. A task that loses the
//!   decision on its CPU is offered to the other CPUs the same way (an idle one is asked to
//!   decide at once). Slices are not shortened for other reasons (e.g. a task's weight
//!   changing while it is queued).
//! - A yielding task is passed over for one decision if any other task may run there.
//! - Interactivity heuristic (§6.3.2, `interactive = true`): applies to tasks without an
//!   explicit `warp` parameter. Such a task has warp enabled and a level 0..=4 (new tasks
//!   start at 4); its warp is W_int·level/4. Each full quantum (max(C, mcu)) it runs without
//!   blocking lowers the level by one; blocking voluntarily before using a quantum since it
//!   last woke raises it by one (Linux's `counter`). Linux's third signal, "not dispatched
//!   when it unblocks", is not used. The paper's rule that a user may only lower (nice)
//!   weights and warps inherited from the parent is not enforced: messages are not checked
//!   against the sender.

pub mod admission;
pub mod plan;
pub mod two_level;
mod vt;
mod warp;

use std::collections::BTreeSet;

use vassal_core::{
    AttachInfo, Block, CpuId, Ctx, Decision, Detach, Ns, Policy, Preempt, Refusal, Reply, Request, Sender, TaskId, TaskState, Wake, MS,
};

use crate::params::Params;
use crate::task_table::{Slot, St, Tasks, Undo};

/// Virtual-time units per virtual nanosecond (lcm(1..16): exact mcu advances for small weights).
pub const VT_SCALE: i128 = 720_720;
/// The largest task weight.
pub const MAX_WEIGHT: i64 = 1 << 20;
/// The largest warp, warp limit, unwarp requirement, migration penalty or allowance, in ns.
pub const MAX_TIME: i64 = 1 << 62;
/// Levels of the §6.3.2 interactivity heuristic (warp = W_int·level/INTERACTIVE_LEVELS).
pub const INTERACTIVE_LEVELS: u32 = 4;
/// Entries kept in the debugging log; when full the oldest half is dropped (the paper's
/// implementation kept a 64k log, §3).
pub const LOG_CAP: usize = 65_536;
/// Slices longer than this are returned as "until something happens" (`None`).
const MAX_SLICE: u128 = 1 << 62;

const TOKEN_KIND_SHIFT: u32 = 32;
const TOKEN_CROSSOVER: u64 = 1;
const TOKEN_WARP_LIMIT: u64 = 2;
const TOKEN_UNWARP: u64 = 3;

fn token(kind: u64, id: u64) -> u64 {
    (kind << TOKEN_KIND_SHIFT) | id
}

/// When a waking task preempts a running one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WakePreempt {
    /// §3: "whenever a thread wakes up, we dispatch it immediately if its EVT is less than
    /// that of the running thread"; §4: "this allowance only affects time-slicing threads".
    Immediate,
    /// §2.1 applied to wake-ups as well: only if E_j ≤ E_i − C/w_i.
    Allowance,
}

/// Scheduler-wide parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BvtConfig {
    /// Minimum charging unit (§2; 10 ms in the Linux implementation, §3).
    pub mcu: Ns,
    /// Context switch allowance C, real time (§2; 200 ms in all experiments, §4).
    pub c: Ns,
    /// Migration penalty M, virtual ns (§2.4).
    pub migration_penalty: Ns,
    /// The §6.3.2 interactivity heuristic.
    pub interactive: bool,
    /// W_int, virtual ns (§6.3.2).
    pub w_int: Ns,
    pub wake_preempt: WakePreempt,
    /// §2.1: A_i ← max(A_i, SVT) when a task wakes from a voluntary sleep. `false` turns the
    /// adjustment off, only to show what it prevents (Figure 2: the sleeper would starve
    /// the others).
    pub svt_adjust: bool,
    /// The weight whose virtual time the allowance C is measured in. 0 (the default): the
    /// running task's own, §2.1's E_j ≤ E_i − C/w_i, so every task runs C real time past
    /// the others. w > 0: E_j ≤ E_i − C/w for every task, one virtual allowance for all (a
    /// task of weight w_i then runs C·w_i/w past the others). Not in the paper's text; the
    /// paper's Table 5 (a low-weight looping rt thread's 540 ms latency) fits it, see
    /// docs/repro.md.
    pub c_weight: u64,
    /// §3's implementation: `true` charges a running task one mcu at each timer interrupt
    /// (the ticks at the multiples of `mcu`) instead of rounding each run up to whole mcu
    /// (§2); the context-switch countdown then ends at a tick, and the warp time limit is
    /// detected at the first tick past it ("checking warp time limits at the granularity
    /// of mcu", §4.3). Default false.
    pub tick_charge: bool,
}

impl Default for BvtConfig {
    fn default() -> Self {
        BvtConfig {
            mcu: 10 * MS,
            c: 200 * MS,
            migration_penalty: 0,
            interactive: false,
            w_int: 200 * MS,
            wake_preempt: WakePreempt::Immediate,
            svt_adjust: true,
            c_weight: 0,
            tick_charge: false,
        }
    }
}

/// What the debugging log records (§2.2, last paragraph).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BvtLogEvent {
    /// The task ran warped for its warp time limit and was unwarped.
    WarpLimit { warped_for: Ns },
    /// The task asked to warp within its unwarp time requirement; it runs unwarped until `until`.
    WarpDenied { until: Ns },
    /// The unwarp time requirement of a deferred warp request passed; the task now runs warped.
    WarpResumed,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BvtLogEntry {
    pub at: Ns,
    pub task: TaskId,
    pub event: BvtLogEvent,
}

/// A task's BVT state, for inspection (tests, reports).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BvtTaskInfo {
    pub weight: u64,
    /// A_i in 1/VT_SCALE virtual ns.
    pub avt: i128,
    /// E_i in 1/VT_SCALE virtual ns (without any migration penalty).
    pub evt: i128,
    /// W_i in virtual ns.
    pub warp: u64,
    /// warpBack_i: the task wants to run warped.
    pub warp_back: bool,
    /// The task currently runs warped (warpBack and the L/U limits satisfied).
    pub warped: bool,
    pub warp_limit: Ns,
    pub unwarp: Ns,
    /// The §6.3.2 level, when the heuristic drives this task's warp.
    pub interactive_level: Option<u32>,
}

#[derive(Clone, Debug)]
struct Task {
    weight: u64,
    /// A_i, 1/VT_SCALE virtual ns, plus the carried remainder of charges (true AVT is
    /// avt + frac/weight).
    avt: i128,
    frac: u64,
    /// W_i in virtual ns.
    warp_ns: u64,
    /// The warp is driven by the §6.3.2 heuristic.
    heuristic: bool,
    level: u32,
    warp_limit: Ns,
    unwarp: Ns,
    warp_back: bool,
    warped: bool,
    /// Warped time left in this episode (when warp_limit > 0).
    warp_left: Ns,
    /// Running warped since (for the warp budget).
    warp_run_from: Option<Ns>,
    /// May not start a warped episode before this time (U_i).
    unwarp_until: Ns,
    /// When blocked: a voluntary sleep (§2.1: it leaves the SVT minimum; an involuntary
    /// block keeps counting in it).
    voluntary: bool,
    /// Unused part of the last charged mcu.
    credit: Ns,
    /// Time of the last dispatch or `on_run`.
    settled_at: Ns,
    /// Where and when it was last preempted (credit is kept only for an immediate re-dispatch there).
    stopped: Option<(CpuId, Ns)>,
    /// CPU time since it last woke, and quanta already counted against the heuristic level.
    burst: Ns,
    burst_steps: u64,
    limit_armed: bool,
    unwarp_armed: bool,
}

impl Task {
    /// A task of this weight, at AVT 0, without warp.
    fn new(weight: u64) -> Task {
        Task {
            weight,
            avt: 0,
            frac: 0,
            warp_ns: 0,
            heuristic: false,
            level: 0,
            warp_limit: 0,
            unwarp: 0,
            warp_back: false,
            warped: false,
            warp_left: 0,
            warp_run_from: None,
            unwarp_until: 0,
            voluntary: true,
            credit: 0,
            settled_at: 0,
            stopped: None,
            burst: 0,
            burst_steps: 0,
            limit_armed: false,
            unwarp_armed: false,
        }
    }
    fn warp_vt(&self) -> i128 {
        self.warp_ns as i128 * VT_SCALE
    }
    /// §2: E_i = A_i − (warp ? W_i : 0).
    fn evt(&self) -> i128 {
        self.avt - if self.warped { self.warp_vt() } else { 0 }
    }
}

impl Slot<Task> {
    /// Runnable, not running (`pick` leaves a picked task in the queue until `on_dispatch`).
    fn in_queue(&self) -> bool {
        matches!(self.st, St::Ready | St::Picked(_))
    }
    /// §2.1: SVT is the minimum over runnable tasks; involuntarily blocked ones keep counting.
    fn in_svt(&self) -> bool {
        !(self.st == St::Blocked && self.voluntary)
    }
}

/// Per CPU, besides the table's `running` (our task running here).
#[derive(Clone, Debug, Default)]
struct CpuState {
    /// The task just preempted here, why and when (consumed by the next `pick`).
    prev: Option<(TaskId, Preempt, Ns)>,
    /// The next decision here is a plain earliest-EVT one (a wake-up preemption or a
    /// warp-limit unwarp asked for it).
    no_favour: bool,
    /// The decision `pick` just returned: (task, slice, time).
    pending: Option<(TaskId, Option<Ns>, Ns)>,
    /// End of the running task's slice (None: unbounded or unknown).
    slice_end: Option<Ns>,
    /// A crossover event armed for this CPU.
    event_at: Option<Ns>,
}

/// A candidate for a CPU: (EVT with migration penalty, AVT, id).
type Cand = (i128, i128, TaskId);

/// The BVT policy. See the module documentation.
#[derive(Debug)]
pub struct Bvt {
    cfg: BvtConfig,
    /// The tasks, and per CPU the one running there (`picked` is unused: `CpuState::pending`).
    tasks: Tasks<Task>,
    /// Runnable, not running: (E, A, id).
    queue: BTreeSet<Cand>,
    /// Counted in SVT: (A, id).
    svt_set: BTreeSet<(i128, TaskId)>,
    /// SVT when no task counts in it (it never decreases).
    svt_floor: i128,
    cpus: Vec<CpuState>,
    log: Vec<BvtLogEntry>,
    /// Entries of `log` already handed to the mechanism by `drain_log`.
    log_drained: usize,
}

/// Builds a BVT policy from scheduler parameters: `mcu` (default 10ms, §3), `c` (default
/// 200ms, §4), `migration_penalty` (default 0, §2.4), `interactive` (default false,
/// §6.3.2), `w_int` (default = c, §6.2.2: an interactive warp that reaches SVT after running
/// C), `wake_preempt` ("immediate", the default, §3/§4; or "allowance", §2.1), `svt_adjust`
/// (default true: A_i ← max(A_i, SVT) on a voluntary wake-up, §2.1; false only to show
/// Figure 2's "without adjustment"), `c_weight` (default 0: C/w_i with the running task's
/// weight, §2.1; w > 0: C/w for every task), `charge` ("started", the default: each started
/// mcu, §2; "tick": one mcu per timer interrupt while running, §3).
pub fn build(p: &mut Params) -> Result<Bvt, String> {
    let d = BvtConfig::default();
    let mcu = p.duration("mcu", d.mcu)?;
    let c = p.duration("c", d.c)?;
    let migration_penalty = p.duration("migration_penalty", d.migration_penalty)?;
    let interactive = p.bool("interactive", d.interactive)?;
    let w_int = p.duration("w_int", c)?;
    let wake_preempt = match p.choice("wake_preempt", "immediate", &["immediate", "allowance"])?.as_str() {
        "allowance" => WakePreempt::Allowance,
        _ => WakePreempt::Immediate,
    };
    let svt_adjust = p.bool("svt_adjust", d.svt_adjust)?;
    let c_weight = p.int("c_weight", d.c_weight as i64, 0..=MAX_WEIGHT)? as u64;
    let tick_charge = p.choice("charge", "started", &["started", "tick"])? == "tick";
    Bvt::new(BvtConfig { mcu, c, migration_penalty, interactive, w_int, wake_preempt, svt_adjust, c_weight, tick_charge })
}

impl Default for Bvt {
    fn default() -> Self {
        Bvt::new(BvtConfig::default()).expect("the default configuration is valid")
    }
}

impl Bvt {
    pub fn new(cfg: BvtConfig) -> Result<Bvt, String> {
        if cfg.mcu == 0 {
            return Err("bvt parameter 'mcu': must be more than 0ns".into());
        }
        for (name, v) in [("mcu", cfg.mcu), ("c", cfg.c), ("migration_penalty", cfg.migration_penalty), ("w_int", cfg.w_int)] {
            if v > MAX_TIME as u64 {
                return Err(format!("bvt parameter '{name}': {v}ns is too large (at most 2^62 ns)"));
            }
        }
        Ok(Bvt {
            cfg,
            tasks: Tasks::default(),
            queue: BTreeSet::new(),
            svt_set: BTreeSet::new(),
            svt_floor: 0,
            cpus: Vec::new(),
            log: Vec::new(),
            log_drained: 0,
        })
    }

    pub fn config(&self) -> &BvtConfig {
        &self.cfg
    }

    /// The debugging log of warp-limit and unwarp-requirement events (§2.2).
    pub fn log(&self) -> &[BvtLogEntry] {
        &self.log
    }

    /// SVT (§2.1) as of the last accounting, in 1/VT_SCALE virtual ns.
    pub fn svt(&self) -> i128 {
        self.svt_set.first().map_or(self.svt_floor, |&(a, _)| a.max(self.svt_floor))
    }

    pub fn task_info(&self, task: TaskId) -> Option<BvtTaskInfo> {
        let t = self.task(task)?;
        Some(BvtTaskInfo {
            weight: t.weight,
            avt: t.avt,
            evt: t.evt(),
            warp: t.warp_ns,
            warp_back: t.warp_back,
            warped: t.warped,
            warp_limit: t.warp_limit,
            unwarp: t.unwarp,
            interactive_level: t.heuristic.then_some(t.level),
        })
    }

    /// Tasks attached to this scheduler.
    pub fn task_count(&self) -> usize {
        self.tasks.iter().count()
    }

    /// The runnable, not running task with the earliest EVT (ties: AVT, then id), ignoring
    /// affinity and migration penalties; O(log n). (For two-level BVT, [`two_level`].)
    pub fn queue_head(&self) -> Option<TaskId> {
        self.queue.first().map(|&(_, _, id)| id)
    }

    // ----- bookkeeping -----

    fn task(&self, id: TaskId) -> Option<&Slot<Task>> {
        self.tasks.get(id)
    }

    fn t(&self, id: TaskId) -> &Slot<Task> {
        self.task(id).expect("task is attached")
    }

    fn t_mut(&mut self, id: TaskId) -> &mut Slot<Task> {
        self.tasks.get_mut(id).expect("task is attached")
    }

    /// CPU `cpu`'s state (sized in `init`, which the dispatcher calls first).
    fn cpu(&mut self, cpu: CpuId) -> &mut CpuState {
        &mut self.cpus[cpu.0 as usize]
    }

    /// Clears CPU `cpu`'s running task if it is `id` (and its slice end with it).
    fn stop_on(&mut self, cpu: CpuId, id: TaskId) {
        if self.tasks.clear_running(cpu, id) {
            self.cpu(cpu).slice_end = None;
        }
    }

    /// Removes the task from the ordered sets (before its keys change).
    fn unlink(&mut self, id: TaskId) {
        let t = self.t(id);
        let (e, a, q, s) = (t.evt(), t.avt, t.in_queue(), t.in_svt());
        if q {
            self.queue.remove(&(e, a, id));
        }
        if s {
            // SVT never goes backwards: remember it before the minimum may leave.
            if let Some(&(min, _)) = self.svt_set.first() {
                self.svt_floor = self.svt_floor.max(min);
            }
            self.svt_set.remove(&(a, id));
        }
    }

    fn link(&mut self, id: TaskId) {
        let t = self.t(id);
        let (e, a, q, s) = (t.evt(), t.avt, t.in_queue(), t.in_svt());
        if q {
            self.queue.insert((e, a, id));
        }
        if s {
            self.svt_set.insert((a, id));
        }
    }

    /// Changes a task's state, keeping the ordered sets keyed right (touching only the
    /// sets whose key or membership changed).
    fn update(&mut self, id: TaskId, f: impl FnOnce(&mut Slot<Task>)) {
        let keys = self.keys(id);
        f(self.t_mut(id));
        self.rekey(id, keys);
    }

    /// The task's keys in the run queue and the SVT set, if it is in them.
    fn keys(&self, id: TaskId) -> (Option<Cand>, Option<(i128, TaskId)>) {
        let t = self.t(id);
        (t.in_queue().then(|| (t.evt(), t.avt, id)), t.in_svt().then_some((t.avt, id)))
    }

    /// After the task changed: moves it from its old keys `(q0, s0)` to its new ones.
    fn rekey(&mut self, id: TaskId, (q0, s0): (Option<Cand>, Option<(i128, TaskId)>)) {
        let (q1, s1) = self.keys(id);
        if q0 != q1 {
            if let Some(k) = q0 {
                self.queue.remove(&k);
            }
            if let Some(k) = q1 {
                self.queue.insert(k);
            }
        }
        if s0 != s1 {
            if let Some(k) = s0 {
                // SVT never goes backwards: remember it before the minimum may leave.
                if let Some(&(min, _)) = self.svt_set.first() {
                    self.svt_floor = self.svt_floor.max(min);
                }
                self.svt_set.remove(&k);
            }
            if let Some(k) = s1 {
                self.svt_set.insert(k);
            }
        }
    }

    fn push_log(&mut self, at: Ns, task: TaskId, event: BvtLogEvent) {
        if self.log.len() >= LOG_CAP {
            self.log.drain(..LOG_CAP / 2);
            self.log_drained = self.log_drained.saturating_sub(LOG_CAP / 2);
        }
        self.log.push(BvtLogEntry { at, task, event });
    }

    // ----- preemption -----

    /// A task became runnable (or its EVT dropped): should it preempt a running task now
    /// (§3: "we dispatch it immediately if its EVT is less than that of the running
    /// thread")? If not, each CPU it may use whose running task would reach the §2.1
    /// crossover against it before that task's slice ends gets a scheduler event then.
    fn check_preempt(&mut self, ctx: &mut Ctx, j: TaskId) {
        self.offer(ctx, j, None, true, None);
    }

    /// `may_preempt`: a wake-up (or warp) that may preempt now; otherwise (a task requeued
    /// by `pick` on `exclude`) only crossovers are armed and idle CPUs are asked to decide.
    /// The victim is the CPU whose task's EVT exceeds E_j by the most — or `prefer` (the
    /// CPU the mechanism already runs j on, `Wake::cpu`) if j may preempt there too.
    fn offer(&mut self, ctx: &mut Ctx, j: TaskId, exclude: Option<CpuId>, may_preempt: bool, prefer: Option<CpuId>) {
        let now = ctx.now();
        let Some(tj) = self.task(j) else { return };
        if !tj.in_queue() {
            return;
        }
        let mut victim: Option<(i128, CpuId)> = None;
        let mut preferred = false;
        let mut arm: Vec<(CpuId, Ns)> = Vec::new();
        for cpu in ctx.affinity(j).iter() {
            if cpu.0 >= ctx.ncpus() {
                break;
            }
            if Some(cpu) == exclude {
                continue;
            }
            let Some(i) = ctx.running_on(cpu) else {
                if may_preempt {
                    // The dispatcher offers an idle CPU a decision after a wake-up.
                    return;
                }
                let _ = ctx.resched(cpu);
                return;
            };
            let Some(ti) = self.task(i) else { continue };
            if ti.st != St::Running(cpu) {
                continue;
            }
            let ej = tj.evt() + self.penalty(ctx, j, cpu);
            let ei = ti.evt() + self.pending_charge(ti, now);
            let preempt = may_preempt
                && match self.cfg.wake_preempt {
                    WakePreempt::Immediate => ej < ei,
                    WakePreempt::Allowance => self.c_rule(ti.weight, ei, ej),
                };
            if preempt {
                if Some(cpu) == prefer {
                    preferred = true;
                }
                if below(-(ei - ej), victim.map(|(m, _)| -m)) {
                    victim = Some((ei - ej, cpu));
                }
            } else if let Some(r) = self.run_until_cross(ti, ti.credit, ti.evt(), ej, ti.settled_at) {
                arm.push((cpu, ti.settled_at.saturating_add(r)));
            }
        }
        if let Some((_, cpu)) = victim {
            let cpu = if preferred { prefer.unwrap_or(cpu) } else { cpu };
            self.cpu(cpu).no_favour = true;
            let _ = ctx.resched(cpu);
            return;
        }
        for (cpu, at) in arm {
            let cs = self.cpu(cpu);
            if below(at, cs.slice_end) && below(at, cs.event_at) {
                if at <= now {
                    let _ = ctx.resched(cpu);
                } else {
                    cs.event_at = Some(at);
                    let _ = ctx.set_event(at, token(TOKEN_CROSSOVER, cpu.0 as u64));
                }
            }
        }
    }

    /// A running task's EVT went up or its weight changed: let `pick` decide again (it keeps
    /// the task unless the §2.1 rule says otherwise).
    fn resched_if_running(&mut self, ctx: &mut Ctx, id: TaskId) {
        if let St::Running(cpu) = self.t(id).st {
            let _ = ctx.resched(cpu);
        }
    }

    /// The two best candidates for `cpu` (EVT + migration penalty, §2.4), skipping `skip`.
    fn scan(&self, ctx: &Ctx, cpu: CpuId, skip: Option<TaskId>) -> (Option<Cand>, Option<Cand>) {
        let (mut b1, mut b2): (Option<Cand>, Option<Cand>) = (None, None);
        for &(e, a, id) in &self.queue {
            // Entries come in (E, A, id) order and a penalty only adds: none later can beat b2.
            if b2.is_some_and(|s| (e, a, id) > s) {
                break;
            }
            if Some(id) == skip || !ctx.allowed(id, cpu) {
                continue;
            }
            let c = (e + self.penalty(ctx, id, cpu), a, id);
            if below(c, b1) {
                b2 = b1;
                b1 = Some(c);
            } else if below(c, b2) {
                b2 = Some(c);
            }
        }
        (b1, b2)
    }

    fn detach_task(&mut self, ctx: &mut Ctx, id: TaskId) {
        if self.task(id).is_none() {
            return;
        }
        self.cancel_limit_event(ctx, id);
        if self.t(id).unwarp_armed {
            ctx.cancel_event(token(TOKEN_UNWARP, id.0 as u64));
        }
        self.unlink(id);
        for (c, cs) in self.cpus.iter_mut().enumerate() {
            if self.tasks.clear_running(CpuId(c as u16), id) {
                cs.slice_end = None;
            }
            if cs.prev.is_some_and(|p| p.0 == id) {
                cs.prev = None;
            }
            if cs.pending.is_some_and(|p| p.0 == id) {
                cs.pending = None;
            }
        }
        self.tasks.remove(id);
    }

    /// Per-task parameters (§3: "a new thread inherits those quantities from its parent";
    /// explicit parameters of the new task override what it inherits).
    fn new_task(&self, info: &AttachInfo) -> Result<(St, Task), String> {
        let parent = info.parent.and_then(|p| self.task(p));
        let mut weight = parent.map_or(1, |p| p.weight);
        let mut warp_ns = parent.map_or(0, |p| p.warp_ns);
        let mut heuristic = parent.map_or(self.cfg.interactive, |p| p.heuristic);
        let mut warp_limit = parent.map_or(0, |p| p.warp_limit);
        let mut unwarp = parent.map_or(0, |p| p.unwarp);
        let ps = info.params;
        if let Some(&w) = ps.get("weight") {
            weight = check_weight(w)?;
        }
        let time = |key: &str| -> Result<Option<u64>, String> {
            match ps.get(key) {
                None => Ok(None),
                Some(&v) => check_time(key, v).map(Some),
            }
        };
        if let Some(w) = time("warp")? {
            warp_ns = w;
            heuristic = false;
        }
        if let Some(l) = time("warp_limit")? {
            warp_limit = l;
        }
        if let Some(u) = time("unwarp")? {
            unwarp = u;
        }
        let level = INTERACTIVE_LEVELS;
        if heuristic {
            warp_ns = self.heuristic_warp(level);
        }
        let warp_back = match ps.get("warp_on") {
            None => heuristic || warp_ns > 0,
            Some(0) => false,
            Some(1) => true,
            Some(v) => return Err(format!("bvt: task parameter 'warp_on' must be 0 or 1, got {v}")),
        };
        let st = match info.state {
            TaskState::Runnable => St::Ready,
            TaskState::Running(c) => St::Running(c),
            TaskState::Blocked => St::Blocked,
            TaskState::Dead => return Err("bvt: the task has exited".into()),
        };
        Ok((st, Task { warp_ns, heuristic, level, warp_limit, unwarp, warp_back, ..Task::new(weight) }))
    }

    fn quantum(&self) -> Ns {
        self.cfg.c.max(self.cfg.mcu)
    }
}

/// `x` is below the bound, or there is no bound.
fn below<T: PartialOrd>(x: T, bound: Option<T>) -> bool {
    match bound {
        None => true,
        Some(b) => x < b,
    }
}

fn check_weight(w: i64) -> Result<u64, String> {
    if (1..=MAX_WEIGHT).contains(&w) {
        Ok(w as u64)
    } else {
        Err(format!("bvt: 'weight' must be an integer from 1 to {MAX_WEIGHT}, got {w}"))
    }
}

fn check_time(key: &str, v: i64) -> Result<u64, String> {
    if (0..=MAX_TIME).contains(&v) {
        Ok(v as u64)
    } else if v < 0 {
        Err(format!("bvt: '{key}' must be zero or more ns, got {v}"))
    } else {
        Err(format!("bvt: '{key}' must be at most 2^62 ns, got {v}"))
    }
}

impl BvtLogEvent {
    fn describe(&self) -> String {
        match *self {
            BvtLogEvent::WarpLimit { warped_for } => {
                format!("warp time limit: unwarped after running warped {}", vassal_core::fmt_duration(warped_for))
            }
            BvtLogEvent::WarpDenied { until } => {
                format!("unwarp time requirement: warp request deferred until {}", vassal_core::fmt_duration(until))
            }
            BvtLogEvent::WarpResumed => "unwarp time requirement met: warped again".to_string(),
        }
    }
}

impl Policy for Bvt {
    /// A_i and E_i for plots (paper 001 Figures 1-4), in virtual ns.
    fn virtual_time(&self, task: TaskId) -> Option<vassal_core::VirtualTime> {
        let t = self.task_info(task)?;
        let scale = VT_SCALE as f64;
        Some(vassal_core::VirtualTime { actual: t.avt as f64 / scale, effective: t.evt as f64 / scale })
    }
    fn drain_log(&mut self, out: &mut Vec<vassal_core::PolicyLog>) {
        out.extend(self.log[self.log_drained..].iter().map(|e| vassal_core::PolicyLog {
            at: e.at,
            task: Some(e.task),
            text: e.event.describe(),
        }));
        self.log_drained = self.log.len();
    }

    fn kind(&self) -> &str {
        "bvt"
    }

    fn init(&mut self, ncpus: u16) {
        self.tasks.init(ncpus);
        self.cpus = vec![CpuState::default(); self.tasks.ncpus()];
    }

    fn on_attach(&mut self, ctx: &mut Ctx, task: TaskId, info: &AttachInfo) -> Result<(), String> {
        // Guests (owned by a higher scheduler, run by BVT as the default) are treated like
        // our own tasks.
        crate::task_index(task)?;
        let (st, mut t) = self.new_task(info)?;
        if self.task(task).is_some() {
            self.detach_task(ctx, task);
        }
        // A new task starts at SVT, as if it had been runnable but not dispatched (§2.1).
        t.avt = self.svt_now(ctx.now());
        t.settled_at = ctx.now();
        self.tasks.insert(task, st, t)?;
        self.link(task);
        if let St::Running(cpu) = st {
            self.tasks.set_running(cpu, task);
        }
        self.try_warp(ctx, task);
        self.check_preempt(ctx, task);
        Ok(())
    }

    fn on_detach(&mut self, ctx: &mut Ctx, task: TaskId, _why: Detach) {
        self.detach_task(ctx, task);
    }

    fn on_wake(&mut self, ctx: &mut Ctx, task: TaskId, wake: Wake) {
        let Some(t) = self.task(task) else { return };
        if t.st != St::Blocked {
            return;
        }
        let voluntary = t.voluntary;
        let now = ctx.now();
        // §2.1: A_i ← max(A_i, SVT) after a voluntary sleep. An involuntarily blocked task
        // counted in the SVT minimum, so SVT ≤ A_i and it keeps its A_i.
        let svt = self.svt_now(now);
        let svt_adjust = self.cfg.svt_adjust;
        self.update(task, |t| {
            if voluntary && svt_adjust && t.avt < svt {
                t.avt = svt;
                t.frac = 0;
            }
            t.st = St::Ready;
            if voluntary {
                t.burst = 0;
                t.burst_steps = 0;
            }
            // §2.2: SA_BVT_WARP — the wake-up asks for warp.
            if wake.warp {
                t.warp_back = true;
            }
        });
        // A new warped episode (warp enabled and waking from sleep, or a warp wake-up).
        if voluntary || wake.warp {
            self.try_warp(ctx, task);
        }
        self.offer(ctx, task, None, true, wake.cpu);
    }

    fn on_block(&mut self, ctx: &mut Ctx, task: TaskId, block: Block) {
        let Some(t) = self.task(task) else { return };
        let now = ctx.now();
        let was = t.st;
        let exhausted = self.settle_warp(task, now);
        self.cancel_limit_event(ctx, task);
        if let St::Running(cpu) = was {
            self.stop_on(cpu, task);
        }
        self.update(task, |t| {
            t.st = St::Blocked;
            t.voluntary = block.voluntary;
            t.warp_run_from = None;
            // The rest of the last charged mcu is forfeited at the switch (§2).
            t.credit = 0;
            t.stopped = None;
        });
        if exhausted {
            self.end_warp(ctx, task, true);
        }
        if block.voluntary {
            // §2.2: the warped episode ends; U_i is measured from the block.
            self.end_warp(ctx, task, false);
            // §6.3.2: blocking before using a quantum since waking looks interactive.
            let t = self.t(task);
            if t.heuristic && t.burst < self.quantum() && t.level < INTERACTIVE_LEVELS {
                let l = t.level + 1;
                self.set_level(task, l);
            }
        }
    }

    fn on_dispatch(&mut self, ctx: &mut Ctx, task: TaskId, cpu: CpuId) {
        if self.task(task).is_none() {
            return;
        }
        let now = ctx.now();
        // Defensive: a stale record of another task running here.
        if let Some(other) = self.tasks.running_on(cpu).filter(|&o| o != task) {
            if self.task(other).is_some_and(|t| t.st == St::Running(cpu)) {
                self.on_preempt(ctx, other, cpu, Preempt::Resched);
            }
        }
        let cs = self.cpu(cpu);
        let pending = cs.pending.take();
        // Whoever made this decision, a pending request for a plain EVT decision is moot.
        cs.no_favour = false;
        cs.slice_end = match pending {
            Some((t, slice, at)) if t == task && at == now => slice.map(|s| now.saturating_add(s)),
            _ => None,
        };
        if cs.event_at.take().is_some() {
            ctx.cancel_event(token(TOKEN_CROSSOVER, cpu.0 as u64));
        }
        self.tasks.set_running(cpu, task);
        self.update(task, |t| {
            if t.stopped != Some((cpu, now)) {
                t.credit = 0; // another task ran in between: the partial mcu is gone (§2)
            }
            t.stopped = None;
            t.st = St::Running(cpu);
            t.settled_at = now;
            t.warp_run_from = t.warped.then_some(now);
        });
        self.arm_limit_event(ctx, task);
    }

    fn on_preempt(&mut self, ctx: &mut Ctx, task: TaskId, cpu: CpuId, why: Preempt) {
        if self.task(task).is_none() {
            return;
        }
        let now = ctx.now();
        let exhausted = self.settle_warp(task, now);
        self.cancel_limit_event(ctx, task);
        self.stop_on(cpu, task);
        self.cpu(cpu).prev = Some((task, why, now));
        self.update(task, |t| {
            t.st = St::Ready;
            t.warp_run_from = None;
            t.stopped = Some((cpu, now));
        });
        if exhausted {
            self.end_warp(ctx, task, true);
            self.cpu(cpu).no_favour = true;
        }
    }

    fn on_run(&mut self, ctx: &mut Ctx, task: TaskId, cpu: CpuId, ran: Ns) {
        let Some(t) = self.task(task) else { return };
        let now = ctx.now();
        // §2/§2.1: charge k·m_i for the k mcu started (§3: for the k ticks run through).
        let (da, frac, credit) = if self.cfg.tick_charge {
            let (da, frac) = self.charge_ticks(t.weight, t.frac, now.saturating_sub(ran), now);
            (da, frac, 0)
        } else {
            self.charge_for(t.weight, t.frac, t.credit, ran)
        };
        self.update(task, |t| {
            t.avt += da;
            t.frac = frac;
            t.credit = credit;
            t.settled_at = now;
            t.burst = t.burst.saturating_add(ran);
        });
        // §6.3.2: each full quantum run without blocking looks batch-like.
        let t = self.t(task);
        if t.heuristic {
            let steps = t.burst / self.quantum();
            if steps > t.burst_steps {
                let drop = (steps - t.burst_steps).min(INTERACTIVE_LEVELS as u64) as u32;
                let level = t.level.saturating_sub(drop);
                self.t_mut(task).burst_steps = steps;
                self.set_level(task, level);
            }
        }
        // §2.2: the warp time limit, if the event has not caught it yet.
        if self.settle_warp(task, now) {
            self.end_warp(ctx, task, true);
            if self.t(task).st == St::Running(cpu) {
                self.cpu(cpu).no_favour = true;
                let _ = ctx.resched(cpu);
            }
        }
    }

    fn on_event(&mut self, ctx: &mut Ctx, tok: u64) {
        let kind = tok >> TOKEN_KIND_SHIFT;
        let id = tok & ((1u64 << TOKEN_KIND_SHIFT) - 1);
        let now = ctx.now();
        match kind {
            TOKEN_CROSSOVER => {
                // §3: the context-switch countdown of the running task reached zero.
                let cpu = CpuId(id as u16);
                self.cpu(cpu).event_at = None;
                let _ = ctx.resched(cpu);
            }
            TOKEN_WARP_LIMIT => {
                let task = TaskId(id as u32);
                let Some(t) = self.task(task) else { return };
                let St::Running(cpu) = t.st else { return };
                self.t_mut(task).limit_armed = false;
                if self.settle_warp(task, now) {
                    // §2.2: "unwarped by the scheduler, which dispatches the new lowest EVT thread".
                    self.end_warp(ctx, task, true);
                    self.cpu(cpu).no_favour = true;
                    let _ = ctx.resched(cpu);
                } else {
                    self.arm_limit_event(ctx, task);
                }
            }
            TOKEN_UNWARP => {
                let task = TaskId(id as u32);
                let Some(t) = self.task(task) else { return };
                if !t.unwarp_armed {
                    return;
                }
                self.t_mut(task).unwarp_armed = false;
                let t = self.t(task);
                if !t.warp_back || t.warped || t.st == St::Blocked || now < t.unwarp_until {
                    return;
                }
                // §2.2: U_i has passed; the deferred warp request is honoured.
                self.try_warp(ctx, task);
                if self.t(task).warped {
                    self.push_log(now, task, BvtLogEvent::WarpResumed);
                    self.check_preempt(ctx, task);
                }
            }
            _ => {}
        }
    }

    fn on_message(&mut self, ctx: &mut Ctx, _from: Sender, task: TaskId, req: &Request) -> Reply {
        if self.task(task).is_none() {
            return Reply::refused(format!("{task} is not scheduled by bvt"));
        }
        match req {
            Request::Warp { on: true } => {
                // §2.2: warpBack set by a system call.
                self.t_mut(task).warp_back = true;
                self.try_warp(ctx, task);
                self.check_preempt(ctx, task);
                Reply::Ok
            }
            Request::Warp { on: false } => {
                if self.warp_off(ctx, task) {
                    self.resched_if_running(ctx, task);
                }
                Reply::Ok
            }
            Request::Param { name, value } => {
                let now = ctx.now();
                match name.as_str() {
                    "weight" => {
                        let w = match check_weight(*value) {
                            Ok(w) => w,
                            Err(e) => return Reply::Refused(e),
                        };
                        self.update(task, |t| {
                            // Rescale the carried remainder to the new denominator.
                            t.frac = (t.frac as u128 * w as u128 / t.weight as u128) as u64;
                            t.weight = w;
                        });
                        self.resched_if_running(ctx, task);
                        Reply::Ok
                    }
                    "warp" | "warp_limit" | "unwarp" => {
                        let v = match check_time(name, *value) {
                            Ok(v) => v,
                            Err(e) => return Reply::Refused(e),
                        };
                        match name.as_str() {
                            "warp" => {
                                let was = self.t(task).warp_ns;
                                self.update(task, |t| {
                                    t.warp_ns = v;
                                    t.heuristic = false;
                                });
                                if was == 0 && v > 0 {
                                    // As at creation (`new_task`): a task given a warp
                                    // wants to run warped (§2.2's warpBack), at once and
                                    // at each wake; its own Warp messages rule after.
                                    self.t_mut(task).warp_back = true;
                                } else if v == 0 {
                                    // No warp left to run with: the episode ends.
                                    self.warp_off(ctx, task);
                                }
                                self.try_warp(ctx, task);
                            }
                            "warp_limit" => {
                                self.settle_warp(task, now);
                                let t = self.t_mut(task);
                                t.warp_limit = v;
                                t.warp_left = v;
                                self.cancel_limit_event(ctx, task);
                                self.arm_limit_event(ctx, task);
                            }
                            _ => self.t_mut(task).unwarp = v,
                        }
                        self.resched_if_running(ctx, task);
                        self.check_preempt(ctx, task);
                        Reply::Ok
                    }
                    _ => Reply::refused(format!("bvt has no task parameter '{name}'; expected weight, warp, warp_limit or unwarp")),
                }
            }
            other => Reply::refused(format!("bvt does not understand {other:?}")),
        }
    }

    fn pick(&mut self, ctx: &mut Ctx, cpu: CpuId) -> Option<Decision> {
        let now = ctx.now();
        let cs = self.cpu(cpu);
        if cs.event_at.take().is_some() {
            ctx.cancel_event(token(TOKEN_CROSSOVER, cpu.0 as u64));
        }
        cs.pending = None;
        let prev = cs.prev.take().filter(|p| p.2 == now);
        let no_favour = std::mem::take(&mut cs.no_favour);
        let usable = |s: &Self, id: TaskId| s.task(id).is_some_and(|t| t.in_queue()) && ctx.allowed(id, cpu);
        // A yielding task is passed over if anyone else can run here.
        let skip = prev.filter(|p| p.1 == Preempt::Yield).map(|p| p.0).filter(|&id| usable(self, id));
        // §2.1: the task that was running here keeps the CPU until E_j ≤ E_i − C/w_i.
        let favoured = prev.filter(|p| p.1 != Preempt::Yield && !no_favour).map(|p| p.0).filter(|&id| usable(self, id));
        let (b1, b2) = self.scan(ctx, cpu, skip);
        let cand = |s: &Self, id: TaskId| {
            let t = s.t(id);
            (t.evt() + s.penalty(ctx, id, cpu), t.avt, id)
        };
        let (chosen, rival) = match (b1, favoured) {
            (None, _) => match skip {
                Some(id) => (cand(self, id), None),
                None => return None,
            },
            (Some(b1), Some(p)) if p != b1.2 => {
                let pc = cand(self, p);
                if self.c_rule(self.t(p).weight, pc.0, b1.0) {
                    (b1, b2)
                } else {
                    (pc, Some(b1))
                }
            }
            (Some(b1), _) => (b1, b2),
        };
        let id = chosen.2;
        let t = self.t(id);
        let credit = Self::effective_credit(t, cpu, now);
        // §3: the countdown until the next-best task would take over.
        let slice = match rival {
            None => None,
            Some(r) => match self.run_until_cross(t, credit, t.evt(), r.0, now) {
                Some(0) if self.cfg.tick_charge => Some(self.to_tick(now, 1)),
                Some(0) => Some(if credit > 0 { credit } else { self.cfg.mcu }),
                s => s,
            },
        };
        self.cpu(cpu).pending = Some((id, slice, now));
        self.t_mut(id).st = St::Picked(cpu);
        // The task that was running here and lost stays runnable: other CPUs' running
        // tasks must now also give way to it at their crossover (§2.4), and an idle CPU
        // may take it at once.
        if let Some(p) = prev.map(|p| p.0).filter(|&p| p != id && usable(self, p)) {
            self.offer(ctx, p, Some(cpu), false, None);
        }
        Some(Decision { task: id, slice })
    }

    fn on_refused(&mut self, ctx: &mut Ctx, cpu: CpuId, decision: Decision, why: Refusal) {
        self.cpu(cpu).pending = None;
        let id = decision.task;
        if self.task(id).is_none() {
            return;
        }
        let keys = self.keys(id);
        match self.tasks.refused(cpu, id, why) {
            Undo::Nothing => {}
            Undo::Forget => self.detach_task(ctx, id),
            Undo::Blocked => {
                self.t_mut(id).voluntary = true;
                self.rekey(id, keys);
            }
            Undo::Running(c) => {
                self.t_mut(id).settled_at = ctx.now();
                self.rekey(id, keys);
                self.tasks.set_running(c, id);
            }
            // Still runnable: it stays in the queue.
            Undo::Requeue { .. } => self.t_mut(id).st = St::Ready,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bvt(mcu: Ns) -> Bvt {
        Bvt::new(BvtConfig { mcu, c: 2 * mcu, ..BvtConfig::default() }).unwrap()
    }

    #[test]
    fn charges_each_started_mcu_once() {
        let b = bvt(10);
        // weight 1: one mcu = 10·VT_SCALE.
        assert_eq!(b.charge_for(1, 0, 0, 1), (10 * VT_SCALE, 0, 9));
        assert_eq!(b.charge_for(1, 0, 9, 9), (0, 0, 0));
        assert_eq!(b.charge_for(1, 0, 9, 10), (10 * VT_SCALE, 0, 9));
        assert_eq!(b.charge_for(1, 0, 0, 0), (0, 0, 0));
        assert_eq!(b.charge_for(1, 0, 0, 25), (30 * VT_SCALE, 0, 5));
    }

    #[test]
    fn carries_the_remainder_of_odd_weights() {
        let b = bvt(1);
        // 17 does not divide 720720: each mcu charges 42395 or 42396 units, carried exactly.
        let w = 17;
        let mut frac = 0;
        let mut total = 0i128;
        for _ in 0..17 {
            let (da, f, _) = b.charge_for(w, frac, 0, 1);
            total += da;
            frac = f;
        }
        assert_eq!(total, VT_SCALE);
        assert_eq!(frac, 0);
    }

    #[test]
    fn crossover_is_exact() {
        let b = bvt(10);
        let t = Task::new(2);
        // C = 20 real ns: weight 2 must get 10 virtual ns ahead: 2 mcu.
        assert_eq!(b.run_until_cross(&t, 0, 0, 0, 0), Some(20));
        assert_eq!(b.run_until_cross(&t, 3, 0, 0, 0), Some(23));
        assert_eq!(b.run_until_cross(&t, 0, 10 * VT_SCALE, 0, 0), Some(0));
        assert_eq!(b.run_until_cross(&t, 0, 9 * VT_SCALE, 0, 0), Some(10));
    }

    /// §3: with tick charging a run is charged one mcu per timer interrupt it runs
    /// through (the ticks at multiples of mcu; a tick charges the task that ran up to it),
    /// and the countdown ends at a tick.
    #[test]
    fn tick_charging_counts_the_ticks_run_through() {
        let b = Bvt::new(BvtConfig { mcu: 10, c: 20, tick_charge: true, ..BvtConfig::default() }).unwrap();
        assert_eq!(b.charge_ticks(1, 0, 3, 8), (0, 0), "no tick in (3, 8]");
        assert_eq!(b.charge_ticks(1, 0, 5, 10), (10 * VT_SCALE, 0), "the tick at 10 charges the run up to it");
        assert_eq!(b.charge_ticks(1, 0, 10, 15), (0, 0), "a run starting at a tick is not charged for it");
        assert_eq!(b.charge_ticks(1, 0, 5, 31), (30 * VT_SCALE, 0));
        let t = Task::new(2);
        // 2 mcu needed: the second tick after 5 is at 20.
        assert_eq!(b.run_until_cross(&t, 0, 0, 0, 5), Some(15));
        assert_eq!(b.run_until_cross(&t, 0, 0, 0, 10), Some(20));
        assert_eq!(b.to_tick(7, 1), 3);
    }
}
