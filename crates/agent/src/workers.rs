//! Real worker processes for the agent's tests and `vassal repro --real`: CPU hogs and
//! periodic tasks, forked (no exec), each with a hard time limit, killed with the parent
//! (PR_SET_PDEATHSIG), and killed and reaped when its handle is dropped. A worker writes
//! its measurements into a shared anonymous mapping; the child allocates nothing, so
//! forking from a multithreaded test harness is safe.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::kernel;

/// A shared array of u64 counters (MAP_SHARED | MAP_ANONYMOUS), visible to forked children.
pub struct SharedBuf {
    base: *mut AtomicU64,
    len: usize,
}

// SAFETY: atomics in a mapping that lives as long as the SharedBuf.
unsafe impl Send for SharedBuf {}
unsafe impl Sync for SharedBuf {}

impl SharedBuf {
    pub fn new(len: usize) -> io::Result<SharedBuf> {
        let bytes = len.max(1) * 8;
        // SAFETY: a fresh zero-filled shared mapping.
        let p = unsafe {
            libc::mmap(std::ptr::null_mut(), bytes, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED | libc::MAP_ANONYMOUS, -1, 0)
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(SharedBuf { base: p.cast(), len: len.max(1) })
    }
    pub fn get(&self, i: usize) -> u64 {
        assert!(i < self.len);
        // SAFETY: in bounds.
        unsafe { (*self.base.add(i)).load(Ordering::Acquire) }
    }
    pub fn set(&self, i: usize, v: u64) {
        assert!(i < self.len);
        // SAFETY: in bounds.
        unsafe { (*self.base.add(i)).store(v, Ordering::Release) }
    }
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        false
    }
}

impl Drop for SharedBuf {
    fn drop(&mut self) {
        // SAFETY: our mapping.
        unsafe { libc::munmap(self.base.cast(), self.len * 8) };
    }
}

/// A forked worker. Dropping it kills and reaps it.
pub struct Worker {
    pub pid: i32,
    pub out: SharedBuf,
    reaped: bool,
}

impl Worker {
    /// A handle for a child forked elsewhere (it is killed and reaped on drop).
    pub fn from_parts(pid: i32, out: SharedBuf) -> Worker {
        Worker { pid, out, reaped: false }
    }
    /// Waits for the worker to exit by itself (it always does, by its time limit).
    pub fn wait(&mut self) {
        if !self.reaped {
            // SAFETY: reaps our child.
            unsafe { libc::waitpid(self.pid, std::ptr::null_mut(), 0) };
            self.reaped = true;
        }
    }
    /// Kills and reaps it now.
    pub fn kill(&mut self) {
        if !self.reaped {
            // SAFETY: our child.
            unsafe {
                libc::kill(self.pid, libc::SIGKILL);
                libc::waitpid(self.pid, std::ptr::null_mut(), 0);
            }
            self.reaped = true;
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.kill();
    }
}

fn fork_worker(out: SharedBuf, body: impl FnOnce(&SharedBuf)) -> io::Result<Worker> {
    // SAFETY: the child runs `body`, which only makes syscalls and writes atomics.
    let pid = unsafe { libc::fork() };
    if pid == -1 {
        return Err(io::Error::last_os_error());
    }
    if pid == 0 {
        // SAFETY: syscalls in the child; _exit without unwinding or destructors.
        unsafe {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
            // A worker starts at SCHED_OTHER whatever its parent runs at.
            let p = libc::sched_param { sched_priority: 0 };
            libc::sched_setscheduler(0, libc::SCHED_OTHER, &p);
        }
        body(&out);
        // SAFETY: see above.
        unsafe { libc::_exit(0) };
    }
    Ok(Worker { pid, out, reaped: false })
}

/// Burns `ns` of this thread's CPU time.
fn burn(ns: u64) {
    let start = kernel::thread_cpu_ns();
    while kernel::thread_cpu_ns() - start < ns {}
}

/// A CPU hog that spins until the absolute time `until`; out[0] counts its loops (in
/// millions of iterations of a check of the clock).
pub fn hog(until: u64) -> io::Result<Worker> {
    fork_worker(SharedBuf::new(1)?, |out| {
        let mut n = 0u64;
        while kernel::now_ns() < until {
            n += 1;
            if n.is_multiple_of(1024) {
                out.set(0, n);
            }
        }
    })
}

/// A process that sleeps until the absolute time `until` (a blocked task).
pub fn sleeper(until: u64) -> io::Result<Worker> {
    fork_worker(SharedBuf::new(1)?, |_| {
        while kernel::now_ns() < until {
            kernel::sleep_until(until);
        }
    })
}

/// The layout of a periodic worker's results.
pub mod periodic_layout {
    /// out[DONE]: iterations completed.
    pub const DONE: usize = 0;
    /// out[BASE + 2k]: wake latency of iteration k (ns after its release);
    /// out[BASE + 2k + 1]: its lateness (completion − (release + burn)), ns.
    pub const BASE: usize = 1;
}

/// A periodic task: `count` releases every `period` from `start` (absolute); each one
/// sleeps on an absolute timer until its release, then burns `burn` ns of CPU.
/// `spin_to` > 0: after the last release, spin until that time (a task "failing into an
/// infinite loop", BVT Table 5) — still bounded.
pub fn periodic(start: u64, period: u64, burn_ns: u64, count: usize, spin_to: u64) -> io::Result<Worker> {
    use periodic_layout::*;
    fork_worker(SharedBuf::new(BASE + 2 * count)?, move |out| {
        for k in 0..count {
            let release = start + k as u64 * period;
            while kernel::now_ns() < release {
                kernel::sleep_until(release);
            }
            let woke = kernel::now_ns();
            burn(burn_ns);
            let done = kernel::now_ns();
            out.set(BASE + 2 * k, woke - release);
            out.set(BASE + 2 * k + 1, done.saturating_sub(release + burn_ns));
            out.set(DONE, k as u64 + 1);
        }
        while kernel::now_ns() < spin_to {}
    })
}

/// The (wake latency, lateness) samples of a periodic worker, ns.
pub fn periodic_results(w: &Worker) -> Vec<(u64, u64)> {
    use periodic_layout::*;
    let n = w.out.get(DONE) as usize;
    (0..n).map(|k| (w.out.get(BASE + 2 * k), w.out.get(BASE + 2 * k + 1))).collect()
}

/// The p-quantile (0..=1) of `v` (sorted in place), nearest rank.
pub fn quantile(v: &mut [u64], p: f64) -> u64 {
    if v.is_empty() {
        return 0;
    }
    v.sort_unstable();
    v[(((v.len() - 1) as f64) * p).round() as usize]
}
