//! The guardian's life lock (crate::guardian): when the thread holding it dies, the
//! guardian restores every ledger record — even while the life line is still open (this
//! process lives on), so the lock alone is what it heard. One test in this binary: the
//! guardian is forked, which is only safe while no other test thread runs.

use std::time::{Duration, Instant};

use vassal_agent::guardian::{Guardian, Ledger};
use vassal_agent::kernel;
use vassal_agent::workers;

#[test]
fn the_death_of_the_life_lock_holder_makes_the_guardian_restore() {
    if kernel::online_cpus() < 2 {
        vassal_agent::skip::skip("needs 2 CPUs (the test changes a process's affinity to one of them)");
        return;
    }
    let mut ledger = Ledger::new().unwrap();
    // Priority 0: the guardian stays at SCHED_OTHER, so this runs without root too.
    let guardian = Guardian::spawn(&ledger, 0).unwrap();
    let child = workers::sleeper(kernel::now_ns() + 10_000_000_000).unwrap();
    let saved = kernel::get_sched(child.pid).unwrap();
    ledger.save(child.pid, kernel::start_time(child.pid).unwrap(), &saved).unwrap();
    let changed = kernel::one_cpu(1);
    kernel::set_affinity(child.pid, &changed).unwrap();
    assert_eq!(kernel::get_affinity(child.pid).unwrap(), changed);
    // A thread takes the lock, as the dispatcher does at its start, and ends holding it.
    std::thread::scope(|s| s.spawn(|| guardian.hold_life_lock().unwrap()).join().unwrap());
    let t0 = Instant::now();
    while kernel::get_affinity(child.pid).unwrap() != saved.affinity {
        assert!(t0.elapsed() < Duration::from_secs(5), "the guardian did not restore after the lock holder died");
        std::thread::sleep(Duration::from_millis(1));
    }
    eprintln!("restored {:?} after the life-lock holder ended", t0.elapsed());
    // The guardian restores once and leaves.
    let mut status = 0;
    // SAFETY: waits for our own child.
    assert_eq!(unsafe { libc::waitpid(guardian.pid, &mut status, 0) }, guardian.pid);
    assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "guardian status {status:#x}");
}
