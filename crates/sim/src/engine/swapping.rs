//! The engine's side of swapping (paper 004 §2, §4.2–4.3) and the kernel event counts of
//! §5 ("the number of swap operations, the CPU utilization, and the number of dispatches
//! and system calls"). The rules are in [`crate::swap`] and [`crate::memory`]; here the
//! swap scheduler is woken, its steps are carried out on the dispatcher (a swapped-out
//! task is allowed on no CPU, [`vassal_core::Dispatcher::set_loaded`]) and its transfers
//! are timed.
//!
//! The swap scheduler is a kernel process of the best priority (V7's PSWP, FB's level
//! 16): each time it runs — woken by the end of a transfer, by a ready task being
//! swapped out while it sleeps on `runout`, once a second or when memory is freed while
//! it sleeps on `runin` — it is one dispatch, takes `swap_cpu` of CPU 0 (overhead), and
//! when it sleeps again the CPU scheduler makes a new decision (the process it preempted
//! may or may not get the CPU back). Transfers use one swap device, one at a time (the
//! swap scheduler waits for each), so they never queue.

use vassal_core::{CpuId, Ns, Preempt, SEC};

use super::{Ev, MarkKind, Sim, Timer};
use crate::report::{ImageReport, KernelReport};
use crate::swap::{Activity, Done, ProcState, Step};

/// Counts of kernel events (paper 004 §5–6).
#[derive(Clone, Debug, Default)]
pub(crate) struct Kernel {
    /// Decisions that gave a CPU a task, plus each run of the swap scheduler.
    pub dispatches: u64,
    /// Voluntary blocks, yields, messages and exits.
    pub syscalls: u64,
    pub swapper_runs: u64,
    /// CPU idle while a ready task was swapped out.
    pub swap_idle_ns: Ns,
    /// CPU time of the swap scheduler: its runs, its searches, and the cycles its
    /// transfers' DMA stole.
    pub swap_cpu_ns: Ns,
    /// Per task: when it exited.
    pub exits: Vec<Option<Ns>>,
}

impl Kernel {
    pub fn new(ntasks: usize) -> Self {
        Kernel { exits: vec![None; ntasks], ..Kernel::default() }
    }
}

impl Sim {
    /// Task `i` starts: its image is created in memory if a hole takes it, else it starts
    /// swapped out (V7 `newproc`, without the cost of writing the copy).
    pub(super) fn swap_start(&mut self, i: usize) {
        let now = self.now;
        let Some(sw) = &mut self.swap else { return };
        if !sw.start(i, now) {
            self.drv.disp.set_loaded(now, self.tasks[i].id, false);
        }
    }

    /// Task `i` became ready: if it is swapped out, the sleeping swap scheduler wakes.
    pub(super) fn swap_ready(&mut self, i: usize) {
        let Some(sw) = &mut self.swap else { return };
        sw.set_state(i, ProcState::Ready);
        let wake = match sw.activity() {
            _ if sw.loaded(i) => false,
            Activity::Runout => true,
            // With `wake_on_ready`, a swapped-out task that is now the CPU scheduler's
            // best ready task (the one the priority swap-in would take) wakes it too.
            Activity::Runin if sw.cfg.wake_on_ready => self.drv.disp.swap_advice().is_some_and(|a| {
                a.ready.iter().find(|t| !self.swap.as_ref().is_some_and(|s| s.loaded(t.0 as usize))).is_some_and(|t| t.0 as usize == i)
            }),
            _ => false,
        };
        if wake {
            self.swap_wake_at(self.now);
        }
    }

    /// Task `i` blocked: waiting (a terminal wait) or sleeping (short I/O). A task that
    /// starts waiting may be the victim the swap scheduler waits for: V7's `sleep()` at a
    /// priority above PZERO wakes it from `runin`.
    pub(super) fn swap_blocked(&mut self, i: usize) {
        let waiting = self.tasks[i].waiting;
        let Some(sw) = &mut self.swap else { return };
        sw.set_state(i, if waiting { ProcState::Waiting } else { ProcState::Sleeping });
        if waiting && sw.activity() == Activity::Runin {
            self.swap_wake_at(self.now);
        }
    }

    pub(super) fn swap_exit(&mut self, i: usize) {
        self.kernel.syscalls += 1;
        self.kernel.exits[i] = Some(self.now);
        let Some(sw) = &mut self.swap else { return };
        if sw.exit(i) && sw.wake_on_free() {
            self.swap_wake_at(self.now);
        }
    }

    /// CPU idle for `ns`: counted if a ready task was swapped out meanwhile.
    pub(super) fn swap_idle(&mut self, ns: Ns) {
        if self.swap.as_ref().is_some_and(|s| s.any_ready_out()) {
            self.kernel.swap_idle_ns += ns;
        }
    }

    /// Queues the swap scheduler's next wake-up (replacing any queued one).
    fn swap_wake_at(&mut self, at: Ns) {
        self.set_timer(at, Timer::Swap, Ev::Swap);
    }

    pub(super) fn swap_event(&mut self) {
        if self.swap.is_none() {
            return;
        }
        // Idle time up to now is judged by the swap state before it changes.
        self.settle_all();
        let now = self.now;
        let Some(sw) = &mut self.swap else { return };
        if let Activity::Busy(_) = sw.activity() {
            match sw.finish(now) {
                Some(Done::In(t)) => {
                    self.drv.disp.set_loaded(now, self.tasks[t].id, true);
                    self.mark(t, MarkKind::SwapIn);
                    // A drive may have been waiting for this task to take its turn.
                    self.disks_kick();
                }
                Some(Done::Out { next: Some(until), .. }) => self.swap_wake_at(until),
                _ => {}
            }
        }
        self.swap_run();
    }

    /// One run of the swap scheduler: a dispatch, its CPU time, and one step of its loop.
    fn swap_run(&mut self) {
        let now = self.now;
        self.kernel.swapper_runs += 1;
        self.kernel.dispatches += 1;
        if matches!(self.swap.as_ref().map(|s| s.activity()), Some(Activity::Busy(_))) {
            // The next write of a cluster is under way: no decision, only the run.
            let Some(sw) = &mut self.swap else { return };
            let cost = sw.cfg.swap_cpu.saturating_add(sw.take_stolen());
            self.swap_charge(cost);
            return;
        }
        let advice = self.drv.disp.swap_advice();
        let order: Option<Vec<usize>> = advice.as_ref().map(|a| a.ready.iter().map(|t| t.0 as usize).collect());
        let mut pinned: Vec<usize> = advice.map(|a| a.resident.iter().map(|t| t.0 as usize).collect()).unwrap_or_default();
        // A task whose disk transfer is under way is locked in memory (V7 physio's SLOCK).
        pinned.extend(self.io_locked());
        let Some(sw) = &mut self.swap else { return };
        let step = sw.run(now, order.as_deref(), &pinned);
        // The run's CPU: its fixed part, the entries its decisions searched, and what the
        // DMA of a transfer it started steals.
        let cost = sw.cfg.swap_cpu.saturating_add(sw.cfg.scan_entry.saturating_mul(sw.scanned)).saturating_add(sw.take_stolen());
        self.swap_charge(cost);
        match step {
            Step::In { until, .. } => self.swap_wake_at(until),
            Step::Out { tasks, until } => {
                for t in tasks {
                    self.drv.disp.set_loaded(now, self.tasks[t].id, false);
                    self.mark(t, MarkKind::SwapOut);
                }
                self.swap_wake_at(until);
            }
            // V7: `runin` is woken by the clock once a second (and by `mfree`).
            Step::Sleep(Activity::Runin) => self.swap_wake_at((now / SEC + 1) * SEC),
            Step::Sleep(_) => self.drv.cancel_timer(Timer::Swap),
        }
    }

    /// The swap scheduler's CPU time, charged to CPU 0 as overhead; when it sleeps
    /// again, the CPU scheduler decides anew.
    fn swap_charge(&mut self, cost: Ns) {
        self.kernel.swap_cpu_ns = self.kernel.swap_cpu_ns.saturating_add(cost);
        if let Some(cpu) = self.cpus.first_mut() {
            cpu.busy_until = cpu.busy_until.max(self.now).saturating_add(cost);
            self.drv.request(CpuId(0), Preempt::Resched);
        }
    }

    /// The swap state agrees with the dispatcher's.
    pub(super) fn swap_check(&self) -> Result<(), String> {
        let Some(sw) = &self.swap else { return Ok(()) };
        sw.check()?;
        for (i, t) in self.tasks.iter().enumerate() {
            let started = sw.imgs[i].state != ProcState::NotStarted;
            let alive = started && self.drv.disp.state(t.id) != vassal_core::TaskState::Dead;
            if alive && self.drv.disp.is_loaded(t.id) != sw.loaded(i) {
                return Err(format!(
                    "task {}: dispatcher loaded {} but swapper {}",
                    self.sc.tasks[i].name,
                    self.drv.disp.is_loaded(t.id),
                    sw.loaded(i)
                ));
            }
            if alive && !sw.loaded(i) {
                if let vassal_core::TaskState::Running(c) = self.drv.disp.state(t.id) {
                    return Err(format!("task {} runs on cpu{} while swapped out", self.sc.tasks[i].name, c.0));
                }
            }
        }
        Ok(())
    }

    /// The kernel counts for the report.
    pub(super) fn kernel_report(&self) -> KernelReport {
        let user_ns: Ns = self.metrics.tasks.iter().map(|t| t.cpu_ns).sum();
        let last_exit_ns = self.kernel.exits.iter().flatten().copied().max();
        let window = last_exit_ns.unwrap_or(self.sc.until);
        let images = match &self.swap {
            None => Vec::new(),
            Some(sw) => sw
                .imgs
                .iter()
                .enumerate()
                .map(|(i, m)| ImageReport {
                    name: self.sc.tasks[i].name.clone(),
                    size_kb: m.size,
                    swap_ins: m.swap_ins,
                    swap_outs: m.swap_outs,
                    exit_ns: self.kernel.exits[i],
                })
                .collect(),
        };
        KernelReport {
            dispatches: self.kernel.dispatches,
            syscalls: self.kernel.syscalls,
            swap_ins: self.swap.as_ref().map_or(0, |s| s.swap_ins),
            swap_outs: self.swap.as_ref().map_or(0, |s| s.swap_outs),
            swapper_runs: self.kernel.swapper_runs,
            swap_idle_ns: self.kernel.swap_idle_ns,
            swap_cpu_ns: self.kernel.swap_cpu_ns,
            disks: {
                let mut named: Vec<(&String, &usize)> = self.disk_index.iter().collect();
                named.sort_by_key(|(_, &k)| k);
                named
                    .into_iter()
                    .map(|(n, &k)| crate::report::DiskReport {
                        name: n.clone(),
                        served: self.disks[k].served,
                        busy_ns: self.disks[k].busy_ns,
                    })
                    .collect()
            },
            user_ns,
            last_exit_ns,
            user_util: if window > 0 { user_ns as f64 / window as f64 / self.cpus.len() as f64 } else { 0.0 },
            images,
        }
    }
}
