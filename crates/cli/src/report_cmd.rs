//! `vassal sim --trace/--report` and `vassal repro --report`: runs with a trace, written
//! as a Chrome JSON or Perfetto protobuf trace (docs/trace.md) and/or a self-contained HTML page
//! (docs/report.md).

use std::path::Path;

use anyhow::{Context, Result};
use vassal_lab::expect::ExperimentRun;
use vassal_sim::model::Scenario;
use vassal_sim::Report;

/// Whether a trace file is written in Perfetto's protobuf format: as `format` says, else
/// by the file's extension (.pftrace, .perfetto-trace, .pb).
pub fn is_perfetto(file: &Path, format: Option<&str>) -> bool {
    match format {
        Some(f) => f == "perfetto",
        None => file.extension().is_some_and(|e| e == "pftrace" || e == "perfetto-trace" || e == "pb"),
    }
}

/// Runs `sc` recording a trace; writes the trace file (Chrome JSON or Perfetto protobuf,
/// see [`is_perfetto`]) and/or the HTML report.
pub fn traced(sc: Scenario, trace: Option<&Path>, format: Option<&str>, html: Option<&Path>) -> Result<Report> {
    let mut sim = vassal_sim::Sim::with_registry(sc.clone(), &vassal_lab::workloads::registry())?;
    sim.record_trace();
    let (report, t) = sim.run_traced()?;
    if let Some(file) = trace {
        let out = if is_perfetto(file, format) {
            vassal_lab::perfetto::to_perfetto(&sc, &t).map_err(anyhow::Error::msg)?
        } else {
            vassal_lab::chrome_trace::to_chrome_json(&sc, &report, &t).into_bytes()
        };
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
