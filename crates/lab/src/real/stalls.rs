//! Host stalls, measured beside an experiment: the host stops this VM's CPUs for 1–30 ms
//! now and then (docs/agent.md, "Numbers"), whatever runs in it. A frame caught in one is
//! late under any scheduler in the guest, so the video rows judge the scheduler on the
//! frames no stall touched and report the stalled ones beside them.
//!
//! One watcher thread per CPU, bound to it at SCHED_FIFO 99 (above everything the agent
//! and the workers use), sleeps to absolute times [`PERIOD`] apart. Such a thread waits
//! only for the host, an interrupt or a non-preemptible kernel section — tens of
//! microseconds on this VM (MACHINE.md: FIFO wake-up p99 50–100 µs) — so a wake-up more
//! than [`STALL`] late means the CPU was taken away. The CPU was then missing from at
//! most one period before the due time (the previous wake-up was on time) until the late
//! wake-up. The threads sleep > 99 % of the time, end by a hard deadline, and are joined
//! when the watch is dropped.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use vassal_agent::kernel::{self, now_ns};

/// How often each watcher wakes.
const PERIOD: u64 = 1_000_000;
/// A wake-up later than this is a host stall.
const STALL: u64 = 1_000_000;

/// The watchers of a running experiment.
pub struct StallWatch {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<Vec<(u64, u64)>>>,
}

impl StallWatch {
    /// Starts one watcher per CPU; each ends at `until` (CLOCK_MONOTONIC ns) at the latest.
    pub fn start(until: u64) -> io::Result<StallWatch> {
        let ncpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as u16;
        // Built first, so that a failure below stops (on drop) the watchers started.
        let mut w = StallWatch { stop: Arc::new(AtomicBool::new(false)), threads: Vec::new() };
        for cpu in 0..ncpus {
            let stop = Arc::clone(&w.stop);
            let (tx, rx) = std::sync::mpsc::channel();
            w.threads.push(std::thread::spawn(move || {
                // SAFETY: gettid has no preconditions.
                let tid = unsafe { libc::gettid() };
                let set = kernel::set_affinity(tid, &kernel::one_cpu(cpu)).and_then(|()| kernel::set_policy(tid, libc::SCHED_FIFO, 99));
                let ok = set.is_ok();
                let _ = tx.send(set);
                if ok {
                    watch(&stop, until)
                } else {
                    Vec::new()
                }
            }));
            rx.recv().map_err(|e| io::Error::other(e.to_string()))??;
        }
        Ok(w)
    }

    /// Stops the watchers; the stalls seen, as (from, to) CLOCK_MONOTONIC ns, in time
    /// order, overlapping ones merged.
    pub fn stop(mut self) -> Vec<(u64, u64)> {
        self.stop.store(true, Ordering::Relaxed);
        let mut all: Vec<(u64, u64)> = self.threads.drain(..).flat_map(|t| t.join().unwrap_or_default()).collect();
        all.sort_unstable();
        let mut merged: Vec<(u64, u64)> = Vec::new();
        for (a, b) in all {
            match merged.last_mut() {
                Some(last) if a <= last.1 => last.1 = last.1.max(b),
                _ => merged.push((a, b)),
            }
        }
        merged
    }
}

impl Drop for StallWatch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// One watcher's loop: the stalls it saw.
fn watch(stop: &AtomicBool, until: u64) -> Vec<(u64, u64)> {
    let mut stalls = Vec::new();
    let mut due = now_ns() + PERIOD;
    while !stop.load(Ordering::Relaxed) && due < until {
        while now_ns() < due {
            kernel::sleep_until(due);
        }
        let woke = now_ns();
        if woke - due > STALL {
            stalls.push((due - PERIOD, woke));
        }
        due = due.max(woke) + PERIOD;
    }
    stalls
}

/// Whether the interval [from, to] meets one of `stalls` (sorted, disjoint).
pub fn touched(stalls: &[(u64, u64)], from: u64, to: u64) -> bool {
    let i = stalls.partition_point(|s| s.1 < from);
    stalls.get(i).is_some_and(|s| s.0 <= to)
}

#[cfg(test)]
mod tests {
    use super::touched;

    #[test]
    fn an_interval_is_touched_by_a_stall_it_meets() {
        let stalls = [(10, 20), (40, 45)];
        assert!(touched(&stalls, 15, 16));
        assert!(touched(&stalls, 0, 10));
        assert!(touched(&stalls, 20, 30));
        assert!(touched(&stalls, 30, 50));
        assert!(!touched(&stalls, 21, 39));
        assert!(!touched(&stalls, 46, 100));
        assert!(!touched(&[], 0, 100));
    }
}
