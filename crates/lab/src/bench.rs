//! `vassal bench`: simulated events per second on a 1,000-task scenario, periodic jobs per
//! second (20 tasks under RM on 1 CPU and under global EDF on 4, issue 16), a run's fixed
//! cost (parse + build + run of a tiny scenario, in this process), and the cost of
//! one scheduling decision (account + preempt + pick + validate + dispatch through the
//! Vassal dispatcher) with 10, 1,000 and 100,000 runnable tasks, for every built-in
//! policy. Each figure is the median of several runs in this process, so a noisy machine
//! shows as spread, not as a wrong number; the simulator's rates are per second of this
//! thread's CPU time, which other processes on a loaded machine do not take from it.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Instant;

use anyhow::Result;
use vassal_core::driver::{self, Hooks};
use vassal_core::{CpuId, CpuSet, Dispatched, Dispatcher, Driver, HierarchyConfig, Ns, ParamValue, Preempt, TaskId, TaskParams, MS};
use vassal_sim::model::{Behaviour, ClockMode, Dist, Machine, PolicySpec, Scenario, TaskSpec};

pub const SIZES: [usize; 3] = [10, 1_000, 100_000];

pub struct Bench {
    pub events: u64,
    pub events_per_sec: f64,
    /// policy → size → ns per decision
    pub decision_ns: BTreeMap<String, BTreeMap<usize, f64>>,
    /// Loaded module against built-in, for "bvt" and "rr": kind → size → costs; empty
    /// when no module form is built (scripts/test.sh builds both).
    pub module_cost: BTreeMap<String, BTreeMap<usize, ModuleCost>>,
    /// Periodic jobs simulated per second, metrics on (issue 16): "rm_1cpu" (20 tasks,
    /// `fps` with `rm`, 1 CPU, utilisation 0.7) and "gedf_4cpu" (20 tasks, global `edf`,
    /// 4 CPUs, utilisation 0.9 per CPU); with the jobs each run simulated.
    pub jobs_per_sec: BTreeMap<&'static str, (f64, u64)>,
    /// Wall-clock ms to parse, build and run [`TINY`] (the median of [`FIXED_REPS`]).
    pub fixed_cost_ms: f64,
}

/// The fixed-cost scenario: three tasks on one CPU under RM, 1 ms simulated — what every
/// run pays before its horizon matters (issue 16: under 5 ms with the process start).
pub const TINY: &str = r#"
name = "bench-tiny"
until = "1ms"

[machine]
cpus = 1

[default]
name = "rm"
policy = "fps"
params = { rm = true }

[[task]]
name = "t1"
params = { period = "10ms" }
behaviour = { kind = "periodic", period = "10ms", exec = "2ms" }

[[task]]
name = "t2"
params = { period = "20ms" }
behaviour = { kind = "periodic", period = "20ms", exec = "5ms" }

[[task]]
name = "background"
behaviour = { kind = "cpu" }
"#;

/// How many times [`fixed_cost`] runs [`TINY`].
pub const FIXED_REPS: usize = 51;

/// Wall-clock ms to parse, build and run [`TINY`] (the median of `reps` runs).
pub fn fixed_cost(reps: usize) -> Result<f64> {
    let mut ms = Vec::with_capacity(reps);
    for _ in 0..reps {
        let start = Instant::now();
        let sc = vassal_sim::scenario::parse_scenario(TINY, "bench-tiny.toml").map_err(anyhow::Error::msg)?;
        let report = vassal_sim::Sim::new(sc)?.run()?;
        ms.push(start.elapsed().as_secs_f64() * 1e3);
        anyhow::ensure!(report.tasks.len() == 3, "the fixed-cost scenario has three tasks");
    }
    Ok(median(ms))
}

/// ns per decision of one policy at one size: built-in, and each module form that is built.
#[derive(Clone, Copy, Debug, Default)]
pub struct ModuleCost {
    pub builtin: f64,
    /// The WebAssembly module, in the wasmtime sandbox.
    pub wasm: Option<f64>,
    /// The native shared library (trusted, not sandboxed).
    pub native: Option<f64>,
}

/// Sizes of the loaded-versus-built-in comparison.
pub const MODULE_SIZES: [usize; 2] = [10, 1_000];

/// Where the SDK's example module `name` is built (scripts/test.sh builds them): the
/// WebAssembly form, or (`native`) the host-target shared library.
fn module_path(name: &str, native: bool) -> Option<std::path::PathBuf> {
    let rel = if native {
        let (pre, suf) = (std::env::consts::DLL_PREFIX, std::env::consts::DLL_SUFFIX);
        format!("sdk/target/release/{pre}vassal_module_{name}{suf}")
    } else {
        format!("sdk/target/wasm32-unknown-unknown/release/vassal_module_{name}.wasm")
    };
    let rel = rel.as_str();
    let candidates = [std::path::PathBuf::from(rel), std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").join(rel)];
    candidates.into_iter().find(|p| p.is_file())
}

/// The cost of one decision (as in `decision_cost`) with BVT *loaded above* a round-robin
/// default that has no tasks of its own — Vassal's Table 1 setting — either as the
/// built-in policy or as the SDK's module (for BVT the same source; a WebAssembly module
/// compiled by wasmtime, or a native shared library — the form is told from the file). `n`
/// runnable tasks joined the scheduler.
fn loaded_cost(kind: &str, module: Option<&std::path::Path>, n: usize, iters: u32) -> Result<f64> {
    use vassal_core::{Position, Request, Sender, Usage};
    let rr = vassal_policies::build("rr", &BTreeMap::new()).map_err(anyhow::Error::msg)?;
    let mut d = Dispatcher::new(1, "ts", rr, HierarchyConfig::default());
    let usage = Usage::Reserved { cpu_ppm: 500_000 };
    let bvt = match module {
        None => vassal_policies::build(kind, &BTreeMap::new()).map_err(anyhow::Error::msg)?,
        Some(path) => {
            let opts = vassal_module::LoadOptions::default();
            vassal_module::open_file(path, 1, &opts.params, opts.limits)?.policy
        }
    };
    let id = d.register(kind, bvt, usage, Position::Top)?;
    for i in 0..n {
        let mut p = TaskParams::new();
        p.insert("weight".into(), 1 + (i % 4) as i64);
        let t = d.add_task(0, p, CpuSet::first(1), None, true);
        let reply = d.message(0, id, Sender::ROOT, t, &Request::Join);
        anyhow::ensure!(reply.is_ok(), "join refused: {reply:?}");
    }
    let (ns, d) = time_decisions(d, iters);
    anyhow::ensure!(d.schedulers()[0].decided >= iters as u64, "the loaded scheduler did not make the decisions");
    Ok(ns)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// `n` implicit-deadline periodic tasks on `cpus` CPUs under `policy`, total utilisation
/// `util` (equal per task); periods 10, 20, ..., 10·n ms (not harmonic with each other
/// beyond what those multiples give), each task's `period` given to the policy.
pub fn periodic_set(n: u64, cpus: u16, util: f64, policy: PolicySpec, until: u64) -> Scenario {
    let tasks = (1..=n)
        .map(|k| {
            let period = 10 * MS * k;
            let exec = (period as f64 * util / n as f64) as u64;
            let mut params = TaskParams::new();
            params.insert("period".into(), period as i64);
            TaskSpec {
                name: format!("p{k}"),
                start: 0,
                scheduler: None,
                affinity: CpuSet::first(cpus),
                params,
                uid: 0,
                behaviour: Behaviour::Periodic { period, offset: 0, exec: Dist::Const(exec), deadline: period, jobs: None },
                loop_at: None,
            }
        })
        .collect();
    let machine = Machine {
        cpus,
        clock: ClockMode::OneShot,
        hz: 0,
        tick: None,
        switch_cost: 0,
        migration_cost: 0,
        wake_latency: 0,
        unscheduled: None,
        min_best_effort_ppm: None,
    };
    Scenario::of_tasks(&format!("bench-periodic-{}-{cpus}cpu", policy.kind), machine, policy, tasks, until)
}

/// `f`'s result and the CPU seconds this thread spent in it.
fn cpu_timed<T>(f: impl FnOnce() -> T) -> (T, f64) {
    let start = vassal_agent::kernel::thread_cpu_ns();
    let out = f();
    (out, (vassal_agent::kernel::thread_cpu_ns() - start) as f64 / 1e9)
}

/// Jobs per CPU second simulating `sc` (the median of `reps` runs), and the jobs of one run.
fn job_rate(sc: &Scenario, reps: usize) -> Result<(f64, u64)> {
    let mut rates = Vec::new();
    let mut jobs = 0;
    for _ in 0..reps {
        let sim = vassal_sim::Sim::new(sc.clone())?;
        let (report, secs) = cpu_timed(|| sim.run());
        jobs = Counts::of(&report?).jobs;
        rates.push(jobs as f64 / secs);
    }
    Ok((median(rates), jobs))
}

/// A 1,000-task scenario of mixed behaviours on 4 CPUs under round robin.
pub fn thousand_tasks(until: u64) -> Scenario {
    let tasks = (0..1000)
        .map(|i| {
            let behaviour = match i % 4 {
                0 => Behaviour::Cpu { work: None },
                1 => Behaviour::Io { run: Dist::Exp(2 * MS), sleep: Dist::Exp(20 * MS), voluntary: true, disk: None },
                2 => Behaviour::Interactive { burst: Dist::Exp(MS), think: Dist::Exp(50 * MS) },
                _ => Behaviour::Periodic {
                    period: (10 + (i as u64 % 10) * 10) * MS,
                    offset: 0,
                    exec: Dist::Uniform(MS / 4, MS),
                    deadline: (10 + (i as u64 % 10) * 10) * MS,
                    jobs: None,
                },
            };
            TaskSpec {
                name: format!("t{i}"),
                start: 0,
                scheduler: None,
                affinity: CpuSet::first(4),
                params: TaskParams::new(),
                uid: 0,
                behaviour,
                loop_at: None,
            }
        })
        .collect();
    let machine = Machine {
        cpus: 4,
        clock: ClockMode::OneShot,
        hz: 250,
        tick: None,
        switch_cost: 3_000,
        migration_cost: 10_000,
        wake_latency: 0,
        unscheduled: None,
        min_best_effort_ppm: None,
    };
    Scenario::of_tasks("bench-1000", machine, PolicySpec { kind: "rr".into(), params: BTreeMap::new() }, tasks, until)
}

fn decision_cost(kind: &str, n: usize, iters: u32) -> Result<f64> {
    let policy = vassal_policies::build(kind, &BTreeMap::new()).map_err(anyhow::Error::msg)?;
    let mut d = Dispatcher::new(1, "bench", policy, HierarchyConfig::default());
    for i in 0..n {
        let mut p = TaskParams::new();
        p.insert("priority".into(), (i % 100) as i64);
        p.insert("weight".into(), 1 + (i % 4) as i64);
        p.insert("period".into(), ((1 + i % 50) as i64) * MS as i64);
        d.add_task(0, p, CpuSet::first(1), None, true);
    }
    Ok(time_decisions(d, iters).0)
}

/// The benchmark's mechanism: one CPU whose running task is charged the time since it
/// was dispatched.
struct OneCpu {
    drv: Driver,
    running: Option<(TaskId, Ns)>,
}

impl Hooks for OneCpu {
    fn driver(&mut self) -> &mut Driver {
        &mut self.drv
    }
    fn account(&mut self, now: Ns, cpu: CpuId) {
        if let Some((t, since)) = self.running.filter(|&(_, since)| now > since) {
            self.drv.disp.account(now, t, cpu, now - since);
        }
    }
    fn dispatched(&mut self, now: Ns, _cpu: CpuId, _why: Preempt, _before: Option<TaskId>, d: Option<Dispatched>) {
        self.running = d.map(|d| (d.task, now));
    }
}

/// The mean wall-clock ns per decision of `d` on CPU 0 over `iters` 1 ms slices: each
/// step charges the running task its slice and asks the dispatcher for the next (through
/// the driver, which carries out what the policy asked meanwhile). Gives `d` back.
fn time_decisions(d: Dispatcher, iters: u32) -> (f64, Dispatcher) {
    let cpu = CpuId(0);
    let mut m = OneCpu { drv: Driver::new(d), running: None };
    driver::decide(&mut m, 0, cpu, Preempt::Resched);
    driver::settle(&mut m, 0);
    let before = m.drv.disp.stats().decisions;
    let start = Instant::now();
    for i in 1..=u64::from(iters) {
        let now = i * MS;
        driver::decide(&mut m, now, cpu, Preempt::SliceExpired);
        driver::settle(&mut m, now);
    }
    let ns = start.elapsed().as_nanos() as f64;
    let decisions = m.drv.disp.stats().decisions - before;
    (ns / decisions.max(1) as f64, m.drv.disp)
}

/// The bench's simulator scenarios, by the names its figures go by: "events" (the
/// 1,000 tasks, [`thousand_tasks`]), "rm_1cpu" and "gedf_4cpu" (the periodic sets).
pub const SCENARIOS: [&str; 3] = ["events", "rm_1cpu", "gedf_4cpu"];

/// The bench's scenario `name` (one of [`SCENARIOS`]) with horizon `until`.
pub fn scenario(name: &str, until: Ns) -> Option<Scenario> {
    match name {
        "events" => Some(thousand_tasks(until)),
        "rm_1cpu" => {
            let rm = PolicySpec { kind: "fps".into(), params: [("rm".to_string(), ParamValue::Bool(true))].into() };
            Some(periodic_set(20, 1, 0.7, rm, until))
        }
        "gedf_4cpu" => Some(periodic_set(20, 4, 3.6, PolicySpec { kind: "edf".into(), params: BTreeMap::new() }, until)),
        _ => None,
    }
}

/// What one run of a bench scenario simulated: its events and its jobs (met or missed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Counts {
    pub events: u64,
    pub jobs: u64,
}

impl Counts {
    fn of(report: &vassal_sim::Report) -> Counts {
        Counts { events: report.totals.events, jobs: report.tasks.iter().map(|t| t.jobs_met + t.jobs_missed).sum() }
    }
}

/// Runs the bench's scenario `name` once to `until` and counts what it simulated
/// (`vassal bench --only`: under an instruction counter, scripts/bench-instructions.sh,
/// the difference of two horizons is the cost per event or job, free of the host's noise).
pub fn run_one(name: &str, until: Ns) -> Result<Counts> {
    let sc =
        scenario(name, until).ok_or_else(|| anyhow::anyhow!("no bench scenario '{name}' (expected one of {})", SCENARIOS.join(", ")))?;
    Ok(Counts::of(&vassal_sim::Sim::new(sc)?.run()?))
}

pub fn run(quick: bool) -> Result<Bench> {
    let (horizon, reps, iters) = if quick { (20_000 * MS, 1, 20_000) } else { (200_000 * MS, 3, 300_000) };
    let mut rates = Vec::new();
    let mut events = 0;
    let named = |name: &str, until: Ns| scenario(name, until).expect("one of SCENARIOS");
    for _ in 0..reps {
        let sim = vassal_sim::Sim::new(named("events", horizon))?;
        let (report, secs) = cpu_timed(|| sim.run());
        events = Counts::of(&report?).events;
        rates.push(events as f64 / secs);
    }
    let job_horizon = if quick { 100_000 * MS } else { 1_000_000 * MS };
    let mut jobs_per_sec = BTreeMap::new();
    for name in ["rm_1cpu", "gedf_4cpu"] {
        jobs_per_sec.insert(name, job_rate(&named(name, job_horizon), reps)?);
    }
    let mut decision_ns = BTreeMap::new();
    for (kind, _) in vassal_policies::kinds() {
        let mut by_size = BTreeMap::new();
        for n in SIZES {
            let v = (0..reps).map(|_| decision_cost(kind, n, iters)).collect::<Result<Vec<_>>>()?;
            by_size.insert(n, median(v));
        }
        decision_ns.insert(kind.to_string(), by_size);
    }
    let mut module_cost = BTreeMap::new();
    for kind in ["bvt", "rr"] {
        let (wasm, native) = (module_path(kind, false), module_path(kind, true));
        if wasm.is_none() && native.is_none() {
            continue;
        }
        let mut m = BTreeMap::new();
        for n in MODULE_SIZES {
            // Interleaved, so a change in machine load hits every form alike.
            let (mut b, mut w, mut x) = (Vec::new(), Vec::new(), Vec::new());
            for _ in 0..reps {
                b.push(loaded_cost(kind, None, n, iters)?);
                if let Some(p) = &wasm {
                    w.push(loaded_cost(kind, Some(p), n, iters)?);
                }
                if let Some(p) = &native {
                    x.push(loaded_cost(kind, Some(p), n, iters)?);
                }
            }
            let opt = |v: Vec<f64>| (!v.is_empty()).then(|| median(v));
            m.insert(n, ModuleCost { builtin: median(b), wasm: opt(w), native: opt(x) });
        }
        module_cost.insert(kind.to_string(), m);
    }
    let fixed_cost_ms = fixed_cost(FIXED_REPS)?;
    Ok(Bench { events, events_per_sec: median(rates), decision_ns, module_cost, jobs_per_sec, fixed_cost_ms })
}

impl Bench {
    /// The worst policy at each size.
    pub fn worst(&self, n: usize) -> f64 {
        self.decision_ns.values().map(|m| m[&n]).fold(0.0, f64::max)
    }

    pub fn json(&self) -> serde_json::Value {
        let d: serde_json::Map<String, serde_json::Value> =
            SIZES.iter().map(|n| (n.to_string(), serde_json::json!((self.worst(*n) * 10.0).round() / 10.0))).collect();
        let r = |x: f64| (x * 10.0).round() / 10.0;
        let m: serde_json::Map<String, serde_json::Value> = self
            .module_cost
            .iter()
            .map(|(k, m)| {
                let by: serde_json::Map<String, serde_json::Value> = m
                    .iter()
                    .map(|(n, c)| {
                        let ratio = |x: Option<f64>| x.map(|x| (x / c.builtin * 100.0).round() / 100.0);
                        let v = serde_json::json!({
                            "builtin": r(c.builtin),
                            "wasm": c.wasm.map(r), "wasm_ratio": ratio(c.wasm),
                            "native": c.native.map(r), "native_ratio": ratio(c.native),
                        });
                        (n.to_string(), v)
                    })
                    .collect();
                (k.clone(), serde_json::Value::Object(by))
            })
            .collect();
        let jobs: serde_json::Map<String, serde_json::Value> =
            self.jobs_per_sec.iter().map(|(k, (rate, _))| (k.to_string(), serde_json::json!(rate.round()))).collect();
        serde_json::json!({
            "events_per_sec": self.events_per_sec.round(),
            "jobs_per_sec": jobs,
            "fixed_cost_ms": (self.fixed_cost_ms * 1000.0).round() / 1000.0,
            "decision_ns": d,
            "module_ns": m,
        })
    }

    pub fn table(&self) -> String {
        let mut o = String::new();
        let _ =
            writeln!(o, "simulator: {:.2} M events/s ({} events, 1,000 tasks, 4 CPUs, one core)", self.events_per_sec / 1e6, self.events);
        for (k, what) in [
            ("rm_1cpu", "20 periodic tasks, RM (fps), 1 CPU, U 0.7"),
            ("gedf_4cpu", "20 periodic tasks, global EDF, 4 CPUs, U 0.9 per CPU"),
        ] {
            if let Some((rate, jobs)) = self.jobs_per_sec.get(k) {
                let _ = writeln!(o, "simulator: {:.2} M jobs/s {k} ({jobs} jobs; {what})", rate / 1e6);
            }
        }
        let _ =
            writeln!(o, "fixed cost: {:.3} ms per run (parse + build + run of a 3-task, 1 ms scenario, in-process)", self.fixed_cost_ms);
        let _ = writeln!(o, "\nns per decision (account + preempt + pick + dispatch)");
        let _ = writeln!(o, "{:<8} {:>10} {:>10} {:>10} {:>12}", "policy", "10", "1000", "100000", "100k / 10");
        for (k, m) in &self.decision_ns {
            let _ = writeln!(o, "{:<8} {:>10.1} {:>10.1} {:>10.1} {:>11.2}x", k, m[&10], m[&1000], m[&100_000], m[&100_000] / m[&10]);
        }
        let _ = writeln!(
            o,
            "{:<8} {:>10.1} {:>10.1} {:>10.1} {:>11.2}x",
            "worst",
            self.worst(10),
            self.worst(1000),
            self.worst(100_000),
            self.worst(100_000) / self.worst(10)
        );
        let _ = writeln!(
            o,
            "\nloaded scheduler (above an idle rr default): ns per decision, built-in vs the same policy as an SDK module,\n\
             sandboxed (WebAssembly in wasmtime) and native (a trusted shared library)"
        );
        if self.module_cost.is_empty() {
            let _ = writeln!(
                o,
                "  (modules not built: cargo build --release [--target wasm32-unknown-unknown] --manifest-path sdk/Cargo.toml)"
            );
        } else {
            let _ = writeln!(
                o,
                "{:<8} {:>6} {:>10} {:>10} {:>8} {:>10} {:>8}",
                "policy", "tasks", "built-in", "wasm", "ratio", "native", "ratio"
            );
        }
        let cell = |x: Option<f64>, b: f64| match x {
            Some(x) => (format!("{x:.1}"), format!("{:.2}x", x / b)),
            None => ("-".to_string(), "-".to_string()),
        };
        for (k, m) in &self.module_cost {
            for (n, c) in m {
                let (w, wr) = cell(c.wasm, c.builtin);
                let (x, xr) = cell(c.native, c.builtin);
                let _ = writeln!(o, "{:<8} {:>6} {:>10.1} {:>10} {:>8} {:>10} {:>8}", k, n, c.builtin, w, wr, x, xr);
            }
        }
        o
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `--only` runs the scenario the bench's figure of that name measures: its counts
    /// grow with the horizon as the scenario says (the RM set's jobs are those of the
    /// periods 10·k ms that finished), and an unknown name is an error naming the known.
    #[test]
    fn one_bench_scenario_runs_alone_and_counts_what_it_simulated() {
        let (short, long) = (run_one("rm_1cpu", 200 * MS).unwrap(), run_one("rm_1cpu", 400 * MS).unwrap());
        let released = |until: Ns| (1..=20u64).map(|k| until.div_ceil(10 * MS * k)).sum::<u64>();
        assert!(short.jobs <= released(200 * MS) && short.jobs + 20 >= released(200 * MS), "{short:?}");
        assert!(long.jobs > short.jobs && long.events > short.events, "{short:?} {long:?}");
        let edf = run_one("gedf_4cpu", 200 * MS).unwrap();
        assert!(edf.jobs + 20 >= released(200 * MS), "{edf:?}");
        let k = run_one("events", 100 * MS).unwrap();
        assert!(k.events > 1000 && k.jobs > 0, "{k:?}");
        let err = run_one("rm", MS).unwrap_err().to_string();
        assert!(err.contains("'rm'") && err.contains("gedf_4cpu"), "{err}");
    }

    #[test]
    fn the_fixed_cost_scenario_parses_and_runs() {
        assert!(fixed_cost(1).unwrap() > 0.0);
    }

    /// The job-rate scenario counts what it says: under RM at utilisation 0.7 (below Liu &
    /// Layland's bound for 20 tasks, 0.705) every job of every task meets its deadline, and
    /// the jobs counted are those that finished within the horizon.
    #[test]
    fn the_rm_job_set_meets_every_deadline_due_in_the_horizon() {
        let until = 10_000 * MS;
        let report = vassal_sim::Sim::new(scenario("rm_1cpu", until).unwrap()).unwrap().run().unwrap();
        let missed: u64 = report.tasks.iter().map(|t| t.jobs_missed).sum();
        let met: u64 = report.tasks.iter().map(|t| t.jobs_met).sum();
        // Jobs due by the horizon must all be met; jobs released before it may be too.
        let due: u64 = (1..=20u64).map(|k| until / (10 * MS * k)).sum();
        let released: u64 = (1..=20u64).map(|k| until.div_ceil(10 * MS * k)).sum();
        assert_eq!(missed, 0);
        assert!(due <= met && met <= released, "met {met}: due {due}, released {released}");
    }
}
