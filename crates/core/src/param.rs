//! A scheduler-level parameter's value, as written: `params = { quantum = "10ms" }` in a
//! scenario or the agent's config, `--param quantum=10ms` on a command line, a `params`
//! object on the agent's wire, and the text a loaded module's `vassal_init` reads
//! ([`crate::abi::encode_params`]).
//!
//! One type for all of them: the built-in policies read it (vassal-policies' `Params`),
//! the module host passes it on, the SDK hands it to a module's builder. With the `serde`
//! feature it (de)serializes untagged: `true`, `5`, `0.5`, `"10ms"` — a whole number is
//! an `Int`, never a `Float`.

/// One parameter value, as written.
#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(untagged))]
pub enum ParamValue {
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
}
