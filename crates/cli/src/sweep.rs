//! `vassal sweep FILE` (docs/sweep.md): runs every variant of a sweep on all cores, with a
//! progress bar on a terminal, prints its metrics' tables, and writes the runs as CSV and
//! JSON and a plot as SVG. The work is in `vassal_lab::sweep`.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use vassal_lab::sweep::{default_jobs, Sweep};

pub fn run(file: &Path, variant: Option<String>, out: Option<PathBuf>, json: bool, jobs: Option<usize>) -> Result<()> {
    let sweep = Sweep::load(file).map_err(anyhow::Error::msg)?;
    if let Some(name) = variant {
        print!("{}", sweep.variant_text(&name).map_err(anyhow::Error::msg)?);
        return Ok(());
    }
    if sweep.metrics.is_empty() {
        anyhow::bail!("{}: no metrics = [...] to tabulate (docs/sweep.md)", file.display());
    }
    // A bar only for a person watching: not with --json, not into a pipe or a log.
    let bar = if json || !std::io::stderr().is_terminal() {
        ProgressBar::hidden()
    } else {
        let b = ProgressBar::new(sweep.grid().len() as u64);
        b.set_style(
            ProgressStyle::with_template("{msg} [{wide_bar}] {pos}/{len} runs, ~{eta} left")
                .expect("a valid template")
                .progress_chars("=> "),
        );
        b.set_message(format!("sweep {}", sweep.name));
        b
    };
    let runs = sweep.run(jobs.unwrap_or_else(default_jobs), &|done, _| bar.set_position(done as u64));
    bar.finish_and_clear();
    let runs = runs.map_err(anyhow::Error::msg)?;
    let dir = out.unwrap_or_else(|| PathBuf::from("."));
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let path = |ext: &str| dir.join(format!("{}.{ext}", sweep.name));
    let table = sweep.json(&runs).map_err(anyhow::Error::msg)?;
    let mut files = vec![("csv", sweep.csv(&runs).map_err(anyhow::Error::msg)?), ("json", serde_json::to_string_pretty(&table)? + "\n")];
    if let Some(svg) = sweep.svg(&runs).map_err(anyhow::Error::msg)? {
        files.push(("svg", svg));
    }
    for (ext, body) in &files {
        std::fs::write(path(ext), body).with_context(|| format!("cannot write {}", path(ext).display()))?;
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&table)?);
    } else {
        print!("{}", sweep.table(&runs).map_err(anyhow::Error::msg)?);
        eprintln!("wrote {}", files.iter().map(|(ext, _)| path(ext).display().to_string()).collect::<Vec<_>>().join(", "));
    }
    Ok(())
}
