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
//! `Dispatcher::wake`/`block`, and CPU used since the last pass (the thread's schedstat)
//! becomes `Dispatcher::account`. Scheduler events are waited for exactly (absolute
//! CLOCK_MONOTONIC times), slice ends to the next tick (a slice overruns by less than one
//! tick); see `Agent::next_deadline`. With BPF a block or wake is acted on one dispatcher
//! wake-up after it happens; polling, up to one tick late while things change, up to
//! `PARKED_EVERY` ticks after a quiet spell. An armed task waits for neither.
//!
//! **Quiet wakes and blocks** (BPF source). The kernel runs an armed thread the instant
//! it wakes, so waking the dispatcher for that wake buys nothing when the policy will
//! pick it anyway, and a 60 fps task's wakes were a third of all passes. An armed thread
//! of the default scheduler (a warped BVT task; not one exclusive to a loaded scheduler,
//! whose wake outside its slots must be held at once) therefore is marked in the BPF map
//! (the BPF map `quiet`): their wakes wait in the ring buffer for the next pass, while
//! blocks still wake the dispatcher. So is a thread sleeping in the fair class without a
//! warp (`best_effort_sleep = "fair"`, enforcement.rs): the kernel runs it at its wake as
//! it would without the agent, and a dispatcher woken for that wake, at SCHED_FIFO, would
//! preempt the very thread it woke for (rt-app's video threads, issue 17). A pass that
//! finds such a process woken and blocked again replays its run to the policy in order
//! (`replay_run`): wake, the decisions that follow, the CPU it used, block. Such a
//! fair-class thread's blocks are quiet too (`QUIET_BLOCK`), and so are those of a
//! best-effort selection running unbound where the kernel woke it, while no thread waits
//! for a CPU — no runnable thread is parked or held (`Agent::tell_waiting`, the BPF map
//! `waiting`): the CPU a block frees is then wanted by nobody the policy must place, and
//! the dispatcher's pass at each block of rt-app's video threads, at SCHED_FIFO, delayed
//! the workload's other threads (issue 17). A pass that finds a thread it had running
//! blocked tells the block; blocked and woken again, it replays both in order
//! (`replay_sleep`). A process that wakes and does not block again is bounded by a POSIX
//! timer on its CPU clock (`kernel::CpuTimer`), set at each pass to one tick of CPU past
//! what it has used: the kernel checks it at its own tick, so a quiet task runs unseen
//! for at most one agent tick of CPU plus one kernel tick (4 ms at HZ = 250) — a runaway
//! warped task is then dispatched, and its warp limit applies, from there.
//!
//! **What a pass visits** (issue 17, "many tasks"). With BPF events a pass reads only
//! the threads events named, the selected ones (their CPU use), those whose kernel state
//! is not applied yet, and those the BPF map could not take; re-listings come once per
//! `RESCAN_BPF` for all processes together. `enforce` visits only the tasks whose
//! decision, runnability or parameters changed, and those whose kernel state depends on
//! time (`Agent::watch`). So a managed thread that does nothing costs a pass nothing;
//! polling still reads every parked thread every `PARKED_EVERY` passes.

use vassal_core::driver::{self, Hooks, RESCHED_LIMIT};
use vassal_core::{Block, CpuId, Dispatched, Driver, Ns, Preempt, SchedId, TaskId, TaskState, Wake, SEC};

use super::{sample, Agent, KState, RtBy, Source, AUDIT_EVERY, AUDIT_READS, LAT_SAMPLES, PARKED_EVERY, RESCAN_BPF};

/// TASK_STOPPED and TASK_TRACED in a task's state: a switch-out in them is a stop, not a
/// block (include/linux/sched.h).
const STOPPED: u32 = 0x4 | 0x8;

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
    /// be applied, at the processes' rescans (every `RESCAN_BPF`), for the audit of
    /// blocked threads (while some thread is one it would read, 2 × `AUDIT_EVERY` after
    /// the last audit: a pass that comes from `AUDIT_EVERY` on takes it), and at least
    /// once a second.
    pub fn next_deadline(&self) -> Ns {
        let tick = self.cfg.tick;
        let mut d = if let Source::Bpf(_) = self.source {
            let mut d = self.last_pass.saturating_add(SEC);
            if !self.unsettled.is_empty() {
                d = d.min(self.next_tick);
            }
            if self.audit_wanted {
                // At the first pass from `next_audit` on; a pass of its own only if none
                // comes within another `AUDIT_EVERY`.
                d = d.min(self.next_audit + AUDIT_EVERY);
            }
            d
        } else {
            let every = if self.quiet { PARKED_EVERY } else { self.backoff };
            self.next_tick + (every - 1) * tick
        };
        if let Some(&(due, _)) = self.rescans.first() {
            d = d.min(due);
        }
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
        if let Some(&t) = self.unloaded.values().min() {
            d = d.min(t);
        }
        d
    }

    /// The CPUs the dispatcher thread should run on (a bit mask), or None: it may stay
    /// where it is (so a task's arm-run-arm cycle costs no affinity change).
    /// - Not on the CPU of a thread armed with loud wakes: it runs the instant it wakes,
    ///   and its wake also wakes the dispatcher, which (at a higher priority) would
    ///   preempt the very task it woke for.
    /// - On the CPU of a thread armed with quiet wakes, if there is one: its wakes do not
    ///   wake the dispatcher, its blocks do, and a wake-up from the CPU the dispatcher
    ///   sleeps on costs it a third of one from another CPU (docs/agent.md, "Event
    ///   source"), where the cross-CPU wake-up also leaves an idle or busy CPU.
    pub fn dispatcher_cpus(&self) -> Option<u64> {
        let all = if self.ncpus >= 64 { u64::MAX } else { (1u64 << self.ncpus) - 1 };
        let (mut loud, mut quiet) = (0u64, 0u64);
        for m in self.watch.iter().filter_map(|id| self.tasks.get(id)) {
            if let KState::Armed { cpu } = m.want {
                if cpu < 64 {
                    *(if m.quiet != 0 { &mut quiet } else { &mut loud }) |= 1u64 << cpu;
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

    /// One pass of the dispatcher at `now`: read the managed threads that need it (see
    /// `poll`), re-list the processes due, fire due events, deliver due ticks, end expired
    /// slices, decide, and apply.
    pub fn pass(&mut self, now: Ns) {
        self.passes += 1;
        self.last_pass = now;
        let changes = self.changes;
        self.take_events(now);
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
        self.rescans_due(now);
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
        // The audit comes after this pass's decisions are applied, so its /proc reads
        // never delay the wakes that brought the pass (before, 1 in ~8 of rt-app's video
        // wakes waited for its reads: `real.rtapp_video`); a missed wake it finds gets
        // its decision at once.
        if matches!(self.source, Source::Bpf(_)) && now >= self.next_audit {
            self.next_audit = now + AUDIT_EVERY;
            if self.audit(now) {
                self.poll(now);
                self.settle(now);
            }
        }
        self.audit_wanted = matches!(self.source, Source::Bpf(_)) && self.tasks.values().any(|m| self.audited(m));
        self.backoff = if self.changes != changes { 1 } else { (self.backoff * 2).min(PARKED_EVERY) };
        if let Some(t) = self.chrome.as_mut() {
            t.flush();
        }
        if let Some(tr) = self.trace.as_mut() {
            // Flushed at each pass: the agent may be stopped after its last restore.
            use std::io::Write;
            let _ = tr.flush();
        }
    }

    /// Re-lists the processes whose rescan is due; with BPF events, every one due within
    /// half a period too, so the re-listings of all processes come at one pass.
    fn rescans_due(&mut self, now: Ns) {
        let ahead = match self.source {
            Source::Bpf(_) => RESCAN_BPF / 2,
            Source::Poll => 0,
        };
        while let Some(&(due, pid)) = self.rescans.first() {
            if due > now + ahead {
                break;
            }
            self.rescans.pop_first();
            self.rescan(now, pid);
        }
    }

    /// Drains the BPF ring buffer (BPF source): each block or wake sets its thread's
    /// runnable flag (the last event wins: the ring buffer's order is the kernel's, see
    /// crate::bpf) and marks it for this pass's `poll`; a new thread is adopted; an exit
    /// forgets the thread (and its process, if it was the main thread).
    fn take_events(&mut self, now: Ns) {
        use crate::bpf::Kind;
        let Source::Bpf(src) = &mut self.source else {
            return;
        };
        let mut evs = std::mem::take(&mut self.ev_buf);
        evs.clear();
        src.drain(&mut evs);
        self.bpf_events += evs.len() as u64;
        let mut exited = Vec::new();
        for e in &evs {
            if e.kind == Kind::New {
                // Adopted now, with the original it would have had without the agent
                // (from its creator's, which the event names); if that fails, a rescan
                // at this pass tries again.
                if self.groups.contains_key(&e.tgid)
                    && !self.by_tid.contains_key(&e.tid)
                    && self.adopt_late(now, e.tgid, e.tid, Some(e.creator)).is_err()
                {
                    self.rescan_soon(now, e.tgid);
                }
                continue;
            }
            let Some(&task) = self.by_tid.get(&e.tid) else {
                continue;
            };
            if e.exited() {
                exited.push(task.0);
                continue;
            }
            let Some(m) = self.tasks.get_mut(&task.0) else {
                continue;
            };
            // The agent's own SIGSTOP of a held process switches its threads out stopped:
            // not a block (they were runnable, and cannot block while stopped).
            if e.kind == Kind::Block && e.state & STOPPED != 0 && self.groups.get(&m.pid).is_some_and(|g| g.stopped) {
                continue;
            }
            let woke = e.kind == Kind::Wake;
            if woke && e.state == crate::bpf::MISSED_WAKE {
                if m.run {
                    // Running when it was watched (a watch starts as blocked: crate::bpf),
                    // as the agent knows.
                    continue;
                }
                // Seen running while its last event said blocked: the kernel ran neither
                // wake program for its wake (crate::bpf, sched.bpf.c).
                self.missed_wakes += 1;
                if let Some(tr) = self.trace.as_mut() {
                    use std::io::Write;
                    let _ = writeln!(tr, "{} {task} missed wake, seen running on cpu {:?}", now / 1000, e.cpu);
                }
            }
            m.run = woke;
            m.blocked_seen |= !woke;
            m.blocked_cpu_ns = (!woke).then_some(e.runtime);
            if woke && m.woke_at.is_none() {
                m.woke_at = Some(e.time);
            }
            if woke {
                m.woke_on = e.cpu;
            }
            self.evented.insert(task.0);
        }
        self.ev_buf = evs;
        for id in exited {
            self.thread_exited(now, id);
        }
    }

    /// The audit (BPF events): up to `AUDIT_READS` watched threads the agent believes blocked
    /// — not armed nor asleep in the fair class (the kernel runs such a thread at its wake,
    /// and its switch-in then tells a missed wake at once) and not in a process the agent
    /// stopped — are read from /proc, round robin; one found runnable had its wake missed by
    /// every program (crate::bpf: on this VM a hard-interrupt wake while a thread of PID 1 is
    /// current goes untraced now and then, its switch-in too, in ftrace as well), and is told
    /// as woken now (true: one was). Without it such a thread, parked (SCHED_IDLE) on a busy
    /// CPU, was seen only when the kernel next gave it a slice: up to seconds.
    fn audit(&mut self, now: Ns) -> bool {
        let from = self.audit_from;
        let candidates = self.tasks.range(from..).chain(self.tasks.range(..from)).filter(|(_, m)| self.audited(m));
        let ids: Vec<u32> = candidates.map(|(&id, _)| id).take(AUDIT_READS).collect();
        self.audit_from = ids.last().map_or(0, |&id| id.wrapping_add(1));
        // The state letter, not wchan (`StatFile::runnable`): wchan reads 0 for a sleeper
        // still on its run queue (a fair-class thread's dequeue is delayed on this kernel),
        // and the thread's block is already told.
        let found: Vec<u32> =
            ids.into_iter().filter(|id| self.tasks.get_mut(id).is_some_and(|m| m.stat.state().is_ok_and(|s| s == b'R'))).collect();
        if found.is_empty() {
            return false;
        }
        // Drained again: a thread whose wake was told since this pass's drain is no
        // longer believed blocked. (ttwu_do_wakeup sets TASK_RUNNING just before it traces
        // sched_wakeup: a wake read in that instant is counted as missed, harmlessly.)
        self.take_events(now);
        for id in found {
            let Some(m) = self.tasks.get_mut(&id) else { continue };
            if !m.run {
                m.run = true;
                m.woke_at.get_or_insert(now);
                self.missed_wakes += 1;
                self.evented.insert(id);
                if let Some(tr) = self.trace.as_mut() {
                    use std::io::Write;
                    let _ = writeln!(tr, "{} task{id} missed wake, found runnable by the audit", now / 1000);
                }
            }
        }
        true
    }

    /// Whether the audit reads `m`: watched, believed blocked, neither armed nor asleep in
    /// the fair class (as applied: the kernel runs it at its wake; on rt-app's video the
    /// audit's stat lines of such threads were an eighth of the dispatcher's time), not in
    /// a process the agent stopped.
    fn audited(&self, m: &super::Managed) -> bool {
        let runs_at_wake = matches!(m.applied, KState::Armed { .. } | KState::Sleeping { fair: true });
        m.watched && !m.run && !runs_at_wake && !self.groups.get(&m.pid).is_some_and(|g| g.stopped)
    }

    /// Makes process `pid` re-listed at the next pass.
    fn rescan_soon(&mut self, now: Ns, pid: i32) {
        self.rescans.retain(|&(_, p)| p != pid);
        self.rescans.insert((now, pid));
    }

    /// Reads the runnability and CPU time of the threads that need it and tells the
    /// dispatcher. Polling: runnability from /proc — every selected, armed or unsettled
    /// thread, and every parked one at every `PARKED_EVERY`-th pass (staggered) or while
    /// passes are far apart; BPF: from the events' flags, for the threads events named,
    /// the selected ones (their CPU use), the unsettled ones and those the map could not
    /// take (polled).
    fn poll(&mut self, now: Ns) {
        let bpf = matches!(self.source, Source::Bpf(_));
        let mut ids: Vec<u32> = Vec::new();
        if bpf {
            ids.extend(self.evented.iter());
            ids.extend(self.unsettled.iter());
            ids.extend(self.unwatched.iter());
            ids.extend((0..self.ncpus).filter_map(|c| self.drv.disp.running(CpuId(c))).map(|t| t.0));
            ids.sort_unstable();
            ids.dedup();
        } else {
            let all = self.quiet || self.backoff > 1;
            ids.extend(self.tasks.iter().filter_map(|(&id, m)| {
                let selected = matches!(self.drv.disp.state(TaskId(id)), TaskState::Running(_));
                let armed = matches!(m.want, KState::Armed { .. });
                let unsettled = m.want == KState::Untouched || m.applied != m.want;
                (all || selected || armed || unsettled || (self.passes + id as u64).is_multiple_of(PARKED_EVERY)).then_some(id)
            }));
        }
        self.evented.clear();
        let mut exited = Vec::new();
        for id in ids {
            if !self.read_task(now, id) {
                exited.push(id);
            }
        }
        for id in exited {
            self.thread_exited(now, id);
        }
    }

    /// Reads one managed thread (see `poll`) and tells the dispatcher what changed.
    /// False: the thread is gone.
    fn read_task(&mut self, now: Ns, id: u32) -> bool {
        let task = TaskId(id);
        let Some(m) = self.tasks.get_mut(&id) else {
            return true;
        };
        let stopped = self.groups.get(&m.pid).is_some_and(|g| g.stopped);
        // Runnable: as the BPF events last said if it is watched, else read from /proc. A
        // thread of a process the agent stopped is not read (it cannot block while
        // stopped): it stays as it was when the process was stopped.
        let runnable =
            if m.watched || stopped { Ok(m.run || m.applied == KState::Held) } else { m.stat.runnable().inspect(|&r| m.run = r) };
        // Its CPU time: as its block's event told it while it stays blocked (the
        // programs read it at the switch-out), else from schedstat.
        let told = m.blocked_cpu_ns.take().filter(|_| m.watched && !m.run);
        let cpu_now = match told {
            Some(ns) => Ok(ns.max(m.cpu_ns)),
            None => m.runtime.read(),
        };
        let (Ok(runnable), Ok(cpu_now)) = (runnable, cpu_now) else {
            return false;
        };
        let woke_at = m.woke_at.take();
        let ran = cpu_now.saturating_sub(m.cpu_ns);
        if ran > 0 {
            if let Some(g) = self.groups.get_mut(&m.pid) {
                g.read_since_timer = true;
            }
        }
        m.cpu_ns = cpu_now;
        m.read_at = now;
        m.unaccounted += ran;
        sample(&mut m.samples, now, cpu_now);
        // Real-time CPU is charged to the grants it ran under (crate::budget).
        if let Some(by) = std::mem::replace(&mut m.rt_since_read, m.rt) {
            if ran > 0 {
                m.episode_rt += ran;
                if let RtBy::Sched(s) = by {
                    if let Some(b) = self.sched_budgets.get_mut(&s.0) {
                        b.charge(now, ran);
                    }
                }
                let uid = self.groups.get(&m.pid).map_or(0, |g| g.uid);
                if let Some(b) = self.uid_budgets.get_mut(&uid) {
                    b.charge(now, ran);
                }
            }
        }
        // CPU given by a scheduler's decisions (its measured share, `ctl hierarchy`).
        let st = self.drv.disp.state(task);
        let decider = match st {
            TaskState::Running(_) => self.drv.disp.ran_by(task),
            _ => None,
        };
        if let Some(s) = std::mem::replace(&mut m.ran_under, decider) {
            if ran > 0 {
                let u = self.sched_use.entry(s.0).or_default();
                u.total += ran;
                sample(&mut u.samples, now, u.total);
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
        let cpu = match st {
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
                let since = woke_at.map(|w| (now as i64 - w as i64) / 1000);
                let _ = writeln!(tr, "{} {task} ran {ran} {st:?} -> runnable={runnable} (woke {since:?} us ago)", now / 1000);
            }
        }
        if runnable != st.is_runnable() {
            self.changes += 1;
            self.touch(id);
            if let (Some(t), Some(m)) = (self.chrome.as_mut(), self.tasks.get(&id)) {
                t.runnable(now, m.tid as u32, runnable);
            }
        }
        // An armed task is already running where it was armed (the kernel ran it the
        // instant it woke); a parked one was woken on the CPU the BPF event names, where
        // it runs if that CPU has nothing else: policies may prefer that CPU (`Wake::cpu`).
        let m = self.tasks.get_mut(&id).expect("read");
        let woke_on = m.woke_on.take();
        let armed = match m.want {
            KState::Armed { cpu } => Some(CpuId(cpu)),
            _ => None,
        };
        let ran_on = armed.or(woke_on.filter(|&c| c < self.ncpus).map(CpuId));
        // Woken and blocked again before this pass: the kernel ran it (armed, or asleep in
        // the fair class), and its run is replayed (a quiet wake, or a run shorter than
        // the dispatcher's wake-up).
        let quiet = armed.is_some() || m.quiet & crate::bpf::QUIET_WAKE != 0;
        let blocked_seen = std::mem::take(&mut m.blocked_seen);
        let pid = m.pid;
        if let (true, true, true, Some(woke)) = (runnable, st.is_runnable(), blocked_seen, woke_at) {
            self.replay_sleep(now, task, woke_on.filter(|&c| c < self.ncpus).map(CpuId), woke);
        } else if runnable && st == TaskState::Blocked {
            self.tell_wake(now, task, ran_on, woke_at.unwrap_or(now));
            self.rebalance(now, pid);
        } else if !runnable && st.is_runnable() {
            self.tell_block(now, task);
            self.rebalance(now, pid);
        } else if let (Some(cpu), Some(_), false) = (ran_on.filter(|_| quiet), woke_at, runnable) {
            self.replay_run(now, task, cpu);
        }
        true
    }

    /// Tells the dispatcher `task` woke (on `cpu`, if known), runnable since `since` (its
    /// wake's BPF time; the wait until its dispatch is its latency sample), with the
    /// weight it has as a runnable thread of its process.
    fn tell_wake(&mut self, now: Ns, task: TaskId, cpu: Option<CpuId>, since: Ns) {
        self.weight_at_wake(now, task.0);
        self.drv.disp.wake(now, task, Wake { voluntary: true, cpu, ..Wake::default() });
        if let Some(m) = self.tasks.get_mut(&task.0) {
            m.runnable_since = Some(since.min(now));
        }
    }

    /// Tells the dispatcher `task` blocked: its CPU needs a decision, and a voluntary
    /// block ends its warp episode (BVT §2.2).
    fn tell_block(&mut self, now: Ns, task: TaskId) {
        if let Some(cpu) = self.drv.disp.block(now, task, Block { voluntary: true }) {
            self.request_resched(cpu);
        }
        if let Some(m) = self.tasks.get_mut(&task.0) {
            m.runnable_since = None;
            m.episode_rt = 0;
        }
    }

    /// A quiet thread woke and blocked again since the last pass (a quiet wake, or a run
    /// shorter than the dispatcher's wake-up): the kernel ran it on `cpu` (where it was
    /// armed, or where it woke in the fair class) the instant it woke. The policy is told
    /// what happened, in order: the wake (and the decisions it leads to), the CPU it used
    /// (told at its dispatch, as for any run), the block. All at `now`: a pass runs on one clock. If the policy would not
    /// have run it, what it used stays untold until its next dispatch (see `poll`). No
    /// latency sample: the agent did not dispatch it, the kernel did.
    fn replay_run(&mut self, now: Ns, task: TaskId, cpu: CpuId) {
        self.changes += 1;
        self.replayed_runs += 1;
        self.touch(task.0);
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
        self.tell_block(now, task);
        if let Some(tr) = self.trace.as_mut() {
            use std::io::Write;
            let _ = writeln!(tr, "{} {task} replayed a run on {cpu}", now / 1000);
        }
    }

    /// A thread the dispatcher had runnable blocked and woke again since the last pass (a
    /// quiet block, or a loud one whose wake came before the pass), woken on `cpu` at
    /// `woke` (its BPF time): the policy is told what happened, in order — the block (a
    /// voluntary block ends a warp episode, BVT §2.2) and the decisions it leads to, then
    /// the wake, which the policy judges afresh. All at `now`, as `replay_run`.
    fn replay_sleep(&mut self, now: Ns, task: TaskId, cpu: Option<CpuId>, woke: Ns) {
        self.changes += 1;
        self.replayed_sleeps += 1;
        self.touch(task.0);
        self.tell_block(now, task);
        let Some(m) = self.tasks.get(&task.0) else { return };
        let (pid, tid) = (m.pid, m.tid as u32);
        if let Some(t) = self.chrome.as_mut() {
            t.runnable(now, tid, false);
        }
        driver::settle(self, now);
        self.tell_wake(now, task, cpu, woke);
        if let Some(t) = self.chrome.as_mut() {
            t.runnable(now, tid, true);
        }
        self.rebalance(now, pid);
        if let Some(tr) = self.trace.as_mut() {
            use std::io::Write;
            let _ = writeln!(tr, "{} {task} replayed a sleep, woken on {cpu:?}", now / 1000);
        }
    }

    /// The CPU-clock timers of these processes (the values their signals carried: pids)
    /// fired: their real-time, armed and quiet threads are read at this pass, and
    /// enforced, which sets the timer again from there (else a process whose threads'
    /// state did not change would be left without its bound: a fair-class thread whose
    /// blocks and wakes are all quiet then ran unseen).
    pub fn cpu_timers_fired(&mut self, tags: &[u64]) {
        for &t in tags {
            let Some(g) = i32::try_from(t).ok().and_then(|p| self.groups.get_mut(&p)).filter(|g| g.timer_at != 0) else {
                continue;
            };
            g.timer_at = 0;
            self.bounds_fired += 1;
            let ids: Vec<u32> = g
                .threads
                .values()
                .copied()
                .filter(|id| self.watch.contains(id) || self.tasks.get(id).is_some_and(|m| m.quiet != 0))
                .collect();
            self.evented.extend(&ids);
            self.dirty.extend(ids);
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
        if let Some(b) = before {
            self.dirty.insert(b.0);
        }
        if let Some(tr) = self.trace.as_mut() {
            use std::io::Write;
            let _ = writeln!(tr, "{} schedule cpu{c} {why:?} -> {d:?}", now / 1000);
        }
        if let Some(t) = self.chrome.as_mut() {
            let by = d.and_then(|d| Some((self.tasks.get(&d.task.0)?.tid as u32, self.drv.disp.sched_name(d.by).unwrap_or("?"))));
            t.decision(now, c, by);
        }
        self.slice_end[c as usize] = d.and_then(|d| d.slice).map(|s| now.saturating_add(s));
        if let Some(d) = d {
            self.dirty.insert(d.task.0);
            if let Some(m) = self.tasks.get_mut(&d.task.0) {
                m.last_cpu = Some(c);
                m.ran_under.get_or_insert(d.by);
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

#[cfg(all(test, vassal_bpf))]
mod tests {
    use super::*;
    use crate::kernel;
    use crate::wire::Answer;
    use std::collections::BTreeMap;
    use vassal_core::MS;

    /// The audit on the live kernel: a thread the agent believes blocked but that is
    /// runnable — as after a wake no tracepoint program was run for — is told as woken at
    /// the next audit, and the dispatcher has it runnable again; a thread that really
    /// sleeps stays blocked and is not counted.
    #[test]
    #[ignore = "needs root: scripts/test.sh runs it as root"]
    fn the_audit_finds_a_wake_every_program_missed() {
        let Some(src) = crate::bpf::EventSource::loaded_for_test() else { return };
        let t0 = kernel::now_ns();
        // Sleepers parked (SCHED_IDLE), the case the audit is for: one in the fair class
        // runs at its wake, and its switch-in tells the missed wake.
        let cfg = crate::config::Config { best_effort_sleep: crate::config::BestEffortSleep::Idle, ..Default::default() };
        let mut a = Agent::new(cfg, crate::guardian::Ledger::new().unwrap(), t0).unwrap();
        a.set_source(Source::Bpf(Box::new(src)));
        let spawn = |args: &[&str]| std::process::Command::new(args[0]).args(&args[1..]).spawn().unwrap();
        let mut spin = spawn(&["sh", "-c", "while :; do :; done"]);
        let mut sleep = spawn(&["sleep", "30"]);
        let (sp, sl) = (spin.id() as i32, sleep.id() as i32);
        std::thread::sleep(std::time::Duration::from_millis(50));
        let params = BTreeMap::new();
        for pid in [sp, sl] {
            let ans = a.join(t0, pid, None, 0, None, &params);
            assert!(matches!(ans, Answer::Joined { .. }), "{ans:?}");
        }
        let (spin_id, sleep_id) = (a.task_of(sp).unwrap(), a.task_of(sl).unwrap());
        let t1 = t0 + MS;
        a.pass(t1); // an audit is due at the first pass: none found (the agent's view is right)
        assert_eq!(a.missed_wakes, 0);
        assert!(a.drv.disp.state(spin_id).is_runnable() && !a.drv.disp.state(sleep_id).is_runnable());
        // Believed blocked, as when its block was told and its wake was not.
        a.tasks.get_mut(&spin_id.0).unwrap().run = false;
        a.evented.insert(spin_id.0);
        a.pass(t1 + MS);
        assert!(!a.drv.disp.state(spin_id).is_runnable(), "the agent believes it blocked");
        a.pass(t1 + AUDIT_EVERY);
        let (spin_runnable, sleep_runnable, missed) =
            (a.drv.disp.state(spin_id).is_runnable(), a.drv.disp.state(sleep_id).is_runnable(), a.missed_wakes);
        a.restore_all(kernel::now_ns());
        for c in [&mut spin, &mut sleep] {
            let _ = c.kill();
            let _ = c.wait();
        }
        assert!(spin_runnable, "the audit found the runnable thread");
        assert!(!sleep_runnable, "the sleeper stays blocked");
        assert_eq!(missed, 1);
    }
}
