//! `vassal agent`: start the guardian, the broker and the dispatcher, and shut down in
//! order on SIGTERM/SIGINT.
//!
//! Threads and processes:
//! - **guardian** (a process, SCHED_FIFO `guardian_priority`): see [`crate::guardian`];
//! - **dispatcher** (a thread, SCHED_FIFO `dispatcher_priority`, memory locked, timer
//!   slack 1 ns): runs [`Agent::pass`] every tick and at every scheduler event (absolute
//!   CLOCK_MONOTONIC deadlines; slice ends are checked at those passes), and checks at
//!   every tick that the guardian lives;
//! - **broker** (an accept thread and one thread per client, SCHED_OTHER): [`crate::broker`];
//! - the main thread waits for SIGTERM/SIGINT, then restores every managed task and exits.
//!
//! A panic anywhere aborts the process (the guardian then restores), so a half-updated
//! state is never acted on.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use crate::broker::{self, lock, Shared};
use crate::config::Config;
use crate::guardian::{Guardian, Ledger};
use crate::kernel;
use crate::state::Agent;

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
    let guardian = Guardian::spawn(&ledger, cfg.guardian_priority).map_err(|e| format!("guardian: {e}"))?;
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
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    };
    kernel::mlockall().map_err(|e| format!("mlockall: {e}"))?;
    let wchan = kernel::use_wchan();
    let now = kernel::now_ns();
    let agent = Agent::new(cfg.clone(), ledger, now)?;
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
        "vassal agent: serving {} (tick {}, {} CPUs, guardian running, runnability from /proc/TID/{})",
        cfg.socket,
        vassal_core::fmt_duration(cfg.tick),
        kernel::online_cpus(),
        if wchan { "wchan" } else { "stat" }
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

/// The dispatcher thread.
fn dispatch(shared: Arc<Shared>, guardian: Guardian, prio: i32) {
    if let Err(e) = kernel::set_self(prio) {
        eprintln!("vassal agent: cannot raise the dispatcher to SCHED_FIFO {prio}: {e}");
    }
    // SAFETY: a prctl on the calling thread.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1, 0, 0, 0) };
    let mut g = lock(&shared.agent);
    loop {
        if shared.stop.load(Ordering::SeqCst) {
            return;
        }
        let now = kernel::now_ns();
        let tick_due = now >= g.next_tick;
        g.pass(now);
        if tick_due && !guardian.alive() {
            eprintln!("vassal agent: the guardian died; restoring every managed task and exiting");
            g.restore_all(now);
            let _ = std::fs::remove_file(&g.cfg.socket);
            std::process::exit(1);
        }
        if tick_due {
            shared.dispatcher_cpu_ns.store(kernel::thread_cpu_ns(), Ordering::Relaxed);
        }
        let deadline = g.next_deadline();
        let now = kernel::now_ns();
        if deadline > now {
            g = shared.wake.wait_timeout(g, Duration::from_nanos(deadline - now)).unwrap_or_else(|e| e.into_inner()).0;
        }
    }
}
