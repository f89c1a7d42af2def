//! A twin run as a side-by-side table (per thread and metric: sim, real, sim − real), as
//! JSON, and as an HTML page with both CPU timelines one above the other.

use std::fmt::Write as _;

use serde_json::json;
use vassal_core::{Ns, MS};

use super::log::Summary;
use super::Twin;
use crate::fmt::esc;
use crate::svg;

/// How a metric is shown.
#[derive(Clone, Copy, PartialEq)]
enum Unit {
    /// A fraction shown in percent; the difference in points.
    Share,
    Us,
    Count,
}

/// The metrics compared, in table order: (label, JSON key, unit, value).
fn metrics(s: &Summary) -> Vec<(&'static str, &'static str, Unit, Option<f64>)> {
    vec![
        ("cpu share", "cpu_share", Unit::Share, Some(s.cpu_share).filter(|v| v.is_finite())),
        ("wu_lat p50", "wu_lat_p50_us", Unit::Us, s.wu_lat_p50_us),
        ("wu_lat p99", "wu_lat_p99_us", Unit::Us, s.wu_lat_p99_us),
        ("slack p50", "slack_p50_us", Unit::Us, s.slack_p50_us),
        ("slack p1", "slack_p1_us", Unit::Us, s.slack_p1_us),
        ("missed", "missed", Unit::Count, (s.timed > 0).then_some(s.missed as f64)),
        ("run p50", "run_p50_us", Unit::Us, s.run_p50_us),
        ("run p99", "run_p99_us", Unit::Us, s.run_p99_us),
        ("period p50", "period_p50_us", Unit::Us, s.period_p50_us),
        ("period p99", "period_p99_us", Unit::Us, s.period_p99_us),
        ("iterations", "iterations", Unit::Count, Some(s.iterations as f64)),
    ]
}

fn show(u: Unit, v: Option<f64>, of: usize) -> String {
    match (u, v) {
        (_, None) => "-".into(),
        (Unit::Share, Some(v)) => format!("{:.1}%", v * 100.0),
        (Unit::Us, Some(v)) => format!("{v:.0} us"),
        (Unit::Count, Some(v)) if of > 0 => format!("{v:.0}/{of}"),
        (Unit::Count, Some(v)) => format!("{v:.0}"),
    }
}

fn diff(u: Unit, a: Option<f64>, b: Option<f64>) -> (Option<f64>, String) {
    match (a, b) {
        (Some(a), Some(b)) => {
            let d = a - b;
            let s = match u {
                Unit::Share => format!("{:+.1} pt", d * 100.0),
                Unit::Us => format!("{d:+.0} us"),
                Unit::Count => format!("{d:+.0}"),
            };
            (Some(d), s)
        }
        _ => (None, "-".into()),
    }
}

fn us(ns: u64) -> String {
    if ns >= 10_000 {
        format!("{:.0} us", ns as f64 / 1e3)
    } else {
        format!("{:.1} us", ns as f64 / 1e3)
    }
}

/// The header lines: the workload, the simulated machine, the real side.
fn header(t: &Twin) -> Vec<String> {
    let m = &t.machine;
    let scheds: Vec<String> = t.sim.sc.schedulers.iter().map(|s| format!("{} ({})", s.name, s.policy.kind)).collect();
    let mut h = vec![
        format!("vassal twin: {} ({} threads, {:.3} s)", t.workload.name, t.workload.threads.len(), t.workload.duration as f64 / 1e9),
        format!(
            "  sim:  {}{} on {} CPUs, HZ {}, switch {}, timer wake-up {}{}; machine model: {}",
            if scheds.is_empty() { String::new() } else { format!("{} over ", scheds.join(", ")) },
            t.sim.sc.default_policy.kind,
            t.sim.sc.machine.cpus,
            t.sim.sc.machine.hz,
            us(t.sim.sc.machine.switch_cost),
            us(t.sim.sc.machine.wake_latency),
            if t.sim.run_scale != 1.0 { format!(", run events x{:.4} (rt-app's loop)", t.sim.run_scale) } else { String::new() },
            m.source
        ),
    ];
    match &t.real {
        Some(r) => {
            h.push(format!("  real: rt-app under the {}", r.mode));
            if let Some(o) = r.other_cpus {
                let agent = r.agent_cpus.map_or(String::new(), |a| format!("the agent {:.1}% of a CPU, ", a * 100.0));
                h.push(format!("  real: besides rt-app, {agent}other processes {o:.2} CPUs (kernel trace)"));
            }
            for n in &r.notes {
                h.push(format!("  note: {n}"));
            }
        }
        None => h.push("  real: not run (--sim-only)".into()),
    }
    h
}

/// The side-by-side table.
pub fn table(t: &Twin) -> String {
    let mut o = String::new();
    for l in header(t) {
        let _ = writeln!(o, "{l}");
    }
    let real = t.real.as_ref();
    let _ = writeln!(
        o,
        "{:<14} {:<22} {:<11} {:>11} {:>11} {:>11}",
        "thread",
        "policy",
        "metric",
        "sim",
        if real.is_some() { "real" } else { "" },
        if real.is_some() { "sim-real" } else { "" }
    );
    for (k, th) in t.workload.threads.iter().enumerate() {
        let s = &t.sim.summaries[k];
        let r = real.map(|r| real_summary(t, r, k));
        for (j, (label, _, u, v)) in metrics(s).into_iter().enumerate() {
            let (rv, rof) = match &r {
                Some(r) => (metrics(r)[j].3, if label == "missed" { r.timed } else { 0 }),
                None => (None, 0),
            };
            let of = if label == "missed" { s.timed } else { 0 };
            if v.is_none() && rv.is_none() {
                continue;
            }
            let (name, pol) = if j == 0 { (th.name.as_str(), th.policy.as_str()) } else { ("", "") };
            let _ = writeln!(
                o,
                "{:<14} {:<22} {:<11} {:>11} {:>11} {:>11}",
                name,
                pol,
                label,
                show(u, v, of),
                if real.is_some() { show(u, rv, rof) } else { String::new() },
                if real.is_some() { diff(u, v, rv).1 } else { String::new() }
            );
        }
    }
    o
}

/// The real side's summary of thread `k`.
pub fn real_summary(t: &Twin, r: &super::live::Live, k: usize) -> Summary {
    super::log::summarize(&r.rows[k], t.workload.duration, r.cpu_share[k])
}

/// The run as JSON.
pub fn to_json(t: &Twin) -> serde_json::Value {
    let threads: Vec<serde_json::Value> = t
        .workload
        .threads
        .iter()
        .enumerate()
        .map(|(k, th)| {
            let s = &t.sim.summaries[k];
            let r = t.real.as_ref().map(|r| real_summary(t, r, k));
            let d: serde_json::Map<String, serde_json::Value> = match &r {
                Some(r) => metrics(s)
                    .into_iter()
                    .zip(metrics(r))
                    .filter_map(|((_, key, u, a), (_, _, _, b))| diff(u, a, b).0.map(|d| (key.to_string(), json!(d))))
                    .collect(),
                None => Default::default(),
            };
            json!({
                "name": th.name, "key": th.key, "index": th.index, "policy": th.policy,
                "scheduler": th.scheduler, "params": th.params,
                "sim": s, "real": r, "sim_minus_real": d,
            })
        })
        .collect();
    json!({
        "workload": t.workload.name,
        "duration_ns": t.workload.duration,
        "machine": t.machine,
        "sim": {
            "default": t.sim.sc.default_policy.kind,
            "schedulers": t.sim.sc.schedulers.iter().map(|s| json!({"name": s.name, "kind": s.policy.kind})).collect::<Vec<_>>(),
            "switch_cost_ns": t.sim.sc.machine.switch_cost,
            "wake_latency_ns": t.sim.sc.machine.wake_latency,
            "run_scale": t.sim.run_scale,
            "stalls": t.sim.sc.machine.unscheduled.is_some(),
        },
        "real": t.real.as_ref().map(|r| json!({
            "mode": r.mode, "notes": r.notes, "rtapp_pid": r.pid, "agent_pid": r.agent_pid,
            "agent_cpus": r.agent_cpus, "other_cpus": r.other_cpus,
        })),
        "threads": threads,
    })
}

/// The close-up window of the timelines.
const ZOOM: Ns = 100 * MS;

/// The HTML page: the table, then the simulated and the real CPU timelines one above the
/// other (whole run, then its first 100 ms).
pub fn html(t: &Twin) -> String {
    let mut b = String::new();
    let _ = writeln!(b, "<h1>vassal twin: {}</h1>", esc(&t.workload.name));
    for l in header(t).iter().skip(1) {
        let _ = writeln!(b, "<p>{}</p>", esc(l.trim()));
    }
    b.push_str("<table><tr><th>thread</th><th>policy</th><th>metric</th><th class=num>sim</th><th class=num>real</th><th class=num>sim − real</th></tr>\n");
    for (k, th) in t.workload.threads.iter().enumerate() {
        let s = &t.sim.summaries[k];
        let r = t.real.as_ref().map(|r| real_summary(t, r, k));
        for (j, (label, _, u, v)) in metrics(s).into_iter().enumerate() {
            let (rv, rof) = match &r {
                Some(r) => (metrics(r)[j].3, if label == "missed" { r.timed } else { 0 }),
                None => (None, 0),
            };
            let of = if label == "missed" { s.timed } else { 0 };
            if v.is_none() && rv.is_none() {
                continue;
            }
            let _ = writeln!(
                b,
                "<tr><td>{}</td><td>{}</td><td>{label}</td><td class=num>{}</td><td class=num>{}</td><td class=num>{}</td></tr>",
                if j == 0 { esc(&th.name) } else { String::new() },
                if j == 0 { esc(&th.policy) } else { String::new() },
                show(u, v, of),
                show(u, rv, rof),
                diff(u, v, rv).1
            );
        }
    }
    b.push_str("</table>\n");
    let names: Vec<String> = t.workload.threads.iter().map(|x| x.name.clone()).collect();
    let until = t.workload.duration;
    let zoom = ZOOM.min(until);
    let fig = |b: &mut String, svg: String, caption: &str| {
        let _ = writeln!(b, "<figure>{svg}<figcaption>{}</figcaption></figure>", esc(caption));
    };
    b.push_str("<h2>CPU timelines: simulated, then real</h2>\n");
    for (from, to) in [(0, until), (0, zoom)] {
        let span = format!("{:.0}–{:.0} ms", from as f64 / 1e6, to as f64 / 1e6);
        fig(
            &mut b,
            svg::gantt(&format!("simulated, {span}"), t.sim.sc.machine.cpus, &names, &t.sim.trace.slices, from, to),
            "the simulator's slices (switch cost included at each start)",
        );
        match &t.real {
            Some(r) if !r.slices.is_empty() => fig(
                &mut b,
                svg::gantt(&format!("real ({}), {span}", r.mode), t.sim.sc.machine.cpus, &r.lanes, &r.slices, from, to),
                "the kernel's sched_switch events (ftrace): rt-app's threads, the vassal agent, and everything else on the machine",
            ),
            Some(_) => b.push_str("<p>No kernel trace of the real run (see the notes).</p>\n"),
            None => {}
        }
    }
    crate::html::page(&format!("vassal twin: {}", t.workload.name), &b)
}
