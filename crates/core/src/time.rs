//! Time in vassal is an integer count of nanoseconds (`Ns`). Policies are told the
//! current time by the mechanism (virtual in the simulator, monotonic in the agent);
//! they never read a clock themselves.

/// A point in time or a duration, in nanoseconds.
pub type Ns = u64;

pub const NS: Ns = 1;
pub const US: Ns = 1_000;
pub const MS: Ns = 1_000_000;
pub const SEC: Ns = 1_000_000_000;

/// What was wrong with a duration string.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    #[error("empty duration; expected a number with a unit, e.g. \"10ms\"")]
    Empty,
    #[error("duration \"{0}\" has no unit; expected one of ns, us, ms, s (e.g. \"{0}ms\")")]
    MissingUnit(String),
    #[error("duration \"{0}\" has an unknown unit \"{1}\"; expected one of ns, us, ms, s (and no exponent)")]
    UnknownUnit(String, String),
    #[error("duration \"{0}\" is negative; durations must be zero or more")]
    Negative(String),
    #[error("duration \"{0}\" is not a number with a unit, e.g. \"1.5ms\"")]
    NotANumber(String),
    #[error("duration \"{0}\" is too large (over 584 years)")]
    TooLarge(String),
}

/// Parses "250us", "1.5ms", "10 s", "100ns" into nanoseconds. A unit is required.
/// Fractions are allowed as long as the result is a whole number of nanoseconds.
pub fn parse_duration(text: &str) -> Result<Ns, DurationError> {
    let s = text.trim();
    if s.is_empty() {
        return Err(DurationError::Empty);
    }
    if s.starts_with('-') {
        return Err(DurationError::Negative(s.to_string()));
    }
    let split = s.find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '_')).unwrap_or(s.len());
    let (num, unit) = (s[..split].replace('_', ""), s[split..].trim());
    if num.is_empty() || num.matches('.').count() > 1 || num == "." {
        return Err(DurationError::NotANumber(s.to_string()));
    }
    let scale: u128 = match unit {
        "" => return Err(DurationError::MissingUnit(s.to_string())),
        "ns" => 1,
        "us" | "µs" => 1_000,
        "ms" => 1_000_000,
        "s" => 1_000_000_000,
        _ => return Err(DurationError::UnknownUnit(s.to_string(), unit.to_string())),
    };
    // Exact decimal arithmetic: integer part and fraction scaled separately.
    let (int, frac) = num.split_once('.').unwrap_or((&num, ""));
    let int: u128 = if int.is_empty() { 0 } else { int.parse().map_err(|_| DurationError::TooLarge(s.to_string()))? };
    let mut total = int.checked_mul(scale).ok_or_else(|| DurationError::TooLarge(s.to_string()))?;
    if !frac.is_empty() {
        let digits = frac.len() as u32;
        if digits > 18 {
            return Err(DurationError::NotANumber(s.to_string()));
        }
        let f: u128 = frac.parse().map_err(|_| DurationError::NotANumber(s.to_string()))?;
        let den = 10u128.pow(digits);
        let scaled = f * scale;
        if !scaled.is_multiple_of(den) {
            return Err(DurationError::NotANumber(format!("{s} (finer than 1ns)")));
        }
        total += scaled / den;
    }
    u64::try_from(total).map_err(|_| DurationError::TooLarge(s.to_string()))
}

/// Formats nanoseconds with the largest unit that divides evenly, for messages and reports.
pub fn fmt_duration(ns: Ns) -> String {
    for (unit, scale) in [("s", SEC), ("ms", MS), ("us", US)] {
        if ns != 0 && ns.is_multiple_of(scale) {
            return format!("{}{unit}", ns / scale);
        }
    }
    format!("{ns}ns")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_units_and_fractions() {
        assert_eq!(parse_duration("100ns"), Ok(100));
        assert_eq!(parse_duration("250us"), Ok(250_000));
        assert_eq!(parse_duration("1.5ms"), Ok(1_500_000));
        assert_eq!(parse_duration("2 s"), Ok(2 * SEC));
        assert_eq!(parse_duration("0ms"), Ok(0));
        assert_eq!(parse_duration("1_000us"), Ok(MS));
    }

    #[test]
    fn refuses_bad_durations() {
        assert!(matches!(parse_duration("10"), Err(DurationError::MissingUnit(_))));
        assert!(matches!(parse_duration("-5ms"), Err(DurationError::Negative(_))));
        assert!(matches!(parse_duration("5 parsecs"), Err(DurationError::UnknownUnit(_, u)) if u == "parsecs"));
        let e = parse_duration("1e3ms").unwrap_err().to_string();
        assert_eq!(e, "duration \"1e3ms\" has an unknown unit \"e3ms\"; expected one of ns, us, ms, s (and no exponent)");
        assert!(matches!(parse_duration("ms"), Err(DurationError::NotANumber(_))));
        assert!(matches!(parse_duration("1.2.3ms"), Err(DurationError::NotANumber(_))));
        assert!(matches!(parse_duration("0.5ns"), Err(DurationError::NotANumber(_))));
        assert!(matches!(parse_duration("99999999999999s"), Err(DurationError::TooLarge(_))));
        assert_eq!(parse_duration(""), Err(DurationError::Empty));
    }

    #[test]
    fn formats_round_trip() {
        for ns in [0, 1, 999, US, 1_500 * US, 3 * SEC] {
            assert_eq!(parse_duration(&fmt_duration(ns)), Ok(ns));
        }
    }
}
