//! The broker (paper 002 §2.2): serves clients over a Unix socket, identifies every caller
//! by its kernel credentials, checks what the caller may do, and hands the call to the
//! hierarchy, whose schedulers run their own admission control (`on_attach`,
//! `on_message`) for root and users alike.
//!
//! Rules for a caller with uid u (from SO_PEERCRED, never from the message):
//! - root may do anything;
//! - otherwise a call about process p is allowed only if p's real and effective uid are
//!   both u (a setuid program run by u is not u's), and, if p is managed, it was joined
//!   by u;
//! - a task parameter may be set to at most its ceiling from the config, or lowered below
//!   its current value (BVT §6.3.2: "users can lower but not raise" — the nice rule); a
//!   parameter without a ceiling is root's only;
//! - registering and unregistering schedulers, and loading and unloading modules, is
//!   root's only.
//!
//! Priority inversion: the broker runs at SCHED_OTHER (admission tests may take variable
//! time, paper 002 §2.2), but the agent's state is shared with the real-time dispatcher.
//! A broker thread therefore raises itself to SCHED_FIFO `dispatcher_priority − 1` just
//! for the time it holds the state lock (the immediate priority-ceiling protocol), so a
//! preempted broker can never hold the dispatcher up; all parsing, permission checks and
//! /proc reads happen before, at normal priority.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use vassal_core::Request;

use crate::kernel;
use crate::state::Agent;
use crate::wire::{self, Answer, Call, WireRequest, MAX_LINE};

/// What the broker, the dispatcher and the main thread share.
pub struct Shared {
    pub agent: Mutex<Agent>,
    /// Signalled after every change a call made, so the dispatcher re-plans its sleep (an
    /// eventfd in the dispatcher's epoll set: crate::wait).
    pub wake: crate::wait::Waker,
    pub stop: AtomicBool,
    pub dispatcher_cpu_ns: AtomicU64,
    clients: AtomicUsize,
    ceiling_prio: i32,
}

impl Shared {
    pub fn new(agent: Agent) -> Shared {
        let ceiling_prio = agent.cfg.dispatcher_priority - 1;
        Shared {
            agent: Mutex::new(agent),
            wake: crate::wait::Waker::new().expect("eventfd"),
            stop: AtomicBool::new(false),
            dispatcher_cpu_ns: AtomicU64::new(0),
            clients: AtomicUsize::new(0),
            ceiling_prio,
        }
    }

    /// Locks the state under the priority ceiling (see the module documentation).
    pub fn with_agent<R>(&self, f: impl FnOnce(&mut Agent) -> R) -> R {
        self.with_agent_inner(f)
    }

    /// `with_agent` for a call's handler: an `Err` becomes a refusal.
    fn run(&self, f: impl FnOnce(&mut Agent) -> Result<Answer, String>) -> Answer {
        if self.stop.load(Ordering::SeqCst) {
            return Answer::refused("the agent is shutting down");
        }
        self.with_agent_inner(f).unwrap_or_else(Answer::refused)
    }

    fn with_agent_inner<R>(&self, f: impl FnOnce(&mut Agent) -> R) -> R {
        let before = kernel::get_sched(0).ok();
        let raised = kernel::set_self(self.ceiling_prio).is_ok();
        let r = {
            let mut g = lock(&self.agent);
            f(&mut g)
        };
        if raised {
            let _ = match before {
                Some(s) if s.policy & !kernel::RESET_ON_FORK == libc::SCHED_FIFO => kernel::set_self(s.prio),
                _ => kernel::set_self(0),
            };
        }
        self.wake.notify_one();
        r
    }
}

/// Locks a mutex, carrying on if a thread panicked holding it (the agent aborts on
/// panic anyway; the guardian restores).
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A caller, as the kernel names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Caller {
    pub pid: i32,
    pub uid: u32,
}

/// Accepts clients until `stop`; one thread per client, at most `max_clients` at once.
pub fn serve(listener: UnixListener, shared: Arc<Shared>) {
    let max = lock(&shared.agent).cfg.max_clients;
    for conn in listener.incoming() {
        if shared.stop.load(Ordering::Relaxed) {
            break;
        }
        let Ok(mut conn) = conn else { continue };
        let Ok((pid, uid, _)) = kernel::peer_cred(&conn) else {
            continue;
        };
        if shared.clients.fetch_add(1, Ordering::AcqRel) >= max {
            shared.clients.fetch_sub(1, Ordering::AcqRel);
            let _ = conn.write_all(wire::encode(&Answer::refused(format!("too many clients (at most {max})"))).as_bytes());
            continue;
        }
        let sh = shared.clone();
        let spawned = std::thread::Builder::new().name("vassal-client".into()).stack_size(256 * 1024).spawn(move || {
            client(conn, Caller { pid, uid }, &sh);
            sh.clients.fetch_sub(1, Ordering::AcqRel);
        });
        if spawned.is_err() {
            shared.clients.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

fn client(conn: UnixStream, caller: Caller, shared: &Shared) {
    let Ok(mut out) = conn.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(conn);
    let mut buf = Vec::new();
    loop {
        buf.clear();
        match (&mut reader).take(MAX_LINE as u64 + 1).read_until(b'\n', &mut buf) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let complete = buf.last() == Some(&b'\n');
        if complete {
            buf.pop();
        }
        let answer = if !complete && buf.len() > MAX_LINE {
            // Cannot find the next call's start: answer and hang up.
            let _ = out.write_all(wire::encode(&Answer::error(format!("call longer than {MAX_LINE} bytes"))).as_bytes());
            return;
        } else {
            match wire::decode(&buf) {
                Ok(call) => handle(shared, caller, call),
                Err(e) => Answer::error(e),
            }
        };
        if out.write_all(wire::encode(&answer).as_bytes()).is_err() {
            return;
        }
    }
}

/// May `caller` act on process `pid`? (Before the lock: reads /proc.)
fn may_touch(caller: Caller, pid: i32) -> Result<(), String> {
    if caller.uid == 0 {
        return Ok(());
    }
    match kernel::uids(pid) {
        Ok((r, e)) if r == caller.uid && e == caller.uid => Ok(()),
        Ok(_) => Err(format!("process {pid} does not belong to uid {}", caller.uid)),
        Err(_) => Err(format!("no process {pid}")),
    }
}

/// How much a parameter's value gives, as a number that grows with privilege: more
/// `weight`, `warp` or `warp_limit` is more (and a `warp_limit` of 0, no limit, is the
/// most of all); a shorter `unwarp` time requirement (BVT §2.2) lets a task warp more
/// often, so less `unwarp` is more.
fn privilege(name: &str, value: i64) -> i128 {
    match name {
        "warp_limit" if value <= 0 => i128::MAX,
        "unwarp" => -(value as i128),
        _ => value as i128,
    }
}

/// The ceiling rule for one parameter (see the module documentation): a non-root caller
/// may set a value up to the ceiling's privilege, or any value less privileged than the
/// task's current one. A warp time limit is never unlimited for them, and is at most
/// `max_warp_limit` (the `warp_limit` ceiling, 10 ms if none is configured).
fn check_ceiling(agent: &Agent, caller: Caller, pid: i32, name: &str, value: i64) -> Result<(), String> {
    if caller.uid == 0 {
        return Ok(());
    }
    let ceiling = match name {
        "warp_limit" => Some(agent.cfg.max_warp_limit.min(i64::MAX as u64) as i64),
        _ => agent.cfg.ceilings.get(name).copied(),
    };
    let p = privilege(name, value);
    let current = agent.param(pid, name);
    match ceiling {
        Some(c) if p <= privilege(name, c) => Ok(()),
        _ if current.is_some_and(|cur| p <= privilege(name, cur)) => Ok(()),
        Some(c) if name == "warp_limit" => {
            Err(format!("warp_limit {value}: a non-root user's warp time limit must be between 1 and {c} ns (0, no limit, is root's only)"))
        }
        Some(c) if name == "unwarp" => Err(format!("unwarp {value} is below the floor of {c} for non-root users")),
        Some(c) => Err(format!("{name} {value} is above the ceiling of {c} for non-root users")),
        None => Err(format!("only root may set {name} (no ceiling is configured for it)")),
    }
}

/// A managed process must also have been joined by the caller.
fn check_joined_by(agent: &Agent, caller: Caller, pid: i32) -> Result<(), String> {
    match agent.uid_of_task(pid) {
        Some(u) if caller.uid != 0 && u != caller.uid => Err(format!("process {pid} is managed for uid {u}")),
        _ => Ok(()),
    }
}

/// Handles one call from `caller`.
pub fn handle(shared: &Shared, caller: Caller, call: Call) -> Answer {
    let target = match &call {
        Call::Join { pid, .. } | Call::Leave { pid } | Call::Release { pid } | Call::Param { pid, .. } | Call::Message { pid, .. } => {
            Some(*pid)
        }
        _ => None,
    };
    if let Some(pid) = target {
        if let Err(e) = may_touch(caller, pid) {
            return Answer::refused(e);
        }
    }
    if matches!(call, Call::Register { .. } | Call::Unregister { .. }) && caller.uid != 0 {
        return Answer::refused("only root may register or unregister schedulers");
    }
    if matches!(call, Call::Load { .. } | Call::Unload { .. }) && caller.uid != 0 {
        return Answer::refused("only root may load or unload modules");
    }
    let now = kernel::now_ns;
    match call {
        Call::Join { pid, sched, mut params } => shared.run(|a| {
            check_joined_by(a, caller, pid)?;
            for (k, v) in &params {
                check_ceiling(a, caller, pid, k, *v)?;
            }
            // A non-root user's warp always has a finite limit: theirs, else the ceiling.
            if caller.uid != 0 && params.get("warp").is_some_and(|&w| w > 0) && a.param(pid, "warp_limit").is_none() {
                params.entry("warp_limit".into()).or_insert(a.cfg.max_warp_limit.min(i64::MAX as u64) as i64);
            }
            let sched = match sched {
                None => None,
                Some(n) => Some(a.lookup(&n).ok_or_else(|| format!("no scheduler named '{n}'"))?),
            };
            let uid = if caller.uid == 0 { kernel::uids(pid).map(|u| u.0).unwrap_or(0) } else { caller.uid };
            Ok(a.join(now(), pid, uid, sched, &params))
        }),
        Call::Leave { pid } => shared.run(|a| {
            check_joined_by(a, caller, pid)?;
            Ok(a.leave(now(), pid, caller.uid))
        }),
        Call::Release { pid } => shared.run(|a| {
            check_joined_by(a, caller, pid)?;
            Ok(a.release(now(), pid))
        }),
        Call::Param { pid, name, value } => shared.run(|a| {
            check_joined_by(a, caller, pid)?;
            check_ceiling(a, caller, pid, &name, value)?;
            Ok(a.message(now(), None, pid, caller.uid, &Request::Param { name, value }))
        }),
        Call::Message { sched, pid, request } => shared.run(|a| {
            check_joined_by(a, caller, pid)?;
            if let WireRequest::Param { name, value } = &request {
                check_ceiling(a, caller, pid, name, *value)?;
            }
            let sched = match sched {
                None => None,
                Some(n) => Some(a.lookup(&n).ok_or_else(|| format!("no scheduler named '{n}'"))?),
            };
            let n = now();
            let req = match request {
                WireRequest::SetAt { at_ns } if at_ns <= n => return Err(format!("time {at_ns} ns is already past (now {n} ns)")),
                WireRequest::SetAt { at_ns } => Request::Set { delay: at_ns - n },
                r => r.to_request(),
            };
            Ok(a.message(n, sched, pid, caller.uid, &req))
        }),
        Call::Hierarchy => shared.run(|a| Ok(a.hierarchy())),
        Call::Tasks => shared.run(|a| Ok(Answer::Tasks { tasks: a.task_rows() })),
        Call::Register { name, kind, params, usage, above } => {
            shared.run(|a| Ok(a.register(now(), &name, &kind, &params, &usage, above.as_deref())))
        }
        Call::Unregister { name } => shared.run(|a| Ok(a.unregister(now(), &name))),
        Call::Load { path, name, above, below, params, watchdog_ns } => {
            let place = match (above, below) {
                (Some(_), Some(_)) => return Answer::refused("give --above or --below, not both"),
                (Some(a), None) => vassal_module::Placement::Above(a),
                (None, Some(b)) => vassal_module::Placement::Below(b),
                (None, None) => vassal_module::Placement::Top,
            };
            if !std::path::Path::new(&path).is_absolute() {
                return Answer::refused(format!("module path '{path}' is not absolute (the agent does not share the caller's directory)"));
            }
            let watchdog = match watchdog_ns {
                None => Some(vassal_module::DEFAULT_WATCHDOG),
                Some(0) => None,
                Some(w) => Some(w),
            };
            // Compiled before the agent's lock is taken: the dispatcher never waits for it.
            let ncpus = shared.with_agent(|a| a.ncpus());
            let (opened, took) = Agent::open_module(ncpus, &path, &params);
            shared.run(|a| Ok(a.load(now(), &path, &name, &place, opened, took, watchdog)))
        }
        Call::Unload { name } => shared.run(|a| Ok(a.unload(now(), &name))),
        Call::Status => {
            let dcpu = shared.dispatcher_cpu_ns.load(Ordering::Relaxed);
            shared.run(|a| {
                let n = now();
                Ok(Answer::Status(wire::Status {
                    ncpus: a.ncpus(),
                    tick_ns: a.cfg.tick,
                    uptime_ns: a.uptime(n),
                    agent_cpu_ns: kernel::process_cpu_ns(),
                    dispatcher_cpu_ns: dcpu,
                    passes: a.passes,
                    managed: a.managed(),
                    ledger_records: a.ledger_records(),
                    kernel_errors: a.kernel_errors,
                    ejections: a.ejections(),
                    events: a.source_name().into(),
                    bpf_events: a.bpf_events,
                    replayed_runs: a.replayed_runs,
                    bounds_fired: a.bounds_fired,
                    backstop_refused: a.backstop_refused,
                }))
            })
        }
    }
}

/// Params as a map (for callers building `Join`).
pub fn params(pairs: &[(&str, i64)]) -> BTreeMap<String, i64> {
    pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}
