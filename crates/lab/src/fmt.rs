//! Number and text formatting shared by every report of the lab: the plain-text sweep
//! tables, the SVG charts and the HTML pages. The lowest layer of the crate: it imports
//! nothing from it. Output is deterministic (fixed number formatting).

/// A number for tables: up to 5 significant decimals, no exponent for ordinary values.
pub fn num(v: f64) -> String {
    if !v.is_finite() {
        return format!("{v}");
    }
    if v != 0.0 && (v.abs() >= 1e9 || v.abs() < 1e-4) {
        return format!("{v:.4e}");
    }
    let s = format!("{v:.5}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s == "-0" {
        "0".into()
    } else {
        s.to_string()
    }
}

/// Milliseconds, readable ("12.5 ms").
pub fn fmt_ms(ns: f64) -> String {
    let ms = ns / 1e6;
    if ms == 0.0 {
        "0 ms".into()
    } else if ms.abs() >= 100.0 {
        format!("{ms:.0} ms")
    } else if ms.abs() >= 1.0 {
        format!("{ms:.3}").trim_end_matches('0').trim_end_matches('.').to_string() + " ms"
    } else {
        format!("{:.3} us", ms * 1e3)
    }
}

/// Text for XML content and attribute values.
pub fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            _ => o.push(c),
        }
    }
    o
}
