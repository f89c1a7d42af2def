//! `vassal twin`'s simulated side and its rendering (docs/twin.md): rt-app's per-loop
//! rows made from a simulated run, each number worked out by hand in the test's comment;
//! the agent's configuration from the simulated hierarchy, read back by the agent's own
//! config parser; the table and the JSON. The real side needs root: `twin_real.rs`.

use vassal_lab::calibrate::MachineModel;
use vassal_lab::twin::{self, live, log::Summary, render, Options, Workload};

fn machine(cpus: u16, switch: u64, wake: u64) -> MachineModel {
    let mut m = MachineModel::default_here();
    m.cpus = cpus;
    m.switch_cost_ns = switch;
    m.wake_latency_ns = wake;
    m.rtapp_ns_per_loop = None;
    m
}

fn opts(m: MachineModel, ms: u64) -> Options {
    Options { machine: m, policy: None, duration: Some(ms * 1_000_000), stalls: false, kernel: false, load: None }
}

fn sim(json: &str, o: &Options) -> (Workload, twin::SimSide) {
    let w = Workload::parse(json, "t", o).unwrap_or_else(|e| panic!("{e}"));
    let s = twin::simulate(&w, o).unwrap_or_else(|e| panic!("{e}"));
    (w, s)
}

/// One thread, 2 ms of run then a 10 ms timer, on one CPU with a 5 µs switch and a 50 µs
/// timer wake-up. It starts at 0 and runs from 5 µs (the switch) to 2.005 ms; the timer
/// (started with the thread) expires at 10 ms: slack 7.995 ms. It wakes at 10.05 ms and
/// runs from 10.055 ms: wu_lat 55 µs; every later iteration the same, with slack 10 −
/// 2.055 = 7.945 ms. In 100 ms: 9 whole iterations (the 10th ends at 100.055 ms), 10
/// runs of 2 ms = 20 ms of CPU.
#[test]
fn a_periodic_threads_rows_are_rt_apps() {
    let o = opts(machine(1, 5_000, 50_000), 100);
    let (_, s) = sim(r#"{ "tasks": { "a": { "run": 2000, "timer": { "ref": "unique", "period": 10000 } } } }"#, &o);
    let rows = &s.rows[0];
    assert_eq!(rows[0].start, 5_000);
    assert_eq!((rows[0].run, rows[0].slack, rows[0].wu_lat, rows[0].end), (2_000_000, 7_995_000, 55_000, 10_055_000));
    assert_eq!((rows[1].start, rows[1].run, rows[1].slack, rows[1].wu_lat), (10_055_000, 2_000_000, 7_945_000, 55_000));
    assert_eq!((rows[1].c_duration, rows[1].c_period), (2_000_000, 10_000_000));
    assert_eq!(rows.len(), 9);
    let sum = &s.summaries[0];
    assert_eq!(
        *sum,
        Summary {
            iterations: 9,
            cpu_share: 0.2,
            wu_lat_p50_us: Some(55.0),
            wu_lat_p99_us: Some(55.0),
            slack_p50_us: Some(7945.0),
            slack_p1_us: Some(7945.0),
            timed: 9,
            missed: 0,
            run_p50_us: Some(2000.0),
            run_p99_us: Some(2000.0),
            // the first iteration starts after the first switch (5 µs): 10.05 ms
            period_p50_us: Some(10_000.0),
            period_p99_us: Some(10_050.0),
        }
    );
}

/// Two SCHED_FIFO threads on one CPU, 3 ms of run and a 10 ms timer each, no costs: h
/// (priority 20) runs 0–3 ms of each period, l (10) 3–6 ms. l's first row starts when it
/// first runs, at 3 ms; its slack is 10 − 6 = 4 ms, and each wake-up waits for h's run:
/// wu_lat 3 ms, its run 3 ms of wall time. h: slack 7 ms, wu_lat 0.
#[test]
fn a_lower_priority_thread_waits_for_the_higher_one() {
    let o = opts(machine(1, 0, 0), 100);
    let (_, s) = sim(
        r#"{ "global": { "default_policy": "SCHED_FIFO" }, "tasks": {
            "h": { "priority": 20, "run": 3000, "timer": { "ref": "unique", "period": 10000 } },
            "l": { "priority": 10, "run": 3000, "timer": { "ref": "unique", "period": 10000 } } } }"#,
        &o,
    );
    let (h, l) = (&s.summaries[0], &s.summaries[1]);
    assert_eq!((h.wu_lat_p50_us, h.slack_p50_us, h.run_p50_us), (Some(0.0), Some(7000.0), Some(3000.0)));
    assert_eq!((l.wu_lat_p50_us, l.wu_lat_p99_us, l.slack_p50_us, l.run_p50_us), (Some(3000.0), Some(3000.0), Some(4000.0), Some(3000.0)));
    assert_eq!(s.rows[1][0].start, 3_000_000);
    assert_eq!((h.cpu_share, l.cpu_share), (0.3, 0.3));
}

/// A run longer than the period misses every period: 12 ms of run, a 10 ms timer
/// (relative): the first expiry (10 ms) has passed at 12 ms, the timer restarts from 12,
/// expires at 22 while the next run ends at 24, and so on: slack −2 ms each time, no
/// sleep, so no wake-up latency at all. 100 ms: 8 whole iterations (0, 12, … 84–96).
#[test]
fn an_overrunning_thread_misses_every_period() {
    let o = opts(machine(1, 0, 0), 100);
    let (_, s) = sim(r#"{ "tasks": { "a": { "run": 12000, "timer": { "ref": "unique", "period": 10000 } } } }"#, &o);
    let a = &s.summaries[0];
    assert_eq!((a.iterations, a.timed, a.missed), (8, 8, 8));
    assert_eq!((a.slack_p50_us, a.wu_lat_p50_us), (Some(-2000.0), None));
    assert!(s.rows[0].iter().all(|r| r.missed() && r.wu_lat == 0));
}

/// rt-app's loop: with a machine model whose loop takes 16.4 ns, rt-app is told 16 and
/// does 2.5% more work than asked; the simulation does the same.
#[test]
fn run_events_do_the_work_rt_apps_calibrated_loop_does() {
    let mut m = machine(1, 0, 0);
    m.rtapp_ns_per_loop = Some(16.4);
    let o = opts(m, 100);
    let (_, s) = sim(r#"{ "tasks": { "a": { "run": 2000, "timer": { "ref": "unique", "period": 10000 } } } }"#, &o);
    assert_eq!(twin::rtapp_calibration(&o.machine), Some(16));
    assert_eq!(s.run_scale, 16.4 / 16.0);
    assert_eq!(s.rows[0][0].run, 2_050_000);
}

/// The agent is configured with the simulated hierarchy (the same `dl` and `rt`
/// schedulers, usage and quantum; BVT with the twin's parameters) and the agent's own
/// parser accepts it; each thread names the scheduler and parameters it joins.
#[test]
fn the_agent_gets_the_simulated_hierarchy() {
    let o = opts(machine(2, 0, 0), 100);
    let json = r#"{ "tasks": {
        "d": { "policy": "SCHED_DEADLINE", "dl-runtime": 2000, "dl-period": 10000, "run": 1000, "timer": { "ref": "unique", "period": 10000 } },
        "r": { "policy": "SCHED_RR", "priority": 30, "instance": 2, "run": 1000, "sleep": 1000 },
        "o": { "priority": 5, "run": 1000, "sleep": 1000 } } }"#;
    let w = Workload::parse(json, "h", &o).unwrap();
    let (sc, _, _) = twin::scenario(&w, &o).unwrap();
    let cfg = live::agent_config(&sc);
    let c = vassal_agent::config::Config::from_toml(&format!("socket = \"/tmp/x.sock\"\n{cfg}")).unwrap_or_else(|e| panic!("{e}\n{cfg}"));
    let scheds: Vec<(&str, &str)> = c.schedulers.iter().map(|s| (s.name.as_str(), s.kind.as_str())).collect();
    assert_eq!(scheds, [("dl", "edf"), ("rt", "fps")], "{cfg}");
    assert!(
        cfg.contains("reserved = { cpus = 0.2 }") && cfg.contains("reserved = { cpus = 1.7 }") && cfg.contains("quantum = \"100ms\""),
        "{cfg}"
    );
    assert_eq!(c.default.kind, "bvt");
    type Joined<'a> = (&'a str, Option<&'a str>, Vec<(String, i64)>);
    let th: Vec<Joined> = w.threads.iter().map(|t| (t.name.as_str(), t.scheduler.as_deref(), t.params.clone())).collect();
    assert_eq!(
        th,
        [
            ("d", Some("dl"), vec![("period".into(), 10_000_000), ("deadline".into(), 10_000_000)]),
            ("r-0", Some("rt"), vec![("priority".into(), 30)]),
            ("r-1", Some("rt"), vec![("priority".into(), 30)]),
            ("o", None, vec![("weight".into(), 335)]),
        ]
    );
    assert_eq!(w.threads.iter().map(|t| t.index).collect::<Vec<_>>(), [0, 1, 2, 3]);
}

/// `vassal twin --load FILE --name rt` (issue 18 item 4): the SDK's `fifo` module runs in
/// place of `rt` in the simulation and in the agent's configuration (a `module` line the
/// agent's parser accepts). On one CPU with a 5 µs switch and a 50 µs wake-up, `hi` (FIFO
/// 30, 1 ms every 5 ms) and `lo` (FIFO 10, 4 ms every 10 ms): under fps `hi` preempts
/// `lo` at every wake (wu_lat 55 µs always); under fifo, which knows no priorities and
/// runs a task until it blocks, `hi` waits behind `lo`'s 4 ms run in some periods. A
/// module named for no scheduler of the workload is refused, naming those it has.
#[test]
fn a_module_replaces_a_scheduler_in_both_worlds() {
    let fifo = vassal_module::example_path("fifo").unwrap_or_else(|e| panic!("{e}"));
    let json = r#"{ "tasks": {
        "hi": { "policy": "SCHED_FIFO", "priority": 30, "run": 1000, "timer": { "ref": "hi", "period": 5000 } },
        "lo": { "policy": "SCHED_FIFO", "priority": 10, "run": 4000, "timer": { "ref": "lo", "period": 10000 } } } }"#;
    let fps = opts(machine(1, 5_000, 50_000), 200);
    let (_, s) = sim(json, &fps);
    assert_eq!(s.summaries[0].wu_lat_p99_us, Some(55.0));
    let load = twin::Load { path: fifo.clone(), name: "rt".into(), params: Default::default() };
    let o = Options { load: Some(load.clone()), ..opts(machine(1, 5_000, 50_000), 200) };
    let (w, s) = sim(json, &o);
    assert!(s.summaries[0].wu_lat_p99_us.unwrap() > 1_000.0, "{:?}", s.summaries[0]);
    let (sc, _, _) = twin::scenario(&w, &o).unwrap();
    let cfg = live::agent_config(&sc);
    let c = vassal_agent::config::Config::from_toml(&format!("socket = \"/tmp/x.sock\"\n{cfg}")).unwrap_or_else(|e| panic!("{e}\n{cfg}"));
    let rt = c.schedulers.iter().find(|s| s.name == "rt").unwrap_or_else(|| panic!("{cfg}"));
    assert_eq!(rt.module.as_deref(), Some(fifo.to_str().unwrap()), "{cfg}");
    let bad = Options { load: Some(twin::Load { name: "dl".into(), ..load }), ..opts(machine(1, 5_000, 50_000), 200) };
    let w = Workload::parse(json, "t", &bad).unwrap();
    let Err(e) = twin::simulate(&w, &bad) else { panic!("a module named for no scheduler was accepted") };
    assert!(e.contains("--name dl") && e.contains("'rt'"), "{e}");
}

/// Without a real run the table and the JSON carry the simulated side; a file without a
/// duration needs --duration.
#[test]
fn the_simulated_side_renders() {
    let o = opts(machine(1, 5_000, 50_000), 100);
    let json = r#"{ "tasks": { "a": { "run": 2000, "timer": { "ref": "unique", "period": 10000 } } } }"#;
    let (w, s) = sim(json, &o);
    let t = twin::Twin { workload: w, machine: o.machine.clone(), sim: s, real: None };
    let table = render::table(&t);
    assert!(table.contains("real: not run (--sim-only)"), "{table}");
    let line = table.lines().find(|l| l.contains("wu_lat p50")).unwrap();
    assert!(line.split_whitespace().collect::<Vec<_>>().ends_with(&["p50", "55", "us"]), "{line}");
    assert!(table.lines().any(|l| l.starts_with("a ") && l.contains("SCHED_OTHER nice 0") && l.contains("20.0%")), "{table}");
    let j = render::to_json(&t);
    assert_eq!(j["threads"][0]["sim"]["wu_lat_p50_us"], 55.0);
    assert_eq!(j["threads"][0]["real"], serde_json::Value::Null);
    assert_eq!(j["sim"]["wake_latency_ns"], 50_000);
    let page = render::html(&t);
    assert!(page.contains("<svg") && page.contains("simulated, 0–100 ms"), "an HTML page with the timelines");
    let e = Workload::parse(json, "t", &Options { duration: None, ..o }).unwrap_err();
    assert!(e.contains("--duration"), "{e}");
}

/// The simulated timer wake-up is the agent's when the model has it and the real side is
/// the agent; the kernel's with --kernel (or without an agent figure).
#[test]
fn the_simulated_wake_up_is_the_one_of_the_real_side() {
    let mut m = machine(1, 0, 30_000);
    m.agent_wake_latency_ns = Some(90_000);
    let json = r#"{ "tasks": { "a": { "run": 1000, "timer": { "ref": "unique", "period": 10000 } } } }"#;
    let agent = opts(m.clone(), 50);
    let (_, s) = sim(json, &agent);
    assert_eq!(s.summaries[0].wu_lat_p50_us, Some(90.0));
    let (_, s) = sim(json, &Options { kernel: true, ..agent });
    assert_eq!(s.summaries[0].wu_lat_p50_us, Some(30.0));
    m.agent_wake_latency_ns = None;
    let (_, s) = sim(json, &opts(m, 50));
    assert_eq!(s.summaries[0].wu_lat_p50_us, Some(30.0));
}
