//! A disk drive that serves one request at a time, first come first served: paper 004's
//! workload drive and paper 001's shared disk.
//!
//! V7 raw I/O (`physio`, which paper 004 §5's workload uses: its disk I/O "bypassed the
//! file system entirely") serialises on one buffer per drive: a process sleeps until the
//! buffer is free, then marks itself locked in memory (`SLOCK`), starts its transfer and
//! sleeps until it ends. So a drive serves one request at a time and the others queue; a
//! process in transfer cannot be swapped out; a process still queued can, and while its
//! image is swapped out it cannot take the buffer (it would have to run to start the
//! transfer): the drive serves the first queued request whose task is in memory, and
//! waits while none is. Without a swapping memory every task counts as in memory: plain
//! first come, first served (a file system's disk queue, for paper 001's player and
//! greps).
//!
//! A request's service time (seek, rotation, transfer) is drawn by the task when it
//! blocks; times are integer ns.

use std::collections::VecDeque;

use vassal_core::Ns;

/// One drive: its queue and the request in service.
#[derive(Clone, Debug, Default)]
pub struct Disk {
    /// Requests not yet served, in arrival order: (task, service time).
    queue: VecDeque<(usize, Ns)>,
    /// The request in service: (task, when it ends).
    current: Option<(usize, Ns)>,
    /// Requests served so far.
    pub served: u64,
    /// Time spent serving.
    pub busy_ns: Ns,
}

impl Disk {
    /// Task `task` asks for a transfer of `service` ns.
    pub fn request(&mut self, task: usize, service: Ns) {
        self.queue.push_back((task, service));
    }

    /// The task whose transfer is under way.
    pub fn in_service(&self) -> Option<usize> {
        self.current.map(|(t, _)| t)
    }

    /// Whether `task` has a request queued or in service.
    pub fn holds(&self, task: usize) -> bool {
        self.in_service() == Some(task) || self.queue.iter().any(|&(t, _)| t == task)
    }

    /// If the drive is idle, starts the first queued request whose task is in memory
    /// (`loaded`); returns (task, end time).
    pub fn start_next(&mut self, now: Ns, loaded: impl Fn(usize) -> bool) -> Option<(usize, Ns)> {
        if self.current.is_some() {
            return None;
        }
        let k = self.queue.iter().position(|&(t, _)| loaded(t))?;
        let (task, service) = self.queue.remove(k)?;
        let end = now.saturating_add(service);
        self.current = Some((task, end));
        self.busy_ns = self.busy_ns.saturating_add(service);
        Some((task, end))
    }

    /// The transfer under way ended: its task.
    pub fn finish(&mut self) -> Option<usize> {
        let (t, _) = self.current.take()?;
        self.served += 1;
        Some(t)
    }

    /// Task `task` exited: its queued requests go (one in service finishes).
    pub fn forget(&mut self, task: usize) {
        self.queue.retain(|&(t, _)| t != task);
    }

    pub fn queued(&self) -> usize {
        self.queue.len()
    }

    /// The tasks queued (not in service), in order.
    pub fn waiting(&self) -> Vec<usize> {
        self.queue.iter().map(|&(t, _)| t).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_request_at_a_time_first_come_first_served() {
        let mut d = Disk::default();
        d.request(3, 10);
        d.request(1, 5);
        assert_eq!(d.start_next(0, |_| true), Some((3, 10)));
        assert_eq!(d.start_next(0, |_| true), None, "busy");
        assert!(d.holds(1) && d.holds(3));
        assert_eq!(d.finish(), Some(3));
        assert_eq!(d.start_next(10, |_| true), Some((1, 15)));
        assert_eq!(d.finish(), Some(1));
        assert_eq!((d.served, d.busy_ns, d.queued()), (2, 15, 0));
        assert_eq!(d.start_next(20, |_| true), None, "nothing queued");
    }

    #[test]
    fn a_swapped_out_task_loses_its_turn_and_the_drive_waits_for_one_in_memory() {
        let mut d = Disk::default();
        d.request(0, 10);
        d.request(1, 10);
        // task 0 is swapped out: 1 goes first
        assert_eq!(d.start_next(0, |t| t != 0), Some((1, 10)));
        d.finish();
        // nobody queued is in memory: idle
        assert_eq!(d.start_next(10, |_| false), None);
        assert_eq!(d.start_next(30, |_| true), Some((0, 40)));
        d.forget(0);
        assert_eq!(d.finish(), Some(0), "a transfer under way finishes");
    }
}
