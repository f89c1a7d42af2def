//! Policy parameters as given in a scenario or config (`params = { quantum = "10ms" }`),
//! read by the policy builders with clear errors for wrong types and unknown keys. The
//! value type is vassal-core's [`ParamValue`] (one type for scenarios, the agent's config
//! and wire, and loaded modules), re-exported here under the path callers use.

use std::collections::{BTreeMap, BTreeSet};

pub use vassal_core::ParamValue;
use vassal_core::{parse_duration, Ns};

/// Reads parameters by name, remembering which were read so that `finish` can refuse
/// the unknown ones.
pub struct Params<'a> {
    map: &'a BTreeMap<String, ParamValue>,
    used: BTreeSet<&'a str>,
    kind: &'a str,
}

impl<'a> Params<'a> {
    pub fn new(kind: &'a str, map: &'a BTreeMap<String, ParamValue>) -> Self {
        Params { map, used: BTreeSet::new(), kind }
    }

    fn get(&mut self, key: &str) -> Option<&'a ParamValue> {
        let (k, v) = self.map.get_key_value(key)?;
        self.used.insert(k.as_str());
        Some(v)
    }

    /// The value as written, for parameters with their own syntax (e.g. a fraction).
    pub fn raw(&mut self, key: &str) -> Option<&'a ParamValue> {
        self.get(key)
    }

    /// A duration such as "10ms" (a unit is required).
    pub fn duration(&mut self, key: &str, default: Ns) -> Result<Ns, String> {
        match self.get(key) {
            None => Ok(default),
            Some(ParamValue::Str(s)) => parse_duration(s).map_err(|e| format!("{} parameter '{key}': {e}", self.kind)),
            Some(v) => Err(format!("{} parameter '{key}': expected a duration string like \"10ms\", found {v:?}", self.kind)),
        }
    }

    /// An integer in `range`.
    pub fn int(&mut self, key: &str, default: i64, range: std::ops::RangeInclusive<i64>) -> Result<i64, String> {
        match self.get(key) {
            None => Ok(default),
            Some(ParamValue::Int(i)) if range.contains(i) => Ok(*i),
            Some(ParamValue::Int(i)) => {
                Err(format!("{} parameter '{key}': {i} is out of range {}..={}", self.kind, range.start(), range.end()))
            }
            Some(v) => Err(format!("{} parameter '{key}': expected an integer, found {v:?}", self.kind)),
        }
    }

    pub fn bool(&mut self, key: &str, default: bool) -> Result<bool, String> {
        match self.get(key) {
            None => Ok(default),
            Some(ParamValue::Bool(b)) => Ok(*b),
            Some(v) => Err(format!("{} parameter '{key}': expected true or false, found {v:?}", self.kind)),
        }
    }

    /// A string, one of `choices`.
    pub fn choice(&mut self, key: &str, default: &'a str, choices: &[&str]) -> Result<String, String> {
        match self.get(key) {
            None => Ok(default.to_string()),
            Some(ParamValue::Str(s)) if choices.contains(&s.as_str()) => Ok(s.clone()),
            Some(v) => Err(format!("{} parameter '{key}': expected one of {choices:?}, found {v:?}", self.kind)),
        }
    }

    /// Refuses any parameter that was never read.
    pub fn finish(self) -> Result<(), String> {
        let unknown: Vec<&str> = self.map.keys().map(|k| k.as_str()).filter(|k| !self.used.contains(k)).collect();
        if unknown.is_empty() {
            Ok(())
        } else {
            Err(format!("{} has no parameter(s) {}", self.kind, unknown.join(", ")))
        }
    }
}
