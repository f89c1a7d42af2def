//! An rt-app workload ([`super::model::RtApp`]) as a simulator scenario: threads become
//! scripted tasks, rt-app's scheduling classes become schedulers of the hierarchy in
//! Linux's class order, events become script phases (docs/rtapp.md, "What is mapped").

use std::collections::BTreeMap;

use vassal_core::{CpuId, CpuSet, Ns, TaskParams, Usage, CPU_PPM, MAX_CPUS, MS, SEC};
use vassal_policies::ParamValue;

use super::json::Pos;
use super::model::{err, Cpus, Error, EventKind, Policy, RtApp, Sched, Thread};
use super::Options;
use crate::model::{Behaviour, ClockMode, Dist, Machine, Phase, PolicySpec, Scenario, SchedSel, SchedulerSpec, SyncOp, TaskSpec};
use crate::scenario::MAX_TASKS;

/// CFS's nice-to-weight table (Linux kernel/sched/core.c, `sched_prio_to_weight`):
/// nice -20 .. 19.
pub const PRIO_TO_WEIGHT: [i64; 40] = [
    88761, 71755, 56483, 46273, 36291, 29154, 23254, 18705, 14949, 11916, 9548, 7620, 6100, 4904, 3906, 3121, 2501, 1991, 1586, 1277, 1024,
    820, 655, 526, 423, 335, 272, 215, 172, 137, 110, 87, 70, 56, 45, 36, 29, 23, 18, 15,
];
/// CFS's weight of a SCHED_IDLE task (WEIGHT_IDLEPRIO).
pub const IDLE_WEIGHT: i64 = 3;
/// Linux's SCHED_RR time slice (RR_TIMESLICE, 100 ms).
const RR_TIMESLICE: Ns = 100 * MS;
/// Events left after unrolling loops, at most (a bound on memory, not on behaviour).
const MAX_EVENTS: usize = 1_000_000;
/// The schedulers' names for rt-app's SCHED_DEADLINE and SCHED_FIFO/SCHED_RR threads.
pub const DL: &str = "dl";
pub const RT: &str = "rt";
/// Linux's default RT and deadline bandwidth: sched_rt_runtime_us / sched_rt_period_us
/// = 950000 / 1000000 of each CPU.
const BANDWIDTH_PPM: u64 = 950_000;

/// The scheduling a thread runs with, as the scheduler it joins and the parameters it
/// sets there (the parameters ordered: they are sent in this order).
pub fn sched_sel(s: &Sched, weighted: bool) -> SchedSel {
    match s.policy {
        Policy::Other | Policy::Idle => {
            let w = weight(s);
            SchedSel { scheduler: None, params: if weighted { vec![("weight".into(), w)] } else { Vec::new() } }
        }
        Policy::Fifo | Policy::Rr => SchedSel { scheduler: Some(RT.into()), params: vec![("priority".into(), s.priority)] },
        Policy::Deadline => {
            let dl = s.dl.expect("SCHED_DEADLINE has its parameters");
            SchedSel {
                scheduler: Some(DL.into()),
                params: vec![("period".into(), dl.period as i64), ("deadline".into(), dl.deadline as i64)],
            }
        }
    }
}

/// CFS's weight for a SCHED_OTHER nice value, or SCHED_IDLE's.
pub fn weight(s: &Sched) -> i64 {
    match s.policy {
        Policy::Idle => IDLE_WEIGHT,
        _ => PRIO_TO_WEIGHT[(s.priority.clamp(-20, 19) + 20) as usize],
    }
}

/// Every scheduling a thread uses (its own, then its phases'), with where each is given.
fn scheds(t: &Thread) -> impl Iterator<Item = &Sched> {
    std::iter::once(&t.sched).chain(t.phases.iter().filter_map(|p| p.sched.as_ref()))
}

fn set_of(c: &Cpus) -> CpuSet {
    c.list.iter().fold(CpuSet::NONE, |s, &c| CpuSet(s.0 | CpuSet::only(CpuId(c)).0))
}

/// An event's time at a rate in bytes per second (rounded up to a whole ns).
fn at_rate(bytes: u64, per_sec: u64) -> Ns {
    ((bytes as u128 * SEC as u128).div_ceil(per_sec.max(1) as u128)).min(u64::MAX as u128) as Ns
}

fn repeat(events: &[Phase], times: u64, at: Pos, path: &str) -> Result<Vec<Phase>, Error> {
    let total = (events.len() as u128) * times as u128;
    if total > MAX_EVENTS as u128 {
        return Err(err(
            at,
            path,
            format!("the loops unroll to {total} events, more than {MAX_EVENTS}; use a thread loop of -1 and a shorter horizon"),
        ));
    }
    let mut out = Vec::with_capacity(total as usize);
    for _ in 0..times {
        out.extend_from_slice(events);
    }
    Ok(out)
}

/// Whether the event can make the thread spend time (so a loop of them can go on forever).
fn takes_time(p: &Phase) -> bool {
    match p {
        Phase::Sync(op) => matches!(
            op,
            SyncOp::Suspend(_) | SyncOp::Wait { .. } | SyncOp::SignalWait { .. } | SyncOp::Lock { .. } | SyncOp::Barrier { users: 2.., .. }
        ),
        p => crate::scenario::phase_takes_time(p),
    }
}

/// Where one rt-app phase iteration begins in a task's script: rt-app logs a line per
/// iteration of a phase (its log files' rows), and `vassal twin` reads the simulated
/// rows from the steps the engine records (crates/lab/src/twin.rs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoopStart {
    /// The script step of the iteration's first event.
    pub step: usize,
    /// The phase, by its position in the thread's `phases`.
    pub phase: usize,
}

/// Builds the scenario named `name`.
pub fn to_scenario(app: &RtApp, name: &str, opts: &Options) -> Result<Scenario, Error> {
    to_scenario_with_loops(app, name, opts).map(|(sc, _)| sc)
}

/// Builds the scenario named `name`, with each task's [`LoopStart`]s (in scenario task
/// order; a task whose script repeats lists one pass of it).
pub fn to_scenario_with_loops(app: &RtApp, name: &str, opts: &Options) -> Result<(Scenario, Vec<Vec<LoopStart>>), Error> {
    let live: Vec<&Thread> = app.threads.iter().filter(|t| t.instances > 0).collect();
    if live.is_empty() {
        let at = app.threads.first().map_or(Pos::default(), |t| t.at);
        return Err(err(at, "tasks", "every thread has instance 0; nothing to simulate"));
    }
    let mut total: u64 = 0;
    for t in &live {
        total += t.instances;
        if total > MAX_TASKS as u64 {
            return Err(err(
                t.at,
                &format!("tasks.{}", t.name),
                format!("too many threads in all (more than {MAX_TASKS}, counting instances)"),
            ));
        }
    }
    let kind = opts.policy.clone().unwrap_or_else(|| "bvt".to_string());
    vassal_policies::build(&kind, &BTreeMap::new()).map_err(|e| err(Pos::default(), "--policy", e))?;
    let weighted = kind == "bvt" || kind == "bvt2";

    // Which classes are used, and the checks that go with them.
    let mut fifo: Option<(&Thread, &Sched)> = None;
    let mut rr: Option<(&Thread, &Sched)> = None;
    let mut dl_ppm: u64 = 0;
    for t in &live {
        let mut util: u64 = 0;
        for s in scheds(t) {
            let path = format!("tasks.{}", t.name);
            match s.policy {
                Policy::Fifo => fifo = fifo.or(Some((t, s))),
                Policy::Rr => rr = rr.or(Some((t, s))),
                Policy::Deadline => {
                    let d = s.dl.expect("deadline parameters");
                    util = util.max((d.runtime as u128 * CPU_PPM as u128).div_ceil(d.period as u128) as u64);
                }
                Policy::Other if s.priority != 0 && !weighted => {
                    return Err(err(
                        s.at,
                        &path,
                        format!("a nice value other than 0 needs a weighted policy for SCHED_OTHER (--policy bvt or bvt2), not {kind}"),
                    ));
                }
                Policy::Idle if !weighted => {
                    return Err(err(
                        s.at,
                        &path,
                        format!("SCHED_IDLE needs a weighted policy for SCHED_OTHER (--policy bvt or bvt2), not {kind}"),
                    ));
                }
                _ => {}
            }
        }
        dl_ppm += util * t.instances;
    }
    if let (Some(_), Some((t, s))) = (fifo, rr) {
        return Err(err(
            s.at,
            &format!("tasks.{}", t.name),
            "mixing SCHED_FIFO and SCHED_RR threads is not supported (one fixed-priority scheduler serves them, with or without a time slice)",
        ));
    }

    // The machine.
    let all_cpus = app.threads.iter().flat_map(|t| t.cpus.iter().chain(t.phases.iter().filter_map(|p| p.cpus.as_ref())));
    let highest = all_cpus.clone().flat_map(|c| c.list.iter().copied()).max().map_or(1, |c| c + 1);
    let cpus = opts.cpus.unwrap_or(highest);
    if cpus == 0 || cpus > MAX_CPUS {
        return Err(err(Pos::default(), "--cpus", format!("must be between 1 and {MAX_CPUS}")));
    }
    for c in all_cpus {
        if let Some(&bad) = c.list.iter().find(|&&n| n >= cpus) {
            return Err(err(c.at, "cpus", format!("CPU {bad} is not on the {cpus}-CPU machine (use --cpus)")));
        }
    }
    let machine_ppm = BANDWIDTH_PPM * cpus as u64;
    if dl_ppm > machine_ppm {
        // Linux's admission test for SCHED_DEADLINE (sched_dl_overflow: EBUSY)
        let t = live
            .iter()
            .find(|t| t.sched.policy == Policy::Deadline || t.phases.iter().any(|p| p.sched.is_some_and(|s| s.policy == Policy::Deadline)))
            .expect("a deadline thread");
        return Err(err(
            t.at,
            &format!("tasks.{}", t.name),
            format!(
                "the SCHED_DEADLINE threads need {:.1}% of the machine, more than the {:.1}% Linux admits (95% of each of {cpus} CPUs): sched_setattr would fail with EBUSY",
                dl_ppm as f64 / (CPU_PPM * cpus as u64) as f64 * 100.0,
                95.0
            ),
        ));
    }
    let until = match (opts.until, app.global.duration) {
        (Some(u), _) | (None, Some(u)) => u,
        (None, None) => {
            return Err(err(
                Pos::default(),
                "global.duration",
                "is -1 or absent (run until every thread ends): give the simulated horizon with --until",
            ));
        }
    };

    // Shared timers (named once for the whole file) and barrier users (each reference
    // counts once per instance of its thread, as rt-app counts them).
    let mut shared_timers: BTreeMap<&str, usize> = BTreeMap::new();
    let mut barrier_users: BTreeMap<&str, u64> = BTreeMap::new();
    let pi = app.global.pi_enabled;
    let mut any_lock = false;
    for t in &app.threads {
        for e in t.phases.iter().flat_map(|p| &p.events) {
            match &e.kind {
                EventKind::Timer { reference, .. } if !reference.starts_with("unique") => {
                    let n = shared_timers.len();
                    shared_timers.entry(reference).or_insert(n);
                }
                EventKind::Barrier(b) => *barrier_users.entry(b).or_insert(0) += t.instances,
                EventKind::Lock(_) => any_lock = true,
                _ => {}
            }
        }
    }

    let mut tasks = Vec::new();
    let mut loop_starts = Vec::new();
    for t in &app.threads {
        let path = format!("tasks.{}", t.name);
        let base = sched_sel(&t.sched, weighted);
        let mut script: Vec<Phase> = Vec::new();
        if pi && any_lock {
            script.push(Phase::Sync(SyncOp::Init(base.clone())));
        }
        let per_phase_cpus = t.phases.iter().any(|p| p.cpus.is_some());
        let thread_cpus = t.cpus.as_ref().map_or(CpuSet::first(cpus), set_of);
        let mut unique: BTreeMap<&str, usize> = BTreeMap::new();
        let mut body: Vec<Phase> = Vec::new();
        let mut body_starts: Vec<LoopStart> = Vec::new();
        for (k, ph) in t.phases.iter().enumerate() {
            let ppath = if t.phases.len() == 1 && ph.name == t.name { path.clone() } else { format!("{path}.phases.{}", ph.name) };
            let mut evs: Vec<Phase> = Vec::new();
            if per_phase_cpus {
                evs.push(Phase::Sync(SyncOp::Affinity(ph.cpus.as_ref().map_or(thread_cpus, set_of))));
            }
            if let Some(s) = &ph.sched {
                evs.push(Phase::Sync(SyncOp::Sched(sched_sel(s, weighted))));
            }
            for e in &ph.events {
                evs.push(match &e.kind {
                    EventKind::Run(d) => Phase::Run(Dist::Const(*d)),
                    EventKind::Runtime(d) => Phase::RunWall(Dist::Const(*d)),
                    EventKind::Sleep(0) => continue, // nanosleep(0) returns at once
                    EventKind::Sleep(d) => Phase::Sleep(Dist::Const(*d)),
                    EventKind::Timer { reference, period, absolute } => {
                        let (timer, shared) = if reference.starts_with("unique") {
                            let n = unique.len();
                            (*unique.entry(reference).or_insert(n), false)
                        } else {
                            (shared_timers[reference.as_str()], true)
                        };
                        Phase::RtTimer { period: *period, relative: !absolute, timer, shared }
                    }
                    EventKind::Mem(b) => Phase::Run(Dist::Const(at_rate(*b, opts.mem_bandwidth))),
                    EventKind::IoRun(b) if app.global.io_device == "/dev/null" => {
                        let _ = b; // the kernel discards the data at once
                        continue;
                    }
                    EventKind::IoRun(b) => Phase::Fault(Dist::Const(at_rate(*b, opts.io_bandwidth))),
                    EventKind::Yield => Phase::Yield,
                    EventKind::Lock(m) => Phase::Sync(SyncOp::Lock { mutex: m.clone(), inherit: pi }),
                    EventKind::Unlock(m) => Phase::Sync(SyncOp::Unlock(m.clone())),
                    EventKind::Wait { cond, mutex } => Phase::Sync(SyncOp::Wait { cond: cond.clone(), mutex: mutex.clone() }),
                    EventKind::Sync { cond, mutex } => Phase::Sync(SyncOp::SignalWait { cond: cond.clone(), mutex: mutex.clone() }),
                    EventKind::Signal(c) => Phase::Sync(SyncOp::Signal(c.clone())),
                    EventKind::Broad(c) => Phase::Sync(SyncOp::Broadcast(c.clone())),
                    EventKind::Suspend(c) => Phase::Sync(SyncOp::Suspend(c.clone())),
                    EventKind::Resume(c) => Phase::Sync(SyncOp::Resume(c.clone())),
                    EventKind::Barrier(b) => Phase::Sync(SyncOp::Barrier { name: b.clone(), users: barrier_users[b.as_str()] }),
                });
            }
            if !evs.is_empty() {
                let from = body.len();
                let n = match ph.loops {
                    Some(n) => n.min(MAX_EVENTS as u64) as usize,
                    None => 1,
                };
                body_starts.extend((0..n).map(|j| LoopStart { step: from + j * evs.len(), phase: k }));
            }
            match ph.loops {
                Some(n) => body.extend(repeat(&evs, n, ph.at, &ppath)?),
                None if t.phases.len() == 1 && t.loops.is_none() => body = evs,
                None if k + 1 == t.phases.len() && t.loops.is_some() => {
                    return Err(err(ph.at, &format!("{ppath}.loop"), "a phase looping forever (-1) in a thread that loops a finite number of times is not supported; give the thread loop -1"));
                }
                None => {
                    return Err(err(
                        ph.at,
                        &format!("{ppath}.loop"),
                        format!(
                            "a phase looping forever (-1) is supported only as the thread's only phase (this is phase {} of {})",
                            k + 1,
                            t.phases.len()
                        ),
                    ));
                }
            }
        }
        let forever = t.loops.is_none();
        if forever && !body.iter().any(takes_time) {
            return Err(err(t.at, &path, "the thread loops forever through events that take no time"));
        }
        let prefix = script.len();
        let passes = t.loops.unwrap_or(1).min(MAX_EVENTS as u64) as usize;
        let blen = body.len();
        let starts: Vec<LoopStart> = (0..passes)
            .flat_map(|m| body_starts.iter().map(move |b| LoopStart { step: prefix + m * blen + b.step, phase: b.phase }))
            .collect();
        let phases = match t.loops {
            None => {
                script.extend(body);
                script
            }
            Some(n) => {
                script.extend(repeat(&body, n, t.at, &path)?);
                script
            }
        };
        let behaviour = Behaviour::Script { phases, repeat: forever };
        // Parameters for every scheduler the thread may join (each policy reads its own).
        let mut params = TaskParams::new();
        for s in scheds(t) {
            for (k, v) in sched_sel(s, weighted).params {
                params.entry(k).or_insert(v);
            }
        }
        for (k, v) in &base.params {
            params.insert(k.clone(), *v);
        }
        for k in 0..t.instances {
            let name = if t.instances == 1 { t.name.clone() } else { format!("{}-{k}", t.name) };
            tasks.push(TaskSpec {
                name,
                start: t.delay,
                scheduler: base.scheduler.clone(),
                affinity: thread_cpus,
                params: params.clone(),
                uid: 0,
                behaviour: behaviour.clone(),
                loop_at: None,
            });
            loop_starts.push(starts.clone());
        }
    }

    let mut schedulers = Vec::new();
    if dl_ppm > 0 {
        schedulers.push(SchedulerSpec {
            name: DL.into(),
            policy: PolicySpec { kind: "edf".into(), params: BTreeMap::new() },
            usage: Usage::Reserved { cpu_ppm: dl_ppm },
            load_at: 0,
            unload_at: None,
        });
    }
    if fifo.is_some() || rr.is_some() {
        let mut p = BTreeMap::new();
        if rr.is_some() {
            p.insert("quantum".to_string(), ParamValue::Str(format!("{}ms", RR_TIMESLICE / MS)));
        }
        schedulers.push(SchedulerSpec {
            name: RT.into(),
            policy: PolicySpec { kind: "fps".into(), params: p },
            usage: Usage::Reserved { cpu_ppm: machine_ppm - dl_ppm },
            load_at: 0,
            unload_at: None,
        });
    }
    let sc = Scenario {
        name: name.to_string(),
        machine: Machine {
            cpus,
            clock: ClockMode::OneShot,
            hz: crate::scenario::DEFAULT_HZ,
            tick: None,
            switch_cost: 0,
            migration_cost: 0,
            wake_latency: 0,
            unscheduled: None,
            min_best_effort_ppm: None,
        },
        default_name: "default".into(),
        default_policy: PolicySpec { kind, params: BTreeMap::new() },
        schedulers,
        tasks,
        interrupts: Vec::new(),
        until,
        seed: 1,
        memory: None,
    };
    Ok((sc, loop_starts))
}
