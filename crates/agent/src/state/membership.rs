//! Joining and leaving: which processes the agent manages, and their threads.
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

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use vassal_core::{CpuSet, Ns, Reply, Request, SchedId, Sender, TaskId};

use super::{Agent, KState, Managed, Source, Thread};
use crate::kernel::{self, CpuClock, StatFile, RESET_ON_FORK};
use crate::wire::Answer;

impl Agent {
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
        match self.drv.disp.try_add_task(now, params.clone(), affinity, None, runnable) {
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
    pub(super) fn adopt_thread(&mut self, pid: i32, tid: i32, original: Option<kernel::SchedState>) -> Result<Thread, String> {
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
    pub(super) fn late_original(&self, id: u32, creator: Option<i32>) -> Option<kernel::SchedState> {
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
            let owner = self.drv.disp.owner(task).unwrap_or(self.drv.disp.default_sched());
            for (k, v) in params {
                let r = self.drv.disp.message(
                    now,
                    owner,
                    Sender { task: Some(task), uid },
                    task,
                    &Request::Param { name: k.clone(), value: *v },
                );
                if let Reply::Refused(why) = r {
                    self.settle(now);
                    return Answer::refused(format!("parameter {k}: {why}"));
                }
                if let Some(m) = self.tasks.get_mut(&task.0) {
                    m.params.insert(k.clone(), *v);
                }
            }
        }
        let target = sched.unwrap_or(self.drv.disp.default_sched());
        let reply = self.drv.disp.message(now, target, Sender { task: Some(task), uid }, task, &Request::Join);
        if let Reply::Refused(why) = reply {
            if fresh {
                self.unmanage(now, task);
            }
            self.settle(now);
            return Answer::refused(why);
        }
        self.settle(now);
        // Its owner now: `target`, unless a loaded module was ejected meanwhile (settle).
        let owner = self.drv.disp.owner(task).unwrap_or(target);
        let name = self.drv.disp.sched_name(owner).unwrap_or("?").to_string();
        Answer::Joined { task: task.0, sched: name }
    }

    /// LEAVE: back to the default scheduler.
    pub fn leave(&mut self, now: Ns, pid: i32, uid: u32) -> Answer {
        let Some(&task) = self.by_pid.get(&pid) else {
            return Answer::refused(format!("process {pid} is not managed"));
        };
        let owner = self.drv.disp.owner(task).unwrap_or(self.drv.disp.default_sched());
        let r = self.drv.disp.message(now, owner, Sender { task: Some(task), uid }, task, &Request::Leave);
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
    pub(super) fn unmanage(&mut self, now: Ns, task: TaskId) {
        if let Some(cpu) = self.drv.disp.remove_task(now, task) {
            self.request_resched(cpu);
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

    /// Re-lists a process's threads: new ones are saved, with the original they would
    /// have had without the agent (`late_original`, from the template: a rescan does not
    /// know their creators), and given the process's state.
    pub(super) fn rescan(&mut self, now: Ns, id: u32) {
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
}
