//! The dispatcher's pass: what it learns (events, polls), what it decides, and when the
//! next one comes.
//!
//! **Decisions** go through `vassal_core::driver` (its rules 1-6), the same code as the
//! simulator's: due scheduler events are fired (`driver::fire_due`), a slice end or a
//! block makes its CPU's decision pending (`Driver::request`), and `driver::settle` makes
//! the pending decisions lowest CPU first, applying each one's effects before the next
//! (`contain` runs before each). The agent's side is `impl Hooks for Agent` below: it
//! records each decision (slice end, latency sample, traces); no accounting there, since
//! `poll` tells the dispatcher the CPU each process used, read from the kernel.
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

use vassal_core::driver::{self, Hooks, RESCHED_LIMIT};
use vassal_core::{Block, CpuId, Dispatched, Driver, Ns, Preempt, SchedId, TaskId, TaskState, Wake, MS, SEC};

use super::{Agent, KState, RtBy, Source, LAT_SAMPLES, PARKED_EVERY, RESCAN, RESCAN_BPF};

impl Agent {
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
        if let Some(at) = self.drv.next_deadline() {
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
        if let Some(w) = self.drv.disp.next_watchdog() {
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
    ///   sleeps on costs it a third of one from another CPU (docs/agent.md, "Event
    ///   source"), where the cross-CPU wake-up also leaves an idle or busy CPU.
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

    /// `cpu` needs a decision (its task blocked or left): its slice end no longer counts,
    /// so the decision's reason is `Resched`.
    pub(super) fn request_resched(&mut self, cpu: CpuId) {
        self.slice_end[cpu.0 as usize] = None;
        self.drv.request(cpu, Preempt::Resched);
    }

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
            let event = self.drv.next_deadline().map(us);
            let _ = writeln!(tr, "{} pass: {} BPF events, scheduler event {event:?}, slice ends {slices:?}", now / 1000, self.ev_buf.len());
        }
        self.poll(now);
        driver::fire_due(self, now);
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
                self.drv.disp.tick(now, CpuId(c));
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
                self.drv.request(CpuId(c as u16), Preempt::SliceExpired);
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
            let selected = matches!(self.drv.disp.state(task), TaskState::Running(_));
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
            let cpu = match self.drv.disp.state(task) {
                TaskState::Running(c) => Some(c),
                _ if unaccounted >= SEC => Some(CpuId(last_cpu.unwrap_or(0))),
                _ => None,
            };
            if let (Some(cpu), true) = (cpu, unaccounted > 0) {
                m.unaccounted = 0;
                self.drv.disp.account(now, task, cpu, unaccounted);
            }
            let st = self.drv.disp.state(task);
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
                self.drv.disp.wake(now, task, Wake { voluntary: true, cpu: armed, ..Wake::default() });
                if let Some(m) = self.tasks.get_mut(&id) {
                    m.runnable_since = Some(woke_at.map_or(now, |w| w.min(now)));
                }
            } else if !runnable && st.is_runnable() {
                if let Some(cpu) = self.drv.disp.block(now, task, Block { voluntary: true }) {
                    self.request_resched(cpu);
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
        self.drv.disp.wake(now, task, Wake { voluntary: true, cpu: Some(cpu), ..Wake::default() });
        if let Some(m) = self.tasks.get_mut(&task.0) {
            m.runnable_since = None;
        }
        driver::settle(self, now);
        if let (TaskState::Running(c), Some(m)) = (self.drv.disp.state(task), self.tasks.get_mut(&task.0)) {
            let ran = std::mem::take(&mut m.unaccounted);
            if ran > 0 {
                self.drv.disp.account(now, task, c, ran);
            }
        }
        if let Some(c) = self.drv.disp.block(now, task, Block { voluntary: true }) {
            self.request_resched(c);
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

    /// Carries out what the policies asked (events, reschedules: `driver::settle`), then
    /// applies the resulting decisions to the kernel.
    pub fn settle(&mut self, now: Ns) {
        driver::settle(self, now);
        self.take_notes();
        self.enforce(now);
    }
}

/// The agent's side of the driver (vassal_core::driver): the decisions it makes are
/// recorded here; they reach the kernel at `Agent::settle`'s `enforce`.
impl Hooks for Agent {
    fn driver(&mut self) -> &mut Driver {
        &mut self.drv
    }

    /// Nothing: the CPU a task used is read from the kernel and told to the dispatcher
    /// by `poll` (and `replay_run`), not reckoned at decisions.
    fn account(&mut self, _now: Ns, _cpu: CpuId) {}

    fn dispatched(&mut self, now: Ns, cpu: CpuId, why: Preempt, before: Option<TaskId>, d: Option<Dispatched>) {
        let c = cpu.0;
        // A decision that changes what runs is a change (one that keeps the same task
        // running is not: the kernel state stays as it is).
        if d.map(|d| d.task) != before {
            self.changes += 1;
        }
        if let Some(tr) = self.trace.as_mut() {
            use std::io::Write;
            let _ = writeln!(tr, "{} schedule cpu{c} {why:?} -> {d:?}", now / 1000);
        }
        if let Some(t) = self.chrome.as_mut() {
            let by = d.and_then(|d| Some((self.tasks.get(&d.task.0)?.pid as u32, self.drv.disp.sched_name(d.by).unwrap_or("?"))));
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

    /// Containment of loaded modules (issue 8): a module that failed since the last round
    /// is ejected before anything else is decided.
    fn before_round(&mut self, now: Ns) {
        self.contain(now);
    }

    /// A scheduler event is a change (the passes come every tick after it).
    fn before_event(&mut self, now: Ns, sched: SchedId) {
        self.changes += 1;
        if let Some(t) = self.chrome.as_mut() {
            t.event(now, self.drv.disp.sched_name(sched).unwrap_or("?"));
        }
    }

    fn livelock(&mut self, now: Ns, cpu: CpuId) {
        eprintln!("vassal agent: {cpu}: over {RESCHED_LIMIT} reschedules at one instant; ignoring more until the next pass");
        if let Some(tr) = self.trace.as_mut() {
            use std::io::Write;
            let _ = writeln!(tr, "{} {cpu}: livelock, over {RESCHED_LIMIT} reschedules", now / 1000);
        }
    }
}
