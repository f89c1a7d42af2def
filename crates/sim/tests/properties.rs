//! Property tests of the simulator: random scenarios (random machine, clock, costs,
//! unscheduled time, default policy, extra schedulers loaded and unloaded mid-run, tasks
//! of every behaviour, interrupts, runaway loops) run with `Sim::set_checks(true)`, which
//! asserts the dispatcher's and the engine's invariants after every event. On the report
//! we check the accounting identities, determinism, and that no task is lost.
//!
//! Then targeted tests: switch/migration cost accounting, tick rounding of slices,
//! interrupt-handler latency, hand-off, runaway loops under fps and rr, and the owner
//! reported for tasks of an unloaded scheduler.
//!
//! `PROPTEST_CASES` overrides the number of random cases (48 in debug, 512 in release).
//!
//! Regression tests for bugs these tests found (all fixed): percentiles in the report
//! summaries (`latency_and_response_percentiles_are_right`), a hand-off target
//! monopolising the CPU (`hand_off_target_does_not_monopolise_the_cpu`), fps as guest
//! host livelocking a CPU (`a_lower_scheduler_cannot_livelock_a_cpu_run_by_a_higher_one`),
//! and a double decision on exit (`an_exit_makes_one_decision`).

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;
use vassal_core::{CpuId, CpuSet, Ns, Request, TaskParams, Usage, MS, SEC, US};
use vassal_policies::ParamValue;
use vassal_sim::model::{
    Behaviour, ClockMode, Dist, InterruptSpec, Machine, Phase, PolicySpec, Scenario, SchedulerSpec, SendSpec, TaskSpec, Unscheduled,
    UnscheduledSource,
};
use vassal_sim::{Report, Sim};

// ---------------------------------------------------------------------------------------
// Building scenarios
// ---------------------------------------------------------------------------------------

const DEFAULT: &str = "default";

fn machine(cpus: u16, clock: ClockMode, hz: u32, switch_cost: Ns, migration_cost: Ns) -> Machine {
    Machine { cpus, clock, hz, tick: None, switch_cost, migration_cost, wake_latency: 0, unscheduled: None, min_best_effort_ppm: None }
}

fn policy(kind: &str, params: &[(&str, ParamValue)]) -> PolicySpec {
    PolicySpec { kind: kind.into(), params: params.iter().map(|(k, v)| (k.to_string(), v.clone())).collect() }
}

fn dur(ns: Ns) -> ParamValue {
    ParamValue::Str(format!("{ns}ns"))
}

fn rr(quantum: Ns) -> PolicySpec {
    policy("rr", &[("quantum", dur(quantum))])
}

fn task(name: &str, behaviour: Behaviour) -> TaskSpec {
    TaskSpec {
        name: name.into(),
        start: 0,
        scheduler: None,
        affinity: CpuSet::first(64),
        params: TaskParams::new(),
        uid: 0,
        behaviour,
        loop_at: None,
    }
}

fn hog(name: &str) -> TaskSpec {
    task(name, Behaviour::Cpu { work: None })
}

fn with_param(mut t: TaskSpec, k: &str, v: i64) -> TaskSpec {
    t.params.insert(k.into(), v);
    t
}

fn scenario(m: Machine, default_policy: PolicySpec, tasks: Vec<TaskSpec>, until: Ns) -> Scenario {
    Scenario::of_tasks("prop", m, default_policy, tasks, until)
}

/// Runs with every invariant checked after every event.
fn run_checked(sc: Scenario) -> Report {
    let mut sim = Sim::new(sc).expect("scenario is valid");
    sim.set_checks(true);
    match sim.run() {
        Ok(r) => r,
        Err(e) => panic!("simulation failed: {e}"),
    }
}

fn task_of<'a>(r: &'a Report, name: &str) -> &'a vassal_sim::report::TaskReport {
    r.task(name).unwrap_or_else(|| panic!("no task {name} in the report"))
}

// ---------------------------------------------------------------------------------------
// Random scenarios
// ---------------------------------------------------------------------------------------

fn dist(lo: Ns, hi: Ns) -> impl Strategy<Value = Dist> {
    // Every distribution has a positive mean (as the scenario loader requires).
    prop_oneof![
        (lo..=hi).prop_map(Dist::Const),
        (0..=hi, lo..=hi).prop_map(|(a, b)| Dist::Uniform(a.min(b), a.max(b))),
        (lo..=hi).prop_map(Dist::Exp),
        (lo..=hi, 0..=hi).prop_map(|(m, sd)| Dist::Normal(m, sd / 2)),
    ]
}

/// A phase, with scheduler and task references as raw indices resolved by `build`.
#[derive(Clone, Debug)]
enum RawPhase {
    Run(Dist),
    Sleep(Dist),
    Fault(Dist),
    Timer(Ns),
    Yield,
    /// Send a Param/Warp/Set request to scheduler index (0 = default; past the end = a
    /// name nobody registered).
    Send(u8, u8, i64),
    Join(u8),
    Leave,
    HandOff(u16, Dist),
}

fn raw_phase() -> impl Strategy<Value = RawPhase> {
    prop_oneof![
        4 => dist(10 * US, 5 * MS).prop_map(RawPhase::Run),
        2 => dist(100 * US, 20 * MS).prop_map(RawPhase::Sleep),
        1 => dist(10 * US, 2 * MS).prop_map(RawPhase::Fault),
        1 => (MS..=20 * MS).prop_map(RawPhase::Timer),
        1 => Just(RawPhase::Yield),
        1 => (0u8..4, 0u8..4, -5i64..10).prop_map(|(s, k, v)| RawPhase::Send(s, k, v)),
        2 => (0u8..4).prop_map(RawPhase::Join),
        1 => Just(RawPhase::Leave),
        1 => (any::<u16>(), dist(100 * US, 10 * MS)).prop_map(|(t, d)| RawPhase::HandOff(t, d)),
    ]
}

#[derive(Clone, Debug)]
enum RawBeh {
    Cpu(Option<Ns>),
    Periodic { period: Ns, offset_pm: u32, exec: Dist, deadline_pm: u32, jobs: Option<u64> },
    Interactive(Dist, Dist),
    Io(Dist, Dist, bool),
    Script(Vec<RawPhase>, bool),
    Handler(u32, Dist),
    Player(Ns, Dist, Ns),
}

fn raw_beh() -> impl Strategy<Value = RawBeh> {
    prop_oneof![
        2 => proptest::option::of(100 * US..=50 * MS).prop_map(RawBeh::Cpu),
        2 => (2 * MS..=50 * MS, 0u32..1000, dist(10 * US, MS), 200u32..=1000, proptest::option::of(1u64..50))
            .prop_map(|(period, offset_pm, exec, deadline_pm, jobs)| RawBeh::Periodic {
                period,
                offset_pm,
                exec,
                deadline_pm,
                jobs
            }),
        2 => (dist(50 * US, 5 * MS), dist(MS, 30 * MS)).prop_map(|(b, t)| RawBeh::Interactive(b, t)),
        2 => (dist(10 * US, 5 * MS), dist(100 * US, 20 * MS), any::<bool>()).prop_map(|(r, s, v)| RawBeh::Io(r, s, v)),
        3 => (proptest::collection::vec(raw_phase(), 1..7), any::<bool>()).prop_map(|(p, r)| RawBeh::Script(p, r)),
        1 => (0u32..3, dist(10 * US, MS)).prop_map(|(v, w)| RawBeh::Handler(v, w)),
        1 => (5 * MS..=40 * MS, dist(US, 10 * MS), 0..=30 * MS).prop_map(|(p, e, l)| RawBeh::Player(p, e, l)),
    ]
}

#[derive(Clone, Debug)]
struct RawTask {
    beh: RawBeh,
    /// Start, in thousandths of half the horizon.
    start_pm: u32,
    /// 0 = all CPUs.
    affinity: u8,
    /// Joins this scheduler index at start (0 = stays with the default).
    sched: u8,
    priority: i64,
    period: Ns,
    weight: i64,
    uid: u32,
    /// Turns into an infinite loop at this fraction of the horizon (thousandths).
    loop_pm: Option<u32>,
}

fn raw_task() -> impl Strategy<Value = RawTask> {
    (
        raw_beh(),
        prop_oneof![2 => Just(0u32), 1 => 0u32..1000],
        prop_oneof![3 => Just(0u8), 1 => any::<u8>()],
        0u8..4,
        0i64..10,
        MS..100 * MS,
        1i64..5,
        prop_oneof![Just(0u32), Just(1000u32)],
        proptest::option::weighted(0.1, 0u32..1000),
    )
        .prop_map(|(beh, start_pm, affinity, sched, priority, period, weight, uid, loop_pm)| RawTask {
            beh,
            start_pm,
            affinity,
            sched,
            priority,
            period,
            weight,
            uid,
            loop_pm,
        })
}

#[derive(Clone, Debug)]
struct RawSched {
    /// 0 rr, 1 fps, 2 fps rm, 3 wrr.
    kind: u8,
    quantum: Option<Ns>,
    /// Hard time (on a CPU of its own) rather than a reservation.
    hard: bool,
    ppm: u64,
    load_pm: Option<u32>,
    unload_pm: Option<u32>,
}

fn raw_sched() -> impl Strategy<Value = RawSched> {
    (
        0u8..POLICY_KINDS,
        proptest::option::of(MS..=20 * MS),
        any::<bool>(),
        100_000u64..=300_000,
        proptest::option::of(0u32..500),
        proptest::option::of(0u32..1000),
    )
        .prop_map(|(kind, quantum, hard, ppm, load_pm, unload_pm)| RawSched { kind, quantum, hard, ppm, load_pm, unload_pm })
}

#[derive(Clone, Debug)]
struct RawScenario {
    cpus: u16,
    tick: bool,
    hz: u32,
    switch_cost: Ns,
    migration_cost: Ns,
    unscheduled: Option<(Dist, Dist)>,
    default_kind: u8,
    default_quantum: Option<Ns>,
    scheds: Vec<RawSched>,
    tasks: Vec<RawTask>,
    interrupts: Vec<(u32, Dist, u32, bool)>,
    until: Ns,
    seed: u64,
}

fn raw_scenario() -> impl Strategy<Value = RawScenario> {
    (
        (1u16..=4, any::<bool>(), 100u32..=1000, 0..=50 * US, 0..=50 * US),
        proptest::option::weighted(0.3, (dist(MS, 10 * MS), dist(5 * US, 100 * US))),
        (0u8..POLICY_KINDS, proptest::option::of(MS..=20 * MS)),
        proptest::collection::vec(raw_sched(), 0..=2),
        proptest::collection::vec(raw_task(), 1..=40),
        proptest::collection::vec((0u32..4, dist(500 * US, 20 * MS), 0u32..1000, any::<bool>()), 0..=3),
        (50 * MS..=500 * MS, any::<u64>()),
    )
        .prop_map(
            |((cpus, tick, hz, sw, mig), unscheduled, (default_kind, default_quantum), scheds, tasks, interrupts, (until, seed))| {
                RawScenario {
                    cpus,
                    tick,
                    hz,
                    switch_cost: sw,
                    migration_cost: mig,
                    unscheduled,
                    default_kind,
                    default_quantum,
                    scheds,
                    tasks,
                    interrupts,
                    until,
                    seed,
                }
            },
        )
}

/// The number of policy configurations `policy_of` can build.
const POLICY_KINDS: u8 = 10;

fn policy_of(kind: u8, quantum: Option<Ns>) -> PolicySpec {
    let mut params = BTreeMap::new();
    let name = match kind {
        0 => "rr",
        1 | 2 => "fps",
        3 => "wrr",
        4 => "bvt",
        5 => "linux22",
        6 => "bvt2",
        7 => "unix",
        8 => "fb",
        _ => "timed",
    };
    if kind == 2 {
        params.insert("rm".to_string(), ParamValue::Bool(true));
    }
    if let Some(q) = quantum {
        // rr, fps and wrr take a quantum; BVT's equivalents are its mcu and C
        match name {
            "rr" | "fps" | "wrr" => params.insert("quantum".to_string(), dur(q)),
            "bvt" | "bvt2" => params.insert("mcu".to_string(), dur(q)),
            "linux22" | "unix" => params.insert("tick".to_string(), dur(q)),
            "fb" => params.insert("quantum".to_string(), dur(q)),
            _ => params.insert("resolution".to_string(), dur(q)),
        };
    }
    PolicySpec { kind: name.into(), params }
}

fn frac(until: Ns, pm: u32) -> Ns {
    (until as u128 * pm as u128 / 1000) as Ns
}

/// Turns the raw draw into a valid scenario: scheduler registrations never conflict
/// (hard-time schedulers on distinct CPUs, listed before the reserved ones; small
/// demands), repeating scripts always contain a phase that takes time, references are
/// resolved to existing names (or, on purpose, to one nobody registered).
fn build(raw: &RawScenario) -> Scenario {
    let until = raw.until;
    let cpus = raw.cpus;
    // Extra schedulers: hard-time ones first (a distinct CPU each), then reserved.
    let mut hard_cpus = 0u16;
    let mut hard = Vec::new();
    let mut reserved = Vec::new();
    for (k, s) in raw.scheds.iter().enumerate() {
        let usage = if s.hard && hard_cpus < cpus {
            hard_cpus += 1;
            Usage::HardTime { cpus: CpuSet::only(CpuId(hard_cpus - 1)), util_ppm: s.ppm }
        } else {
            Usage::Reserved { cpu_ppm: s.ppm }
        };
        let load_at = s.load_pm.map_or(0, |pm| frac(until, pm));
        let unload_at = s.unload_pm.map(|pm| load_at + 1 + frac(until - load_at, pm));
        let spec = SchedulerSpec { name: format!("s{k}"), policy: policy_of(s.kind, s.quantum), usage, load_at, unload_at };
        if matches!(usage, Usage::HardTime { .. }) {
            hard.push(spec)
        } else {
            reserved.push(spec)
        }
    }
    let schedulers: Vec<SchedulerSpec> = hard.into_iter().chain(reserved).collect();
    let sched_name = |idx: u8| -> String {
        match idx as usize {
            0 => DEFAULT.to_string(),
            i if i <= raw.scheds.len() => format!("s{}", i - 1),
            _ => "nobody".to_string(),
        }
    };
    let n = raw.tasks.len();
    let tasks = raw
        .tasks
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let behaviour = match &t.beh {
                RawBeh::Cpu(w) => Behaviour::Cpu { work: *w },
                RawBeh::Periodic { period, offset_pm, exec, deadline_pm, jobs } => Behaviour::Periodic {
                    period: *period,
                    offset: frac(*period, *offset_pm),
                    exec: exec.clone(),
                    deadline: frac(*period, *deadline_pm).max(1),
                    jobs: *jobs,
                },
                RawBeh::Interactive(b, th) => Behaviour::Interactive { burst: b.clone(), think: th.clone() },
                RawBeh::Io(r, s, v) => Behaviour::Io { run: r.clone(), sleep: s.clone(), voluntary: *v, disk: None },
                RawBeh::Handler(v, w) => Behaviour::Handler { vector: *v, work: w.clone() },
                RawBeh::Player(p, e, l) => Behaviour::Player { period: *p, offset: 0, exec: e.clone(), late_after: *l, read: None },
                RawBeh::Script(phases, repeat) => {
                    let mut out: Vec<Phase> = phases
                        .iter()
                        .map(|p| match p {
                            RawPhase::Run(d) => Phase::Run(d.clone()),
                            RawPhase::Sleep(d) => Phase::Sleep(d.clone()),
                            RawPhase::Fault(d) => Phase::Fault(d.clone()),
                            RawPhase::Timer(p) => Phase::Timer(*p),
                            RawPhase::Yield => Phase::Yield,
                            RawPhase::Send(s, k, v) => Phase::Send(SendSpec {
                                to: sched_name(*s),
                                request: match k {
                                    0 => Request::Param { name: "priority".into(), value: *v },
                                    1 => Request::Param { name: "weight".into(), value: *v },
                                    2 => Request::Warp { on: *v > 0 },
                                    _ => Request::Set { delay: (*v).unsigned_abs() * MS },
                                },
                                task: None,
                            }),
                            RawPhase::Join(s) => Phase::Join(sched_name(*s)),
                            RawPhase::Leave => Phase::Leave,
                            RawPhase::HandOff(to, d) => {
                                let to = if n > 1 { (i + 1 + *to as usize % (n - 1)) % n } else { i };
                                Phase::HandOff { to: format!("t{to}"), sleep: d.clone() }
                            }
                        })
                        .collect();
                    if *repeat
                        && !out.iter().any(|p| {
                            matches!(p, Phase::Run(_) | Phase::Sleep(_) | Phase::Fault(_) | Phase::Timer(_) | Phase::HandOff { .. })
                        })
                    {
                        out.push(Phase::Run(Dist::Const(100 * US)));
                    }
                    Behaviour::Script { phases: out, repeat: *repeat }
                }
            };
            let affinity = if t.affinity == 0 { CpuSet::first(cpus) } else { CpuSet(t.affinity as u64 & CpuSet::first(cpus).0) };
            let mut params = TaskParams::new();
            params.insert("priority".into(), t.priority);
            params.insert("period".into(), t.period as i64);
            params.insert("weight".into(), t.weight);
            TaskSpec {
                name: format!("t{i}"),
                start: frac(until / 2, t.start_pm),
                scheduler: (t.sched != 0).then(|| sched_name(t.sched)),
                affinity: if affinity.is_empty() { CpuSet::first(cpus) } else { affinity },
                params,
                uid: t.uid,
                behaviour,
                loop_at: t.loop_pm.map(|pm| frac(until, pm)),
            }
        })
        .collect();
    let interrupts = raw
        .interrupts
        .iter()
        .map(|(vector, every, start_pm, warp)| InterruptSpec {
            vector: *vector,
            every: every.clone(),
            start: frac(until / 2, *start_pm),
            warp: *warp,
        })
        .collect();
    Scenario {
        name: "random".into(),
        machine: Machine {
            cpus,
            clock: if raw.tick { ClockMode::Tick } else { ClockMode::OneShot },
            hz: raw.hz,
            tick: None,
            switch_cost: raw.switch_cost,
            migration_cost: raw.migration_cost,
            wake_latency: 0,
            unscheduled: raw.unscheduled.clone().map(|(interval, duration)| Unscheduled { interval, duration, also: Vec::new() }),
            min_best_effort_ppm: None,
        },
        default_name: DEFAULT.into(),
        default_policy: policy_of(raw.default_kind, raw.default_quantum),
        schedulers,
        tasks,
        interrupts,
        memory: None,
        until,
        seed: raw.seed,
    }
}

/// Can this task exit (report scheduler "-")?
fn may_exit(t: &TaskSpec) -> bool {
    match &t.behaviour {
        Behaviour::Cpu { work } => work.is_some(),
        Behaviour::Periodic { jobs, .. } => jobs.is_some(),
        Behaviour::Script { repeat, .. } => !repeat,
        Behaviour::Interactive { .. } | Behaviour::Io { .. } | Behaviour::Handler { .. } | Behaviour::Player { .. } => false,
        Behaviour::Other(_) => false,
    }
}

/// Does this task move itself between schedulers after it starts?
fn moves_itself(t: &TaskSpec) -> bool {
    match &t.behaviour {
        Behaviour::Script { phases, .. } => phases.iter().any(|p| matches!(p, Phase::Join(_) | Phase::Leave)),
        _ => false,
    }
}

/// Is scheduler spec `s` registered at time `at` (events at equal times: loads, then
/// unloads, then task starts — the order `queue_initial_events` queues them)?
fn loaded_at(s: &SchedulerSpec, at: Ns) -> bool {
    s.load_at <= at && !matches!(s.unload_at, Some(u) if u <= at)
}

/// Every property on one report of scenario `sc`.
fn check_report(sc: &Scenario, r: &Report) -> Result<(), TestCaseError> {
    let until = sc.until;
    prop_assert_eq!(r.elapsed_ns, until);
    prop_assert_eq!(r.cpus.len(), sc.machine.cpus as usize);
    prop_assert_eq!(r.tasks.len(), sc.tasks.len());

    // 2. Per CPU: busy + overhead + idle == elapsed; utilisation in [0, 1].
    for c in &r.cpus {
        prop_assert_eq!(c.busy_ns + c.overhead_ns + c.idle_ns, until, "cpu{} accounting", c.cpu);
        prop_assert!((0.0..=1.0).contains(&c.utilisation), "cpu{} utilisation {}", c.cpu, c.utilisation);
    }
    // 3. Σ task CPU == Σ CPU busy; the totals agree with the per-task counters.
    let task_cpu: Ns = r.tasks.iter().map(|t| t.cpu_ns).sum();
    let busy: Ns = r.cpus.iter().map(|c| c.busy_ns).sum();
    prop_assert_eq!(task_cpu, busy);
    let idle: Ns = r.cpus.iter().map(|c| c.idle_ns).sum();
    let overhead: Ns = r.cpus.iter().map(|c| c.overhead_ns).sum();
    prop_assert_eq!(task_cpu + overhead + idle, until * sc.machine.cpus as u64);
    prop_assert_eq!(r.totals.overhead_ns, overhead);
    prop_assert_eq!(r.totals.switches, r.tasks.iter().map(|t| t.switches).sum::<u64>());
    prop_assert_eq!(r.totals.migrations, r.tasks.iter().map(|t| t.migrations).sum::<u64>());
    if task_cpu > 0 {
        let shares: f64 = r.tasks.iter().map(|t| t.share).sum();
        prop_assert!((shares - 1.0).abs() < 1e-9, "shares sum to {}", shares);
    }
    // Without unscheduled time, overhead is made only of switch and migration costs.
    if sc.machine.unscheduled.is_none() {
        let bound = r.totals.switches * sc.machine.switch_cost + r.totals.migrations * sc.machine.migration_cost;
        prop_assert!(overhead <= bound, "overhead {} > switches × cost + migrations × cost = {}", overhead, bound);
    }

    // 6. A task gets at most the time since its start, and never migrates if pinned.
    for (t, spec) in r.tasks.iter().zip(&sc.tasks) {
        prop_assert_eq!(&t.name, &spec.name);
        prop_assert!(t.cpu_ns <= until.saturating_sub(spec.start), "{} got {} ns since its start at {}", t.name, t.cpu_ns, spec.start);
        prop_assert!(t.migrations <= t.switches);
        if spec.affinity.len() == 1 {
            prop_assert_eq!(t.migrations, 0, "{} is pinned to one CPU yet migrated", &t.name);
        }
        prop_assert!((0.0..=1.0).contains(&t.cpu_frac));
        for (what, h) in [("latency", &t.latency), ("response", &t.response), ("lateness", &t.lateness)] {
            if h.count > 0 {
                prop_assert!(
                    h.min_ns <= h.p50_ns && h.p50_ns <= h.p99_ns && h.p99_ns <= h.max_ns && h.min_ns <= h.mean_ns && h.mean_ns <= h.max_ns,
                    "{} {}: {:?}",
                    &t.name,
                    what,
                    h
                );
            }
        }
        // Every latency sample is taken when the task is switched in.
        prop_assert!(t.latency.count <= t.switches, "{}: {} latency samples, {} switches", &t.name, t.latency.count, t.switches);
        // Jobs: at most one finished per release.
        if let Behaviour::Periodic { period, offset, jobs, .. } = spec.behaviour {
            let first = spec.start + offset;
            let released = if first > until { 0 } else { (until - first) / period + 1 };
            let released = jobs.map_or(released, |n| released.min(n));
            prop_assert!(
                t.jobs_met + t.jobs_missed <= released,
                "{}: {} jobs done, {} released",
                &t.name,
                t.jobs_met + t.jobs_missed,
                released
            );
        }
    }
    // No policy livelocked a CPU, no script spun without progress.
    for l in &r.log {
        prop_assert!(!l.contains("reschedules at one instant"), "{}", l);
        prop_assert!(!l.contains("makes no progress"), "{}", l);
    }

    // 5. No task is lost. The registered schedulers at the end are the default and every
    // spec loaded and not unloaded by the horizon (the generator makes no conflicting
    // registration, so none is refused).
    for l in &r.log {
        let about_a_scheduler = l.contains("s scheduler '");
        prop_assert!(!(about_a_scheduler && (l.contains("refused") || l.contains("not loaded"))), "unexpected refusal: {}", l);
    }
    let expected: BTreeSet<String> =
        sc.schedulers.iter().filter(|s| loaded_at(s, until)).map(|s| s.name.clone()).chain([sc.default_name.clone()]).collect();
    let registered: BTreeSet<String> = r.schedulers.iter().map(|s| s.name.clone()).collect();
    prop_assert_eq!(&registered, &expected);
    prop_assert_eq!(&r.schedulers.last().unwrap().name, &sc.default_name, "the default scheduler is at the bottom");
    for (t, spec) in r.tasks.iter().zip(&sc.tasks) {
        if t.scheduler == "-" {
            prop_assert!(may_exit(spec), "{} reports no scheduler but cannot exit", &t.name);
            continue;
        }
        prop_assert!(registered.contains(&t.scheduler), "{} reports unregistered scheduler {}", &t.name, &t.scheduler);
        if !moves_itself(spec) {
            // It joined its scheduler at start if that was loaded then, and returned to
            // the default if it was unloaded since.
            let owner = match &spec.scheduler {
                Some(name) if spec.start <= until => {
                    let joined = sc.schedulers.iter().any(|s| &s.name == name && loaded_at(s, spec.start));
                    let kept = sc.schedulers.iter().any(|s| &s.name == name && loaded_at(s, spec.start) && loaded_at(s, until));
                    if joined && kept {
                        name.clone()
                    } else {
                        sc.default_name.clone()
                    }
                }
                _ => sc.default_name.clone(),
            };
            prop_assert_eq!(&t.scheduler, &owner, "owner of {}", &t.name);
        }
    }
    Ok(())
}

fn cases(default: u32) -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(default);
    ProptestConfig { cases, max_shrink_iters: 2000, ..ProptestConfig::default() }
}

proptest! {
    #![proptest_config(cases(if cfg!(debug_assertions) { 48 } else { 512 }))]

    /// Properties 1–6 on random scenarios, and determinism (4): the same scenario and
    /// seed give a byte-identical JSON report.
    #[test]
    fn random_scenarios_keep_every_invariant(raw in raw_scenario()) {
        let sc = build(&raw);
        let r1 = run_checked(sc.clone());
        check_report(&sc, &r1)?;
        let r2 = run_checked(sc.clone());
        prop_assert!(r1.to_json() == r2.to_json(), "same scenario and seed, different reports");
    }

    /// 6. A CPU-bound task alone (zero costs, no unscheduled time) gets every ns from its
    /// start to the horizon, whatever the policy, clock, CPUs, affinity — and even if it
    /// sits in a scheduler that is unloaded under it.
    #[test]
    fn a_lone_hog_gets_all_of_its_cpu(
        cpus in 1u16..=4, tick in any::<bool>(), hz in 100u32..=1000, kind in 0u8..POLICY_KINDS,
        quantum in proptest::option::of(MS..=20 * MS), affinity in any::<u8>(),
        start_pm in 0u32..1000, until in 10 * MS..=300 * MS,
        extra in proptest::option::of((0u8..POLICY_KINDS, 0u32..500, proptest::option::of(0u32..1000))),
    ) {
        let m = machine(cpus, if tick { ClockMode::Tick } else { ClockMode::OneShot }, hz, 0, 0);
        let mut t = hog("hog");
        t.start = frac(until / 2, start_pm);
        let aff = CpuSet(affinity as u64 & CpuSet::first(cpus).0);
        t.affinity = if aff.is_empty() { CpuSet::first(cpus) } else { aff };
        let mut sc = scenario(m, policy_of(kind, quantum), vec![t.clone()], until);
        if let Some((k, load_pm, unload_pm)) = extra {
            let load_at = frac(until / 2, load_pm);
            sc.schedulers.push(SchedulerSpec {
                name: "x".into(),
                policy: policy_of(k, quantum),
                usage: Usage::Reserved { cpu_ppm: 200_000 },
                load_at,
                unload_at: unload_pm.map(|pm| load_at + 1 + frac(until - load_at, pm)),
            });
            sc.tasks[0].scheduler = Some("x".into());
        }
        let r = run_checked(sc.clone());
        check_report(&sc, &r)?;
        prop_assert_eq!(r.tasks[0].cpu_ns, until - t.start);
        prop_assert_eq!(r.totals.migrations, 0);
    }
}

/// A different seed may give a different run (it is used); the same one never does.
#[test]
fn the_seed_drives_the_random_draws() {
    let io = |n: &str| task(n, Behaviour::Io { run: Dist::Exp(MS), sleep: Dist::Exp(3 * MS), voluntary: true, disk: None });
    let mut sc = scenario(machine(2, ClockMode::OneShot, 0, 5 * US, 0), rr(2 * MS), vec![io("a"), io("b"), io("c")], 200 * MS);
    let a = run_checked(sc.clone());
    let b = run_checked(sc.clone());
    assert_eq!(a.to_json(), b.to_json());
    sc.seed = 2;
    let c = run_checked(sc);
    let cpu = |r: &Report| r.tasks.iter().map(|t| t.cpu_ns).collect::<Vec<_>>();
    assert_ne!(cpu(&a), cpu(&c), "seed 1 and seed 2 drew the same run");
}

// ---------------------------------------------------------------------------------------
// Targeted tests
// ---------------------------------------------------------------------------------------

/// Two hogs on one CPU under rr, quantum q, switch cost s: a switch at every quantum
/// boundary (the switch cost is taken out of the quantum), each costing s, except that
/// the overhead of a switch within s of the horizon is cut at the horizon.
#[test]
fn switch_cost_is_charged_once_per_switch() {
    for (q, s, until) in [(10 * MS, 50 * US, 105 * MS + 20 * US), (3 * MS, 7 * US, 100 * MS), (5 * MS, 0, 52 * MS)] {
        let sc = scenario(machine(1, ClockMode::OneShot, 0, s, 1_000 * US), rr(q), vec![hog("a"), hog("b")], until);
        let r = run_checked(sc);
        // Switches happen at 0, q, 2q, ... up to and including the horizon.
        let switches = until / q + 1;
        assert_eq!(r.totals.switches, switches, "q {q} s {s}");
        assert_eq!(r.totals.migrations, 0);
        let expected: Ns = (0..switches).map(|k| s.min(until - k * q)).sum();
        assert_eq!(r.cpus[0].overhead_ns, expected, "q {q} s {s}");
        assert_eq!(r.cpus[0].idle_ns, 0);
        assert_eq!(task_of(&r, "a").cpu_ns + task_of(&r, "b").cpu_ns, until - expected);
        // Equal shares up to the last partial quantum.
        assert!(task_of(&r, "a").cpu_ns.abs_diff(task_of(&r, "b").cpu_ns) <= q);
    }
}

/// Three hogs on two CPUs must migrate; each migration costs the migration cost on top
/// of the switch cost. Tasks pinned to one CPU never migrate.
#[test]
fn migrations_are_counted_and_charged() {
    let (q, s, m, until) = (5 * MS, 10 * US, 40 * US, 200 * MS);
    let sc = scenario(machine(2, ClockMode::OneShot, 0, s, m), rr(q), vec![hog("a"), hog("b"), hog("c")], until);
    let r = run_checked(sc);
    let migrations: u64 = r.tasks.iter().map(|t| t.migrations).sum();
    assert!(migrations > 0, "3 hogs on 2 CPUs never migrated");
    assert_eq!(r.totals.migrations, migrations);
    let full = r.totals.switches * s + r.totals.migrations * m;
    let overhead = r.totals.overhead_ns;
    // Costs fit inside a quantum, so only a switch at the very horizon is cut short.
    assert!(overhead <= full && overhead + 2 * (s + m) >= full, "overhead {overhead}, switches/migrations cost {full}");
    for t in &r.tasks {
        assert!(t.cpu_ns.abs_diff(2 * until / 3) <= 2 * q, "{} got {}", t.name, t.cpu_ns);
    }

    // Pinned: two hogs on each CPU, no migrations at all.
    let mut tasks = vec![hog("a0"), hog("b0"), hog("a1"), hog("b1")];
    for (i, t) in tasks.iter_mut().enumerate() {
        t.affinity = CpuSet::only(CpuId(i as u16 / 2));
    }
    let sc = scenario(machine(2, ClockMode::OneShot, 0, s, m), rr(q), tasks, until);
    let r = run_checked(sc);
    assert_eq!(r.totals.migrations, 0);
    // Per CPU a switch at 0, q, 2q, ... and one at the horizon whose cost is cut to 0.
    assert_eq!(r.totals.switches, 2 * (until / q + 1));
    assert_eq!(r.totals.overhead_ns, 2 * (until / q) * s);
    // Two hogs on two CPUs: each keeps its CPU.
    let sc = scenario(machine(2, ClockMode::OneShot, 0, s, m), rr(q), vec![hog("a"), hog("b")], until);
    let r = run_checked(sc);
    assert_eq!(r.totals.migrations, 0);
    assert_eq!(r.totals.switches, 2);
}

/// Under the tick clock a slice ends at the first tick at or after its nominal end: rr
/// with a 3ms quantum gives 3ms slices at HZ=1000 and 4ms slices at HZ=250.
#[test]
fn tick_clock_rounds_slices_up_to_ticks() {
    let until = 120 * MS;
    let run = |hz: u32| {
        let sc = scenario(machine(1, ClockMode::Tick, hz, 0, 0), rr(3 * MS), vec![hog("a"), hog("b")], until);
        run_checked(sc)
    };
    let fine = run(1000);
    let coarse = run(250);
    // A switch at 0 and at every slice end up to and including the horizon.
    assert_eq!(fine.totals.switches, until / (3 * MS) + 1);
    assert_eq!(coarse.totals.switches, until / (4 * MS) + 1);
    for r in [&fine, &coarse] {
        assert_eq!(task_of(r, "a").cpu_ns, until / 2);
        assert_eq!(task_of(r, "b").cpu_ns, until / 2);
    }
    // One-shot timers: exactly the quantum.
    let sc = scenario(machine(1, ClockMode::OneShot, 250, 0, 0), rr(3 * MS), vec![hog("a"), hog("b")], until);
    assert_eq!(run_checked(sc).totals.switches, until / (3 * MS) + 1);
}

/// An interrupt handler on an idle CPU starts within the switch cost of the interrupt
/// (wake-ups from interrupts are immediate even under the tick clock); under fps at a
/// high priority it preempts a hog just as fast.
#[test]
fn interrupt_handler_starts_within_the_switch_cost() {
    let (s, work) = (20 * US, 100 * US);
    for clock in [ClockMode::OneShot, ClockMode::Tick] {
        for with_hog in [false, true] {
            let handler = with_param(task("irq", Behaviour::Handler { vector: 7, work: Dist::Const(work) }), "priority", 10);
            let mut tasks = vec![handler];
            if with_hog {
                tasks.push(hog("hog"));
            }
            let mut sc = scenario(machine(1, clock, 250, s, 0), policy("fps", &[]), tasks, 200 * MS);
            sc.interrupts.push(InterruptSpec { vector: 7, every: Dist::Const(3 * MS + 333), start: 0, warp: false });
            let r = run_checked(sc);
            let h = task_of(&r, "irq");
            assert_eq!(r.totals.interrupts, (200 * MS) / (3 * MS + 333));
            assert_eq!(h.latency.count, r.totals.interrupts, "{clock:?} hog {with_hog}");
            // Every dispatch of the handler is a switch, so each latency is at least s; a
            // mean (exact, unlike the percentiles) of s means every one is exactly s.
            assert_eq!(h.latency.mean_ns, s, "{clock:?} hog {with_hog}: latency beyond the switch cost");
            assert_eq!(h.response.mean_ns, s + work, "{clock:?} hog {with_hog}");
            assert_eq!(h.cpu_ns, r.totals.interrupts * work);
        }
    }
}

/// The latency and response summaries. Every latency here is exactly s, so min, p50,
/// p99 and max must all be s; the responses (= work, uniform in [100us, 1ms]) must have
/// their median near 550us and their 99th percentile near 1ms.
#[test]
fn latency_and_response_percentiles_are_right() {
    let s = 20 * US;
    let mut sc = scenario(
        machine(1, ClockMode::OneShot, 0, s, 0),
        rr(MS),
        vec![task("irq", Behaviour::Handler { vector: 1, work: Dist::Uniform(100 * US, MS) })],
        2 * SEC,
    );
    sc.interrupts.push(InterruptSpec { vector: 1, every: Dist::Const(2 * MS), start: 0, warp: false });
    let r = run_checked(sc);
    let h = task_of(&r, "irq");
    assert_eq!((r.totals.interrupts, h.latency.count), (1000, 1000));
    assert_eq!((h.latency.min_ns, h.latency.p50_ns, h.latency.p99_ns, h.latency.max_ns), (s, s, s, s));
    let resp = h.response;
    // The handler for the interrupt at the horizon has not finished.
    assert_eq!(resp.count, 999);
    assert!(resp.min_ns >= s + 100 * US && resp.max_ns <= s + MS, "{resp:?}");
    assert!(resp.p50_ns.abs_diff(s + 550 * US) <= 60 * US, "median response {} ns: {resp:?}", resp.p50_ns);
    assert!(resp.p99_ns.abs_diff(s + 990 * US) <= 30 * US, "p99 response {} ns: {resp:?}", resp.p99_ns);
}

/// Go!'s block(hand_off): the named task runs next on that CPU, even over a more
/// important one. Under fps, "giver" (priority 5) runs 1ms and hands off to "low"
/// (priority 0) while "mid" (priority 3, a hog) waits: without the hand-off "low" would
/// never run.
#[test]
fn hand_off_runs_the_named_task_next() {
    let giver = task(
        "giver",
        Behaviour::Script {
            phases: vec![Phase::Run(Dist::Const(MS)), Phase::HandOff { to: "low".into(), sleep: Dist::Const(4 * MS) }],
            repeat: true,
        },
    );
    let tasks = vec![with_param(giver, "priority", 5), with_param(hog("mid"), "priority", 3), with_param(hog("low"), "priority", 0)];
    let sc = scenario(machine(1, ClockMode::OneShot, 0, 0, 0), policy("fps", &[]), tasks, 100 * MS);
    let r = run_checked(sc);
    assert_eq!(r.totals.hand_offs, 20, "one hand-off per 5ms cycle");
    // giver wakes every 5ms and preempts low; low runs the 4ms in between.
    assert_eq!(task_of(&r, "giver").cpu_ns, 20 * MS);
    assert_eq!(task_of(&r, "low").cpu_ns, 80 * MS);
    assert_eq!(task_of(&r, "mid").cpu_ns, 0);

    // A hand-off to a task that is not runnable falls back to an ordinary decision.
    let giver = task(
        "giver",
        Behaviour::Script {
            phases: vec![Phase::Run(Dist::Const(MS)), Phase::HandOff { to: "sleeper".into(), sleep: Dist::Const(4 * MS) }],
            repeat: true,
        },
    );
    let sleeper = task("sleeper", Behaviour::Script { phases: vec![Phase::Sleep(Dist::Const(SEC))], repeat: true });
    let sc = scenario(machine(1, ClockMode::OneShot, 0, 0, 0), rr(10 * MS), vec![giver, sleeper, hog("h")], 100 * MS);
    let r = run_checked(sc);
    assert_eq!(r.totals.hand_offs, 0);
    assert!(task_of(&r, "giver").cpu_ns > 0);
    assert_eq!(task_of(&r, "giver").cpu_ns + task_of(&r, "h").cpu_ns, 100 * MS);
}

/// A hand-off grants the target the CPU with no slice (`Dispatched::slice == None`).
/// Under a time-sharing policy whose slices are the only thing that preempts (rr), a
/// CPU-bound target then keeps the CPU for good: the other tasks, the giver included,
/// never run again. Go!'s GTE preempts on every tick, so the target should run at most
/// until the end of the giver's slice (or one quantum).
#[test]
fn hand_off_target_does_not_monopolise_the_cpu() {
    let giver = task(
        "giver",
        Behaviour::Script {
            phases: vec![Phase::Run(Dist::Const(MS)), Phase::HandOff { to: "target".into(), sleep: Dist::Const(MS) }],
            repeat: true,
        },
    );
    let sc = scenario(machine(1, ClockMode::OneShot, 0, 0, 0), rr(10 * MS), vec![giver, hog("target"), hog("other")], SEC);
    let r = run_checked(sc);
    assert!(r.totals.hand_offs >= 1);
    let other = task_of(&r, "other").cpu_ns;
    let target = task_of(&r, "target").cpu_ns;
    assert!(other >= 100 * MS, "other got {other} ns of 1s, target {target} ns (hand-offs {})", r.totals.hand_offs);
}

/// A runaway loop (loop_at) under fps at a high priority keeps the CPU from then on;
/// under rr it gets an equal share with the other hog.
#[test]
fn runaway_loop_keeps_the_cpu_under_fps_and_shares_under_rr() {
    let mut hi = with_param(
        task("hi", Behaviour::Script { phases: vec![Phase::Run(Dist::Const(MS)), Phase::Sleep(Dist::Const(9 * MS))], repeat: true }),
        "priority",
        10,
    );
    hi.loop_at = Some(50 * MS);
    let lo = with_param(hog("lo"), "priority", 1);
    let sc = scenario(machine(1, ClockMode::OneShot, 0, 0, 0), policy("fps", &[]), vec![hi, lo], 200 * MS);
    let r = run_checked(sc);
    // Before 50ms: hi runs 1ms every 10ms (5 × 1ms), lo the rest; after: hi only.
    assert_eq!(task_of(&r, "hi").cpu_ns, 5 * MS + 150 * MS);
    assert_eq!(task_of(&r, "lo").cpu_ns, 45 * MS);
    assert!(r.log.iter().any(|l| l.contains("hi: fault")), "{:?}", r.log);

    // rr: a sleeper turns into a loop at 100ms and then shares equally with a hog.
    let mut looper = task("looper", Behaviour::Script { phases: vec![Phase::Sleep(Dist::Const(1000 * SEC))], repeat: true });
    looper.loop_at = Some(100 * MS);
    let sc = scenario(machine(1, ClockMode::OneShot, 0, 0, 0), rr(10 * MS), vec![looper, hog("hog")], 1100 * MS);
    let r = run_checked(sc);
    let l = task_of(&r, "looper").cpu_ns;
    let h = task_of(&r, "hog").cpu_ns;
    assert!(l.abs_diff(500 * MS) <= 10 * MS, "looper {l}");
    assert!((h - 100 * MS).abs_diff(500 * MS) <= 10 * MS, "hog {h}");
    assert_eq!(l + h, 1100 * MS);
}

/// The owner reported at the end: a task of an unloaded scheduler is back with the
/// default; one of a loaded scheduler stays there; an exited task has none ("-").
#[test]
fn tasks_of_an_unloaded_scheduler_return_to_the_default() {
    let mut sc = scenario(machine(2, ClockMode::OneShot, 0, 0, 0), rr(5 * MS), vec![], 100 * MS);
    for (name, unload_at) in [("gone", Some(50 * MS)), ("stays", None)] {
        sc.schedulers.push(SchedulerSpec {
            name: name.into(),
            policy: rr(MS),
            usage: Usage::Reserved { cpu_ppm: 200_000 },
            load_at: 0,
            unload_at,
        });
    }
    let mut a = hog("a");
    a.scheduler = Some("gone".into());
    let mut b = hog("b");
    b.scheduler = Some("stays".into());
    let c = task("c", Behaviour::Cpu { work: Some(10 * MS) });
    let d = task(
        "d",
        Behaviour::Script {
            phases: vec![
                Phase::Join("gone".into()),
                Phase::Run(Dist::Const(MS)),
                Phase::Join("stays".into()),
                Phase::Sleep(Dist::Const(SEC)),
            ],
            repeat: false,
        },
    );
    let mut e = hog("e");
    e.scheduler = Some("late".into()); // nobody registered "late": stays with the default
    sc.tasks = vec![a, b, c, d, e];
    let r = run_checked(sc);
    assert_eq!(task_of(&r, "a").scheduler, DEFAULT);
    assert_eq!(task_of(&r, "b").scheduler, "stays");
    assert_eq!(task_of(&r, "c").scheduler, "-");
    assert_eq!(task_of(&r, "d").scheduler, "stays");
    assert_eq!(task_of(&r, "e").scheduler, DEFAULT);
    assert_eq!(task_of(&r, "e").refused_messages, 1);
    let names: Vec<&str> = r.schedulers.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["stays", DEFAULT]);
}

/// An idle CPU is all idle; a hog alone on one of two CPUs leaves the other idle.
#[test]
fn idle_time_is_accounted() {
    let sc = scenario(machine(2, ClockMode::Tick, 100, 30 * US, 0), rr(5 * MS), vec![hog("a")], 100 * MS);
    let r = run_checked(sc);
    assert_eq!(r.cpus[0].busy_ns, 100 * MS - 30 * US);
    assert_eq!(r.cpus[0].overhead_ns, 30 * US);
    assert_eq!(r.cpus[1].idle_ns, 100 * MS);
    assert_eq!(r.cpus[1].utilisation, 0.0);
}

/// A lower scheduler must not be able to livelock a CPU whose task a higher scheduler
/// chose. Here "top" (rr) runs its two hogs; the default (fps) hosts them as guests at
/// priority 0 and has a more important hog of its own, t1 (priority 2). Each time top
/// dispatches a guest, fps (told through on_dispatch) takes it for its own least
/// important running task and asks for a reschedule to run t1; the dispatcher asks top
/// first, top picks its hog again, fps asks again, ... at one instant, until the
/// engine's RESCHED_LIMIT (10,000) stops honouring the requests.
#[test]
fn a_lower_scheduler_cannot_livelock_a_cpu_run_by_a_higher_one() {
    for cpus in [1u16, 2] {
        let mut sc = scenario(machine(cpus, ClockMode::OneShot, 100, 0, 0), policy("fps", &[]), vec![], 50 * MS);
        sc.schedulers.push(SchedulerSpec {
            name: "top".into(),
            policy: rr(10 * MS),
            usage: Usage::Reserved { cpu_ppm: 100_000 },
            load_at: 0,
            unload_at: None,
        });
        let mut t0 = hog("t0");
        t0.scheduler = Some("top".into());
        let mut t2 = hog("t2");
        t2.scheduler = Some("top".into());
        sc.tasks = vec![t0, with_param(hog("t1"), "priority", 2), t2];
        let r = run_checked(sc);
        let livelock: Vec<&String> = r.log.iter().filter(|l| l.contains("reschedules at one instant")).collect();
        assert!(livelock.is_empty(), "{cpus} CPU(s): {livelock:?}; {} decisions in 50ms", r.totals.decisions);
        assert!(r.totals.decisions < 1_000, "{cpus} CPU(s): {} decisions in 50ms", r.totals.decisions);
    }
}

/// Under the tick clock a voluntary sleep (and a periodic timer) ends at a tick; an
/// involuntary block (a page fault) and one-shot timers end exactly.
#[test]
fn tick_clock_rounds_voluntary_sleeps_but_not_faults() {
    let until = 100 * MS;
    let run = |clock: ClockMode, second: Phase| {
        let t = task("s", Behaviour::Script { phases: vec![Phase::Run(Dist::Const(MS)), second], repeat: true });
        let r = run_checked(scenario(machine(1, clock, 1000, 0, 0), rr(10 * MS), vec![t], until));
        task_of(&r, "s").cpu_ns
    };
    let sleep = || Phase::Sleep(Dist::Const(2_500 * US));
    let fault = || Phase::Fault(Dist::Const(2_500 * US));
    // Runs start every 4ms (1ms + 2.5ms rounded up to 3ms): 0, 4, ..., 96 → 25 runs.
    assert_eq!(run(ClockMode::Tick, sleep()), 25 * MS);
    // Every 3.5ms: 0, 3.5, ..., 98 → 29 runs.
    assert_eq!(run(ClockMode::OneShot, sleep()), 29 * MS);
    assert_eq!(run(ClockMode::Tick, fault()), 29 * MS);
    // A periodic timer: a run at 0, 10, ..., 90 (and one cut off at the horizon).
    assert_eq!(run(ClockMode::Tick, Phase::Timer(10 * MS)), 10 * MS);
    assert_eq!(run(ClockMode::OneShot, Phase::Timer(10 * MS)), 10 * MS);
}

/// Unscheduled time is overhead, taken from whatever runs (or from idle time).
#[test]
fn unscheduled_time_is_overhead() {
    let until = 100 * MS;
    for with_hog in [false, true] {
        let mut m = machine(1, ClockMode::OneShot, 0, 0, 0);
        m.unscheduled = Some(Unscheduled { interval: Dist::Const(MS), duration: Dist::Const(10 * US), also: Vec::new() });
        let tasks = if with_hog { vec![hog("h")] } else { vec![] };
        let r = run_checked(scenario(m, rr(10 * MS), tasks, until));
        // At 1, 2, ..., 100ms; the one at the horizon is cut to nothing.
        assert_eq!(r.cpus[0].overhead_ns, 99 * 10 * US, "hog {with_hog}");
        let busy = if with_hog { until - 99 * 10 * US } else { 0 };
        assert_eq!(r.cpus[0].busy_ns, busy, "hog {with_hog}");
        assert_eq!(r.cpus[0].idle_ns, until - 99 * 10 * US - busy, "hog {with_hog}");
    }
    // A second source adds its own stretches: at 10, 20, ..., 90 ms (the one at the
    // horizon is cut), 100 us each, beside the first's.
    let mut m = machine(1, ClockMode::OneShot, 0, 0, 0);
    let also = vec![UnscheduledSource { interval: Dist::Const(10 * MS), duration: Dist::Const(100 * US) }];
    m.unscheduled = Some(Unscheduled { interval: Dist::Const(MS), duration: Dist::Const(10 * US), also });
    let r = run_checked(scenario(m, rr(10 * MS), vec![hog("h")], until));
    assert_eq!(r.cpus[0].overhead_ns, 99 * 10 * US + 9 * 100 * US);
}

/// When the running task exits, its CPU needs one decision. `Sim::after_burst` (Step::Exit)
/// calls `exit`, which already calls `schedule` for the CPU `Dispatcher::remove_task`
/// returns, and then calls `schedule` again: two decisions at one instant, the second
/// preempting (Preempt::Resched) whatever the first dispatched, and the dispatcher's
/// decision/idle counts inflated by one per exit.
#[test]
fn an_exit_makes_one_decision() {
    for kind in ["rr", "fps", "wrr"] {
        let t = task("w", Behaviour::Cpu { work: Some(5 * MS) });
        let r = run_checked(scenario(machine(1, ClockMode::OneShot, 0, 0, 0), policy(kind, &[]), vec![t], 20 * MS));
        // One decision when w starts, one when it exits.
        assert_eq!((r.totals.decisions, r.totals.idle_decisions), (2, 1), "{kind}");
    }
}
