//! Loadable modules in the running agent (issue 8), with real processes: `vassal ctl
//! load/unload`, containment (one test per failure kind of sdk/examples/broken), a module
//! in the agent's config, and the prototyping loop of docs/modules.md.
//!
//! Root only (the agent changes other processes' scheduling); each test skips with a
//! message when not root or when the SDK's example modules cannot be built (no wasm32
//! target). Hard time limits: every agent runs under `timeout -s KILL 60`, every worker
//! stops by itself at a deadline and is killed with its parent, every wait is bounded,
//! and Drop guards kill and reap agents and workers on every path. Each test ends by
//! checking that none of its processes is left at a real-time policy.

#[path = "common/agent_proc.rs"]
mod agent_proc;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use agent_proc::{serial, wait_for, AgentProc};
use vassal_agent::kernel::{self, now_ns};
use vassal_agent::wire::{Answer, Call, EjectionRow, SchedRow, TaskRow};
use vassal_agent::workers::{self, Worker};

const MS: u64 = 1_000_000;
const SEC: u64 = 1_000_000_000;

/// The example module `name`, or None (with a message) when the test must skip.
fn ready(name: &str) -> Option<PathBuf> {
    if !kernel::is_root() {
        vassal_agent::skip::skip("needs root (it changes other processes' scheduling policy)");
        return None;
    }
    match vassal_module::example_path(name) {
        // As `vassal ctl load` sends it: absolute, canonical.
        Ok(p) => Some(p.canonicalize().expect("the example module exists")),
        Err(e) => {
            vassal_agent::skip::skip(&format!("the SDK's example modules are not built and cannot be: {e}"));
            None
        }
    }
}

/// The agent's answers the module tests read.
trait Views {
    fn hierarchy(&self) -> Vec<SchedRow>;
    fn names(&self) -> Vec<String>;
    fn tasks(&self) -> Vec<TaskRow>;
    fn ejections(&self) -> Vec<EjectionRow>;
}

impl Views for AgentProc {
    fn hierarchy(&self) -> Vec<SchedRow> {
        match self.client().call(&Call::Hierarchy) {
            Ok(Answer::Hierarchy { schedulers }) => schedulers,
            other => panic!("hierarchy: {other:?}"),
        }
    }
    fn names(&self) -> Vec<String> {
        self.hierarchy().into_iter().map(|s| s.name).collect()
    }
    fn tasks(&self) -> Vec<TaskRow> {
        self.client().tasks().expect("tasks")
    }
    fn ejections(&self) -> Vec<EjectionRow> {
        self.client().status().expect("status").ejections
    }
}

fn path_str(p: &Path) -> &str {
    p.to_str().expect("a UTF-8 path")
}

fn cpu_of(pid: i32) -> u64 {
    kernel::CpuClock::of_process(pid).and_then(|c| c.read()).unwrap_or(0)
}

/// CPU each process gets during `d`, ns.
fn cpu_during(pids: &[i32], d: Duration) -> Vec<u64> {
    let before: Vec<u64> = pids.iter().map(|&p| cpu_of(p)).collect();
    std::thread::sleep(d);
    pids.iter().zip(before).map(|(&p, b)| cpu_of(p).saturating_sub(b)).collect()
}

/// Every task is owned by `sched` in the agent's view.
fn all_under(agent: &AgentProc, pids: &[i32], sched: &str) -> bool {
    let rows = agent.tasks();
    pids.iter().all(|p| rows.iter().any(|r| r.pid == *p && r.sched == sched))
}

/// No process of `pids` is at a real-time policy (after the agent restored them).
fn none_real_time(pids: &[i32]) -> bool {
    pids.iter().all(|&p| {
        kernel::get_sched(p).map_or(true, |s| {
            let pol = s.policy & !kernel::RESET_ON_FORK;
            pol != libc::SCHED_FIFO && pol != libc::SCHED_RR
        })
    })
}

/// After the agent is gone: `ps` lists none of `pids` in a real-time class.
fn nothing_left_behind(pids: &[i32]) {
    let out = Command::new("ps").args(["-eo", "pid,cls,rtprio,stat,comm"]).output().expect("ps");
    let text = String::from_utf8_lossy(&out.stdout);
    for line in text.lines().skip(1) {
        let f: Vec<&str> = line.split_whitespace().collect();
        if let (Some(pid), Some(cls)) = (f.first().and_then(|p| p.parse::<i32>().ok()), f.get(1)) {
            assert!(!(pids.contains(&pid) && (*cls == "FF" || *cls == "RR")), "left at a real-time policy: {line}");
        }
    }
    assert!(none_real_time(pids));
}

/// `vassal ctl load/unload` (issue 8 item 2): only root loads; a refused load (a usage
/// conflict, a file that is not a module) changes nothing and says why; a module loaded
/// above another schedules its tasks; unloading hands them to the scheduler directly
/// below (the other module), then to the default, and every task keeps running — none
/// lost, none left parked. The agent logs each load and unload; `ctl hierarchy` marks
/// the modules.
#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn ctl_load_and_unload_hand_tasks_to_the_scheduler_below() {
    let Some(rr) = ready("rr") else { return };
    let _serial = serial();
    let agent = AgentProc::start("");
    let rr = path_str(&rr);
    let until = now_ns() + 20 * SEC;
    let hogs: Vec<Worker> = (0..3).map(|_| workers::hog(until).unwrap()).collect();
    let pids: Vec<i32> = hogs.iter().map(|h| h.pid).collect();

    let (ok, out) = agent.ctl_as(65534, &["load", rr, "--name", "lower"]);
    assert!(!ok && out.contains("only root may load"), "{out}");
    let (ok, out) = agent.ctl(&["load", rr, "--name", "lower", "--param", "quantum=5ms"]);
    assert!(ok, "{out}");
    let (ok, out) = agent.ctl(&["load", rr, "--name", "upper", "--above", "lower"]);
    assert!(ok, "{out}");
    assert_eq!(agent.names(), ["upper", "lower", "bvt"]);
    // Refused loads change nothing and say why.
    let (ok, out) = agent.ctl(&["load", rr, "--name", "big", "--param", "reserved=5"]);
    assert!(!ok && out.contains("conflicts with the hierarchy"), "{out}");
    let not_a_module = agent.dir.join("agent.toml");
    let (ok, out) = agent.ctl(&["load", path_str(&not_a_module), "--name", "junk"]);
    assert!(!ok && out.contains("not a valid WebAssembly module"), "{out}");
    let (ok, out) = agent.ctl(&["load", rr, "--name", "x", "--below", "bvt"]);
    assert!(!ok && out.contains("default scheduler"), "{out}");
    let (ok, out) = agent.ctl(&["load", rr, "--name", "upper"]);
    assert!(!ok && out.contains("already registered"), "{out}");
    assert_eq!(agent.names(), ["upper", "lower", "bvt"]);
    let h = agent.hierarchy();
    assert!(h[0].module.as_deref().is_some_and(|m| m.ends_with("vassal_module_rr.wasm")) && h[1].module.is_some() && h[2].module.is_none());
    let (ok, out) = agent.ctl(&["hierarchy"]);
    assert!(ok && out.lines().filter(|l| l.contains(" module ")).count() == 2, "{out}");

    let mut c = agent.client();
    for &p in &pids {
        c.join_pid(p, Some("upper"), Default::default()).expect("join upper");
    }
    assert!(all_under(&agent, &pids, "upper"));
    let got = cpu_during(&pids, Duration::from_millis(600));
    assert!(got.iter().all(|&g| g > 50 * MS), "under the module, some task did not run: {got:?}");
    assert!(agent.hierarchy()[0].decided > 0);

    let (ok, out) = agent.ctl(&["unload", "upper"]);
    assert!(ok, "{out}");
    assert_eq!(agent.names(), ["lower", "bvt"]);
    assert!(all_under(&agent, &pids, "lower"), "{:?}", agent.tasks());
    let got = cpu_during(&pids, Duration::from_millis(600));
    assert!(got.iter().all(|&g| g > 50 * MS), "after unloading 'upper', some task did not run: {got:?}");

    let (ok, out) = agent.ctl(&["unload", "lower"]);
    assert!(ok, "{out}");
    assert!(all_under(&agent, &pids, "bvt"));
    let got = cpu_during(&pids, Duration::from_millis(600));
    assert!(got.iter().all(|&g| g > 50 * MS), "after unloading 'lower', some task did not run: {got:?}");

    let (ok, out) = agent.ctl(&["unload", "bvt"]);
    assert!(!ok && out.contains("not a loaded module"), "{out}");
    let (ok, out) = agent.ctl(&["unload", "nope"]);
    assert!(!ok && out.contains("no module named 'nope'"), "{out}");

    let log = agent.log();
    assert!(log.contains("loaded module") && log.contains("as scheduler 'upper'"), "{log}");
    assert!(log.contains("load of module") && log.contains("refused"), "{log}");
    let moved: Vec<String> = pids.iter().map(|p| format!("{p} -> lower")).collect();
    assert!(log.contains(&format!("unloaded module scheduler 'upper' ({rr}); tasks [{}]", moved.join(", "))), "{log}");
    drop(agent);
    nothing_left_behind(&pids);
}

/// One failure kind of sdk/examples/broken (its `fail` parameter), in the agent:
/// three tasks of the module (two hogs and a periodic task that blocks between bursts)
/// and one hog of the default scheduler. The module is ejected for `reason`; its three
/// tasks go to the default scheduler (`bvt`) and keep running; the ejection is in
/// `ctl status` and in the agent's log; nothing is left behind.
fn ejected(fail: &str, reason: &str) {
    let Some(broken) = ready("broken") else { return };
    let _serial = serial();
    let agent = AgentProc::start("");
    let until = now_ns() + 15 * SEC;
    // The module's tasks sleep until `start`, so all three are joined before they run:
    // once they do, the module's selected tasks are SCHED_FIFO on both CPUs and this
    // (SCHED_OTHER) test and the broker's reading would be slowed by them.
    let start = now_ns() + 500 * MS;
    let delayed_hog = || workers::periodic(start, MS, 0, 1, until).unwrap();
    let mine: Vec<Worker> = vec![delayed_hog(), delayed_hog(), workers::periodic(start, 10 * MS, 2 * MS, 1000, 0).unwrap()];
    let other = workers::hog(until).unwrap();
    let pids: Vec<i32> = mine.iter().map(|w| w.pid).collect();
    // It fails after `after` decisions while it has tasks (the dispatcher asks it at
    // every decision on either CPU): a fraction of a second once its tasks run.
    // A declared share of 1.5 CPUs: its tasks together get at most that (issue 17), so
    // with the SDK's default of 0.5 they would be off the CPUs most of the time and the
    // module asked for 300 decisions only after several seconds.
    // The watchdog (1 s by default) is what the "starve" kind tests; for the others it
    // is set far out, so that on a loaded machine, where the 300 decisions took 2.2 s in
    // a CI run, a task the module leaves waiting does not get it ejected for starving
    // before the failure under test.
    let watchdog = if fail == "starve" { "1s" } else { "60s" };
    let (ok, out) = agent.ctl(&[
        "load",
        path_str(&broken),
        "--name",
        "proto",
        "--param",
        &format!("fail={fail}"),
        "--param",
        "after=300",
        "--param",
        "reserved=1.5",
        "--watchdog",
        watchdog,
    ]);
    assert!(ok, "{fail}: {out}");
    let mut c = agent.client();
    c.join_pid(other.pid, None, Default::default()).expect("join the default");
    for &p in &pids {
        c.join_pid(p, Some("proto"), Default::default()).unwrap_or_else(|e| panic!("{fail}: join: {e}; {}", agent.log()));
    }
    let t0 = Instant::now();
    assert!(all_under(&agent, &pids, "proto"), "{fail}: joined, before they run: {:?}", agent.tasks());
    assert!(
        wait_for(Duration::from_secs(10), || !agent.ejections().is_empty()).is_some(),
        "{fail}: not ejected within 10 s: {}",
        agent.log()
    );
    eprintln!("{fail}: ejected {:?} after the joins", t0.elapsed());
    let e = agent.ejections().remove(0);
    assert_eq!(e.name, "proto");
    assert!(e.reason.contains(reason), "{fail}: reason '{}' does not say '{reason}'", e.reason);
    // Every task it had went to the scheduler below (the default), and is there now.
    let moved: Vec<String> = pids.iter().map(|p| format!("{p} -> bvt")).collect();
    assert_eq!(e.moved, moved, "{fail}");
    assert!(all_under(&agent, &pids, "bvt"), "{fail}: {:?}", agent.tasks());
    assert_eq!(agent.names(), ["bvt"]);
    let (ok, out) = agent.ctl(&["status"]);
    assert!(ok && out.contains("module scheduler 'proto'") && out.contains(reason), "{fail}: {out}");
    assert!(agent.log().contains(&format!("module scheduler 'proto' ({}) ejected: ", path_str(&broken))), "{}", agent.log());
    // The system goes on: each of the module's tasks keeps running under the default
    // (the hogs share 2 CPUs with the default's hog; the periodic task burns 20%).
    // BVT serves them by their virtual times, which differ after the module's reign (a
    // task the module kept waiting may wait up to ~1 s more while the others catch up:
    // seen with `starve`; with `not_runnable`, the periodic task got 15 ms in the first
    // 1.5 s, 29 ms and 59 ms in the first 3 s, against ~600 ms in other runs), so each
    // gets up to 6 s to show it runs again.
    let before: Vec<u64> = pids.iter().map(|&p| cpu_of(p)).collect();
    let got = || pids.iter().zip(&before).map(|(&p, &b)| cpu_of(p).saturating_sub(b)).collect::<Vec<u64>>();
    let took = wait_for(Duration::from_secs(6), || got().iter().all(|&g| g > 30 * MS));
    eprintln!("{fail}: CPU of its tasks after the ejection: {:?}, 30 ms each within {took:?}", got());
    assert!(took.is_some(), "{fail}: after the ejection, CPU in 6 s: {:?}; the agent's view: {:?}", got(), agent.tasks());
    drop(agent);
    let mut all = pids.clone();
    all.push(other.pid);
    nothing_left_behind(&all);
}

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn agent_ejects_a_trapping_module() {
    ejected("trap", "trapped");
}

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn agent_ejects_a_module_past_its_fuel_budget() {
    ejected("fuel", "ran past its time budget");
}

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn agent_ejects_a_module_past_its_memory_limit() {
    ejected("memory", "exceeded its memory limit");
}

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn agent_ejects_a_module_picking_a_task_not_its_own() {
    ejected("not_yours", "task belongs to another scheduler");
}

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn agent_ejects_a_module_picking_a_blocked_task() {
    ejected("not_runnable", "task is not runnable");
}

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn agent_ejects_a_module_starving_its_tasks_by_the_watchdog() {
    ejected("starve", "watchdog");
}

/// A module in the agent's config (issue 8 item 3): `module = "path"` in a `[[scheduler]]`
/// is loaded at start, contained, shown as a module, and schedules the tasks that join
/// it; a module as the default scheduler, or a missing file, stops the agent with a clear
/// message.
#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn a_module_in_the_config_is_loaded_at_start() {
    let Some(stride) = ready("stride") else { return };
    let _serial = serial();
    let agent = AgentProc::start(&format!(
        "[[scheduler]]\nname = \"proto\"\nmodule = \"{}\"\nparams = {{ reserved = 0.4 }}\nwatchdog = \"2s\"\n",
        path_str(&stride)
    ));
    let h = agent.hierarchy();
    assert_eq!(h[0].name, "proto");
    assert_eq!(h[0].usage, "reserved 40.0% of one CPU");
    assert_eq!(h[0].module.as_deref(), Some(path_str(&stride)));
    let until = now_ns() + 10 * SEC;
    let hogs: Vec<Worker> = (0..2).map(|_| workers::hog(until).unwrap()).collect();
    let pids: Vec<i32> = hogs.iter().map(|h| h.pid).collect();
    let mut c = agent.client();
    for &p in &pids {
        c.join_pid(p, Some("proto"), Default::default()).expect("join proto");
    }
    let got = cpu_during(&pids, Duration::from_millis(500));
    assert!(got.iter().all(|&g| g > 50 * MS), "{got:?}");
    assert!(agent.hierarchy()[0].decided > 0);
    assert!(agent.log().contains("loaded module") && agent.log().contains("as scheduler 'proto'"), "{}", agent.log());
    // The module goes like any loaded one.
    let (ok, out) = agent.ctl(&["unload", "proto"]);
    assert!(ok, "{out}");
    assert!(all_under(&agent, &pids, "bvt"));
    drop(agent);
    nothing_left_behind(&pids);

    // Bad configs: the agent refuses to start and says why.
    for (cfg, why) in [
        ("[default]\nmodule = \"x.wasm\"\n".to_string(), "the default scheduler cannot be a module"),
        (
            "[[scheduler]]\nname = \"m\"\nmodule = \"/nonexistent/m.wasm\"\n".to_string(),
            "scheduler 'm': module /nonexistent/m.wasm: cannot read module file",
        ),
    ] {
        let (status, log) = AgentProc::run_to_exit(&cfg);
        assert!(!status.success() && log.contains(why), "{cfg}: {status:?} {log}");
    }
}

/// The prototyping loop of docs/modules.md, as a user runs it against a running agent:
/// edit a module's source (a copy of sdk/examples/rr, its kind renamed), build it with
/// cargo for wasm32, `vassal ctl load` it, observe its tasks in `vassal ctl tasks` (under
/// the module, with their share and latency), `vassal ctl unload` it, and see the tasks
/// back under the scheduler below.
#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn the_prototyping_loop_against_a_running_agent() {
    let Some(_) = ready("rr") else { return };
    let _serial = serial();
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap();
    let sdk = repo.join("sdk");
    // 1. Edit: a crate of one's own, from the rr example, with a visible change.
    let work = std::env::temp_dir().join(format!("vassal-proto-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(work.join("src")).unwrap();
    let src = std::fs::read_to_string(sdk.join("examples/rr/src/lib.rs")).unwrap();
    assert!(src.contains("\"rr.wasm\""));
    std::fs::write(work.join("src/lib.rs"), src.replace("\"rr.wasm\"", "\"myrr.wasm\"")).unwrap();
    std::fs::write(
        work.join("Cargo.toml"),
        format!(
            "[package]\nname = \"myrr\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[lib]\ncrate-type = [\"cdylib\"]\n\n\
             [dependencies]\nvassal-sdk = {{ path = \"{}\" }}\n\n\
             [profile.release]\nopt-level = 3\nlto = true\ncodegen-units = 1\npanic = \"abort\"\n\n[workspace]\n",
            sdk.join("vassal-sdk").display()
        ),
    )
    .unwrap();
    // The SDK's lock file pins the same dependency versions (the build is offline).
    std::fs::copy(sdk.join("Cargo.lock"), work.join("Cargo.lock")).unwrap();
    // 2. Build. The SDK's target directory is shared, so its already-built dependencies
    // are reused rather than rebuilt.
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(&cargo)
        .args(["build", "--release", "--offline", "--target", "wasm32-unknown-unknown"])
        .current_dir(&work)
        .env("CARGO_TARGET_DIR", sdk.join("target"))
        .output()
        .expect("run cargo");
    assert!(out.status.success(), "building the edited module: {}", String::from_utf8_lossy(&out.stderr));
    let module = sdk.join("target/wasm32-unknown-unknown/release/myrr.wasm");
    assert!(module.exists());
    let _ = std::fs::remove_dir_all(&work);

    let agent = AgentProc::start("");
    let until = now_ns() + 15 * SEC;
    let hogs: Vec<Worker> = (0..3).map(|_| workers::hog(until).unwrap()).collect();
    let pids: Vec<i32> = hogs.iter().map(|h| h.pid).collect();
    let ps: Vec<String> = pids.iter().map(|p| p.to_string()).collect();
    // 3. Load it, and put tasks under it.
    // (It declares 1.5 CPUs: since issue 17 its tasks together get at most what it
    // declares, and the SDK's default, 0.5, would leave each of three hogs a sixth.)
    let (ok, out) = agent.ctl(&["load", path_str(&module), "--name", "proto", "--param", "quantum=5ms", "--param", "reserved=1.5"]);
    assert!(ok, "{out}");
    for p in &ps {
        let (ok, out) = agent.ctl(&["join", p, "--sched", "proto"]);
        assert!(ok && out.contains("joined proto"), "{out}");
    }
    let (ok, out) = agent.ctl(&["hierarchy"]);
    assert!(ok && out.lines().any(|l| l.starts_with("proto") && l.contains("myrr.wasm") && l.contains(" module ")), "{out}");
    // 4. Observe: after a second, each task under the module with its share (and its
    // dispatch latency, which these hogs, never blocking, hardly have).
    std::thread::sleep(Duration::from_millis(1200));
    let (ok, out) = agent.ctl(&["tasks"]);
    assert!(ok && out.contains("share") && out.contains("lat p99"), "{out}");
    let rows = agent.tasks();
    for p in &pids {
        let r = rows.iter().find(|r| r.pid == *p).expect("listed");
        assert_eq!(r.sched, "proto");
        // Three tasks on two CPUs in 5 ms quanta, 1.5 CPUs in all: about half a CPU each.
        assert!(r.share > 0.2, "share {} under the module: {out}", r.share);
        assert!(out.lines().any(|l| l.trim_start().starts_with(&p.to_string()) && l.contains(" proto ")), "{out}");
    }
    // 5. Unload: the tasks are back under the scheduler below and keep running.
    let (ok, out) = agent.ctl(&["unload", "proto"]);
    assert!(ok, "{out}");
    let (_, out) = agent.ctl(&["tasks"]);
    for p in &ps {
        assert!(out.lines().any(|l| l.trim_start().starts_with(p.as_str()) && l.contains(" bvt ")), "{out}");
    }
    let got = cpu_during(&pids, Duration::from_millis(600));
    assert!(got.iter().all(|&g| g > 50 * MS), "{got:?}");
    let _ = std::fs::remove_file(&module);
    drop(agent);
    nothing_left_behind(&pids);
}
