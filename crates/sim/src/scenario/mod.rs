//! The scenario file format: TOML in, a validated [`model::Scenario`](crate::model::Scenario) out.
//!
//! The reference is `docs/scenario.md`. Parsing happens in two stages:
//!
//! 1. serde into the `Raw*` structs of `raw.rs`, the file's shape as users write it.
//!    Every struct refuses unknown keys (`deny_unknown_fields`), and the small value
//!    types of `values.rs` (`Dur`, `DistV`, ...) check their own values, so the toml
//!    deserializer attaches the offending value's span to each error.
//! 2. Semantic checks that need more than one value (references between names,
//!    duplicates, CPU ranges, the policy builder), using the spans kept by
//!    [`toml::Spanned`]: `build.rs`, raw to model.
//!
//! Either way an error is a [`ScenarioError`] naming the file, the 1-based line and
//! column, and what was expected (this file: positions, and serde's wording put in the
//! file's terms). Parsing never panics, whatever the input.

use std::fmt;
use std::ops::Range;
use std::path::Path;

use crate::model::Scenario;

mod build;
mod raw;
mod values;

pub(crate) use build::phase_takes_time;
use build::Builder;
use raw::RawScenario;
pub(crate) use values::{dur_of, finite_of};

/// The behaviour kinds the scenario language knows (others go to a registry:
/// [`crate::behave`]).
pub const BUILTIN_BEHAVIOURS: &[&str] = &["cpu", "periodic", "player", "interactive", "io", "handler", "script"];
/// The keys of the built-in behaviour kinds.
pub const BUILTIN_BEHAVIOUR_KEYS: &[&str] = &[
    "kind",
    "work",
    "period",
    "exec",
    "deadline",
    "late_after",
    "offset",
    "jobs",
    "burst",
    "think",
    "run",
    "sleep",
    "voluntary",
    "vector",
    "phases",
    "repeat",
];

/// The most replicas one `[[task]]` may ask for with `count`.
pub const MAX_COUNT: i64 = 10_000;
/// The most tasks a scenario may have after `count` expansion.
pub const MAX_TASKS: usize = 100_000;
/// The default tick rate.
pub const DEFAULT_HZ: u32 = 250;
/// The default scheduler's name and policy when `[default]` leaves them out.
pub const DEFAULT_SCHEDULER_NAME: &str = "default";
/// BVT is vassal's universal default policy (paper 001; issue 3).
pub const DEFAULT_POLICY: &str = "bvt";

/// A scenario file that could not be read or is not valid. Displayed as
/// `FILE:LINE:COL: MSG`; `line` and `col` are 1-based (0 when the file could not be read).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScenarioError {
    pub file: String,
    pub line: usize,
    pub col: usize,
    pub msg: String,
}

impl fmt::Display for ScenarioError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}: {}", self.file, self.line, self.col, self.msg)
    }
}

impl std::error::Error for ScenarioError {}

/// Reads and parses a scenario file. A file that cannot be read is reported with line 0.
pub fn load_scenario(path: &Path) -> Result<Scenario, ScenarioError> {
    let file = path.display().to_string();
    match std::fs::read_to_string(path) {
        Ok(text) => parse_scenario(&text, &file),
        Err(e) => Err(ScenarioError { file, line: 0, col: 0, msg: format!("cannot read scenario file: {e}") }),
    }
}

/// Parses scenario text. `file` names it in errors, and its stem is the scenario's name
/// when the text does not give one.
pub fn parse_scenario(text: &str, file: &str) -> Result<Scenario, ScenarioError> {
    let src = Source::new(text, file);
    let raw: RawScenario = toml::from_str(text).map_err(|e| src.toml_error(&e))?;
    Builder { src }.scenario(raw)
}

struct Source<'a> {
    text: &'a str,
    file: &'a str,
    /// The byte offset of each '\n', computed on the first `line_of` (a 1,000-task file
    /// asks for a line per task: counting from the start each time was quadratic).
    newlines: std::cell::OnceCell<Vec<usize>>,
}

impl<'a> Source<'a> {
    fn new(text: &'a str, file: &'a str) -> Self {
        Source { text, file, newlines: std::cell::OnceCell::new() }
    }

    /// 1-based line and column (in characters) of a byte offset.
    fn line_col(&self, pos: usize) -> (usize, usize) {
        let (mut line, mut col) = (1, 1);
        for (i, c) in self.text.char_indices() {
            if i >= pos {
                break;
            }
            if c == '\n' {
                line += 1;
                col = 1;
            } else {
                col += 1;
            }
        }
        (line, col)
    }

    fn err(&self, span: Range<usize>, msg: impl Into<String>) -> ScenarioError {
        let (line, col) = self.line_col(span.start);
        ScenarioError { file: self.file.to_string(), line, col, msg: msg.into() }
    }

    fn line_of(&self, span: &Range<usize>) -> usize {
        let newlines = self.newlines.get_or_init(|| self.text.bytes().enumerate().filter(|&(_, b)| b == b'\n').map(|(i, _)| i).collect());
        1 + newlines.partition_point(|&i| i < span.start)
    }

    fn toml_error(&self, e: &toml::de::Error) -> ScenarioError {
        let msg = e
            .message()
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect::<Vec<_>>()
            .join("; ")
            .replace("unknown field", "unknown key")
            .replace("missing field", "missing required key")
            .replace("unknown variant", "unknown usage");
        // toml_edit's own wording for unknown keys in an enum's table: match serde's.
        let msg = match msg.strip_prefix("unexpected keys in table: ").and_then(|r| r.split_once(", available keys: ")) {
            Some((keys, avail)) => {
                let quote = |l: &str| l.split(", ").map(|k| format!("`{k}`")).collect::<Vec<_>>().join(", ");
                format!("unknown key {}, expected one of {}", quote(keys), quote(avail))
            }
            None => msg,
        };
        // Say what was expected in the file's terms, not the parser's.
        let msg = WORDING.iter().fold(msg, |m, (from, to)| m.replace(from, to));
        let msg = if msg.is_empty() { "invalid TOML".to_string() } else { msg };
        self.err(e.span().unwrap_or(0..0), msg)
    }
}

const USAGE_EXPECTED: &str = "expected usage = { hard_time = { cpus = [0], util = 0.3 } }, { reserved = 0.5 } or \"best_effort\"";

/// Rewordings of serde and toml messages (the only enum left to serde is the usage).
const WORDING: &[(&str, &str)] = &[
    ("struct RawMachine", "a table of machine keys (cpus, clock, ...)"),
    ("struct RawUnscheduled", "a table { interval = ..., duration = ... }"),
    ("struct RawDefault", "a table of default-scheduler keys (name, policy, params)"),
    ("struct RawScheduler", "a [[scheduler]] table"),
    ("struct RawTask", "a [[task]] table"),
    ("struct RawMemory", "a table of memory keys (size_kb, swap_seek, swap_transfer, ...)"),
    ("struct RawInterrupt", "an [[interrupt]] table"),
    ("struct RawBehaviour", "a behaviour table such as { kind = \"cpu\" }"),
    ("struct RawPhase", "a phase table such as { run = \"1ms\" }"),
    ("struct RawSend", "a table { to = \"scheduler\", request = \"join\" }"),
    ("struct RawHandOff", "a table { to = \"task\", sleep = \"1ms\" }"),
    ("struct variant RawUsage::HardTime", "a table { cpus = [0], util = 0.3 }"),
    ("wanted string or table", USAGE_EXPECTED),
    ("wanted exactly 1 element, more than 1 element", "usage has exactly one key"),
    ("wanted exactly 1 element, found 0 elements", USAGE_EXPECTED),
    ("invalid type: map", "invalid type: table"),
    ("invalid type: sequence", "invalid type: array"),
    ("expected a map", "expected a table"),
    ("expected a sequence", "expected an array"),
    ("expected i64", "expected an integer"),
    ("expected u64", "expected an integer from 0 to 18446744073709551615"),
    ("expected u32", "expected an integer from 0 to 4294967295"),
    ("expected a boolean", "expected true or false"),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_col_counts_characters() {
        let src = Source::new("ab\nµs = 1\n", "f");
        assert_eq!(src.line_col(0), (1, 1));
        assert_eq!(src.line_col(3), (2, 1));
        assert_eq!(src.line_col(6), (2, 3)); // after 'µ' (2 bytes) and 's'
        assert_eq!(src.line_col(1000), (3, 1));
        for pos in [0, 1, 2, 3, 4, 6, 9, 10, 11, 1000] {
            assert_eq!(src.line_of(&(pos..pos + 1)), src.line_col(pos).0, "at {pos}");
        }
    }
}
