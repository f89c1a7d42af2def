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

/// How a row compares ours with the paper's value. In a file `compare = "within"` (or
/// its older spelling `"abs"`, the default), `"at_most"` or `"at_least"`; in `--json` the
/// row's `cmp`.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Compare {
    /// |ours − paper| ≤ tolerance.
    #[default]
    #[serde(alias = "abs")]
    Within,
    /// ours ≤ paper + tolerance.
    AtMost,
    /// ours ≥ paper − tolerance.
    AtLeast,
}

impl Compare {
    /// True if `ours` meets `paper` with `tolerance` this way (never for NaN).
    pub fn holds(self, ours: f64, paper: f64, tolerance: f64) -> bool {
        ours.is_finite()
            && match self {
                Compare::Within => (ours - paper).abs() <= tolerance + 1e-12,
                Compare::AtMost => ours <= paper + tolerance + 1e-12,
                Compare::AtLeast => ours >= paper - tolerance - 1e-12,
            }
    }

    /// The tolerance as text: "± 0.5", "at most +0", "at least −1".
    pub fn describe(self, tolerance: &str) -> String {
        match self {
            Compare::Within => format!("± {tolerance}"),
            Compare::AtMost => format!("at most +{tolerance}"),
            Compare::AtLeast => format!("at least −{tolerance}"),
        }
    }
}

/// What a row's result is (`--json`'s `status`).
#[derive(Clone, Copy, Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Ours meets the paper's value.
    Pass,
    /// Ours does not, and the row says why (`known_difference`); not a failure.
    Differs,
    /// The paper contradicts itself: its stated value is not what its own numbers give
    /// (`inconsistent.implies`), and ours meets what its numbers give. Not a failure.
    Inconsistent,
    /// Ours meets neither the paper nor a stated explanation: `vassal repro` exits non-zero.
    Fail,
}

impl Status {
    /// The word `vassal repro` prints.
    pub fn word(self) -> &'static str {
        match self {
            Status::Pass => "pass",
            Status::Differs => "DIFFERS",
            Status::Inconsistent => "INCONSISTENT",
            Status::Fail => "FAIL",
        }
    }
}

/// A row where the paper contradicts itself: `implies` is the value the paper's own
/// other numbers give (worked out in `why`), where its stated value (`paper`) differs.
/// Ours is judged against `implies` with the row's comparison and `tolerance` (default:
/// the row's, which may be a count's noise and so depend on the value).
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Inconsistent {
    pub implies: f64,
    #[serde(default)]
    pub tolerance: Option<f64>,
    pub why: String,
}

impl Inconsistent {
    fn tolerance_or(&self, row: f64) -> f64 {
        self.tolerance.unwrap_or(row)
    }
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
    /// Set when the paper contradicts itself here: ours is judged (with the same
    /// comparison and tolerance) against the value the paper's own numbers imply.
    #[serde(default)]
    pub inconsistent: Option<Inconsistent>,
}

/// One result row. `--json` prints an array of these with exactly these keys (`implies`
/// only on a paper-inconsistent row, `control` and `control_pass` only where the
/// experiment runs a control).
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Row {
    pub id: String,
    pub paper: f64,
    pub ours: f64,
    pub tolerance: f64,
    /// Ours meets the paper's value.
    pub pass: bool,
    pub cmp: Compare,
    pub status: Status,
    /// What the paper's own numbers give, where it contradicts itself.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub implies: Option<f64>,
    /// The same row's value under the experiment's control (the policy the paper
    /// contrasts), where it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub control: Option<f64>,
    /// Whether the control's value meets the row (pass, or what the paper's numbers
    /// imply where it contradicts itself).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub control_pass: Option<bool>,
    /// The explanation of a known difference from the paper (not in the JSON).
    #[serde(skip)]
    pub known_difference: Option<String>,
}

impl Row {
    /// True if ours meets the row (it passes, or asserts the paper's inconsistency) and
    /// the experiment's control does not: the row tells the two apart.
    pub fn tells_control_apart(&self) -> bool {
        matches!(self.status, Status::Pass | Status::Inconsistent) && self.control_pass == Some(false)
    }
}

impl Expect {
    /// Checks the row itself: finite numbers, a tolerance ≥ 0, not both a known difference
    /// and an inconsistency, and an inconsistency whose implied value the stated one
    /// does not meet (else the paper does not contradict itself).
    pub fn validate(&self) -> Result<(), String> {
        if !self.paper.is_finite() || !self.tolerance.is_finite() || self.tolerance < 0.0 {
            return Err(format!("expect '{}': paper and tolerance must be finite, tolerance >= 0", self.id));
        }
        if let Some(i) = &self.inconsistent {
            if self.known_difference.is_some() {
                return Err(format!("expect '{}': a row is either a known difference or paper-inconsistent, not both", self.id));
            }
            if !i.implies.is_finite() || i.tolerance.is_some_and(|t| !t.is_finite() || t < 0.0) {
                return Err(format!("expect '{}': inconsistent.implies and tolerance must be finite, tolerance >= 0", self.id));
            }
            if self.compare.holds(self.paper, i.implies, self.tolerance) {
                return Err(format!(
                    "expect '{}': inconsistent.implies = {} agrees with paper = {} within the row's comparison: no inconsistency",
                    self.id, i.implies, self.paper
                ));
            }
        }
        Ok(())
    }

    /// Whether `ours` meets this row (the paper's value, or its implied one): the status.
    pub fn status_of(&self, ours: f64) -> Status {
        if self.compare.holds(ours, self.paper, self.tolerance) {
            return match &self.inconsistent {
                // Ours agrees with the stated value the paper's own numbers contradict.
                Some(_) => Status::Fail,
                None => Status::Pass,
            };
        }
        match (&self.inconsistent, &self.known_difference) {
            (Some(i), _) if self.compare.holds(ours, i.implies, i.tolerance_or(self.tolerance)) => Status::Inconsistent,
            (Some(_), _) => Status::Fail,
            (None, Some(_)) => Status::Differs,
            (None, None) => Status::Fail,
        }
    }

    pub fn judge(&self, ours: f64) -> Row {
        let status = self.status_of(ours);
        Row {
            id: self.id.clone(),
            paper: self.paper,
            ours,
            tolerance: self.tolerance,
            pass: status == Status::Pass,
            cmp: self.compare,
            status,
            implies: self.inconsistent.as_ref().map(|i| i.implies),
            control: None,
            control_pass: None,
            known_difference: if status == Status::Differs { self.known_difference.clone() } else { None },
        }
    }
}

/// An experiment's control (`[control]`): the policy the paper contrasts, run on the same
/// experiment and judged by the same rows, printed beside ours (docs/repro.md).
///
/// ```toml
/// [control]
/// name = "linux22"                          # what the control is
/// why = "§4.1 contrasts BVT with Linux 2.2"  # why this one
/// set = { "default.policy" = "linux22", "task.mpeg.params" = {} }   # key paths (docs/sweep.md)
/// replace = { "sched.bvt_diff" = "wrr" }    # sweeps: AXIS.VALUE takes OTHER's settings
/// file = "fig2-no-svt.toml"                 # or: another experiment's scenario (its rows ignored)
/// ```
#[derive(Clone, Debug)]
pub struct Control {
    pub name: String,
    pub why: String,
    /// Another experiment file (relative to this one) whose scenario (or computation)
    /// the control runs instead, `set` applied on top; not for sweeps.
    pub file: Option<PathBuf>,
    /// Settings applied to the experiment (a sweep: to every variant, after its own; a
    /// computed experiment: paths start with `computed.`).
    pub set: Vec<(String, toml::Value)>,
    /// A sweep's values replaced by another value of the same axis.
    pub replace: Vec<(String, String)>,
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
    /// The experiment's control, whose values are in the rows' `control`.
    pub control: Option<Control>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(extra: &str) -> Expect {
        toml::from_str(&format!("id = \"x\"\nmetric = \"m\"\npaper = 4.0\ntolerance = 0.5\nwhy = \"w\"\n{extra}")).unwrap()
    }

    #[test]
    fn each_comparison_judges_its_own_way() {
        let within = row("");
        assert_eq!(within.compare, Compare::Within);
        assert_eq!(row("compare = \"abs\"").compare, Compare::Within, "the older spelling");
        assert_eq!((within.judge(4.5).status, within.judge(3.4).status), (Status::Pass, Status::Fail));
        let at_most = row("compare = \"at_most\"");
        assert_eq!((at_most.judge(-100.0).status, at_most.judge(4.6).status), (Status::Pass, Status::Fail));
        let at_least = row("compare = \"at_least\"");
        assert_eq!((at_least.judge(100.0).status, at_least.judge(3.4).status), (Status::Pass, Status::Fail));
        assert_eq!(within.judge(f64::NAN).status, Status::Fail, "NaN never passes");
    }

    #[test]
    fn a_known_difference_differs_and_a_pass_is_a_pass() {
        let e = row("known_difference = \"why\"");
        let r = e.judge(9.0);
        assert_eq!((r.status, r.pass, r.known_difference.as_deref()), (Status::Differs, false, Some("why")));
        let r = e.judge(4.0);
        assert_eq!((r.status, r.pass, r.known_difference), (Status::Pass, true, None));
    }

    #[test]
    fn an_inconsistency_is_asserted_from_the_implied_value() {
        let e = row("inconsistent = { implies = 5.0, why = \"its table has 5\" }");
        e.validate().unwrap();
        let r = e.judge(5.0);
        assert_eq!((r.status, r.pass, r.implies), (Status::Inconsistent, false, Some(5.0)));
        assert_eq!(e.judge(4.0).status, Status::Fail, "ours agrees with the value the paper's numbers contradict");
        assert_eq!(e.judge(7.0).status, Status::Fail, "ours meets neither");
        let wide = row("inconsistent = { implies = 10.0, tolerance = 2.0, why = \"w\" }");
        assert_eq!(wide.judge(11.9).status, Status::Inconsistent, "its own tolerance");
        assert!(row("inconsistent = { implies = 4.2, why = \"w\" }").validate().unwrap_err().contains("no inconsistency"));
        let both = row("known_difference = \"k\"\ninconsistent = { implies = 5.0, why = \"w\" }");
        assert!(both.validate().unwrap_err().contains("not both"));
        let negative: Expect = toml::from_str("id = \"x\"\nmetric = \"m\"\npaper = 4.0\ntolerance = -1.0\nwhy = \"w\"").unwrap();
        assert!(negative.validate().unwrap_err().contains("tolerance >= 0"));
    }

    #[test]
    fn the_json_keeps_its_keys_and_adds_cmp_and_status() {
        let r = row("compare = \"at_least\"").judge(4.0);
        let text = serde_json::to_string(&r).unwrap();
        let at = |k: &str| text.find(&format!("\"{k}\":")).unwrap_or_else(|| panic!("no key {k} in {text}"));
        let order: Vec<usize> = ["id", "paper", "ours", "tolerance", "pass", "cmp", "status"].iter().map(|k| at(k)).collect();
        assert!(order.windows(2).all(|w| w[0] < w[1]), "{text}");
        assert!(!text.contains("implies"), "{text}");
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!((v["cmp"].as_str(), v["status"].as_str()), (Some("at_least"), Some("pass")));
        let v = serde_json::to_value(row("inconsistent = { implies = 5.0, why = \"w\" }").judge(5.0)).unwrap();
        assert_eq!((v["status"].as_str(), v["implies"].as_f64(), v["cmp"].as_str()), (Some("inconsistent"), Some(5.0), Some("within")));
    }
}
