//! Two-level BVT (paper 001 §2.5, §3, §6.3) driven through the real
//! `vassal_core::Dispatcher`, with hand-computed schedules. mcu = 10 ms, C = 2 mcu.
//!
//! Level-0 weights are shares in ppm, so a task with share s ppm advances 10 ms / s
//! virtual ns per mcu: at 50 % that is 20 virtual ns, and the §2.1 allowance C/w is
//! 40 virtual ns (2 mcu).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use vassal_core::{
    Block, CpuId, CpuSet, Dispatcher, Effect, HierarchyConfig, Ns, Preempt, Reply, Request, SchedId, Sender, Shared, TaskId, TaskParams,
    Wake, MS,
};
use vassal_policies::bvt::two_level::{self, TwoLevelBvt};
use vassal_policies::{ParamValue, Params};

struct Run {
    task: TaskId,
    since: Ns,
    until: Option<Ns>,
}

/// A one-CPU mechanism: events, slice expiries, exact CPU accounting.
struct Sim {
    d: Dispatcher,
    b: Arc<Mutex<TwoLevelBvt>>,
    now: Ns,
    run: Option<Run>,
    events: BTreeMap<(SchedId, u64), Ns>,
    /// (time ms, task) of every dispatch that changed the running task.
    switches: Vec<(u64, u32)>,
    cpu: BTreeMap<TaskId, Ns>,
}

fn p(kv: &[(&str, i64)]) -> TaskParams {
    kv.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}

fn s(v: &str) -> ParamValue {
    ParamValue::Str(v.into())
}

fn new_sim(sched: &[(&str, ParamValue)]) -> Sim {
    let mut m: BTreeMap<String, ParamValue> = sched.iter().map(|(k, v)| (k.to_string(), v.clone())).collect();
    m.entry("mcu".into()).or_insert(s("10ms"));
    m.entry("c".into()).or_insert(s("20ms"));
    let mut ps = Params::new("bvt2", &m);
    let b = two_level::build(&mut ps).unwrap();
    ps.finish().unwrap();
    let b = Arc::new(Mutex::new(b));
    let d = Dispatcher::new(1, "bvt2", Box::new(Shared::of(&b)), HierarchyConfig::default());
    Sim { d, b, now: 0, run: None, events: BTreeMap::new(), switches: Vec::new(), cpu: BTreeMap::new() }
}

impl Sim {
    fn account(&mut self) {
        if let Some(r) = &mut self.run {
            let ran = self.now - r.since;
            r.since = self.now;
            let t = r.task;
            *self.cpu.entry(t).or_insert(0) += ran;
            self.d.account(self.now, t, CpuId(0), ran);
        }
    }
    fn decide(&mut self, why: Preempt) {
        self.account();
        let r = self.d.schedule(self.now, CpuId(0), why);
        if let Some(d) = r {
            if self.run.as_ref().map(|r| r.task) != Some(d.task) {
                self.switches.push((self.now / MS, d.task.0));
            }
        }
        self.run = r.map(|d| Run { task: d.task, since: self.now, until: d.slice.map(|s| self.now + s) });
        self.d.check_invariants().unwrap();
    }
    fn settle(&mut self) {
        let mut fx = Vec::new();
        let mut guard = 0u32;
        loop {
            guard += 1;
            assert!(
                guard < 10_000,
                "effects never settle at {} ms: {:?}",
                self.now / MS,
                self.switches.iter().rev().take(8).collect::<Vec<_>>()
            );
            self.d.drain_effects(&mut fx);
            if fx.is_empty() {
                break;
            }
            for e in std::mem::take(&mut fx) {
                match e {
                    Effect::SetEvent { sched, token, at } => {
                        assert!(at >= self.now, "event in the past");
                        self.events.insert((sched, token), at);
                    }
                    Effect::CancelEvent { sched, token } => {
                        self.events.remove(&(sched, token));
                    }
                    Effect::Resched(_) => self.decide(Preempt::Resched),
                }
            }
        }
        // The dispatcher may have dispatched on its own (an idle CPU after a wake-up).
        let now_running = self.d.running(CpuId(0));
        if now_running != self.run.as_ref().map(|r| r.task) {
            panic!("mechanism out of step: dispatcher runs {now_running:?}");
        }
    }
    fn advance(&mut self, to: Ns) {
        let mut guard = 0u32;
        loop {
            guard += 1;
            assert!(guard < 200_000, "livelock at {} ms: {:?}", self.now / MS, self.switches.iter().rev().take(5).collect::<Vec<_>>());
            let ev = self.events.iter().map(|(k, &at)| (at, *k)).min();
            let sl = self.run.as_ref().and_then(|r| r.until);
            let next = [ev.map(|e| e.0), sl].into_iter().flatten().min();
            match next {
                Some(at) if at <= to => {
                    self.now = at;
                    if let Some((_, (sched, token))) = ev.filter(|e| e.0 == at) {
                        self.events.remove(&(sched, token));
                        self.d.fire_event(at, sched, token);
                    } else {
                        self.decide(Preempt::SliceExpired);
                    }
                    self.settle();
                }
                _ => break,
            }
        }
        self.now = to;
        self.account();
    }
    fn add(&mut self, kv: &[(&str, i64)], runnable: bool) -> Result<TaskId, String> {
        let r = self.d.try_add_task(self.now, p(kv), CpuSet::first(1), None, runnable).map_err(|e| e.1);
        self.sync_run();
        self.settle();
        r
    }
    /// The dispatcher decides on an idle CPU by itself after an add or wake-up.
    fn sync_run(&mut self) {
        let r = self.d.running(CpuId(0));
        if r != self.run.as_ref().map(|r| r.task) {
            if let Some(t) = r {
                self.switches.push((self.now / MS, t.0));
                // Slice unknown here; the tests below never rely on it (a Resched follows).
                self.run = Some(Run { task: t, since: self.now, until: None });
            }
        }
    }
    fn wake(&mut self, t: TaskId) {
        assert!(self.d.wake(self.now, t, Wake { voluntary: true, ..Wake::default() }));
        self.sync_run();
        self.settle();
    }
    fn block(&mut self, t: TaskId) {
        if self.run.as_ref().is_some_and(|r| r.task == t) {
            self.account();
        }
        if self.d.block(self.now, t, Block { voluntary: true }).is_some() {
            self.run = None;
            self.decide(Preempt::Resched);
        }
        self.settle();
    }
    fn exit(&mut self, t: TaskId) {
        if self.run.as_ref().is_some_and(|r| r.task == t) {
            self.account();
        }
        if self.d.remove_task(self.now, t).is_some() {
            self.run = None;
            self.decide(Preempt::Resched);
        }
        self.settle();
    }
    fn msg(&mut self, uid: u32, t: TaskId, req: Request) -> Reply {
        let sched = self.d.default_sched();
        let r = self.d.message(self.now, sched, Sender { task: Some(t), uid }, t, &req);
        self.sync_run();
        self.settle();
        r
    }
    fn cpu_ms(&self, t: TaskId) -> u64 {
        self.cpu.get(&t).copied().unwrap_or(0) / MS
    }
}

fn level(v: i64) -> Request {
    Request::Param { name: "level".into(), value: v }
}

#[test]
fn re_task_gets_its_share_and_be_tasks_share_the_rest() {
    // RE t0 with 30 %; the BE aggregate has 70 % (weights 300000 : 700000 at level 0);
    // BE t1, t2 with weight 1 each. All CPU-bound.
    let mut sim = new_sim(&[("be_share", ParamValue::Int(70))]);
    let t0 = sim.add(&[("level", 0), ("share", 30)], true).unwrap();
    let t1 = sim.add(&[], true).unwrap();
    let t2 = sim.add(&[("level", 1)], true).unwrap();
    sim.advance(190 * MS);
    // By hand: t0 runs until 2 mcu ahead of the aggregate (C/w0 = 20ms/300000);
    // the aggregate (per mcu 10ms/700000) then needs 7 mcu to get C/w_agg ahead of t0
    // (20 ms). Inside the aggregate t1 and t2 (weight 1) switch at the C crossovers: t1 2
    // mcu, t2 4 mcu, t1 (cut by the aggregate's slice at 90). t0 then needs 3 mcu, the
    // aggregate 7 again: t1 (E 3 mcu < t2's 4) for 3 mcu to be 2 mcu ahead, t2 for 4.
    assert_eq!(
        sim.switches,
        vec![(0, 0), (20, 1), (40, 2), (80, 1), (90, 0), (120, 1), (150, 2), (190, 0)],
        "t0 = {t0}, t1 = {t1}, t2 = {t2}"
    );
    // Long run: 30 % / 35 % / 35 %, within one scheduling window's error (C + mcu per
    // level).
    sim.advance(10_000 * MS);
    let (a, b, c) = (sim.cpu_ms(t0), sim.cpu_ms(t1), sim.cpu_ms(t2));
    assert_eq!(a + b + c, 10_000);
    assert!(a.abs_diff(3000) <= 30, "RE got {a} ms of 10 s");
    assert!(b.abs_diff(3500) <= 40 && c.abs_diff(3500) <= 40, "BE got {b} and {c} ms of 10 s");
}

#[test]
fn be_tasks_take_the_whole_cpu_when_no_re_task_runs() {
    let mut sim = new_sim(&[("be_share", ParamValue::Int(20))]);
    let t0 = sim.add(&[("level", 0), ("share", 80)], false).unwrap();
    let t1 = sim.add(&[("weight", 3)], true).unwrap();
    let t2 = sim.add(&[("weight", 1)], true).unwrap();
    sim.advance(4000 * MS);
    assert_eq!(sim.cpu_ms(t0), 0);
    let (b, c) = (sim.cpu_ms(t1), sim.cpu_ms(t2));
    assert_eq!(b + c, 4000);
    assert!(b.abs_diff(3000) <= 40, "t1 got {b} ms");
    // The RE task wakes and gets its 80 % (BVT: A ← SVT on waking, no credit for sleeping).
    sim.wake(t0);
    let before = (sim.cpu_ms(t0), sim.cpu_ms(t1) + sim.cpu_ms(t2));
    sim.advance(14_000 * MS);
    let re = sim.cpu_ms(t0) - before.0;
    let be = sim.cpu_ms(t1) + sim.cpu_ms(t2) - before.1;
    assert_eq!(re + be, 10_000);
    assert!(re.abs_diff(8000) <= 30, "RE got {re} ms of 10 s");
}

#[test]
fn only_root_may_put_a_task_in_the_reserved_effort_level() {
    let mut sim = new_sim(&[("be_share", ParamValue::Int(50))]);
    let t0 = sim.add(&[("share", 50)], true).unwrap();
    let t1 = sim.add(&[], true).unwrap();
    let r = sim.msg(1000, t0, level(0));
    match r {
        Reply::Refused(why) => assert!(why.contains("only root (uid 0)") && why.contains("uid 1000"), "{why}"),
        other => panic!("non-root level 0 accepted: {other:?}"),
    }
    assert_eq!(sim.b.lock().unwrap().level(t0), Some(1));
    assert_eq!(sim.b.lock().unwrap().admission().allocated(), 0);
    // Anyone may go (back) to best effort; root may go to reserved effort.
    assert_eq!(sim.msg(1000, t0, level(1)), Reply::Ok);
    assert_eq!(sim.msg(0, t0, level(0)), Reply::Ok);
    assert_eq!(sim.b.lock().unwrap().level(t0), Some(0));
    assert_eq!(sim.b.lock().unwrap().admission().allocated(), 500_000);
    // A non-root task may not raise its reservation either, but may leave the level.
    assert!(!sim.msg(1000, t0, Request::Param { name: "share".into(), value: 10 }).is_ok());
    assert!(!sim.msg(0, t0, Request::Param { name: "weight".into(), value: 10 }).is_ok());
    assert!(!sim.msg(0, t1, level(2)).is_ok());
    // Now t0 (RE 50 %) and t1 (alone in BE, 50 %) share the CPU equally.
    let (a0, b0) = (sim.cpu_ms(t0), sim.cpu_ms(t1));
    sim.advance(sim.now + 4000 * MS);
    let (a, b) = (sim.cpu_ms(t0) - a0, sim.cpu_ms(t1) - b0);
    assert_eq!(a + b, 4000);
    assert!(a.abs_diff(2000) <= 30, "RE got {a} ms of 4 s");
    assert_eq!(sim.msg(1000, t0, level(1)), Reply::Ok);
    assert_eq!(sim.b.lock().unwrap().admission().allocated(), 0);
}

#[test]
fn admission_refuses_a_share_that_does_not_fit_and_frees_on_exit() {
    // be_share 70 %: 30 % may be reserved.
    let mut sim = new_sim(&[("be_share", ParamValue::Int(70))]);
    let t0 = sim.add(&[("level", 0), ("share", 20)], true).unwrap();
    let e = sim.add(&[("level", 0), ("share", 20)], true).unwrap_err();
    assert!(e.contains("only 10% is unallocated"), "{e}");
    let e = sim.add(&[("level", 0)], true).unwrap_err();
    assert!(e.contains("needs a CPU share"), "{e}");
    let e = sim.add(&[("level", 0), ("share", 5), ("weight", 2)], true).unwrap_err();
    assert!(e.contains("weight"), "{e}");
    let e = sim.add(&[("level", 3)], true).unwrap_err();
    assert!(e.contains("'level' must be 0"), "{e}");
    // By message: a BE task asking for 20 % is refused by admission, even for root.
    let t2 = sim.add(&[("share_ppm", 200_000)], true).unwrap();
    match sim.msg(0, t2, level(0)) {
        Reply::Refused(why) => assert!(why.contains("only 10% is unallocated"), "{why}"),
        other => panic!("admitted: {other:?}"),
    }
    assert_eq!(sim.b.lock().unwrap().level(t2), Some(1));
    // 10 % fits.
    assert_eq!(sim.msg(0, t2, Request::Param { name: "share".into(), value: 10 }), Reply::Ok);
    assert_eq!(sim.msg(0, t2, level(0)), Reply::Ok);
    assert_eq!(sim.b.lock().unwrap().admission().unallocated(), 0);
    // t0 exits: its 20 % is free again; t2 may grow to 30 %, not 31 %.
    sim.advance(100 * MS);
    sim.exit(t0);
    assert_eq!(sim.b.lock().unwrap().admission().unallocated(), 200_000);
    assert!(!sim.msg(0, t2, Request::Param { name: "share_ppm".into(), value: 310_000 }).is_ok());
    assert_eq!(sim.msg(0, t2, Request::Param { name: "share".into(), value: 30 }), Reply::Ok);
    assert_eq!(sim.b.lock().unwrap().admission().allocated(), 300_000);
}

/// RE t0 (50 %) and BE t1 (weight 1) CPU-bound; BE t2 sleeps, with `warp2`, and wakes at
/// 70 ms. Returns when t2 was first dispatched (ms).
fn warp_case(sched: &[(&str, ParamValue)], warp2: i64) -> u64 {
    let mut all = vec![("be_share", ParamValue::Int(50))];
    all.extend(sched.iter().cloned());
    let mut sim = new_sim(&all);
    let _t0 = sim.add(&[("level", 0), ("share", 50)], true).unwrap();
    let _t1 = sim.add(&[], true).unwrap();
    let t2 = sim.add(&[("warp", warp2)], false).unwrap();
    // By hand (50 % each: 20 virtual ns per mcu, C/w = 40): t0 0–20, the aggregate (t1)
    // 20–60 (to 80 vns, 40 ahead of t0's 40), t0 from 60 until 120 vns, i.e. to 100 ms.
    sim.advance(70 * MS);
    assert_eq!(sim.switches, vec![(0, 0), (20, 1), (60, 0)]);
    // At 70 ms t0 is at 100 vns (by estimate), the aggregate at 80.
    sim.wake(t2);
    sim.advance(200 * MS);
    sim.switches.iter().find(|s| s.1 == t2.0).expect("t2 ran").0
}

#[test]
fn threshold_mode_warps_the_aggregate_only_above_the_threshold() {
    // be_warp 100 vns at level 0: E_agg = 80 − 100 < E_t0 = 100 → dispatched at once.
    let sched = [("mode", s("threshold")), ("threshold", s("10ms")), ("be_warp", s("100ns"))];
    assert_eq!(warp_case(&sched, 50 * MS as i64), 70, "warp above the threshold");
    // t2's warp (30 ns) is below the threshold: the aggregate is not warped and waits for
    // t0's crossover at 100 ms; t2's warp still puts it before t1 inside the aggregate.
    assert_eq!(warp_case(&sched, 30), 100, "warp below the threshold");
    // No BE warp at all: t1 and t2 tie at level 1 (t2 woke at SVT = A_t1), t1 has the lower
    // id and runs 2 mcu (C) before t2.
    assert_eq!(warp_case(&sched, 0), 120);
}

#[test]
fn direct_mode_runs_the_aggregate_with_the_be_tasks_warp() {
    let sched = [("mode", s("direct")), ("threshold", s("10ms")), ("be_warp", s("100ns"))];
    // The aggregate takes t2's 30 ns: E_agg = 80 − 30 = 50 < E_t0 = 100 → at once.
    assert_eq!(warp_case(&sched, 30), 70);
    assert_eq!(warp_case(&sched, 0), 120);
}

#[test]
fn direct_mode_uses_the_be_tasks_warp_limit() {
    // t2 loops forever after waking warped (30 ns, L = 10 ms). The aggregate runs with
    // that warp and that limit: after 10 ms both are unwarped; the aggregate (E 80 + 20 = 100
    // vns after 1 mcu) then competes with t0 (100) unwarped: t0 is not at its crossover
    // yet, but the unwarp asks for a plain earliest-EVT decision (ties: A, then id — the
    // aggregate is level 0's task 0), so it keeps the CPU until t0 is C ahead... we only
    // check that t2 was unwarped by its limit and the aggregate followed.
    let mut sim = new_sim(&[("be_share", ParamValue::Int(50)), ("mode", s("direct"))]);
    let _t0 = sim.add(&[("level", 0), ("share", 50)], true).unwrap();
    let _t1 = sim.add(&[], true).unwrap();
    let t2 = sim.add(&[("warp", 30), ("warp_limit", 10 * MS as i64)], false).unwrap();
    sim.advance(70 * MS);
    sim.wake(t2);
    {
        let b = sim.b.lock().unwrap();
        let agg = b.aggregate_info().unwrap();
        assert!(agg.warped && agg.warp == 30 && agg.warp_limit == 10 * MS, "{agg:?}");
    }
    sim.advance(85 * MS);
    let b = sim.b.lock().unwrap();
    assert!(!b.task_info(t2).unwrap().warped);
    assert!(!b.aggregate_info().unwrap().warped);
}

#[test]
fn be_task_blocking_keeps_the_cpu_for_the_aggregate_until_no_be_task_is_runnable() {
    let mut sim = new_sim(&[("be_share", ParamValue::Int(50))]);
    let t0 = sim.add(&[("level", 0), ("share", 50)], true).unwrap();
    let t1 = sim.add(&[], true).unwrap();
    let t2 = sim.add(&[], true).unwrap();
    sim.advance(30 * MS);
    // t0 0–20, then the aggregate runs t1 (its slice: to 60 at level 0, 40 at level 1).
    assert_eq!(sim.switches, vec![(0, 0), (20, 1)]);
    // t1 blocks at 30: the aggregate keeps the CPU for t2 (it is preempted, not blocked).
    sim.block(t1);
    assert_eq!(sim.switches.last(), Some(&(30, t2.0)));
    sim.advance(45 * MS);
    // t2 blocks too: no BE task is runnable, the aggregate blocks, t0 runs.
    sim.block(t2);
    assert_eq!(sim.switches.last(), Some(&(45, t0.0)));
    assert!(!sim.b.lock().unwrap().aggregate_info().unwrap().warped);
}

/// A tiny deterministic generator (xorshift) for the stress test.
fn next(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

#[test]
fn random_wakeups_and_blocks_in_both_modes_never_livelock() {
    for mode in ["threshold", "direct"] {
        for seed in 1..=200u64 {
            let mut sim = new_sim(&[
                ("be_share", ParamValue::Int(40)),
                ("mode", s(mode)),
                ("threshold", s("5ms")),
                ("be_warp", s("60ns")),
                ("be_warp_limit", s("15ms")),
            ]);
            let mut tasks = vec![
                sim.add(&[("level", 0), ("share", 35), ("warp", 80), ("warp_limit", 10 * MS as i64)], true).unwrap(),
                sim.add(&[("level", 0), ("share", 25)], true).unwrap(),
            ];
            for i in 0..5 {
                let w = [0, 30, 8 * MS as i64, 20 * MS as i64, 0][i];
                tasks.push(sim.add(&[("weight", 1 + i as i64), ("warp", w), ("warp_limit", 20 * MS as i64)], true).unwrap());
            }
            let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15);
            let mut blocked = vec![false; tasks.len()];
            for _ in 0..300 {
                let dt = next(&mut x) % (15 * MS) + 1;
                let to = sim.now + dt;
                sim.advance(to);
                let i = (next(&mut x) % tasks.len() as u64) as usize;
                if blocked[i] {
                    sim.wake(tasks[i]);
                } else {
                    sim.block(tasks[i]);
                }
                blocked[i] = !blocked[i];
                if next(&mut x).is_multiple_of(10) {
                    let j = 2 + (next(&mut x) % 5) as usize;
                    let _ = sim.msg(0, tasks[j], Request::Warp { on: true });
                }
            }
            let total: Ns = sim.cpu.values().sum();
            assert!(total <= sim.now);
        }
    }
}
