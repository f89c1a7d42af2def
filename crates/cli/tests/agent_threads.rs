//! Threads a managed process creates while it is managed (issue 14 item 2, "every thread,
//! every time"): a new thread inherits the state the agent gave its creator (one CPU,
//! SCHED_IDLE, or SCHED_FIFO's reset to SCHED_OTHER), so its original is not what it has
//! when the agent adopts it, and until then the ledger does not know it at all. Each test
//! makes a process create threads while it is warped (created at SCHED_FIFO), while it is
//! parked as a hog among hogs (at SCHED_IDLE), and just before the end (perhaps not yet
//! adopted), then ends the agent's management one way — SIGKILL or SIGTERM of the agent,
//! `ctl release`, the exit of the process's main thread — and checks that every thread is
//! back in the process's original state: its affinity (all CPUs), SCHED_OTHER, its nice,
//! and not stopped.
//!
//! They need root (the agent changes other processes' scheduling) and skip with a message
//! otherwise, as crates/cli/tests/agent.rs does. Every process has a hard time limit: the
//! agent runs under `timeout` (common/agent_proc.rs), every thread of the test process
//! and every hog stops at a deadline, and Drop guards kill and reap them on every path.

#[path = "common/agent_proc.rs"]
mod agent_proc;

use std::sync::atomic::{AtomicPtr, Ordering};
use std::time::Duration;

use agent_proc::{root, serial, wait_for, AgentProc};
use vassal_agent::client::Client;
use vassal_agent::kernel::{self, now_ns, SchedState};
use vassal_agent::workers::{self, SharedBuf, Worker};
use vassal_core::Request;

const MS: u64 = 1_000_000;
const SEC: u64 = 1_000_000_000;
const POLL: &str = "events = \"poll\"\n";

/// The threaded process's control words, in a mapping shared with it.
mod ctl {
    /// Its deadline (CLOCK_MONOTONIC ns): every thread stops then.
    pub const UNTIL: usize = 0;
    /// Threads its main thread is asked to create, and has created (running counts).
    pub const WANT_MAIN: usize = 1;
    pub const MADE_MAIN: usize = 2;
    /// Threads its first thread (not the main one) is asked to create, and has created.
    pub const WANT_NESTED: usize = 3;
    pub const MADE_NESTED: usize = 4;
    /// 0: a creator creates at once; else 1 + the policy it waits to run at first (up to
    /// `WAIT`), so that the thread inherits what the agent gave it then.
    pub const WHEN: usize = 5;
    /// Threads the main thread, and the first thread, created while running at WHEN's
    /// policy.
    pub const AT_MAIN: usize = 6;
    pub const AT_NESTED: usize = 7;
    /// 0: each thread spins 1 ms and sleeps 2 ms in turns; 1: they spin (a hog).
    pub const BUSY: usize = 8;
    /// 1: the main thread exits, alone (the others go on).
    pub const MAIN_EXIT: usize = 9;
    /// 1: the process has set its original state and started its first threads.
    pub const READY: usize = 10;
    pub const LEN: usize = 11;
}

/// How long a creator waits to run at the policy `ctl::WHEN` names before it creates
/// the thread anyway.
const WAIT: u64 = 3 * SEC;
/// The original nice of the threaded process (so that a restore must restore it too).
const NICE: i32 = 2;

/// The child's view of its control words (set once, before its first thread).
static CTL: AtomicPtr<SharedBuf> = AtomicPtr::new(std::ptr::null_mut());

fn ctl() -> &'static SharedBuf {
    // SAFETY: set by the child before any use; the SharedBuf lives until the child exits.
    unsafe { &*CTL.load(Ordering::Acquire) }
}

fn own_policy() -> i32 {
    // SAFETY: a syscall about the calling thread.
    (unsafe { libc::sched_getscheduler(0) }) & !kernel::RESET_ON_FORK
}

/// Starts a detached thread of the child; `nested`: it creates the threads WANT_NESTED asks
/// for.
fn spawn_thread(nested: bool) {
    extern "C" fn body(arg: *mut libc::c_void) -> *mut libc::c_void {
        let mut creator = Creator::default();
        work(|| {
            if !arg.is_null() {
                creator.serve(ctl::WANT_NESTED, ctl::MADE_NESTED, ctl::AT_NESTED);
            }
        });
        std::ptr::null_mut()
    }
    let mut t: libc::pthread_t = 0;
    // The argument is only a flag: non-null for the nested creator.
    let arg = if nested { std::ptr::dangling_mut::<libc::c_void>() } else { std::ptr::null_mut() };
    // SAFETY: a plain C thread; `body` touches only the shared control words and makes
    // syscalls.
    unsafe {
        if libc::pthread_create(&mut t, std::ptr::null(), body, arg) == 0 {
            libc::pthread_detach(t);
        }
    }
}

/// A thread that creates threads when asked (one per call of `serve`).
#[derive(Default)]
struct Creator {
    /// Since when a request has waited for the policy WHEN names.
    since: u64,
}

impl Creator {
    /// Creates a thread if `want` asks for more than `made` counts, once its policy is
    /// WHEN's (or it waited `WAIT` for it); counts it in `made`, and in `at` if created at
    /// WHEN's policy. Each counter has one writer.
    fn serve(&mut self, want: usize, made: usize, at_policy: usize) {
        let c = ctl();
        if c.get(want) <= c.get(made) {
            self.since = 0;
            return;
        }
        let now = now_ns();
        if self.since == 0 {
            self.since = now;
        }
        let when = c.get(ctl::WHEN);
        let at = when != 0 && own_policy() == (when - 1) as i32;
        if when != 0 && !at && now < self.since + WAIT {
            return;
        }
        spawn_thread(false);
        if at {
            c.set(at_policy, c.get(at_policy) + 1);
        }
        c.set(made, c.get(made) + 1);
        self.since = 0;
    }
}

/// A thread's work until the deadline: spinning, or spinning and sleeping in turns (see
/// `ctl::BUSY`), calling `between` every 100 µs of it.
fn work(mut between: impl FnMut()) {
    let c = ctl();
    while now_ns() < c.get(ctl::UNTIL) {
        let end = now_ns() + MS;
        while now_ns() < end {
            between();
            let spin = now_ns() + 100_000;
            while now_ns() < spin {}
        }
        if c.get(ctl::BUSY) == 0 {
            kernel::sleep_until(now_ns() + 2 * MS);
        }
    }
}

/// Forks the threaded process: nice `NICE`, all CPUs, SCHED_OTHER; it starts two threads
/// (the first creates threads when asked), then its main thread works and creates threads
/// when asked, until `until`. Killed and reaped when the handle is dropped.
fn threaded(until: u64) -> Worker {
    let buf = SharedBuf::new(ctl::LEN).unwrap();
    buf.set(ctl::UNTIL, until);
    // SAFETY: the child only makes syscalls, writes atomics and starts C threads that do
    // the same (glibc's pthread_create is safe in the child of a multithreaded process).
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
    if pid == 0 {
        // SAFETY: syscalls about this (child) process.
        unsafe {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
            let p = libc::sched_param { sched_priority: 0 };
            libc::sched_setscheduler(0, libc::SCHED_OTHER, &p);
        }
        let _ = kernel::set_affinity(0, &full_mask());
        let _ = kernel::set_nice(0, NICE);
        CTL.store(&buf as *const SharedBuf as *mut SharedBuf, Ordering::Release);
        spawn_thread(true);
        spawn_thread(false);
        buf.set(ctl::READY, 1);
        let mut creator = Creator::default();
        work(|| {
            creator.serve(ctl::WANT_MAIN, ctl::MADE_MAIN, ctl::AT_MAIN);
            if ctl().get(ctl::MAIN_EXIT) != 0 {
                // SAFETY: ends this thread only; the process lives on in its others.
                unsafe { libc::syscall(libc::SYS_exit, 0) };
            }
        });
        // SAFETY: ends the whole process, without unwinding or destructors.
        unsafe { libc::_exit(0) };
    }
    let w = Worker::from_parts(pid, buf);
    assert!(wait_for(Duration::from_secs(5), || w.out.get(ctl::READY) == 1).is_some(), "the threaded process did not start");
    w
}

/// Every CPU of the machine: the original affinity of every process here.
fn full_mask() -> kernel::Mask {
    let mut m: kernel::Mask = [0; kernel::MASK_WORDS];
    for c in 0..kernel::online_cpus() as usize {
        m[c / 64] |= 1 << (c % 64);
    }
    m
}

/// The original state of every thread of the threaded process.
fn original() -> SchedState {
    SchedState { policy: libc::SCHED_OTHER, prio: 0, nice: NICE, affinity: full_mask() }
}

/// A thread's state letter (/proc/PID/task/TID/stat), if it still exists.
fn state_letter(pid: i32, tid: i32) -> Option<u8> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/stat")).ok()?;
    s.rsplit_once(')').and_then(|(_, r)| r.trim_start().bytes().next())
}

/// The live threads of `pid` (a zombie main thread is not one).
fn live_threads(pid: i32) -> Vec<i32> {
    kernel::threads(pid).unwrap_or_default().into_iter().filter(|&t| !matches!(state_letter(pid, t), None | Some(b'Z' | b'X'))).collect()
}

/// The threads of `pid` not in their original state or stopped, described.
fn tainted(pid: i32) -> Vec<String> {
    let want = original();
    live_threads(pid)
        .into_iter()
        .filter_map(|t| {
            let s = kernel::get_sched(t).ok()?;
            let letter = state_letter(pid, t)?;
            (s != want || matches!(letter, b'T' | b't')).then(|| {
                format!(
                    "tid {t}: policy {:#x} prio {} nice {} mask {:#x} state {}",
                    s.policy, s.prio, s.nice, s.affinity[0], letter as char
                )
            })
        })
        .collect()
}

fn join(c: &mut Client, pid: i32, params: &[(&str, i64)]) {
    let params = params.iter().map(|(k, v)| (k.to_string(), *v)).collect();
    c.join_pid(pid, None, params).expect("join");
}

/// How the agent's management of the process ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum End {
    /// SIGKILL of the agent: the guardian restores.
    Sigkill,
    /// SIGTERM of the agent: it restores every managed process and exits.
    Sigterm,
    /// `vassal ctl release PID`: the agent stops managing it, restoring it.
    Release,
    /// The process's main thread exits alone: the agent unmanages the process (its main
    /// thread is gone), and the threads it left go on.
    MainExits,
}

/// The scenario of the module documentation with `config`, ended by `end`.
fn threads_are_restored(config: &str, end: End) {
    let until = now_ns() + 40 * SEC;
    let agent = AgentProc::start(config);
    // As many hogs as CPUs: with the threaded process one more than CPUs wants to run.
    let hogs: Vec<Worker> = (0..kernel::online_cpus()).map(|_| workers::hog(until).unwrap()).collect();
    let t = threaded(until);
    let (pid, c) = (t.pid, &t.out);
    assert_eq!(tainted(pid), Vec::<String>::new(), "the process does not start in its original state");
    let mut cl = agent.client();
    for h in &hogs {
        join(&mut cl, h.pid, &[]);
    }
    join(&mut cl, pid, &[("warp", (20 * MS) as i64)]);
    let made = || c.get(ctl::MADE_MAIN) + c.get(ctl::MADE_NESTED);

    // Warped: threads created while their creator runs at SCHED_FIFO (one CPU).
    c.set(ctl::WHEN, 1 + libc::SCHED_FIFO as u64);
    c.set(ctl::WANT_MAIN, 2);
    c.set(ctl::WANT_NESTED, 1);
    assert!(wait_for(Duration::from_secs(10), || made() == 3).is_some(), "warped: {} of 3 threads created", made());
    let at_policy = || c.get(ctl::AT_MAIN) + c.get(ctl::AT_NESTED);
    let at_fifo = at_policy();

    // A hog among hogs: threads created while their creator is parked at SCHED_IDLE.
    let r = cl.message(None, pid, Request::Param { name: "warp".into(), value: 0 });
    assert!(r.is_ok(), "warp 0: {r:?}");
    c.set(ctl::BUSY, 1);
    let idle =
        || live_threads(pid).iter().any(|&t| kernel::get_sched(t).is_ok_and(|s| s.policy & !kernel::RESET_ON_FORK == libc::SCHED_IDLE));
    assert!(wait_for(Duration::from_secs(10), idle).is_some(), "the process was never parked among the hogs");
    c.set(ctl::WHEN, 1 + libc::SCHED_IDLE as u64);
    c.set(ctl::WANT_MAIN, 4);
    c.set(ctl::WANT_NESTED, 2);
    assert!(wait_for(Duration::from_secs(15), || made() == 6).is_some(), "parked: {} of 6 threads created", made());
    let at_idle = at_policy() - at_fifo;

    // Just before the end: threads the agent may not have adopted yet.
    c.set(ctl::WHEN, 0);
    c.set(ctl::WANT_MAIN, 5);
    c.set(ctl::WANT_NESTED, 3);
    assert!(wait_for(Duration::from_secs(5), || made() == 8).is_some(), "at the end: {} of 8 threads created", made());
    let threads = live_threads(pid).len();
    let label = format!("{end:?} ({})", if config.is_empty() { "events = auto" } else { config.trim() });
    eprintln!("{label}: {threads} threads; created 3 while warped ({at_fifo} at SCHED_FIFO), 3 while a hog ({at_idle} at SCHED_IDLE), 2 just before");
    assert_eq!(threads, 3 + 8, "threads of the process: {:?}", live_threads(pid));

    match end {
        End::Sigkill | End::Sigterm => {
            let sig = if end == End::Sigkill { libc::SIGKILL } else { libc::SIGTERM };
            // SAFETY: a signal to our agent.
            unsafe { libc::kill(agent.agent_pid(), sig) };
        }
        End::Release => {
            let (ok, out) = agent.ctl(&["release", &pid.to_string()]);
            assert!(ok, "ctl release: {out}");
        }
        End::MainExits => {
            c.set(ctl::MAIN_EXIT, 1);
            let unmanaged = wait_for(Duration::from_secs(5), || cl.tasks().is_ok_and(|ts| ts.iter().all(|r| r.pid != pid)));
            assert!(unmanaged.is_some(), "the agent still manages the process after its main thread exited");
            assert_eq!(live_threads(pid).len(), 3 + 8 - 1, "the other threads go on");
        }
    }
    let took = wait_for(Duration::from_secs(2), || tainted(pid).is_empty());
    let left = tainted(pid);
    drop(t);
    drop(hogs);
    let took = took.unwrap_or_else(|| panic!("{label}: threads not restored: {left:#?}"));
    eprintln!("{label}: every thread restored {took:?} after the end");
    if end == End::Sigkill {
        let log = agent.log();
        eprintln!("{}", log.lines().find(|l| l.starts_with("vassal-guardian")).unwrap_or("(the guardian said nothing)"));
    }
    drop(agent);
}

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn sigkill_of_the_agent_restores_threads_created_while_managed() {
    if !root() {
        return;
    }
    let _serial = serial();
    threads_are_restored("", End::Sigkill);
}

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn sigkill_of_the_agent_restores_threads_created_while_managed_polling() {
    if !root() {
        return;
    }
    let _serial = serial();
    threads_are_restored(POLL, End::Sigkill);
}

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn sigterm_of_the_agent_restores_threads_created_while_managed() {
    if !root() {
        return;
    }
    let _serial = serial();
    threads_are_restored(POLL, End::Sigterm);
}

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn release_restores_threads_created_while_managed() {
    if !root() {
        return;
    }
    let _serial = serial();
    threads_are_restored("", End::Release);
}

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn the_threads_a_main_thread_leaves_are_restored_when_it_exits() {
    if !root() {
        return;
    }
    let _serial = serial();
    threads_are_restored("", End::MainExits);
}

/// Issue 17 item 1: a vassal task is a thread, so a process with 4 CPU-bound threads runs
/// on both CPUs at once under the agent (before, the unit was the process: it ran on one
/// CPU at a time). Each thread is a task (`ctl tasks` lists 4 threads, each with a share
/// of one CPU of at most 100%, the process line their sum); the dispatcher selects two of
/// them at once; and the process gets about what the kernel alone gives it in the same
/// run (the machine may be loaded by other work, so that is the baseline, not 2 CPUs).
#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn a_four_thread_process_spreads_over_both_cpus() {
    if !root() {
        return;
    }
    if kernel::online_cpus() < 2 {
        vassal_agent::skip::skip("one CPU: nothing to spread over");
        return;
    }
    let _serial = serial();
    let share_of = |pid: i32, dur: u64| {
        let clock = kernel::CpuClock::of_process(pid).unwrap();
        let (c0, t0) = (clock.read().unwrap(), now_ns());
        kernel::sleep_until(t0 + dur);
        (clock.read().unwrap() - c0) as f64 / (now_ns() - t0) as f64
    };
    // The kernel alone, for comparison.
    let base = workers::threads(4, workers::ThreadKind::Spin, now_ns() + 3 * SEC).unwrap();
    let kernel_share = share_of(base.pid, 2 * SEC);
    drop(base);
    let agent = AgentProc::start("");
    let w = workers::threads(4, workers::ThreadKind::Spin, now_ns() + 20 * SEC).unwrap();
    let mut cl = agent.client();
    join(&mut cl, w.pid, &[]);
    std::thread::sleep(Duration::from_millis(300));
    // Two threads selected at once, on different CPUs: the dispatcher's own view.
    let mut both = false;
    let mut row = None;
    let t_end = now_ns() + 2 * SEC;
    let agent_share = {
        let clock = kernel::CpuClock::of_process(w.pid).unwrap();
        let (c0, t0) = (clock.read().unwrap(), now_ns());
        while now_ns() < t_end {
            let r = cl.tasks().unwrap().into_iter().find(|t| t.pid == w.pid).expect("listed");
            both |= r.state.starts_with("running on") && r.state.contains(',');
            row = Some(r);
            std::thread::sleep(Duration::from_millis(20));
        }
        (clock.read().unwrap() - c0) as f64 / (now_ns() - t0) as f64
    };
    let row = row.unwrap();
    let shares: Vec<f64> = row.thread_rows.iter().map(|t| t.share).collect();
    eprintln!(
        "4 spinning threads: {:.2} CPUs under the agent, {kernel_share:.2} under the kernel alone; \
         `ctl tasks`: process {:.3}, threads {shares:.3?}; two selected at once: {both}",
        agent_share, row.share
    );
    assert_eq!(row.threads, 4, "every thread is a task: {row:?}");
    assert_eq!(row.thread_rows.len(), 4);
    assert!(shares.iter().all(|&s| s <= 1.0), "a thread's share is of one CPU: {shares:?}");
    assert!((row.share - shares.iter().sum::<f64>()).abs() < 1e-9, "the process line sums its threads");
    assert!(both, "the dispatcher never ran two threads of the process at once");
    // Spread over both CPUs: more than one CPU's worth when the kernel alone gives the
    // process well over one (else the machine is too busy to tell), and near what the
    // kernel gives.
    if kernel_share > 1.4 {
        assert!(agent_share > 1.2, "the process got {agent_share:.2} CPUs under the agent ({kernel_share:.2} alone)");
    }
    assert!(agent_share > 0.7 * kernel_share, "the process got {agent_share:.2} CPUs under the agent, {kernel_share:.2} alone");
    drop(w);
    drop(agent);
}

/// Issue 17 item 3: `ctl tasks` showed 104–109% of one CPU for a single-threaded busy
/// loop — it divided the newest CPU time by the time of an older sample (up to 100 ms
/// older), read from a process CPU clock that lags a running thread by up to a kernel
/// tick. A thread's share is now its CPU time read exactly at the row's time against a
/// sample ~1 s before, paired with when it was read: never more than 100%, and what the
/// test measures itself over the same second.
#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn a_busy_loops_share_is_of_one_cpu_and_never_more() {
    if !root() {
        return;
    }
    let _serial = serial();
    let agent = AgentProc::start("");
    let hog = workers::hog(now_ns() + 20 * SEC).unwrap();
    let mut cl = agent.client();
    join(&mut cl, hog.pid, &[]);
    let clock = kernel::CpuClock::of_process(hog.pid).unwrap();
    // (time, CPU) every 10 ms, to measure the share over the second before each row.
    let mut mine: Vec<(u64, u64)> = Vec::new();
    let (mut most, mut errs) = (0.0f64, Vec::new());
    let t_end = now_ns() + 5 * SEC;
    let mut next_row = now_ns() + 1200 * MS;
    while now_ns() < t_end {
        mine.push((now_ns(), clock.read().unwrap()));
        if now_ns() >= next_row {
            next_row += 100 * MS;
            let row = cl.tasks().unwrap().into_iter().find(|t| t.pid == hog.pid).expect("listed");
            let (t1, c1) = (now_ns(), clock.read().unwrap());
            let (t0, c0) = *mine.iter().find(|&&(t, _)| t + SEC >= t1).unwrap();
            let measured = (c1 - c0) as f64 / (t1 - t0) as f64;
            most = most.max(row.share).max(row.thread_rows[0].share);
            errs.push((row.share - measured).abs());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    errs.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let p50 = errs[errs.len() / 2];
    eprintln!(
        "a busy loop: highest share shown {most:.4}; |shown - measured| p50 {p50:.4}, max {:.4} ({} rows)",
        errs[errs.len() - 1],
        errs.len()
    );
    assert!(most <= 1.0, "a thread was shown at {most:.4} of one CPU");
    assert!(p50 <= 0.03, "the shares shown are {p50:.3} away from the measured ones (p50)");
    drop(hog);
    drop(agent);
}
