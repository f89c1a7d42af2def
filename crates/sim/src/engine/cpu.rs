//! Per-CPU state and decisions: accounting up to now ([`Sim::settle`]: overhead, then
//! progress or idle), planning each CPU's next timer (burst end or slice end), the
//! decisions made through the driver and the start of the chosen task (switch and
//! migration costs, the slice), and the scheduler hierarchy the decisions come from
//! (loading, unloading and containing schedulers and modules).
//!
//! Invariant: a CPU's `settled` time only grows, and `busy + overhead <= settled`.

use vassal_core::driver;
use vassal_core::{CpuId, Dispatched, Ns, Position};

use super::queue::{Ev, Timer};
use super::{Sim, FOREVER};

#[derive(Default)]
pub(super) struct Cpu {
    pub(super) current: Option<usize>,
    pub(super) slice_end: Option<Ns>,
    /// Overhead (switch, migration, unscheduled time) runs until this time.
    pub(super) busy_until: Ns,
    /// Time up to which this CPU is accounted.
    pub(super) settled: Ns,
}

impl Sim {
    /// Accounts CPU `c` up to now: overhead until `busy_until`, then progress of the
    /// running task (or idle).
    pub(super) fn settle(&mut self, c: usize) {
        let now = self.now;
        let cpu = &mut self.cpus[c];
        if now <= cpu.settled {
            return;
        }
        let from = cpu.settled;
        let ov_end = now.min(cpu.busy_until);
        if ov_end > from {
            self.metrics.overhead(c, ov_end - from);
        }
        let run_from = from.max(cpu.busy_until);
        cpu.settled = now;
        if cpu.current.is_none() && now > run_from {
            self.swap_idle(now - run_from);
        }
        let cpu = &mut self.cpus[c];
        if let Some(i) = cpu.current {
            if now > run_from {
                let ran = now - run_from;
                let t = &mut self.tasks[i];
                if t.remaining != FOREVER {
                    t.remaining = t.remaining.saturating_sub(ran);
                }
                self.metrics.ran(i, c, ran);
                self.drv.disp.account(now, t.id, CpuId(c as u16), ran);
            }
        }
    }

    pub(super) fn settle_all(&mut self) {
        for c in 0..self.cpus.len() {
            self.settle(c);
        }
    }

    /// Handles, before any other event of this instant, each CPU's timer due now (burst
    /// completions and slice ends: docs/jobs.md). Each is taken out of the queue as a
    /// cancelled timer, so it counts once in `totals.events` (events handled + timers
    /// dropped), as it would have popped.
    pub(super) fn cpu_timers_due(&mut self) {
        if !self.drv.lane_due(self.now) {
            return; // no CPU's timer is due (they are the only timers with a lane)
        }
        for c in 0..self.cpus.len() {
            let key = Timer::Cpu(c as u16);
            if self.drv.timer_at(key) == Some(self.now) {
                self.drv.cancel_timer(key);
                self.handle(Ev::CpuTimer(c as u16));
            }
        }
    }

    /// Plans the next event on CPU `c`: the current burst's completion or its slice end.
    // Inlined into its callers (docs/bench.md, sixteenth round).
    #[inline(always)]
    pub(super) fn replan(&mut self, c: usize) {
        let now = self.now;
        let cpu = &mut self.cpus[c];
        let at = match cpu.current {
            None => FOREVER,
            Some(i) => {
                let remaining = self.tasks[i].remaining;
                let done = if remaining == FOREVER { FOREVER } else { now.max(cpu.busy_until).saturating_add(remaining) };
                done.min(cpu.slice_end.unwrap_or(FOREVER))
            }
        };
        let at = (at != FOREVER).then_some(at);
        let key = Timer::Cpu(c as u16);
        if at == self.drv.timer_at(key) {
            return; // the queued timer is still right
        }
        match at {
            Some(at) => self.set_timer(at, key, Ev::CpuTimer(c as u16)),
            None => self.drv.cancel_timer(key),
        }
    }

    // ----- decisions -----

    /// The dispatcher decided `d` on CPU `c`.
    pub(super) fn dispatched(&mut self, c: usize, d: Option<Dispatched>) {
        // `current` stays the task this CPU switches from, for start()'s switch cost.
        let prev = self.cpus[c].current;
        if let Some(p) = prev.filter(|&p| d.map(|d| d.task) != Some(self.tasks[p].id)) {
            self.metrics.runnable(p, self.now);
        }
        match d {
            Some(d) => self.start(c, d),
            None => {
                self.cpus[c].current = None;
                self.cpus[c].slice_end = None;
                self.slice(c, None);
                self.replan(c);
            }
        }
    }

    // Inlined into its callers (docs/bench.md, sixteenth round).
    #[inline(always)]
    pub(super) fn start(&mut self, c: usize, d: Dispatched) {
        let i = d.task.0 as usize;
        let now = self.now;
        if self.cpus[c].current != Some(i) {
            let m = &self.sc.machine;
            let cost = m.switch_cost + if d.migrated { m.migration_cost } else { 0 };
            let cpu = &mut self.cpus[c];
            cpu.busy_until = cpu.busy_until.max(now).saturating_add(cost);
            self.metrics.switched_in(i, d.migrated);
        }
        self.kernel.dispatches += 1;
        let slice_end = d.slice.map(|s| self.quantise(now.saturating_add(s)));
        if self.trace.is_some() {
            let by = self.drv.disp.sched_name(d.by).unwrap_or("?").to_string();
            self.slice(c, Some((i, &by)));
        }
        let cpu = &mut self.cpus[c];
        cpu.current = Some(i);
        cpu.slice_end = slice_end;
        let run_from = now.max(cpu.busy_until);
        if let Some(until) = self.tasks[i].run_until {
            // a wall-clock run ends at its time, however long the task waited
            self.tasks[i].remaining = until.saturating_sub(run_from);
        }
        self.metrics.started(i, run_from);
        self.replan(c);
    }

    /// Applies the effects policies asked for and makes every pending decision, until
    /// nothing is left to do at this instant (the driver's settle).
    pub(super) fn flush(&mut self) {
        driver::settle(self, self.now);
    }

    /// Containment of loaded modules (issue 8): ejects the ones that failed, and queues a
    /// check for when a watchdog could next fire.
    pub(super) fn contain(&mut self) {
        if !self.drv.disp.containing() {
            return;
        }
        let ejected = self.drv.disp.eject_failed(self.now);
        if !ejected.is_empty() {
            for e in &ejected {
                let to: Vec<String> = e
                    .moved
                    .iter()
                    .map(|(t, s)| {
                        let task = self.sc.tasks.get(t.0 as usize).map_or_else(|| t.to_string(), |x| x.name.clone());
                        format!("{task} -> {}", self.drv.disp.sched_name(*s).unwrap_or("?"))
                    })
                    .collect();
                self.metrics.note(self.now, format!("scheduler '{}' ejected: {} [{}]", e.name, e.reason, to.join(", ")));
                if let Some(k) = self.sched_ids.iter().position(|&id| id == Some(e.sched)) {
                    self.sched_ids[k] = None;
                }
            }
            self.settle_all();
            self.flush();
        }
        if let Some(at) = self.drv.disp.next_watchdog() {
            if self.watchdog_at.is_none_or(|w| at < w) {
                self.watchdog_at = Some(at);
                self.push(at, Ev::Watchdog);
            }
        }
    }

    pub(super) fn load_sched(&mut self, k: usize) {
        let spec = self.sc.schedulers[k].clone();
        if crate::modules::module_path(&spec.policy).is_some() {
            return self.load_module(k);
        }
        let policy = match vassal_policies::build(&spec.policy.kind, &spec.policy.params) {
            Ok(p) => p,
            Err(e) => {
                self.metrics.note(self.now, format!("scheduler '{}' not loaded: {e}", spec.name));
                return;
            }
        };
        // Schedulers listed earlier in the file sit higher.
        let pos = (0..k).rev().find_map(|j| self.sched_ids[j]).map_or(Position::Top, Position::Below);
        match self.drv.disp.register(&spec.name, policy, spec.usage, pos) {
            Ok(id) => {
                self.sched_ids[k] = Some(id);
                self.metrics.note(self.now, format!("scheduler '{}' ({}) loaded", spec.name, spec.policy.kind));
            }
            Err(e) => self.metrics.note(self.now, format!("scheduler '{}' refused: {e}", spec.name)),
        }
    }

    /// Loads a module scheduler: its declared usage goes through the conflict check, and
    /// it is contained ([`vassal_core::Containment`], watchdog [`vassal_module::DEFAULT_WATCHDOG`]).
    pub(super) fn load_module(&mut self, k: usize) {
        let spec = self.sc.schedulers[k].clone();
        let module = match crate::modules::build_module(&spec.policy, self.sc.machine.cpus) {
            Ok(m) => m,
            Err(e) => return self.metrics.note(self.now, format!("scheduler '{}' not loaded: {e}", spec.name)),
        };
        let (usage, what) = (module.usage, format!("{} ({})", module.policy.kind(), module.label));
        let pos = (0..k).rev().find_map(|j| self.sched_ids[j]).map_or(Position::Top, Position::Below);
        match self.drv.disp.register(&spec.name, module.policy, usage, pos) {
            Ok(id) => {
                let guard = vassal_core::Containment { watchdog: Some(vassal_module::DEFAULT_WATCHDOG) };
                self.drv.disp.contain(id, guard).expect("a scheduler just registered above the default");
                self.sched_ids[k] = Some(id);
                self.metrics.note(self.now, format!("scheduler '{}' loaded from module {what}, {}", spec.name, usage.describe()));
            }
            Err(e) => self.metrics.note(self.now, format!("scheduler '{}' refused: {e}", spec.name)),
        }
    }

    pub(super) fn unload_sched(&mut self, k: usize) {
        let Some(id) = self.sched_ids[k].take() else { return };
        self.settle_all();
        if crate::modules::module_path(&self.sc.schedulers[k].policy).is_some() {
            // A module's tasks go to the scheduler below it (issue 8).
            let name = self.sc.schedulers[k].name.clone();
            match self.drv.disp.unregister_to_below(self.now, id) {
                Ok(moved) => {
                    let to: Vec<String> = moved
                        .iter()
                        .map(|(t, s)| format!("{} -> {}", self.sc.tasks[t.0 as usize].name, self.drv.disp.sched_name(*s).unwrap_or("?")))
                        .collect();
                    self.metrics.note(self.now, format!("module scheduler '{name}' unloaded [{}]", to.join(", ")))
                }
                Err(e) => self.metrics.note(self.now, format!("unloading '{name}' failed: {e}")),
            }
            return;
        }
        match self.drv.disp.unregister(self.now, id) {
            Ok(moved) => self.metrics.note(
                self.now,
                format!("scheduler '{}' unloaded; {} task(s) returned to the default", self.sc.schedulers[k].name, moved.len()),
            ),
            Err(e) => self.metrics.note(self.now, format!("unloading '{}' failed: {e}", self.sc.schedulers[k].name)),
        }
    }
}
