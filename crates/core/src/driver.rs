//! The driver: the one encoding of the mechanism's duties towards the [`Dispatcher`].
//!
//! Policies do not act; they ask (Vassal §4: SetSchedulerEvent, a reschedule). Every
//! mechanism — the simulator's engine, the Linux agent, the test harnesses — must carry
//! out what they asked in the same way, so the loop lives here once:
//!
//! 1. Effects ([`Dispatcher::drain_effects`]) are applied in the order drained:
//!    `SetEvent` arms the scheduler event (sched, token) at the time the mechanism's clock
//!    gives it ([`Hooks::event_time`]; the simulator rounds up to its tick), replacing the
//!    token's earlier one; `CancelEvent` disarms it; `Resched(cpu)` makes a decision on
//!    `cpu` pending.
//! 2. A CPU has at most one pending decision. Its reason is the first of
//!    `Preempt::SliceExpired` (the mechanism saw the slice end) or `Preempt::Yield` (the
//!    running task yielded) asked for it ([`Driver::request`]), else `Preempt::Resched`:
//!    a reschedule asked for by a policy does not hide why the running task stops.
//! 3. [`settle`] applies the effects, then makes the pending decision of the lowest CPU,
//!    then applies the effects that decision caused, and so on until nothing is pending.
//! 4. Every decision ([`decide`]) first has the mechanism account the task running on the
//!    CPU ([`Hooks::account`], which calls [`Dispatcher::account`]), then asks the
//!    dispatcher, then tells the mechanism what now runs ([`Hooks::dispatched`]).
//! 5. Livelock guard: a CPU takes at most [`RESCHED_LIMIT`] − 1 pending decisions at one
//!    instant; at the limit the mechanism is told once ([`Hooks::livelock`]) and further
//!    ones at that instant are dropped (a policy asking for a new decision every time it
//!    makes one would otherwise spin forever).
//! 6. A due scheduler event is delivered ([`fire`]) after [`Hooks::before_event`] (where
//!    the mechanism accounts the running tasks); then the mechanism settles.
//!
//! The timers are keyed ([`Timers`]): a re-armed or cancelled event leaves nothing queued,
//! so no generation counter is needed. A mechanism may keep its own timers in the same
//! table (`K`, `V`: the simulator's CPU timers, wake-ups, ...) so that its events and the
//! scheduler events at one instant come out in the order they were armed.

use std::convert::Infallible;

use crate::hierarchy::{Dispatched, Dispatcher};
use crate::ids::{CpuId, CpuSet, SchedId, TaskId};
use crate::policy::{Effect, Preempt};
use crate::time::Ns;
use crate::timers::{TimerKey, Timers};

/// Pending decisions one CPU may take at one instant before the driver stops honouring
/// them (see the module documentation, rule 5).
pub const RESCHED_LIMIT: u32 = 10_000;

/// A timer's key: a scheduler event, or one of the mechanism's own.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Key<K> {
    Event(SchedId, u64),
    Own(K),
}

impl<K: TimerKey> TimerKey for Key<K> {
    fn dense(&self) -> Option<usize> {
        match self {
            Key::Own(k) => k.dense(),
            Key::Event(..) => None,
        }
    }
    fn lane(&self) -> Option<usize> {
        match self {
            Key::Own(k) => k.lane(),
            Key::Event(..) => None,
        }
    }
}

/// What fell due.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Due<V> {
    /// A scheduler event: deliver it with [`fire`].
    Event { sched: SchedId, token: u64 },
    /// One of the mechanism's own timers.
    Timer(V),
}

/// What the mechanism is told, and must do, while the driver works. The mechanism owns the
/// driver and gives access to it ([`Hooks::driver`]), so that each hook may use the
/// dispatcher too.
pub trait Hooks<K = Infallible, V = Infallible> {
    /// The driver this mechanism runs.
    fn driver(&mut self) -> &mut Driver<K, V>;
    /// Account the task running on `cpu` up to `now` ([`Dispatcher::account`]): it is
    /// about to be rescheduled.
    fn account(&mut self, now: Ns, cpu: CpuId);
    /// A decision was made on `cpu`: `before` ran there, `d` runs now (None: idle).
    fn dispatched(&mut self, now: Ns, cpu: CpuId, why: Preempt, before: Option<TaskId>, d: Option<Dispatched>);
    /// When a scheduler event asked for `at` fires on the mechanism's clock (at least
    /// `now`), or None if it never will (past the mechanism's horizon: it is disarmed).
    fn event_time(&mut self, now: Ns, at: Ns) -> Option<Ns> {
        Some(at.max(now))
    }
    /// Before each round of [`settle`] (the agent ejects failed contained modules here).
    fn before_round(&mut self, _now: Ns) {}
    /// A pending reschedule of `cpu` is about to be carried out.
    fn rescheduling(&mut self, _now: Ns, _cpu: CpuId, _why: Preempt) {}
    /// A scheduler event of `sched` is about to be delivered (account the running tasks).
    fn before_event(&mut self, _now: Ns, _sched: SchedId) {}
    /// `cpu` reached [`RESCHED_LIMIT`] decisions at `now`; more are dropped.
    fn livelock(&mut self, _now: Ns, _cpu: CpuId) {}
}

/// The dispatcher with what the mechanism owes it: timers (scheduler events and the
/// mechanism's own), pending decisions, the livelock guard. See the module documentation.
pub struct Driver<K = Infallible, V = Infallible> {
    pub disp: Dispatcher,
    timers: Timers<Key<K>, Due<V>>,
    /// Per CPU: the reason of its pending decision.
    pending: Vec<Option<Preempt>>,
    /// The CPUs with a pending decision (bit c: `pending[c]` is set; at most
    /// [`crate::MAX_CPUS`] CPUs), so that finding the lowest is one instruction.
    pending_set: CpuSet,
    /// Per CPU: the instant of its last pending decisions and how many there were.
    guard: Vec<(Ns, u32)>,
    effects: Vec<Effect>,
}

impl<K: TimerKey, V> Driver<K, V> {
    pub fn new(disp: Dispatcher) -> Self {
        let n = disp.ncpus() as usize;
        Driver {
            disp,
            timers: Timers::new(),
            pending: vec![None; n],
            pending_set: CpuSet::NONE,
            guard: vec![(0, 0); n],
            effects: Vec::new(),
        }
    }

    /// Makes a decision on `cpu` pending (see rule 2: a slice end or a yield is kept over
    /// `Resched`).
    pub fn request(&mut self, cpu: CpuId, why: Preempt) {
        if let Some(p) = self.pending.get_mut(cpu.0 as usize) {
            if matches!(p, None | Some(Preempt::Resched)) {
                *p = Some(why);
                self.pending_set.0 |= CpuSet::only(cpu).0;
            }
        }
    }

    /// The reason of `cpu`'s pending decision, if one is pending.
    pub fn pending(&self, cpu: CpuId) -> Option<Preempt> {
        self.pending.get(cpu.0 as usize).copied().flatten()
    }

    /// Arms the mechanism's timer `key` at `at` (replacing its earlier one).
    pub fn set_timer(&mut self, at: Ns, key: K, value: V) {
        self.timers.insert(at, Key::Own(key), Due::Timer(value));
    }

    /// Queues a keyless one-shot timer at `at`.
    pub fn add_timer(&mut self, at: Ns, value: V) {
        self.timers.push(at, Due::Timer(value));
    }

    /// Disarms the mechanism's timer `key`.
    pub fn cancel_timer(&mut self, key: K) {
        self.timers.cancel(&Key::Own(key));
    }

    /// When the mechanism's timer `key` is due, if armed.
    pub fn timer_at(&self, key: K) -> Option<Ns> {
        self.timers.at(&Key::Own(key))
    }

    /// When scheduler event (sched, token) is due, if armed.
    pub fn event_at(&self, sched: SchedId, token: u64) -> Option<Ns> {
        self.timers.at(&Key::Event(sched, token))
    }

    /// Whether one of the mechanism's timers with a lane ([`TimerKey::lane`]) is due by
    /// `now` (false: none is, and they need not be looked at one by one).
    #[inline]
    pub fn lane_due(&self, now: Ns) -> bool {
        self.timers.next_lane_deadline().is_some_and(|at| at <= now)
    }

    /// When the earliest timer (scheduler event or the mechanism's own) is due.
    pub fn next_deadline(&self) -> Option<Ns> {
        self.timers.next_deadline()
    }

    /// Removes the earliest timer if it is due by `now` (ties: in the order armed).
    pub fn pop_due(&mut self, now: Ns) -> Option<(Ns, Due<V>)> {
        self.timers.pop_due(now).map(|(at, _, due)| (at, due))
    }

    /// How many timers were disarmed or replaced before they fell due.
    pub fn dropped_timers(&self) -> u64 {
        self.timers.dropped()
    }

    /// Takes the lowest CPU's pending decision.
    fn take_pending(&mut self) -> Option<(CpuId, Preempt)> {
        let cpu = self.pending_set.iter().next()?;
        self.pending_set.0 &= !CpuSet::only(cpu).0;
        let why = self.pending[cpu.0 as usize].take()?;
        Some((cpu, why))
    }

    /// Counts a pending decision of `cpu` at `now`: how many it took at this instant.
    fn count(&mut self, now: Ns, cpu: CpuId) -> u32 {
        let g = &mut self.guard[cpu.0 as usize];
        if g.0 != now {
            *g = (now, 0);
        }
        g.1 += 1;
        g.1
    }
}

/// Applies the effects the policies asked for (rule 1).
fn apply_effects<K: TimerKey, V, H: Hooks<K, V> + ?Sized>(h: &mut H, now: Ns) {
    let drv = h.driver();
    if !drv.disp.has_effects() {
        return;
    }
    let mut fx = std::mem::take(&mut drv.effects);
    drv.disp.drain_effects(&mut fx);
    for e in fx.drain(..) {
        match e {
            Effect::Resched(cpu) => h.driver().request(cpu, Preempt::Resched),
            Effect::SetEvent { sched, token, at } => {
                let key = Key::Event(sched, token);
                match h.event_time(now, at) {
                    Some(at) => _ = h.driver().timers.insert(at, key, Due::Event { sched, token }),
                    None => _ = h.driver().timers.cancel(&key),
                }
            }
            Effect::CancelEvent { sched, token } => _ = h.driver().timers.cancel(&Key::Event(sched, token)),
        }
    }
    h.driver().effects = fx;
}

/// Applies every effect and makes every pending decision, until nothing is left to do at
/// `now` (rules 1-5).
pub fn settle<K: TimerKey, V, H: Hooks<K, V> + ?Sized>(h: &mut H, now: Ns) {
    loop {
        h.before_round(now);
        apply_effects(h, now);
        let Some((cpu, why)) = h.driver().take_pending() else { return };
        let n = h.driver().count(now, cpu);
        if n == RESCHED_LIMIT {
            h.livelock(now, cpu);
        }
        if n < RESCHED_LIMIT {
            h.rescheduling(now, cpu, why);
            decide(h, now, cpu, why);
        }
    }
}

/// One decision on `cpu` (rule 4): account, ask the dispatcher, tell the mechanism.
/// Effects it causes wait for the next [`settle`].
pub fn decide<K: TimerKey, V, H: Hooks<K, V> + ?Sized>(h: &mut H, now: Ns, cpu: CpuId, why: Preempt) -> Option<Dispatched> {
    h.account(now, cpu);
    let disp = &mut h.driver().disp;
    let before = disp.running(cpu);
    let d = disp.schedule(now, cpu, why);
    h.dispatched(now, cpu, why, before, d);
    d
}

/// Delivers scheduler event (sched, token) at `now` (rule 6); the caller settles after.
pub fn fire<K: TimerKey, V, H: Hooks<K, V> + ?Sized>(h: &mut H, now: Ns, sched: SchedId, token: u64) {
    h.before_event(now, sched);
    h.driver().disp.fire_event(now, sched, token);
}

/// Delivers every scheduler event due by `now`, in time order (for a mechanism with no
/// timers of its own); the caller settles after.
pub fn fire_due<H: Hooks + ?Sized>(h: &mut H, now: Ns) {
    while let Some((_, due)) = h.driver().pop_due(now) {
        match due {
            Due::Event { sched, token } => fire(h, now, sched, token),
            Due::Timer(never) => match never {},
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{Ctx, Decision, Policy, TaskState};
    use crate::usage::HierarchyConfig;
    use crate::{CpuSet, TaskParams};

    /// Runs the first runnable task allowed; on `on_event(t)` arms event t+1 a ms later;
    /// `spin` asks for a new decision every time it makes one.
    struct P {
        spin: bool,
    }

    impl Policy for P {
        fn kind(&self) -> &str {
            "p"
        }
        fn on_event(&mut self, ctx: &mut Ctx, token: u64) {
            let at = ctx.now() + 1_000_000;
            ctx.set_event(at, token + 1).unwrap();
        }
        fn pick(&mut self, ctx: &mut Ctx, cpu: CpuId) -> Option<Decision> {
            if self.spin {
                ctx.resched(cpu).unwrap();
            }
            (0..8).map(TaskId).find(|&t| ctx.state(t) == TaskState::Runnable && ctx.allowed(t, cpu)).map(Decision::run_until_block)
        }
    }

    #[derive(Default)]
    struct Log {
        calls: Vec<String>,
        livelocks: Vec<(Ns, CpuId)>,
    }

    struct M {
        drv: Driver,
        log: Log,
        /// Event times are rounded up to a multiple of this.
        tick: Ns,
        horizon: Ns,
    }

    impl Hooks for M {
        fn driver(&mut self) -> &mut Driver {
            &mut self.drv
        }
        fn account(&mut self, now: Ns, cpu: CpuId) {
            self.log.calls.push(format!("account {now} {cpu}"));
        }
        fn dispatched(&mut self, now: Ns, cpu: CpuId, why: Preempt, before: Option<TaskId>, d: Option<Dispatched>) {
            self.log.calls.push(format!("dispatched {now} {cpu} {why:?} {before:?} -> {:?}", d.map(|d| d.task)));
        }
        fn event_time(&mut self, now: Ns, at: Ns) -> Option<Ns> {
            let at = at.max(now).div_ceil(self.tick) * self.tick;
            (at <= self.horizon).then_some(at)
        }
        fn before_event(&mut self, now: Ns, sched: SchedId) {
            self.log.calls.push(format!("event {now} {sched}"));
        }
        fn livelock(&mut self, now: Ns, cpu: CpuId) {
            self.log.livelocks.push((now, cpu));
        }
    }

    fn mech(ncpus: u16, spin: bool) -> M {
        let d = Dispatcher::new(ncpus, "p", Box::new(P { spin }), HierarchyConfig::default());
        M { drv: Driver::new(d), log: Log::default(), tick: 1, horizon: Ns::MAX }
    }

    #[test]
    fn pending_decisions_are_made_lowest_cpu_first_each_accounted_first() {
        let mut m = mech(3, false);
        let t = m.drv.disp.add_task(0, TaskParams::new(), CpuSet::first(3), None, true);
        m.drv.request(CpuId(2), Preempt::Resched);
        m.drv.request(CpuId(0), Preempt::Resched);
        settle(&mut m, 5);
        assert_eq!(
            m.log.calls,
            [
                "account 5 cpu0".to_string(),
                format!("dispatched 5 cpu0 Resched None -> Some({t:?})"),
                "account 5 cpu2".to_string(),
                "dispatched 5 cpu2 Resched None -> None".to_string(),
            ]
        );
        assert_eq!(m.drv.pending(CpuId(2)), None);
    }

    #[test]
    fn a_slice_end_or_a_yield_is_kept_as_the_reason_over_a_reschedule() {
        let mut m = mech(1, false);
        m.drv.request(CpuId(0), Preempt::SliceExpired);
        m.drv.request(CpuId(0), Preempt::Resched);
        assert_eq!(m.drv.pending(CpuId(0)), Some(Preempt::SliceExpired));
        settle(&mut m, 0);
        assert_eq!(m.log.calls[1], "dispatched 0 cpu0 SliceExpired None -> None");
        m.drv.request(CpuId(0), Preempt::Resched);
        m.drv.request(CpuId(0), Preempt::SliceExpired);
        assert_eq!(m.drv.pending(CpuId(0)), Some(Preempt::SliceExpired));
        settle(&mut m, 0);
        // A yield is kept over a reschedule too; the first of the two kept is kept.
        m.drv.request(CpuId(0), Preempt::Yield);
        m.drv.request(CpuId(0), Preempt::Resched);
        m.drv.request(CpuId(0), Preempt::SliceExpired);
        assert_eq!(m.drv.pending(CpuId(0)), Some(Preempt::Yield));
    }

    #[test]
    fn scheduler_events_are_armed_on_the_mechanisms_clock_replaced_and_fired() {
        let mut m = mech(1, false);
        m.tick = 4_000_000;
        let sched = m.drv.disp.default_sched();
        // The policy arms token 1 at 1 ms; the clock rounds it up to 4 ms.
        fire(&mut m, 0, sched, 0);
        settle(&mut m, 0);
        assert_eq!(m.drv.event_at(sched, 1), Some(4_000_000));
        assert_eq!(m.drv.next_deadline(), Some(4_000_000));
        assert_eq!(m.drv.pop_due(3_999_999), None);
        let (at, due) = m.drv.pop_due(4_000_000).unwrap();
        assert_eq!((at, due), (4_000_000, Due::Event { sched, token: 1 }));
        fire(&mut m, at, sched, 1);
        settle(&mut m, at);
        // Token 2 at 5 ms → 8 ms; re-arming token 2 replaces it (one entry).
        assert_eq!(m.drv.event_at(sched, 2), Some(8_000_000));
        fire(&mut m, at, sched, 1);
        settle(&mut m, at);
        assert_eq!(m.drv.event_at(sched, 2), Some(8_000_000));
        assert_eq!(m.drv.dropped_timers(), 1);
        fire_due(&mut m, 8_000_000);
        settle(&mut m, 8_000_000);
        assert_eq!(m.drv.event_at(sched, 2), None);
        assert_eq!(m.drv.event_at(sched, 3), Some(12_000_000));
        let events: Vec<&String> = m.log.calls.iter().filter(|c| c.starts_with("event")).collect();
        assert_eq!(events, ["event 0 sched0", "event 4000000 sched0", "event 4000000 sched0", "event 8000000 sched0"]);
    }

    #[test]
    fn an_event_past_the_horizon_disarms_the_token() {
        let mut m = mech(1, false);
        let sched = m.drv.disp.default_sched();
        fire(&mut m, 0, sched, 0);
        settle(&mut m, 0);
        assert_eq!(m.drv.event_at(sched, 1), Some(1_000_000));
        m.horizon = 1_500_000;
        fire(&mut m, 1_000_000, sched, 0); // re-arms token 1 at 2 ms: never fires
        settle(&mut m, 1_000_000);
        assert_eq!(m.drv.event_at(sched, 1), None);
        assert_eq!(m.drv.next_deadline(), None);
    }

    #[test]
    fn own_timers_share_the_table_and_tie_in_arming_order() {
        let mut drv: Driver<u8, &str> = Driver::new(Dispatcher::new(1, "p", Box::new(P { spin: false }), HierarchyConfig::default()));
        drv.add_timer(10, "one-shot");
        drv.set_timer(10, 1, "first");
        drv.set_timer(5, 2, "cancelled");
        drv.set_timer(10, 1, "replaced");
        drv.cancel_timer(2);
        assert_eq!(drv.timer_at(1), Some(10));
        let order: Vec<_> = std::iter::from_fn(|| drv.pop_due(10)).collect();
        assert_eq!(order, [(10, Due::Timer("one-shot")), (10, Due::Timer("replaced"))]);
        assert_eq!(drv.dropped_timers(), 2);
    }

    #[test]
    fn the_livelock_guard_stops_a_cpu_that_reschedules_itself_forever() {
        let mut m = mech(2, true);
        m.drv.request(CpuId(1), Preempt::Resched);
        settle(&mut m, 7);
        assert_eq!(m.log.livelocks, [(7, CpuId(1))]);
        let decisions = m.log.calls.iter().filter(|c| c.starts_with("dispatched")).count();
        assert_eq!(decisions as u32, RESCHED_LIMIT - 1);
        // At the next instant the count starts again.
        m.drv.request(CpuId(1), Preempt::Resched);
        settle(&mut m, 8);
        assert_eq!(m.log.livelocks, [(7, CpuId(1)), (8, CpuId(1))]);
    }
}
