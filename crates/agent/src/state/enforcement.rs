//! The dispatcher's decisions turned into kernel state, under real-time grants.
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
//!   SCHED_IDLE alone is not one: a task demoted from SCHED_FIFO to SCHED_IDLE leaves
//!   its CPU at once, but the kernel's fair class (EEVDF) places it at zero lag, i.e.
//!   *eligible*, and when the time-sharing task beside it has used its slice (at the next
//!   4 ms kernel tick, HZ = 250) EEVDF picks the idle task if it is the only eligible one,
//!   and slice protection (RUN_TO_PARITY) keeps it there until the following tick: one
//!   whole 4 ms tick per parking, whatever its weight (docs/agent.md, "Reservations"; the
//!   traces in docs/measurements/agent-2026-11-22.md, run F). The guardian continues a
//!   held process (the ledger names it);
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

use vassal_core::{Ns, TaskId, TaskState};

use super::{Agent, KState, Managed, RtBy, Source};
use crate::budget::Bucket;
use crate::config::BestEffortRun;
use crate::kernel::{self, RESET_ON_FORK};

impl Agent {
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
        let default = self.drv.disp.default_sched();
        let Some(m) = self.tasks.get(&id) else {
            return (None, 0);
        };
        let warped = m.params.get("warp").is_some_and(|&w| w > 0);
        let by = match self.drv.disp.state(task) {
            TaskState::Running(_) => match self.drv.disp.ran_by(task) {
                Some(s) if s != default => RtBy::Sched(s),
                _ if warped => RtBy::Warp,
                _ if self.cfg.best_effort_run == BestEffortRun::Fifo && m.uid == 0 => RtBy::BestEffort,
                _ => return (None, 0),
            },
            TaskState::Blocked => match self.drv.disp.owner(task) {
                Some(s) if s != default && !self.drv.disp.is_guest(task) => RtBy::Sched(s),
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
            let rate = self.drv.disp.usage(s).map_or(0, |u| u.demand_ppm());
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

    /// Lowers a non-root process's RLIMIT_RTTIME to the backstop (`rt_backstop`; SIGKILL
    /// at twice it), never raising it, after noting what it was in the process's template
    /// (every restore of the process, the guardian's too, gives it back). The
    /// kernel counts a thread's real-time CPU since it last woke: the agent's grants keep
    /// that below `rt_backstop` (a warp episode ends at the warp limit; a spent budget
    /// holds or demotes the task, and a hold is a stop, after which the count starts again).
    pub(super) fn set_backstop(&mut self, pid: i32) {
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

    /// Applies the dispatcher's decisions as kernel state (see the module documentation).
    pub(super) fn enforce(&mut self, now: Ns) {
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
            let want = match self.drv.disp.state(task) {
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

    /// Makes an armed process's wakes quiet, or not (pass.rs, "Quiet
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
        self.drv.disp.owner(task).is_some_and(|o| o != self.drv.disp.default_sched()) && !self.drv.disp.is_guest(task)
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
}
