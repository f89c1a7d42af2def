//! The dispatcher's decisions turned into kernel state, under real-time grants.
//!
//! **Kernel state of a managed thread** (recomputed after every change that may alter it,
//! applied only where it differs from what was applied last):
//! - *selected* (the dispatcher runs it on CPU c): bound to c; SCHED_FIFO `run_priority`
//!   under a real-time grant with budget left (below), else SCHED_OTHER (so unmanaged
//!   time-sharing work keeps its share: paper 002's 1 − r; `best_effort_run = "fifo"`
//!   gives root's best-effort tasks FIFO) — or held, if it is exclusive to a loaded
//!   scheduler whose declared share is spent. A best-effort selection of a thread that
//!   was asleep in the fair class (and unbound) is not bound: it runs where the kernel
//!   woke it (the policy hears that CPU as `Wake::cpu`), and the affinity calls at its
//!   selection and at its next block are saved (two per run of rt-app's video threads,
//!   in passes that preempt the workload's other threads);
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
//! - *sleeping* (blocked, best effort: no grant, not exclusive to a loaded scheduler):
//!   with its own affinity, not bound where it last ran, and (`best_effort_sleep`) in the
//!   fair class — SCHED_OTHER at its own nice, the default, for a task without a warp —
//!   or parked (SCHED_IDLE: a warped task, whose warp asks for the policy at its wake).
//!   In the fair class the kernel runs it the instant it wakes, on whichever CPU it
//!   chooses, as it would without the agent; with BPF events its wakes are
//!   quiet (as an armed thread's: the policy hears of the run at the next pass, bounded
//!   by its process's CPU-clock timer; pass.rs, "Quiet wakes and blocks"), so the
//!   dispatcher does not preempt the very thread that woke, and so are its blocks (and
//!   those of its unbound selection) while no runnable thread waits parked or held.
//!   Parked, it runs at once only on a CPU that has nothing else to run, and the pass its wake brings selects it there (the BPF
//!   event names the CPU: `Wake::cpu`) or elsewhere. Issue 17: rt-app's threads, bound
//!   where they last ran, waited for a pass whenever that CPU was busy, and parked, for
//!   the pass each wake brought (`real.rtapp_video`, docs/agent.md);
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
//! CPU used while real-time is charged at the next read of the thread's CPU time; a
//! timer on its process's CPU clock fires when the budget left is used up (at the
//! process's CPU time now plus the least budget left of its real-time threads: the
//! process clock counts all of them, so it fires no later than any one runs out), so a
//! grant ends within one kernel tick (4 ms at HZ = 250) of its end.
//!
//! **Held, per process.** A stop (SIGSTOP) stops every thread of a process: a thread is
//! held only while no other thread of its process is selected or armed; otherwise it is
//! parked (SCHED_IDLE: a soft cap, up to a kernel tick per parking) until the process can
//! be stopped.

use vassal_core::{Ns, TaskId, TaskState};

use super::{Agent, KState, Managed, RtBy, RunClass, Source};
use crate::budget::Bucket;
use crate::config::{BestEffortRun, BestEffortSleep};
use crate::kernel::{self, RESET_ON_FORK};

impl Agent {
    /// The warp time limit the agent enforces on a warped task's episode: its own
    /// `warp_limit`, and for a non-root owner never more than `max_warp_limit` (0, no
    /// limit, is root's only). `Ns::MAX`: none.
    fn warp_limit_of(&self, m: &Managed) -> Ns {
        let own = self.param(m.pid, Some(m.tid), "warp_limit").filter(|&l| l > 0).map(|l| l as Ns);
        match (self.groups.get(&m.pid).map_or(0, |g| g.uid), own) {
            (0, l) => l.unwrap_or(Ns::MAX),
            (_, l) => l.unwrap_or(Ns::MAX).min(self.cfg.max_warp_limit),
        }
    }

    /// Whether `m` has a warp (BVT §2.2: its own, or its process's).
    fn warped(&self, m: &Managed) -> bool {
        self.param(m.pid, Some(m.tid), "warp").is_some_and(|w| w > 0)
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
        let warped = self.warped(m);
        let uid = self.groups.get(&m.pid).map_or(0, |g| g.uid);
        let by = match self.drv.disp.state(task) {
            TaskState::Running(_) => match self.drv.disp.ran_by(task) {
                Some(s) if s != default => RtBy::Sched(s),
                _ if warped => RtBy::Warp,
                _ if self.cfg.best_effort_run == BestEffortRun::Fifo && uid == 0 => RtBy::BestEffort,
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
        let (window, episode_rt) = (self.cfg.rt_window, m.episode_rt);
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
            if rate == 0 {
                // A best-effort scheduler: never real-time (issue 17), nothing to refill.
                return (None, 0);
            }
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

    /// Applies the dispatcher's decisions as kernel state (see the module documentation)
    /// to the tasks whose state may have changed: those marked since the last call, those
    /// whose state depends on time (`Agent::watch`) and those not applied yet — or all of
    /// them after a change of the hierarchy. Then the declared shares (`enforce_shares`):
    /// if that takes tasks off the CPUs or gives them back, the driver decides again and
    /// the new decisions are applied too.
    pub(super) fn enforce(&mut self, now: Ns) {
        for _ in 0..3 {
            self.enforce_tasks(now);
            if !self.enforce_shares(now) {
                break;
            }
            vassal_core::driver::settle(self, now);
            self.take_notes();
        }
    }

    fn enforce_tasks(&mut self, now: Ns) {
        let mut ids: Vec<u32> = if std::mem::take(&mut self.all_dirty) {
            self.tasks.keys().copied().collect()
        } else {
            self.dirty.iter().chain(&self.watch).chain(&self.unsettled).copied().collect()
        };
        self.dirty.clear();
        ids.sort_unstable();
        ids.dedup();
        // Taken off a CPU before put on one: a thread selected where another was running
        // is then changed after the other was parked, so the kernel's preemption check at
        // its change sees the parked one (SCHED_IDLE) and switches at once.
        ids.sort_by_key(|&id| matches!(self.drv.disp.state(TaskId(id)), TaskState::Running(_)));
        self.throttled_until = None;
        let mut pids = Vec::with_capacity(ids.len());
        for id in ids {
            if let Some(pid) = self.enforce_task(now, id) {
                pids.push(pid);
            }
        }
        pids.sort_unstable();
        pids.dedup();
        for pid in pids {
            self.enforce_group(pid);
        }
        // No thread selected, armed or waiting for its state (polling backs off).
        let selected = (0..self.ncpus).any(|c| self.drv.disp.running(vassal_core::CpuId(c)).is_some_and(|t| self.tasks.contains_key(&t.0)));
        let armed = self.watch.iter().any(|id| self.tasks.get(id).is_some_and(|m| matches!(m.want, KState::Armed { .. })));
        self.quiet = !selected && !armed && self.unsettled.is_empty();
        self.tell_waiting();
    }

    /// Tells the BPF programs whether a runnable thread waits for a CPU — one the agent
    /// parked or held, or one whose kernel state is not applied yet —, when that changed:
    /// while one does, every block wakes the dispatcher (a quiet block could leave the
    /// CPU it frees to the kernel's choice, not the policy's, until the next pass).
    fn tell_waiting(&mut self) {
        let waiting = !self.waiting.is_empty() || !self.unsettled.is_empty();
        let Source::Bpf(src) = &mut self.source else {
            return;
        };
        if self.waiting_told != Some(waiting) {
            self.waiting_told = src.set_waiting(waiting).then_some(waiting);
        }
    }

    /// **Shares** (issue 17): a hard-time or reserved scheduler's tasks together get at
    /// most the share it declared (paper 000 §8), measured, not only checked when it was
    /// registered. Its budget (crate::budget) is charged with what its tasks used while
    /// real-time; once it is spent every task the scheduler owns is taken off every CPU
    /// (`Dispatcher::set_loaded(false)`: the scheduler's picks of them are refused, and
    /// the CPU goes to the schedulers below — nobody runs them, not even the default as
    /// guests), and given back when the budget holds a tenth of its window again (below).
    /// Returns whether any
    /// task was taken off or given back.
    fn enforce_shares(&mut self, now: Ns) -> bool {
        // Given back once the budget holds a tenth of its window (20 ms of CPU at the
        // default `rt_window`, or all it holds if less): the tasks then run in bursts of
        // that much rather than of one tick, which would cost a hold and a continue per
        // tick (three passes and two signals each).
        let tick = self.cfg.tick.max(self.cfg.rt_window / 10);
        let default = self.drv.disp.default_sched();
        let mut changed = false;
        // Given back: the budget refilled, or the task no longer has a budgeted owner.
        let back: Vec<u32> = self
            .unloaded
            .iter()
            .filter(|&(&id, &until)| {
                let owner = self.drv.disp.owner(TaskId(id));
                let budgeted = owner.filter(|&o| o != default).and_then(|o| self.drv.disp.usage(o)).is_some_and(|u| u.demand_ppm() > 0);
                until <= now || !budgeted
            })
            .map(|(&id, _)| id)
            .collect();
        for id in back {
            let owner = self.drv.disp.owner(TaskId(id)).filter(|&o| o != default);
            if let Some(until) =
                owner.and_then(|o| self.sched_budgets.get_mut(&o.0)).and_then(|b| b.ready_at(now, tick)).filter(|&t| t > now)
            {
                // Not yet: the budget was charged again meanwhile.
                self.unloaded.insert(id, until);
                continue;
            }
            self.unloaded.remove(&id);
            self.drv.disp.set_loaded(now, TaskId(id), true);
            self.touch(id);
            changed = true;
        }
        // Taken off: the tasks of each scheduler whose budget is spent.
        let spent: Vec<(u32, Ns)> = self
            .sched_budgets
            .iter_mut()
            .filter_map(|(&s, b)| (b.left(now) == 0).then(|| (s, b.ready_at(now, tick).unwrap_or(Ns::MAX))))
            .collect();
        for (s, until) in spent {
            let owned: Vec<u32> = self
                .watch
                .iter()
                .copied()
                .filter(|&id| self.drv.disp.owner(TaskId(id)).is_some_and(|o| o.0 == s) && !self.unloaded.contains_key(&id))
                .collect();
            for id in owned {
                self.drv.disp.set_loaded(now, TaskId(id), false);
                self.unloaded.insert(id, until);
                self.touch(id);
                changed = true;
            }
        }
        changed
    }

    /// How a best-effort selection of `id` runs: SCHED_OTHER at its own nice; selected
    /// by a loaded best-effort scheduler, a root-owned task at `loaded_best_effort_nice`
    /// (so the scheduler's choice holds against unmanaged time-sharing work; another
    /// user's task keeps its own nice: a stronger one would be a privilege).
    fn best_effort_nice(&self, id: u32) -> Option<i8> {
        let m = self.tasks.get(&id)?;
        let root = self.groups.get(&m.pid).is_some_and(|g| g.uid == 0);
        (root && self.decided_by_best_effort(TaskId(id))).then_some(self.cfg.loaded_best_effort_nice as i8)
    }

    /// Whether `task` runs by the decision of a loaded best-effort scheduler.
    fn decided_by_best_effort(&self, task: TaskId) -> bool {
        let default = self.drv.disp.default_sched();
        matches!(self.drv.disp.state(task), TaskState::Running(_))
            && self.drv.disp.ran_by(task).is_some_and(|s| s != default && self.drv.disp.usage(s) == Some(vassal_core::Usage::BestEffort))
    }

    /// One task's kernel state: what it should be, applied to its thread. Returns its
    /// process (whose stop and CPU-clock timer `enforce_group` then settles).
    fn enforce_task(&mut self, now: Ns, id: u32) -> Option<i32> {
        let task = TaskId(id);
        if !self.tasks.contains_key(&id) {
            return None;
        }
        let run_prio = self.cfg.run_priority;
        let fair_sleep = self.cfg.best_effort_sleep == BestEffortSleep::Fair;
        // Real time only under a grant with budget left (crate::budget): a selected task
        // without one runs best effort, or — exclusive to a loaded scheduler whose
        // declared share is spent — is held like a reservation outside its slots.
        let throttled = self.throttled_until;
        self.throttled_until = None;
        let (rt, left) = self.rt_grant(now, id);
        let held_back = self.throttled_until.is_some();
        self.throttled_until = match (throttled, self.throttled_until) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        // Held, not parked, when it must not run at all: exclusive to a loaded scheduler,
        // or taken off the CPUs because its scheduler's share is spent (SCHED_IDLE alone
        // would give it up to a kernel tick per parking).
        let capped = self.hard_capped(task) || self.unloaded.contains_key(&id);
        let nice = self.best_effort_nice(id);
        // A warp asks for the policy's decision at each wake (BVT §2.2): such a task
        // sleeps parked, its wakes loud.
        let warps = self.tasks.get(&id).is_some_and(|m| self.warped(m));
        // A best-effort scheduler's selection is never held: it has no share to spend.
        let be = self.decided_by_best_effort(task);
        let owned = self.drv.disp.owner(task).is_some_and(|o| o != self.drv.disp.default_sched());
        let m = self.tasks.get_mut(&id).expect("checked");
        let want = match self.drv.disp.state(task) {
            TaskState::Running(_) if rt.is_none() && capped && !be => KState::Held,
            TaskState::Running(c) => KState::Run { cpu: c.0, class: if rt.is_some() { RunClass::Fifo } else { RunClass::Other(nice) } },
            TaskState::Blocked if rt.is_some() => KState::Armed { cpu: m.last_cpu.unwrap_or(0) },
            TaskState::Blocked if !capped => KState::Sleeping { fair: fair_sleep && !warps },
            TaskState::Runnable if capped => KState::Held,
            _ => KState::Parked,
        };
        m.want = want;
        m.rt = rt;
        m.rt_left = if rt.is_some() { left } else { Ns::MAX };
        if rt.is_some() {
            m.rt_since_read = rt;
        }
        if let KState::Run { cpu, .. } = want {
            m.last_cpu = Some(cpu);
        }
        // A held thread is first parked; its process's stop makes it held.
        let goal = if want == KState::Held { KState::Parked } else { want };
        if m.applied != want && m.applied != goal {
            // Bound first, to the one CPU of a selected or armed thread; a thread already
            // bound there (it was selected, armed or parked there) only changes policy:
            // an affinity call is saved at every wake, block and parking.
            // A best-effort selection of a thread woken from fair-class sleep stays
            // where the kernel woke it (module documentation, *selected*).
            let woke_fair = m.applied == (KState::Sleeping { fair: true }) && m.bound.is_none();
            let cpu = match goal {
                KState::Run { class: RunClass::Other(None), .. } if woke_fair => None,
                KState::Run { cpu, .. } | KState::Armed { cpu } => Some(cpu),
                _ => None,
            };
            let mut r = Ok(());
            if let Some(cpu) = cpu.filter(|&c| m.bound != Some(c)) {
                r = kernel::set_affinity(m.tid, &kernel::one_cpu(cpu));
                if r.is_ok() {
                    m.bound = Some(cpu);
                }
            }
            // A sleeping thread waits with its own affinity (it may wake on any CPU).
            if matches!(goal, KState::Sleeping { .. }) && m.bound.is_some() {
                r = kernel::set_affinity(m.tid, &m.affinity0);
                if r.is_ok() {
                    m.bound = None;
                }
            }
            let tid = m.tid;
            // Already at SCHED_IDLE: parked, held (a continued held thread is parked), or
            // sleeping there (`best_effort_sleep = "idle"`).
            let idle = matches!(m.applied, KState::Parked | KState::Held | KState::Sleeping { fair: false });
            // Already at SCHED_OTHER and its own nice: it ran best effort, or slept in the
            // fair class.
            let fair_own =
                !m.niced && matches!(m.applied, KState::Run { class: RunClass::Other(None), .. } | KState::Sleeping { fair: true });
            // Its own nice, unless the agent set another (`niced`); a stronger one only
            // while a loaded best-effort scheduler selects it.
            let own_nice = |m: &mut Managed| -> std::io::Result<()> {
                if m.niced {
                    kernel::set_nice(m.tid, m.nice0 as i32)?;
                    m.niced = false;
                }
                Ok(())
            };
            let r = r.and_then(|_| match goal {
                KState::Run { class: RunClass::Fifo, .. } => kernel::set_policy(tid, libc::SCHED_FIFO | RESET_ON_FORK, run_prio),
                KState::Run { class: RunClass::Other(Some(n)), .. } => kernel::set_policy(tid, libc::SCHED_OTHER | RESET_ON_FORK, 0)
                    .and_then(|_| kernel::set_nice(tid, n as i32))
                    .map(|_| m.niced = true),
                KState::Run { class: RunClass::Other(None), .. } if fair_own => Ok(()),
                KState::Run { class: RunClass::Other(None), .. } if idle && m.run => {
                    // A runnable thread leaving SCHED_IDLE for SCHED_OTHER at the same
                    // nice: the kernel checks no preemption (same class, same priority),
                    // so it would wait for the next kernel tick (4 ms) behind whatever
                    // runs there, often the thread just parked. Its nice one step off
                    // while still idle, and back once SCHED_OTHER, is a priority change
                    // the kernel acts on at once (`prio_changed_fair`: wakeup_preempt).
                    // Its own nice: the one it had before the agent set one, else the
                    // one it has (a thread may set its own, as rt-app's do).
                    let own = if m.niced { Ok(m.nice0 as i32) } else { kernel::get_nice(tid) };
                    m.niced = false;
                    own.and_then(|n| {
                        kernel::set_nice(tid, if n < 19 { n + 1 } else { n - 1 })
                            .and_then(|_| kernel::set_policy(tid, libc::SCHED_OTHER | RESET_ON_FORK, 0))
                            .and_then(|_| kernel::set_nice(tid, n))
                    })
                }
                KState::Run { class: RunClass::Other(None), .. } => {
                    kernel::set_policy(tid, libc::SCHED_OTHER | RESET_ON_FORK, 0).and_then(|_| own_nice(m))
                }
                KState::Armed { .. } => kernel::set_policy(tid, libc::SCHED_FIFO | RESET_ON_FORK, run_prio + 1),
                KState::Sleeping { fair: true } if fair_own => Ok(()),
                KState::Sleeping { fair: true } => kernel::set_policy(tid, libc::SCHED_OTHER | RESET_ON_FORK, 0).and_then(|_| own_nice(m)),
                KState::Parked | KState::Sleeping { fair: false } if idle => Ok(()),
                KState::Parked | KState::Sleeping { fair: false } => kernel::set_policy(tid, libc::SCHED_IDLE | RESET_ON_FORK, 0),
                KState::Untouched | KState::Held => Ok(()),
            });
            match r {
                // Leaving held: the thread is parked now (its process's SIGCONT releases it).
                Ok(()) => m.applied = goal,
                Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
                Err(_) => self.kernel_errors += 1,
            }
        }
        let m = &self.tasks[&id];
        let (pid, settled) = (m.pid, m.applied == want || m.applied == goal);
        if settled {
            self.unsettled.remove(&id);
        } else {
            self.unsettled.insert(id);
        }
        // Runnable and kept off the CPUs: a block's CPU may be its (`tell_waiting`).
        if matches!(want, KState::Parked | KState::Held) && self.drv.disp.state(task) == TaskState::Runnable {
            self.waiting.insert(id);
        } else {
            self.waiting.remove(&id);
        }
        // Visited at every `enforce` while its state depends on time.
        if rt.is_some() || matches!(want, KState::Armed { .. } | KState::Held) || held_back || owned || self.unloaded.contains_key(&id) {
            self.watch.insert(id);
        } else {
            self.watch.remove(&id);
        }
        Some(pid)
    }

    /// A process's own state: its stop (a held thread, when none of its threads is
    /// selected or armed) or continuation, and its CPU-clock timer and quiet wakes.
    fn enforce_group(&mut self, pid: i32) {
        let Some(g) = self.groups.get(&pid) else {
            return;
        };
        let ids: Vec<u32> = g.threads.values().copied().collect();
        let wants: Vec<KState> = ids.iter().filter_map(|id| self.tasks.get(id)).map(|m| m.want).collect();
        let any_held = wants.contains(&KState::Held);
        let any_running = wants.iter().any(|w| matches!(w, KState::Run { .. } | KState::Armed { .. } | KState::Untouched));
        let stop = any_held && !any_running;
        if stop && !g.stopped {
            self.hold(pid, &ids);
        } else if !stop && g.stopped {
            self.continue_held(pid, &ids);
        }
        if self.groups.get(&pid).is_some_and(|g| g.stopped) {
            // Noted already, except a thread held since the stop.
            for &id in &ids {
                if let Some(m) = self.tasks.get_mut(&id).filter(|m| m.want == KState::Held && m.applied == KState::Parked) {
                    self.ledger.set_stopped(m.slot, Some(pid));
                    m.applied = KState::Held;
                }
            }
        }
        self.set_quiet(pid, &ids);
    }

    /// Makes the wakes, and blocks, of each thread of process `pid` quiet, or not
    /// (pass.rs, "Quiet wakes and blocks"), and sets the process's CPU-clock timer: one
    /// tick of CPU past what it has used when a thread's wakes are quiet, and at most the
    /// least real-time budget its threads may still use (crate::budget); disarmed when
    /// neither applies. Wakes are quiet only for an armed thread, or a best-effort one in
    /// the fair class without a warp — asleep there, or selected and running where the
    /// kernel woke it (unbound) —, whose blocks are quiet too (while no thread waits for
    /// a CPU: `tell_waiting`); never for one exclusive to a loaded scheduler, one the BPF
    /// map does not watch, or one whose process has no timer.
    fn set_quiet(&mut self, pid: i32, ids: &[u32]) {
        use crate::bpf::{QUIET_BLOCK, QUIET_WAKE};
        let tick = self.cfg.tick;
        let bpf = matches!(self.source, Source::Bpf(_));
        let has_timer = self.groups.get(&pid).is_some_and(|g| g.timer.is_some());
        let mut quiet_any = false;
        let mut least_left = Ns::MAX;
        let mut marks: Vec<(u32, u8)> = Vec::new();
        for &id in ids {
            let capped = self.hard_capped(TaskId(id));
            let Some(m) = self.tasks.get(&id) else { continue };
            let fair = QUIET_WAKE | QUIET_BLOCK;
            let bits = match m.want {
                KState::Armed { .. } => QUIET_WAKE,
                KState::Sleeping { fair: true } => fair,
                KState::Run { class: RunClass::Other(None), .. } if m.bound.is_none() && !self.warped(m) => fair,
                _ => 0,
            };
            let q = if bpf && has_timer && !capped && m.watched && m.applied == m.want { bits } else { 0 };
            quiet_any |= q & QUIET_WAKE != 0;
            if m.rt.is_some() {
                least_left = least_left.min(m.rt_left);
            }
            if q != m.quiet {
                marks.push((id, q));
            }
        }
        // Not quiet: the map first, then the timer; quiet: the timer first. A quiet wake
        // is never unbounded.
        for &(id, q) in marks.iter().filter(|(_, q)| *q == 0) {
            self.mark_quiet(id, q);
        }
        let Some(g) = self.groups.get_mut(&pid) else {
            return;
        };
        // Set from the process clock read now, but only when it is disarmed, when one of
        // the process's threads has run since it was set, when it now bounds quiet wakes
        // and did not, or when a budget is shorter than it was set for: else it stands
        // (a clock read and a timer call saved per pass for an armed video).
        let at = if quiet_any || least_left != Ns::MAX {
            let stale = g.timer_at == 0 || g.read_since_timer || quiet_any != g.timer_quiet || least_left < g.timer_left;
            if stale {
                let Ok(cpu) = g.clock.read() else {
                    return;
                };
                g.read_since_timer = false;
                g.timer_quiet = quiet_any;
                g.timer_left = least_left;
                let budget = if least_left == Ns::MAX { Ns::MAX } else { cpu.saturating_add(least_left.max(1)) };
                if quiet_any {
                    budget.min(cpu + tick)
                } else {
                    budget
                }
            } else {
                g.timer_at
            }
        } else {
            0
        };
        if g.timer_at != at && g.timer.is_some() {
            match g.timer.as_mut().map_or(Ok(()), |t| t.set(at)) {
                Ok(()) => g.timer_at = at,
                Err(_) => {
                    self.kernel_errors += 1;
                    return;
                }
            }
        }
        for &(id, q) in marks.iter().filter(|(_, q)| *q != 0) {
            self.mark_quiet(id, q);
        }
    }

    fn mark_quiet(&mut self, id: u32, bits: u8) {
        let Source::Bpf(src) = &mut self.source else {
            return;
        };
        if let Some(m) = self.tasks.get_mut(&id) {
            if src.set_quiet(m.tid, bits) {
                m.quiet = bits;
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

    /// Stops (SIGSTOP) process `pid`, whose held threads are parked, if one of them is
    /// really runnable: a process whose held threads all blocked already is only parked,
    /// so that a task that asked for a later time (`timed`) sleeps on its own timer and
    /// the next poll sees the block. The ledger names the process before the SIGSTOP
    /// (the guardian continues it).
    fn hold(&mut self, pid: i32, ids: &[u32]) {
        let mut runnable = false;
        for id in ids {
            match self.tasks.get_mut(id) {
                Some(m) if m.want == KState::Held => {
                    if m.applied != KState::Parked {
                        return;
                    }
                    runnable |= m.stat.runnable().unwrap_or(false);
                }
                _ => {}
            }
        }
        if !runnable {
            return;
        }
        for id in ids {
            if let Some(m) = self.tasks.get(id) {
                self.ledger.set_stopped(m.slot, Some(pid));
            }
        }
        match kernel::signal_process(pid, libc::SIGSTOP) {
            Ok(()) => {
                if let Some(g) = self.groups.get_mut(&pid) {
                    g.stopped = true;
                }
            }
            Err(e) => {
                for id in ids {
                    if let Some(m) = self.tasks.get(id) {
                        self.ledger.set_stopped(m.slot, None);
                    }
                }
                if e.raw_os_error() != Some(libc::ESRCH) {
                    self.kernel_errors += 1;
                }
            }
        }
    }

    /// Continues (SIGCONT) process `pid`, stopped by the agent, after its threads got their
    /// new states, and clears the ledger's note after it.
    fn continue_held(&mut self, pid: i32, ids: &[u32]) {
        match kernel::signal_process(pid, libc::SIGCONT) {
            Err(e) if e.raw_os_error() != Some(libc::ESRCH) => self.kernel_errors += 1,
            _ => {
                if let Some(g) = self.groups.get_mut(&pid) {
                    g.stopped = false;
                }
                for id in ids {
                    if let Some(m) = self.tasks.get_mut(id) {
                        self.ledger.set_stopped(m.slot, None);
                        if m.applied == KState::Held {
                            m.applied = KState::Parked;
                        }
                    }
                }
            }
        }
    }
}
