//! Property test of the Vassal dispatcher: random sequences of operations on 1–4 CPUs,
//! with the dispatcher's invariants (and the policies' own view of who holds which task)
//! checked after every step.

mod common;

use std::collections::{BTreeMap, BTreeSet};

use common::*;
use proptest::prelude::*;
use vassal_core::*;

#[derive(Clone, Debug)]
enum Op {
    AddTask {
        runnable: bool,
        affinity: u8,
    },
    Wake(usize),
    Block(usize),
    Schedule {
        cpu: u16,
        why: u8,
        ran: u16,
    },
    Account {
        cpu: u16,
        ran: u16,
    },
    Register {
        pct: u64,
        pos: u8,
        anchor: usize,
    },
    Unregister(usize),
    Join {
        task: usize,
        sched: usize,
        sender: u8,
    },
    Leave {
        task: usize,
        sched: usize,
        sender: u8,
    },
    Remove(usize),
    SetExclusive {
        task: usize,
        on: bool,
    },
    /// Scripts a scheduler's next pick: a task (an existing one when `task < 48`), on
    /// behalf of the task's owner when `by_owner`, with a zero, finite or no slice.
    Bogus {
        sched: usize,
        task: usize,
        slice: u8,
        by_owner: bool,
    },
    Silent {
        sched: usize,
        on: bool,
    },
    RefuseAttach {
        sched: usize,
        on: bool,
    },
    ExclusiveOnAttach {
        sched: usize,
        on: bool,
    },
    ExclusiveOnDispatch {
        sched: usize,
        on: bool,
    },
    HandOff {
        cpu: u16,
        task: usize,
    },
    Tick(u16),
    FireEvent(usize),
    Serve,
}

fn op() -> impl Strategy<Value = Op> {
    let i = 0usize..64;
    prop_oneof![
        4 => (any::<bool>(), any::<u8>()).prop_map(|(runnable, affinity)| Op::AddTask { runnable, affinity }),
        3 => i.clone().prop_map(Op::Wake),
        3 => i.clone().prop_map(Op::Block),
        6 => (0u16..4, 0u8..3, 0u16..1000).prop_map(|(cpu, why, ran)| Op::Schedule { cpu, why, ran }),
        1 => (0u16..4, 0u16..1000).prop_map(|(cpu, ran)| Op::Account { cpu, ran }),
        2 => (1u64..80, 0u8..3, i.clone()).prop_map(|(pct, pos, anchor)| Op::Register { pct, pos, anchor }),
        1 => i.clone().prop_map(Op::Unregister),
        4 => (i.clone(), i.clone(), 0u8..4).prop_map(|(task, sched, sender)| Op::Join { task, sched, sender }),
        2 => (i.clone(), i.clone(), 0u8..4).prop_map(|(task, sched, sender)| Op::Leave { task, sched, sender }),
        1 => i.clone().prop_map(Op::Remove),
        2 => (i.clone(), any::<bool>()).prop_map(|(task, on)| Op::SetExclusive { task, on }),
        3 => (i.clone(), i.clone(), 0u8..3, any::<bool>()).prop_map(|(sched, task, slice, by_owner)| Op::Bogus { sched, task, slice, by_owner }),
        1 => (i.clone(), any::<bool>()).prop_map(|(sched, on)| Op::Silent { sched, on }),
        1 => (i.clone(), any::<bool>()).prop_map(|(sched, on)| Op::RefuseAttach { sched, on }),
        1 => (i.clone(), any::<bool>()).prop_map(|(sched, on)| Op::ExclusiveOnAttach { sched, on }),
        1 => (i.clone(), any::<bool>()).prop_map(|(sched, on)| Op::ExclusiveOnDispatch { sched, on }),
        1 => (0u16..4, i.clone()).prop_map(|(cpu, task)| Op::HandOff { cpu, task }),
        1 => (0u16..4).prop_map(Op::Tick),
        1 => i.prop_map(Op::FireEvent),
        3 => Just(Op::Serve),
    ]
}

struct World {
    d: Dispatcher,
    ncpus: u16,
    now: Ns,
    /// Every task ever added, with the affinity the dispatcher gave it.
    added: Vec<(TaskId, CpuSet)>,
    removed: BTreeSet<TaskId>,
    /// Registered schedulers' probes; index 0 is the default.
    live: Vec<(SchedId, Probe)>,
    /// Unregistered schedulers' probes.
    gone: Vec<(SchedId, Probe)>,
    log: Log,
    next_name: u32,
}

impl World {
    fn new(ncpus: u16) -> World {
        let (d, defp, log) = dispatcher(ncpus);
        World {
            live: vec![(d.default_sched(), defp)],
            d,
            ncpus,
            now: 0,
            added: Vec::new(),
            removed: BTreeSet::new(),
            gone: Vec::new(),
            log,
            next_name: 0,
        }
    }

    fn task(&self, i: usize) -> Option<TaskId> {
        (!self.added.is_empty()).then(|| self.added[i % self.added.len()].0)
    }
    fn affinity(&self, t: TaskId) -> CpuSet {
        self.added[t.0 as usize].1
    }
    fn sched(&self, i: usize) -> (SchedId, Probe) {
        self.live[i % self.live.len()].clone()
    }
    fn loaded(&self, i: usize) -> Option<(SchedId, Probe)> {
        (self.live.len() > 1).then(|| self.live[1 + i % (self.live.len() - 1)].clone())
    }
    fn cpu(&self, c: u16) -> CpuId {
        CpuId(c % self.ncpus)
    }
    fn names(&self) -> Vec<SchedId> {
        self.d.schedulers().iter().map(|s| s.id).collect()
    }
    fn sender(&self, t: TaskId, kind: u8) -> Sender {
        match kind {
            0 | 1 => me(t),
            2 => Sender::ROOT,
            _ => Sender { task: Some(TaskId(t.0 + 1)), uid: USER },
        }
    }

    /// Checks a decision the dispatcher accepted against what it must have validated.
    fn check_dispatched(
        &self,
        cpu: CpuId,
        dp: &Dispatched,
        before_owner: Option<SchedId>,
        before_guest: bool,
    ) -> Result<(), TestCaseError> {
        let t = dp.task;
        prop_assert!(self.affinity(t).contains(cpu), "{t} run on {cpu} outside its affinity");
        prop_assert_ne!(dp.slice, Some(0));
        prop_assert_eq!(self.d.running(cpu), Some(t));
        prop_assert_eq!(self.d.state(t), TaskState::Running(cpu));
        let owner = before_owner.expect("a dispatched task was alive");
        prop_assert!(
            dp.by == owner || (dp.by == self.d.default_sched() && before_guest),
            "{t} owned by {owner} (guest {before_guest}) was run by {}",
            dp.by
        );
        Ok(())
    }

    fn step(&mut self, op: &Op) -> Result<(), TestCaseError> {
        self.now += 10;
        let now = self.now;
        match *op {
            Op::AddTask { runnable, affinity } => {
                let mask = CpuSet(affinity as u64 & CpuSet::first(self.ncpus).0);
                let t = self.d.add_task(now, TaskParams::new(), mask, None, runnable);
                prop_assert_eq!(t, TaskId(self.added.len() as u32));
                prop_assert_eq!(self.d.owner(t), Some(self.d.default_sched()));
                let eff = if mask.is_empty() { CpuSet::first(self.ncpus) } else { mask };
                self.added.push((t, eff));
            }
            Op::Wake(i) => {
                let Some(t) = self.task(i) else { return Ok(()) };
                let was = self.d.state(t);
                let woke = self.d.wake(now, t, Wake::default());
                prop_assert_eq!(woke, was == TaskState::Blocked);
                if woke {
                    prop_assert_eq!(self.d.state(t), TaskState::Runnable);
                }
            }
            Op::Block(i) => {
                let Some(t) = self.task(i) else { return Ok(()) };
                let was = self.d.state(t);
                let cpu = self.d.block(now, t, Block::default());
                match was {
                    TaskState::Running(c) => prop_assert_eq!(cpu, Some(c)),
                    _ => prop_assert_eq!(cpu, None),
                }
                if was.is_runnable() {
                    prop_assert_eq!(self.d.state(t), TaskState::Blocked);
                }
                if let Some(c) = cpu {
                    prop_assert_eq!(self.d.running(c), None);
                }
            }
            Op::Schedule { cpu, why, ran } => {
                let cpu = self.cpu(cpu);
                self.schedule(cpu, why, ran as Ns)?;
            }
            Op::Account { cpu, ran } => {
                let cpu = self.cpu(cpu);
                if let Some(t) = self.d.running(cpu) {
                    self.d.account(now, t, cpu, ran as Ns);
                }
            }
            Op::Register { pct, pos, anchor } => {
                let before = self.names();
                let (anchor_id, _) = self.sched(anchor);
                let pos = match pos {
                    0 => Position::Top,
                    1 => Position::Above(anchor_id),
                    _ => Position::Below(anchor_id),
                };
                let name = format!("s{}", self.next_name);
                self.next_name += 1;
                let (p, probe) = TestPolicy::boxed(&name, &self.log);
                match self.d.register(&name, p, reserved(pct), pos) {
                    Ok(id) => {
                        let after = self.names();
                        prop_assert_eq!(after.len(), before.len() + 1);
                        let at = after.iter().position(|&x| x == id).unwrap();
                        match pos {
                            Position::Top => prop_assert_eq!(at, 0),
                            Position::Above(a) => prop_assert_eq!(after[at + 1], a),
                            Position::Below(b) => prop_assert_eq!(after[at - 1], b),
                        }
                        prop_assert_eq!(*after.last().unwrap(), self.d.default_sched());
                        let demand: u64 = self.d.schedulers().iter().map(|s| s.usage.demand_ppm()).sum();
                        let cap = self.ncpus as u64 * CPU_PPM;
                        prop_assert!(cap - demand >= cap / 20, "best effort left under 5%");
                        self.live.push((id, probe));
                    }
                    Err(e) => {
                        prop_assert_eq!(self.names(), before, "refused registration {:?} changed the hierarchy", e);
                        if pos == Position::Below(self.d.default_sched()) {
                            prop_assert_eq!(e, RegisterError::DefaultScheduler);
                        }
                    }
                }
            }
            Op::Unregister(i) => {
                let (id, probe) = self.sched(i);
                let owned: Vec<TaskId> = self.added.iter().map(|&(t, _)| t).filter(|&t| self.d.owner(t) == Some(id)).collect();
                let running: Vec<CpuId> = owned
                    .iter()
                    .filter_map(|&t| match self.d.state(t) {
                        TaskState::Running(c) => Some(c),
                        _ => None,
                    })
                    .collect();
                effects(&mut self.d);
                match self.d.unregister(now, id) {
                    Ok(moved) => {
                        prop_assert_ne!(id, self.d.default_sched());
                        prop_assert_eq!(&moved, &owned);
                        for &t in &moved {
                            prop_assert_eq!(self.d.owner(t), Some(self.d.default_sched()));
                            prop_assert!(!self.d.is_guest(t));
                        }
                        let eff = effects(&mut self.d);
                        for c in running {
                            prop_assert!(eff.contains(&Effect::Resched(c)), "no resched of {c}: {eff:?}");
                        }
                        prop_assert!(!self.d.fire_event(now, id, 0));
                        let k = self.live.iter().position(|(x, _)| *x == id).unwrap();
                        self.live.remove(k);
                        self.gone.push((id, probe));
                    }
                    Err(e) => {
                        prop_assert_eq!(id, self.d.default_sched());
                        prop_assert_eq!(e, RegisterError::DefaultScheduler);
                    }
                }
            }
            Op::Join { task, sched, sender } => {
                let Some(t) = self.task(task) else { return Ok(()) };
                let (id, probe) = self.sched(sched);
                let before = self.d.owner(t);
                let from = self.sender(t, sender);
                let refuses = probe.knobs().refuse_attach.is_some() && id != self.d.default_sched();
                let r = self.d.message(now, id, from, t, &Request::Join);
                let allowed = from.task == Some(t) || from.is_root();
                if before.is_none() || !allowed || (refuses && before != Some(id)) {
                    prop_assert!(!r.is_ok(), "{r:?}");
                    prop_assert_eq!(self.d.owner(t), before);
                } else {
                    prop_assert_eq!(r, Reply::Ok);
                    prop_assert_eq!(self.d.owner(t), Some(id));
                }
            }
            Op::Leave { task, sched, sender } => {
                let Some(t) = self.task(task) else { return Ok(()) };
                let (id, _) = self.sched(sched);
                let before = self.d.owner(t);
                let from = self.sender(t, sender);
                let r = self.d.message(now, id, from, t, &Request::Leave);
                let allowed = from.task == Some(t) || from.is_root();
                if before.is_none() || !allowed {
                    prop_assert!(!r.is_ok(), "{r:?}");
                    prop_assert_eq!(self.d.owner(t), before);
                } else if r.is_ok() {
                    prop_assert_eq!(self.d.owner(t), Some(self.d.default_sched()));
                } else {
                    // only the default itself may refuse to take it back
                    prop_assert_eq!(self.d.owner(t), before);
                }
            }
            Op::Remove(i) => {
                let Some(t) = self.task(i) else { return Ok(()) };
                let was = self.d.state(t);
                let cpu = self.d.remove_task(now, t);
                match was {
                    TaskState::Running(c) => prop_assert_eq!(cpu, Some(c)),
                    _ => prop_assert_eq!(cpu, None),
                }
                prop_assert_eq!(self.d.state(t), TaskState::Dead);
                self.removed.insert(t);
            }
            Op::SetExclusive { task, on } => {
                let Some(t) = self.task(task) else { return Ok(()) };
                let Some(owner) = self.d.owner(t) else { return Ok(()) };
                let r = self.d.message(now, owner, me(t), t, &param("exclusive", on as i64));
                prop_assert_eq!(r, Reply::Ok);
                if owner != self.d.default_sched() {
                    // The default may refuse a guest only if told to; it never is here.
                    prop_assert_eq!(self.d.is_guest(t), !on);
                }
            }
            Op::Bogus { sched, task, slice, by_owner } => {
                let t = match self.task(task) {
                    Some(t) if task < 48 => t,
                    _ => TaskId(1000 + task as u32),
                };
                let owner = self.d.owner(t).and_then(|o| self.live.iter().find(|(id, _)| *id == o).cloned());
                let (_, probe) = match owner {
                    Some(o) if by_owner => o,
                    _ => self.sched(sched),
                };
                let slice = [Some(0), Some(MS), None][slice as usize];
                probe.script(Some(Decision { task: t, slice }));
            }
            Op::Silent { sched, on } => {
                self.sched(sched).1.knobs().silent = on;
            }
            Op::RefuseAttach { sched, on } => {
                if let Some((_, probe)) = self.loaded(sched) {
                    probe.knobs().refuse_attach = on.then(|| "full".to_string());
                }
            }
            Op::ExclusiveOnAttach { sched, on } => {
                if let Some((_, probe)) = self.loaded(sched) {
                    probe.knobs().exclusive_on_attach = on;
                }
            }
            Op::ExclusiveOnDispatch { sched, on } => {
                if let Some((_, probe)) = self.loaded(sched) {
                    probe.knobs().exclusive_on_dispatch = on;
                }
            }
            Op::HandOff { cpu, task } => {
                let Some(t) = self.task(task) else { return Ok(()) };
                let cpu = self.cpu(cpu);
                // The mechanism hands off only an idle CPU; make it idle first.
                if let Some(r) = self.d.running(cpu) {
                    self.d.account(now, r, cpu, 1);
                    self.d.block(now, r, Block::default());
                }
                let st = self.d.state(t);
                let owner = self.d.owner(t);
                match self.d.hand_off(now, cpu, t) {
                    Ok(dp) => {
                        prop_assert_eq!(st, TaskState::Runnable);
                        prop_assert_eq!(Some(dp.by), owner);
                        prop_assert!(self.affinity(t).contains(cpu));
                        prop_assert_eq!(self.d.running(cpu), Some(t));
                    }
                    Err(why) => {
                        let expect = match st {
                            TaskState::Dead => Refusal::NoSuchTask,
                            TaskState::Blocked => Refusal::NotRunnable,
                            TaskState::Running(c) => Refusal::RunningElsewhere(c),
                            TaskState::Runnable => Refusal::NotAllowed,
                        };
                        prop_assert_eq!(why, expect);
                        prop_assert_eq!(self.d.running(cpu), None);
                    }
                }
            }
            Op::Tick(cpu) => {
                let cpu = self.cpu(cpu);
                self.d.tick(now, cpu);
            }
            Op::FireEvent(i) => {
                let (id, _) = self.sched(i);
                prop_assert!(self.d.fire_event(now, id, 1));
                if let Some((gone, _)) = self.gone.first() {
                    prop_assert!(!self.d.fire_event(now, *gone, 1));
                }
            }
            Op::Serve => {
                let eff = effects(&mut self.d);
                for e in eff {
                    if let Effect::Resched(cpu) = e {
                        prop_assert!(cpu.0 < self.ncpus);
                        self.schedule(cpu, 1, 5)?;
                    }
                }
            }
        }
        take(&self.log);
        self.check()
    }

    fn schedule(&mut self, cpu: CpuId, why: u8, ran: Ns) -> Result<(), TestCaseError> {
        let now = self.now;
        let prev = self.d.running(cpu);
        if let Some(t) = prev {
            self.d.account(now, t, cpu, ran);
        }
        let why = [Preempt::SliceExpired, Preempt::Resched, Preempt::Yield][why as usize % 3];
        // What the dispatcher knew before the decision (the preempted task is runnable
        // again by the time anybody picks).
        let snapshot: BTreeMap<TaskId, (Option<SchedId>, bool)> =
            self.added.iter().map(|&(t, _)| (t, (self.d.owner(t), self.d.is_guest(t)))).collect();
        let refused = self.d.stats().refused;
        match self.d.schedule(now, cpu, why) {
            Some(dp) => {
                prop_assert_eq!(dp.prev, prev);
                // Owners do not change during a decision; guest hosting may (set_exclusive
                // in a callback), so accept a guest before or after.
                let (owner, guest) = snapshot[&dp.task];
                self.check_dispatched(cpu, &dp, owner, guest || self.d.is_guest(dp.task))?;
            }
            None => {
                prop_assert_eq!(self.d.running(cpu), None);
                if let Some(t) = prev {
                    prop_assert_eq!(self.d.state(t), TaskState::Runnable);
                }
            }
        }
        prop_assert!(self.d.stats().refused >= refused);
        Ok(())
    }

    /// The invariants, after every step.
    fn check(&self) -> Result<(), TestCaseError> {
        if let Err(e) = self.d.check_invariants() {
            return Err(TestCaseError::fail(e));
        }
        // No CPU runs two tasks (by construction) and no task runs on two CPUs.
        let mut seen = BTreeSet::new();
        for c in 0..self.ncpus {
            if let Some(t) = self.d.running(CpuId(c)) {
                prop_assert!(seen.insert(t), "{t} runs on two CPUs");
                prop_assert_eq!(self.d.state(t), TaskState::Running(CpuId(c)));
            }
        }
        for &(t, _) in &self.added {
            if let TaskState::Running(c) = self.d.state(t) {
                prop_assert_eq!(self.d.running(c), Some(t));
            }
        }
        // The live tasks are exactly those added minus those removed.
        prop_assert_eq!(self.d.task_count(), self.added.len());
        let live: BTreeSet<TaskId> = self.added.iter().map(|&(t, _)| t).filter(|&t| self.d.state(t) != TaskState::Dead).collect();
        let expect: BTreeSet<TaskId> = self.added.iter().map(|&(t, _)| t).filter(|t| !self.removed.contains(t)).collect();
        prop_assert_eq!(&live, &expect);
        // Every live task has exactly one registered owner, and the policies agree: it is
        // attached as owner to exactly that scheduler, and as a guest to the default iff
        // the dispatcher says it is a guest.
        let ids = self.names();
        prop_assert_eq!(ids.len(), self.live.len());
        let default = self.d.default_sched();
        let members: Vec<(SchedId, BTreeMap<TaskId, bool>)> = self.live.iter().map(|(id, p)| (*id, p.members())).collect();
        for &t in &live {
            let owner = self.d.owner(t).expect("a live task has an owner");
            prop_assert!(ids.contains(&owner), "{t} owned by unregistered {owner}");
            let holders: Vec<SchedId> = members.iter().filter(|(_, m)| m.get(&t) == Some(&false)).map(|(id, _)| *id).collect();
            prop_assert_eq!(holders, vec![owner], "owner attachments of {}", t);
            let guest_of_default = members.iter().any(|(id, m)| *id == default && m.get(&t) == Some(&true));
            prop_assert_eq!(guest_of_default, self.d.is_guest(t), "guest attachment of {}", t);
            if self.d.is_guest(t) {
                prop_assert_ne!(owner, default);
            }
            let guests_elsewhere = members.iter().any(|(id, m)| *id != default && m.get(&t) == Some(&true));
            prop_assert!(!guests_elsewhere);
        }
        for t in &self.removed {
            prop_assert_eq!(self.d.owner(*t), None);
            prop_assert!(!self.d.is_guest(*t), "dead {} is a guest", t);
        }
        // Dead tasks are held by nobody; unregistered schedulers hold nothing.
        for (_, m) in &members {
            for t in m.keys() {
                prop_assert!(live.contains(t), "{t} is dead but still attached");
            }
        }
        for (id, p) in &self.gone {
            prop_assert!(p.members().is_empty(), "unregistered {id} still holds {:?}", p.members());
        }
        Ok(())
    }
}

proptest! {
    // 512 cases unless PROPTEST_CASES says otherwise.
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(512),
        // tests/ has no lib.rs for proptest to place a regressions file next to.
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn random_operations_keep_the_invariants(ncpus in 1u16..=4, ops in proptest::collection::vec(op(), 1..80)) {
        let mut w = World::new(ncpus);
        w.check()?;
        for op in &ops {
            w.step(op)?;
        }
        // Drain: serve every pending decision until quiet; nothing breaks.
        for _ in 0..8 {
            w.step(&Op::Serve)?;
        }
    }
}
