//! `vassal sweep SPEC`: runs a scenario over a grid of parameters on all cores, with a
//! progress bar on a terminal, and writes the table (CSV, JSON) and an SVG plot
//! (docs/sweep.md). The work is in `vassal_sim::sweep_grid`.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use vassal_sim::sweep_grid::Sweep;

pub fn run(spec: &Path, out: Option<PathBuf>, json: bool, jobs: Option<usize>) -> Result<()> {
    let sweep = Sweep::load(spec).map_err(anyhow::Error::msg)?;
    let total = sweep.grid().len();
    // A bar only for a person watching: not with --json, not into a pipe or a log.
    let bar = if json || !std::io::stderr().is_terminal() {
        ProgressBar::hidden()
    } else {
        let b = ProgressBar::new(total as u64);
        b.set_style(
            ProgressStyle::with_template("{msg} [{wide_bar}] {pos}/{len} runs, ~{eta} left")
                .expect("a valid template")
                .progress_chars("=> "),
        );
        b.set_message(format!("sweep {}", sweep.name));
        b
    };
    let threads = jobs.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let points = sweep.run(threads, &|done, _| bar.set_position(done as u64));
    bar.finish_and_clear();
    let points = points.map_err(anyhow::Error::msg)?;
    let dir = out.unwrap_or_else(|| PathBuf::from("."));
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let file = |ext: &str| dir.join(format!("{}.{ext}", sweep.name));
    let table = sweep.json(&points);
    for (ext, body) in [("csv", sweep.csv(&points)), ("json", serde_json::to_string_pretty(&table)? + "\n"), ("svg", sweep.svg(&points))] {
        let f = file(ext);
        std::fs::write(&f, body).with_context(|| format!("cannot write {}", f.display()))?;
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&table)?);
    } else {
        print!("{}", sweep.table(&points));
        eprintln!("wrote {}, {}, {}", file("csv").display(), file("json").display(), file("svg").display());
    }
    Ok(())
}
