//! `vassal twin` and `vassal calibrate` (docs/twin.md): argument handling and output
//! files; the work is vassal-lab's (`twin`, `calibrate`).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::Args;
use vassal_lab::calibrate::MachineModel;
use vassal_lab::twin::{self, live, render, Options, Twin, Workload};

/// The machine model file `vassal twin` reads when --machine is not given, if present.
pub const MACHINE_FILE: &str = "vassal-machine.toml";

#[derive(Args)]
pub struct TwinArgs {
    /// The rt-app workload (rt-app 1.0's JSON, as `vassal sim --rt-app` reads it).
    file: PathBuf,
    /// Run the real side under the kernel's own scheduler instead of the agent (the
    /// baseline).
    #[arg(long, conflicts_with = "sim_only")]
    kernel: bool,
    /// Only simulate (no root needed).
    #[arg(long)]
    sim_only: bool,
    /// The machine model (from `vassal calibrate`; default ./vassal-machine.toml if it
    /// exists, else this machine's CPUs and HZ with typical costs).
    #[arg(long, value_name = "FILE")]
    machine: Option<PathBuf>,
    /// The default scheduler's kind for SCHED_OTHER threads, in both worlds (default bvt).
    #[arg(long)]
    policy: Option<String>,
    /// The run's length, e.g. "5s" (default: the file's global.duration).
    #[arg(long)]
    duration: Option<String>,
    /// Simulate the machine model's measured stalls as unscheduled time.
    #[arg(long)]
    stalls: bool,
    /// Run a policy module (docs/modules.md) as scheduler --name in both worlds: it
    /// replaces the scheduler the file's threads of that class are mapped to.
    #[arg(long, value_name = "FILE")]
    load: Option<PathBuf>,
    /// The scheduler the module replaces: rt (SCHED_FIFO/RR threads) or dl
    /// (SCHED_DEADLINE threads).
    #[arg(long, requires = "load", default_value = "rt")]
    name: String,
    /// A module parameter KEY=VALUE (repeatable).
    #[arg(long = "param", value_name = "KEY=VALUE", requires = "load")]
    params: Vec<String>,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
    /// Write twin.html (both CPU timelines), twin.json, sim.pftrace and real.pftrace
    /// (Perfetto traces: the simulator's, and the kernel's switches of the real run), and
    /// rt-app's file and logs (real/) into DIR.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
}

#[derive(Args)]
pub struct CalibrateArgs {
    /// Where to write the machine model.
    #[arg(long, value_name = "FILE", default_value = MACHINE_FILE)]
    out: PathBuf,
    /// Print the model as JSON too.
    #[arg(long)]
    json: bool,
}

fn machine(file: Option<&Path>) -> Result<MachineModel> {
    match file {
        Some(f) => MachineModel::read(f).map_err(anyhow::Error::msg),
        None if Path::new(MACHINE_FILE).is_file() => MachineModel::read(Path::new(MACHINE_FILE)).map_err(anyhow::Error::msg),
        None => Ok(MachineModel::default_here()),
    }
}

pub fn twin(a: TwinArgs) -> Result<ExitCode> {
    let duration =
        a.duration.as_deref().map(vassal_core::parse_duration).transpose().with_context(|| format!("--duration {:?}", a.duration))?;
    if a.kernel && a.load.is_some() {
        bail!("--load runs a module under the agent; --kernel runs the kernel's scheduler instead");
    }
    let load = match &a.load {
        Some(path) => {
            // Absolute: the agent reads it from its own config file's directory.
            let path = std::fs::canonicalize(path).with_context(|| format!("--load {}", path.display()))?;
            let params =
                a.params.iter().map(|p| vassal_sim::modules::parse_param(p)).collect::<Result<_, _>>().map_err(anyhow::Error::msg)?;
            Some(twin::Load { path, name: a.name.clone(), params })
        }
        None => None,
    };
    let opts = Options { machine: machine(a.machine.as_deref())?, policy: a.policy, duration, stalls: a.stalls, kernel: a.kernel, load };
    let w = Workload::load(&a.file, &opts).map_err(anyhow::Error::msg)?;
    let sim = twin::simulate(&w, &opts).map_err(anyhow::Error::msg)?;
    let real = if a.sim_only {
        None
    } else {
        let exe = std::env::current_exe().context("the vassal binary's path (for the agent)")?;
        let keep = a.out.as_ref().map(|d| live::keep_dir(d));
        let lo = live::LiveOptions {
            exe: &exe,
            kernel: a.kernel,
            trace: true,
            calibration: twin::rtapp_calibration(&opts.machine),
            keep: keep.as_deref(),
        };
        Some(live::run(&w, &sim.sc, &lo).map_err(anyhow::Error::msg)?)
    };
    let t = Twin { workload: w, machine: opts.machine.clone(), sim, real };
    if let Some(dir) = &a.out {
        std::fs::create_dir_all(dir).with_context(|| format!("--out {}", dir.display()))?;
        let write = |name: &str, bytes: &[u8]| -> Result<()> {
            let f = dir.join(name);
            std::fs::write(&f, bytes).with_context(|| format!("cannot write {}", f.display()))
        };
        write("twin.html", render::html(&t).as_bytes())?;
        write("twin.json", (serde_json::to_string_pretty(&render::to_json(&t))? + "\n").as_bytes())?;
        write("sim.pftrace", &vassal_lab::perfetto::to_perfetto(&t.sim.sc, &t.sim.trace).map_err(anyhow::Error::msg)?)?;
        if let Some(p) = t.real.as_ref().and_then(|r| r.perfetto.as_ref()) {
            write("real.pftrace", p)?;
        }
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&render::to_json(&t))?);
    } else {
        print!("{}", render::table(&t));
    }
    Ok(ExitCode::SUCCESS)
}

pub fn calibrate(a: CalibrateArgs) -> Result<ExitCode> {
    let exe = std::env::current_exe().ok();
    let m =
        vassal_lab::calibrate::measure(exe.as_deref(), &mut |step| eprintln!("vassal calibrate: {step}…")).map_err(anyhow::Error::msg)?;
    std::fs::write(&a.out, m.to_toml()).with_context(|| format!("cannot write {}", a.out.display()))?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&m)?);
    } else {
        print!("{}", m.to_toml());
        println!("# written to {}", a.out.display());
    }
    if m.cpus == 0 {
        bail!("no CPU found");
    }
    Ok(ExitCode::SUCCESS)
}
