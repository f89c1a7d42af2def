//! Synchronisation between scripted tasks ([`Phase::Sync`]): mutexes with optional
//! priority inheritance, condition variables (wait, signal, broadcast — rt-app's
//! suspend/resume are a wait without a mutex and a broadcast), rt-app's barriers, a task
//! setting its own affinity or scheduling, and the rt-app timers several tasks share.
//! Made for rt-app's events (docs/rtapp.md), named after pthreads.
//!
//! Rules. A step is carried out while its task holds a CPU (`step_script` defers it
//! with an empty burst otherwise), so what it does happens when the thread would do it.
//! A task blocked here waits with `Wait::Sync` and no timer; whoever releases it calls
//! [`Sim::resume`] on it, so it goes on with its script. `unlock` hands the mutex to its
//! most important waiter (see [`SchedSel`]: higher scheduler, then larger `priority`,
//! then shorter `deadline`; first come first served among equals), which is woken
//! owning it. A condition variable wakes its waiters in arrival order; a woken waiter
//! that must take a mutex back queues for it if it is held. A barrier of `users` opens
//! when the last arrives (rt-app's count: `users − 1` must be waiting).
//!
//! Priority inheritance (`inherit`): a mutex holder runs with the scheduling of the most
//! important task waiting on any inheriting mutex it holds, while that is more important
//! than its own (its base: the last `Sched` step, else its creation); the boost follows
//! chains (a boosted holder waiting on another mutex boosts that one's holder) and ends
//! when the mutexes are released. A boost moves the holder to the donor's scheduler
//! (Request::Join) and sets the donor's parameters there (Request::Param), as
//! rt_mutex_setprio gives a holder its top waiter's priority; within the default
//! scheduler nothing is boosted (Linux does not reweight a CFS holder either).
//!
//! Invariants: a mutex's waiters are blocked tasks whose `waits_on` names it; a task is
//! in at most one wait list; a barrier's `waiting` is `users − 1 −` the tasks blocked on it.

use std::collections::{BTreeMap, VecDeque};

use vassal_core::{Ns, Request, TaskState};

use super::workload::Wait;
use super::Sim;
use crate::model::{Behaviour, Phase, Scenario, SchedSel, SyncOp};

#[derive(Default)]
struct Mutex {
    owner: Option<usize>,
    /// Blocked tasks, most important first.
    waiters: Vec<usize>,
    inherit: bool,
}

#[derive(Default)]
struct Barrier {
    waiting: i64,
    blocked: Vec<usize>,
}

#[derive(Default, Clone)]
struct TaskSync {
    /// Its own scheduling (None: as created, no parameters known).
    base: Option<SchedSel>,
    /// What it runs with now, if a boost or a `Sched` step changed it (None: as created).
    effective: Option<SchedSel>,
    /// The mutex it waits for.
    waits_on: Option<usize>,
}

/// The engine's synchronisation objects, interned by name.
#[derive(Default)]
pub(super) struct SyncState {
    mutex_ids: BTreeMap<String, usize>,
    mutexes: Vec<Mutex>,
    cond_ids: BTreeMap<String, usize>,
    /// Per condition variable: its waiters, each with the mutex to take back.
    conds: Vec<VecDeque<(usize, Option<usize>)>>,
    barrier_ids: BTreeMap<String, usize>,
    barriers: Vec<Barrier>,
    tasks: Vec<TaskSync>,
    /// The last expiry of each shared rt-app timer, by number.
    pub(super) timers: Vec<Option<Ns>>,
}

impl SyncState {
    /// The state for `sc`, or None if no task synchronises or shares a timer (then the
    /// engine keeps none).
    pub(super) fn of(sc: &Scenario) -> Option<Box<SyncState>> {
        let mut s = SyncState::default();
        let mut any = false;
        for t in &sc.tasks {
            let Behaviour::Script { phases, .. } = &t.behaviour else { continue };
            for p in phases {
                match p {
                    Phase::Sync(op) => {
                        any = true;
                        s.intern(op);
                    }
                    Phase::RtTimer { shared: true, .. } => any = true,
                    _ => {}
                }
            }
        }
        any.then(|| {
            s.tasks = vec![TaskSync::default(); sc.tasks.len()];
            Box::new(s)
        })
    }

    fn intern(&mut self, op: &SyncOp) {
        fn id(map: &mut BTreeMap<String, usize>, name: &str) -> usize {
            let n = map.len();
            *map.entry(name.to_string()).or_insert(n)
        }
        match op {
            SyncOp::Lock { mutex, inherit } => {
                let m = id(&mut self.mutex_ids, mutex);
                self.mutexes.resize_with(self.mutex_ids.len(), Mutex::default);
                self.mutexes[m].inherit |= inherit;
            }
            SyncOp::Unlock(m) => {
                id(&mut self.mutex_ids, m);
            }
            SyncOp::Wait { cond, mutex } | SyncOp::SignalWait { cond, mutex } => {
                id(&mut self.cond_ids, cond);
                id(&mut self.mutex_ids, mutex);
            }
            SyncOp::Signal(c) | SyncOp::Broadcast(c) | SyncOp::Suspend(c) | SyncOp::Resume(c) => {
                id(&mut self.cond_ids, c);
            }
            SyncOp::Barrier { name, users } => {
                let b = id(&mut self.barrier_ids, name);
                self.barriers.resize_with(self.barrier_ids.len(), Barrier::default);
                self.barriers[b].waiting = *users as i64 - 1;
            }
            SyncOp::Affinity(_) | SyncOp::Sched(_) | SyncOp::Init(_) => {}
        }
        self.mutexes.resize_with(self.mutex_ids.len(), Mutex::default);
        self.conds.resize_with(self.cond_ids.len(), VecDeque::new);
    }
}

/// A task's importance for priority inheritance: (level of its scheduler from the
/// bottom, priority, −deadline); larger is more important.
type Rank = (usize, i64, i64);

impl Sim {
    fn sync_state(&mut self) -> &mut SyncState {
        self.sync.as_deref_mut().expect("a scenario with sync steps has a sync state")
    }

    /// Carries out `op` for task `i`, which holds a CPU (or, for `Init`, any time).
    /// Returns false if the task now waits (`Wait::Sync`).
    pub(super) fn sync_step(&mut self, i: usize, op: &SyncOp) -> bool {
        let mut wake = Vec::new();
        let go_on = match op {
            SyncOp::Init(sel) => {
                let t = &mut self.sync_state().tasks[i];
                if t.base.is_none() {
                    t.base = Some(sel.clone());
                }
                true
            }
            SyncOp::Lock { mutex, .. } => self.lock(i, mutex),
            SyncOp::Unlock(mutex) => {
                let m = self.sync_state().mutex_ids[mutex];
                self.unlock(i, m, &mut wake);
                true
            }
            SyncOp::Wait { cond, mutex } => {
                self.wait(i, cond, Some(mutex), &mut wake);
                false
            }
            SyncOp::SignalWait { cond, mutex } => {
                self.signal(cond, false, &mut wake);
                self.wait(i, cond, Some(mutex), &mut wake);
                false
            }
            SyncOp::Suspend(cond) => {
                self.wait(i, cond, None, &mut wake);
                false
            }
            SyncOp::Signal(cond) => {
                self.signal(cond, false, &mut wake);
                true
            }
            SyncOp::Broadcast(cond) | SyncOp::Resume(cond) => {
                self.signal(cond, true, &mut wake);
                true
            }
            SyncOp::Barrier { name, .. } => {
                let s = self.sync_state();
                let b = &mut s.barriers[s.barrier_ids[name]];
                if b.waiting <= 0 {
                    // the last arrival: everyone waiting goes on (rt-app broadcasts)
                    b.waiting += b.blocked.len() as i64;
                    wake.append(&mut b.blocked);
                    true
                } else {
                    b.waiting -= 1;
                    b.blocked.push(i);
                    false
                }
            }
            SyncOp::Affinity(set) => {
                let id = self.tasks[i].id;
                self.drv.disp.set_affinity(self.now, id, *set);
                true
            }
            SyncOp::Sched(sel) => {
                self.sync_state().tasks[i].base = Some(sel.clone());
                self.pi_refresh(i, 0);
                true
            }
        };
        if !go_on {
            self.tasks[i].wait = Wait::Sync;
        }
        for w in wake {
            self.resume(w);
        }
        go_on
    }

    fn lock(&mut self, i: usize, mutex: &str) -> bool {
        let now = self.now;
        let s = self.sync_state();
        let m = s.mutex_ids[mutex];
        match s.mutexes[m].owner {
            None => {
                s.mutexes[m].owner = Some(i);
                if s.mutexes[m].inherit && !s.mutexes[m].waiters.is_empty() {
                    self.pi_refresh(i, 0);
                }
                true
            }
            Some(o) if o == i => {
                let name = self.sc.tasks[i].name.clone();
                self.metrics.note(now, format!("{name}: locks mutex '{mutex}' it already holds: deadlocked (a pthread default mutex)"));
                false
            }
            Some(o) => {
                self.enqueue(m, i);
                if self.sync_state().mutexes[m].inherit {
                    self.pi_refresh(o, 0);
                }
                false
            }
        }
    }

    /// Queues blocked task `i` for mutex `m` in order of importance.
    fn enqueue(&mut self, m: usize, i: usize) {
        let r = self.rank(i);
        let waiters = self.sync_state().mutexes[m].waiters.clone();
        let ranks: Vec<Rank> = waiters.into_iter().map(|w| self.rank(w)).collect();
        let s = self.sync_state();
        let at = ranks.iter().position(|&x| x < r).unwrap_or(ranks.len());
        s.mutexes[m].waiters.insert(at, i);
        s.tasks[i].waits_on = Some(m);
    }

    /// Task `i` releases mutex `m`: its first waiter takes it (and is to be woken).
    fn unlock(&mut self, i: usize, m: usize, wake: &mut Vec<usize>) {
        let now = self.now;
        let s = self.sync_state();
        if s.mutexes[m].owner != Some(i) {
            let mutex = s.mutex_ids.iter().find(|(_, &v)| v == m).map(|(k, _)| k.clone()).unwrap_or_default();
            let name = self.sc.tasks[i].name.clone();
            self.metrics.note(now, format!("{name}: unlocks mutex '{mutex}' it does not hold (ignored)"));
            return;
        }
        let next = if s.mutexes[m].waiters.is_empty() { None } else { Some(s.mutexes[m].waiters.remove(0)) };
        s.mutexes[m].owner = next;
        let inherit = s.mutexes[m].inherit;
        if let Some(w) = next {
            s.tasks[w].waits_on = None;
            wake.push(w);
        }
        if inherit {
            self.pi_refresh(i, 0);
            if let Some(w) = next {
                self.pi_refresh(w, 0);
            }
        }
    }

    /// Task `i` waits on condition `cond`, releasing `mutex` (to take it back when woken).
    fn wait(&mut self, i: usize, cond: &str, mutex: Option<&String>, wake: &mut Vec<usize>) {
        let m = mutex.map(|m| self.sync_state().mutex_ids[m]);
        if let Some(m) = m {
            if self.sync_state().mutexes[m].owner == Some(i) {
                self.unlock(i, m, wake);
            }
        }
        let s = self.sync_state();
        let c = s.cond_ids[cond];
        s.conds[c].push_back((i, m));
    }

    /// Wakes the first waiter on `cond` (all with `all`); one that must take a mutex back
    /// takes it if free, else queues for it.
    fn signal(&mut self, cond: &str, all: bool, wake: &mut Vec<usize>) {
        let s = self.sync_state();
        let c = s.cond_ids[cond];
        let woken: Vec<(usize, Option<usize>)> =
            if all { s.conds[c].drain(..).collect() } else { s.conds[c].pop_front().into_iter().collect() };
        for (w, m) in woken {
            match m {
                None => wake.push(w),
                Some(m) => {
                    let s = self.sync_state();
                    match s.mutexes[m].owner {
                        None => {
                            s.mutexes[m].owner = Some(w);
                            wake.push(w);
                        }
                        Some(o) => {
                            self.enqueue(m, w);
                            if self.sync_state().mutexes[m].inherit {
                                self.pi_refresh(o, 0);
                            }
                        }
                    }
                }
            }
        }
    }

    /// Task `i`'s scheduling now: its effective one, else its base, else as created.
    fn sel(&mut self, i: usize) -> SchedSel {
        let t = &self.sync_state().tasks[i];
        t.effective
            .clone()
            .or_else(|| t.base.clone())
            .unwrap_or_else(|| SchedSel { scheduler: self.sc.tasks[i].scheduler.clone(), params: Vec::new() })
    }

    fn base(&mut self, i: usize) -> SchedSel {
        let b = self.sync_state().tasks[i].base.clone();
        b.unwrap_or_else(|| SchedSel { scheduler: self.sc.tasks[i].scheduler.clone(), params: Vec::new() })
    }

    /// The importance of `sel` for task `i` (its creation parameters when `sel` has none).
    fn rank_of(&self, i: usize, sel: &SchedSel) -> Rank {
        let scheds = self.drv.disp.schedulers();
        let level = match &sel.scheduler {
            None => 1,
            Some(n) => scheds.iter().position(|s| s.name == *n).map_or(0, |k| scheds.len() - k),
        };
        if level <= 1 {
            return (level, 0, 0); // the default scheduler orders no one for inheritance
        }
        let param = |k: &str| sel.params.iter().find(|(n, _)| n == k).map(|(_, v)| *v).or_else(|| self.sc.tasks[i].params.get(k).copied());
        (level, param("priority").unwrap_or(0), -param("deadline").unwrap_or(0))
    }

    fn rank(&mut self, i: usize) -> Rank {
        let sel = self.sel(i);
        self.rank_of(i, &sel)
    }

    /// Recomputes task `i`'s scheduling (its base, or its most important inheriting
    /// waiter's if that is more important), applies a change, and passes it on along the
    /// chain of mutexes.
    fn pi_refresh(&mut self, i: usize, depth: usize) {
        if depth > self.tasks.len() {
            return; // a cycle of waits (a deadlock): nothing more to pass on
        }
        let base = self.base(i);
        let mut best = (self.rank_of(i, &base), base, i);
        let owned: Vec<usize> = {
            let s = self.sync_state();
            s.mutexes.iter().filter(|m| m.inherit && m.owner == Some(i)).filter_map(|m| m.waiters.first().copied()).collect()
        };
        for w in owned {
            let sel = self.sel(w);
            let r = self.rank_of(w, &sel);
            if r > best.0 {
                best = (r, sel, w);
            }
        }
        let (_, mut target, donor) = best;
        if donor != i && target.params.is_empty() {
            // the donor runs with its creation parameters: pass those on
            target.params = ["priority", "period", "deadline"]
                .iter()
                .filter_map(|k| self.sc.tasks[donor].params.get(*k).map(|v| (k.to_string(), *v)))
                .collect();
        }
        let current = self.sync_state().tasks[i].effective.clone();
        if current.unwrap_or_else(|| SchedSel { scheduler: self.sc.tasks[i].scheduler.clone(), params: Vec::new() }) == target {
            return;
        }
        self.sync_state().tasks[i].effective = Some(target.clone());
        self.apply_sched(i, &target);
        let waits = self.sync_state().tasks[i].waits_on;
        if let Some(m) = waits {
            // its place in that queue may change, and the holder's boost with it
            let s = self.sync_state();
            s.mutexes[m].waiters.retain(|&w| w != i);
            self.enqueue(m, i);
            let s = self.sync_state();
            if let (true, Some(o)) = (s.mutexes[m].inherit, s.mutexes[m].owner) {
                self.pi_refresh(o, depth + 1);
            }
        }
    }

    /// Moves task `i` to `sel`'s scheduler (if not there) and sets its parameters. A
    /// scheduling with no parameters is the task's creation one: a task already in that
    /// scheduler rejoins it, which reads its creation parameters again.
    fn apply_sched(&mut self, i: usize, sel: &SchedSel) {
        let id = self.tasks[i].id;
        if matches!(self.drv.disp.state(id), TaskState::Dead) {
            return;
        }
        let default = self.drv.disp.default_sched();
        let want = match &sel.scheduler {
            None => Some(default),
            Some(n) => self.drv.disp.lookup(n),
        };
        let Some(want) = want else {
            let name = self.sc.tasks[i].name.clone();
            let to = sel.scheduler.clone().unwrap_or_default();
            self.metrics.note(self.now, format!("{name}: no scheduler '{to}' to move to"));
            return;
        };
        let to = sel.scheduler.clone().unwrap_or_else(|| self.sc.default_name.clone());
        let here = self.drv.disp.owner(id) == Some(want);
        if !here || (sel.params.is_empty() && want != default) {
            if here {
                self.send(i, "", Request::Leave);
            }
            let req = if want == default { Request::Leave } else { Request::Join };
            self.send(i, &to, req);
        }
        for (k, v) in &sel.params {
            self.send(i, &to, Request::Param { name: k.clone(), value: *v });
        }
    }
}
