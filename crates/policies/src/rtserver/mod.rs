//! The soft real-time scheduling server of Lin, Chu & Nahrstedt (paper 002 §2), as a
//! vassal policy: a broker that admits CPU reservations, a dispatch table of slots, and a
//! dispatcher that runs each slot's owner and leaves free slots to time-sharing.
//!
//! - **API** (§2.1, Table 1), as policy messages about a task (the pid): `Reserve{util,
//!   period}` (`Cpu::reserve`), `Free` (`freeReserve`), `Modify{util, period}`
//!   (`modifyReserve`: admitted as if the old reservation were gone; on refusal the old
//!   one stays) and `Avail` (`getAvailResource`: r·N − Σ e_i/p_i CPUs, as an exact
//!   fraction). E = U·P is converted to integer ns once `util` is validated (finite, in
//!   (0, 1]). The task must have joined this scheduler (else it is an unknown pid); only
//!   the task itself or root may reserve for it; only the reservation's owner (the uid
//!   that made it) or root may modify or free it (§2.1's ownership check). Every refusal
//!   is a `Reply::Refused` with its reason and changes nothing.
//! - **Broker** ([`admission`], §2.2): eqs. 1–3 exactly as printed, first fit over the
//!   CPUs, and the dispatch table by non-preemptive rate-monotonic scheduling
//!   ([`table`]). Periods must be multiples of the slot that divide the frame.
//! - **Dispatcher** (§2.2–2.3): works from a private copy of the table, swapped for the
//!   broker's newest only at a frame boundary. A scheduler event at every slot boundary
//!   re-decides the CPUs whose slot owner changes. In a slot owned by a runnable
//!   reservation holder `pick` names it until the end of its run of slots; in its slot
//!   while it is blocked, and in free slots, the answer is "no opinion", so the
//!   time-sharing scheduler below runs its tasks. A reserved task is exclusive: it runs
//!   only in its slots (the paper parks it at the idle-class "waiting priority").
//!   Tasks that joined but hold no reservation are left to time-sharing.
//! - **Overrun** (§2.3): dispatching is non-preemptive per job, as in the paper, where an
//!   RT process still running at the end of its slot delays the next slot's dispatch: a
//!   reserved task still running when its slot ends keeps the CPU (up to `overrun_cap`,
//!   at most to the end of that slot) until its job ends — it blocks, or goes on to its
//!   next job, already released ([`Policy::on_job`]). The time it takes from another
//!   reservation's slot is that reservation's debt, repaid from free slots of the CPU
//!   ("the dispatcher will use some of the TS allocation, by temporarily assigning the
//!   free slots to the RT process whose time slots are taken by overrunning RT
//!   processes"). A task overruns in a period when its CPU time in the period exceeds its
//!   reservation e by more than `overrun_pct` %; one that overruns in more than
//!   `overrun_periods` of its last `overrun_window` periods is misbehaving and loses its
//!   reservation (defaults 20 %, 3, 10, as in §2.3).
//!
//! Parameters: `slot` (20ms), `frame` (160ms), `r` (the real-time fraction, 0 < r ≤ 1,
//! a number or "num/den"; default 0.8), `cpus` (columns of the table, from CPU 0; 0 =
//! every CPU of the machine), `admission` ("eqs" or "table"; see [`admission`]),
//! `overrun_pct` (20), `overrun_periods` (3), `overrun_window` (10), `overrun_cap`
//! (default: one slot).

pub mod admission;
pub mod table;

use std::collections::VecDeque;

use vassal_core::{
    AttachInfo, Block, CpuId, Ctx, Decision, Detach, Job, Ns, Policy, PolicyLog, Preempt, Reply, Request, Sender, TaskId, TaskState, Wake,
    MS,
};

pub use admission::{Broker, Failure, Mode, Rejection, Reservation};
pub use table::Table;

use crate::params::{ParamValue, Params};

/// Longest reservation period accepted regardless of the frame (a sanity bound).
const MAX_FRAME: Ns = 3600 * vassal_core::SEC;
/// Most slots per frame (the table is a vector per CPU).
const MAX_SLOTS: Ns = 1 << 20;

/// How the dispatcher gave a task the CPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum How {
    /// In its own slots.
    Own,
    /// In a free slot, repaying time an overrun took from it.
    Repay,
    /// Past the end of its slot, finishing its job (an overrun).
    Cont,
}

#[derive(Clone, Copy, Debug)]
struct Running {
    task: TaskId,
    how: How,
    /// Accounted up to here.
    since: Ns,
    /// Dispatched at.
    start: Ns,
}

#[derive(Clone, Debug, Default)]
struct Entry {
    attached: bool,
    /// The frame boundary from which its reservation is in the dispatcher's table.
    active_since: Option<Ns>,
    /// CPU time in the current period.
    used: Ns,
    /// Overrun or not, per closed period, newest last.
    history: VecDeque<bool>,
    /// Time taken from its slots by other tasks' overruns, not yet repaid.
    debt: Ns,
}

/// Configuration of the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    pub slot: Ns,
    pub frame: Ns,
    pub r_num: u64,
    pub r_den: u64,
    /// 0: all CPUs of the machine.
    pub cpus: u16,
    pub mode: Mode,
    pub overrun_pct: u64,
    pub overrun_periods: usize,
    pub overrun_window: usize,
    pub overrun_cap: Ns,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            slot: 20 * MS,
            frame: 160 * MS,
            r_num: 4,
            r_den: 5,
            cpus: 0,
            mode: Mode::Eqs,
            overrun_pct: 20,
            overrun_periods: 3,
            overrun_window: 10,
            overrun_cap: 20 * MS,
        }
    }
}

/// The soft real-time server. See the module documentation.
#[derive(Debug)]
pub struct RtServer {
    cfg: Config,
    broker: Option<Broker>,
    /// The broker's newest table (the shared-memory object of §2.2).
    pending: Table,
    /// The dispatcher's private copy.
    active: Table,
    tasks: Vec<Entry>,
    /// The next slot boundary to process (valid once `clock_started`).
    next_boundary: Ns,
    /// The first callback has set `next_boundary` from its clock.
    clock_started: bool,
    armed: Option<Ns>,
    run: Vec<Option<Running>>,
    /// What `pick` last answered on each CPU, confirmed by `on_dispatch`.
    decided: Vec<Option<(TaskId, How)>>,
    /// A reserved task preempted at a slot boundary mid-job: (task, time).
    cont_candidate: Vec<Option<(TaskId, Ns)>>,
    log: Vec<PolicyLog>,
}

impl RtServer {
    pub fn new(cfg: Config) -> RtServer {
        RtServer {
            cfg,
            broker: None,
            pending: Table::empty(0, cfg.slot, cfg.frame),
            active: Table::empty(0, cfg.slot, cfg.frame),
            tasks: Vec::new(),
            next_boundary: 0,
            clock_started: false,
            armed: None,
            run: Vec::new(),
            decided: Vec::new(),
            cont_candidate: Vec::new(),
            log: Vec::new(),
        }
    }

    /// The broker (admitted reservations), once the server has seen the machine.
    pub fn broker(&self) -> Option<&Broker> {
        self.broker.as_ref()
    }
    /// The broker's newest dispatch table.
    pub fn pending_table(&self) -> &Table {
        &self.pending
    }
    /// The dispatcher's private copy, in use for the current frame.
    pub fn active_table(&self) -> &Table {
        &self.active
    }
    /// Time `task` is owed from free slots.
    pub fn debt(&self, task: TaskId) -> Ns {
        self.tasks.get(task.0 as usize).map_or(0, |e| e.debt)
    }

    /// The usage to declare when loading the server (Vassal §8, `vassal_core::usage`): a
    /// reserved share of r·N CPUs (rounded up to a whole ppm). One reservation may take a
    /// whole CPU, so a per-CPU hard-time bound of r would be wrong; 1 − r of each CPU is
    /// left to the default.
    pub fn usage(&self, ncpus: u16) -> vassal_core::Usage {
        let n = if self.cfg.cpus == 0 { ncpus } else { self.cfg.cpus.min(ncpus) } as u128;
        let ppm = (self.cfg.r_num as u128 * n * vassal_core::CPU_PPM as u128).div_ceil(self.cfg.r_den as u128);
        vassal_core::Usage::Reserved { cpu_ppm: ppm as u64 }
    }

    /// The first callback: slot boundaries are counted from the next one after now.
    fn start_clock(&mut self, ctx: &Ctx) {
        if !self.clock_started {
            self.clock_started = true;
            self.next_boundary = (ctx.now() / self.cfg.slot + 1) * self.cfg.slot;
        }
    }

    fn ncols(&self) -> usize {
        self.run.len()
    }

    fn entry_mut(&mut self, task: TaskId) -> &mut Entry {
        let i = task.0 as usize;
        if i >= self.tasks.len() {
            self.tasks.resize(i + 1, Entry::default());
        }
        &mut self.tasks[i]
    }

    fn attached(&self, task: TaskId) -> bool {
        self.tasks.get(task.0 as usize).is_some_and(|e| e.attached)
    }

    /// A reservation that is in the dispatcher's table.
    fn dispatchable(&self, task: TaskId) -> Option<Reservation> {
        let r = *self.broker.as_ref()?.get(task)?;
        self.tasks.get(task.0 as usize)?.active_since.map(|_| r)
    }

    fn idle(&self) -> bool {
        self.broker.as_ref().is_none_or(|b| b.is_empty()) && self.active.free_slots().0 == self.active.free_slots().1
    }

    fn note(&mut self, at: Ns, task: Option<TaskId>, text: String) {
        self.log.push(PolicyLog { at, task, text });
    }

    fn add_usage(&mut self, task: TaskId, how: How, ns: Ns) {
        let e = self.entry_mut(task);
        e.used = e.used.saturating_add(ns);
        if how == How::Repay {
            e.debt = e.debt.saturating_sub(ns);
        }
    }

    /// Processes every slot boundary up to now: accounts, closes periods (overrun
    /// detection), and swaps in the broker's table at frame boundaries.
    fn advance(&mut self, ctx: &mut Ctx) {
        self.start_clock(ctx);
        let now = ctx.now();
        let (slot, frame) = (self.cfg.slot, self.cfg.frame);
        if self.idle() {
            self.next_boundary = self.next_boundary.max((now / slot + 1) * slot);
            return;
        }
        let mut misbehaving = Vec::new();
        while self.next_boundary <= now {
            let b = self.next_boundary;
            for cpu in 0..self.ncols() {
                if let Some(r) = self.run[cpu] {
                    self.add_usage(r.task, r.how, b.saturating_sub(r.since));
                    self.run[cpu].as_mut().unwrap().since = b.max(r.since);
                }
            }
            let res: Vec<Reservation> = self.broker.as_ref().unwrap().reservations().copied().collect();
            for r in &res {
                if !b.is_multiple_of(r.p) {
                    continue;
                }
                let (pct, periods, window) = (self.cfg.overrun_pct, self.cfg.overrun_periods, self.cfg.overrun_window);
                let e = self.entry_mut(r.task);
                let used = std::mem::take(&mut e.used);
                if e.active_since.is_some_and(|s| s + r.p <= b) {
                    // §2.3: overrunning "for more than 20% of its reservation".
                    let over = used as u128 * 100 > r.e as u128 * (100 + pct as u128);
                    e.history.push_back(over);
                    while e.history.len() > window {
                        e.history.pop_front();
                    }
                    let n = e.history.iter().filter(|&&o| o).count();
                    if n > periods {
                        misbehaving.push((r.task, n));
                    }
                }
            }
            if b.is_multiple_of(frame) {
                self.active = self.pending.clone();
                for r in &res {
                    if self.active.slots_of(r.task) > 0 {
                        let e = self.entry_mut(r.task);
                        if e.active_since.is_none() {
                            e.active_since = Some(b);
                            e.used = 0;
                        }
                    }
                }
            }
            self.next_boundary = b + slot;
        }
        for (task, n) in misbehaving {
            if self.broker.as_mut().unwrap().remove(task).is_some() {
                let (p, w, pct) = (self.cfg.overrun_periods, self.cfg.overrun_window, self.cfg.overrun_pct);
                self.drop_reservation(ctx, task);
                self.note(
                    now,
                    Some(task),
                    format!(
                        "{task} is misbehaving: it overran its reservation by more than {pct}% in {n} of its last {w} periods (limit {p}); reservation removed"
                    ),
                );
            }
        }
    }

    /// After the broker dropped `task`'s reservation: rebuild the table, forget its
    /// accounting, return it to time-sharing, and stop it if it runs as real time.
    fn drop_reservation(&mut self, ctx: &mut Ctx, task: TaskId) {
        self.pending = self.broker.as_ref().unwrap().table();
        let e = self.entry_mut(task);
        let attached = e.attached;
        *e = Entry { attached, ..Entry::default() };
        if attached {
            let _ = ctx.set_exclusive(task, false);
        }
        for cpu in 0..self.ncols() {
            if self.run[cpu].is_some_and(|r| r.task == task) {
                let _ = ctx.resched(CpuId(cpu as u16));
            }
        }
    }

    fn arm(&mut self, ctx: &mut Ctx) {
        if self.idle() {
            return;
        }
        if self.armed != Some(self.next_boundary) && ctx.set_event(self.next_boundary, 0).is_ok() {
            self.armed = Some(self.next_boundary);
        }
    }

    fn slot_index(&self, now: Ns) -> usize {
        ((now % self.cfg.frame) / self.cfg.slot) as usize
    }

    fn ready_for(&self, ctx: &Ctx, task: TaskId, cpu: CpuId) -> bool {
        ctx.allowed(task, cpu) && matches!(ctx.state(task), TaskState::Runnable) || ctx.state(task) == TaskState::Running(cpu)
    }

    /// What this CPU should run now by the table: (task, how, slice).
    fn desired(&self, ctx: &Ctx, cpu: CpuId) -> Option<(TaskId, How, Ns)> {
        let c = cpu.0 as usize;
        if c >= self.ncols() {
            return None;
        }
        let now = ctx.now();
        let slot = self.cfg.slot;
        let s = self.slot_index(now);
        let slot_end = (now / slot + 1) * slot;
        match self.active.owner(c, s).filter(|&o| self.dispatchable(o).is_some()) {
            Some(o) => {
                if !self.ready_for(ctx, o, cpu) {
                    return None; // its slot, but it is blocked: time-sharing runs
                }
                // Through its consecutive slots, to the end of the frame at most.
                let mut k = s + 1;
                while k < self.active.nslots() && self.active.owner(c, k) == Some(o) {
                    k += 1;
                }
                let end = now - now % self.cfg.frame + k as Ns * slot;
                Some((o, How::Own, end - now))
            }
            None => {
                // A free slot: repay time lost to overruns, shortest period first.
                let b = self.broker.as_ref()?;
                b.reservations()
                    .filter(|r| r.cpu as usize == c && self.dispatchable(r.task).is_some())
                    .filter(|r| self.debt(r.task) > 0 && self.ready_for(ctx, r.task, cpu))
                    .min_by_key(|r| (r.p, r.seq))
                    .map(|r| (r.task, How::Repay, self.debt(r.task).min(slot_end - now)))
            }
        }
    }

    /// Accounts the running task on `cpu` up to now.
    fn account(&mut self, now: Ns, cpu: usize) {
        if let Some(r) = self.run.get(cpu).copied().flatten() {
            self.add_usage(r.task, r.how, now.saturating_sub(r.since));
            self.run[cpu].as_mut().unwrap().since = now.max(r.since);
        }
    }

    /// The task stopped running on `cpu`. An overrun that ends repays its victim.
    fn stopped(&mut self, ctx: &Ctx, task: TaskId, cpu: usize) -> Option<Running> {
        let r = self.run.get(cpu).copied().flatten().filter(|r| r.task == task)?;
        let now = ctx.now();
        self.account(now, cpu);
        self.run[cpu] = None;
        Some(r)
    }

    fn end_overrun(&mut self, ctx: &Ctx, cpu: usize, task: TaskId, start: Ns) {
        let victim = self.active.owner(cpu, self.slot_index(start)).filter(|&v| v != task);
        if let Some(v) = victim.filter(|&v| self.dispatchable(v).is_some() && ctx.state(v).is_runnable()) {
            let lost = ctx.now() - start;
            let e = self.entry_mut(v);
            e.debt = e.debt.saturating_add(lost);
        }
    }

    fn reserve(&mut self, ctx: &mut Ctx, from: Sender, task: TaskId, util: f64, period: Ns, modify: bool) -> Reply {
        if !self.attached(task) {
            return Reply::refused(format!("unknown pid: {task} has not joined this scheduler"));
        }
        let broker = self.broker.as_ref().unwrap();
        match (broker.get(task), modify) {
            (Some(_), false) => {
                return Reply::refused(format!("{task} already has a reservation; use modify"));
            }
            (None, true) => return Reply::refused(format!("{task} has no reservation to modify")),
            (Some(r), true) if r.owner != from.uid && !from.is_root() => {
                return Reply::refused(format!(
                    "uid {} may not modify the reservation of {task}: only its owner (uid {}) or root may",
                    from.uid, r.owner
                ));
            }
            (None, false) if from.task != Some(task) && !from.is_root() => {
                return Reply::refused(format!("only {task} itself or root may reserve for it"));
            }
            _ => {}
        }
        // util first (NaN, range), then the period, then E = U·P.
        if let Err(why) = exec_time(util, 1_000_000_000) {
            return Reply::refused(why);
        }
        if let Err(e) = broker.check_period(period) {
            return Reply::refused(e);
        }
        let e = match exec_time(util, period) {
            Ok(e) => e,
            Err(why) => return Reply::refused(why),
        };
        let aff = ctx.affinity(task);
        let broker = self.broker.as_mut().unwrap();
        match broker.admit(task, e, period, aff, from.uid) {
            Ok(cpu) => {
                self.pending = broker.table();
                let now = ctx.now();
                let e_mut = self.entry_mut(task);
                e_mut.history.clear();
                if !modify {
                    let _ = ctx.set_exclusive(task, true);
                }
                self.note(
                    now,
                    Some(task),
                    format!(
                        "{} {task}: {e} ns every {period} ns on CPU {cpu}; from the next frame",
                        if modify { "modified" } else { "admitted" }
                    ),
                );
                self.arm(ctx);
                Reply::Ok
            }
            Err(why) => Reply::refused(why.to_string()),
        }
    }

    fn free(&mut self, ctx: &mut Ctx, from: Sender, task: TaskId) -> Reply {
        if !self.attached(task) {
            return Reply::refused(format!("unknown pid: {task} has not joined this scheduler"));
        }
        let Some(r) = self.broker.as_ref().unwrap().get(task).copied() else {
            return Reply::refused(format!("{task} has no reservation to free"));
        };
        if r.owner != from.uid && !from.is_root() {
            return Reply::refused(format!(
                "uid {} may not free the reservation of {task}: only its owner (uid {}) or root may",
                from.uid, r.owner
            ));
        }
        self.broker.as_mut().unwrap().remove(task);
        self.drop_reservation(ctx, task);
        self.note(ctx.now(), Some(task), format!("freed the reservation of {task}"));
        Reply::Ok
    }

    fn avail(&self) -> Reply {
        let (num, den) = self.broker.as_ref().unwrap().avail();
        match (u64::try_from(num), u64::try_from(den)) {
            (Ok(num), Ok(den)) => Reply::Fraction { num, den },
            _ => Reply::refused("the available fraction does not fit in 64 bits"),
        }
    }
}

/// E = U·P (§2.1) in integer ns, once `util` is validated: finite and in (0, 1]. The
/// period is at most an hour, so the float product is exact to well under a
/// nanosecond before rounding.
pub fn exec_time(util: f64, period: Ns) -> Result<Ns, String> {
    if util.is_nan() {
        return Err("util is NaN: it must be a fraction in (0, 1]".into());
    }
    if util <= 0.0 || util > 1.0 {
        return Err(format!("util {util} is out of range: it must be in (0, 1]"));
    }
    let e = (util * period as f64).round() as Ns;
    if e == 0 {
        return Err(format!("util {util} of {period} ns is less than 1 ns per period"));
    }
    Ok(e)
}

/// Reads a fraction parameter: an integer, a decimal (read exactly from its shortest
/// text: 0.6875 = 11/16), or a string "num/den".
pub fn fraction(kind: &str, key: &str, v: Option<&ParamValue>, default: (u64, u64)) -> Result<(u64, u64), String> {
    let bad = |v: &dyn std::fmt::Debug| format!("{kind} parameter '{key}': expected a fraction like 0.8 or \"4/5\", found {v:?}");
    let (num, den) = match v {
        None => return Ok(default),
        Some(ParamValue::Int(i)) if *i >= 0 => (*i as u64, 1),
        Some(ParamValue::Float(f)) if f.is_finite() && *f >= 0.0 => {
            let text = f.to_string();
            let (int, dec) = text.split_once('.').unwrap_or((&text, ""));
            if dec.len() > 18 {
                return Err(format!("{kind} parameter '{key}': {f} has more than 18 decimals"));
            }
            let den = 10u64.pow(dec.len() as u32);
            let num = format!("{int}{dec}").parse::<u64>().map_err(|_| bad(f))?;
            (num, den)
        }
        Some(ParamValue::Str(s)) => {
            let (a, b) = s.split_once('/').ok_or_else(|| bad(s))?;
            (a.trim().parse::<u64>().map_err(|_| bad(s))?, b.trim().parse::<u64>().map_err(|_| bad(s))?)
        }
        Some(v) => return Err(bad(v)),
    };
    if den == 0 {
        return Err(format!("{kind} parameter '{key}': denominator 0"));
    }
    let g = admission::gcd(num as u128, den as u128) as u64;
    Ok((num / g, den / g))
}

/// Builds an `rtserver` from its parameters (see the module documentation).
pub fn build(p: &mut Params) -> Result<RtServer, String> {
    let k = "rtserver";
    let d = Config::default();
    let slot = p.duration("slot", d.slot)?;
    let frame = p.duration("frame", d.frame)?;
    if slot == 0 || frame == 0 {
        return Err(format!("{k} parameters 'slot' and 'frame' must be greater than zero"));
    }
    if frame % slot != 0 {
        return Err(format!("{k} parameter 'frame': {frame} ns is not a whole number of {slot} ns slots"));
    }
    if frame > MAX_FRAME || frame / slot > MAX_SLOTS {
        return Err(format!("{k} parameter 'frame': at most one hour and {MAX_SLOTS} slots"));
    }
    let (r_num, r_den) = fraction(k, "r", p.raw("r"), (d.r_num, d.r_den))?;
    if r_num == 0 || r_num > r_den {
        return Err(format!("{k} parameter 'r': {r_num}/{r_den} is not in (0, 1]"));
    }
    let cpus = p.int("cpus", 0, 0..=vassal_core::MAX_CPUS as i64)? as u16;
    let mode = match p.choice("admission", "eqs", &["eqs", "table"])?.as_str() {
        "table" => Mode::Table,
        _ => Mode::Eqs,
    };
    let overrun_pct = p.int("overrun_pct", 20, 0..=10_000)? as u64;
    let overrun_window = p.int("overrun_window", 10, 1..=10_000)? as usize;
    let overrun_periods = p.int("overrun_periods", 3, 0..=10_000)? as usize;
    if overrun_periods >= overrun_window {
        return Err(format!("{k} parameter 'overrun_periods': {overrun_periods} must be less than overrun_window ({overrun_window})"));
    }
    let overrun_cap = p.duration("overrun_cap", slot)?;
    Ok(RtServer::new(Config { slot, frame, r_num, r_den, cpus, mode, overrun_pct, overrun_periods, overrun_window, overrun_cap }))
}

impl Policy for RtServer {
    fn kind(&self) -> &str {
        "rtserver"
    }

    /// The broker, the tables and the per-CPU state for the table's columns (the clock
    /// starts at the first callback).
    fn init(&mut self, ncpus: u16) {
        let n = if self.cfg.cpus == 0 { ncpus } else { self.cfg.cpus.min(ncpus) };
        let c = &self.cfg;
        self.broker = Some(Broker::new(c.slot, c.frame, n, c.r_num, c.r_den, c.mode));
        self.pending = Table::empty(n, c.slot, c.frame);
        self.active = self.pending.clone();
        self.run = vec![None; n as usize];
        self.decided = vec![None; n as usize];
        self.cont_candidate = vec![None; n as usize];
    }
    fn on_attach(&mut self, ctx: &mut Ctx, task: TaskId, info: &AttachInfo) -> Result<(), String> {
        crate::task_index(task)?;
        if info.state == TaskState::Dead {
            return Err(format!("{task} has exited"));
        }
        self.advance(ctx);
        *self.entry_mut(task) = Entry { attached: true, ..Entry::default() };
        Ok(())
    }
    fn on_detach(&mut self, ctx: &mut Ctx, task: TaskId, _why: Detach) {
        self.advance(ctx);
        if !self.attached(task) {
            return;
        }
        for cpu in 0..self.ncols() {
            if self.run[cpu].is_some_and(|r| r.task == task) {
                self.run[cpu] = None;
            }
            if self.decided[cpu].is_some_and(|(t, _)| t == task) {
                self.decided[cpu] = None;
            }
        }
        let had = self.broker.as_mut().and_then(|b| b.remove(task)).is_some();
        self.tasks[task.0 as usize] = Entry::default();
        if had {
            self.pending = self.broker.as_ref().unwrap().table();
            self.note(ctx.now(), Some(task), format!("{task} left: its reservation is freed"));
        }
    }
    fn on_wake(&mut self, ctx: &mut Ctx, task: TaskId, _wake: Wake) {
        self.advance(ctx);
        if let Some(r) = self.dispatchable(task) {
            let cpu = CpuId(r.cpu);
            if self.desired(ctx, cpu).is_some_and(|(t, _, _)| t == task) && ctx.running_on(cpu) != Some(task) {
                let _ = ctx.resched(cpu);
            }
        }
    }
    fn on_block(&mut self, ctx: &mut Ctx, task: TaskId, _block: Block) {
        self.advance(ctx);
        for cpu in 0..self.ncols() {
            if let Some(r) = self.stopped(ctx, task, cpu) {
                if r.how == How::Cont {
                    self.end_overrun(ctx, cpu, task, r.start);
                }
            }
        }
    }
    /// §2.3's dispatch is non-preemptive per *job*: an overrun lets the job that was
    /// running at its slot's end finish, not the task's next job. A task that goes
    /// straight on to an already released job (the mechanism says so) ends its overrun;
    /// its CPU goes to the slot's owner.
    fn on_job(&mut self, ctx: &mut Ctx, task: TaskId, _job: Job) {
        self.advance(ctx);
        for c in 0..self.ncols() {
            if self.run[c].is_some_and(|r| r.task == task && r.how == How::Cont) {
                let _ = ctx.resched(CpuId(c as u16));
            }
        }
    }
    fn on_dispatch(&mut self, ctx: &mut Ctx, task: TaskId, cpu: CpuId) {
        self.advance(ctx);
        let c = cpu.0 as usize;
        if c >= self.ncols() {
            return;
        }
        self.run[c] = match self.decided[c].take() {
            Some((t, how)) if t == task => Some(Running { task, how, since: ctx.now(), start: ctx.now() }),
            _ => None,
        };
    }
    fn on_preempt(&mut self, ctx: &mut Ctx, task: TaskId, cpu: CpuId, why: Preempt) {
        self.advance(ctx);
        let c = cpu.0 as usize;
        let now = ctx.now();
        if let Some(r) = self.stopped(ctx, task, c) {
            match r.how {
                How::Cont => self.end_overrun(ctx, c, task, r.start),
                // §2.3: a job still running when its slot ends is not cut off there.
                How::Own | How::Repay if why != Preempt::Yield && now % self.cfg.slot == 0 => {
                    self.cont_candidate[c] = Some((task, now));
                }
                _ => {}
            }
        }
    }
    fn on_run(&mut self, ctx: &mut Ctx, _task: TaskId, cpu: CpuId, _ran: Ns) {
        self.advance(ctx);
        self.account(ctx.now(), cpu.0 as usize);
    }
    fn on_event(&mut self, ctx: &mut Ctx, _token: u64) {
        self.armed = None;
        self.advance(ctx);
        let now = ctx.now();
        for c in 0..self.ncols() {
            let cpu = CpuId(c as u16);
            let want = self.desired(ctx, cpu).map(|(t, _, _)| t);
            let cur = ctx.running_on(cpu);
            let ours = self.run[c];
            let resched = match ours {
                // decided at this instant already
                Some(r) if r.start == now => false,
                Some(r) => want != Some(r.task),
                None => want.is_some() && want != cur,
            };
            if resched {
                let _ = ctx.resched(cpu);
            }
        }
        self.arm(ctx);
    }
    fn on_message(&mut self, ctx: &mut Ctx, from: Sender, task: TaskId, req: &Request) -> Reply {
        self.advance(ctx);
        let reply = match req {
            Request::Reserve { util, period } => self.reserve(ctx, from, task, *util, *period, false),
            Request::Modify { util, period } => self.reserve(ctx, from, task, *util, *period, true),
            Request::Free => self.free(ctx, from, task),
            Request::Avail => self.avail(),
            other => Reply::refused(format!("rtserver does not understand {other:?}")),
        };
        self.arm(ctx);
        reply
    }
    fn pick(&mut self, ctx: &mut Ctx, cpu: CpuId) -> Option<Decision> {
        self.advance(ctx);
        let c = cpu.0 as usize;
        if c >= self.ncols() {
            return None;
        }
        let now = ctx.now();
        let desired = self.desired(ctx, cpu);
        if let Some((x, at)) = self.cont_candidate[c].take() {
            // Non-preemptive: the job that was running when its slot ended finishes,
            // up to overrun_cap and the end of this slot (§2.3).
            let end = (now + self.cfg.overrun_cap).min((now / self.cfg.slot + 1) * self.cfg.slot);
            // (If the slot is free and x is owed time, the repayment below covers it.)
            if at == now
                && desired.is_none_or(|(t, _, _)| t != x)
                && self.dispatchable(x).is_some()
                && self.ready_for(ctx, x, cpu)
                && end > now
            {
                self.decided[c] = Some((x, How::Cont));
                return Some(Decision::run(x, end - now));
            }
        }
        let (t, how, slice) = desired?;
        self.decided[c] = Some((t, how));
        Some(Decision::run(t, slice))
    }
    fn on_refused(&mut self, _ctx: &mut Ctx, cpu: CpuId, _d: Decision, _why: vassal_core::Refusal) {
        if let Some(d) = self.decided.get_mut(cpu.0 as usize) {
            *d = None;
        }
    }
    fn drain_log(&mut self, out: &mut Vec<PolicyLog>) {
        out.append(&mut self.log);
    }
}
