//! Schedulers added at run time: built-in policies registered by `ctl register`, and
//! policy modules (issue 8; docs/modules.md) loaded by `ctl load` or the config, and
//! their containment: a module that fails or overruns its watchdog is ejected before
//! anything else is decided, its tasks go to the scheduler below, and the ejection is
//! kept for `status` (the last [`MAX_EJECTIONS`](super::MAX_EJECTIONS)).

use std::collections::BTreeMap;

use vassal_core::{Dispatcher, Ns, Position, SchedId, TaskId};

use super::{Agent, MAX_EJECTIONS};
use crate::kernel;
use crate::wire::{Answer, EjectionRow};

/// "KIND, USAGE" of scheduler `name`, for the agent's log.
pub(super) fn describe_sched(disp: &Dispatcher, name: &str) -> String {
    disp.schedulers().into_iter().find(|s| s.name == name).map_or_else(String::new, |s| format!("{}, {}", s.kind, s.usage.describe()))
}

impl Agent {
    pub fn register(
        &mut self,
        now: Ns,
        name: &str,
        kind: &str,
        params: &BTreeMap<String, crate::config::Value>,
        usage: &crate::config::UsageSpec,
        above: Option<&str>,
    ) -> Answer {
        let policy = match vassal_policies::build(kind, params) {
            Ok(p) => p,
            Err(e) => return Answer::refused(e),
        };
        let usage = match usage.to_usage(self.ncpus) {
            Ok(u) => u,
            Err(e) => return Answer::refused(e),
        };
        let pos = match above {
            None => Position::Top,
            Some(a) => match self.drv.disp.lookup(a) {
                Some(id) => Position::Above(id),
                None => return Answer::refused(format!("no scheduler named '{a}'")),
            },
        };
        let r = match self.drv.disp.register(name, policy, usage, pos) {
            Ok(_) => Answer::Ok,
            Err(e) => Answer::refused(e.to_string()),
        };
        self.hierarchy_changed();
        self.settle(now);
        r
    }

    /// The hierarchy changed (a scheduler registered, unregistered, loaded, unloaded or
    /// ejected): every task's kernel state is recomputed at the next `enforce`, and a
    /// process whose scheduler is gone now joins where its main thread went.
    fn hierarchy_changed(&mut self) {
        self.all_dirty = true;
        let default = self.drv.disp.default_sched();
        for g in self.groups.values_mut() {
            if self.drv.disp.sched_name(g.sched).is_none() {
                let main = g.threads.get(&g.pid).map(|&id| TaskId(id));
                g.sched = main.and_then(|t| self.drv.disp.owner(t)).unwrap_or(default);
            }
        }
    }

    pub fn unregister(&mut self, now: Ns, name: &str) -> Answer {
        let Some(id) = self.drv.disp.lookup(name) else {
            return Answer::refused(format!("no scheduler named '{name}'"));
        };
        let r = match self.drv.disp.unregister(now, id) {
            Ok(_) => {
                if let Some(path) = self.modules.remove(name) {
                    eprintln!("vassal agent: module scheduler '{name}' ({path}) unregistered; its tasks went to the default scheduler");
                }
                Answer::Ok
            }
            Err(e) => Answer::refused(e.to_string()),
        };
        self.hierarchy_changed();
        self.settle(now);
        r
    }

    /// `vassal ctl load`, first half, called *without* the agent's lock: reads, compiles
    /// and initialises the module in `path` for `ncpus` CPUs (wasmtime's Cranelift takes
    /// 3–6 ms for a small module, ~0.9 s for BVT the first time), so the dispatcher never
    /// waits for a compilation. Returns it with the time it took.
    pub fn open_module(
        ncpus: u16,
        path: &str,
        params: &BTreeMap<String, crate::config::Value>,
    ) -> (Result<vassal_module::Opened, vassal_module::LoadError>, Ns) {
        let t0 = kernel::now_ns();
        let r = vassal_module::open_file(std::path::Path::new(path), ncpus, params, vassal_module::Limits::default());
        (r, kernel::now_ns().saturating_sub(t0))
    }

    /// `vassal ctl load`, second half: the module `opened` (by [`Agent::open_module`],
    /// in `took`) becomes scheduler `name` at `place`, contained with `watchdog`, if its
    /// declared usage passes the conflict check; nothing changes if it does not, or if it
    /// did not open, and the refusal says why. Logged either way.
    #[allow(clippy::too_many_arguments)]
    pub fn load(
        &mut self,
        now: Ns,
        path: &str,
        name: &str,
        place: &vassal_module::Placement,
        opened: Result<vassal_module::Opened, vassal_module::LoadError>,
        took: Ns,
        watchdog: Option<Ns>,
    ) -> Answer {
        let r = opened.and_then(|m| vassal_module::register_opened(&mut self.drv.disp, m, name, place, watchdog));
        let answer = match r {
            Ok(_) => {
                eprintln!(
                    "vassal agent: loaded module {path} as scheduler '{name}' ({}) at {place:?}, watchdog {}, opened in {:.1} ms outside the dispatcher's lock",
                    describe_sched(&self.drv.disp, name),
                    watchdog.map_or("none".into(), vassal_core::fmt_duration),
                    took as f64 / 1e6
                );
                self.modules.insert(name.to_string(), path.to_string());
                Answer::Ok
            }
            Err(e) => {
                eprintln!("vassal agent: load of module {path} as scheduler '{name}' refused: {e}");
                Answer::refused(format!("module {path}: {e}"))
            }
        };
        self.hierarchy_changed();
        self.settle(now);
        answer
    }

    /// `vassal ctl unload`: each task of module scheduler `name` goes to the scheduler
    /// below it (`Dispatcher::unregister_to_below`); the running ones' CPUs are decided
    /// again at once, so no task is lost or left parked.
    pub fn unload(&mut self, now: Ns, name: &str) -> Answer {
        let Some(path) = self.modules.get(name).cloned() else {
            return Answer::refused(match self.drv.disp.lookup(name) {
                Some(_) => format!("'{name}' is a built-in scheduler, not a loaded module (use unregister)"),
                None => format!("no module named '{name}' is loaded"),
            });
        };
        let r = match vassal_module::unload(&mut self.drv.disp, now, name) {
            Ok(moved) => {
                self.modules.remove(name);
                eprintln!("vassal agent: unloaded module scheduler '{name}' ({path}); tasks {}", self.describe_moved(&moved));
                Answer::Ok
            }
            Err(e) => Answer::refused(e.to_string()),
        };
        self.hierarchy_changed();
        self.settle(now);
        r
    }

    /// "PID -> SCHEDULER" (or "PID/TID -> SCHEDULER" for a thread other than the main
    /// one) for each moved task.
    fn moved_rows(&self, moved: &[(TaskId, SchedId)]) -> Vec<String> {
        moved
            .iter()
            .map(|(t, s)| {
                let pid = self
                    .tasks
                    .get(&t.0)
                    .map_or_else(|| format!("{t}"), |m| if m.tid == m.pid { m.pid.to_string() } else { format!("{}/{}", m.pid, m.tid) });
                format!("{pid} -> {}", self.drv.disp.sched_name(*s).unwrap_or("?"))
            })
            .collect()
    }

    fn describe_moved(&self, moved: &[(TaskId, SchedId)]) -> String {
        format!("[{}]", self.moved_rows(moved).join(", "))
    }

    /// The containment duty of the mechanism (docs/modules.md): ejects every contained
    /// module that failed (a fault, an invalid decision) or whose watchdog expired, logs
    /// it and keeps it for `status`. Called at every round of `settle`, so before any
    /// decision is taken after a failure; the next watchdog expiry is one of the
    /// dispatcher's deadlines (`next_deadline`), so it fires one dispatcher wake-up after
    /// its limit.
    pub(super) fn contain(&mut self, now: Ns) {
        let ejected = self.drv.disp.eject_failed(now);
        if !ejected.is_empty() {
            self.hierarchy_changed();
        }
        for e in ejected {
            let module = self.modules.remove(&e.name).unwrap_or_default();
            let moved = self.moved_rows(&e.moved);
            eprintln!("vassal agent: module scheduler '{}' ({module}) ejected: {}; tasks [{}]", e.name, e.reason, moved.join(", "));
            if self.ejections.len() == MAX_EJECTIONS {
                self.ejections.pop_front();
            }
            self.ejections.push_back(EjectionRow { at_ns: e.at, name: e.name, module, reason: e.reason, moved });
        }
    }
}
