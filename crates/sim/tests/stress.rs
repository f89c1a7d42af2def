//! The stress test, in the spirit of Go!'s 48-hour test (paper 003 §5.1): 1,000 tasks of
//! random behaviour that join and leave schedulers as they run, three schedulers (a
//! hard-time fps, a reserved rr and a reserved wrr) registered and unregistered over and
//! over, interrupts, unscheduled time, runaway loops — over a long simulated horizon.
//!
//! Two runs of the same scenario:
//! - `stress_checked`: `Sim::set_checks(true)`, so the dispatcher's and the engine's
//!   invariants (no CPU runs two tasks, no task runs on two CPUs, every live task is
//!   owned by exactly one registered scheduler, the engine and the dispatcher agree on
//!   every task and CPU, accounting never exceeds elapsed time) are asserted after every
//!   one of its events (about 0.5 million in debug, 4 million in release), and the same
//!   run without the checks gives a byte-identical report;
//! - `stress_long`: the same scenario over a longer horizon with the per-event checks
//!   off (they cost O(tasks) per event), checking the report. The engine's behaviour up
//!   to time T does not depend on the horizon (events past it are merely not queued;
//!   every random draw happens at the same point), so the checked run is an exact prefix
//!   of the long one: the long run's first part is checked event by event, the rest
//!   through the report's identities.
//!
//! Horizons (simulated): debug 30 s checked (about 30 s of CPU) and 120 s long (about
//! 11 s); release 240 s checked (about 28 s) and 600 s long (about 9 s). The two tests
//! run in parallel. `VASSAL_STRESS_SECS` overrides both horizons (e.g. for an overnight
//! run: `VASSAL_STRESS_SECS=172800 cargo test --release --test stress`).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use vassal_core::{CpuId, CpuSet, Ns, Request, TaskParams, Usage, MS, SEC, US};
use vassal_policies::ParamValue;
use vassal_sim::model::{
    Behaviour, ClockMode, Dist, InterruptSpec, Machine, Phase, PolicySpec, Scenario, SchedulerSpec, SendSpec, TaskSpec, Unscheduled,
};
use vassal_sim::{Report, Sim};

const CPUS: u16 = 4;
const TASKS: usize = 1000;
const DEFAULT: &str = "default";
/// The schedulers besides the default: name, policy, usage, and the cycle on which each
/// is registered and unregistered (period, time registered in each period, offset).
const CYCLES: [(&str, Ns, Ns, Ns); 3] =
    [("rt", 7 * SEC, 5 * SEC, 300 * MS), ("res", 5 * SEC, 3 * SEC, SEC), ("share", 3 * SEC, 2 * SEC, 1500 * MS)];

fn horizons() -> (Ns, Ns) {
    if let Some(s) = std::env::var("VASSAL_STRESS_SECS").ok().and_then(|s| s.parse::<u64>().ok()) {
        return (s * SEC, s * SEC);
    }
    if cfg!(debug_assertions) {
        (30 * SEC, 120 * SEC)
    } else {
        (240 * SEC, 600 * SEC)
    }
}

fn dur(ns: Ns) -> ParamValue {
    ParamValue::Str(format!("{ns}ns"))
}

fn policy(kind: &str, params: &[(&str, ParamValue)]) -> PolicySpec {
    PolicySpec { kind: kind.into(), params: params.iter().map(|(k, v)| (k.to_string(), v.clone())).collect() }
}

fn sched_policy(name: &str) -> (PolicySpec, Usage) {
    match name {
        "rt" => (policy("fps", &[("quantum", dur(5 * MS))]), Usage::HardTime { cpus: CpuSet::only(CpuId(3)), util_ppm: 300_000 }),
        "res" => (policy("rr", &[("quantum", dur(2 * MS))]), Usage::Reserved { cpu_ppm: 250_000 }),
        _ => (policy("wrr", &[("quantum", dur(MS))]), Usage::Reserved { cpu_ppm: 150_000 }),
    }
}

/// Every registration of every scheduler up to `until`, listed hard time first (so a
/// registration never conflicts with the order rule), each name's registrations
/// disjoint in time (so no duplicate name is refused).
fn schedulers(until: Ns) -> Vec<SchedulerSpec> {
    let mut out = Vec::new();
    for (name, period, on, offset) in CYCLES {
        let (policy, usage) = sched_policy(name);
        let mut at = offset;
        while at <= until {
            out.push(SchedulerSpec { name: name.into(), policy: policy.clone(), usage, load_at: at, unload_at: Some(at + on) });
            at += period;
        }
    }
    out
}

fn d(rng: &mut ChaCha8Rng, lo: Ns, hi: Ns) -> Dist {
    let a = rng.gen_range(lo..=hi);
    match rng.gen_range(0..4) {
        0 => Dist::Const(a),
        1 => Dist::Uniform(a / 2, a + a / 2),
        2 => Dist::Exp(a),
        _ => Dist::Normal(a, a / 3),
    }
}

const NAMES: [&str; 4] = ["rt", "res", "share", DEFAULT];

fn phase(rng: &mut ChaCha8Rng, me: usize) -> Phase {
    match rng.gen_range(0..20) {
        0..=5 => Phase::Run(d(rng, 50 * US, MS)),
        6..=8 => Phase::Sleep(d(rng, MS, 50 * MS)),
        9 => Phase::Fault(d(rng, 100 * US, 2 * MS)),
        10 => Phase::Timer(rng.gen_range(2..=40) * MS),
        11 => Phase::Yield,
        12..=14 => Phase::Join(NAMES[rng.gen_range(0..NAMES.len())].into()),
        15..=16 => Phase::Leave,
        17 => {
            let to = (me + rng.gen_range(1..TASKS)) % TASKS;
            Phase::HandOff { to: format!("t{to}"), sleep: d(rng, MS, 20 * MS) }
        }
        _ => Phase::Send(SendSpec {
            to: NAMES[rng.gen_range(0..NAMES.len())].into(),
            request: match rng.gen_range(0..3) {
                0 => Request::Param { name: "priority".into(), value: rng.gen_range(0..20) },
                1 => Request::Param { name: "weight".into(), value: rng.gen_range(1..8) },
                _ => Request::Warp { on: rng.gen() },
            },
            task: None,
        }),
    }
}

/// A random behaviour. The mix loads the 4 CPUs to roughly 60–70% on average, so that
/// CPUs go idle and busy all the time (a saturated machine would exercise less).
fn behaviour(rng: &mut ChaCha8Rng, me: usize) -> Behaviour {
    match rng.gen_range(0..100) {
        // Finite CPU work (a CPU hog that ends).
        0..=1 => Behaviour::Cpu { work: Some(rng.gen_range(MS..=2 * SEC)) },
        2..=11 => {
            let period = rng.gen_range(5..=200) * MS;
            Behaviour::Periodic {
                period,
                offset: rng.gen_range(0..period),
                exec: d(rng, 10 * US, period / 100),
                deadline: period,
                jobs: if rng.gen_bool(0.2) { Some(rng.gen_range(1..500)) } else { None },
            }
        }
        12..=26 => Behaviour::Interactive { burst: d(rng, 100 * US, 2 * MS), think: d(rng, 50 * MS, 500 * MS) },
        27..=41 => Behaviour::Io { run: d(rng, 50 * US, MS), sleep: d(rng, 20 * MS, 200 * MS), voluntary: rng.gen(), disk: None },
        42..=46 => Behaviour::Handler { vector: rng.gen_range(0..4), work: d(rng, 10 * US, 100 * US) },
        _ => {
            // Scripts: they join and leave schedulers as they go, and always sleep
            // somewhere so that 1,000 of them leave the machine some idle time.
            let n = rng.gen_range(2..=8);
            let mut phases: Vec<Phase> = (0..n).map(|_| phase(rng, me)).collect();
            phases.push(Phase::Sleep(d(rng, 100 * MS, SEC)));
            Behaviour::Script { phases, repeat: rng.gen_bool(0.9) }
        }
    }
}

fn stress_scenario(until: Ns, seed: u64) -> Scenario {
    // The tasks do not depend on the horizon, so every horizon runs the same workload.
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let tasks = (0..TASKS)
        .map(|i| {
            let behaviour = behaviour(&mut rng, i);
            let mut params = TaskParams::new();
            params.insert("priority".into(), rng.gen_range(0..20));
            params.insert("period".into(), rng.gen_range(1..=100) * MS as i64);
            params.insert("weight".into(), rng.gen_range(1..=4));
            let affinity = if rng.gen_bool(0.8) { CpuSet::first(CPUS) } else { CpuSet(rng.gen_range(1..(1u64 << CPUS))) };
            TaskSpec {
                name: format!("t{i}"),
                // Tasks arrive over the first 20 simulated seconds.
                start: if rng.gen_bool(0.5) { 0 } else { rng.gen_range(0..20 * SEC) },
                scheduler: if rng.gen_bool(0.2) { Some(NAMES[rng.gen_range(0..3)].into()) } else { None },
                affinity,
                params,
                uid: if rng.gen_bool(0.9) { 0 } else { 1000 },
                behaviour,
                // A couple of runaway loops (each then eats a CPU's worth under rr).
                loop_at: if rng.gen_bool(0.002) { Some(rng.gen_range(SEC..120 * SEC)) } else { None },
            }
        })
        .collect();
    let interrupts =
        (0..4).map(|v| InterruptSpec { vector: v, every: Dist::Exp((10 + v as u64 * 10) * MS), start: 0, warp: v % 2 == 0 }).collect();
    Scenario {
        name: "stress".into(),
        machine: Machine {
            cpus: CPUS,
            clock: ClockMode::Tick,
            hz: 250,
            tick: None,
            switch_cost: 3 * US,
            migration_cost: 15 * US,
            wake_latency: 0,
            unscheduled: Some(Unscheduled { interval: Dist::Exp(5 * MS), duration: Dist::Exp(20 * US), also: Vec::new() }),
            min_best_effort_ppm: None,
        },
        default_name: DEFAULT.into(),
        default_policy: policy("rr", &[("quantum", dur(10 * MS))]),
        // Listed up to the longest horizon whatever `until` is, so that runs with
        // different horizons differ in nothing else.
        schedulers: schedulers(horizons().1),
        tasks,
        interrupts,
        memory: None,
        until,
        seed,
    }
}

/// The report's identities (see the module documentation).
fn check_report(sc: &Scenario, r: &Report) {
    let until = sc.until;
    assert_eq!(r.elapsed_ns, until);
    assert_eq!(r.tasks.len(), TASKS, "a task is missing from the report");
    // Per CPU: busy + overhead + idle == elapsed.
    for c in &r.cpus {
        assert_eq!(c.busy_ns + c.overhead_ns + c.idle_ns, until, "cpu{}", c.cpu);
        assert!((0.0..=1.0).contains(&c.utilisation));
    }
    // Every task's CPU + overhead + idle adds up to the machine's time.
    let task_cpu: Ns = r.tasks.iter().map(|t| t.cpu_ns).sum();
    let busy: Ns = r.cpus.iter().map(|c| c.busy_ns).sum();
    let overhead: Ns = r.cpus.iter().map(|c| c.overhead_ns).sum();
    let idle: Ns = r.cpus.iter().map(|c| c.idle_ns).sum();
    assert_eq!(task_cpu, busy);
    assert_eq!(task_cpu + overhead + idle, CPUS as u64 * until);
    assert_eq!(r.totals.overhead_ns, overhead);
    assert_eq!(r.totals.switches, r.tasks.iter().map(|t| t.switches).sum::<u64>());
    assert_eq!(r.totals.migrations, r.tasks.iter().map(|t| t.migrations).sum::<u64>());
    for (t, spec) in r.tasks.iter().zip(&sc.tasks) {
        assert!(t.cpu_ns <= until.saturating_sub(spec.start), "{} ran {} ns after starting at {}", t.name, t.cpu_ns, spec.start);
        if spec.affinity.len() == 1 {
            assert_eq!(t.migrations, 0, "{} is pinned yet migrated", t.name);
        }
    }
    // Every registration succeeded and every unregistration happened.
    let mut loads = 0;
    let mut unloads = 0;
    for l in &r.log {
        assert!(!(l.contains("s scheduler '") && (l.contains("refused") || l.contains("not loaded"))), "{l}");
        assert!(!l.contains("failed"), "{l}");
        loads += l.contains("' (") as usize * l.contains(") loaded") as usize;
        unloads += l.contains("' unloaded;") as usize;
    }
    let due_loads = sc.schedulers.iter().filter(|s| s.load_at <= until).count();
    let due_unloads = sc.schedulers.iter().filter(|s| s.unload_at.is_some_and(|u| u <= until)).count();
    assert_eq!((loads, unloads), (due_loads, due_unloads), "registrations and unregistrations");
    // No task is lost: each reports a registered scheduler, or "-" having exited.
    let registered: BTreeSet<&str> = r.schedulers.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(registered.last().copied().map(|_| r.schedulers.last().unwrap().name.as_str()), Some(DEFAULT));
    let mut owners: BTreeMap<&str, usize> = BTreeMap::new();
    for (t, spec) in r.tasks.iter().zip(&sc.tasks) {
        if t.scheduler == "-" {
            let may_exit = match &spec.behaviour {
                Behaviour::Cpu { work } => work.is_some(),
                Behaviour::Periodic { jobs, .. } => jobs.is_some(),
                Behaviour::Script { repeat, .. } => !repeat,
                _ => false,
            };
            assert!(may_exit, "{} reports no scheduler but cannot exit", t.name);
        } else {
            assert!(registered.contains(t.scheduler.as_str()), "{} is owned by unregistered '{}'", t.name, t.scheduler);
        }
        *owners.entry(t.scheduler.as_str()).or_default() += 1;
    }
    eprintln!(
        "stress {:.0}s: {} events, {} switches, {} migrations, {} hand-offs, {} interrupts; owners at the end {:?}; \
         busy {:.1}% overhead {:.2}% idle {:.1}%",
        until as f64 / 1e9,
        r.totals.events,
        r.totals.switches,
        r.totals.migrations,
        r.totals.hand_offs,
        r.totals.interrupts,
        owners,
        100.0 * busy as f64 / (CPUS as u64 * until) as f64,
        100.0 * overhead as f64 / (CPUS as u64 * until) as f64,
        100.0 * idle as f64 / (CPUS as u64 * until) as f64,
    );
    // The workload did what it is for.
    let messages: u64 = r.tasks.iter().map(|t| t.messages).sum();
    assert!(messages > 1000, "only {messages} messages (joins, leaves, requests)");
    assert!(r.totals.hand_offs > 0 && r.totals.migrations > 0 && r.totals.interrupts > 0);
    assert!(idle > 0, "the machine was never idle: the workload is too heavy to exercise idle CPUs");
}

fn run(until: Ns, checks: bool) -> Report {
    let sc = stress_scenario(until, 48);
    let mut sim = Sim::new(sc.clone()).expect("valid scenario");
    sim.set_checks(checks);
    let t0 = Instant::now();
    let r = sim.run().unwrap_or_else(|e| panic!("stress run failed: {e}"));
    eprintln!("stress {}s simulated, checks {checks}: {:.1}s wall", until / SEC, t0.elapsed().as_secs_f64());
    check_report(&sc, &r);
    r
}

/// Invariants asserted after every event; and the checks change nothing (the same run
/// without them gives a byte-identical report).
#[test]
fn stress_checked() {
    let until = horizons().0;
    let checked = run(until, true);
    let unchecked = run(until, false);
    assert!(checked.to_json() == unchecked.to_json(), "set_checks(true) changed the run");
}

/// The longer horizon, checked through the report (see the module documentation). The
/// run over the checked horizon is a prefix of this one: no task's counters are larger
/// there than here.
#[test]
fn stress_long() {
    let (short, long) = horizons();
    let r = run(long, false);
    let p = run(short, false);
    for (a, b) in p.tasks.iter().zip(&r.tasks) {
        assert!(
            a.cpu_ns <= b.cpu_ns && a.switches <= b.switches && a.migrations <= b.migrations && a.messages <= b.messages,
            "{}: the {}s run is not a prefix of the {}s run",
            a.name,
            short / SEC,
            long / SEC
        );
    }
    assert!(p.totals.events <= r.totals.events && p.totals.hand_offs <= r.totals.hand_offs);
}
