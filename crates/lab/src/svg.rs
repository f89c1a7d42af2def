//! Small SVG charts for the HTML reports (`html.rs`): a CPU timeline (Gantt chart), line
//! plots (step or straight), horizontal bars and latency ranges.
//!
//! Written directly rather than with a plotting crate: each chart is a few dozen
//! rectangles, lines and labels, the Gantt chart (the main one) is not a chart type the
//! usual crates have, and every element can carry a `<title>` tooltip — so a page needs
//! no JavaScript and no dependency beyond `std`. Output is deterministic (fixed number
//! formatting, input order).

use std::fmt::Write as _;

use vassal_core::Ns;

use vassal_sim::engine::Slice;

use crate::fmt::{esc, fmt_ms, num};

/// Distinct colours for tasks (Tableau 10), cycled by task index.
const PALETTE: [&str; 10] = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"];

/// The colour of task (or series) number `i`.
pub fn colour(i: usize) -> &'static str {
    PALETTE[i % PALETTE.len()]
}

/// A number for SVG coordinates: two decimals, no trailing zeros noise.
fn n(v: f64) -> String {
    let s = format!("{v:.2}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s == "-0" {
        "0".into()
    } else {
        s.to_string()
    }
}

/// Round tick marks covering [lo, hi]: about `want` of them at 1, 2 or 5 × 10^k.
pub fn ticks(lo: f64, hi: f64, want: usize) -> Vec<f64> {
    if hi.partial_cmp(&lo) != Some(std::cmp::Ordering::Greater) || !lo.is_finite() || !hi.is_finite() {
        return vec![lo];
    }
    let raw = (hi - lo) / want.max(1) as f64;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0].iter().map(|m| m * mag).find(|s| *s >= raw).unwrap_or(10.0 * mag);
    let first = (lo / step).ceil() as i64;
    let last = (hi / step).floor() as i64;
    (first..=last).map(|k| k as f64 * step).collect()
}

/// A tick label: as few decimals as the step needs.
fn tick_label(v: f64, step: f64) -> String {
    let decimals = if step >= 1.0 { 0 } else { (-step.log10()).ceil() as usize };
    format!("{v:.decimals$}")
}

/// The plot area inside a chart of `w` × `h` pixels.
struct Frame {
    left: f64,
    top: f64,
    width: f64,
    height: f64,
    x0: f64,
    x1: f64,
    y0: f64,
    y1: f64,
}

impl Frame {
    fn x(&self, v: f64) -> f64 {
        self.left + (v - self.x0) / (self.x1 - self.x0) * self.width
    }
    fn y(&self, v: f64) -> f64 {
        self.top + self.height - (v - self.y0) / (self.y1 - self.y0) * self.height
    }
    /// Axes, grid lines, tick labels and axis titles.
    fn axes(&self, o: &mut String, x_label: &str, y_label: &str, x_ticks: Option<&[(f64, String)]>) {
        let (l, t, w, h) = (self.left, self.top, self.width, self.height);
        let xt: Vec<(f64, String)> = match x_ticks {
            Some(given) => given.to_vec(),
            None => {
                let xt = ticks(self.x0, self.x1, 8);
                let xstep = if xt.len() > 1 { xt[1] - xt[0] } else { 1.0 };
                xt.iter().map(|v| (*v, tick_label(*v, xstep))).collect()
            }
        };
        for (v, text) in &xt {
            let x = self.x(*v);
            let _ = write!(o, r##"<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="#e3e3e3"/>"##, n(x), n(t), n(x), n(t + h));
            let _ = write!(o, r#"<text x="{}" y="{}" text-anchor="middle" class="tick">{}</text>"#, n(x), n(t + h + 14.0), esc(text));
        }
        let yt = ticks(self.y0, self.y1, 6);
        let ystep = if yt.len() > 1 { yt[1] - yt[0] } else { 1.0 };
        for v in &yt {
            let y = self.y(*v);
            let _ = write!(o, r##"<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="#e3e3e3"/>"##, n(l), n(y), n(l + w), n(y));
            let _ =
                write!(o, r#"<text x="{}" y="{}" text-anchor="end" class="tick">{}</text>"#, n(l - 4.0), n(y + 4.0), tick_label(*v, ystep));
        }
        let _ = write!(o, r##"<rect x="{}" y="{}" width="{}" height="{}" fill="none" stroke="#888"/>"##, n(l), n(t), n(w), n(h));
        let _ =
            write!(o, r#"<text x="{}" y="{}" text-anchor="middle" class="axis">{}</text>"#, n(l + w / 2.0), n(t + h + 32.0), esc(x_label));
        let _ = write!(
            o,
            r#"<text transform="translate({},{}) rotate(-90)" text-anchor="middle" class="axis">{}</text>"#,
            n(14.0),
            n(t + h / 2.0),
            esc(y_label)
        );
    }
}

fn open_svg(o: &mut String, w: f64, h: f64, title: &str) {
    let _ =
        write!(o, r#"<svg width="{}" height="{}" viewBox="0 0 {} {}" role="img"><title>{}</title>"#, n(w), n(h), n(w), n(h), esc(title));
}

/// A chart as a standalone .svg file: the SVG namespace (an identifier, not something
/// fetched) and the text styles the HTML pages give through their CSS.
pub fn standalone(svg: &str) -> String {
    let style = "<style>text { font-family: system-ui, sans-serif; } .tick { font-size: 11px; fill: #444; } .axis { font-size: 12px; fill: #222; } .title { font-size: 13px; font-weight: bold; fill: #222; } .legend { font-size: 12px; fill: #222; }</style>";
    let body = svg.strip_prefix("<svg ").unwrap_or(svg);
    match body.find('>') {
        Some(end) => format!("<svg xmlns=\"http://www.w3.org/2000/svg\" {}>{style}{}\n", &body[..end], &body[end + 1..]),
        None => svg.to_string(),
    }
}

/// One line of a [`line_plot`].
pub struct Series {
    pub name: String,
    /// (x, y) in the plot's units, x ascending.
    pub points: Vec<(f64, f64)>,
    /// Draw as a step function (each value holds until the next point) up to `step_to`.
    pub step_to: Option<f64>,
    pub colour: &'static str,
    pub dashed: bool,
    /// Mark each point with a dot (for few points, e.g. a sweep).
    pub markers: bool,
}

/// A line plot with axes, grid and legend. Points outside [x0, x1] are clipped.
pub fn line_plot(title: &str, x_label: &str, y_label: &str, x_range: (f64, f64), series: &[Series]) -> String {
    line_plot_ticks(title, x_label, y_label, x_range, series, None)
}

/// [`line_plot`] with the x axis labelled at `x_ticks` (value, label) instead of round numbers.
pub fn line_plot_ticks(
    title: &str,
    x_label: &str,
    y_label: &str,
    x_range: (f64, f64),
    series: &[Series],
    x_ticks: Option<&[(f64, String)]>,
) -> String {
    let (w, h) = (760.0, 330.0);
    let (x0, x1) = x_range;
    // The y range covers the visible part of every series.
    let mut y0 = f64::INFINITY;
    let mut y1 = f64::NEG_INFINITY;
    for s in series {
        for &(x, y) in &visible(s, x0, x1) {
            let _ = x;
            y0 = y0.min(y);
            y1 = y1.max(y);
        }
    }
    if !y0.is_finite() {
        (y0, y1) = (0.0, 1.0);
    }
    if y1 - y0 < 1e-9 {
        (y0, y1) = (y0 - 1.0, y1 + 1.0);
    }
    let pad = (y1 - y0) * 0.04;
    let f = Frame {
        left: 64.0,
        top: 26.0,
        width: w - 64.0 - 170.0,
        height: h - 26.0 - 44.0,
        x0,
        x1: x1.max(x0 + 1e-9),
        y0: y0 - pad,
        y1: y1 + pad,
    };
    let mut o = String::new();
    open_svg(&mut o, w, h, title);
    let _ = write!(o, r#"<text x="{}" y="16" class="title">{}</text>"#, n(f.left), esc(title));
    f.axes(&mut o, x_label, y_label, x_ticks);
    let _ = write!(
        o,
        r#"<clipPath id="c{}"><rect x="{}" y="{}" width="{}" height="{}"/></clipPath>"#,
        clip_id(title),
        n(f.left),
        n(f.top),
        n(f.width),
        n(f.height)
    );
    for s in series {
        let pts = visible(s, x0, x1);
        if pts.is_empty() {
            continue;
        }
        let mut d = String::new();
        for (k, &(x, y)) in pts.iter().enumerate() {
            let _ = write!(d, "{}{},{}", if k == 0 { "M" } else { "L" }, n(f.x(x)), n(f.y(y)));
        }
        let dash = if s.dashed { r#" stroke-dasharray="6 3""# } else { "" };
        let _ = write!(
            o,
            r#"<path d="{d}" fill="none" stroke="{}" stroke-width="1.6"{dash} clip-path="url(#c{})"><title>{}</title></path>"#,
            s.colour,
            clip_id(title),
            esc(&s.name)
        );
        if s.markers {
            for &(x, y) in &pts {
                let _ = write!(
                    o,
                    r#"<circle cx="{}" cy="{}" r="3" fill="{}"><title>{}: {}</title></circle>"#,
                    n(f.x(x)),
                    n(f.y(y)),
                    s.colour,
                    esc(&s.name),
                    num(y)
                );
            }
        }
    }
    for (k, s) in series.iter().enumerate() {
        let y = f.top + 8.0 + k as f64 * 18.0;
        let x = f.left + f.width + 12.0;
        let dash = if s.dashed { r#" stroke-dasharray="6 3""# } else { "" };
        let _ = write!(
            o,
            r#"<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="{}" stroke-width="2"{dash}/>"#,
            n(x),
            n(y),
            n(x + 22.0),
            n(y),
            s.colour
        );
        let _ = write!(o, r#"<text x="{}" y="{}" class="legend">{}</text>"#, n(x + 28.0), n(y + 4.0), esc(&s.name));
    }
    o.push_str("</svg>");
    o
}

/// An id for a clip path, unique per title within a page.
fn clip_id(title: &str) -> String {
    // FNV-1a: a stable, short id from the title.
    let mut h: u64 = 0xcbf29ce484222325;
    for b in title.bytes() {
        h = (h ^ b as u64).wrapping_mul(0x100000001b3);
    }
    format!("{h:016x}")
}

/// The points of `s` to draw over [x0, x1]: steps expanded into corners, clipped to the
/// range (keeping the value that holds at x0), and thinned to about two points per pixel
/// column so that long runs stay small.
fn visible(s: &Series, x0: f64, x1: f64) -> Vec<(f64, f64)> {
    let mut out: Vec<(f64, f64)> = Vec::new();
    match s.step_to {
        None => out.extend(s.points.iter().copied().filter(|(x, _)| *x >= x0 && *x <= x1)),
        Some(end) => {
            let end = end.min(x1);
            let mut prev: Option<f64> = None;
            for &(x, y) in &s.points {
                if x < x0 {
                    prev = Some(y);
                    continue;
                }
                if x > end {
                    break;
                }
                if let Some(p) = prev {
                    if out.is_empty() {
                        out.push((x0, p));
                    }
                    out.push((x, p));
                }
                out.push((x, y));
                prev = Some(y);
            }
            if let Some(p) = prev {
                if out.is_empty() {
                    out.push((x0, p));
                }
                if end > out.last().map_or(x0, |l| l.0) {
                    out.push((end, p));
                }
            }
        }
    }
    thin(out, x0, x1)
}

/// Keeps, per 1/1000 of the x range, the first, lowest, highest and last point: the
/// drawn shape is the same at the plot's resolution.
fn thin(pts: Vec<(f64, f64)>, x0: f64, x1: f64) -> Vec<(f64, f64)> {
    const COLUMNS: f64 = 1000.0;
    if pts.len() <= 4 * COLUMNS as usize {
        return pts;
    }
    let width = (x1 - x0).max(1e-12);
    let col = |x: f64| ((x - x0) / width * COLUMNS).floor() as i64;
    let mut out = Vec::new();
    let mut k = 0;
    while k < pts.len() {
        let c = col(pts[k].0);
        let mut j = k;
        let (mut lo, mut hi) = (k, k);
        while j < pts.len() && col(pts[j].0) == c {
            if pts[j].1 < pts[lo].1 {
                lo = j;
            }
            if pts[j].1 > pts[hi].1 {
                hi = j;
            }
            j += 1;
        }
        let mut keep = vec![k, lo, hi, j - 1];
        keep.sort_unstable();
        keep.dedup();
        out.extend(keep.into_iter().map(|i| pts[i]));
        k = j;
    }
    out
}

/// A CPU timeline over [from, to]: one row per CPU, a bar per slice coloured by task
/// (with a tooltip naming the task, its times and the deciding scheduler), gaps idle.
/// When the window holds more slices than can be drawn one by one, each of 1000 columns
/// shows the task that held the CPU longest within it (idle if idle time dominates),
/// and the caption says so.
pub fn gantt(title: &str, cpus: u16, task_names: &[String], slices: &[Slice], from: Ns, to: Ns) -> String {
    const EXACT_MAX: usize = 2500;
    const COLUMNS: usize = 1000;
    let to = to.max(from + 1);
    let row_h = 22.0;
    let left = 64.0;
    let plot_w = 880.0;
    let used: Vec<usize> = {
        let mut u: Vec<usize> = slices.iter().filter(|s| s.end > from && s.start < to).map(|s| s.task).collect();
        u.sort_unstable();
        u.dedup();
        u
    };
    let legend_rows = used.len().div_ceil(5);
    let h = 30.0 + cpus as f64 * (row_h + 6.0) + 40.0 + legend_rows as f64 * 18.0;
    let w = left + plot_w + 20.0;
    let f = Frame {
        left,
        top: 26.0,
        width: plot_w,
        height: cpus as f64 * (row_h + 6.0),
        x0: from as f64 / 1e6,
        x1: to as f64 / 1e6,
        y0: 0.0,
        y1: 1.0,
    };
    let in_window: Vec<&Slice> = slices.iter().filter(|s| s.end > from && s.start < to).collect();
    let binned = in_window.len() > EXACT_MAX;
    let mut o = String::new();
    open_svg(&mut o, w, h, title);
    let caption = if binned {
        format!("{title} ({} slices; each pixel column shows the task that held the CPU longest in it)", in_window.len())
    } else {
        format!("{title} ({} slices)", in_window.len())
    };
    let _ = write!(o, r#"<text x="{}" y="16" class="title">{}</text>"#, n(left), esc(&caption));
    // time axis
    let xt = ticks(f.x0, f.x1, 10);
    let xstep = if xt.len() > 1 { xt[1] - xt[0] } else { 1.0 };
    for v in &xt {
        let x = f.x(*v);
        let _ = write!(o, r##"<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="#e3e3e3"/>"##, n(x), n(f.top), n(x), n(f.top + f.height));
        let _ = write!(
            o,
            r#"<text x="{}" y="{}" text-anchor="middle" class="tick">{}</text>"#,
            n(x),
            n(f.top + f.height + 14.0),
            tick_label(*v, xstep)
        );
    }
    let _ = write!(
        o,
        r#"<text x="{}" y="{}" text-anchor="middle" class="axis">time (ms)</text>"#,
        n(left + plot_w / 2.0),
        n(f.top + f.height + 30.0)
    );
    let scale = plot_w / (to - from) as f64;
    for c in 0..cpus {
        let y = f.top + c as f64 * (row_h + 6.0) + 3.0;
        let _ = write!(o, r#"<text x="{}" y="{}" text-anchor="end" class="tick">cpu{c}</text>"#, n(left - 6.0), n(y + row_h * 0.7));
        let _ = write!(o, r##"<rect x="{}" y="{}" width="{}" height="{}" fill="#f6f6f6"/>"##, n(left), n(y), n(plot_w), n(row_h));
        let mine = in_window.iter().filter(|s| s.cpu == c);
        if !binned {
            for s in mine {
                let (a, b) = (s.start.max(from), s.end.min(to));
                let x = left + (a - from) as f64 * scale;
                let wd = ((b - a) as f64 * scale).max(0.4);
                let name = task_names.get(s.task).map_or("?", |s| s.as_str());
                let _ = write!(
                    o,
                    r#"<rect x="{}" y="{}" width="{}" height="{}" fill="{}"><title>{} on cpu{c}: {} – {} ({}), by {}</title></rect>"#,
                    n(x),
                    n(y),
                    n(wd),
                    n(row_h),
                    colour(s.task),
                    esc(name),
                    fmt_ms(s.start as f64),
                    fmt_ms(s.end as f64),
                    fmt_ms((s.end - s.start) as f64),
                    esc(&s.by)
                );
            }
        } else {
            // Per column: time per task; the dominant one (or idle) wins.
            let span = (to - from) as f64 / COLUMNS as f64;
            let mut cols: Vec<std::collections::BTreeMap<usize, f64>> = vec![Default::default(); COLUMNS];
            for s in mine {
                let (a, b) = ((s.start.max(from) - from) as f64, (s.end.min(to) - from) as f64);
                let (ca, cb) = ((a / span) as usize, ((b / span) as usize).min(COLUMNS - 1));
                for (k, col) in cols.iter_mut().enumerate().take(cb + 1).skip(ca) {
                    let lo = a.max(k as f64 * span);
                    let hi = b.min((k + 1) as f64 * span);
                    if hi > lo {
                        *col.entry(s.task).or_default() += hi - lo;
                    }
                }
            }
            let winner: Vec<Option<usize>> = cols
                .iter()
                .map(|m| {
                    let busy: f64 = m.values().sum();
                    let best = m.iter().fold(None, |acc: Option<(usize, f64)>, (&t, &v)| match acc {
                        Some((_, bv)) if bv >= v => acc,
                        _ => Some((t, v)),
                    });
                    best.filter(|&(_, v)| v >= span - busy).map(|(t, _)| t)
                })
                .collect();
            let mut k = 0;
            while k < COLUMNS {
                let t = winner[k];
                let mut j = k;
                while j < COLUMNS && winner[j] == t {
                    j += 1;
                }
                if let Some(t) = t {
                    let name = task_names.get(t).map_or("?", |s| s.as_str());
                    let _ = write!(
                        o,
                        r#"<rect x="{}" y="{}" width="{}" height="{}" fill="{}"><title>{} (mostly) on cpu{c}: {} – {}</title></rect>"#,
                        n(left + k as f64 * plot_w / COLUMNS as f64),
                        n(y),
                        n((j - k) as f64 * plot_w / COLUMNS as f64),
                        n(row_h),
                        colour(t),
                        esc(name),
                        fmt_ms(from as f64 + k as f64 * span),
                        fmt_ms(from as f64 + j as f64 * span)
                    );
                }
                k = j;
            }
        }
    }
    // legend
    let ly = f.top + f.height + 44.0;
    for (k, &t) in used.iter().enumerate() {
        let x = left + (k % 5) as f64 * 176.0;
        let y = ly + (k / 5) as f64 * 18.0;
        let name = task_names.get(t).map_or("?", |s| s.as_str());
        let _ = write!(o, r#"<rect x="{}" y="{}" width="12" height="12" fill="{}"/>"#, n(x), n(y - 10.0), colour(t));
        let _ = write!(o, r#"<text x="{}" y="{}" class="legend">{}</text>"#, n(x + 16.0), n(y), esc(name));
    }
    o.push_str("</svg>");
    o
}

/// Horizontal bars, one per (label, value, colour), values in [0, max]; `fmt` labels a value.
pub fn bars(title: &str, x_label: &str, rows: &[(String, f64, &'static str)], fmt: &dyn Fn(f64) -> String) -> String {
    let row_h = 20.0;
    let left = 170.0;
    let plot_w = 520.0;
    let h = 30.0 + rows.len() as f64 * row_h + 44.0;
    let w = left + plot_w + 90.0;
    let max = rows.iter().map(|r| r.1).fold(0.0, f64::max).max(1e-12);
    let f = Frame { left, top: 26.0, width: plot_w, height: rows.len() as f64 * row_h, x0: 0.0, x1: max, y0: 0.0, y1: 1.0 };
    let mut o = String::new();
    open_svg(&mut o, w, h, title);
    let _ = write!(o, r#"<text x="{}" y="16" class="title">{}</text>"#, n(left), esc(title));
    let xt = ticks(0.0, max, 6);
    let xstep = if xt.len() > 1 { xt[1] - xt[0] } else { 1.0 };
    for v in &xt {
        let x = f.x(*v);
        let _ = write!(o, r##"<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="#e3e3e3"/>"##, n(x), n(f.top), n(x), n(f.top + f.height));
        let _ = write!(
            o,
            r#"<text x="{}" y="{}" text-anchor="middle" class="tick">{}</text>"#,
            n(x),
            n(f.top + f.height + 14.0),
            tick_label(*v, xstep)
        );
    }
    let _ = write!(
        o,
        r#"<text x="{}" y="{}" text-anchor="middle" class="axis">{}</text>"#,
        n(left + plot_w / 2.0),
        n(f.top + f.height + 32.0),
        esc(x_label)
    );
    for (k, (label, v, c)) in rows.iter().enumerate() {
        let y = f.top + k as f64 * row_h;
        let _ = write!(o, r#"<text x="{}" y="{}" text-anchor="end" class="tick">{}</text>"#, n(left - 6.0), n(y + row_h * 0.7), esc(label));
        let _ = write!(
            o,
            r#"<rect x="{}" y="{}" width="{}" height="{}" fill="{c}"><title>{}: {}</title></rect>"#,
            n(left),
            n(y + 3.0),
            n((f.x(*v) - left).max(0.0)),
            n(row_h - 6.0),
            esc(label),
            fmt(*v)
        );
        let _ = write!(o, r#"<text x="{}" y="{}" class="tick">{}</text>"#, n(f.x(*v) + 4.0), n(y + row_h * 0.7), fmt(*v));
    }
    o.push_str("</svg>");
    o
}

/// One row of a [`ranges`] chart (ns).
pub struct Range {
    pub label: String,
    pub colour: &'static str,
    pub min: f64,
    pub p50: f64,
    pub mean: f64,
    pub p99: f64,
    pub max: f64,
    pub count: u64,
}

/// Distributions as ranges: a thin line from min to max, a box from p50 to p99 and a
/// tick at the mean, one row each.
pub fn ranges(title: &str, rows: &[Range]) -> String {
    let row_h = 22.0;
    let left = 170.0;
    let plot_w = 560.0;
    let h = 30.0 + rows.len().max(1) as f64 * row_h + 44.0;
    let w = left + plot_w + 40.0;
    let max = rows.iter().map(|r| r.max).fold(0.0, f64::max).max(1.0) / 1e6;
    let f = Frame { left, top: 26.0, width: plot_w, height: rows.len().max(1) as f64 * row_h, x0: 0.0, x1: max, y0: 0.0, y1: 1.0 };
    let mut o = String::new();
    open_svg(&mut o, w, h, title);
    let _ = write!(o, r#"<text x="{}" y="16" class="title">{}</text>"#, n(left), esc(title));
    let xt = ticks(0.0, max, 7);
    let xstep = if xt.len() > 1 { xt[1] - xt[0] } else { 1.0 };
    for v in &xt {
        let x = f.x(*v);
        let _ = write!(o, r##"<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="#e3e3e3"/>"##, n(x), n(f.top), n(x), n(f.top + f.height));
        let _ = write!(
            o,
            r#"<text x="{}" y="{}" text-anchor="middle" class="tick">{}</text>"#,
            n(x),
            n(f.top + f.height + 14.0),
            tick_label(*v, xstep)
        );
    }
    let _ = write!(
        o,
        r#"<text x="{}" y="{}" text-anchor="middle" class="axis">ms — line: min to max; box: median to 99th percentile; tick: mean</text>"#,
        n(left + plot_w / 2.0),
        n(f.top + f.height + 32.0)
    );
    for (k, r) in rows.iter().enumerate() {
        let y = f.top + k as f64 * row_h + row_h / 2.0;
        let _ = write!(o, r#"<text x="{}" y="{}" text-anchor="end" class="tick">{}</text>"#, n(left - 6.0), n(y + 4.0), esc(&r.label));
        if r.count == 0 {
            let _ = write!(o, r#"<text x="{}" y="{}" class="tick">no samples</text>"#, n(left + 4.0), n(y + 4.0));
            continue;
        }
        let x = |ns: f64| f.x(ns / 1e6);
        let tip = format!(
            "{}: {} samples; min {}, median {}, mean {}, p99 {}, max {}",
            r.label,
            r.count,
            fmt_ms(r.min),
            fmt_ms(r.p50),
            fmt_ms(r.mean),
            fmt_ms(r.p99),
            fmt_ms(r.max)
        );
        let _ = write!(o, r#"<g><title>{}</title>"#, esc(&tip));
        let _ = write!(
            o,
            r#"<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="{}" stroke-width="1.5"/>"#,
            n(x(r.min)),
            n(y),
            n(x(r.max)),
            n(y),
            r.colour
        );
        let _ = write!(
            o,
            r#"<rect x="{}" y="{}" width="{}" height="{}" fill="{}" fill-opacity="0.75"/>"#,
            n(x(r.p50)),
            n(y - 6.0),
            n((x(r.p99) - x(r.p50)).max(1.5)),
            n(12.0),
            r.colour
        );
        let _ = write!(
            o,
            r##"<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="#222" stroke-width="2"/>"##,
            n(x(r.mean)),
            n(y - 8.0),
            n(x(r.mean)),
            n(y + 8.0)
        );
        o.push_str("</g>");
    }
    o.push_str("</svg>");
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_round_and_cover_the_range() {
        assert_eq!(ticks(0.0, 10.0, 5), vec![0.0, 2.0, 4.0, 6.0, 8.0, 10.0]);
        assert_eq!(ticks(0.0, 1.0, 4), vec![0.0, 0.5, 1.0]);
        let t = ticks(3.0, 997.0, 8);
        assert_eq!(t, vec![200.0, 400.0, 600.0, 800.0]);
    }

    #[test]
    fn escapes_markup() {
        assert_eq!(esc(r#"<a & "b">"#), "&lt;a &amp; &quot;b&quot;&gt;");
    }

    #[test]
    fn steps_hold_each_value_until_the_next_point() {
        let s = Series {
            name: "a".into(),
            points: vec![(1.0, 5.0), (3.0, 7.0)],
            step_to: Some(4.0),
            colour: colour(0),
            dashed: false,
            markers: false,
        };
        assert_eq!(visible(&s, 0.0, 10.0), vec![(1.0, 5.0), (3.0, 5.0), (3.0, 7.0), (4.0, 7.0)]);
        // clipped at x0: the value holding at x0 starts the line
        assert_eq!(visible(&s, 2.0, 10.0), vec![(2.0, 5.0), (3.0, 5.0), (3.0, 7.0), (4.0, 7.0)]);
    }
}
