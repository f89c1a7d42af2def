//! A run's [`Trace`] as a Chrome Trace Event Format file (JSON), which the Perfetto UI
//! (<https://ui.perfetto.dev>) and `chrome://tracing` open. See docs/trace.md.
//!
//! Layout:
//! - process "CPUs" (pid 1): one thread track per CPU ("cpuN", tid 100 + N) with a
//!   complete event (`X`) for each slice during which a task held the CPU (switch cost
//!   included), named after the task, with the deciding scheduler as category and arg;
//! - process "Tasks" (pid 2): one thread track per task (named after it, tid 1000 + its
//!   index) with the same slices ("running on cpuN") and thread-scoped instants for its
//!   wake-ups, blocks and exit; a counter "runnable" (tasks woken and not yet blocked or
//!   exited, running ones included); and, when the policy keeps them (BVT), a counter
//!   "virtual time NAME" per task with its actual and effective virtual times A and E
//!   (virtual ms); a task's track also has "swap out" / "swap in" instants when the
//!   scenario models memory (paper 004);
//! - process "Schedulers" (pid 3): one thread track per scheduler of the hierarchy
//!   (tid 10 + its position, default last) with an instant "event" each time one of its
//!   scheduler events (Vassal's SetSchedulerEvent) fires — e.g. the reservation
//!   server's slot boundaries, BVT's warp-limit timers, the timed scheduler's wake-ups;
//! - global instants (scope `g`) for the report's log lines: schedulers loaded, refused
//!   and unloaded, refused messages, faults, and the policies' own logs (BVT warp-limit
//!   and unwarp events).
//!
//! Thread ids are unique across both processes and never 0: older Perfetto releases
//! merge threads with equal tids in different processes, and tid 0 with tid 1.
//!
//! Timestamps are microseconds (the format's unit) written as exact decimals with
//! nanosecond precision ("1001000.250"); `displayTimeUnit` is "ns". Events are written
//! one per line in a fixed order, so the same run gives the same bytes.

use std::fmt::Write as _;

use vassal_core::Ns;

use vassal_sim::engine::{MarkKind, Trace};
use vassal_sim::model::Scenario;
use vassal_sim::report::Report;

/// Process id of the CPU tracks.
pub const CPUS_PID: u32 = 1;
/// Process id of the task tracks.
pub const TASKS_PID: u32 = 2;
/// Process id of the scheduler tracks.
pub const SCHEDS_PID: u32 = 3;

/// The thread id of CPU `cpu`'s track.
pub fn cpu_tid(cpu: u16) -> u64 {
    100 + cpu as u64
}

/// The thread id of task `index`'s track.
pub fn task_tid(index: usize) -> u64 {
    1000 + index as u64
}

/// Nanoseconds as microseconds, exactly ("12.345", "0.001").
fn us(ns: Ns) -> String {
    format!("{}.{:03}", ns / 1000, ns % 1000)
}

/// A JSON string literal.
fn js(s: &str) -> String {
    serde_json::to_string(s).expect("a string always serialises")
}

/// Splits a report log line ("   1.000000000s text") into its time and text.
pub fn parse_log_line(line: &str) -> Option<(Ns, &str)> {
    let line = line.trim_start();
    let (stamp, text) = line.split_once(' ').unwrap_or((line, ""));
    let (secs, nanos) = stamp.strip_suffix('s')?.split_once('.')?;
    if nanos.len() != 9 {
        return None;
    }
    let at = secs.parse::<Ns>().ok()?.checked_mul(1_000_000_000)?.checked_add(nanos.parse::<Ns>().ok()?)?;
    Some((at, text))
}

/// The Chrome JSON trace of a run of `sc` (its report and its trace, from
/// [`vassal_sim::Sim::run_traced`] after [`vassal_sim::Sim::record_trace`]).
pub fn to_chrome_json(sc: &Scenario, report: &Report, trace: &Trace) -> String {
    let task_name = |i: usize| sc.tasks.get(i).map_or_else(|| format!("task{i}"), |t| t.name.clone());
    let mut ev: Vec<String> = Vec::new();

    // Tracks.
    let meta =
        |name: &str, pid: u32, tid: u64, args: String| format!(r#"{{"name":{},"ph":"M","pid":{pid},"tid":{tid},"args":{args}}}"#, js(name));
    ev.push(meta("process_name", CPUS_PID, cpu_tid(0), r#"{"name":"CPUs"}"#.into()));
    ev.push(meta("process_sort_index", CPUS_PID, cpu_tid(0), r#"{"sort_index":0}"#.into()));
    for c in 0..sc.machine.cpus {
        ev.push(meta("thread_name", CPUS_PID, cpu_tid(c), format!(r#"{{"name":"cpu{c}"}}"#)));
        ev.push(meta("thread_sort_index", CPUS_PID, cpu_tid(c), format!(r#"{{"sort_index":{c}}}"#)));
    }
    ev.push(meta("process_name", TASKS_PID, task_tid(0), r#"{"name":"Tasks"}"#.into()));
    ev.push(meta("process_sort_index", TASKS_PID, task_tid(0), r#"{"sort_index":1}"#.into()));
    for i in 0..sc.tasks.len() {
        ev.push(meta("thread_name", TASKS_PID, task_tid(i), format!(r#"{{"name":{}}}"#, js(&task_name(i)))));
        ev.push(meta("thread_sort_index", TASKS_PID, task_tid(i), format!(r#"{{"sort_index":{i}}}"#)));
    }

    let scheds: Vec<&str> = sc.schedulers.iter().map(|s| s.name.as_str()).chain(std::iter::once(sc.default_name.as_str())).collect();
    let sched_tid = |k: usize| 10 + k as u64;
    ev.push(meta("process_name", SCHEDS_PID, sched_tid(0), r#"{"name":"Schedulers"}"#.into()));
    ev.push(meta("process_sort_index", SCHEDS_PID, sched_tid(0), r#"{"sort_index":2}"#.into()));
    for (k, name) in scheds.iter().enumerate() {
        ev.push(meta("thread_name", SCHEDS_PID, sched_tid(k), format!(r#"{{"name":{}}}"#, js(name))));
        ev.push(meta("thread_sort_index", SCHEDS_PID, sched_tid(k), format!(r#"{{"sort_index":{k}}}"#)));
    }

    // Slices, per CPU track then per task track, each in time order.
    let mut slices: Vec<_> = trace.slices.iter().collect();
    slices.sort_by_key(|s| (s.cpu, s.start, s.end, s.task));
    for s in &slices {
        ev.push(format!(
            r#"{{"name":{},"cat":{},"ph":"X","pid":{CPUS_PID},"tid":{},"ts":{},"dur":{},"args":{{"scheduler":{},"task":{}}}}}"#,
            js(&task_name(s.task)),
            js(&s.by),
            cpu_tid(s.cpu),
            us(s.start),
            us(s.end - s.start),
            js(&s.by),
            js(&task_name(s.task)),
        ));
    }
    slices.sort_by_key(|s| (s.task, s.start, s.end, s.cpu));
    for s in &slices {
        ev.push(format!(
            r#"{{"name":"running on cpu{}","cat":{},"ph":"X","pid":{TASKS_PID},"tid":{},"ts":{},"dur":{},"args":{{"scheduler":{},"cpu":{}}}}}"#,
            s.cpu,
            js(&s.by),
            task_tid(s.task),
            us(s.start),
            us(s.end - s.start),
            js(&s.by),
            s.cpu,
        ));
    }

    // Wake-ups, blocks and exits on the task tracks (the engine records them in time order).
    let mut marks: Vec<_> = trace.marks.iter().enumerate().collect();
    marks.sort_by_key(|(k, m)| (m.task, m.at, *k));
    for (_, m) in &marks {
        let name = match m.kind {
            MarkKind::Wake => "wake",
            MarkKind::Block => "block",
            MarkKind::Exit => "exit",
            MarkKind::SwapOut => "swap out",
            MarkKind::SwapIn => "swap in",
        };
        ev.push(format!(
            r#"{{"name":"{name}","cat":"task","ph":"i","s":"t","pid":{TASKS_PID},"tid":{},"ts":{}}}"#,
            task_tid(m.task),
            us(m.at)
        ));
    }

    // The number of runnable tasks (running ones included), from the marks.
    let mut awake = vec![false; sc.tasks.len()];
    let mut runnable: i64 = 0;
    let mut points: Vec<(Ns, i64)> = vec![(0, 0)];
    let mut by_time: Vec<_> = trace.marks.iter().enumerate().collect();
    by_time.sort_by_key(|(k, m)| (m.at, *k));
    for (_, m) in by_time {
        let Some(a) = awake.get_mut(m.task) else { continue };
        match (m.kind, *a) {
            (MarkKind::Wake, false) => {
                *a = true;
                runnable += 1;
            }
            (MarkKind::Block | MarkKind::Exit, true) => {
                *a = false;
                runnable -= 1;
            }
            _ => continue,
        }
        match points.last_mut() {
            Some(last) if last.0 == m.at => last.1 = runnable,
            _ => points.push((m.at, runnable)),
        }
    }
    for (at, n) in points {
        ev.push(format!(
            r#"{{"name":"runnable","ph":"C","pid":{TASKS_PID},"tid":{},"ts":{},"args":{{"tasks":{n}}}}}"#,
            task_tid(0),
            us(at)
        ));
    }

    // Virtual times (BVT's A_i and E_i, paper 001 §2), when the policy keeps them: one
    // counter per task, in virtual ms, each value holding until the next.
    for v in &trace.vtimes {
        let name = sc.tasks.get(v.task).map_or("?", |t| t.name.as_str());
        ev.push(format!(
            r#"{{"name":{},"ph":"C","pid":{TASKS_PID},"tid":{},"ts":{},"args":{{"A":{:.6},"E":{:.6}}}}}"#,
            js(&format!("virtual time {name}")),
            task_tid(v.task),
            us(v.at),
            v.actual / 1e6,
            v.effective / 1e6
        ));
    }

    // Scheduler events as they fired, on their scheduler's track.
    let mut fired: Vec<_> = trace.events.iter().filter_map(|(at, name)| Some((scheds.iter().position(|s| s == name)?, *at))).collect();
    fired.sort();
    for (k, at) in fired {
        ev.push(format!(
            r#"{{"name":"event","cat":"scheduler","ph":"i","s":"t","pid":{SCHEDS_PID},"tid":{},"ts":{}}}"#,
            sched_tid(k),
            us(at)
        ));
    }

    // The report's log as global instants.
    for line in &report.log {
        let Some((at, text)) = parse_log_line(line) else { continue };
        let cat = if text.starts_with('[') { "policy" } else { "sim" };
        ev.push(format!(r#"{{"name":{},"cat":"{cat}","ph":"i","s":"g","pid":{CPUS_PID},"tid":{},"ts":{}}}"#, js(text), cpu_tid(0), us(at)));
    }

    let mut o = String::with_capacity(ev.iter().map(|e| e.len() + 2).sum::<usize>() + 256);
    o.push_str("{\"displayTimeUnit\":\"ns\",\n\"traceEvents\":[\n");
    for (k, e) in ev.iter().enumerate() {
        o.push_str(e);
        o.push_str(if k + 1 < ev.len() { ",\n" } else { "\n" });
    }
    let _ = writeln!(
        o,
        "],\n\"otherData\":{{\"generator\":\"vassal\",\"scenario\":{},\"seed\":{},\"elapsed_ns\":{},\"cpus\":{}}}}}",
        js(&report.scenario),
        report.seed,
        report.elapsed_ns,
        sc.machine.cpus
    );
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_lines_parse() {
        assert_eq!(parse_log_line("   1.000000000s scheduler 'rt' (fps) loaded"), Some((SEC, "scheduler 'rt' (fps) loaded")));
        assert_eq!(parse_log_line("12345.000000007s x"), Some((12345 * SEC + 7, "x")));
        assert_eq!(parse_log_line("garbage"), None);
        assert_eq!(us(1_001_000_250), "1001000.250");
        assert_eq!(us(7), "0.007");
    }

    use vassal_core::SEC;
}
