//! The engine's events and its use of the driver's keyed queue: one-shot events
//! ([`Sim::push`]) and keyed timers ([`Sim::set_timer`]: each key names at most one
//! queued event, so re-arming replaces it and nothing stale is ever popped), the events
//! queued at the start, and what each event does ([`Sim::handle`]).
//!
//! Invariant: nothing is queued past the scenario's horizon (a timer armed past it is
//! cancelled instead), and under the tick clock timer waits are quantised to ticks.

use std::sync::Arc;

use vassal_core::{CpuId, Ns, Preempt, Request, TimerKey};

use super::workload::{sample, Wait};
use super::Sim;
use crate::model::{Behaviour, ClockMode};

/// An engine event. Scheduler events are the driver's own ([`Due::Event`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Ev {
    LoadSched(usize),
    UnloadSched(usize),
    TaskStart(usize),
    /// The end of a task's timed wait (timer [`Timer::Wake`]).
    TaskWake(usize),
    JobRelease(usize),
    LoopFault(usize),
    /// A CPU's burst completion or slice end (timer [`Timer::Cpu`]).
    CpuTimer(u16),
    Tick,
    Interrupt(usize),
    /// Unscheduled time on a CPU from one of its sources (`Unscheduled::source`).
    Unscheduled(u16, u16),
    /// The swap scheduler wakes (a transfer ended, its once-a-second retry, or a wake-up;
    /// timer [`Timer::Swap`]).
    Swap,
    /// A registered behaviour's own timer: task, key (timer [`Timer::Behave`]).
    Behave(usize, u32),
    /// A contained module's watchdog may fire now (see `Sim::contain`).
    Watchdog,
    /// A disk drive's transfer ended (timer [`Timer::Disk`]).
    DiskDone(usize),
    /// The swap device's transfer ended (timer [`Timer::SwapDevice`]).
    SwapDevice,
}

/// The keys of the engine's timers that are re-armed or cancelled: each names at most
/// one queued event (see [`vassal_core::Timers`]); the other events are one-shot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Timer {
    Cpu(u16),
    Wake(usize),
    Swap,
    Behave(usize, u32),
    Disk(usize),
    SwapDevice,
}

/// A CPU's timer, re-armed at nearly every decision, has a lane of its own; the wake and
/// swap timers are found by index; a behaviour's own timers and the (few) disks' by
/// their key.
impl TimerKey for Timer {
    fn lane(&self) -> Option<usize> {
        match *self {
            Timer::Cpu(c) => Some(c as usize),
            _ => None,
        }
    }
    fn dense(&self) -> Option<usize> {
        match *self {
            Timer::Swap => Some(0),
            Timer::Wake(i) => Some(1 + i),
            Timer::Cpu(_) | Timer::Behave(..) | Timer::Disk(_) | Timer::SwapDevice => None,
        }
    }
}

impl Sim {
    /// Queues a one-shot event (none past the horizon).
    pub(super) fn push(&mut self, at: Ns, ev: Ev) {
        if at <= self.sc.until {
            self.drv.add_timer(at, ev);
        }
    }

    /// Arms timer `key` at `at`, replacing its queued event (past the horizon: cancels it).
    pub(super) fn set_timer(&mut self, at: Ns, key: Timer, ev: Ev) {
        if at <= self.sc.until {
            self.drv.set_timer(at, key, ev);
        } else {
            self.drv.cancel_timer(key);
        }
    }

    /// Rounds a timer expiry up to the clock's resolution.
    pub(super) fn quantise(&self, at: Ns) -> Ns {
        match self.sc.machine.clock {
            ClockMode::OneShot => at,
            ClockMode::Tick => at.div_ceil(self.tick).saturating_mul(self.tick),
        }
    }

    pub(super) fn queue_initial_events(&mut self) {
        let sc = Arc::clone(&self.sc);
        for (k, s) in sc.schedulers.iter().enumerate() {
            self.push(s.load_at, Ev::LoadSched(k));
            if let Some(t) = s.unload_at {
                self.push(t, Ev::UnloadSched(k));
            }
        }
        for (i, t) in sc.tasks.iter().enumerate() {
            self.push(t.start, Ev::TaskStart(i));
            if let Behaviour::Periodic { offset, .. } = t.behaviour {
                self.push(t.start.saturating_add(offset), Ev::JobRelease(i));
            }
            if let Some(at) = t.loop_at {
                self.push(at, Ev::LoopFault(i));
            }
        }
        if self.tick > 0 {
            self.push(self.tick, Ev::Tick);
        }
        for k in 0..self.sc.interrupts.len() {
            let gap = sample(&self.sc.interrupts[k].every, &mut self.irq_rngs[k]).max(1);
            self.push(self.sc.interrupts[k].start.saturating_add(gap), Ev::Interrupt(k));
        }
        if let Some(u) = &sc.machine.unscheduled {
            for c in 0..self.cpus.len() {
                for k in 0..=u.also.len() {
                    let Some((interval, _)) = u.source(k) else { continue };
                    let gap = sample(interval, &mut self.cpu_rngs[c]).max(1);
                    self.push(gap, Ev::Unscheduled(c as u16, k as u16));
                }
            }
        }
    }

    pub(super) fn handle(&mut self, ev: Ev) {
        match ev {
            Ev::LoadSched(k) => self.load_sched(k),
            Ev::UnloadSched(k) => self.unload_sched(k),
            Ev::TaskStart(i) => {
                if let Some(name) = self.sc.tasks[i].scheduler.clone() {
                    self.send(i, &name, Request::Join);
                }
                self.tasks[i].wait = Wait::Timer { voluntary: true };
                self.swap_start(i);
                self.resume(i);
            }
            Ev::TaskWake(i) => {
                if matches!(self.tasks[i].wait, Wait::Timer { .. }) {
                    self.resume(i);
                }
            }
            Ev::JobRelease(i) => self.release_job(i),
            Ev::LoopFault(i) => self.loop_fault(i),
            Ev::CpuTimer(c) => {
                let c = c as usize;
                self.settle(c);
                let Some(i) = self.cpus[c].current else { return };
                if self.tasks[i].remaining == 0 {
                    self.after_burst(i, c);
                } else if self.cpus[c].slice_end.is_some_and(|e| e <= self.now) {
                    self.drv.request(CpuId(c as u16), Preempt::SliceExpired);
                } else {
                    self.replan(c);
                }
            }
            Ev::Tick => {
                for c in 0..self.cpus.len() {
                    self.settle(c);
                    self.drv.disp.tick(self.now, CpuId(c as u16));
                }
                self.push(self.now.saturating_add(self.tick), Ev::Tick);
            }
            Ev::Interrupt(k) => self.interrupt(k),
            Ev::Swap => self.swap_event(),
            Ev::Behave(i, key) => self.behave_timer(i, key),
            Ev::Watchdog => self.watchdog_at = None,
            Ev::DiskDone(d) => self.disk_done(d),
            Ev::SwapDevice => self.swap_device_event(),
            Ev::Unscheduled(c, k) => {
                let c = c as usize;
                self.settle(c);
                let sc = Arc::clone(&self.sc);
                let Some((interval, duration)) = sc.machine.unscheduled.as_ref().and_then(|u| u.source(k as usize)) else { return };
                let dur = sample(duration, &mut self.cpu_rngs[c]);
                let gap = sample(interval, &mut self.cpu_rngs[c]).max(1);
                let cpu = &mut self.cpus[c];
                cpu.busy_until = cpu.busy_until.max(self.now).saturating_add(dur);
                self.replan(c);
                self.push(self.now.saturating_add(gap), Ev::Unscheduled(c as u16, k));
            }
        }
    }
}
