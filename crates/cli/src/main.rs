//! The `vassal` command: a thin front end over vassal-sim, vassal-lab and vassal-policies.

mod agent_cmd;
mod report_cmd;
mod sweep;
mod twin_cmd;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};
use vassal_lab::expect::{Compare, Row, Status};
use vassal_lab::repro::{find_experiments, run_experiment_full};

#[derive(Parser)]
#[command(name = "vassal", version, about = "vassal: multi-policy CPU scheduling — simulator, paper reproductions, benchmarks")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

// Parsed once per run: the size of the largest variant (sim's flags) does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
enum Cmd {
    /// Simulate a scenario file (format: docs/scenario.md), or an rt-app workload
    /// (--rt-app, docs/rtapp.md), and print its report.
    Sim {
        #[arg(required_unless_present = "rt_app", conflicts_with = "rt_app")]
        scenario: Option<PathBuf>,
        /// Simulate an rt-app JSON workload instead of a scenario file (docs/rtapp.md).
        #[arg(long, value_name = "FILE.json")]
        rt_app: Option<PathBuf>,
        /// With --rt-app: the policy kind of the default scheduler, for SCHED_OTHER
        /// threads (default bvt; see `vassal policies`).
        #[arg(long)]
        policy: Option<String>,
        /// With --rt-app: CPUs of the simulated machine (default: enough for the CPUs
        /// the threads name, at least 1).
        #[arg(long)]
        cpus: Option<u16>,
        /// With --rt-app: how fast a `mem` event writes memory, in MB/s of CPU time
        /// (default 4000).
        #[arg(long, value_name = "MB/s", requires = "rt_app")]
        mem_rate: Option<u64>,
        /// With --rt-app: how fast an `iorun` event's io_device takes data, in MB/s of
        /// blocked time (default 100; /dev/null takes it at once).
        #[arg(long, value_name = "MB/s", requires = "rt_app")]
        io_rate: Option<u64>,
        /// Seed for every random draw (overrides the scenario's `seed`).
        #[arg(long)]
        seed: Option<u64>,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
        /// Simulated horizon, e.g. "2s" (overrides the scenario's `until`).
        #[arg(long)]
        until: Option<String>,
        /// Also write a trace of the run to FILE, for https://ui.perfetto.dev (see
        /// docs/trace.md): Perfetto protobuf with per-CPU sched_switch/sched_waking
        /// events if FILE ends in .pftrace, .perfetto-trace or .pb, else Chrome JSON
        /// (or as --trace-format says).
        #[arg(long, value_name = "FILE")]
        trace: Option<PathBuf>,
        /// The trace's format: perfetto or chrome (default: by the file's extension).
        #[arg(long, value_name = "FORMAT", requires = "trace", value_parser = ["perfetto", "chrome"])]
        trace_format: Option<String>,
        /// Also write an HTML report of the run to FILE: one self-contained page with the
        /// CPU timeline, shares, latencies and BVT's virtual times (docs/report.md).
        #[arg(long, value_name = "FILE")]
        report: Option<PathBuf>,
        /// Load a policy module (WebAssembly, built with the SDK: docs/modules.md) as
        /// scheduler --name: it replaces the scenario's scheduler of that name, or is added.
        #[arg(long, value_name = "FILE")]
        load: Option<PathBuf>,
        /// The module scheduler's name (default: the file's stem).
        #[arg(long, requires = "load")]
        name: Option<String>,
        /// Place the new module scheduler just above this scheduler.
        #[arg(long, requires = "load", conflicts_with = "below")]
        above: Option<String>,
        /// Place the new module scheduler just below this scheduler.
        #[arg(long, requires = "load")]
        below: Option<String>,
        /// When to load the module, e.g. "1s" (default: the scheduler's load_at, or 0).
        #[arg(long, requires = "load")]
        load_at: Option<String>,
        /// When to unload it (its tasks go to the scheduler below).
        #[arg(long, requires = "load")]
        unload_at: Option<String>,
        /// A module parameter KEY=VALUE (repeatable).
        #[arg(long = "param", value_name = "KEY=VALUE", requires = "load")]
        params: Vec<String>,
    },
    /// Reproduce the papers' experiments kept under experiments/ (all, or those whose
    /// group, file or row id starts with one of NAMES) and compare with the papers.
    Repro {
        names: Vec<String>,
        /// Print an array of {id, paper, ours, tolerance, pass}.
        #[arg(long)]
        json: bool,
        /// Where the experiments are (default: ./experiments, else the source tree's).
        #[arg(long)]
        dir: Option<PathBuf>,
        /// Also write an HTML page with every row (paper beside ours) and each
        /// experiment's figures to FILE (docs/report.md).
        #[arg(long, value_name = "FILE")]
        report: Option<PathBuf>,
        /// Run the real-process experiments on this machine instead (root; docs/agent.md).
        #[arg(long)]
        real: bool,
    },
    /// Run every variant of a sweep (format: docs/sweep.md) on all cores, with a progress
    /// bar on a terminal; print its metrics' tables and write NAME.csv, NAME.json and
    /// NAME.svg (a plot).
    Sweep {
        file: PathBuf,
        /// Print this variant's scenario (TOML) instead, e.g. "v7/18" (run it with `vassal sim`).
        #[arg(long)]
        variant: Option<String>,
        /// Directory for the files (default: the current directory).
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
        /// Print the runs as JSON instead of the table.
        #[arg(long)]
        json: bool,
        /// Runs at a time (default: the number of cores).
        #[arg(long)]
        jobs: Option<usize>,
    },
    /// Measure simulator throughput and the cost of one scheduling decision.
    Bench {
        #[arg(long)]
        json: bool,
        /// A shorter run (for smoke tests); the numbers are noisier.
        #[arg(long)]
        quick: bool,
        /// Only run one of the bench's simulator scenarios once (events, rm_1cpu,
        /// gedf_4cpu) and print what it simulated: for an instruction counter
        /// (scripts/bench-instructions.sh).
        #[arg(long, value_name = "SCENARIO", conflicts_with = "quick")]
        only: Option<String>,
        /// The horizon of the `--only` run, e.g. "200s".
        #[arg(long, requires = "only", default_value = "100s")]
        until: String,
    },
    /// A regression gate: run two versions of a policy (built-in kinds or module files)
    /// on seeded desktop-like and real-time scenarios and report, per run, share,
    /// latency and miss differences and any task runnable but not run for longer than
    /// the stall threshold, with the seed that replays it (docs/check.md). Exits 1 if
    /// NEW stalls.
    Check {
        /// The reference version: a policy kind (`vassal policies`) or a module file.
        old: String,
        /// The version under test.
        new: String,
        /// A parameter of OLD, KEY=VALUE (repeatable).
        #[arg(long = "old-param", value_name = "KEY=VALUE")]
        old_params: Vec<String>,
        /// A parameter of NEW, KEY=VALUE (repeatable).
        #[arg(long = "new-param", value_name = "KEY=VALUE")]
        new_params: Vec<String>,
        /// Scenarios to run, comma-separated (default: all: desktop, realtime).
        #[arg(long, value_delimiter = ',')]
        scenario: Vec<String>,
        /// Seeds, comma-separated (default 1,2,3).
        #[arg(long, value_delimiter = ',', default_value = "1,2,3")]
        seeds: Vec<u64>,
        /// Simulated time per run (default 5s).
        #[arg(long, default_value = "5s")]
        until: String,
        /// Stall threshold: longest runnable-not-running wait allowed (default 500ms).
        #[arg(long, default_value = "500ms")]
        stall: String,
        /// Print the runs as JSON.
        #[arg(long)]
        json: bool,
    },
    /// One rt-app workload, simulated on a model of this machine and run for real (root)
    /// with its threads under the agent — or the kernel's scheduler with --kernel — side
    /// by side per thread: CPU share, wake-up latency, slack, missed periods, run time,
    /// sim − real (docs/twin.md).
    Twin(twin_cmd::TwinArgs),
    /// Measure this machine (root, ~4 s): switch cost, timer wake-up latency, wake-ups
    /// across CPUs, stalls, rt-app's loop; write the machine model `vassal twin` uses.
    Calibrate(twin_cmd::CalibrateArgs),
    /// List the policy kinds that can be named in a scenario.
    Policies,
    /// The Linux agent (root): broker, dispatcher and guardian (docs/agent.md).
    Agent(agent_cmd::AgentArgs),
    /// Start a command under the agent.
    Run(agent_cmd::RunArgs),
    /// Talk to the running agent: join, leave, parameters, reservations, messages, lists.
    Ctl(agent_cmd::CtlArgs),
    /// BVT tools (paper 001).
    Bvt {
        #[command(subcommand)]
        cmd: BvtCmd,
    },
}

#[derive(Subcommand)]
enum BvtCmd {
    /// Configure reserved-effort threads (§6.1): mcu advances, the virtual and physical
    /// windows, BVT weights, and warps per priority level (§6.1.3).
    Plan {
        /// CPU shares in percent, comma-separated (e.g. 10,30,60; 12.5 and 100/3 are exact).
        #[arg(long, value_delimiter = ',', required = true)]
        shares: Vec<String>,
        /// The context switch allowance C, in mcu.
        #[arg(long)]
        c_mcu: u64,
        /// The minimum charging unit.
        #[arg(long, default_value = "10ms")]
        mcu: String,
        /// One priority per thread (1 = most latency-sensitive); computes warps (§6.1.3).
        #[arg(long, value_delimiter = ',')]
        priorities: Vec<u32>,
        /// One warp time limit L per thread (e.g. 5ms; 0ms = no limit, counted as C).
        #[arg(long, value_delimiter = ',')]
        warp_limits: Vec<String>,
        #[arg(long)]
        json: bool,
    },
}

/// `vassal sim --load FILE ...` (see `vassal_sim::modules::apply_load`).
#[allow(clippy::too_many_arguments)]
fn load_module(
    sc: &mut vassal_sim::model::Scenario,
    file: &Path,
    name: Option<String>,
    above: Option<String>,
    below: Option<String>,
    load_at: Option<String>,
    unload_at: Option<String>,
    params: &[String],
) -> Result<()> {
    use vassal_sim::modules::{apply_load, parse_param, Place};
    let name = name.unwrap_or_else(|| file.file_stem().map_or("module".into(), |s| s.to_string_lossy().into_owned()));
    let place = match (above, below) {
        (Some(a), _) => Place::Above(a),
        (_, Some(b)) => Place::Below(b),
        _ => Place::Top,
    };
    let dur = |flag: &str, v: Option<String>| -> Result<Option<u64>> {
        v.map(|s| vassal_core::parse_duration(&s).with_context(|| format!("{flag} {s}"))).transpose()
    };
    let (load_at, unload_at) = (dur("--load-at", load_at)?, dur("--unload-at", unload_at)?);
    let params = params.iter().map(|p| parse_param(p)).collect::<Result<_, _>>().map_err(anyhow::Error::msg)?;
    apply_load(sc, file, &name, &place, load_at, unload_at, params)
        .map_err(anyhow::Error::msg)
        .with_context(|| format!("--load {}", file.display()))
}

fn main() -> ExitCode {
    // A closed output pipe (`vassal ... | head -1`) ends the command as it ends coreutils:
    // by SIGPIPE at the next write (status 141 in a shell), silently, instead of a panic
    // in println! (Rust ignores SIGPIPE by default). Restored before parsing, so `--help`
    // output is covered too; a command started by `vassal run` inherits the default.
    // The agent keeps ignoring it: a client gone must never kill it (its sockets are
    // written with MSG_NOSIGNAL as well).
    set_sigpipe(libc::SIG_DFL);
    let cli = Cli::parse();
    if matches!(cli.cmd, Cmd::Agent(_)) {
        set_sigpipe(libc::SIG_IGN);
    }
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("vassal: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn set_sigpipe(disposition: libc::sighandler_t) {
    // SAFETY: sets a signal's disposition to a constant (no handler code of ours).
    unsafe { libc::signal(libc::SIGPIPE, disposition) };
}

fn run(cli: Cli) -> Result<ExitCode> {
    match cli.cmd {
        Cmd::Sim {
            scenario,
            rt_app,
            policy,
            cpus,
            mem_rate,
            io_rate,
            seed,
            json,
            until,
            trace,
            trace_format,
            report,
            load,
            name,
            above,
            below,
            load_at,
            unload_at,
            params,
        } => {
            let mut sc = match (&scenario, &rt_app) {
                (Some(file), _) => {
                    if policy.is_some() || cpus.is_some() {
                        bail!("--policy and --cpus go with --rt-app (a scenario file names its policies and CPUs)");
                    }
                    vassal_sim::scenario::load_scenario(file).map_err(anyhow::Error::msg)?
                }
                (None, Some(file)) => {
                    let until =
                        until.as_deref().map(vassal_core::parse_duration).transpose().with_context(|| format!("--until {until:?}"))?;
                    let rate = |flag: &str, r: Option<u64>, default: u64| match r {
                        Some(0) => bail!("{flag} must be above 0"),
                        Some(mb) => mb.checked_mul(1_000_000).with_context(|| format!("{flag} {mb}: too large")),
                        None => Ok(default),
                    };
                    let opts = vassal_sim::rtapp::Options {
                        policy,
                        cpus,
                        until,
                        mem_bandwidth: rate("--mem-rate", mem_rate, vassal_sim::rtapp::MEM_BANDWIDTH)?,
                        io_bandwidth: rate("--io-rate", io_rate, vassal_sim::rtapp::IO_BANDWIDTH)?,
                    };
                    vassal_sim::rtapp::load_rtapp(file, &opts).map_err(anyhow::Error::msg)?
                }
                (None, None) => bail!("give a scenario file or --rt-app FILE.json"),
            };
            if let Some(file) = load {
                load_module(&mut sc, &file, name, above, below, load_at, unload_at, &params)?;
            }
            if let Some(s) = seed {
                sc.seed = s;
            }
            if let Some(u) = until {
                sc.until = vassal_core::parse_duration(&u).with_context(|| format!("--until {u}"))?;
            }
            let report = match (&trace, &report) {
                (None, None) => vassal_sim::simulate_with(sc, &vassal_lab::workloads::registry())?,
                _ => report_cmd::traced(sc, trace.as_deref(), trace_format.as_deref(), report.as_deref())?,
            };
            print!("{}", if json { report.to_json() + "\n" } else { report.to_table() });
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Repro { names, json, real: true, .. } => agent_cmd::repro_real(&names, json),
        Cmd::Repro { names, json, dir, report, real: false } => repro(&names, json, dir, report),
        Cmd::Sweep { file, variant, out, json, jobs } => {
            sweep::run(&file, variant, out, json, jobs)?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Twin(a) => twin_cmd::twin(a),
        Cmd::Calibrate(a) => twin_cmd::calibrate(a),
        Cmd::Agent(a) => agent_cmd::agent(a),
        Cmd::Run(a) => agent_cmd::run(a),
        Cmd::Ctl(a) => agent_cmd::ctl(a),
        Cmd::Bench { json, quick: _, only: Some(name), until } => {
            let until = vassal_core::parse_duration(&until).with_context(|| format!("--until {until}"))?;
            let c = vassal_lab::bench::run_one(&name, until)?;
            if json {
                println!("{}", serde_json::json!({ "scenario": name, "until_ns": until, "events": c.events, "jobs": c.jobs }));
            } else {
                println!("{name}: {} events, {} jobs in {:.3} s simulated", c.events, c.jobs, until as f64 / 1e9);
            }
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Bench { json, quick, only: None, .. } => {
            let b = vassal_lab::bench::run(quick)?;
            if json {
                println!("{}", serde_json::to_string(&b.json())?);
            } else {
                print!("{}", b.table());
            }
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Bvt { cmd: BvtCmd::Plan { shares, c_mcu, mcu, priorities, warp_limits, json } } => {
            bvt_plan(&shares, c_mcu, &mcu, &priorities, &warp_limits, json)
        }
        Cmd::Check { old, new, old_params, new_params, scenario, seeds, until, stall, json } => {
            use vassal_lab::check;
            let params = |ps: &[String]| -> Result<std::collections::BTreeMap<String, vassal_policies::ParamValue>> {
                ps.iter().map(|p| vassal_sim::modules::parse_param(p)).collect::<Result<_, _>>().map_err(anyhow::Error::msg)
            };
            let old = check::Version::parse(&old, params(&old_params)?).map_err(anyhow::Error::msg)?;
            let new = check::Version::parse(&new, params(&new_params)?).map_err(anyhow::Error::msg)?;
            let until = vassal_core::parse_duration(&until).with_context(|| format!("--until {until}"))?;
            let stall = vassal_core::parse_duration(&stall).with_context(|| format!("--stall {stall}"))?;
            let names: Vec<String> = if scenario.is_empty() { check::SCENARIOS.iter().map(|s| s.to_string()).collect() } else { scenario };
            if seeds.is_empty() || until == 0 {
                bail!("give at least one seed and a horizon above 0");
            }
            let rows = check::check(&old, &new, &names, &seeds, until, stall).map_err(anyhow::Error::msg)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&rows)?);
            } else {
                print!("{}", check::table(&rows, &old, &new, stall));
            }
            let stalled = rows.iter().any(|r| r.stalls.iter().any(|s| s.version == "new"));
            Ok(if stalled { ExitCode::FAILURE } else { ExitCode::SUCCESS })
        }
        Cmd::Policies => {
            for (k, d) in vassal_policies::kinds() {
                println!("{k:<8} {d}");
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn bvt_plan(shares: &[String], c_mcu: u64, mcu: &str, priorities: &[u32], limits: &[String], json: bool) -> Result<ExitCode> {
    use vassal_policies::bvt::plan as bvt_plan;
    let shares = shares.iter().map(|s| bvt_plan::parse_share(s)).collect::<Result<Vec<_>, _>>().map_err(anyhow::Error::msg)?;
    let mcu = vassal_core::parse_duration(mcu).with_context(|| format!("--mcu {mcu}"))?;
    let limits =
        limits.iter().map(|l| vassal_core::parse_duration(l).with_context(|| format!("--warp-limits {l}"))).collect::<Result<Vec<_>>>()?;
    let plan = bvt_plan::plan(&shares, c_mcu, priorities, &limits, mcu).map_err(anyhow::Error::msg)?;
    if json {
        let threads: Vec<serde_json::Value> = plan
            .threads
            .iter()
            .map(|t| {
                serde_json::json!({
                    "share_pct": t.share_pct.to_string(),
                    "advance": t.advance,
                    "weight": t.weight,
                    "run_mcu": t.run_mcu,
                    "priority": t.priority,
                    "warp_limit_ns": t.warp_limit,
                    "warp": t.priority.map(|_| t.warp),
                    "warp_ns": t.priority.map(|_| t.warp_ns),
                })
            })
            .collect();
        let v = serde_json::json!({
            "c_mcu": plan.c_mcu,
            "mcu_ns": plan.mcu,
            "V": plan.v,
            "W_mcu": plan.w,
            "allocated_pct": plan.allocated_pct.to_string(),
            "unallocated_pct": plan.unallocated_pct.to_string(),
            "threads": threads,
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        print!("{}", plan.table());
    }
    Ok(ExitCode::SUCCESS)
}

fn experiments_dir(dir: Option<PathBuf>) -> Result<PathBuf> {
    if let Some(d) = dir {
        return Ok(d);
    }
    let here = Path::new("experiments");
    if here.is_dir() {
        return Ok(here.to_path_buf());
    }
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../experiments");
    if src.is_dir() {
        return Ok(src);
    }
    bail!("no experiments directory here; pass --dir")
}

fn repro(names: &[String], json: bool, dir: Option<PathBuf>, report: Option<PathBuf>) -> Result<ExitCode> {
    let dir = experiments_dir(dir)?;
    let files = find_experiments(&dir, names).map_err(anyhow::Error::msg)?;
    if files.is_empty() {
        bail!("no experiment matches {names:?} under {}", dir.display());
    }
    let mut rows: Vec<Row> = Vec::new();
    let mut inconsistencies: std::collections::BTreeMap<String, String> = std::collections::BTreeMap::new();
    let mut runs = Vec::new();
    // Per experiment: its file, its control (name), and how many of its rows pass for ours
    // and fail under the control.
    let mut controls: Vec<(String, Option<String>, usize)> = Vec::new();
    for f in &files {
        let rel = f.strip_prefix(&dir).unwrap_or(f).to_string_lossy().replace('\\', "/");
        let file_matches = names.is_empty() || names.iter().any(|n| rel.starts_with(n.as_str()));
        let run = run_experiment_full(f, report.is_some()).map_err(anyhow::Error::msg)?;
        for (row, e) in run.rows.iter().zip(&run.expects) {
            if file_matches || names.iter().any(|n| row.id.starts_with(n.as_str())) {
                rows.push(row.clone());
                if let Some(i) = &e.inconsistent {
                    inconsistencies.insert(row.id.clone(), i.why.clone());
                }
            }
        }
        let told_apart = run.rows.iter().filter(|r| r.tells_control_apart()).count();
        controls.push((rel.clone(), run.control.as_ref().map(|c| format!("{} ({})", c.name, c.why)), told_apart));
        if report.is_some() {
            runs.push(run);
        }
    }
    if let Some(file) = &report {
        report_cmd::repro(&runs, &dir, file)?;
    }
    let count = |s: Status| rows.iter().filter(|r| r.status == s).count();
    let failed = count(Status::Fail);
    if json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
    } else {
        println!("{:<44} {:>8} {:>12} {:>12} {:>10} {:>19}  result", "id", "cmp", "paper", "ours", "tolerance", "control");
        for r in &rows {
            let cmp = match r.cmp {
                Compare::Within => "within",
                Compare::AtMost => "at most",
                Compare::AtLeast => "at least",
            };
            let result = match r.status {
                Status::Differs => "DIFFERS (known, below)".to_string(),
                Status::Inconsistent => format!("INCONSISTENT (the paper's numbers give {:.4}, below)", r.implies.unwrap_or(f64::NAN)),
                s => s.word().to_string(),
            };
            let control = match (r.control, r.control_pass) {
                (Some(v), Some(p)) => format!("{v:.4} {}", if p { "(pass)" } else { "(fail)" }),
                _ => "-".into(),
            };
            println!("{:<44} {cmp:>8} {:>12.4} {:>12.4} {:>10.4} {control:>19}  {result}", r.id, r.paper, r.ours, r.tolerance);
        }
        for r in rows.iter().filter(|r| r.status == Status::Differs) {
            println!("\n{}: ours differs from the paper: {}", r.id, r.known_difference.as_deref().unwrap_or_default());
        }
        for r in rows.iter().filter(|r| r.status == Status::Inconsistent) {
            let why = inconsistencies.get(&r.id).map(String::as_str).unwrap_or_default();
            println!("\n{}: the paper contradicts itself: {why}", r.id);
        }
        println!("\nControls (the policy the paper contrasts, run on the same experiment; \"control\" above):");
        for (file, control, told_apart) in &controls {
            match control {
                Some(c) => println!("  {file}: {c}: {told_apart} row(s) pass for ours and fail under it"),
                None => println!("  {file}: no control"),
            }
        }
        println!(
            "\n{} rows: {} pass, {} differ from the paper (known, explained above), {} where the paper contradicts itself (asserted), {} fail",
            rows.len(),
            count(Status::Pass),
            count(Status::Differs),
            count(Status::Inconsistent),
            failed
        );
    }
    // A control that no row tells apart from ours: the experiment's rows cannot fail.
    let vacuous: Vec<&str> = controls.iter().filter(|(_, c, n)| c.is_some() && *n == 0).map(|(f, _, _)| f.as_str()).collect();
    if !vacuous.is_empty() {
        eprintln!("error: no row tells ours from the control in: {}", vacuous.join(", "));
    }
    Ok(if failed == 0 && vacuous.is_empty() { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}
