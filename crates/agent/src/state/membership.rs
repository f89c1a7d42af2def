//! Joining and leaving: which processes the agent manages, their threads, and the
//! parameters and messages each thread gets.
//!
//! **Threads are tasks, processes are groups** (issue 17). Every thread of a managed
//! process is one task of the dispatcher: listed at join, adopted as soon as it is seen
//! later (the BPF new-thread event, else the next rescan), forgotten when it exits (its
//! BPF exit event, or a failed read). The whole process is always managed — `ctl join
//! --tid` names one thread's scheduler and parameters, not a part of a process — so the
//! guardian's restore of a process (its template and sweep) never touches a thread the
//! agent did not manage. A process whose main thread exits is unmanaged (its remaining
//! threads restored), as before.
//!
//! **Parameters.** A process's parameters go to each of its threads, except where a
//! thread has its own (set with `--tid`). The **weight** is the process's, divided among
//! its *runnable* threads (a group weight, as Linux's group scheduling divides a group's
//! shares by its runnable load): while k of its threads are runnable each gets W/k, the
//! remainder spread one unit each over the lowest tids, so the process as a whole gets W
//! whenever it has work (`divided_weight`). Not BVT's two levels (paper 001 §2.5): there
//! a group is one aggregate "thread" at the upper level, which runs on one CPU at a time
//! — the very limit this issue removes. Not divided by the live threads either: a process
//! with one busy thread among many idle ones (a GUI, a browser) would get a fraction of
//! its weight. Weights are BVT's integers (1..2^20; a warp is measured in a weight-1
//! task's virtual time, so the agent cannot rescale them), so a thread's weight is at
//! least 1: a process of weight W with more than W runnable threads gets one unit per
//! runnable thread. Messages about a process (no `tid`): `param` and `warp` go to every
//! thread (a `param` also becomes the process's); `reserve` and `modify` divide the
//! utilisation among its live threads (each its own reservation; threads created later
//! have none, and run as the scheduler's guests, best effort); `free` goes to every
//! thread; requests about one activity — `set`, `set_at`, `deadline`, `avail` — go to
//! its main thread.
//!
//! **Originals.** Raised threads carry SCHED_RESET_ON_FORK, so a thread or child created
//! in between starts at SCHED_OTHER, nice 0 — but bound where its creator was bound, and
//! the child of a parked thread at SCHED_IDLE. So the ledger (crate::guardian) records,
//! besides each thread's original, the process's *template* (its main thread's original,
//! at join), and a thread adopted later gets as its original what it would have had
//! without the agent: inherited from its creator's original when a BPF event named the
//! creator, else from the template (`late_original`). Unmanaging a process restores each
//! recorded thread, then sets the threads it has that are not recorded yet from the
//! template (`unmanage`).

use std::collections::{BTreeMap, BTreeSet};

use vassal_core::{CpuSet, Ns, Reply, Request, SchedId, Sender, TaskId, CPU_PPM};

use super::{Agent, Group, KState, Managed, Source};
use crate::kernel::{self, CpuClock, RunTime, StatFile, RESET_ON_FORK};
use crate::wire::Answer;

/// A process's recorded parameters and its threads' own (`Agent::saved_params`).
type SavedParams = (BTreeMap<String, i64>, Vec<(u32, BTreeMap<String, i64>)>);

/// Thread `rank` (0-based, in tid order) of `k` runnable threads sharing weight `w`: w/k,
/// and one more for the first w mod k (so they add up to w), at least 1.
pub fn divided_weight(w: i64, k: usize, rank: usize) -> i64 {
    let k = k.max(1) as i64;
    let extra = i64::from((rank as i64) < w.rem_euclid(k));
    (w.div_euclid(k) + extra).max(1)
}

impl Agent {
    /// Starts managing `pid` (owned by `uid`): its threads' states, and its template (its
    /// main thread's state, for the threads it creates later: crate::guardian), go into
    /// the ledger before anything is changed, and the default scheduler gets each thread
    /// with the process's `params`.
    fn manage(&mut self, now: Ns, pid: i32, uid: u32, params: &BTreeMap<String, i64>) -> Result<(), String> {
        let clock = CpuClock::of_process(pid).map_err(|e| format!("process {pid}: {e}"))?;
        let tids = kernel::threads(pid).map_err(|e| format!("process {pid}: {e}"))?;
        let mut threads = Vec::new();
        let mut failed = None;
        for tid in tids {
            match self.adopt_thread(now, pid, tid, None) {
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
            self.ledger.forget_process(pid);
            return Err(e);
        }
        // The bound of quiet wakes and of real-time budgets (its signal carries the pid).
        let timer = kernel::CpuTimer::new(&clock, pid as u32).ok();
        let default = self.drv.disp.default_sched();
        let group = Group {
            pid,
            uid,
            threads: BTreeMap::new(),
            params: params.clone(),
            sched: default,
            clock,
            timer,
            timer_at: 0,
            read_since_timer: false,
            timer_quiet: false,
            timer_left: Ns::MAX,
            stopped: false,
            rescanned: now,
            rescan_every: super::RESCAN,
            gone_cpu_ns: 0,
        };
        self.groups.insert(pid, group);
        self.schedule_rescan(now, pid);
        let mut added = Vec::new();
        for t in threads {
            let (tid, slot) = (t.tid, t.slot);
            match self.add_task(now, t) {
                Ok(id) => added.push(id),
                Err(e) => {
                    self.unwatch(tid);
                    self.ledger.clear(slot);
                    for id in added {
                        self.drop_task(now, id, true);
                    }
                    self.groups.remove(&pid);
                    self.ledger.forget_process(pid);
                    return Err(format!("process {pid} thread {tid}: {e}"));
                }
            }
        }
        // The kernel's backstop on a non-root process's real time (RLIMIT_RTTIME:
        // SIGXCPU, then SIGKILL), should the agent ever fail to demote it.
        if uid != 0 {
            self.set_backstop(pid);
        }
        self.rebalance(now, pid);
        Ok(())
    }

    /// Records thread `tid` of `pid`: its original state in the ledger — `original`, or
    /// (None) the state it has now — and watches it (BPF). A thread listed at join has its
    /// own state as original. One created later is given the state it would have had
    /// without the agent (`late_original`), because it inherited the state the agent gave
    /// its creator (one CPU, SCHED_IDLE: SCHED_RESET_ON_FORK resets neither).
    fn adopt_thread(&mut self, now: Ns, pid: i32, tid: i32, original: Option<kernel::SchedState>) -> Result<Managed, String> {
        let start = kernel::start_time(tid).map_err(|e| e.to_string())?;
        let state = kernel::get_sched(tid).map_err(|e| e.to_string())?;
        // SCHED_DEADLINE parameters cannot be saved and restored with sched_setscheduler.
        if state.policy & !RESET_ON_FORK == libc::SCHED_DEADLINE {
            return Err("a SCHED_DEADLINE thread cannot be managed".into());
        }
        let saved = original.unwrap_or(state);
        let mut stat = StatFile::open(tid).map_err(|e| e.to_string())?;
        let mut runtime = RunTime::open(tid).map_err(|e| e.to_string())?;
        let cpu_ns = runtime.read().map_err(|e| e.to_string())?;
        let slot = self.ledger.save(tid, start, &saved).ok_or("the guardian's ledger is full")?;
        // Its state is read after its tid went into the BPF map: every block or wake from
        // then on comes as an event, so the flag ends as the last event says. A full map
        // means it is polled.
        let watched = match &mut self.source {
            Source::Bpf(s) => s.watch(tid, pid),
            Source::Poll => false,
        };
        let run = stat.state().is_ok_and(|s| s == b'R');
        Ok(Managed {
            tid,
            pid,
            slot,
            stat,
            runtime,
            nice0: saved.nice.clamp(-20, 19) as i8,
            affinity0: saved.affinity,
            niced: false,
            applied: KState::Untouched,
            want: KState::Untouched,
            watched,
            run,
            bound: None,
            quiet: 0,
            blocked_seen: false,
            blocked_cpu_ns: None,
            cpu_ns,
            read_at: now,
            unaccounted: 0,
            joined_cpu_ns: cpu_ns,
            own: BTreeMap::new(),
            weight: 1,
            last_cpu: None,
            runnable_since: run.then_some(now),
            lat: Default::default(),
            samples: [(now, cpu_ns)].into(),
            woke_at: None,
            woke_on: None,
            rt: None,
            rt_left: Ns::MAX,
            rt_since_read: None,
            ran_under: None,
            episode_rt: 0,
            reserved_ppm: 0,
            notes: Default::default(),
        })
    }

    /// Makes an adopted thread a task of the dispatcher: the default scheduler gets it
    /// with its process's parameters, then it joins its process's scheduler (a refusal
    /// leaves it with the default, noted). Returns its task id.
    fn add_task(&mut self, now: Ns, m: Managed) -> Result<u32, String> {
        let g = self.groups.get(&m.pid).ok_or("its process is not managed")?;
        // Its process's parameters, the weight whole (`rebalance` divides it next).
        let params = g.params.clone();
        let (sched, uid, pid) = (g.sched, g.uid, g.pid);
        // The process's own affinity, as the ledger saved it.
        let affinity = CpuSet(self.ledger.saved(m.slot).2.affinity[0]);
        let weight = params.get("weight").copied().unwrap_or(1);
        let task = self.drv.disp.try_add_task(now, params, affinity, None, m.run).map_err(|(_, why)| why)?;
        if !m.watched {
            self.unwatched.insert(task.0);
        }
        let (tid, id) = (m.tid, task.0);
        self.by_tid.insert(tid, task);
        let mut m = m;
        m.weight = weight;
        self.tasks.insert(id, m);
        self.groups.get_mut(&pid).expect("checked").threads.insert(tid, id);
        self.touch(id);
        if sched != self.drv.disp.default_sched() {
            let r = self.drv.disp.message(now, sched, Sender { task: Some(task), uid }, task, &Request::Join);
            if let Reply::Refused(why) = r {
                let name = self.drv.disp.sched_name(sched).unwrap_or("?").to_string();
                self.note(id, format!("agent: thread {tid} stays with the default scheduler: '{name}' refused it: {why}"));
            }
        }
        Ok(id)
    }

    /// After task `id` moved to another scheduler: the new owner got the parameters the
    /// task was created with (`on_attach`), so every parameter given since — its
    /// process's and its own — is told again (refusals ignored: a scheduler may not know
    /// a parameter), and its weight at the next `rebalance`.
    fn resend_params(&mut self, now: Ns, id: u32) {
        let Some(m) = self.tasks.get_mut(&id) else {
            return;
        };
        let Some(g) = self.groups.get(&m.pid) else {
            return;
        };
        if m.own.contains_key("weight") || g.params.contains_key("weight") {
            m.weight = 0;
        }
        let mut params = g.params.clone();
        params.extend(m.own.iter().map(|(k, v)| (k.clone(), *v)));
        params.remove("weight");
        let uid = g.uid;
        let task = TaskId(id);
        let owner = self.drv.disp.owner(task).unwrap_or(self.drv.disp.default_sched());
        for (name, value) in params {
            let _ = self.drv.disp.message(now, owner, Sender { task: Some(task), uid }, task, &Request::Param { name, value });
        }
    }

    /// Adopts a thread of a managed process found after its join (a BPF new-thread event
    /// naming `creator`, or a rescan), with the original it would have had without the
    /// agent.
    pub(super) fn adopt_late(&mut self, now: Ns, pid: i32, tid: i32, creator: Option<i32>) -> Result<u32, String> {
        let original = self.late_original(pid, creator);
        let m = self.adopt_thread(now, pid, tid, original)?;
        let (tid, slot) = (m.tid, m.slot);
        match self.add_task(now, m) {
            Ok(id) => {
                self.rebalance(now, pid);
                Ok(id)
            }
            Err(e) => {
                self.unwatch(tid);
                self.ledger.clear(slot);
                Err(e)
            }
        }
    }

    /// The original state of a thread that process `pid` created after it joined: the
    /// state it inherited from its creator's original (`kernel::inherited`), if the
    /// creator is known (the BPF new-thread event names it) and recorded; else from the
    /// process's template, its main thread's original. A change the process itself made
    /// to the new thread before the agent adopted it is not kept.
    fn late_original(&self, pid: i32, creator: Option<i32>) -> Option<kernel::SchedState> {
        let recorded = creator
            .and_then(|c| self.by_tid.get(&c))
            .and_then(|t| self.tasks.get(&t.0))
            .filter(|m| m.pid == pid)
            .map(|m| self.ledger.saved(m.slot).2);
        recorded.or_else(|| self.ledger.template(pid)).map(|s| kernel::inherited(&s))
    }

    fn unwatch(&mut self, tid: i32) {
        if let Source::Bpf(s) = &mut self.source {
            s.unwatch(tid);
        }
    }

    /// Takes task `id` out of the dispatcher and forgets it; `restore`: its thread gets
    /// its original state back first (else it exited). Not its process.
    fn drop_task(&mut self, now: Ns, id: u32, restore: bool) -> Option<Managed> {
        if let Some(cpu) = self.drv.disp.remove_task(now, TaskId(id)) {
            self.request_resched(cpu);
        }
        let m = self.tasks.remove(&id)?;
        self.by_tid.remove(&m.tid);
        for set in [&mut self.evented, &mut self.dirty, &mut self.watch, &mut self.unsettled, &mut self.unwatched, &mut self.waiting] {
            set.remove(&id);
        }
        self.unloaded.remove(&id);
        self.unwatch(m.tid);
        if restore {
            // Continues the process too if the agent had stopped it (held).
            self.ledger.restore(m.slot);
        }
        self.ledger.clear(m.slot);
        Some(m)
    }

    /// A managed thread exited (its BPF exit event, or its /proc files are gone): it is
    /// forgotten; if it was its process's main thread, the process is unmanaged (its
    /// other threads restored: `unmanage`).
    pub(super) fn thread_exited(&mut self, now: Ns, id: u32) {
        let Some(m) = self.tasks.get(&id) else {
            return;
        };
        let (pid, tid) = (m.pid, m.tid);
        if tid == pid {
            self.unmanage(now, pid);
            return;
        }
        if let Some(m) = self.drop_task(now, id, false) {
            if let Some(g) = self.groups.get_mut(&pid) {
                g.threads.remove(&tid);
                g.gone_cpu_ns += m.cpu_ns.saturating_sub(m.joined_cpu_ns);
            }
            self.rebalance(now, pid);
        }
    }

    /// Checks a thread named with a call's `tid`: a managed thread of process `pid`.
    fn thread_of(&self, pid: i32, tid: i32) -> Result<u32, String> {
        match self.by_tid.get(&tid).and_then(|t| self.tasks.get(&t.0).map(|m| (t.0, m.pid))) {
            Some((id, p)) if p == pid => Ok(id),
            Some((_, p)) => Err(format!("thread {tid} belongs to process {p}, not {pid}")),
            None => Err(format!("thread {tid} of process {pid} is not managed")),
        }
    }

    /// The tasks a call about `pid` (and `tid`, if given) acts on: that thread, or every
    /// thread of the process.
    fn targets(&self, pid: i32, tid: Option<i32>) -> Result<Vec<u32>, String> {
        let g = self.groups.get(&pid).ok_or_else(|| format!("process {pid} is not managed"))?;
        match tid {
            Some(t) => Ok(vec![self.thread_of(pid, t)?]),
            None => Ok(g.threads.values().copied().collect()),
        }
    }

    /// JOIN: manage `pid` if it is not yet, then move it — or, with `tid`, that one thread
    /// — to `sched`. A process's `params` become its own (each thread gets them, the
    /// weight divided); a thread's become that thread's. Permission and ceilings were
    /// checked by the broker.
    pub fn join(
        &mut self,
        now: Ns,
        pid: i32,
        tid: Option<i32>,
        uid: u32,
        sched: Option<SchedId>,
        params: &BTreeMap<String, i64>,
    ) -> Answer {
        let fresh = !self.groups.contains_key(&pid);
        if fresh {
            // Its parameters are given below, to the scheduler it joins (not to the
            // default first, which may not know them: `--sched rt --param priority=20`).
            if let Err(e) = self.check_manageable(pid).and_then(|()| self.manage(now, pid, uid, &BTreeMap::new())) {
                self.settle(now);
                return Answer::refused(e);
            }
        }
        let ids = match self.targets(pid, tid) {
            Ok(ids) => ids,
            Err(e) => {
                if fresh {
                    self.unmanage(now, pid);
                }
                self.settle(now);
                return Answer::refused(e);
            }
        };
        // What the parameters were, to put back if one is refused.
        let saved = self.saved_params(pid, &ids);
        let target = sched.unwrap_or(self.drv.disp.default_sched());
        let mut moved: Vec<(u32, SchedId)> = Vec::new();
        for &id in &ids {
            let task = TaskId(id);
            let before = self.drv.disp.owner(task).unwrap_or(self.drv.disp.default_sched());
            let reply = self.drv.disp.message(now, target, Sender { task: Some(task), uid }, task, &Request::Join);
            self.touch(id);
            if let Reply::Refused(why) = reply {
                // Back where they were: a process moves whole or not at all.
                for (id, was) in moved {
                    let t = TaskId(id);
                    let _ = self.drv.disp.message(now, was, Sender { task: Some(t), uid }, t, &Request::Join);
                }
                if fresh {
                    self.unmanage(now, pid);
                }
                self.settle(now);
                return Answer::refused(why);
            }
            moved.push((id, before));
        }
        for &(id, was) in &moved {
            if self.drv.disp.owner(TaskId(id)) != Some(was) {
                self.resend_params(now, id);
            }
        }
        // New parameters go to the scheduler they joined, one by one. A refused one
        // changes nothing: the parameters are put back as they were, and the threads
        // back where they were, with them.
        for (k, v) in params {
            if let Err(why) = self.set_param(now, pid, tid, uid, k, *v) {
                self.restore_params(pid, saved);
                for &(id, was) in &moved {
                    let t = TaskId(id);
                    if self.drv.disp.owner(t) != Some(was) {
                        let _ = self.drv.disp.message(now, was, Sender { task: Some(t), uid }, t, &Request::Join);
                    }
                    self.resend_params(now, id);
                    self.touch(id);
                }
                if fresh {
                    self.unmanage(now, pid);
                } else {
                    self.rebalance(now, pid);
                }
                self.settle(now);
                return Answer::refused(format!("parameter {k}: {why}"));
            }
        }
        self.rebalance(now, pid);
        if tid.is_none() {
            if let Some(g) = self.groups.get_mut(&pid) {
                g.sched = target;
            }
        }
        self.settle(now);
        // Its owner now: `target`, unless a loaded module was ejected meanwhile (settle).
        let first = ids.first().map(|&id| TaskId(id));
        let owner = first.and_then(|t| self.drv.disp.owner(t)).unwrap_or(target);
        let name = self.drv.disp.sched_name(owner).unwrap_or("?").to_string();
        Answer::Joined { task: first.map_or(0, |t| t.0), sched: name }
    }

    /// LEAVE: back to the default scheduler (the process, or thread `tid`).
    pub fn leave(&mut self, now: Ns, pid: i32, tid: Option<i32>, uid: u32) -> Answer {
        let ids = match self.targets(pid, tid) {
            Ok(ids) => ids,
            Err(e) => return Answer::refused(e),
        };
        let mut answer = Answer::Ok;
        for id in ids {
            let task = TaskId(id);
            let owner = self.drv.disp.owner(task).unwrap_or(self.drv.disp.default_sched());
            let r = self.drv.disp.message(now, owner, Sender { task: Some(task), uid }, task, &Request::Leave);
            self.touch(id);
            if self.drv.disp.owner(task) != Some(owner) {
                self.resend_params(now, id);
            }
            if let Some(m) = self.tasks.get_mut(&id) {
                m.reserved_ppm = 0;
            }
            if !matches!(r, Reply::Ok) && answer == Answer::Ok {
                answer = r.into();
            }
        }
        if tid.is_none() {
            let default = self.drv.disp.default_sched();
            if let Some(g) = self.groups.get_mut(&pid) {
                g.sched = default;
            }
        }
        self.rebalance(now, pid);
        self.settle(now);
        answer
    }

    /// Stops managing `pid`, restoring its threads.
    pub fn release(&mut self, now: Ns, pid: i32) -> Answer {
        if !self.groups.contains_key(&pid) {
            return Answer::refused(format!("process {pid} is not managed"));
        }
        self.unmanage(now, pid);
        self.settle(now);
        Answer::Ok
    }

    /// Stops managing process `pid` and restores every thread of it: each recorded one to
    /// its original state (and continued, if the agent had stopped it), then the threads
    /// the ledger does not know yet (created since the last adoption) from the process's
    /// template (`Ledger::restore_process`), and its RLIMIT_RTTIME. Also when its main
    /// thread is gone: the process exited, or only its leader did, and the threads that
    /// leader left must not stay as the agent set them either (for a process that exited
    /// this finds nothing).
    pub(super) fn unmanage(&mut self, now: Ns, pid: i32) {
        let Some(g) = self.groups.remove(&pid) else {
            return;
        };
        self.rescans.remove(&(g.rescanned_due(), pid));
        let mut restored = Vec::with_capacity(g.threads.len());
        for (&tid, &id) in &g.threads {
            if self.drop_task(now, id, true).is_some() {
                restored.push(tid);
            }
        }
        // (A thread whose record said it still existed was restored; one gone is not
        // swept either: the sweep lists only live threads.)
        self.ledger.restore_process(pid, &restored);
    }

    /// Refuses to manage the mechanism itself (docs/agent.md, "Security model"): the
    /// agent, its guardian, PID 1 and kernel threads — parking any of them at SCHED_IDLE
    /// would stall the agent, its restore or the whole machine — and a thread id that is
    /// not a process's (clients name processes; a thread is named with `tid`).
    fn check_manageable(&self, pid: i32) -> Result<(), String> {
        if pid <= 0 {
            return Err(format!("no process {pid}"));
        }
        if pid == 1 {
            return Err("process 1 (init) is never managed".into());
        }
        let tgid = kernel::tgid(pid).map_err(|_| format!("no process {pid}"))?;
        if tgid != pid {
            return Err(format!("{pid} is a thread of process {tgid}; name the process (and the thread with --tid)"));
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

    /// When process `pid` is re-listed next, queued.
    fn schedule_rescan(&mut self, now: Ns, pid: i32) {
        let every = match self.source {
            Source::Bpf(_) => super::RESCAN_BPF,
            Source::Poll => super::RESCAN,
        };
        if let Some(g) = self.groups.get_mut(&pid) {
            self.rescans.remove(&(g.rescanned_due(), pid));
            g.rescanned = now;
            g.rescan_every = every;
            self.rescans.insert((now + every, pid));
        }
    }

    /// Re-lists a process's threads: new ones are adopted, with the original they would
    /// have had without the agent (`late_original`, from the template: a rescan does not
    /// know their creators); gone ones are forgotten. A process whose main thread is a
    /// zombie or gone is unmanaged.
    pub(super) fn rescan(&mut self, now: Ns, pid: i32) {
        self.schedule_rescan(now, pid);
        let Some(g) = self.groups.get(&pid) else {
            return;
        };
        let leader = g.threads.get(&pid).copied();
        let zombie = leader.and_then(|id| self.tasks.get_mut(&id)).is_none_or(|m| matches!(m.stat.state(), Ok(b'Z' | b'X') | Err(_)));
        if zombie {
            self.unmanage(now, pid);
            return;
        }
        let Ok(tids) = kernel::threads(pid) else {
            self.unmanage(now, pid);
            return;
        };
        let g = &self.groups[&pid];
        let live: BTreeSet<i32> = tids.iter().copied().collect();
        let gone: Vec<u32> = g.threads.iter().filter(|(t, _)| !live.contains(t)).map(|(_, &id)| id).collect();
        let new: Vec<i32> = tids.into_iter().filter(|t| !g.threads.contains_key(t)).collect();
        for id in gone {
            self.thread_exited(now, id);
        }
        for tid in new {
            let _ = self.adopt_late(now, pid, tid, None);
        }
    }

    /// Restores every managed process and forgets it (orderly shutdown).
    pub fn restore_all(&mut self, now: Ns) {
        let pids: Vec<i32> = self.groups.keys().copied().collect();
        for pid in pids {
            self.unmanage(now, pid);
        }
        self.ledger.restore_all();
        if let Some(t) = self.chrome.as_mut() {
            t.finish(now);
        }
        if let Some(tr) = self.trace.as_mut() {
            use std::io::Write;
            let _ = tr.flush();
        }
    }

    // ----- parameters and messages -----

    /// Sets parameter `name` of process `pid` (every thread without its own value; the
    /// weight divided) or of thread `tid` alone, through each thread's scheduler. Refused
    /// by one scheduler, it changes nothing: the recorded parameters are put back and the
    /// threads whose schedulers took it are given theirs again.
    fn set_param(&mut self, now: Ns, pid: i32, tid: Option<i32>, uid: u32, name: &str, value: i64) -> Result<(), String> {
        let ids = self.targets(pid, tid)?;
        let saved = self.saved_params(pid, &ids);
        let result = self.give_param(now, pid, tid, uid, name, value);
        if result.is_err() {
            self.restore_params(pid, saved);
            for id in ids {
                self.resend_params(now, id);
                self.touch(id);
            }
            self.rebalance(now, pid);
        }
        result
    }

    /// Process `pid`'s recorded parameters and those of its threads `ids`, to put back
    /// with `restore_params` when a later one is refused.
    fn saved_params(&self, pid: i32, ids: &[u32]) -> SavedParams {
        let group = self.groups.get(&pid).map(|g| g.params.clone()).unwrap_or_default();
        (group, ids.iter().filter_map(|&id| Some((id, self.tasks.get(&id)?.own.clone()))).collect())
    }

    /// Puts back what `saved_params` saved (the record only: the callers give the
    /// threads' schedulers their parameters again).
    fn restore_params(&mut self, pid: i32, (group, own): SavedParams) {
        if let Some(g) = self.groups.get_mut(&pid) {
            g.params = group;
        }
        for (id, o) in own {
            if let Some(m) = self.tasks.get_mut(&id) {
                m.own = o;
            }
        }
    }

    /// `set_param`'s work, recorded as it goes: the first refusal is the answer.
    fn give_param(&mut self, now: Ns, pid: i32, tid: Option<i32>, uid: u32, name: &str, value: i64) -> Result<(), String> {
        let ids = self.targets(pid, tid)?;
        match tid {
            Some(_) => {
                if let Some(m) = self.tasks.get_mut(&ids[0]) {
                    m.own.insert(name.to_string(), value);
                }
            }
            None => {
                if let Some(g) = self.groups.get_mut(&pid) {
                    g.params.insert(name.to_string(), value);
                }
            }
        }
        if name == "weight" {
            return self.rebalance_checked(now, pid);
        }
        let mut result = Ok(());
        for id in ids {
            if tid.is_none() && self.tasks.get(&id).is_some_and(|m| m.own.contains_key(name)) {
                continue;
            }
            let task = TaskId(id);
            let owner = self.drv.disp.owner(task).unwrap_or(self.drv.disp.default_sched());
            let r = self.drv.disp.message(now, owner, Sender { task: Some(task), uid }, task, &Request::Param { name: name.into(), value });
            self.touch(id);
            if let (Reply::Refused(why), true) = (r, result.is_ok()) {
                result = Err(why);
            }
        }
        result
    }

    /// Gives each thread of `pid` its share of the process's weight (`divided_weight`
    /// among its runnable threads without a weight of their own; a blocked thread keeps
    /// what it had until it wakes), telling only the schedulers of threads whose weight
    /// changes. A process without a weight (the scheduler's default) is left alone.
    pub(super) fn rebalance(&mut self, now: Ns, pid: i32) {
        let _ = self.rebalance_checked(now, pid);
    }

    fn rebalance_checked(&mut self, now: Ns, pid: i32) -> Result<(), String> {
        let Some(g) = self.groups.get(&pid) else {
            return Ok(());
        };
        let uid = g.uid;
        let own = |m: &Managed| m.own.get("weight").copied();
        let mut changes: Vec<(u32, i64)> = Vec::new();
        if let Some(w) = g.params.get("weight").copied() {
            // Runnable ones divide it; a blocked one waits for its wake (`pass`).
            let sharing: Vec<u32> = g
                .threads
                .values()
                .copied()
                .filter(|&id| self.tasks.get(&id).is_some_and(|m| own(m).is_none()))
                .filter(|&id| self.drv.disp.state(TaskId(id)).is_runnable())
                .collect();
            let k = sharing.len();
            for (rank, &id) in sharing.iter().enumerate() {
                changes.push((id, divided_weight(w, k, rank)));
            }
            if k == 0 {
                // None runnable: each gets what it would have as the first to wake.
                for &id in g.threads.values() {
                    if self.tasks.get(&id).is_some_and(|m| own(m).is_none()) {
                        changes.push((id, w.max(1)));
                    }
                }
            }
        }
        for &id in g.threads.values() {
            if let Some(w) = self.tasks.get(&id).and_then(own) {
                changes.push((id, w));
            }
        }
        let mut result = Ok(());
        for (id, w) in changes {
            if self.tasks.get(&id).is_none_or(|m| m.weight == w) {
                continue;
            }
            let r = self.give_weight(now, id, uid, w);
            self.touch(id);
            if let (Reply::Refused(why), true) = (r, result.is_ok()) {
                result = Err(why);
            }
        }
        result
    }

    /// The weight `id` would get if it were runnable now, with the others as they are
    /// (set before its wake is told, so the policy judges the wake with it).
    pub(super) fn weight_at_wake(&mut self, now: Ns, id: u32) {
        let Some(m) = self.tasks.get(&id) else {
            return;
        };
        let pid = m.pid;
        if m.own.contains_key("weight") || self.groups.get(&pid).is_none_or(|g| !g.params.contains_key("weight")) {
            return;
        }
        // Counted as runnable by `rebalance` once the dispatcher has the wake; before it,
        // the thread's share is computed as if it were.
        let g = &self.groups[&pid];
        let w = g.params["weight"];
        let mut sharing: Vec<i32> = g
            .threads
            .iter()
            .filter(|&(_, &i)| {
                i == id
                    || (self.tasks.get(&i).is_some_and(|m| !m.own.contains_key("weight")) && self.drv.disp.state(TaskId(i)).is_runnable())
            })
            .map(|(&t, _)| t)
            .collect();
        sharing.sort_unstable();
        let tid = self.tasks[&id].tid;
        let rank = sharing.iter().position(|&t| t == tid).unwrap_or(0);
        let want = divided_weight(w, sharing.len(), rank);
        if self.tasks[&id].weight != want {
            let uid = g.uid;
            self.give_weight(now, id, uid, want);
        }
    }

    /// Tells thread `id`'s scheduler its weight is `w` (as `uid` asks) and, unless it
    /// refuses, records it as the thread's weight.
    fn give_weight(&mut self, now: Ns, id: u32, uid: u32, w: i64) -> Reply {
        let task = TaskId(id);
        let owner = self.drv.disp.owner(task).unwrap_or(self.drv.disp.default_sched());
        let r =
            self.drv.disp.message(now, owner, Sender { task: Some(task), uid }, task, &Request::Param { name: "weight".into(), value: w });
        if !matches!(r, Reply::Refused(_)) {
            if let Some(m) = self.tasks.get_mut(&id) {
                m.weight = w;
            }
        }
        r
    }

    /// MessageToScheduler about process `pid` — or thread `tid` of it — to scheduler
    /// `sched` (to each thread's owner when None); see the module documentation for which
    /// threads a request about a process goes to.
    pub fn message(&mut self, now: Ns, sched: Option<SchedId>, pid: i32, tid: Option<i32>, uid: u32, req: &Request) -> Answer {
        let ids = match self.targets(pid, tid) {
            Ok(ids) => ids,
            Err(e) => return Answer::refused(e),
        };
        if let Request::Param { name, value } = req {
            let r = self.set_param(now, pid, tid, uid, name, *value);
            self.settle(now);
            return match r {
                Ok(()) => Answer::Ok,
                Err(why) => Answer::refused(why),
            };
        }
        // One activity's requests go to the main thread when no thread is named.
        let ids = match req {
            Request::Set { .. } | Request::SetAt { .. } | Request::Deadline { .. } | Request::Avail if tid.is_none() => {
                vec![self.groups[&pid].threads.get(&pid).copied().unwrap_or(ids[0])]
            }
            _ => ids,
        };
        // A reservation of a process is divided among its threads.
        let n = ids.len().max(1);
        let req = match *req {
            Request::Reserve { util, period } if tid.is_none() => Request::Reserve { util: util / n as f64, period },
            Request::Modify { util, period } if tid.is_none() => Request::Modify { util: util / n as f64, period },
            ref r => r.clone(),
        };
        // A non-root uid's reservations together stay within `max_rt_per_uid`.
        let reserve = match req {
            Request::Reserve { util, .. } | Request::Modify { util, .. } if util.is_finite() && util > 0.0 => {
                Some((util.min(1.0) * CPU_PPM as f64).round() as u64)
            }
            _ => None,
        };
        if let (Some(ppm), true) = (reserve, uid != 0) {
            let owner = self.groups[&pid].uid;
            let others: u64 = self
                .tasks
                .iter()
                .filter(|(t, m)| !ids.contains(t) && self.groups.get(&m.pid).is_some_and(|g| g.uid == owner))
                .map(|(_, m)| m.reserved_ppm)
                .sum();
            let most = self.cfg.max_rt_per_uid_ppm;
            let mine = ppm * ids.len() as u64;
            if others + mine > most {
                return Answer::refused(format!(
                    "uid {owner} would hold {:.4} CPUs of reservations; a non-root uid may hold at most {:.4} (max_rt_per_uid)",
                    (others + mine) as f64 / CPU_PPM as f64,
                    most as f64 / CPU_PPM as f64
                ));
            }
        }
        let mut answer: Option<Answer> = None;
        let mut done = Vec::new();
        for &id in &ids {
            let task = TaskId(id);
            let to = sched.or(self.drv.disp.owner(task)).unwrap_or(self.drv.disp.default_sched());
            let r = self.drv.disp.message(now, to, Sender { task: Some(task), uid }, task, &req);
            self.touch(id);
            if let Some(m) = self.tasks.get_mut(&id) {
                match (&r, &req) {
                    (Reply::Ok, Request::Reserve { .. } | Request::Modify { .. }) => m.reserved_ppm = reserve.unwrap_or(0),
                    // Freed, or refused because it was removed already: nothing held either way.
                    (_, Request::Free) => m.reserved_ppm = 0,
                    _ => {}
                }
            }
            if let Reply::Refused(_) = r {
                // A divided reservation is made for every thread or for none.
                if matches!(req, Request::Reserve { .. }) {
                    for &d in &done {
                        let t = TaskId(d);
                        let _ = self.drv.disp.message(now, to, Sender { task: Some(t), uid }, t, &Request::Free);
                        if let Some(m) = self.tasks.get_mut(&d) {
                            m.reserved_ppm = 0;
                        }
                    }
                    self.settle(now);
                    return r.into();
                }
                answer.get_or_insert(r.into());
                continue;
            }
            done.push(id);
            if answer.is_none() && !matches!(r, Reply::Ok) {
                answer = Some(r.into());
            }
        }
        self.settle(now);
        answer.unwrap_or(Answer::Ok)
    }

    /// Keeps a note about task `id` for `ctl tasks` (the last [`super::NOTES`]).
    pub(super) fn note(&mut self, id: u32, text: String) {
        if let Some(m) = self.tasks.get_mut(&id) {
            if m.notes.len() == super::NOTES {
                m.notes.pop_front();
            }
            m.notes.push_back(text);
        }
    }
}

impl Group {
    /// When its queued rescan is due (`Agent::rescans`).
    fn rescanned_due(&self) -> Ns {
        self.rescanned + self.rescan_every
    }
}

#[cfg(test)]
mod tests {
    use super::divided_weight;

    #[test]
    fn a_weight_is_divided_among_runnable_threads_and_adds_up() {
        // 12 over 5 threads: 3, 3, 2, 2, 2.
        let w: Vec<i64> = (0..5).map(|r| divided_weight(12, 5, r)).collect();
        assert_eq!(w, [3, 3, 2, 2, 2]);
        assert_eq!(w.iter().sum::<i64>(), 12);
        // One runnable thread gets it all.
        assert_eq!(divided_weight(12, 1, 0), 12);
        // Never below 1: weight 2 over 4 threads.
        assert_eq!((0..4).map(|r| divided_weight(2, 4, r)).collect::<Vec<_>>(), [1, 1, 1, 1]);
        assert_eq!(divided_weight(5, 0, 0), 5);
    }
}
