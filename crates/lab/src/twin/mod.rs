//! `vassal twin FILE.json`: one rt-app workload simulated on a model of this machine and
//! run for real — the real `rt-app` binary, each of its threads a vassal task under the
//! agent (or, with `--kernel`, under the kernel's own scheduler) — and compared thread by
//! thread: CPU share, wake-up latency, slack and missed periods, run time per period,
//! sim − real (issue 18 item 2; docs/twin.md).
//!
//! One mapping for both worlds: a thread's scheduling becomes a scheduler and parameters
//! through [`vassal_sim::rtapp::build::sched_sel`] — in the simulation it is the task's
//! scheduler; on the machine the thread joins the agent's scheduler of that name with
//! those parameters, in a hierarchy the agent is configured with from the same scenario
//! ([`live::agent_config`]). The simulated machine is the machine model of `vassal
//! calibrate` ([`crate::calibrate`]): CPUs, HZ, switch cost, timer wake-up latency (the
//! agent's, measured with a thread of a loaded scheduler, unless the real side is the
//! kernel), and rt-app's loop speed (the simulated `run` events do exactly the work
//! rt-app's calibrated loops do).
//!
//! Modules: [`log`] (rt-app's per-loop rows, real and simulated, and the summaries),
//! [`strict`] (the file as the real rt-app gets it), [`live`] (the real run: root, time
//! limits, cleanup), [`render`] (table, JSON, HTML).

pub mod live;
pub mod log;
pub mod render;
pub mod strict;

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;
use vassal_core::{Ns, MS, SEC};
use vassal_policies::ParamValue;
use vassal_sim::model::{Behaviour, Dist, Phase, Scenario, Unscheduled};
use vassal_sim::rtapp::build::{self, LoopStart};
use vassal_sim::rtapp::model::{Policy, RtApp, Sched};
use vassal_sim::{Report, Trace};

use crate::calibrate::MachineModel;
use log::{LogRow, Summary};

/// The default scheduler's parameters under `bvt`, in both worlds: the agent's own
/// defaults (packaging/vassal.toml: BVT charges whole mcu per run, and the agent sees
/// CPU use per 1 ms tick).
pub const BVT_PARAMS: [(&str, &str); 2] = [("mcu", "1ms"), ("c", "20ms")];

/// Settings of a twin run.
#[derive(Clone, Debug)]
pub struct Options {
    pub machine: MachineModel,
    /// The default scheduler's kind for SCHED_OTHER threads (None: bvt).
    pub policy: Option<String>,
    /// The run's length (None: the file's `global.duration`).
    pub duration: Option<Ns>,
    /// Simulate the machine model's stalls as unscheduled time.
    pub stalls: bool,
    /// The real side runs under the kernel's scheduler, not the agent: the simulated
    /// timer wake-up is the kernel's (else the agent's, when the model has it).
    pub kernel: bool,
    /// A policy module run as one of the workload's schedulers, in both worlds.
    pub load: Option<Load>,
}

/// `vassal twin --load FILE --name NAME`: the module in `path` runs as scheduler `name`
/// (`rt` or `dl`: one the file's threads are mapped to) in both worlds — in the
/// simulation as `vassal sim --load` runs it (`vassal_sim::modules::apply_load`), and in
/// the agent as a `[[scheduler]]` with `module = path` (docs/modules.md).
#[derive(Clone, Debug, PartialEq)]
pub struct Load {
    pub path: std::path::PathBuf,
    pub name: String,
    pub params: BTreeMap<String, ParamValue>,
}

/// One rt-app thread instance: what it is called in both worlds and how it is scheduled.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ThreadRef {
    /// Its task name in the simulation (`NAME`, or `NAME-k` for instance k).
    pub name: String,
    /// Its key in the file (rt-app's thread name: its comm and log file name).
    pub key: String,
    /// rt-app's thread index (file order over instances: its log file's number).
    pub index: usize,
    /// The scheduling the file gives it, e.g. "SCHED_FIFO 20".
    pub policy: String,
    /// The vassal scheduler it joins (None: the default) and its parameters.
    pub scheduler: Option<String>,
    pub params: Vec<(String, i64)>,
}

/// An rt-app file read for a twin run.
#[derive(Clone, Debug)]
pub struct Workload {
    pub name: String,
    pub text: String,
    pub app: RtApp,
    pub duration: Ns,
    pub threads: Vec<ThreadRef>,
}

fn describe(s: &Sched) -> String {
    match s.policy {
        Policy::Other => format!("SCHED_OTHER nice {}", s.priority),
        Policy::Idle => "SCHED_IDLE".into(),
        Policy::Fifo | Policy::Rr => format!("{} {}", s.policy.name(), s.priority),
        Policy::Deadline => {
            let d = s.dl.expect("deadline parameters");
            format!("SCHED_DEADLINE {}/{}/{} us", d.runtime / 1000, d.deadline / 1000, d.period / 1000)
        }
    }
}

impl Workload {
    /// Reads `path` (errors start with the file's name and position).
    pub fn load(path: &Path, opts: &Options) -> Result<Workload, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let name = path.file_stem().map_or("rt-app".to_string(), |s| s.to_string_lossy().into_owned());
        Workload::parse(&text, &name, opts).map_err(|e| format!("{}:{e}", path.display()))
    }

    /// Reads rt-app JSON text. Errors: "LINE:COL: PATH: message".
    pub fn parse(text: &str, name: &str, opts: &Options) -> Result<Workload, String> {
        let app = vassal_sim::rtapp::read(text)?;
        let duration = match (opts.duration, app.global.duration) {
            (Some(d), _) | (None, Some(d)) => d,
            (None, None) => {
                return Err("1:1: global.duration: is -1 or absent: give the run's length with --duration".into());
            }
        };
        if duration == 0 {
            return Err("1:1: global.duration: the run needs a length above 0".into());
        }
        let weighted = matches!(opts.policy.as_deref().unwrap_or("bvt"), "bvt" | "bvt2");
        let mut threads = Vec::new();
        let mut index = 0;
        for t in &app.threads {
            let sel = build::sched_sel(&t.sched, weighted);
            for k in 0..t.instances {
                threads.push(ThreadRef {
                    name: if t.instances == 1 { t.name.clone() } else { format!("{}-{k}", t.name) },
                    key: t.name.clone(),
                    index,
                    policy: describe(&t.sched),
                    scheduler: sel.scheduler.clone(),
                    params: sel.params.clone(),
                });
                index += 1;
            }
        }
        Ok(Workload { name: name.to_string(), text: text.to_string(), app, duration, threads })
    }
}

/// The simulated side.
pub struct SimSide {
    pub sc: Scenario,
    pub loops: Vec<Vec<LoopStart>>,
    pub report: Report,
    pub trace: Trace,
    pub rows: Vec<Vec<LogRow>>,
    pub summaries: Vec<Summary>,
    /// How much longer each `run` event's work is than asked: rt-app counts loops at a
    /// whole number of ns each ([`rtapp_calibration`]), the loop takes the measured time.
    pub run_scale: f64,
}

/// The `calibration` (ns per loop, whole) the real rt-app is given, from the model.
pub fn rtapp_calibration(m: &MachineModel) -> Option<u64> {
    m.rtapp_ns_per_loop.map(|l| (l.round() as u64).max(1))
}

/// The scenario of `w` on the machine model, with each task's loop starts.
pub fn scenario(w: &Workload, opts: &Options) -> Result<(Scenario, Vec<Vec<LoopStart>>, f64), String> {
    let m = &opts.machine;
    let ropts =
        vassal_sim::rtapp::Options { policy: opts.policy.clone(), cpus: Some(m.cpus), until: Some(w.duration), ..Default::default() };
    let (mut sc, loops) = build::to_scenario_with_loops(&w.app, &w.name, &ropts).map_err(|e| e.to_string())?;
    sc.machine.hz = m.hz;
    sc.machine.switch_cost = m.switch_cost_ns;
    sc.machine.wake_latency = match (opts.kernel, m.agent_wake_latency_ns) {
        (false, Some(a)) => a,
        _ => m.wake_latency_ns,
    };
    if opts.stalls && m.stalls_per_s > 0.0 {
        let every = (SEC as f64 / m.stalls_per_s) as Ns;
        sc.machine.unscheduled =
            Some(Unscheduled { interval: Dist::Exp(every.max(1)), duration: Dist::Exp(m.stall_p50_ns.max(1)), also: Vec::new() });
    }
    if let Some(l) = &opts.load {
        load_module(&mut sc, l)?;
    }
    if sc.default_policy.kind == "bvt" || sc.default_policy.kind == "bvt2" {
        sc.default_policy.params =
            BVT_PARAMS.iter().map(|(k, v)| (k.to_string(), ParamValue::Str(v.to_string()))).collect::<BTreeMap<_, _>>();
    }
    let scale = match (m.rtapp_ns_per_loop, rtapp_calibration(m)) {
        (Some(l), Some(c)) => l / c as f64,
        _ => 1.0,
    };
    if scale != 1.0 {
        for t in &mut sc.tasks {
            if let Behaviour::Script { phases, .. } = &mut t.behaviour {
                for p in phases.iter_mut() {
                    if let Phase::Run(Dist::Const(d)) = p {
                        *d = (*d as f64 * scale).round() as Ns;
                    }
                }
            }
        }
    }
    Ok((sc, loops, scale))
}

/// Puts the module of `l` in place of the workload's scheduler of its name. Refused,
/// naming the schedulers there are, if the workload has no scheduler of that name (a
/// module added beside them would have no thread) or names the default (the agent
/// cannot run a module as its default: nothing is below it to take its tasks if it is
/// ejected).
fn load_module(sc: &mut Scenario, l: &Load) -> Result<(), String> {
    if !sc.schedulers.iter().any(|s| s.name == l.name) {
        let names: Vec<String> = sc.schedulers.iter().map(|s| format!("'{}'", s.name)).collect();
        let have = if names.is_empty() { "none (every thread is SCHED_OTHER: the default)".to_string() } else { names.join(", ") };
        return Err(format!(
            "--name {}: the module must replace a scheduler the workload's threads use (rt for SCHED_FIFO/RR, dl for SCHED_DEADLINE); this workload has {have}",
            l.name
        ));
    }
    vassal_sim::modules::apply_load(sc, &l.path, &l.name, &vassal_sim::modules::Place::Top, None, None, l.params.clone())
        .map_err(|e| format!("--load {}: {e}", l.path.display()))
}

/// Simulates `w` on the machine model.
pub fn simulate(w: &Workload, opts: &Options) -> Result<SimSide, String> {
    let (sc, loops, run_scale) = scenario(w, opts)?;
    let mut sim = vassal_sim::Sim::with_registry(sc.clone(), &crate::workloads::registry()).map_err(|e| e.to_string())?;
    sim.record_trace();
    let (report, trace) = sim.run_traced().map_err(|e| e.to_string())?;
    let rows = log::sim_rows(&sc, &loops, &trace);
    let summaries =
        rows.iter().zip(&report.tasks).map(|(r, t)| log::summarize(r, w.duration, t.cpu_ns as f64 / w.duration as f64)).collect();
    Ok(SimSide { sc, loops, report, trace, rows, summaries, run_scale })
}

/// A twin run's result: the simulated side, and the real one unless only simulated.
pub struct Twin {
    pub workload: Workload,
    pub machine: MachineModel,
    pub sim: SimSide,
    pub real: Option<live::Live>,
}

/// The extra delay every thread gets on the machine, so that all of them exist and are
/// joined to the agent before any starts its work (rt-app's `delay`, counted from its
/// common start; the comparison is made from the end of it).
pub const HOLD: Ns = 500 * MS;
