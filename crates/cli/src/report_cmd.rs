//! `vassal sim --trace/--report` and `vassal repro --report`: runs with a trace, written
//! as a Chrome JSON trace (docs/trace.md) and/or a self-contained HTML page
//! (docs/report.md).

use std::path::Path;

use anyhow::{Context, Result};
use vassal_lab::expect::ExperimentRun;
use vassal_sim::model::Scenario;
use vassal_sim::Report;

/// Runs `sc` recording a trace; writes the trace file and/or the HTML report.
pub fn traced(sc: Scenario, trace: Option<&Path>, html: Option<&Path>) -> Result<Report> {
    let mut sim = vassal_sim::Sim::with_registry(sc.clone(), &vassal_lab::workloads::registry())?;
    sim.record_trace();
    let (report, t) = sim.run_traced()?;
    if let Some(file) = trace {
        let out = vassal_lab::chrome_trace::to_chrome_json(&sc, &report, &t);
        std::fs::write(file, out).with_context(|| format!("cannot write the trace to {}", file.display()))?;
    }
    if let Some(file) = html {
        let page = vassal_lab::html::sim_page(&sc, &report, &t);
        std::fs::write(file, page).with_context(|| format!("cannot write the report to {}", file.display()))?;
    }
    Ok(report)
}

/// Writes the repro report page for `runs` (experiments found under `root`).
pub fn repro(runs: &[ExperimentRun], root: &Path, file: &Path) -> Result<()> {
    let page = vassal_lab::html::repro_page(runs, root);
    std::fs::write(file, page).with_context(|| format!("cannot write the report to {}", file.display()))
}
