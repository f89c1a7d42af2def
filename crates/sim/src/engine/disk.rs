//! The engine's side of the disk drives ([`crate::disk`]): a task that reaches an `io`
//! phase blocks (a short I/O: "sleeping" to the swap scheduler) and queues on its drive;
//! the drive serves the first queued task whose image is in memory, which is locked in
//! memory (V7 `SLOCK`) until its transfer ends; then it wakes and the drive takes the
//! next. A drive that waits for a swapped-out task is kicked when an image comes in.

use std::collections::BTreeMap;

use super::queue::{Ev, Timer};
use super::workload::Wait;
use super::Sim;
use crate::model::{Behaviour, Phase, Scenario};

/// Every drive the scenario's tasks name, in order of first mention.
pub(super) fn index(sc: &Scenario) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    let mut add = |disk: &String| {
        let n = out.len();
        out.entry(disk.clone()).or_insert(n);
    };
    for t in &sc.tasks {
        match &t.behaviour {
            Behaviour::Script { phases, .. } => {
                for p in phases {
                    if let Phase::Io { disk, .. } = p {
                        add(disk);
                    }
                }
            }
            Behaviour::Io { disk: Some(disk), .. } | Behaviour::Player { read: Some((disk, _)), .. } => add(disk),
            _ => {}
        }
    }
    out
}

impl Sim {
    /// Queues the disk transfer task `i` asked for as it blocked, if any.
    pub(super) fn start_io(&mut self, i: usize) {
        let Some((d, service)) = self.tasks[i].io.take() else { return };
        self.tasks[i].wait = Wait::Io;
        self.disks[d].request(i, service);
        self.disk_kick(d);
    }

    /// An idle drive starts its next transfer, if a queued task is in memory. If none is,
    /// the queued tasks that are swapped out want to come in: V7's `physio` sleepers are
    /// all woken when the buffer is freed, and one must run to take it; while the drive
    /// is busy they sleep again (to the swap scheduler: ready, then sleeping).
    pub(super) fn disk_kick(&mut self, d: usize) {
        let now = self.now;
        let swap = &self.swap;
        let loaded = |t: usize| swap.as_ref().is_none_or(|s| s.loaded(t));
        if let Some((_, end)) = self.disks[d].start_next(now, loaded) {
            self.set_timer(end, Timer::Disk(d), Ev::DiskDone(d));
        }
        if self.swap.is_none() {
            return;
        }
        let idle = self.disks[d].in_service().is_none();
        for t in self.disks[d].waiting() {
            let out = self.swap.as_ref().is_some_and(|s| !s.loaded(t));
            if idle && out {
                self.swap_ready(t);
            } else if let Some(sw) = &mut self.swap {
                sw.set_state(t, crate::swap::ProcState::Sleeping);
            }
        }
    }

    /// Every idle drive looks for a task that has come into memory.
    pub(super) fn disks_kick(&mut self) {
        for d in 0..self.disks.len() {
            self.disk_kick(d);
        }
    }

    /// The tasks locked in memory by a transfer under way.
    pub(super) fn io_locked(&self) -> Vec<usize> {
        self.disks.iter().filter_map(|d| d.in_service()).collect()
    }

    /// Drive `d`'s transfer ended: its task wakes, the next transfer starts.
    pub(super) fn disk_done(&mut self, d: usize) {
        if let Some(t) = self.disks[d].finish() {
            if self.tasks[t].wait == Wait::Io {
                self.tasks[t].wait = Wait::Timer { voluntary: true };
                self.resume(t);
            }
        }
        self.disk_kick(d);
    }
}
