//! `vassal twin`'s real side (docs/twin.md): the real rt-app runs a workload with its
//! threads under the agent, or under the kernel (`--kernel`), and the side-by-side
//! result has every thread on both sides; the real Perfetto trace decodes with the
//! schema and names rt-app's threads; afterwards neither rt-app nor the agent is left,
//! and no thread of the machine is left at a real-time policy by the run.
//!
//! Root only (`#[ignore]`, run by scripts/test.sh as root); each run is bounded by
//! `timeout -s KILL` around `vassal twin`, which itself kills rt-app and the agent at a
//! hard limit. Skipped (with the reason) where rt-app is not installed.

use std::path::PathBuf;
use std::process::Command;

fn root_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Whether the test can run: root and rt-app; else it says why (scripts/test.sh counts it).
fn can_run() -> bool {
    if !vassal_agent::kernel::is_root() {
        vassal_agent::skip::skip("needs root (vassal twin's real side runs the agent)");
        return false;
    }
    if Command::new("rt-app").output().is_err() {
        vassal_agent::skip::skip("rt-app is not installed (apt-get install rt-app)");
        return false;
    }
    true
}

static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// `vassal twin FILE ARGS --json --out DIR` under a hard limit; the parsed JSON.
fn twin(file: &str, args: &[&str], out: &std::path::Path) -> serde_json::Value {
    let res = Command::new("timeout")
        .args(["-s", "KILL", "90"])
        .arg(env!("CARGO_BIN_EXE_vassal"))
        .arg("twin")
        .arg(root_dir().join("docs/examples/rt-app").join(file))
        .args(args)
        .args(["--json", "--out"])
        .arg(out)
        .current_dir(root_dir())
        .output()
        .expect("run vassal twin");
    let (stdout, stderr) = (String::from_utf8_lossy(&res.stdout), String::from_utf8_lossy(&res.stderr));
    assert!(res.status.success(), "vassal twin {file} {args:?}: {}\n{stdout}\n{stderr}", res.status);
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

fn gone(pid: i64) -> bool {
    !PathBuf::from(format!("/proc/{pid}")).exists()
}

/// No thread on the machine is at SCHED_FIFO/RR with one of `names` (rt-app's threads).
fn no_realtime_leftover(names: &[&str]) {
    for p in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(tasks) = std::fs::read_dir(p.path().join("task")) else { continue };
        for t in tasks.flatten() {
            let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
            if !names.contains(&comm.trim()) {
                continue;
            }
            let stat = std::fs::read_to_string(t.path().join("stat")).unwrap_or_default();
            let after = stat.rsplit_once(") ").map_or("", |x| x.1).split_whitespace().collect::<Vec<_>>();
            // field 41 (policy) is index 38 after the comm
            let policy: i32 = after.get(38).and_then(|x| x.parse().ok()).unwrap_or(0);
            assert!(policy != 1 && policy != 2, "{} ({}) left at policy {policy}", t.path().display(), comm.trim());
        }
    }
}

fn thread<'a>(j: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    j["threads"].as_array().unwrap().iter().find(|t| t["name"] == name).unwrap_or_else(|| panic!("no thread {name}: {j}"))
}

/// The periodic set under the agent: both sides have every thread, rt-app logged rows
/// for each, the simulated shares are what the file asks (audio 1 of 5 ms, control 2 of
/// 10, video 6 of 16.667: 0.2, 0.2, 0.36, times rt-app's loop speed over its whole-ns
/// calibration, within a few percent), the kernel's trace is Perfetto protobuf with
/// rt-app's threads switching, the output files are there, and afterwards rt-app and the
/// agent are gone and no thread of rt-app's names is left at a real-time policy. How
/// well the agent then schedules them is `the_agent_keeps_every_thread_running`.
#[test]
#[ignore = "needs root: runs rt-app under the agent"]
fn the_periodic_set_runs_under_the_agent_and_leaves_nothing() {
    if !can_run() {
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = std::env::temp_dir().join(format!("twin-test-{}", std::process::id()));
    let j = twin("twin-periodic.json", &["--duration", "2s"], &dir);
    assert!(j["real"]["mode"].as_str().unwrap().starts_with("agent"), "{j}");
    assert_eq!(j["threads"].as_array().unwrap().len(), 5);
    for (name, share) in [("audio", 0.2), ("control", 0.2), ("video", 0.36)] {
        let t = thread(&j, name);
        let sim = t["sim"]["cpu_share"].as_f64().unwrap();
        assert!((share * 0.95..share * 1.1).contains(&sim), "{name}: simulated share {sim}, asked {share}");
        assert!(t["real"]["iterations"].as_u64().unwrap() > 0, "{name}: {}", t["real"]);
        assert!(t["real"]["cpu_share"].as_f64().unwrap() > 0.0, "{name}: {}", t["real"]);
        assert!(t["sim_minus_real"]["cpu_share"].is_number());
    }
    // the kernel's trace of the run: Perfetto protobuf with rt-app's threads switching
    let bytes = std::fs::read(dir.join("real.pftrace")).unwrap();
    let trace = vassal_perfetto::decode(&bytes).unwrap();
    let names: Vec<String> = trace
        .packet
        .iter()
        .filter(|p| p.has_process_tree())
        .flat_map(|p| p.process_tree().threads.iter().map(|t| t.name().to_string()))
        .collect();
    for n in ["audio", "control", "video", "hog"] {
        assert!(names.iter().any(|x| x == n), "{n} not in the trace: {names:?}");
    }
    let switches = trace
        .packet
        .iter()
        .filter(|p| p.has_ftrace_events())
        .flat_map(|p| p.ftrace_events().event.iter())
        .filter(|e| e.has_sched_switch() && e.sched_switch().next_comm() == "audio")
        .count();
    assert!(switches > 0, "audio was never switched in");
    // the agent's own decisions, as Perfetto too: audio selected, its spans ending asleep
    let bytes = std::fs::read(dir.join("real/agent.pftrace")).expect("the agent's trace");
    let trace = vassal_perfetto::decode(&bytes).unwrap();
    let audio: Vec<i32> = trace
        .packet
        .iter()
        .filter(|p| p.has_process_tree())
        .flat_map(|p| p.process_tree().threads.iter().filter(|t| t.name() == "audio").map(|t| t.tid()))
        .collect();
    assert_eq!(audio.len(), 1, "audio declared once in the agent's trace");
    let asleep = trace
        .packet
        .iter()
        .filter(|p| p.has_ftrace_events())
        .flat_map(|p| p.ftrace_events().event.iter())
        .filter(|e| e.has_sched_switch() && e.sched_switch().prev_pid() == audio[0] && e.sched_switch().prev_state() == 1)
        .count();
    assert!(asleep > 100, "the agent selected audio and saw it block: {asleep} spans");
    assert!(dir.join("sim.pftrace").is_file() && dir.join("twin.html").is_file() && dir.join("real/twin-audio-0.log").is_file());
    assert!(gone(j["real"]["rtapp_pid"].as_i64().unwrap()), "rt-app is gone");
    assert!(gone(j["real"]["agent_pid"].as_i64().unwrap()), "the agent is gone");
    no_realtime_leftover(&["audio", "control", "video", "hog"]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// What the twin should show under the agent: each SCHED_FIFO thread of the periodic set
/// and of the mutex pair gets about what it asks (a band of −25 %/+30 % of its share is
/// room for this shared VM) and runs nearly all its periods, as it does under the kernel.
/// "What it asks" is its run time at the speed of this run: rt-app calibrates its loop
/// once at start, and on this shared host the same loop later takes 0.87–1.2 times as
/// long (measured: one thread's share 0.177–0.254 of an asked 0.2 over three runs; a CI
/// run failed at 0.262 against a fixed band), and in a slow hour 1.6–1.9 times (a CI run
/// saw audio's 1 ms take 1.912 ms). The speed is the median run of the highest-priority
/// thread over what it asks (audio's 1 ms; the writer's 2.5 ms): its run is CPU time, not
/// preemption. Where it is out of [`PERIODIC_SPEED`] or [`MUTEX_SPEED`] the workload is
/// not the one the file asks (at 1.9 the mutex pair needs more of its lock than there
/// is), so that run is tried again, up to [`ATTEMPTS`] times, and if no run is at a
/// speed the claims hold for, the test is skipped with the speeds it saw, never passed.
/// Before the BPF programs told a missed wake when the thread is seen running
/// (sched.bpf.c, RUNNING), the agent lost such threads for up to seconds and this failed
/// in most runs (the reader 49-258 of 714 periods in 5 s; then 710-713). A thread whose
/// wake was missed and that could not run (parked on a busy CPU) was still lost until the
/// kernel gave it a slice: a CI run once saw the writer run 26 of its 200 periods. Now
/// the agent audits the threads it believes blocked every 20 ms (state/pass.rs).
#[test]
#[ignore = "needs root: runs rt-app under the agent"]
fn the_agent_keeps_every_thread_running() {
    if !can_run() {
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = std::env::temp_dir().join(format!("twin-test-s-{}", std::process::id()));
    let Some((j, speed)) = at_speed("twin-periodic.json", "audio", 1000.0, PERIODIC_SPEED, &dir) else { return };
    for (name, share, period_ms) in [("audio", 0.2, 5.0), ("control", 0.2, 10.0), ("video", 0.36, 16.667)] {
        let t = thread(&j, name);
        let real = t["real"]["cpu_share"].as_f64().unwrap();
        let asked = share * speed;
        assert!((asked * 0.75..asked * 1.3).contains(&real), "{name}: real share {real}, asked {share} × speed {speed}: {}", t["real"]);
        let timed = t["real"]["timed"].as_u64().unwrap() as f64;
        assert!(timed > 0.9 * 2000.0 / period_ms, "{name}: {timed} periods: {}", t["real"]);
        assert!((t["real"]["missed"].as_u64().unwrap() as f64) < 0.05 * timed, "{name}: {}", t["real"]);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The mutex pair under the agent, as [`the_agent_keeps_every_thread_running`] judges the
/// periodic set: each thread runs nearly all its periods. A test of its own, so that a
/// periodic set skipped for the host's speed does not leave the pair unjudged (each test
/// skips or is judged on its own speed).
#[test]
#[ignore = "needs root: runs rt-app under the agent"]
fn the_agent_keeps_the_mutex_pair_running() {
    if !can_run() {
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = std::env::temp_dir().join(format!("twin-test-mp-{}", std::process::id()));
    let Some((j, _)) = at_speed("twin-mutex.json", "writer", 2500.0, MUTEX_SPEED, &dir) else { return };
    for (name, period_ms) in [("writer", 10.0), ("reader", 7.0)] {
        let t = thread(&j, name);
        let timed = t["real"]["timed"].as_u64().unwrap() as f64;
        assert!(timed > 0.9 * 2000.0 / period_ms, "{name}: {timed} periods: {}; the run: {}", t["real"], j["real"]);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The loop speeds (a run's time over the time asked) at which the periodic set is the
/// workload its file asks: its 76 % of a CPU stays under one CPU of the two.
const PERIODIC_SPEED: std::ops::Range<f64> = 0.6..1.35;
/// The same for the mutex pair, whose lock is held 63 % of the time at speed 1: at 1.2,
/// 76 %, and the writer still has room for its wake-up (a CI run at 1.338 had the lock
/// held 84 % of the time and the writer ran 178 of its 200 periods, 44 of them late).
const MUTEX_SPEED: std::ops::Range<f64> = 0.6..1.2;
/// How many runs [`at_speed`] tries before it skips.
const ATTEMPTS: usize = 3;

/// `vassal twin FILE --duration 2s` until `probe` (the highest-priority thread, asking
/// `asked_us` per period) runs at a speed in `band`; the run and its speed, or `None`
/// (the test skipped, with every speed seen) after [`ATTEMPTS`] runs out of it.
fn at_speed(file: &str, probe: &str, asked_us: f64, band: std::ops::Range<f64>, dir: &std::path::Path) -> Option<(serde_json::Value, f64)> {
    let mut seen = Vec::new();
    for _ in 0..ATTEMPTS {
        let j = twin(file, &["--duration", "2s"], dir);
        let speed = thread(&j, probe)["real"]["run_p50_us"].as_f64().unwrap_or_else(|| panic!("{probe} never ran: {j}")) / asked_us;
        if band.contains(&speed) {
            return Some((j, speed));
        }
        eprintln!("{file}: {probe} ran its {asked_us} µs at {speed:.3} times that; run again");
        seen.push(format!("{speed:.3}"));
    }
    vassal_agent::skip::skip(&format!(
        "{file}: the host ran rt-app's loop at {} times its calibrated speed in {ATTEMPTS} runs (the claims hold in {band:?})",
        seen.join(", ")
    ));
    let _ = std::fs::remove_dir_all(dir);
    None
}

/// The baseline (`--kernel`): the pipeline runs under the kernel's own scheduler; the
/// decoder and the renderer are woken by resume and log their frames; vsync (SCHED_FIFO,
/// set by rt-app itself) wakes on time.
#[test]
#[ignore = "needs root: runs rt-app at SCHED_FIFO"]
fn the_pipeline_runs_under_the_kernel() {
    if !can_run() {
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = std::env::temp_dir().join(format!("twin-test-k-{}", std::process::id()));
    let j = twin("twin-pipeline.json", &["--kernel", "--duration", "2s"], &dir);
    assert!(j["real"]["mode"].as_str().unwrap().starts_with("kernel"), "{j}");
    let vsync = thread(&j, "vsync");
    assert!(vsync["real"]["timed"].as_u64().unwrap() >= 100, "{vsync}");
    assert!(vsync["real"]["wu_lat_p50_us"].as_f64().unwrap() < 1000.0, "{vsync}");
    for n in ["decoder", "renderer"] {
        let t = thread(&j, n);
        assert!(t["real"]["iterations"].as_u64().unwrap() >= 20, "{n}: {t}");
        assert!(t["sim"]["iterations"].as_u64().unwrap() >= 100, "{n}: {t}");
    }
    assert!(gone(j["real"]["rtapp_pid"].as_i64().unwrap()));
    assert_eq!(j["real"]["agent_pid"], serde_json::Value::Null);
    no_realtime_leftover(&["vsync", "decoder", "renderer", "hog"]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The mutex pair under the agent runs to its end and leaves nothing behind (how well it
/// is scheduled: `the_agent_keeps_the_mutex_pair_running`); in the simulation the lock is
/// handed over every period: the writer runs its 2.5 ms and the reader its 3.5 ms per
/// period (times rt-app's loop speed) and neither misses one.
#[test]
#[ignore = "needs root: runs rt-app under the agent"]
fn the_mutex_pair_runs_under_the_agent() {
    if !can_run() {
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = std::env::temp_dir().join(format!("twin-test-m-{}", std::process::id()));
    let j = twin("twin-mutex.json", &["--duration", "2s"], &dir);
    for (n, run_us, period_ms) in [("writer", 2500.0, 10.0), ("reader", 3500.0, 7.0)] {
        let t = thread(&j, n);
        let run = t["sim"]["run_p50_us"].as_f64().unwrap();
        assert!((run_us * 0.95..run_us * 1.05).contains(&run), "{n}: simulated run {run}");
        assert_eq!(t["sim"]["missed"], 0, "{n}: {}", t["sim"]);
        assert!(t["sim"]["timed"].as_u64().unwrap() as f64 >= 2000.0 / period_ms - 1.0, "{n}: {}", t["sim"]);
        assert!(t["real"]["iterations"].as_u64().unwrap() > 0, "{n}: {}", t["real"]);
    }
    assert!(gone(j["real"]["rtapp_pid"].as_i64().unwrap()));
    assert!(gone(j["real"]["agent_pid"].as_i64().unwrap()));
    no_realtime_leftover(&["writer", "reader", "hog"]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `vassal calibrate` measures this machine into a model file `vassal twin` reads back:
/// the CPUs online, a tick rate, costs that are positive and ordered (p50 ≤ p99), rt-app's
/// loop (Debian's rt-app is installed here) and the agent's wake-ups; and it leaves no
/// agent behind.
#[test]
#[ignore = "needs root: measures with SCHED_FIFO threads and an agent"]
fn calibrate_writes_a_model_twin_reads() {
    if !can_run() {
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let file = std::env::temp_dir().join(format!("twin-test-machine-{}.toml", std::process::id()));
    let res = Command::new("timeout")
        .args(["-s", "KILL", "90"])
        .arg(env!("CARGO_BIN_EXE_vassal"))
        .args(["calibrate", "--out"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(res.status.success(), "{}", String::from_utf8_lossy(&res.stderr));
    let m = vassal_lab::calibrate::MachineModel::read(&file).unwrap();
    assert_eq!(m.cpus, vassal_agent::kernel::online_cpus());
    assert!([100, 250, 300, 1000].contains(&m.hz), "{m:?}");
    assert!(m.switch_cost_ns > 0 && m.switch_cost_ns < 100_000, "{m:?}");
    assert!(m.wake_latency_ns > 0 && m.wake_latency_ns <= m.wake_latency_p99_ns, "{m:?}");
    let l = m.rtapp_ns_per_loop.expect("rt-app measured");
    assert!((1.0..1000.0).contains(&l), "{m:?}");
    let a = m.agent_wake_latency_ns.expect("the agent measured");
    assert!(a > 0 && Some(a) <= m.agent_wake_latency_p99_ns, "{m:?}");
    // the model drives a simulated twin run
    let res = Command::new(env!("CARGO_BIN_EXE_vassal"))
        .arg("twin")
        .arg(root_dir().join("docs/examples/rt-app/twin-periodic.json"))
        .args(["--sim-only", "--duration", "200ms", "--machine"])
        .arg(&file)
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&res.stdout);
    assert!(res.status.success() && out.contains("vassal calibrate, Linux"), "{out}");
    let _ = std::fs::remove_file(&file);
}
