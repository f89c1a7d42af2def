//! The engine's side of swapping (paper 004 §2, §4.2–4.3) and the kernel event counts of
//! §5 ("the number of swap operations, the CPU utilization, and the number of dispatches
//! and system calls"). The rules are in [`crate::swap`] and [`crate::memory`]; here the
//! swap scheduler is woken, its steps are carried out on the dispatcher (a swapped-out
//! task is allowed on no CPU, [`vassal_core::Dispatcher::set_loaded`]) and its transfers
//! are timed.
//!
//! The swap scheduler is a kernel process of the best priority (V7's PSWP, FB's level
//! 16): each time it runs — woken by the end of one of its transfers, by a ready task
//! being swapped out while it sleeps on `runout`, once a second or when memory is freed
//! while it sleeps on `runin` — it is one dispatch, takes `swap_cpu` of CPU 0
//! (overhead), and when it sleeps again the CPU scheduler makes a new decision (the
//! process it preempted may or may not get the CPU back). Transfers use one swap device,
//! one at a time, first come first served (timer `SwapDevice`): the swap scheduler's and
//! those of tasks that swap themselves out to grow (a script's `grow` phase, V7
//! `expand()`); the DMA of each steals CPU 0's cycles while it moves data.

use vassal_core::{CpuId, Ns, Preempt, SEC};

use super::{Ev, MarkKind, Sim, Timer};
use crate::report::{ImageReport, KernelReport};
use crate::swap::{Activity, Growth, ProcState, Step, XferKind};

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
    /// CPU time of the swap scheduler: its runs, its searches, and the cycles swap
    /// transfers' DMA stole.
    pub swap_cpu_ns: Ns,
    /// Time-weighted sum of the tasks loaded (task·ns), for their mean.
    pub resident_ns: u128,
    /// When `resident_ns` was last brought up to date.
    pub resident_at: Ns,
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
        self.swap_account();
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
        self.swap_account();
        let Some(sw) = &mut self.swap else { return };
        let was_busy = sw.activity() == Activity::Busy;
        let freed = sw.exit(i);
        // Memory freed wakes `runin` (V7 mfree); a cluster write dropped may end its wait.
        if (freed && sw.wake_on_free()) || (was_busy && sw.activity() != Activity::Busy) {
            self.swap_wake_at(self.now);
        }
    }

    /// Brings the time-weighted count of loaded tasks up to now.
    fn swap_account(&mut self) {
        let Some(sw) = &self.swap else { return };
        let k = &mut self.kernel;
        k.resident_ns += sw.resident() as u128 * self.now.saturating_sub(k.resident_at) as u128;
        k.resident_at = self.now;
    }

    /// A script's `grow` phase: running task `i`'s image changes by `kb` (V7 `expand()`,
    /// through `sbrk`, a system call). A move to a larger hole costs the copy on its CPU;
    /// with no hole the task swaps itself out; a shrink or a move frees memory, which
    /// wakes the swap scheduler sleeping on `runin` (V7 `mfree`).
    pub(super) fn swap_grow(&mut self, i: usize, kb: i64) {
        self.kernel.syscalls += 1;
        let now = self.now;
        self.swap_account();
        let Some(sw) = &mut self.swap else { return };
        let size = sw.imgs[i].size.saturating_add_signed(kb);
        let copy = sw.cfg.copy_per_kb;
        let growth = sw.grow(now, i, size);
        let wake = sw.wake_on_free();
        let stolen = sw.take_stolen();
        match growth {
            Growth::Moved { copied } => {
                // V7 copyseg: the copy is the growing task's kernel time on its CPU.
                if let vassal_core::TaskState::Running(c) = self.drv.disp.state(self.tasks[i].id) {
                    let c = c.0 as usize;
                    self.settle(c);
                    let cpu = &mut self.cpus[c];
                    cpu.busy_until = cpu.busy_until.max(now).saturating_add(copy.saturating_mul(copied));
                }
                if wake {
                    self.swap_wake_at(now);
                }
            }
            Growth::InPlace => {
                if kb < 0 && wake {
                    self.swap_wake_at(now);
                }
            }
            Growth::Swapped => {
                self.drv.disp.set_loaded(now, self.tasks[i].id, false);
                self.mark(i, MarkKind::SwapOut);
                self.swap_steal(stolen);
                self.swap_device_arm();
            }
            Growth::Refused => {
                let name = self.sc.tasks[i].name.clone();
                self.metrics.note(now, format!("{name}: grow to {size} KB refused (not loaded, or beyond the memory)"));
            }
        }
    }

    /// Cycles a swap transfer's DMA steals, charged to CPU 0 as overhead (no decision).
    fn swap_steal(&mut self, cost: Ns) {
        if cost == 0 || self.cpus.is_empty() {
            return;
        }
        self.kernel.swap_cpu_ns = self.kernel.swap_cpu_ns.saturating_add(cost);
        self.settle(0);
        let cpu = &mut self.cpus[0];
        cpu.busy_until = cpu.busy_until.max(self.now).saturating_add(cost);
        self.replan(0);
    }

    /// Arms the swap device's timer for the end of the transfer under way.
    fn swap_device_arm(&mut self) {
        match self.swap.as_ref().and_then(|s| s.device_end()) {
            Some(end) => self.set_timer(end, Timer::SwapDevice, Ev::SwapDevice),
            None => self.drv.cancel_timer(Timer::SwapDevice),
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

    /// The swap scheduler wakes (its once-a-second retry, or a wake-up).
    pub(super) fn swap_event(&mut self) {
        if self.swap.as_ref().is_none_or(|s| s.activity() == Activity::Busy) {
            return;
        }
        // Idle time up to now is judged by the swap state before it changes.
        self.settle_all();
        self.swap_run();
    }

    /// The swap device's transfer ended: its effect, the next transfer, and the swap
    /// scheduler's run if the transfer was its own.
    pub(super) fn swap_device_event(&mut self) {
        self.settle_all();
        self.swap_account();
        let now = self.now;
        let Some(sw) = &mut self.swap else { return };
        let Some(done) = sw.finish(now) else { return };
        let stolen = sw.take_stolen();
        self.swap_device_arm();
        match done.kind {
            XferKind::In => {
                let t = done.task;
                if self.swap.as_ref().is_some_and(|s| s.loaded(t)) {
                    self.drv.disp.set_loaded(now, self.tasks[t].id, true);
                    self.mark(t, MarkKind::SwapIn);
                    // A drive may have been waiting for this task to take its turn.
                    self.disks_kick();
                }
            }
            XferKind::Out => {}
            XferKind::Grow => {
                // The task is out and ready (V7 xswap wakes `runout`); its memory is free
                // (mfree wakes `runin`).
                self.swap_steal(stolen);
                if self.swap.as_ref().is_some_and(|s| s.activity() != Activity::Busy) {
                    self.swap_wake_at(now);
                }
                return;
            }
        }
        self.swap_run_with(stolen);
    }

    /// One run of the swap scheduler: a dispatch, its CPU time, and one step of its loop.
    fn swap_run(&mut self) {
        self.swap_run_with(0);
    }

    /// A run that also pays `stolen` cycles of a transfer started just before it.
    fn swap_run_with(&mut self, stolen: Ns) {
        let now = self.now;
        self.swap_account();
        self.kernel.swapper_runs += 1;
        self.kernel.dispatches += 1;
        if self.swap.as_ref().is_some_and(|s| s.activity() == Activity::Busy) {
            // The next write of a cluster is under way: no decision, only the run.
            let Some(sw) = &mut self.swap else { return };
            let cost = sw.cfg.swap_cpu.saturating_add(stolen).saturating_add(sw.take_stolen());
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
        // DMA of transfers started steals.
        let cost = sw
            .cfg
            .swap_cpu
            .saturating_add(sw.cfg.scan_entry.saturating_mul(sw.scanned))
            .saturating_add(stolen)
            .saturating_add(sw.take_stolen());
        self.swap_charge(cost);
        match step {
            Step::In { .. } => self.swap_device_arm(),
            Step::Out { tasks } => {
                for t in tasks {
                    self.drv.disp.set_loaded(now, self.tasks[t].id, false);
                    self.mark(t, MarkKind::SwapOut);
                }
                self.swap_device_arm();
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
            growth_swaps: self.swap.as_ref().map_or(0, |s| s.growth_swaps),
            resident_mean: if window > 0 { self.kernel.resident_ns as f64 / window as f64 } else { 0.0 },
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
