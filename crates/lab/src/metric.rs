//! The metric language of experiments and sweeps: what a row's `metric` (and a sweep's
//! `metrics`) reads from a run. Paths name one number of a report (`task.NAME.FIELD`,
//! `tasks.FIELD.AGG`, `kernel.swap_outs`, ...; see [`metric`]) or of a trace
//! (`trace.lag.PREFIX.max_ms`). Described once, in docs/repro.md ("Metrics").

use std::collections::BTreeMap;

use vassal_sim::engine::Trace;
use vassal_sim::model::Scenario;
use vassal_sim::report::{Report, TaskReport};

fn task_field(t: &TaskReport, field: &str) -> Result<f64, String> {
    let ms = |ns: u64| ns as f64 / 1e6;
    Ok(match field {
        "share" => t.share,
        "cpu_frac" => t.cpu_frac,
        "cpu_ms" => ms(t.cpu_ns),
        "latency_p50_ms" => ms(t.latency.p50_ns),
        "latency_p99_ms" => ms(t.latency.p99_ns),
        "latency_max_ms" => ms(t.latency.max_ns),
        "latency_mean_ms" => ms(t.latency.mean_ns),
        "response_p50_ms" => ms(t.response.p50_ns),
        "response_p99_ms" => ms(t.response.p99_ns),
        "response_max_ms" => ms(t.response.max_ns),
        "response_mean_ms" => ms(t.response.mean_ns),
        "responses" => t.response.count as f64,
        "jobs_met" => t.jobs_met as f64,
        "jobs_missed" => t.jobs_missed as f64,
        "miss_ratio" => {
            let n = t.jobs_met + t.jobs_missed;
            if n == 0 {
                0.0
            } else {
                t.jobs_missed as f64 / n as f64
            }
        }
        "lateness_max_ms" => ms(t.lateness.max_ns),
        "switches" => t.switches as f64,
        "migrations" => t.migrations as f64,
        "iterations" => t.iterations.count as f64,
        "iter_min_us" => t.iterations.min_ns as f64 / 1e3,
        "iter_max_us" => t.iterations.max_ns as f64 / 1e3,
        "iter_mean_us" => t.iterations.mean_ns as f64 / 1e3,
        "iter_sd_us" => t.iterations.sd_ns as f64 / 1e3,
        _ => return Err(format!("unknown task metric '{field}'")),
    })
}

fn aggregate(values: &[f64], agg: &str) -> Result<f64, String> {
    if values.is_empty() {
        return Err("no tasks match".into());
    }
    let min = values.iter().cloned().fold(f64::INFINITY, f64::min);
    let max = values.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let sum: f64 = values.iter().sum();
    Ok(match agg {
        "min" => min,
        "max" => max,
        "sum" => sum,
        "mean" => sum / values.len() as f64,
        "spread" => max - min,
        _ => return Err(format!("unknown aggregate '{agg}'; expected min, max, sum, mean or spread")),
    })
}

/// Reads a metric from a report. Paths:
/// - `task.NAME.FIELD` — one task (FIELD: share, cpu_frac, cpu_ms, latency_{p50,p99,max,mean}_ms,
///   response_{p50,p99,max,mean}_ms, responses, jobs_met, jobs_missed, miss_ratio,
///   lateness_max_ms, switches, migrations, iterations, iter_{min,max,mean,sd}_us)
/// - `tasks.FIELD.AGG` — over all tasks; `group.PREFIX.FIELD.AGG` — over tasks whose name
///   starts with PREFIX (AGG: min, max, sum, mean, spread)
/// - `deadlines.PREFIX.made` — the fraction of deadlines made (jobs met over jobs met or
///   missed), pooled over the tasks whose names start with PREFIX
/// - `cpu.N.utilisation`, `cpus.utilisation.AGG`
/// - `totals.FIELD` (events, decisions, switches, migrations, refused_decisions, overhead_ms)
/// - `kernel.FIELD` (paper 004's counts: dispatches, syscalls, swap_ins, swap_outs,
///   swapper_runs, swap_idle_s, user_util, last_exit_s) and `kernel.exit_s.TASK`
pub fn metric(report: &Report, path: &str) -> Result<f64, String> {
    let parts: Vec<&str> = path.split('.').collect();
    let r = match parts.as_slice() {
        ["task", name, field] => {
            let t = report.task(name).ok_or_else(|| format!("no task named '{name}'"))?;
            task_field(t, field)
        }
        ["tasks", field, agg] => {
            let v = report.tasks.iter().map(|t| task_field(t, field)).collect::<Result<Vec<_>, _>>()?;
            aggregate(&v, agg)
        }
        ["group", prefix, field, agg] => {
            let v = report
                .tasks
                .iter()
                .filter(|t| t.name.starts_with(prefix))
                .map(|t| task_field(t, field))
                .collect::<Result<Vec<_>, _>>()?;
            aggregate(&v, agg)
        }
        ["deadlines", prefix, "made"] => {
            // Pooled over the tasks: deadlines made / deadlines due (paper 001 Fig. 5).
            let (met, due) = report
                .tasks
                .iter()
                .filter(|t| t.name.starts_with(prefix))
                .fold((0u64, 0u64), |(m, d), t| (m + t.jobs_met, d + t.jobs_met + t.jobs_missed));
            if due == 0 { Err(format!("no deadlines of tasks named {prefix}*")) } else { Ok(met as f64 / due as f64) }
        }
        ["cpu", n, "utilisation"] => {
            let n: usize = n.parse().map_err(|_| format!("'{n}' is not a CPU number"))?;
            report.cpus.get(n).map(|c| c.utilisation).ok_or_else(|| format!("no cpu {n}"))
        }
        ["cpus", "utilisation", agg] => aggregate(&report.cpus.iter().map(|c| c.utilisation).collect::<Vec<_>>(), agg),
        ["totals", field] => {
            let t = &report.totals;
            Ok(match *field {
                "events" => t.events as f64,
                "decisions" => t.decisions as f64,
                "switches" => t.switches as f64,
                "migrations" => t.migrations as f64,
                "refused_decisions" => t.refused_decisions as f64,
                "overhead_ms" => t.overhead_ns as f64 / 1e6,
                _ => return Err(format!("unknown totals field '{field}'")),
            })
        }
        ["kernel", "exit_s", name] => {
            let m = report.kernel.images.iter().find(|m| m.name == *name).ok_or_else(|| format!("no image named '{name}'"))?;
            m.exit_ns.map(|e| e as f64 / 1e9).ok_or_else(|| format!("task '{name}' did not exit"))
        }
        ["kernel", field] => {
            let k = &report.kernel;
            Ok(match *field {
                "dispatches" => k.dispatches as f64,
                "syscalls" => k.syscalls as f64,
                "swap_ins" => k.swap_ins as f64,
                "swap_outs" => k.swap_outs as f64,
                "swapper_runs" => k.swapper_runs as f64,
                "swap_idle_s" => k.swap_idle_ns as f64 / 1e9,
                "user_util" => k.user_util,
                "last_exit_s" => k.last_exit_ns.ok_or("no task exited")? as f64 / 1e9,
                _ => return Err(format!("unknown kernel field '{field}'")),
            })
        }
        _ => Err("expected task.NAME.FIELD, tasks.FIELD.AGG, group.PREFIX.FIELD.AGG, cpu.N.utilisation, cpus.utilisation.AGG, deadlines.PREFIX.made, totals.FIELD, kernel.FIELD or kernel.exit_s.TASK".into()),
    };
    r.map_err(|e| format!("metric '{path}': {e}"))
}

/// The largest gap, at any slice boundary, between a task's CPU time and its weighted fair
/// share of the CPU time the group received (BVT Figure 1: "the error between fair share
/// and actual"), over tasks whose names start with `prefix`; weights from each task's
/// `weight` parameter (default 1). CPU time here is slice time, so switch costs count.
pub fn fair_share_lag(sc: &Scenario, trace: &Trace, prefix: &str) -> Result<f64, String> {
    let group: Vec<(usize, f64)> = sc
        .tasks
        .iter()
        .enumerate()
        .filter(|(_, t)| t.name.starts_with(prefix))
        .map(|(i, t)| (i, t.params.get("weight").copied().unwrap_or(1).max(1) as f64))
        .collect();
    if group.len() < 2 {
        return Err(format!("fair-share lag needs two or more tasks named {prefix}*"));
    }
    let total_w: f64 = group.iter().map(|(_, w)| w).sum();
    // Slice boundaries in time order: (time, task, +1 start / -1 end).
    let mut edges: Vec<(u64, usize, i8)> = Vec::new();
    for s in &trace.slices {
        if group.iter().any(|(i, _)| *i == s.task) {
            edges.push((s.start, s.task, 1));
            edges.push((s.end, s.task, -1));
        }
    }
    edges.sort();
    let mut cpu: BTreeMap<usize, f64> = BTreeMap::new();
    let mut running: BTreeMap<usize, u64> = BTreeMap::new();
    let mut worst: f64 = 0.0;
    for (at, task, kind) in edges {
        if kind > 0 {
            running.insert(task, at);
        } else if let Some(start) = running.remove(&task) {
            *cpu.entry(task).or_default() += (at - start) as f64;
        }
        // Measure only when no group task is mid-slice, so the accounts are complete.
        if running.is_empty() {
            let g: f64 = cpu.values().sum();
            for (i, w) in &group {
                let lag = (cpu.get(i).copied().unwrap_or(0.0) - w / total_w * g).abs();
                worst = worst.max(lag);
            }
        }
    }
    Ok(worst / 1e6)
}

/// Metrics that need the trace: `trace.lag.PREFIX.max_ms` (see [`fair_share_lag`]).
pub fn trace_metric(sc: &Scenario, trace: &Trace, path: &str) -> Result<f64, String> {
    match path.split('.').collect::<Vec<_>>().as_slice() {
        ["trace", "lag", prefix, "max_ms"] => fair_share_lag(sc, trace, prefix),
        _ => Err(format!("metric '{path}': expected trace.lag.PREFIX.max_ms")),
    }
}
