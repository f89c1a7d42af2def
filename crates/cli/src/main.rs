//! The `vassal` command: a thin front end over vassal-sim and vassal-policies.

mod bench;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};
use vassal_sim::repro::{find_experiments, run_experiment, Row};

#[derive(Parser)]
#[command(name = "vassal", version, about = "vassal: multi-policy CPU scheduling — simulator, paper reproductions, benchmarks")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Simulate a scenario file (format: docs/scenario.md) and print its report.
    Sim {
        scenario: PathBuf,
        /// Seed for every random draw (overrides the scenario's `seed`).
        #[arg(long)]
        seed: Option<u64>,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
        /// Simulated horizon, e.g. "2s" (overrides the scenario's `until`).
        #[arg(long)]
        until: Option<String>,
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
    },
    /// Measure simulator throughput and the cost of one scheduling decision.
    Bench {
        #[arg(long)]
        json: bool,
        /// A shorter run (for smoke tests); the numbers are noisier.
        #[arg(long)]
        quick: bool,
    },
    /// List the policy kinds that can be named in a scenario.
    Policies,
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("vassal: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn run(cli: Cli) -> Result<ExitCode> {
    match cli.cmd {
        Cmd::Sim { scenario, seed, json, until } => {
            let mut sc = vassal_sim::scenario::load_scenario(&scenario).map_err(anyhow::Error::msg)?;
            if let Some(s) = seed {
                sc.seed = s;
            }
            if let Some(u) = until {
                sc.until = vassal_core::parse_duration(&u).with_context(|| format!("--until {u}"))?;
            }
            let report = vassal_sim::simulate(sc)?;
            print!("{}", if json { report.to_json() + "\n" } else { report.to_table() });
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Repro { names, json, dir } => repro(&names, json, dir),
        Cmd::Bench { json, quick } => {
            let b = bench::run(quick)?;
            if json {
                println!("{}", serde_json::to_string(&b.json())?);
            } else {
                print!("{}", b.table());
            }
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Policies => {
            for (k, d) in vassal_policies::kinds() {
                println!("{k:<8} {d}");
            }
            Ok(ExitCode::SUCCESS)
        }
    }
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

fn repro(names: &[String], json: bool, dir: Option<PathBuf>) -> Result<ExitCode> {
    let dir = experiments_dir(dir)?;
    let files = find_experiments(&dir, names).map_err(anyhow::Error::msg)?;
    if files.is_empty() {
        bail!("no experiment matches {names:?} under {}", dir.display());
    }
    let mut rows: Vec<Row> = Vec::new();
    for f in &files {
        let rel = f.strip_prefix(&dir).unwrap_or(f).to_string_lossy().replace('\\', "/");
        let file_matches = names.is_empty() || names.iter().any(|n| rel.starts_with(n.as_str()));
        for row in run_experiment(f).map_err(anyhow::Error::msg)? {
            if file_matches || names.iter().any(|n| row.id.starts_with(n.as_str())) {
                rows.push(row);
            }
        }
    }
    let failed = rows.iter().filter(|r| !r.pass).count();
    if json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
    } else {
        println!("{:<44} {:>12} {:>12} {:>10}  result", "id", "paper", "ours", "tolerance");
        for r in &rows {
            println!("{:<44} {:>12.4} {:>12.4} {:>10.4}  {}", r.id, r.paper, r.ours, r.tolerance, if r.pass { "pass" } else { "FAIL" });
        }
        println!("{} passed, {} failed", rows.len() - failed, failed);
    }
    Ok(if failed == 0 { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}
