//! `vassal check OLD NEW`: a regression gate for policies (docs/check.md). Two versions
//! of a policy — built-in kinds or modules — run the same seeded scenarios, a
//! desktop-like mix and a real-time task set, and each run is compared: CPU share,
//! wake-up latency p99 and missed deadlines per task, and any task left runnable without
//! running for longer than the stall threshold (sched_ext's watchdog rule: a runnable
//! task not scheduled within the timeout is a failure of the scheduler). Every finding
//! names its scenario and seed; `--scenario NAME --seeds N` replays exactly that run.
//!
//! A built-in kind runs as the default scheduler with every task under it; a module is
//! loaded at the top, contained as `vassal sim --load` contains it (ejected on a fault,
//! a refused decision or its 1 s watchdog), above a round-robin default that takes its
//! tasks if it is ejected — as sched_ext falls back to the kernel's scheduler.
//!
//! Invariants: a scenario is a function of its name and seed alone (its own ChaCha RNG),
//! so the two versions see identical work, and a run is reproduced by its seed.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use vassal_core::{CpuSet, Ns, TaskParams, MS, SEC, US};
use vassal_policies::ParamValue;
use vassal_sim::engine::{MarkKind, Trace};
use vassal_sim::model::{Behaviour, ClockMode, Dist, Machine, PolicySpec, Scenario, TaskSpec};
use vassal_sim::modules::{apply_load, Place};
use vassal_sim::Sim;

/// The scenarios, by name.
pub const SCENARIOS: &[&str] = &["desktop", "realtime"];
/// The module scheduler's name in the scenarios.
pub const MODULE_SCHED: &str = "policy";
/// Default stall threshold: below the module watchdog (1 s), so a stall shows before the
/// ejection ends it.
pub const STALL: Ns = 500 * MS;

/// A policy version: a built-in kind with parameters, or a module file with its own.
#[derive(Clone, Debug, PartialEq)]
pub enum Version {
    Builtin { kind: String, params: BTreeMap<String, ParamValue> },
    Module { path: PathBuf, params: BTreeMap<String, ParamValue> },
}

impl Version {
    /// A built-in kind (as `vassal policies` lists them) or a module file (a path that
    /// exists, or ends in .wasm or .so), with `params` (KEY=VALUE).
    pub fn parse(s: &str, params: BTreeMap<String, ParamValue>) -> Result<Version, String> {
        let p = Path::new(s);
        if p.exists() || s.ends_with(".wasm") || s.ends_with(".so") {
            if !p.exists() {
                return Err(format!("{s}: no such module file"));
            }
            return Ok(Version::Module { path: p.to_path_buf(), params });
        }
        vassal_policies::build(s, &params).map_err(|e| format!("{s}: {e}"))?;
        Ok(Version::Builtin { kind: s.to_string(), params })
    }

    /// How the command line names it, with `flag` (--old-param/--new-param) before each
    /// parameter.
    pub fn command(&self, flag: &str) -> String {
        let (name, params) = match self {
            Version::Builtin { kind, params } => (kind.clone(), params),
            Version::Module { path, params } => (path.display().to_string(), params),
        };
        let ps: String = params.iter().map(|(k, v)| format!(" {flag} {k}={}", param_text(v))).collect();
        format!("{name}{ps}")
    }

    pub fn label(&self) -> String {
        match self {
            Version::Builtin { kind, .. } => kind.clone(),
            Version::Module { path, .. } => {
                path.file_name().map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned())
            }
        }
    }

    /// `sc` with this version scheduling its tasks.
    pub fn apply(&self, mut sc: Scenario) -> Result<Scenario, String> {
        match self {
            Version::Builtin { kind, params } => {
                sc.default_policy = PolicySpec { kind: kind.clone(), params: params.clone() };
                Ok(sc)
            }
            Version::Module { path, params } => {
                sc.default_policy = PolicySpec { kind: "rr".into(), params: BTreeMap::new() };
                apply_load(&mut sc, path, MODULE_SCHED, &Place::Top, None, None, params.clone())?;
                for t in &mut sc.tasks {
                    t.scheduler = Some(MODULE_SCHED.into());
                }
                Ok(sc)
            }
        }
    }
}

fn param_text(v: &ParamValue) -> String {
    match v {
        ParamValue::Int(i) => i.to_string(),
        ParamValue::Float(f) => f.to_string(),
        ParamValue::Bool(b) => b.to_string(),
        ParamValue::Str(s) => s.clone(),
    }
}

fn task(name: String, behaviour: Behaviour, params: TaskParams) -> TaskSpec {
    TaskSpec { name, start: 0, scheduler: None, affinity: CpuSet::first(2), params, uid: 0, behaviour, loop_at: None }
}

fn machine() -> Machine {
    Machine {
        cpus: 2,
        clock: ClockMode::OneShot,
        hz: vassal_sim::scenario::DEFAULT_HZ,
        tick: None,
        switch_cost: 0,
        migration_cost: 0,
        wake_latency: 0,
        unscheduled: None,
        min_best_effort_ppm: None,
    }
}

/// Scenario `name` for `seed` (None: an unknown name), `until` long, on 2 CPUs.
///
/// - `desktop`: 2–4 CPU hogs (a build), 2–3 interactive tasks (bursts of 1–5 ms mean,
///   20–100 ms think time), a 60 fps video (2–5 ms a frame), a 100 Hz audio task (1 ms),
///   and an I/O-bound task (0.5 ms bursts, 5 ms waits).
/// - `realtime`: 3–6 periodic tasks, periods 5–50 ms, deadline = period, utilisations
///   drawn to sum to 0.6–1.6 CPUs (UUniFast), each with `period` and a rate-monotonic
///   `priority`, plus one background hog.
pub fn scenario(name: &str, seed: u64, until: Ns) -> Option<Scenario> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5eed_c4ec);
    let mut tasks = Vec::new();
    match name {
        "desktop" => {
            for k in 0..rng.gen_range(2..=4) {
                tasks.push(task(format!("build-{k}"), Behaviour::Cpu { work: None }, TaskParams::new()));
            }
            for k in 0..rng.gen_range(2..=3) {
                let burst = Dist::Exp(rng.gen_range(1..=5) * MS);
                let think = Dist::Exp(rng.gen_range(20..=100) * MS);
                tasks.push(task(format!("ui-{k}"), Behaviour::Interactive { burst, think }, TaskParams::new()));
            }
            let frame = 16_666_667;
            let exec = Dist::Const(rng.gen_range(2000..=5000) * US);
            tasks.push(task(
                "video".into(),
                Behaviour::Periodic { period: frame, offset: 0, exec, deadline: frame, jobs: None },
                TaskParams::new(),
            ));
            tasks.push(task(
                "audio".into(),
                Behaviour::Periodic { period: 10 * MS, offset: 0, exec: Dist::Const(MS), deadline: 10 * MS, jobs: None },
                TaskParams::new(),
            ));
            tasks.push(task(
                "io".into(),
                Behaviour::Io { run: Dist::Exp(500 * US), sleep: Dist::Exp(5 * MS), voluntary: true, disk: None },
                TaskParams::new(),
            ));
        }
        "realtime" => {
            let n = rng.gen_range(3..=6);
            let total: f64 = rng.gen_range(0.6..1.6);
            // UUniFast (Bini & Buttazzo 2005): n utilisations summing to `total`
            let mut left = total;
            let mut utils = Vec::new();
            for k in 1..n {
                let next = left * rng.gen::<f64>().powf(1.0 / (n - k) as f64);
                utils.push(left - next);
                left = next;
            }
            utils.push(left);
            let mut periods: Vec<Ns> = (0..n).map(|_| rng.gen_range(5..=50) * MS).collect();
            periods.sort();
            for (k, (&p, u)) in periods.iter().zip(utils).enumerate() {
                let exec = ((p as f64 * u.min(0.95)) as Ns).max(100 * US);
                let mut params = TaskParams::new();
                params.insert("period".into(), p as i64);
                params.insert("priority".into(), (n - k) as i64); // shorter period, higher priority
                tasks.push(task(
                    format!("rt-{k}"),
                    Behaviour::Periodic { period: p, offset: 0, exec: Dist::Const(exec), deadline: p, jobs: None },
                    params,
                ));
            }
            tasks.push(task("background".into(), Behaviour::Cpu { work: None }, TaskParams::new()));
        }
        _ => return None,
    }
    let mut sc = Scenario::of_tasks(name, machine(), PolicySpec { kind: "rr".into(), params: BTreeMap::new() }, tasks, until);
    sc.seed = seed;
    Some(sc)
}

/// Per task: the longest time it was runnable without running, and when that wait
/// began (a wait still open at the horizon counts up to it).
pub fn longest_waits(sc: &Scenario, trace: &Trace) -> Vec<(Ns, Ns)> {
    // per task, events in time order; at one instant: slice end, block/exit, wake, slice start
    let mut evs: Vec<Vec<(Ns, u8)>> = vec![Vec::new(); sc.tasks.len()];
    for s in &trace.slices {
        evs[s.task].push((s.end, 0));
        evs[s.task].push((s.start, 3));
    }
    for m in &trace.marks {
        match m.kind {
            MarkKind::Block | MarkKind::Exit => evs[m.task].push((m.at, 1)),
            MarkKind::Wake => evs[m.task].push((m.at, 2)),
            MarkKind::SwapOut | MarkKind::SwapIn => {}
        }
    }
    evs.into_iter()
        .map(|mut e| {
            e.sort();
            let (mut awake, mut running, mut since): (bool, bool, Option<Ns>) = (false, false, None);
            let mut best = (0, 0);
            for (t, k) in e {
                match k {
                    0 => {
                        running = false;
                        if awake {
                            since = Some(t);
                        }
                    }
                    1 => {
                        awake = false;
                        since = None;
                    }
                    2 => {
                        awake = true;
                        if !running {
                            since = since.or(Some(t));
                        }
                    }
                    _ => {
                        if let Some(s) = since.take() {
                            if t - s > best.0 {
                                best = (t - s, s);
                            }
                        }
                        running = true;
                        awake = true;
                    }
                }
            }
            if let Some(s) = since {
                if sc.until.saturating_sub(s) > best.0 {
                    best = (sc.until - s, s);
                }
            }
            best
        })
        .collect()
}

/// One task's numbers in one run.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct TaskOutcome {
    pub name: String,
    pub share: f64,
    pub latency_p99_ns: Ns,
    pub jobs_missed: u64,
    pub longest_wait_ns: Ns,
    pub wait_from_ns: Ns,
}

/// One version's run of one scenario.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Outcome {
    pub tasks: Vec<TaskOutcome>,
    /// The report's log lines about ejections and refusals.
    pub incidents: Vec<String>,
}

/// A finding: a task of `version` ("old"/"new") stalled.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Stall {
    pub version: String,
    pub task: String,
    pub waited_ns: Ns,
    pub from_ns: Ns,
}

#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Row {
    pub scenario: String,
    pub seed: u64,
    pub old: Outcome,
    pub new: Outcome,
    pub stalls: Vec<Stall>,
}

/// Runs `version` on `sc`.
pub fn outcome(version: &Version, sc: &Scenario) -> Result<Outcome, String> {
    let sc = version.apply(sc.clone())?;
    let mut sim = Sim::with_registry(sc.clone(), &crate::workloads::registry()).map_err(|e| e.to_string())?;
    sim.record_trace();
    let (r, trace) = sim.run_traced().map_err(|e| e.to_string())?;
    let waits = longest_waits(&sc, &trace);
    let tasks = r
        .tasks
        .iter()
        .zip(waits)
        .map(|(t, (w, from))| TaskOutcome {
            name: t.name.clone(),
            share: t.share,
            latency_p99_ns: t.latency.p99_ns,
            jobs_missed: t.jobs_missed,
            longest_wait_ns: w,
            wait_from_ns: from,
        })
        .collect();
    let incidents = r.log.iter().filter(|l| l.contains("ejected") || l.contains("refused")).cloned().collect();
    Ok(Outcome { tasks, incidents })
}

/// Runs both versions on every scenario in `names` for every seed.
pub fn check(old: &Version, new: &Version, names: &[String], seeds: &[u64], until: Ns, stall: Ns) -> Result<Vec<Row>, String> {
    let mut rows = Vec::new();
    for name in names {
        for &seed in seeds {
            let sc =
                scenario(name, seed, until).ok_or_else(|| format!("no scenario '{name}'; expected one of {}", SCENARIOS.join(", ")))?;
            let o = outcome(old, &sc).map_err(|e| format!("{name} seed {seed}, old ({}): {e}", old.label()))?;
            let n = outcome(new, &sc).map_err(|e| format!("{name} seed {seed}, new ({}): {e}", new.label()))?;
            let mut stalls = Vec::new();
            for (v, out) in [("old", &o), ("new", &n)] {
                for t in out.tasks.iter().filter(|t| t.longest_wait_ns > stall) {
                    stalls.push(Stall { version: v.into(), task: t.name.clone(), waited_ns: t.longest_wait_ns, from_ns: t.wait_from_ns });
                }
            }
            rows.push(Row { scenario: name.clone(), seed, old: o, new: n, stalls });
        }
    }
    Ok(rows)
}

fn ms(ns: Ns) -> String {
    format!("{:.3}", ns as f64 / 1e6)
}

/// The readable report: per run, each task's share, p99 latency and misses, old → new,
/// then the stalls and incidents, each with the command that replays it.
pub fn table(rows: &[Row], old: &Version, new: &Version, stall: Ns) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "old: {}   new: {}   stall threshold: {} ms", old.label(), new.label(), ms(stall));
    let (old_arg, new_arg) = (old.command("--old-param"), new.command("--new-param"));
    let (a, b) = (old_arg.split_once(' ').map_or(old_arg.as_str(), |x| x.0), new_arg.split_once(' ').map_or(new_arg.as_str(), |x| x.0));
    let flags: String = [old_arg.split_once(' ').map(|x| x.1), new_arg.split_once(' ').map(|x| x.1)]
        .into_iter()
        .flatten()
        .map(|f| format!(" {f}"))
        .collect();
    for r in rows {
        let _ = writeln!(o, "\n{} seed {}", r.scenario, r.seed);
        let _ = writeln!(
            o,
            "  {:<12} {:>8} {:>8} {:>8}  {:>10} {:>10} {:>10}  {:>6} {:>6}",
            "task", "share", "new", "diff", "p99 ms", "new", "diff", "missed", "new"
        );
        for (a, b) in r.old.tasks.iter().zip(&r.new.tasks) {
            let _ = writeln!(
                o,
                "  {:<12} {:>7.2}% {:>7.2}% {:>+7.2}%  {:>10} {:>10} {:>+10.3}  {:>6} {:>6}",
                a.name,
                a.share * 100.0,
                b.share * 100.0,
                (b.share - a.share) * 100.0,
                ms(a.latency_p99_ns),
                ms(b.latency_p99_ns),
                (b.latency_p99_ns as f64 - a.latency_p99_ns as f64) / 1e6,
                a.jobs_missed,
                b.jobs_missed
            );
        }
        for s in &r.stalls {
            let _ = writeln!(
                o,
                "  STALL ({}): {} runnable but not run for {} ms from {} ms — replay: vassal check {a} {b}{flags} --scenario {} --seeds {}",
                s.version,
                s.task,
                ms(s.waited_ns),
                ms(s.from_ns),
                r.scenario,
                r.seed
            );
        }
        for (v, out) in [("old", &r.old), ("new", &r.new)] {
            for l in &out.incidents {
                let _ = writeln!(o, "  {v}: {}", l.trim());
            }
        }
    }
    let new_stalls = rows.iter().filter(|r| r.stalls.iter().any(|s| s.version == "new")).count();
    let _ = writeln!(
        o,
        "\n{} runs; new stalls in {new_stalls}; missed deadlines old {} new {}",
        rows.len(),
        rows.iter().flat_map(|r| &r.old.tasks).map(|t| t.jobs_missed).sum::<u64>(),
        rows.iter().flat_map(|r| &r.new.tasks).map(|t| t.jobs_missed).sum::<u64>()
    );
    o
}

/// The default horizon of a check run.
pub const UNTIL: Ns = 5 * SEC;
