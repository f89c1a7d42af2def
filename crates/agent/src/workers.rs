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
    /// Adds `v` to word `i`; returns what it held before.
    pub fn add(&self, i: usize, v: u64) -> u64 {
        assert!(i < self.len);
        // SAFETY: in bounds.
        unsafe { (*self.base.add(i)).fetch_add(v, Ordering::AcqRel) }
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

/// What each thread of a [`threads`] worker does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ThreadKind {
    /// Spins until the deadline.
    Spin,
    /// Sleeps until the deadline (a thread that does nothing).
    Sleep,
}

/// The layout of a [`threads`] worker's shared words.
pub mod threads_layout {
    /// out[UNTIL]: the deadline; out[KIND]: 0 spin, 1 sleep.
    pub const UNTIL: usize = 0;
    pub const KIND: usize = 1;
    /// out[STARTED]: threads running (the main one included).
    pub const STARTED: usize = 2;
    /// out[TIDS + i]: the tid of thread i (0: the main thread).
    pub const TIDS: usize = 3;
}

/// A process of `n` threads — its main thread and `n − 1` more — each doing `kind` until
/// the absolute time `until`; out[TIDS..] lists their tids. Returns once every thread
/// runs. (The threads are C threads started by `pthread_create` in the forked child, as
/// crates/cli/tests/agent_threads.rs does.)
pub fn threads(n: usize, kind: ThreadKind, until: u64) -> io::Result<Worker> {
    use threads_layout::*;
    let n = n.max(1);
    let out = SharedBuf::new(TIDS + n)?;
    out.set(UNTIL, until);
    out.set(KIND, u64::from(kind == ThreadKind::Sleep));
    extern "C" fn body(arg: *mut libc::c_void) -> *mut libc::c_void {
        // SAFETY: `arg` is the worker's SharedBuf, which outlives the child's threads
        // (the child exits at the deadline, before its parent drops it).
        let out = unsafe { &*(arg as *const SharedBuf) };
        let i = out.add(STARTED, 1) as usize;
        out.set(TIDS + i, kernel::gettid() as u64);
        let until = out.get(UNTIL);
        if out.get(KIND) == 1 {
            while kernel::now_ns() < until {
                kernel::sleep_until(until);
            }
        } else {
            while kernel::now_ns() < until {}
        }
        std::ptr::null_mut()
    }
    let w = fork_worker(out, move |out| {
        let arg = out as *const SharedBuf as *mut libc::c_void;
        for _ in 1..n {
            let mut t: libc::pthread_t = 0;
            // SAFETY: a plain C thread on the shared words (see `body`).
            unsafe {
                if libc::pthread_create(&mut t, std::ptr::null(), body, arg) == 0 {
                    libc::pthread_detach(t);
                }
            }
        }
        body(arg);
        // The others end at the same deadline; _exit (fork_worker) ends them all.
        while out.get(STARTED) < n as u64 && kernel::now_ns() < until {
            kernel::sleep_until(kernel::now_ns() + 1_000_000);
        }
    })?;
    let t0 = kernel::now_ns();
    while w.out.get(STARTED) < n as u64 && kernel::now_ns() < t0 + 5_000_000_000 && kernel::now_ns() < until {
        kernel::sleep_until(kernel::now_ns() + 1_000_000);
    }
    if w.out.get(STARTED) < n as u64 {
        return Err(io::Error::other(format!("only {} of {n} threads started", w.out.get(STARTED))));
    }
    // The tids are written just after the count: wait for the last of them.
    while (0..n).any(|i| w.out.get(TIDS + i) == 0) && kernel::now_ns() < t0 + 5_000_000_000 {
        kernel::sleep_until(kernel::now_ns() + 100_000);
    }
    Ok(w)
}

/// The tids of a [`threads`] worker.
pub fn thread_ids(w: &Worker) -> Vec<i32> {
    use threads_layout::*;
    (0..w.out.get(STARTED) as usize).map(|i| w.out.get(TIDS + i) as i32).filter(|&t| t > 0).collect()
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
