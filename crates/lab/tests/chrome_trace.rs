//! The Chrome JSON trace (`vassal sim --trace`): well-formed, every track declared,
//! complete events properly nested (never overlapping) on each track, and consistent
//! with the report.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use serde_json::Value;
use vassal_lab::chrome_trace::{parse_log_line, to_chrome_json, CPUS_PID, SCHEDS_PID, TASKS_PID};
use vassal_sim::model::Scenario;
use vassal_sim::scenario::load_scenario;
use vassal_sim::{Report, Sim};

type Ns = u64;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn load(rel: &str, until: Option<Ns>) -> Scenario {
    let mut sc = load_scenario(&root().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"));
    if let Some(u) = until {
        sc.until = u;
    }
    sc
}

fn traced(sc: &Scenario) -> (Report, String) {
    let mut sim = Sim::with_registry(sc.clone(), &vassal_lab::workloads::registry()).expect("scenario builds");
    sim.record_trace();
    let (report, trace) = sim.run_traced().expect("scenario runs");
    let json = to_chrome_json(sc, &report, &trace);
    (report, json)
}

/// A timestamp in µs (the format's unit) back to exact ns.
fn ns(v: &Value) -> Ns {
    let us = v.as_f64().expect("a number");
    assert!(us >= 0.0, "negative time {us}");
    (us * 1000.0).round() as Ns
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct X {
    start: Ns,
    end: Ns,
    name: String,
    sched: String,
}

/// What a validated trace holds, for scenario-specific checks.
#[derive(Debug, Default)]
struct Parsed {
    /// (pid, tid) → complete events, in time order.
    tracks: BTreeMap<(u64, u64), Vec<X>>,
    /// (pid, tid) → declared thread name.
    threads: BTreeMap<(u64, u64), String>,
    /// Global instants: (time, name, category).
    global: Vec<(Ns, String, String)>,
    /// Thread instants: (pid, tid) → (time, name).
    marks: BTreeMap<(u64, u64), Vec<(Ns, String)>>,
}

impl Parsed {
    fn tid_named(&self, pid: u64, name: &str) -> u64 {
        self.threads
            .iter()
            .find(|((p, _), n)| *p == pid && n.as_str() == name)
            .map(|((_, t), _)| *t)
            .unwrap_or_else(|| panic!("no track {name}"))
    }
}

/// The checks every trace must pass.
fn validate(sc: &Scenario, report: &Report, json: &str) -> Parsed {
    let doc: Value = serde_json::from_str(json).expect("the trace is well-formed JSON");
    assert_eq!(doc["displayTimeUnit"], "ns");
    let events = doc["traceEvents"].as_array().expect("a traceEvents array");
    let elapsed = report.elapsed_ns;
    let mut schedulers: BTreeSet<&str> = sc.schedulers.iter().map(|s| s.name.as_str()).collect();
    schedulers.insert(sc.default_name.as_str());

    let mut p = Parsed::default();
    let mut processes = BTreeMap::new();
    for e in events {
        let ph = e["ph"].as_str().expect("every event has a phase");
        let pid = e["pid"].as_u64().expect("every event has a pid");
        let tid = e["tid"].as_u64().expect("every event has a tid");
        let name = e["name"].as_str().expect("every event has a name").to_string();
        assert_ne!(tid, 0, "tid 0 is merged with tid 1 by some Perfetto releases");
        if ph == "M" {
            match name.as_str() {
                "process_name" => {
                    processes.insert(pid, e["args"]["name"].as_str().unwrap().to_string());
                }
                "thread_name" => {
                    let prev = p.threads.insert((pid, tid), e["args"]["name"].as_str().unwrap().to_string());
                    assert!(prev.is_none(), "track ({pid}, {tid}) declared twice");
                }
                "thread_sort_index" | "process_sort_index" => assert!(e["args"]["sort_index"].is_u64()),
                other => panic!("unexpected metadata {other}"),
            }
        }
    }
    assert_eq!(processes.get(&(CPUS_PID as u64)).map(String::as_str), Some("CPUs"));
    assert_eq!(processes.get(&(TASKS_PID as u64)).map(String::as_str), Some("Tasks"));
    // tids are unique across processes (older Perfetto releases merge equal tids).
    let tids: BTreeSet<u64> = p.threads.keys().map(|(_, t)| *t).collect();
    assert_eq!(tids.len(), p.threads.len());
    // One track per CPU and per task, named after it.
    let cpu_tracks: Vec<&String> = p.threads.iter().filter(|((pid, _), _)| *pid == CPUS_PID as u64).map(|(_, n)| n).collect();
    let want: Vec<String> = (0..sc.machine.cpus).map(|c| format!("cpu{c}")).collect();
    assert_eq!(cpu_tracks, want.iter().collect::<Vec<_>>());
    let task_tracks: BTreeSet<&str> = p.threads.iter().filter(|((pid, _), _)| *pid == TASKS_PID as u64).map(|(_, n)| n.as_str()).collect();
    assert_eq!(task_tracks, sc.tasks.iter().map(|t| t.name.as_str()).collect::<BTreeSet<_>>());

    let mut counter_points = 0;
    for e in events {
        let pid = e["pid"].as_u64().unwrap();
        let tid = e["tid"].as_u64().unwrap();
        let name = e["name"].as_str().unwrap().to_string();
        match e["ph"].as_str().unwrap() {
            "M" => {}
            "X" => {
                let start = ns(&e["ts"]);
                let dur = ns(&e["dur"]);
                assert!(dur > 0, "empty slice {e}");
                assert!(start + dur <= elapsed, "slice past the horizon: {e}");
                assert!(p.threads.contains_key(&(pid, tid)), "slice on an undeclared track: {e}");
                let sched = e["args"]["scheduler"].as_str().expect("every slice names its scheduler").to_string();
                assert!(schedulers.contains(sched.as_str()), "unknown scheduler {sched}");
                assert_eq!(e["cat"].as_str(), Some(sched.as_str()));
                p.tracks.entry((pid, tid)).or_default().push(X { start, end: start + dur, name, sched });
            }
            "i" => {
                let at = ns(&e["ts"]);
                assert!(at <= elapsed);
                match e["s"].as_str() {
                    Some("g") => p.global.push((at, name, e["cat"].as_str().unwrap().to_string())),
                    Some("t") => {
                        assert!(p.threads.contains_key(&(pid, tid)), "mark on an undeclared track: {e}");
                        if pid == SCHEDS_PID as u64 {
                            assert_eq!(name, "event", "scheduler tracks hold scheduler events");
                        } else {
                            assert_eq!(pid, TASKS_PID as u64, "task marks go on task tracks");
                            assert!(["wake", "block", "exit", "swap out", "swap in"].contains(&name.as_str()), "{name}");
                        }
                        p.marks.entry((pid, tid)).or_default().push((at, name));
                    }
                    s => panic!("instant with scope {s:?}"),
                }
            }
            "C" if name.starts_with("virtual time ") => {
                // BVT's A_i and E_i (E_i <= A_i: a warp only lowers it)
                assert!(sc.tasks.iter().any(|t| name == format!("virtual time {}", t.name)), "{name}");
                let (a, ev) = (e["args"]["A"].as_f64().unwrap(), e["args"]["E"].as_f64().unwrap());
                assert!(a.is_finite() && ev <= a, "{e}");
                assert!(ns(&e["ts"]) <= elapsed);
            }
            "C" => {
                assert_eq!(name, "runnable");
                let n = e["args"]["tasks"].as_i64().expect("a counter value");
                assert!((0..=sc.tasks.len() as i64).contains(&n), "runnable {n}");
                assert!(ns(&e["ts"]) <= elapsed);
                counter_points += 1;
            }
            other => panic!("unexpected phase {other}"),
        }
    }
    assert!(counter_points >= 1);

    // Properly nested: on each track, sorted by start, each slice starts at or after the
    // previous one ends (no two slices of one track overlap).
    for ((pid, tid), xs) in &mut p.tracks {
        xs.sort();
        for w in xs.windows(2) {
            assert!(w[1].start >= w[0].end, "track ({pid}, {tid}) overlaps: {:?} and {:?}", w[0], w[1]);
        }
    }

    // The CPU and task tracks show the same slices.
    let mut from_cpus = Vec::new();
    let mut from_tasks = Vec::new();
    for ((pid, tid), xs) in &p.tracks {
        let track = &p.threads[&(*pid, *tid)];
        for x in xs {
            if *pid == CPUS_PID as u64 {
                from_cpus.push((track.clone(), x.name.clone(), x.start, x.end, x.sched.clone()));
            } else {
                let cpu = x.name.strip_prefix("running on ").expect("task slices say where they ran").to_string();
                from_tasks.push((cpu, track.clone(), x.start, x.end, x.sched.clone()));
            }
        }
    }
    from_cpus.sort();
    from_tasks.sort();
    assert_eq!(from_cpus, from_tasks);
    assert!(!from_cpus.is_empty(), "no slices");

    // Per CPU: busy ≤ slices ≤ busy + overhead ≤ elapsed (slices include switch costs).
    for c in &report.cpus {
        let tid = p.tid_named(CPUS_PID as u64, &format!("cpu{}", c.cpu));
        let sum: Ns = p.tracks.get(&(CPUS_PID as u64, tid)).map_or(0, |xs| xs.iter().map(|x| x.end - x.start).sum());
        assert!(
            c.busy_ns <= sum && sum <= c.busy_ns + c.overhead_ns,
            "cpu{}: slices {sum}, busy {}, overhead {}",
            c.cpu,
            c.busy_ns,
            c.overhead_ns
        );
        assert!(sum <= elapsed);
    }
    // Per task: its slices cover its CPU time (plus its share of switch costs).
    for t in &report.tasks {
        let tid = p.tid_named(TASKS_PID as u64, &t.name);
        let sum: Ns = p.tracks.get(&(TASKS_PID as u64, tid)).map_or(0, |xs| xs.iter().map(|x| x.end - x.start).sum());
        assert!(sum >= t.cpu_ns, "{}: slices {sum} < cpu {}", t.name, t.cpu_ns);
        // Nothing runs after the task exits.
        if let Some(&(exit, _)) = p.marks.get(&(TASKS_PID as u64, tid)).and_then(|m| m.iter().find(|(_, n)| n == "exit")) {
            let last_end = p.tracks.get(&(TASKS_PID as u64, tid)).and_then(|xs| xs.last()).map_or(0, |x| x.end);
            assert!(last_end <= exit, "{} runs after its exit", t.name);
        }
    }

    // Every report log line is a global instant at its time.
    assert_eq!(p.global.len(), report.log.len());
    for (line, (at, name, _)) in report.log.iter().zip(&p.global) {
        assert_eq!(parse_log_line(line), Some((*at, name.as_str())));
    }
    p
}

#[test]
fn every_example_gives_a_valid_trace() {
    for f in ["rr-hogs", "hierarchy", "interactive", "interrupts", "fps-rm"] {
        let sc = load(&format!("docs/examples/{f}.toml"), None);
        let (report, json) = traced(&sc);
        validate(&sc, &report, &json);
    }
}

#[test]
fn every_experiment_gives_a_valid_trace() {
    // The reproduced experiments (single scenarios, not sweeps), cut to their first second.
    let mut n = 0;
    for dir in ["experiments/baselines", "experiments/bvt", "experiments/rtserver", "experiments/vassal"] {
        let mut files: Vec<PathBuf> = std::fs::read_dir(root().join(dir)).unwrap().map(|e| e.unwrap().path()).collect();
        files.sort();
        for f in files.iter().filter(|f| f.extension().is_some_and(|x| x == "toml")) {
            if std::fs::read_to_string(f).unwrap().lines().any(|l| l.trim() == "[computed]") {
                continue; // computed, not simulated
            }
            let rel = f.strip_prefix(root()).unwrap().to_string_lossy().to_string();
            let mut sc = load(&rel, None);
            sc.until = sc.until.min(1_000_000_000);
            let (report, json) = traced(&sc);
            validate(&sc, &report, &json);
            n += 1;
        }
    }
    assert!(n >= 10, "only {n} experiments");
}

#[test]
fn same_run_same_bytes() {
    let sc = load("docs/examples/rr-hogs.toml", None);
    let (_, a) = traced(&sc);
    let (_, b) = traced(&sc);
    assert_eq!(a, b);
}

#[test]
fn hierarchy_shows_decisions_and_scheduler_loads() {
    let sc = load("docs/examples/hierarchy.toml", None);
    let (report, json) = traced(&sc);
    let p = validate(&sc, &report, &json);
    const SEC: Ns = 1_000_000_000;
    // The loads and unloads are global instants.
    let names: Vec<(Ns, &str)> = p.global.iter().map(|(at, n, _)| (*at, n.as_str())).collect();
    assert!(names.contains(&(SEC, "scheduler 'rt' (fps) loaded")), "{names:?}");
    assert!(names.iter().any(|(at, n)| *at == 3 * SEC && n.starts_with("scheduler 'rt' unloaded")), "{names:?}");
    // Every slice decided by "rt" is on CPU 0 while rt is loaded; both schedulers decide.
    let cpu0 = p.tid_named(CPUS_PID as u64, "cpu0");
    let mut by_rt = 0;
    for ((pid, tid), xs) in &p.tracks {
        for x in xs.iter().filter(|x| x.sched == "rt") {
            by_rt += 1;
            assert!(x.start >= SEC && x.start < 3 * SEC, "{x:?}");
            if *pid == CPUS_PID as u64 {
                assert_eq!(*tid, cpu0, "{x:?}");
                assert!(["audio", "video", "burst"].contains(&x.name.as_str()), "{x:?}");
            }
        }
    }
    assert!(by_rt > 0, "no decision by rt");
    assert!(p.tracks.values().flatten().any(|x| x.sched == "ts"));
    // audio wakes each period while it exists.
    let audio = p.tid_named(TASKS_PID as u64, "audio");
    let wakes = p.marks[&(TASKS_PID as u64, audio)].iter().filter(|(_, n)| n == "wake").count();
    assert!(wakes >= 100, "audio woke {wakes} times");
}

#[test]
fn policy_logs_show_as_global_instants() {
    // BVT Figure 4: the looping player is unwarped at its warp time limit (paper 001 §2.2).
    let sc = load("experiments/bvt/fig4.toml", Some(500_000_000));
    let (report, json) = traced(&sc);
    let p = validate(&sc, &report, &json);
    let warp: Vec<_> = p.global.iter().filter(|(_, n, cat)| cat == "policy" && n.contains("warp time limit")).collect();
    assert_eq!(warp.len(), 1, "{:?}", p.global);
    assert_eq!(warp[0].0, 100_000_000);
    assert!(p.global.iter().any(|(at, n, cat)| *at == 50_000_000 && cat == "sim" && n.contains("infinite loop")));
}

#[test]
fn the_checks_catch_overlapping_slices() {
    // A trace no engine run produces: two slices overlap on cpu0 (and on hog.0's track).
    let sc = load("docs/examples/rr-hogs.toml", Some(100_000_000));
    let mut sim = Sim::new(sc.clone()).unwrap();
    sim.record_trace();
    let (report, mut trace) = sim.run_traced().unwrap();
    let first = trace.slices.iter().find(|s| s.cpu == 0).unwrap().clone();
    let mut bad = first.clone();
    bad.start = first.start + (first.end - first.start) / 2;
    bad.end = first.end + 1;
    trace.slices.push(bad);
    let json = to_chrome_json(&sc, &report, &trace);
    let err = std::panic::catch_unwind(|| validate(&sc, &report, &json)).expect_err("an overlap must fail the checks");
    let msg = err.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(msg.contains("overlaps"), "{msg}");
}

/// BVT Figure 3's trace carries the virtual-time counters: the warped player's E is its A
/// less the 50 ms warp (paper 001 §2.2); the hogs' E is their A.
#[test]
fn bvt_figure_3_trace_has_virtual_time_counters() {
    let sc = load("experiments/bvt/fig3.toml", Some(1_000_000_000));
    let (_, json) = traced(&sc);
    let v: Value = serde_json::from_str(&json).unwrap();
    let counters: Vec<&Value> = v["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == "C" && e["name"].as_str().unwrap().starts_with("virtual time "))
        .collect();
    for t in &sc.tasks {
        assert!(counters.iter().any(|e| e["name"] == format!("virtual time {}", t.name).as_str()), "{}", t.name);
    }
    let warped = counters.iter().filter(|e| e["name"] == "virtual time f3_mpeg" && e["args"]["A"] != e["args"]["E"]).count();
    assert!(warped > 0);
    for e in &counters {
        let (a, ev) = (e["args"]["A"].as_f64().unwrap(), e["args"]["E"].as_f64().unwrap());
        if e["name"] == "virtual time f3_mpeg" {
            assert!(a == ev || (a - ev - 50.0).abs() < 1e-6, "{e}");
        } else {
            assert_eq!(a, ev);
        }
    }
}

/// Swaps show on the task tracks; the swap-outs match the report's count.
#[test]
fn swaps_show_on_the_task_tracks() {
    let text = "until = \"20s\"\n[machine]\ncpus = 1\n[default]\npolicy = \"fb\"\n[memory]\nsize_kb = 100\nswap_seek = \"10ms\"\nswap_transfer = \"1ms\"\n\
        [[task]]\nname = \"ia\"\nsize_kb = 10\nbehaviour = { kind = \"script\", phases = [{ terminal = \"1s\" }, { run = \"5ms\" }, { times = 10 }] }\n\
        [[task]]\nname = \"hog\"\ncount = 3\nsize_kb = 45\nbehaviour = { kind = \"cpu\" }\n";
    let sc = vassal_sim::scenario::parse_scenario(text, "swap.toml").expect("scenario parses");
    let (report, json) = traced(&sc);
    let p = validate(&sc, &report, &json);
    let count = |what: &str| {
        p.marks.iter().filter(|((pid, _), _)| *pid == TASKS_PID as u64).flat_map(|(_, m)| m).filter(|(_, n)| n == what).count() as u64
    };
    assert!(report.kernel.swap_outs > 0, "the scenario swaps");
    // A swap-out is marked when the image stops being usable (its write begins) and
    // counted when the write ends: writes under way at the horizon are marked only.
    let outs = count("swap out");
    assert!(outs >= report.kernel.swap_outs && outs <= report.kernel.swap_outs + 4, "{outs} marks, {} counted", report.kernel.swap_outs);
    assert_eq!(count("swap in"), report.kernel.swap_ins);
}

/// Scheduler events fire on their scheduler's track: the reservation server's slot
/// boundaries, one per 20 ms slot.
#[test]
fn scheduler_events_show_on_their_schedulers_track() {
    let mut sc = load("experiments/rtserver/table2-sim.toml", None);
    sc.until = 400_000_000;
    let (report, json) = traced(&sc);
    let p = validate(&sc, &report, &json);
    let name = sc.schedulers[0].name.clone();
    let tid = p.tid_named(SCHEDS_PID as u64, &name);
    let events = &p.marks[&(SCHEDS_PID as u64, tid)];
    assert!(events.iter().all(|(_, n)| n == "event"));
    // Slot boundaries every 20 ms over 400 ms, whatever else the server also times.
    let boundaries = events.iter().filter(|(at, _)| at % 20_000_000 == 0).count();
    assert!(boundaries >= 19, "{boundaries} events at slot boundaries: {events:?}");
    let default_tid = p.tid_named(SCHEDS_PID as u64, &sc.default_name);
    assert!(!p.marks.contains_key(&(SCHEDS_PID as u64, default_tid)), "the default scheduler set no events");
}
