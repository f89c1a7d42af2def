//! `vassal agent`: start the guardian, the broker and the dispatcher, and shut down in
//! order on SIGTERM/SIGINT.
//!
//! Threads and processes:
//! - **guardian** (a process, SCHED_FIFO `guardian_priority`): see [`crate::guardian`];
//!   the dispatcher holds its life lock, so its death is heard first;
//! - **dispatcher** (a thread, SCHED_FIFO `dispatcher_priority`, memory locked, timer
//!   slack 1 ns): runs [`Agent::pass`] whenever something needs deciding and sleeps in
//!   `epoll_wait` on (crate::wait) a timerfd armed with the absolute CLOCK_MONOTONIC time
//!   of [`Agent::next_deadline`] (scheduler events exactly — event times such as
//!   `rtserver`'s slot boundaries do not drift —, slice ends at the first tick after
//!   them, polls when polling), the broker's eventfd, the BPF ring buffer (block and
//!   wake events, crate::bpf) and a pidfd of the guardian (its death);
//! - **broker** (an accept thread and one thread per client, SCHED_OTHER): [`crate::broker`];
//! - the main thread waits for SIGTERM/SIGINT, then restores every managed task and exits.
//!
//! A panic anywhere aborts the process (the guardian then restores), so a half-updated
//! state is never acted on.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::broker::{self, lock, Shared};
use crate::config::{Config, EventsMode};
use crate::guardian::{Guardian, Ledger};
use crate::kernel;
use crate::state::{Agent, Source};
use crate::wait::{Epoll, Signals, Timer};

/// Runs the agent until SIGTERM or SIGINT. Must be root.
pub fn run(cfg: Config) -> Result<(), String> {
    if !kernel::is_root() {
        return Err("vassal agent must run as root (it changes other processes' scheduling)".into());
    }
    if UnixStream::connect(&cfg.socket).is_ok() {
        return Err(format!("another agent is already serving {}", cfg.socket));
    }
    // Fork the guardian while this process is single-threaded.
    let ledger = Ledger::new().map_err(|e| format!("ledger: {e}"))?;
    let mut guardian = Guardian::spawn(&ledger, cfg.guardian_priority).map_err(|e| format!("guardian: {e}"))?;
    std::panic::set_hook(Box::new(|info| {
        eprintln!("vassal agent: {info}; aborting (the guardian restores every managed task)");
        std::process::abort();
    }));
    // SIGTERM and SIGINT are taken synchronously by the main thread (blocked in all
    // threads, which inherit the mask).
    // SAFETY: sigset manipulation on a local set.
    let set = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGINT);
        // The CPU-clock timers' signal too: the dispatcher reads it from a signalfd.
        let mut all = set;
        libc::sigaddset(&mut all, kernel::cpu_timer_signal());
        libc::pthread_sigmask(libc::SIG_BLOCK, &all, std::ptr::null_mut());
        set
    };
    kernel::mlockall().map_err(|e| format!("mlockall: {e}"))?;
    // Two /proc files per managed thread: the usual soft limit of 1,024 would end at a
    // few hundred threads.
    if let Err(e) = kernel::raise_nofile() {
        eprintln!("vassal agent: cannot raise its limit of open files ({e}): it may manage fewer threads");
    }
    let wchan = kernel::use_wchan();
    let now = kernel::now_ns();
    let mut agent = Agent::new(cfg.clone(), ledger, now)?;
    agent.set_guardian(guardian.pid);
    // The event source, chosen after the guardian was forked (it holds no BPF fd).
    let polling = format!("polling /proc/TID/{}", if wchan { "wchan" } else { "stat" });
    let source = match cfg.events {
        EventsMode::Poll => format!("{polling} (events = \"poll\")"),
        EventsMode::Bpf | EventsMode::Auto => match crate::bpf::EventSource::load() {
            Ok(src) => {
                agent.set_source(Source::Bpf(Box::new(src)));
                format!("BPF (tp_btf sched_switch/sched_wakeup/sched_wakeup_new, ring buffer; object: {})", crate::bpf::ORIGIN)
            }
            Err(e) if cfg.events == EventsMode::Bpf => return Err(format!("events = \"bpf\": {e}")),
            Err(e) => format!("{polling} (BPF did not load: {e})"),
        },
    };
    if let Err(e) = guardian.raise_life_line() {
        eprintln!("vassal agent: cannot move the guardian's life line above the BPF fds ({e}): after SIGKILL the restore may wait for their release");
    }
    let _ = std::fs::remove_file(&cfg.socket);
    let listener = UnixListener::bind(&cfg.socket).map_err(|e| format!("{}: {e}", cfg.socket))?;
    // Unprivileged users may connect; what they may do is the broker's business.
    std::fs::set_permissions(&cfg.socket, std::fs::Permissions::from_mode(0o666)).map_err(|e| format!("{}: {e}", cfg.socket))?;
    let shared = Arc::new(Shared::new(agent));

    let sh = shared.clone();
    let prio = cfg.dispatcher_priority;
    let dispatcher = std::thread::Builder::new()
        .name("vassal-dispatch".into())
        .stack_size(1 << 20)
        .spawn(move || dispatch(sh, guardian, prio))
        .map_err(|e| e.to_string())?;
    let sh = shared.clone();
    std::thread::Builder::new()
        .name("vassal-broker".into())
        .stack_size(256 * 1024)
        .spawn(move || broker::serve(listener, sh))
        .map_err(|e| e.to_string())?;
    eprintln!(
        "vassal agent: serving {} (tick {}, {} CPUs, guardian running, events from {source})",
        cfg.socket,
        vassal_core::fmt_duration(cfg.tick),
        kernel::online_cpus(),
    );

    let mut sig = 0;
    // SAFETY: waits on the blocked set.
    unsafe { libc::sigwait(&set, &mut sig) };
    eprintln!("vassal agent: signal {sig}; restoring every managed task");
    shared.stop.store(true, Ordering::SeqCst);
    shared.with_agent(|a| a.restore_all(kernel::now_ns()));
    shared.wake.notify_all();
    let _ = dispatcher.join();
    let _ = std::fs::remove_file(&cfg.socket);
    Ok(())
}

/// The dispatcher thread: a pass, then sleep until the next deadline, a broker call, a
/// BPF event or the guardian's death.
fn dispatch(shared: Arc<Shared>, guardian: Guardian, prio: i32) {
    if let Err(e) = kernel::set_self(prio) {
        eprintln!("vassal agent: cannot raise the dispatcher to SCHED_FIFO {prio}: {e}");
    }
    // SAFETY: a prctl on the calling thread.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1, 0, 0, 0) };
    // The guardian hears of this thread's death first of all (crate::guardian, life lock).
    if let Err(e) = guardian.hold_life_lock() {
        eprintln!("vassal agent: cannot take the guardian's life lock ({e}): after SIGKILL the restore waits for the life line");
    }
    const TIMER: u64 = 1 << 0;
    const BROKER: u64 = 1 << 1;
    const GUARDIAN: u64 = 1 << 3;
    const CPU_TIMERS: u64 = 1 << 4;
    let setup = || -> std::io::Result<(Epoll, Timer, Signals)> {
        let ep = Epoll::new()?;
        let timer = Timer::new()?;
        let sigs = Signals::new(kernel::cpu_timer_signal())?;
        ep.add(timer.fd(), 0)?;
        ep.add(shared.wake.fd(), 1)?;
        if let Some(fd) = lock(&shared.agent).event_fd() {
            ep.add(fd, 2)?;
        }
        ep.add(sigs.fd(), 4)?;
        Ok((ep, timer, sigs))
    };
    let (mut ep, mut timer, sigs) = match setup() {
        Ok(x) => x,
        Err(e) => {
            eprintln!("vassal agent: dispatcher wait set: {e}; restoring every managed task and exiting");
            lock(&shared.agent).restore_all(kernel::now_ns());
            std::process::exit(1);
        }
    };
    // The guardian's death wakes the dispatcher through a pidfd; without one (an old
    // kernel) it is reaped (one wait4) every GUARDIAN_CHECK.
    let guardian_fd = crate::wait::pidfd(guardian.pid).ok().filter(|fd| {
        use std::os::fd::AsRawFd;
        ep.add(fd.as_raw_fd(), 3).is_ok()
    });
    // The dispatcher's own CPU time is published (one clock_gettime) at most every
    // GUARDIAN_CHECK, not at every pass.
    const GUARDIAN_CHECK: u64 = 20_000_000;
    let mut checked = 0;
    let mut ready = 0u64;
    let mut on_cpus = 0u64;
    let mut fired = Vec::new();
    loop {
        if shared.stop.load(Ordering::SeqCst) {
            return;
        }
        // Cleared before the pass: a call after this point is seen by the next wait.
        if ready & BROKER != 0 {
            shared.wake.clear();
        }
        let mut g = lock(&shared.agent);
        if ready & CPU_TIMERS != 0 {
            fired.clear();
            sigs.drain(&mut fired);
            g.cpu_timers_fired(&fired);
        }
        let now = kernel::now_ns();
        g.pass(now);
        let check = now >= checked + GUARDIAN_CHECK;
        if (ready & GUARDIAN != 0 || (guardian_fd.is_none() && check)) && !guardian.alive() {
            eprintln!("vassal agent: the guardian died; restoring every managed task and exiting");
            g.restore_all(now);
            let _ = std::fs::remove_file(&g.cfg.socket);
            std::process::exit(1);
        }
        if check {
            checked = now;
            shared.dispatcher_cpu_ns.store(kernel::thread_cpu_ns(), Ordering::Relaxed);
        }
        // Off the CPUs of armed tasks, when it can be (Agent::dispatcher_cpus).
        if let Some(cpus) = g.dispatcher_cpus().filter(|&c| c != on_cpus) {
            let mut m: kernel::Mask = [0; kernel::MASK_WORDS];
            m[0] = cpus;
            if kernel::set_affinity(0, &m).is_ok() {
                on_cpus = cpus;
            }
        }
        let mut deadline = g.next_deadline();
        if guardian_fd.is_none() {
            deadline = deadline.min(checked + GUARDIAN_CHECK);
        }
        drop(g);
        if let Err(e) = timer.arm(deadline, ready & TIMER != 0) {
            eprintln!("vassal agent: timerfd: {e}");
        }
        ready = ep.wait();
    }
}
