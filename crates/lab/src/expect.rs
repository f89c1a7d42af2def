//! An experiment's rows: what a `[[expect]]` row asks (`Expect`), how ours is judged
//! against the paper's value (`Compare`, `Expect::judge`), the result row `vassal repro`
//! prints (`Row`, whose JSON is the `--json` output), and one experiment file's results
//! with what produced them (`ExperimentRun`, for the HTML report). Data only: the lowest
//! layer of the crate with `fmt` and `metric`; docs/repro.md describes the rows.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use vassal_sim::engine::Trace;
use vassal_sim::model::Scenario;
use vassal_sim::report::Report;

#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Compare {
    #[default]
    Abs,
    AtMost,
    AtLeast,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Expect {
    pub id: String,
    pub metric: String,
    pub paper: f64,
    pub tolerance: f64,
    #[serde(default)]
    pub compare: Compare,
    pub why: String,
    /// Set when ours is known not to match the paper, with the explanation: the row is
    /// still computed, printed ("DIFFERS") and reported with `pass: false`, but does not
    /// make `vassal repro` exit non-zero. A finding, shown on every run — not hidden.
    #[serde(default)]
    pub known_difference: Option<String>,
}

/// One result row. `--json` prints an array of these with exactly these keys.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Row {
    pub id: String,
    pub paper: f64,
    pub ours: f64,
    pub tolerance: f64,
    pub pass: bool,
    /// The explanation of a known difference from the paper (not in the JSON).
    #[serde(skip)]
    pub known_difference: Option<String>,
}

impl Expect {
    pub fn judge(&self, ours: f64) -> Row {
        let pass = ours.is_finite()
            && match self.compare {
                Compare::Abs => (ours - self.paper).abs() <= self.tolerance + 1e-12,
                Compare::AtMost => ours <= self.paper + self.tolerance + 1e-12,
                Compare::AtLeast => ours >= self.paper - self.tolerance - 1e-12,
            };
        Row {
            id: self.id.clone(),
            paper: self.paper,
            ours,
            tolerance: self.tolerance,
            pass,
            known_difference: if pass { None } else { self.known_difference.clone() },
        }
    }
}

/// A simulated experiment's run, kept for reports.
pub struct SimRun {
    pub scenario: Scenario,
    pub report: Report,
    /// Recorded when asked for (see `repro::run_experiment_full`) or when a row needs it.
    pub trace: Trace,
}

/// One experiment file's results with what produced them (for `repro --report`).
pub struct ExperimentRun {
    pub path: PathBuf,
    /// The file's leading comment block (its description), without the `#`s.
    pub description: String,
    pub expects: Vec<Expect>,
    /// One per expect, in the same order.
    pub rows: Vec<Row>,
    /// None for computed experiments and sweeps.
    pub run: Option<SimRun>,
    /// A sweep's plots (inline SVG), one per metric it lists.
    pub plots: Vec<String>,
}
