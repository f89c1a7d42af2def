//! Loaded schedulers' classes in the agent (issue 17 item 2; paper 000 §8's hard time,
//! reserved share, best effort; docs/agent.md, "Classes"): a best-effort loaded
//! scheduler's tasks share the CPU by its policy without ever running real-time (so a
//! fair-share policy can host any number of CPU-bound tasks without tripping the
//! kernel's RT throttling), and a reserved scheduler's tasks together get at most its
//! declared share, measured while it runs.
//!
//! Root only (the agent changes other processes' scheduling); hard time limits as in
//! agent.rs: the agent runs under `timeout -s KILL 60`, every worker stops by itself at a
//! deadline and dies with the test, Drop guards kill and reap.

#[path = "common/agent_proc.rs"]
mod agent_proc;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use agent_proc::{root, serial, stopped, AgentProc};
use vassal_agent::kernel::{self, now_ns};
use vassal_agent::wire::{Answer, Call, SchedRow};
use vassal_agent::workers::{self, Worker};

const SEC: u64 = 1_000_000_000;

fn cpu_ns(pid: i32) -> u64 {
    kernel::CpuClock::of_process(pid).and_then(|c| c.read()).unwrap_or(0)
}

fn hierarchy(agent: &AgentProc) -> Vec<SchedRow> {
    match agent.client().call(&Call::Hierarchy) {
        Ok(Answer::Hierarchy { schedulers }) => schedulers,
        other => panic!("hierarchy: {other:?}"),
    }
}

/// Watches `pids` every millisecond from a thread until dropped: whether any was ever
/// seen at a real-time policy. (A sampler at SCHED_OTHER cannot see a real-time task
/// that holds every CPU; these tasks are never supposed to be real-time, so one that
/// was would have let the sampler run on the other CPU at some point.)
struct RtWatch {
    stop: Arc<AtomicBool>,
    seen: Arc<AtomicU64>,
    samples: Arc<AtomicU64>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl RtWatch {
    fn new(pids: Vec<i32>) -> RtWatch {
        let (stop, seen, samples) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let (st, se, sa) = (stop.clone(), seen.clone(), samples.clone());
        let thread = std::thread::spawn(move || {
            while !st.load(Ordering::Relaxed) {
                for &p in &pids {
                    let rt =
                        kernel::get_sched(p).is_ok_and(|s| matches!(s.policy & !kernel::RESET_ON_FORK, libc::SCHED_FIFO | libc::SCHED_RR));
                    se.fetch_add(u64::from(rt), Ordering::Relaxed);
                    sa.fetch_add(1, Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        });
        RtWatch { stop, seen, samples, thread: Some(thread) }
    }
    /// (samples at a real-time policy, samples).
    fn finish(mut self) -> (u64, u64) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        (self.seen.load(Ordering::Relaxed), self.samples.load(Ordering::Relaxed))
    }
}

/// The CPU each of `pids` used over `dur`, in CPUs.
fn shares(pids: &[i32], dur: u64) -> Vec<f64> {
    let c0: Vec<u64> = pids.iter().map(|&p| cpu_ns(p)).collect();
    let t0 = now_ns();
    kernel::sleep_until(t0 + dur);
    let wall = (now_ns() - t0) as f64;
    pids.iter().zip(&c0).map(|(&p, &c)| (cpu_ns(p) - c) as f64 / wall).collect()
}

fn nothing_left(pids: &[i32]) {
    for &p in pids {
        let rt = kernel::get_sched(p).is_ok_and(|s| s.policy & !kernel::RESET_ON_FORK == libc::SCHED_FIFO);
        assert!(!rt && !stopped(p), "process {p} left real-time or stopped");
    }
}

/// A fair-share policy (BVT) loaded above the default, declared best effort, hosting 4
/// CPU-bound tasks of weights 1:1:2:4 on 2 CPUs: each gets its weighted share of what
/// the four get (1/8, 1/8, 2/8, 4/8: the weight-4 task a whole CPU), and none is ever
/// real-time (before, every task of a loaded scheduler ran SCHED_FIFO, and two CPU-bound
/// ones tripped the kernel's RT throttling). The shares are of what the four got: this
/// VM's CPUs are shared with other work and its host, so what a CPU-bound task gets in
/// all varies from run to run.
#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn a_best_effort_loaded_scheduler_shares_by_weight_without_real_time() {
    if !root() {
        return;
    }
    if kernel::online_cpus() != 2 {
        vassal_agent::skip::skip("the weights' shares below are those of 2 CPUs");
        return;
    }
    let _serial = serial();
    let agent = AgentProc::start(
        "[[scheduler]]\nname = \"fair\"\nkind = \"bvt\"\nparams = { mcu = \"1ms\", c = \"20ms\" }\nusage = \"best_effort\"\n",
    );
    let until = now_ns() + 20 * SEC;
    let weights = [1i64, 1, 2, 4];
    let hogs: Vec<Worker> = weights.iter().map(|_| workers::hog(until).unwrap()).collect();
    let pids: Vec<i32> = hogs.iter().map(|h| h.pid).collect();
    let watch = RtWatch::new(pids.clone());
    for (h, w) in hogs.iter().zip(weights) {
        let (ok, out) = agent.ctl(&["join", &h.pid.to_string(), "--sched", "fair", "--param", &format!("weight={w}")]);
        assert!(ok, "{out}");
    }
    std::thread::sleep(Duration::from_millis(500));
    let got = shares(&pids, 4 * SEC);
    let (rt, samples) = watch.finish();
    let total: f64 = got.iter().sum();
    let rel: Vec<f64> = got.iter().map(|g| g / total).collect();
    let row = hierarchy(&agent).into_iter().find(|s| s.name == "fair").expect("fair is loaded");
    eprintln!(
        "weights 1:1:2:4 under a best-effort BVT: {got:.3?} CPUs ({total:.3} in all), of the total {rel:.3?}; \
         real-time in {rt} of {samples} samples; `ctl hierarchy`: share {:.3}, granted {:?}",
        row.share, row.granted
    );
    assert_eq!(rt, 0, "a best-effort scheduler's task ran real-time");
    assert!(samples > 1000, "the watch took only {samples} samples");
    for (r, w) in rel.iter().zip(weights) {
        let want = w as f64 / 8.0;
        assert!((r - want).abs() <= 0.05, "shares of the total {rel:.3?}, want 1/8, 1/8, 2/8, 4/8");
    }
    assert_eq!(row.granted, None, "best effort is granted nothing");
    assert!(row.usage.contains("best effort"), "{row:?}");
    assert!(row.share > 0.5 * total && row.share < 1.5 * total + 0.1, "measured share {:.3} for {total:.3} used", row.share);
    drop(agent);
    nothing_left(&pids);
}

/// A policy (BVT) loaded as reserved 0.5 of a CPU, hosting 3 CPU-bound tasks: together
/// they get 0.5 of a CPU, measured over 4 s — its share is enforced while it runs, not
/// only checked at registration (before, once its real-time budget was spent its tasks
/// ran on at SCHED_OTHER: ~0.9–1.5 CPUs in all). When its budget is spent its tasks are
/// taken off the CPUs and held (stopped) until it refills; `ctl hierarchy` shows the
/// measured share beside the granted one. Nothing is left stopped or real-time.
#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn a_reserved_schedulers_share_is_enforced_while_it_runs() {
    if !root() {
        return;
    }
    let _serial = serial();
    let agent = AgentProc::start(
        "[[scheduler]]\nname = \"res\"\nkind = \"bvt\"\nparams = { mcu = \"1ms\", c = \"20ms\" }\nusage = { reserved = { cpus = 0.5 } }\n",
    );
    let until = now_ns() + 20 * SEC;
    let hogs: Vec<Worker> = (0..3).map(|_| workers::hog(until).unwrap()).collect();
    let pids: Vec<i32> = hogs.iter().map(|h| h.pid).collect();
    for h in &hogs {
        let (ok, out) = agent.ctl(&["join", &h.pid.to_string(), "--sched", "res"]);
        assert!(ok, "{out}");
    }
    // Past the first window's burst (the budget starts full: 100 ms at 0.5).
    std::thread::sleep(Duration::from_millis(700));
    let got = shares(&pids, 4 * SEC);
    let total: f64 = got.iter().sum();
    let row = hierarchy(&agent).into_iter().find(|s| s.name == "res").expect("res is loaded");
    eprintln!(
        "3 hogs under a scheduler reserved 0.5: {got:.3?} CPUs, {total:.3} in all; `ctl hierarchy`: share {:.3}, granted {:?}",
        row.share, row.granted
    );
    assert!(total <= 0.5 + 0.04, "its tasks together got {total:.3} CPUs; it declared 0.5");
    assert!(total >= 0.35, "its tasks together got {total:.3} CPUs: the share should be usable");
    assert_eq!(row.granted, Some(0.5));
    assert!((row.share - 0.5).abs() <= 0.1, "measured share {:.3}", row.share);
    drop(agent);
    nothing_left(&pids);
}
