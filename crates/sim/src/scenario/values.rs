//! Value types that check themselves during deserialization, so that an error gets the
//! value's span: durations (a string with a unit; a bare number is refused with a hint),
//! distributions of durations, pairs, finite floats, policy and task parameters, the
//! clock mode and image sizes. Each wraps the model's type and refuses what it is not.

use std::fmt;

use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;

use vassal_core::{parse_duration, Ns};
use vassal_policies::ParamValue;

use crate::model::{ClockMode, Dist};

const DURATION_EXPECTED: &str = "a duration string with a unit (ns, us, ms, s), e.g. \"10ms\"";

fn unitless<E: de::Error>(v: impl fmt::Display) -> E {
    E::custom(format!("duration {v} has no unit; a unit is needed, e.g. \"{}ms\" (units: ns, us, ms, s)", v.to_string().trim_matches('"')))
}

/// Parses a duration string; a missing unit gets the same message as a bare number.
fn dur_str<E: de::Error>(s: &str) -> Result<Ns, E> {
    match parse_duration(s) {
        Err(vassal_core::DurationError::MissingUnit(n)) => Err(unitless(format_args!("\"{n}\""))),
        r => r.map_err(E::custom),
    }
}

/// A duration written as a string with a unit.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Dur(pub(super) Ns);

impl<'de> Deserialize<'de> for Dur {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Dur;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str(DURATION_EXPECTED)
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Dur, E> {
                dur_str(s).map(Dur)
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Dur, E> {
                if v < 0 {
                    return Err(E::custom(format!("duration {v} is negative; durations must be zero or more")));
                }
                Err(unitless(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Dur, E> {
                Err(unitless(v))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Dur, E> {
                if v < 0.0 {
                    return Err(E::custom(format!("duration {v} is negative; durations must be zero or more")));
                }
                Err(unitless(v))
            }
        }
        d.deserialize_any(V)
    }
}

/// A distribution of durations: a duration string (constant), or a table with one key:
/// `uniform = [lo, hi]`, `exp = mean`, `normal = [mean, sd]`.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct DistV(pub(super) Dist);

const DIST_EXPECTED: &str =
    "a duration such as \"5ms\" or a distribution { uniform = [lo, hi] }, { exp = mean } or { normal = [mean, sd] }";

impl<'de> Deserialize<'de> for DistV {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = DistV;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str(DIST_EXPECTED)
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<DistV, E> {
                dur_str(s).map(|n| DistV(Dist::Const(n)))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<DistV, E> {
                Dur::deserialize(de::value::I64Deserializer::<E>::new(v)).map(|d| DistV(Dist::Const(d.0)))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<DistV, E> {
                Dur::deserialize(de::value::F64Deserializer::<E>::new(v)).map(|d| DistV(Dist::Const(d.0)))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<DistV, A::Error> {
                let Some(key) = map.next_key::<String>()? else {
                    return Err(de::Error::custom(format!("empty distribution table; expected {DIST_EXPECTED}")));
                };
                let dist = match key.as_str() {
                    "uniform" => {
                        let Pair(lo, hi) = map.next_value::<Pair>()?;
                        if lo > hi {
                            return Err(de::Error::custom(format!(
                                "uniform distribution has lo ({}) greater than hi ({}); expected [lo, hi] with lo <= hi",
                                vassal_core::fmt_duration(lo),
                                vassal_core::fmt_duration(hi)
                            )));
                        }
                        Dist::Uniform(lo, hi)
                    }
                    "exp" => Dist::Exp(map.next_value::<Dur>()?.0),
                    "normal" => {
                        let Pair(mean, sd) = map.next_value::<Pair>()?;
                        Dist::Normal(mean, sd)
                    }
                    other => {
                        return Err(de::Error::custom(format!(
                            "unknown distribution `{other}`; expected one of `uniform`, `exp`, `normal`"
                        )))
                    }
                };
                if let Some(extra) = map.next_key::<String>()? {
                    return Err(de::Error::custom(format!(
                        "a distribution table has exactly one key (`{key}`), but `{extra}` is also given"
                    )));
                }
                Ok(DistV(dist))
            }
        }
        d.deserialize_any(V)
    }
}

/// Two durations, as in `[lo, hi]`.
struct Pair(Ns, Ns);

impl<'de> Deserialize<'de> for Pair {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Pair;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an array of two durations, e.g. [\"5us\", \"50us\"]")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Pair, A::Error> {
                let wrong = || de::Error::custom("expected an array of exactly two durations, e.g. [\"5us\", \"50us\"]");
                let a = seq.next_element::<Dur>()?.ok_or_else(wrong)?;
                let b = seq.next_element::<Dur>()?.ok_or_else(wrong)?;
                if seq.next_element::<de::IgnoredAny>()?.is_some() {
                    return Err(wrong());
                }
                Ok(Pair(a.0, b.0))
            }
        }
        d.deserialize_any(V)
    }
}

/// A float that must be finite.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Finite(pub(super) f64);

impl<'de> Deserialize<'de> for Finite {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Finite;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a finite number, e.g. 0.25")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Finite, E> {
                Ok(Finite(v as f64))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Finite, E> {
                Ok(Finite(v as f64))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Finite, E> {
                if v.is_finite() {
                    Ok(Finite(v))
                } else {
                    Err(E::custom(format!("{v} is not a finite number; expected a number such as 0.25")))
                }
            }
        }
        d.deserialize_any(V)
    }
}

/// A policy parameter: integer, finite float, string or boolean.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Param(pub(super) ParamValue);

impl<'de> Deserialize<'de> for Param {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Param;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a policy parameter: an integer, a number, a string (e.g. a duration \"10ms\") or a boolean")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Param, E> {
                Ok(Param(ParamValue::Int(v)))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Param, E> {
                i64::try_from(v).map(|v| Param(ParamValue::Int(v))).map_err(|_| E::custom("integer too large"))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Param, E> {
                Finite::deserialize(de::value::F64Deserializer::<E>::new(v)).map(|f| Param(ParamValue::Float(f.0)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Param, E> {
                Ok(Param(ParamValue::Str(v.to_string())))
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<Param, E> {
                Ok(Param(ParamValue::Bool(v)))
            }
        }
        d.deserialize_any(V)
    }
}

/// A task parameter: an integer, a duration string (in ns) or a boolean (0/1).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct TaskParam(pub(super) i64);

impl<'de> Deserialize<'de> for TaskParam {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = TaskParam;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an integer, a duration string such as \"10ms\", or a boolean")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<TaskParam, E> {
                Ok(TaskParam(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<TaskParam, E> {
                i64::try_from(v).map(TaskParam).map_err(|_| E::custom("integer too large"))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<TaskParam, E> {
                let ns = dur_str(v)?;
                i64::try_from(ns).map(TaskParam).map_err(|_| E::custom(format!("duration \"{v}\" is too large for a task parameter")))
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<TaskParam, E> {
                Ok(TaskParam(v as i64))
            }
        }
        d.deserialize_any(V)
    }
}

/// `"oneshot"` or `"tick"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Clock(pub(super) ClockMode);

impl<'de> Deserialize<'de> for Clock {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Clock;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("`oneshot` or `tick`")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Clock, E> {
                match v {
                    "oneshot" => Ok(Clock(ClockMode::OneShot)),
                    "tick" => Ok(Clock(ClockMode::Tick)),
                    _ => Err(E::custom(format!("unknown clock `{v}`, expected `oneshot` or `tick`"))),
                }
            }
        }
        d.deserialize_any(V)
    }
}

/// A task's image size in KB: one integer, or a list the copies of a `count` group take
/// in turn.
pub(super) struct SizeV(pub(super) Vec<i64>);

impl<'de> Deserialize<'de> for SizeV {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = SizeV;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an image size in KB (an integer such as 40) or an array of them")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<SizeV, E> {
                Ok(SizeV(vec![v]))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<SizeV, E> {
                Ok(SizeV(vec![v.min(i64::MAX as u64) as i64]))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<SizeV, A::Error> {
                let mut out = Vec::new();
                while let Some(v) = seq.next_element::<i64>()? {
                    out.push(v);
                }
                Ok(SizeV(out))
            }
        }
        d.deserialize_any(V)
    }
}

/// A duration from a raw TOML value (for registered behaviours' keys): the message is
/// the one a typed key would give.
pub(crate) fn dur_of(v: &toml::Value) -> Result<Ns, String> {
    Dur::deserialize(v.clone()).map(|d| d.0).map_err(|e| e.message().to_string())
}

/// A finite number from a raw TOML value (an integer or a float).
pub(crate) fn finite_of(v: &toml::Value) -> Result<f64, String> {
    Finite::deserialize(v.clone()).map(|f| f.0).map_err(|e| e.message().to_string())
}
