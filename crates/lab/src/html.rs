//! Self-contained HTML reports (`vassal sim --report`, `vassal repro --report`; see
//! docs/report.md): one page, inline CSS and SVG (`svg.rs`), no script and nothing loaded
//! from anywhere, so it opens offline in any browser.
//!
//! A run's figures: the CPU timeline (Gantt chart) of the whole run and of its first
//! [`ZOOM`], each task's share of the CPU, dispatch latency distributions, and — when a
//! policy keeps virtual times (BVT) — actual and effective virtual time against real
//! time, as in paper 001 Figures 1–4. The repro page adds, per experiment, every row with
//! the paper's value beside ours and the verdict, grouped by experiment directory.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use vassal_core::{Ns, MS};

use crate::expect::{ExperimentRun, Status};
use crate::fmt::{esc, fmt_ms, num};
use crate::svg::{self, colour, Range, Series};
use vassal_sim::engine::Trace;
use vassal_sim::model::Scenario;
use vassal_sim::report::{Column, Report};

/// The close-up window of a run: 300 ms is 30 mcu at BVT's default 10 ms mcu, the span
/// of paper 001's Figures 1–4.
pub const ZOOM: Ns = 300 * MS;

const CSS: &str = "
body { font-family: system-ui, sans-serif; margin: 24px auto; max-width: 1100px; color: #222; }
h1 { font-size: 1.6em; } h2 { border-bottom: 2px solid #ddd; padding-bottom: 4px; margin-top: 2em; }
h3 { margin-top: 1.6em; }
table { border-collapse: collapse; margin: 8px 0 16px; font-size: 0.9em; }
th, td { border: 1px solid #ddd; padding: 3px 8px; text-align: left; vertical-align: top; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
.pass { background: #e3f4e1; } .differs { background: #fff1cc; } .inconsistent { background: #e6e6fa; } .fail { background: #fbd5d5; font-weight: bold; }
.why { color: #555; font-size: 0.95em; max-width: 420px; }
pre.desc { background: #f7f7f7; padding: 8px; white-space: pre-wrap; font-size: 0.9em; }
figure { margin: 12px 0; } figcaption { color: #555; font-size: 0.9em; max-width: 900px; }
svg { display: block; background: #fff; }
svg text { font-family: system-ui, sans-serif; }
svg .tick { font-size: 11px; fill: #444; } svg .axis { font-size: 12px; fill: #222; }
svg .title { font-size: 13px; font-weight: bold; fill: #222; } svg .legend { font-size: 12px; fill: #222; }
nav a { margin-right: 1em; }
";

pub(crate) fn page(title: &str, body: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>{}</title>\n<style>{CSS}</style>\n</head>\n<body>\n{body}\n</body>\n</html>\n",
        esc(title)
    )
}

/// The figures of one simulated run (see the module documentation).
pub fn run_figures(sc: &Scenario, report: &Report, trace: &Trace) -> String {
    let names: Vec<String> = sc.tasks.iter().map(|t| t.name.clone()).collect();
    let until = sc.until;
    let mut o = String::new();
    let fig = |o: &mut String, svg: String, caption: &str| {
        let _ = writeln!(o, "<figure>{svg}<figcaption>{}</figcaption></figure>", esc(caption));
    };
    if trace.slices.is_empty() {
        o.push_str("<p>(no trace recorded)</p>\n");
    } else {
        fig(
            &mut o,
            svg::gantt("CPU timeline, whole run", sc.machine.cpus, &names, &trace.slices, 0, until),
            "Each bar is a span during which a task held the CPU (its context switch cost included); hover for the task, times and the scheduler that decided it. Gaps are idle time.",
        );
        if until > ZOOM {
            fig(
                &mut o,
                svg::gantt(&format!("CPU timeline, first {}", fmt_ms(ZOOM as f64)), sc.machine.cpus, &names, &trace.slices, 0, ZOOM),
                "The same, close up.",
            );
        }
    }
    let shares: Vec<(String, f64, &'static str)> =
        report.tasks.iter().enumerate().map(|(i, t)| (t.name.clone(), t.share * 100.0, colour(i))).collect();
    fig(
        &mut o,
        svg::bars("Share of the CPU time given to tasks", "%", &shares, &|v| format!("{v:.2}%")),
        "Per task: CPU time over all tasks' CPU time.",
    );
    let lat: Vec<Range> = report
        .tasks
        .iter()
        .enumerate()
        .map(|(i, t)| Range {
            label: t.name.clone(),
            colour: colour(i),
            min: t.latency.min_ns as f64,
            p50: t.latency.p50_ns as f64,
            mean: t.latency.mean_ns as f64,
            p99: t.latency.p99_ns as f64,
            max: t.latency.max_ns as f64,
            count: t.latency.count,
        })
        .collect();
    fig(
        &mut o,
        svg::ranges("Dispatch latency (runnable → running)", &lat),
        "Per task, over every time it became runnable (woken or preempted) until it ran; percentiles to 1%.",
    );
    if report.tasks.iter().any(|t| t.response.count > 0) {
        let resp: Vec<Range> = report
            .tasks
            .iter()
            .enumerate()
            .filter(|(_, t)| t.response.count > 0)
            .map(|(i, t)| Range {
                label: t.name.clone(),
                colour: colour(i),
                min: t.response.min_ns as f64,
                p50: t.response.p50_ns as f64,
                mean: t.response.mean_ns as f64,
                p99: t.response.p99_ns as f64,
                max: t.response.max_ns as f64,
                count: t.response.count,
            })
            .collect();
        fig(&mut o, svg::ranges("Response time per job or burst", &resp), "Release (or burst start) to completion.");
    }
    o.push_str(&virtual_time_figures(sc, trace));
    o
}

/// BVT's A_i and E_i against real time over the first [`ZOOM`] (paper 001 Figures 1–4).
fn virtual_time_figures(sc: &Scenario, trace: &Trace) -> String {
    if trace.vtimes.is_empty() {
        return String::new();
    }
    let end = sc.until.min(ZOOM) as f64 / 1e6;
    let mut per_task: BTreeMap<usize, Vec<(f64, f64, f64)>> = BTreeMap::new();
    for s in &trace.vtimes {
        per_task.entry(s.task).or_default().push((s.at as f64 / 1e6, s.actual / 1e6, s.effective / 1e6));
    }
    let name = |i: usize| sc.tasks.get(i).map_or("?".to_string(), |t| t.name.clone());
    let series = |effective: bool| -> Vec<Series> {
        per_task
            .iter()
            .map(|(&i, pts)| Series {
                name: name(i),
                points: pts.iter().map(|&(t, a, e)| (t, if effective { e } else { a })).collect(),
                step_to: Some(end),
                colour: colour(i),
                dashed: false,
                markers: false,
            })
            .collect()
    };
    let mut o = String::new();
    let _ = writeln!(
        o,
        "<figure>{}<figcaption>Paper 001 Figures 1, 2 and 4: a running thread's A_i rises (by m_i = mcu/w_i per started mcu, charged when it is accounted, so in steps where the paper draws straight lines), a waiting one stays flat, and a thread waking from a sleep jumps up to SVT (§2.1). Values as the policy held them after each simulator event.</figcaption></figure>",
        svg::line_plot(&format!("Actual virtual time A_i, first {}", fmt_ms(end * 1e6)), "real time (ms)", "virtual time (virtual ms)", (0.0, end), &series(false))
    );
    let warped = trace.vtimes.iter().any(|s| s.effective != s.actual);
    if warped {
        let _ = writeln!(
            o,
            "<figure>{}<figcaption>Paper 001 Figures 3 and 4: effective virtual time E_i = A_i − (warp ? W_i : 0) (§2.2); a warped thread sits W_i below its A_i and runs first; when its warp time limit L_i passes it is unwarped and E_i returns to A_i.</figcaption></figure>",
            svg::line_plot(&format!("Effective virtual time E_i, first {}", fmt_ms(end * 1e6)), "real time (ms)", "virtual time (virtual ms)", (0.0, end), &series(true))
        );
    }
    o
}

/// The per-task table, the text report's columns (`Report::task_table`).
fn task_table(report: &Report) -> String {
    let table = report.task_table();
    let class = |c: &Column| if c.numeric { " class=num" } else { "" };
    let mut o = String::from("<table><tr>");
    for c in &table.columns {
        let _ = write!(o, "<th{}>{}</th>", class(c), esc(c.head));
    }
    o.push_str("</tr>\n");
    for row in &table.rows {
        o.push_str("<tr>");
        for (cell, c) in row.iter().zip(&table.columns) {
            let _ = write!(o, "<td{}>{}</td>", class(c), esc(cell));
        }
        o.push_str("</tr>\n");
    }
    o.push_str("</table>\n<p>latency = runnable → running; times in ms</p>\n");
    o
}

/// The page of one simulation run (`vassal sim --report`).
pub fn sim_page(sc: &Scenario, report: &Report, trace: &Trace) -> String {
    let mut b = String::new();
    let _ = writeln!(b, "<h1>vassal sim: {}</h1>", esc(&sc.name));
    let _ = writeln!(
        b,
        "<p>seed {}, {} CPU(s), simulated {}; {} tasks; {} decisions, {} switches, {} migrations.</p>",
        report.seed,
        sc.machine.cpus,
        fmt_ms(report.elapsed_ns as f64),
        report.tasks.len(),
        report.totals.decisions,
        report.totals.switches,
        report.totals.migrations
    );
    b.push_str(
        "<table><tr><th>scheduler (top-down)</th><th>kind</th><th>usage</th><th class=num>decided</th><th class=num>refused</th></tr>\n",
    );
    for s in &report.schedulers {
        let _ = writeln!(
            b,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td class=num>{}</td><td class=num>{}</td></tr>",
            esc(&s.name),
            esc(&s.kind),
            esc(&s.usage),
            s.decided,
            s.refused
        );
    }
    b.push_str("</table>\n");
    b.push_str(&run_figures(sc, report, trace));
    b.push_str("<h2>Tasks</h2>\n");
    b.push_str(&task_table(report));
    if !report.log.is_empty() {
        b.push_str("<h2>Log</h2>\n<pre class=desc>");
        for l in report.log.iter().take(2000) {
            let _ = writeln!(b, "{}", esc(l));
        }
        if report.log.len() > 2000 {
            let _ = writeln!(b, "… {} more lines (see vassal sim's text report)", report.log.len() - 2000);
        }
        b.push_str("</pre>\n");
    }
    page(&format!("vassal sim: {}", sc.name), &b)
}

/// The verdict word `vassal repro` prints and the row's CSS class.
fn verdict(status: Status) -> (&'static str, &'static str) {
    let class = match status {
        Status::Pass => "pass",
        Status::Differs => "differs",
        Status::Inconsistent => "inconsistent",
        Status::Fail => "fail",
    };
    (status.word(), class)
}

fn anchor(s: &str) -> String {
    s.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '-' }).collect()
}

/// The page of `vassal repro --report`: every experiment's rows (the paper's value beside
/// ours, tolerance, verdict, and why), grouped by the experiment's directory under `root`,
/// with the run's figures where it was simulated.
pub fn repro_page(runs: &[ExperimentRun], root: &Path) -> String {
    let rel = |r: &ExperimentRun| r.path.strip_prefix(root).unwrap_or(&r.path).to_string_lossy().replace('\\', "/");
    let mut groups: BTreeMap<String, Vec<&ExperimentRun>> = BTreeMap::new();
    for r in runs {
        let p = rel(r);
        let g = p.split_once('/').map_or(".", |(g, _)| g).to_string();
        groups.entry(g).or_default().push(r);
    }
    let count = |rs: &[&ExperimentRun]| {
        let mut c = (0, 0, 0, 0);
        for r in rs {
            for row in &r.rows {
                match row.status {
                    Status::Pass => c.0 += 1,
                    Status::Differs => c.1 += 1,
                    Status::Inconsistent => c.2 += 1,
                    Status::Fail => c.3 += 1,
                }
            }
        }
        c
    };
    let all: Vec<&ExperimentRun> = runs.iter().collect();
    let (p, d, i, f) = count(&all);
    let mut b = String::new();
    b.push_str("<h1>vassal repro: the papers' tables and figures, reproduced</h1>\n");
    let _ = writeln!(
        b,
        "<p>{} experiments, {} rows: <span class=pass>{p} pass</span>, <span class=differs>{d} differ from the paper (known, explained)</span>, <span class=inconsistent>{i} where the paper contradicts itself</span>, <span class=fail>{f} fail</span>. Each row: the paper's value, ours (from a simulation with the paper's parameters, or a computation), how they are compared, the tolerance and why it is what it is. DIFFERS rows are findings: ours is known to differ, with the explanation. INCONSISTENT rows assert a contradiction in the paper: ours meets what the paper's own numbers imply, not its stated value.</p>",
        runs.len(),
        p + d + i + f
    );
    b.push_str("<table><tr><th>group</th><th class=num>experiments</th><th class=num>pass</th><th class=num>DIFFERS</th><th class=num>INCONSISTENT</th><th class=num>FAIL</th></tr>\n");
    for (g, rs) in &groups {
        let (p, d, i, f) = count(rs);
        let _ = writeln!(
            b,
            "<tr><td><a href=\"#g-{}\">{}</a></td><td class=num>{}</td><td class=num>{p}</td><td class=num>{d}</td><td class=num>{i}</td><td class=num>{f}</td></tr>",
            anchor(g),
            esc(g),
            rs.len()
        );
    }
    b.push_str("</table>\n");
    for (g, rs) in &groups {
        let _ = writeln!(b, "<h2 id=\"g-{}\">{}</h2>", anchor(g), esc(g));
        for r in rs {
            let file = rel(r);
            let title = match &r.run {
                Some(run) => format!("{file} — scenario {}", run.scenario.name),
                None if !r.plots.is_empty() => format!("{file} — sweep"),
                None => format!("{file} — computed"),
            };
            let _ = writeln!(b, "<h3 id=\"e-{}\">{}</h3>", anchor(&file), esc(&title));
            if !r.description.is_empty() {
                let _ = writeln!(b, "<pre class=desc>{}</pre>", esc(&r.description));
            }
            if let Some(c) = &r.control {
                let _ = writeln!(
                    b,
                    "<p><b>Control:</b> {} — {} The <i>control</i> column is each row's value under it (pass or fail by the row's own test).</p>",
                    esc(&c.name),
                    esc(&c.why)
                );
            }
            b.push_str("<table><tr><th>id</th><th>metric</th><th class=num>paper</th><th class=num>ours</th><th class=num>tolerance</th><th>result</th><th class=num>control</th><th>why</th></tr>\n");
            for (e, row) in r.expects.iter().zip(&r.rows) {
                let (word, class) = verdict(row.status);
                let tol = row.cmp.describe(&num(row.tolerance));
                let mut why = esc(&e.why);
                if let Some(k) = &row.known_difference {
                    let _ = write!(why, "<br><b>Differs:</b> {}", esc(k));
                }
                if let Some(i) = &e.inconsistent {
                    let _ =
                        write!(why, "<br><b>The paper contradicts itself:</b> its own numbers give {}: {}", num(i.implies), esc(&i.why));
                }
                let control = match (row.control, row.control_pass) {
                    (Some(v), Some(p)) => format!("{} ({})", num(v), if p { "pass" } else { "fail" }),
                    _ => "–".into(),
                };
                let _ = writeln!(
                    b,
                    "<tr class={class}><td>{}</td><td>{}</td><td class=num>{}</td><td class=num>{}</td><td class=num>{}</td><td>{word}</td><td class=num>{}</td><td class=why>{why}</td></tr>",
                    esc(&row.id),
                    esc(&e.metric),
                    num(row.paper),
                    num(row.ours),
                    esc(&tol),
                    esc(&control)
                );
            }
            b.push_str("</table>\n");
            if !r.plots.is_empty() {
                b.push_str("<details open><summary>curves of this sweep (each point the mean over its seeds)</summary>\n");
                for p in &r.plots {
                    let _ = writeln!(b, "<figure>{p}</figure>");
                }
                b.push_str("</details>\n");
            }
            if let Some(run) = &r.run {
                let _ = writeln!(
                    b,
                    "<details open><summary>figures of this run (seed {}, {} simulated)</summary>",
                    run.report.seed,
                    fmt_ms(run.report.elapsed_ns as f64)
                );
                b.push_str(&run_figures(&run.scenario, &run.report, &run.trace));
                b.push_str("</details>\n");
            }
        }
    }
    page("vassal repro report", &b)
}
