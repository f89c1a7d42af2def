//! Real-time budgets: what bounds the real-time CPU the agent hands out (issue 14;
//! docs/agent.md, "Security model").
//!
//! The agent puts a task in a real-time kernel class (SCHED_FIFO, selected or armed) only
//! under a *grant*, and every grant is a budget of CPU time that the agent charges with
//! what the task used while it was real-time:
//! - a loaded (non-default) scheduler's grant is the CPU share it declared when it was
//!   registered (paper 000 §8: hard time or reserved), a [`Bucket`] refilled at that rate;
//! - a non-root uid's grant is `max_rt_per_uid` of one CPU, a bucket too, charged for all
//!   of its tasks whatever gave them real time (warp, reservation, module);
//! - a warped task of the default scheduler (BVT §2.2) has its warp time limit per episode
//!   (wake to voluntary block); a non-root user's is never unlimited.
//!
//! A bucket holds at most `rate · window` ns and may go into debt (a charge that arrives a
//! kernel tick late is still paid), so over any long interval its tasks get at most
//! `rate` of a CPU of real time plus one window. A task starts a real-time run only if
//! every bucket it draws on holds at least `start` ns (one agent tick: no promotion for a
//! sliver), and keeps it while they are positive; a POSIX timer on its process CPU clock
//! ([`crate::kernel::CpuTimer`]) tells the dispatcher when it has used what was left.

use vassal_core::{Ns, CPU_PPM};

/// A token bucket of real-time CPU time (see the module documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bucket {
    /// Refill rate in millionths of one CPU.
    rate_ppm: u64,
    /// The most it holds, ns.
    depth: Ns,
    /// What it holds at `at`, ns (negative: a debt).
    level: i64,
    at: Ns,
}

impl Bucket {
    /// A full bucket refilled at `rate_ppm` of one CPU, holding `window` worth of it.
    pub fn new(rate_ppm: u64, window: Ns, now: Ns) -> Bucket {
        let depth = (rate_ppm as u128 * window as u128 / CPU_PPM as u128).min(i64::MAX as u128) as Ns;
        Bucket { rate_ppm, depth, level: depth as i64, at: now }
    }

    fn refill(&mut self, now: Ns) {
        if now <= self.at {
            return;
        }
        let add = (now - self.at) as u128 * self.rate_ppm as u128 / CPU_PPM as u128;
        let level = (self.level as i128 + add.min(i64::MAX as u128) as i128).min(self.depth as i128);
        self.level = level as i64;
        self.at = now;
    }

    /// Takes `ns` of CPU time used while real-time.
    pub fn charge(&mut self, now: Ns, ns: Ns) {
        self.refill(now);
        self.level = self.level.saturating_sub(ns.min(i64::MAX as u64) as i64);
    }

    /// What it holds now, ns (0 when in debt).
    pub fn left(&mut self, now: Ns) -> Ns {
        self.refill(now);
        self.level.max(0) as Ns
    }

    /// When it will hold at least `need` ns, or all it can hold if that is less (`now`
    /// if it does; `None`: never, a bucket of nothing).
    pub fn ready_at(&mut self, now: Ns, need: Ns) -> Option<Ns> {
        self.refill(now);
        if self.depth == 0 || self.rate_ppm == 0 && self.level <= 0 {
            return None;
        }
        let need = need.clamp(1, self.depth) as i64;
        if self.level >= need {
            return Some(now);
        }
        let missing = (need - self.level) as u128;
        let dt = (missing * CPU_PPM as u128).div_ceil(self.rate_ppm as u128);
        Some(now.saturating_add(dt.min(u64::MAX as u128) as u64))
    }
}

/// What a task may have of real time now: `None` if it must not be real-time, else the
/// CPU it may still use so (`Ns::MAX`: no budget applies, e.g. root's unlimited warp).
pub type Grant = Option<Ns>;

#[cfg(test)]
mod tests {
    use super::*;
    use vassal_core::MS;

    #[test]
    fn refills_at_its_rate_up_to_its_depth() {
        // A quarter of a CPU over a 200 ms window: 50 ms deep.
        let mut b = Bucket::new(CPU_PPM / 4, 200 * MS, 0);
        assert_eq!(b.left(0), 50 * MS);
        b.charge(0, 50 * MS);
        assert_eq!(b.left(0), 0);
        assert_eq!(b.left(40 * MS), 10 * MS);
        assert_eq!(b.left(10_000 * MS), 50 * MS, "never more than its depth");
    }

    #[test]
    fn a_debt_is_paid_before_it_grants_again() {
        let mut b = Bucket::new(CPU_PPM / 2, 100 * MS, 0);
        b.charge(0, 70 * MS); // 20 ms more than it held: a late charge
        assert_eq!(b.left(0), 0);
        // 1 ms needed: 21 ms of level at half a CPU is 42 ms of wall time.
        assert_eq!(b.ready_at(0, MS), Some(42 * MS));
        assert_eq!(b.left(40 * MS), 0);
        assert_eq!(b.left(42 * MS), MS);
    }

    #[test]
    fn long_run_real_time_is_at_most_its_rate_plus_one_window() {
        // A task that runs whenever the bucket allows, charged in 4 ms steps (a kernel
        // tick late): over 10 s it gets at most 30 % of a CPU plus the depth.
        let (rate, window) = (300_000, 200 * MS);
        let mut b = Bucket::new(rate, window, 0);
        let (mut now, mut got) = (0, 0);
        while now < 10_000 * MS {
            if b.ready_at(now, MS) == Some(now) {
                b.charge(now, 4 * MS);
                got += 4 * MS;
            }
            now += 4 * MS;
        }
        assert!(got <= 3_000 * MS + 60 * MS + 4 * MS, "{got}");
        assert!(got >= 2_900 * MS, "{got}: it should use nearly all it is granted");
    }

    #[test]
    fn zero_rate_never_refills() {
        let mut b = Bucket::new(0, vassal_core::SEC, 0);
        assert_eq!(b.left(0), 0);
        assert_eq!(b.ready_at(0, 1), None);
        // A bucket shallower than what a start needs starts when full.
        let mut b = Bucket::new(1_000, 200 * MS, 0); // 0.2 ms deep
        assert_eq!(b.ready_at(0, MS), Some(0));
        b.charge(0, 200_000);
        assert_eq!(b.ready_at(0, MS), Some(200 * MS));
    }
}
