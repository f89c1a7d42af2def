//! `vassal sweep FILE` (docs/sweep.md): runs every variant of a sweep on all cores,
//! prints the table of its `metrics`, and writes the runs as CSV and JSON. The work is
//! in `vassal_sim::sweep`.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use vassal_sim::sweep::{default_jobs, Sweep};

pub fn run(file: &Path, variant: Option<String>, out: Option<PathBuf>, json: bool, jobs: Option<usize>) -> Result<()> {
    let sweep = Sweep::load(file).map_err(anyhow::Error::msg)?;
    if let Some(name) = variant {
        print!("{}", sweep.variant_text(&name).map_err(anyhow::Error::msg)?);
        return Ok(());
    }
    if sweep.metrics.is_empty() {
        anyhow::bail!("{}: no metrics = [...] to tabulate", file.display());
    }
    let runs = sweep.run(jobs.unwrap_or_else(default_jobs), &|_, _| {}).map_err(anyhow::Error::msg)?;
    let dir = out.unwrap_or_else(|| PathBuf::from("."));
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let path = |ext: &str| dir.join(format!("{}.{ext}", sweep.name));
    let table = sweep.json(&runs).map_err(anyhow::Error::msg)?;
    for (ext, body) in [("csv", sweep.csv(&runs).map_err(anyhow::Error::msg)?), ("json", serde_json::to_string_pretty(&table)? + "\n")] {
        std::fs::write(path(ext), body).with_context(|| format!("cannot write {}", path(ext).display()))?;
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&table)?);
    } else {
        print!("{}", sweep.table(&runs).map_err(anyhow::Error::msg)?);
        eprintln!("wrote {}, {}", path("csv").display(), path("json").display());
    }
    Ok(())
}
