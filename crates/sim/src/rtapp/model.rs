//! rt-app's workload model, read from the JSON tree ([`super::json`]) as rt-app 1.0
//! reads it (src/rt-app_parse_config.c; doc/tutorial.txt), with every element's position.
//! It knows nothing of the simulator: `vassal sim --rt-app` maps it onto a scenario
//! ([`super::build`]), and a real-machine runner can map the same threads onto processes.
//!
//! As rt-app: an object member is an event when its key *starts with* an event name
//! (`run`, `run0`, `runtime1`, `sleeping`; `sleep…` is a sleep, `runtime…` before `run…`),
//! in file order; `instance`, `loop`, `delay`, `cpus`, `phases`, `policy`, `priority` and
//! `dl-*` are the thread's settings, `loop`, `cpus`, `policy`, `priority`, `dl-*` a
//! phase's. Unlike rt-app, a key that is neither is refused with its line, column and the
//! keys expected there (rt-app ignores it silently), and so is anything rt-app reports as
//! an error or cannot run (an event of the wrong type, the pre-1.0 grammar's `exec`,
//! `period`, `lock_order` and `resources`).

use std::collections::BTreeMap;

use vassal_core::{Ns, US};

use super::json::{Kind, Member, Pos, Value};
use crate::scenario::MAX_TASKS;

/// An error at a place in the file: "LINE:COL: PATH: message" — or "PATH: message" for
/// one that is not in the file (`at` is `Pos::default()`: a command-line option).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    pub at: Pos,
    pub path: String,
    pub msg: String,
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        if self.at != Pos::default() {
            write!(f, "{}: ", self.at)?;
        }
        if !self.path.is_empty() {
            write!(f, "{}: ", self.path)?;
        }
        write!(f, "{}", self.msg)
    }
}

pub(crate) fn err(at: Pos, path: &str, msg: impl Into<String>) -> Error {
    Error { at, path: path.to_string(), msg: msg.into() }
}

/// A scheduling policy, as rt-app names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Policy {
    Other,
    Idle,
    Fifo,
    Rr,
    Deadline,
}

impl Policy {
    pub fn name(self) -> &'static str {
        match self {
            Policy::Other => "SCHED_OTHER",
            Policy::Idle => "SCHED_IDLE",
            Policy::Fifo => "SCHED_FIFO",
            Policy::Rr => "SCHED_RR",
            Policy::Deadline => "SCHED_DEADLINE",
        }
    }
}

/// SCHED_DEADLINE's parameters (ns).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dl {
    pub runtime: Ns,
    pub period: Ns,
    pub deadline: Ns,
}

/// A thread's (or phase's) scheduling settings, defaults applied: `priority` is the nice
/// value for SCHED_OTHER (0 by default), 1..99 for SCHED_FIFO/SCHED_RR (10 by default);
/// SCHED_IDLE ignores it, as rt-app does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sched {
    pub policy: Policy,
    pub priority: i64,
    pub dl: Option<Dl>,
    /// Where it was given (the thread's or phase's first scheduling key).
    pub at: Pos,
}

/// A CPU list, where it was given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cpus {
    pub list: Vec<u16>,
    pub at: Pos,
}

/// One rt-app event (tutorial.txt, "events"), durations in ns.
#[derive(Clone, Debug, PartialEq)]
pub enum EventKind {
    /// CPU work (rt-app runs calibrated loops worth so much time).
    Run(Ns),
    /// Busy until so much wall-clock time has passed.
    Runtime(Ns),
    Sleep(Ns),
    /// rt-app's timer `reference` (shared by every user of the name, or per thread
    /// instance when it starts with "unique").
    Timer {
        reference: String,
        period: Ns,
        absolute: bool,
    },
    Lock(String),
    Unlock(String),
    /// pthread_cond_wait on `cond` with `mutex` (held).
    Wait {
        cond: String,
        mutex: String,
    },
    Signal(String),
    Broad(String),
    /// Signal `cond`, then wait on it with `mutex`.
    Sync {
        cond: String,
        mutex: String,
    },
    Suspend(String),
    Resume(String),
    Barrier(String),
    /// Writes this many bytes to the thread's memory buffer.
    Mem(u64),
    /// Writes this many bytes to the `io_device`.
    IoRun(u64),
    Yield,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Event {
    pub kind: EventKind,
    /// The key as written ("run0").
    pub key: String,
    pub at: Pos,
}

/// A phase: its events run `loops` times, with its own scheduling settings and CPUs if
/// it names them.
#[derive(Clone, Debug, PartialEq)]
pub struct Phase {
    pub name: String,
    pub at: Pos,
    /// None: forever (-1).
    pub loops: Option<u64>,
    pub sched: Option<Sched>,
    pub cpus: Option<Cpus>,
    pub events: Vec<Event>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Thread {
    /// Its key in `tasks` (a repeated name numbered as workgen numbers it).
    pub name: String,
    pub at: Pos,
    pub instances: u64,
    pub delay: Ns,
    /// None: forever (-1, the default).
    pub loops: Option<u64>,
    pub sched: Sched,
    pub cpus: Option<Cpus>,
    /// In file order; a thread without `phases` has one, named after the thread.
    pub phases: Vec<Phase>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Global {
    /// None: -1 or absent (until every thread ends).
    pub duration: Option<Ns>,
    pub default_policy: Policy,
    pub pi_enabled: bool,
    pub io_device: String,
}

#[derive(Clone, Debug, PartialEq)]
pub struct RtApp {
    pub global: Global,
    pub threads: Vec<Thread>,
}

/// rt-app's event names, in the order rt-app tries them as key prefixes.
pub const EVENTS: &[&str] = &[
    "lock", "unlock", "wait", "signal", "broad", "sync", "sleep", "runtime", "run", "timer", "suspend", "resume", "mem", "iorun", "yield",
    "barrier", "fork",
];
const THREAD_KEYS: &[&str] =
    &["instance", "loop", "delay", "cpus", "phases", "policy", "priority", "dl-runtime", "dl-period", "dl-deadline"];
const PHASE_KEYS: &[&str] = &["loop", "cpus", "policy", "priority", "dl-runtime", "dl-period", "dl-deadline"];
const SCHED_KEYS: &[&str] = &["policy", "priority", "dl-runtime", "dl-period", "dl-deadline"];
/// Global keys that only concern the real run (logs, calibration, page locking, …), and
/// the legacy `frag`/`spacing` that rt-app's shipped examples still carry: accepted, no
/// effect on a simulated schedule.
const HOST_ONLY: &[&str] = &[
    "calibration",
    "lock_pages",
    "logdir",
    "log_basename",
    "log_size",
    "ftrace",
    "gnuplot",
    "mem_buffer_size",
    "cumulative_slack",
    "frag",
    "spacing",
];
const GLOBAL_KEYS: &[&str] = &["duration", "default_policy", "pi_enabled", "io_device"];

/// Keys rt-app knows (or knew) that the simulator cannot honour, with why.
fn unmodelled(key: &str) -> Option<&'static str> {
    Some(match key {
        "fork" => "`fork` creates threads while running, which the simulator does not model (give the thread a `delay` instead)",
        "util_min" | "util_max" => "utilisation clamping (uclamp) acts on frequency and placement, which the simulator does not model",
        "taskgroup" => "task groups (cgroups) are not modelled",
        "nodes_membind" => "NUMA memory binding is not modelled",
        "exec" | "period" | "deadline" | "lock_order" | "resources" => {
            "it belongs to rt-app's pre-1.0 grammar, which rt-app 1.0 no longer reads (it reports `Unknown or mismatch lock_order event type` and runs a thread of empty events); write run/sleep/timer events and dl-* keys"
        }
        _ => return None,
    })
}

/// The event name a key starts with, as rt-app matches it (None: not an event).
pub fn event_name(key: &str) -> Option<&'static str> {
    // rt-app tests "sleep" and "runtime" before "run" (parse_task_event_data)
    ["sleep", "runtime"].into_iter().chain(EVENTS.iter().copied()).find(|e| key.starts_with(e))
}

fn expected(keys: &[&str]) -> String {
    keys.iter().map(|k| format!("`{k}`")).collect::<Vec<_>>().join(", ")
}

fn int(v: &Value, path: &str) -> Result<i64, Error> {
    match v.kind {
        Kind::Int(i) => Ok(i),
        _ => Err(err(v.at, path, format!("expected an integer, found {}", v.describe()))),
    }
}

fn string<'a>(v: &'a Value, path: &str) -> Result<&'a str, Error> {
    match &v.kind {
        Kind::Str(s) => Ok(s),
        _ => Err(err(v.at, path, format!("expected a string, found {}", v.describe()))),
    }
}

/// A duration in µs (rt-app's unit), ≥ 0, as ns.
fn micros(v: &Value, path: &str) -> Result<Ns, Error> {
    let i = int(v, path)?;
    if i < 0 {
        return Err(err(v.at, path, format!("a duration in µs must be >= 0, found {i}")));
    }
    (i as u64).checked_mul(US).ok_or_else(|| err(v.at, path, "duration too large"))
}

fn bytes(v: &Value, path: &str) -> Result<u64, Error> {
    let i = int(v, path)?;
    u64::try_from(i).map_err(|_| err(v.at, path, format!("a size in bytes must be >= 0, found {i}")))
}

/// A `loop` value: a count ≥ 1, or -1 (None) for forever.
fn loops(v: &Value, path: &str) -> Result<Option<u64>, Error> {
    match int(v, path)? {
        -1 => Ok(None),
        n if n >= 1 => Ok(Some(n as u64)),
        n => Err(err(v.at, path, format!("loop must be -1 (forever) or at least 1, found {n}"))),
    }
}

fn policy(v: &Value, path: &str) -> Result<Policy, Error> {
    Ok(match string(v, path)? {
        "SCHED_OTHER" => Policy::Other,
        "SCHED_IDLE" => Policy::Idle,
        "SCHED_FIFO" => Policy::Fifo,
        "SCHED_RR" => Policy::Rr,
        "SCHED_DEADLINE" => Policy::Deadline,
        other => {
            return Err(err(
                v.at,
                path,
                format!("unknown policy `{other}`; expected SCHED_OTHER, SCHED_IDLE, SCHED_FIFO, SCHED_RR or SCHED_DEADLINE"),
            ))
        }
    })
}

fn value<'a>(m: &'a Member, path: &str) -> Result<&'a Value, Error> {
    m.value.as_ref().ok_or_else(|| {
        err(m.at, path, format!("`{}` has no value (only `suspend` may be written bare; workgen gives it the thread's name)", m.key))
    })
}

fn object<'a>(v: &'a Value, path: &str, what: &str) -> Result<&'a [Member], Error> {
    match &v.kind {
        Kind::Obj(m) => Ok(m),
        _ => Err(err(v.at, path, format!("{what} is an object, found {}", v.describe()))),
    }
}

/// Refuses a key given twice in an object of settings (workgen would rename the second
/// one, which rt-app then ignores).
fn once(members: &[Member], path: &str, keys: &[&str]) -> Result<(), Error> {
    let mut seen: BTreeMap<&str, Pos> = BTreeMap::new();
    for m in members.iter().filter(|m| keys.contains(&m.key.as_str())) {
        if let Some(first) = seen.insert(&m.key, m.at) {
            return Err(err(m.at, &format!("{path}.{}", m.key), format!("given twice (first at line {}); say it once", first.line)));
        }
    }
    Ok(())
}

/// Names a repeated key as workgen does: `KEY1`, `KEY2`, … (the first one unused).
fn workgen_names(members: &[Member]) -> Vec<String> {
    let mut used: Vec<String> = Vec::new();
    for m in members {
        let name = if used.contains(&m.key) {
            (1..).map(|n| format!("{}{n}", m.key)).find(|c| !used.contains(c) && !members.iter().any(|o| o.key == *c)).expect("a free name")
        } else {
            m.key.clone()
        };
        used.push(name);
    }
    used
}

/// Reads the scheduling keys of a thread (`inherit` None: defaults as rt-app's thread
/// object) or a phase (`inherit` Some: the settings in force before it, for "same").
fn sched(members: &[Member], path: &str, base: Policy, inherit: Option<&Sched>) -> Result<Option<Sched>, Error> {
    let given: Vec<&Member> = members.iter().filter(|m| SCHED_KEYS.contains(&m.key.as_str())).collect();
    if given.is_empty() && inherit.is_some() {
        return Ok(None);
    }
    let at = given.first().map_or(Pos::default(), |m| m.at);
    let get = |k: &str| given.iter().find(|m| m.key == k).map(|m| (m, value(m, &format!("{path}.{k}"))));
    let mut pol = inherit.map_or(base, |s| s.policy);
    let mut explicit = false;
    if let Some((_, v)) = get("policy") {
        pol = policy(v?, &format!("{path}.policy"))?;
        explicit = true;
    }
    let default_prio = match (inherit, explicit) {
        (Some(s), false) => s.priority,
        _ => match pol {
            Policy::Fifo | Policy::Rr => 10,
            _ => 0,
        },
    };
    let priority = match get("priority") {
        Some((_, v)) => int(v?, &format!("{path}.priority"))?,
        None => default_prio,
    };
    let p = |k: &str| -> Result<Option<(Pos, Ns)>, Error> {
        match get(k) {
            Some((_, v)) => {
                let v = v?;
                Ok(Some((v.at, micros(v, &format!("{path}.{k}"))?)))
            }
            None => Ok(None),
        }
    };
    let (rt, pe, de) = (p("dl-runtime")?, p("dl-period")?, p("dl-deadline")?);
    let dl = if pol == Policy::Deadline {
        let runtime = rt.map_or(0, |x| x.1);
        let period = pe.map_or(runtime, |x| x.1);
        let deadline = de.map_or(period, |x| x.1);
        if !(runtime > 0 && runtime <= deadline && deadline <= period) {
            return Err(err(
                at,
                path,
                format!(
                    "SCHED_DEADLINE with dl-runtime {} µs, dl-deadline {} µs, dl-period {} µs: Linux requires 0 < runtime <= deadline <= period (sched_setattr would fail)",
                    runtime / US,
                    deadline / US,
                    period / US
                ),
            ));
        }
        Some(Dl { runtime, period, deadline })
    } else {
        if let Some((at, _)) = rt.or(pe).or(de) {
            return Err(err(
                at,
                path,
                format!("dl-runtime, dl-period and dl-deadline apply only to SCHED_DEADLINE (the policy here is {})", pol.name()),
            ));
        }
        None
    };
    match pol {
        Policy::Fifo | Policy::Rr if !(1..=99).contains(&priority) => {
            let at = get("priority").map_or(at, |(m, _)| m.at);
            return Err(err(at, &format!("{path}.priority"), format!("{} priority must be 1..99, found {priority}", pol.name())));
        }
        Policy::Other if !(-20..=19).contains(&priority) => {
            let at = get("priority").map_or(at, |(m, _)| m.at);
            return Err(err(at, &format!("{path}.priority"), format!("a SCHED_OTHER priority is a nice value -20..19, found {priority}")));
        }
        _ => {}
    }
    Ok(Some(Sched { policy: pol, priority, dl, at }))
}

fn cpus(v: &Value, path: &str) -> Result<Cpus, Error> {
    let Kind::Arr(list) = &v.kind else {
        return Err(err(v.at, path, format!("expected an array of CPU numbers, found {}", v.describe())));
    };
    if list.is_empty() {
        return Err(err(v.at, path, "an empty CPU list allows no CPU"));
    }
    let mut out = Vec::new();
    for c in list {
        let n = int(c, path)?;
        if !(0..vassal_core::MAX_CPUS as i64).contains(&n) {
            return Err(err(c.at, path, format!("CPU {n} is out of range 0..{}", vassal_core::MAX_CPUS - 1)));
        }
        if !out.contains(&(n as u16)) {
            out.push(n as u16);
        }
    }
    Ok(Cpus { list: out, at: v.at })
}

/// A `{ "ref": …, "mutex": … }` object of `wait` and `sync`.
fn cond_mutex(v: &Value, path: &str) -> Result<(String, String), Error> {
    let members = object(v, path, "a wait or sync event")?;
    let (mut cond, mut mutex) = (None, None);
    for m in members {
        let p = format!("{path}.{}", m.key);
        match m.key.as_str() {
            "ref" => cond = Some(string(value(m, &p)?, &p)?.to_string()),
            "mutex" => mutex = Some(string(value(m, &p)?, &p)?.to_string()),
            k => return Err(err(m.at, &p, format!("unknown key `{k}`; expected `ref`, `mutex`"))),
        }
    }
    let cond = cond.ok_or_else(|| err(v.at, path, "needs \"ref\" (the condition variable)"))?;
    let mutex = mutex.ok_or_else(|| err(v.at, path, "needs \"mutex\" (held while waiting, as pthread_cond_wait)"))?;
    Ok((cond, mutex))
}

/// One event member (its key starts with `name`).
fn event(m: &Member, name: &str, path: &str, thread: &str) -> Result<EventKind, Error> {
    let p = format!("{path}.{}", m.key);
    if name == "suspend" && m.value.is_none() {
        // workgen completes a bare "suspend" with the thread's name
        return Ok(EventKind::Suspend(thread.to_string()));
    }
    let v = value(m, &p)?;
    let s = |v: &Value| string(v, &p).map(str::to_string);
    Ok(match name {
        "run" => EventKind::Run(micros(v, &p)?),
        "runtime" => EventKind::Runtime(micros(v, &p)?),
        "sleep" => EventKind::Sleep(micros(v, &p)?),
        "mem" => EventKind::Mem(bytes(v, &p)?),
        "iorun" => EventKind::IoRun(bytes(v, &p)?),
        "lock" => EventKind::Lock(s(v)?),
        "unlock" => EventKind::Unlock(s(v)?),
        "signal" => EventKind::Signal(s(v)?),
        "broad" => EventKind::Broad(s(v)?),
        "barrier" => EventKind::Barrier(s(v)?),
        "resume" => EventKind::Resume(s(v)?),
        "suspend" => EventKind::Suspend(s(v)?),
        "yield" => EventKind::Yield,
        "wait" => {
            let (cond, mutex) = cond_mutex(v, &p)?;
            EventKind::Wait { cond, mutex }
        }
        "sync" => {
            let (cond, mutex) = cond_mutex(v, &p)?;
            EventKind::Sync { cond, mutex }
        }
        "timer" => {
            let members = object(v, &p, "a timer")?;
            let (mut reference, mut period, mut absolute) = (None, None, false);
            for t in members {
                let q = format!("{p}.{}", t.key);
                let tv = value(t, &q)?;
                match t.key.as_str() {
                    "ref" => reference = Some(string(tv, &q)?.to_string()),
                    "period" => period = Some(micros(tv, &q)?),
                    "mode" => match string(tv, &q)? {
                        "relative" => absolute = false,
                        "absolute" => absolute = true,
                        other => {
                            return Err(err(tv.at, &q, format!("unknown timer mode `{other}`; expected \"relative\" or \"absolute\"")))
                        }
                    },
                    k => return Err(err(t.at, &q, format!("unknown key `{k}`; expected `ref`, `period`, `mode`"))),
                }
            }
            let reference = reference.ok_or_else(|| err(v.at, &p, "a timer needs \"ref\""))?;
            let period = period.ok_or_else(|| err(v.at, &p, "a timer needs \"period\" (µs)"))?;
            EventKind::Timer { reference, period, absolute }
        }
        other => {
            let why = unmodelled(other).unwrap_or("not modelled");
            return Err(err(m.at, &p, format!("rt-app event `{}` cannot be simulated: {why}", m.key)));
        }
    })
}

/// Reads the members of a phase object (or of a thread object without `phases`): its
/// events in file order; `settings` are the keys allowed besides events.
fn events(members: &[Member], path: &str, settings: &[&str], thread: &str) -> Result<Vec<Event>, Error> {
    let mut out = Vec::new();
    for m in members {
        let p = format!("{path}.{}", m.key);
        if settings.contains(&m.key.as_str()) {
            continue;
        }
        if let Some(why) = unmodelled(&m.key) {
            return Err(err(m.at, &p, format!("`{}` cannot be simulated: {why}", m.key)));
        }
        match event_name(&m.key) {
            Some(name) => out.push(Event { kind: event(m, name, path, thread)?, key: m.key.clone(), at: m.at }),
            None => {
                let mut keys: Vec<&str> = settings.to_vec();
                keys.extend(EVENTS.iter().filter(|e| **e != "fork"));
                return Err(err(
                    m.at,
                    &p,
                    format!("unknown key `{}`; expected one of {} (an event key may carry a suffix: run0, sleep1)", m.key, expected(&keys)),
                ));
            }
        }
    }
    Ok(out)
}

fn phase(name: &str, m: &Member, path: &str, default: Policy, before: &Sched, thread: &str) -> Result<Phase, Error> {
    let v = value(m, path)?;
    let members = object(v, path, "a phase")?;
    once(members, path, PHASE_KEYS)?;
    let mut p = Phase { name: name.to_string(), at: m.at, loops: Some(1), sched: None, cpus: None, events: Vec::new() };
    for x in members {
        let q = format!("{path}.{}", x.key);
        match x.key.as_str() {
            "loop" => p.loops = loops(value(x, &q)?, &q)?,
            "cpus" => p.cpus = Some(cpus(value(x, &q)?, &q)?),
            _ => {}
        }
    }
    p.sched = sched(members, path, default, Some(before))?;
    p.events = events(members, path, PHASE_KEYS, thread)?;
    if p.events.is_empty() {
        return Err(err(m.at, path, "the phase has no events (rt-app: \"No events found. Task must have events or it's useless\")"));
    }
    Ok(p)
}

fn thread(name: &str, m: &Member, global: &Global) -> Result<Thread, Error> {
    let path = format!("tasks.{name}");
    let v = value(m, &path)?;
    let members = object(v, &path, "a thread")?;
    once(members, &path, THREAD_KEYS)?;
    let base = sched(members, &path, global.default_policy, None)?.expect("a thread's settings have defaults");
    let base = Sched { at: if base.at == Pos::default() { m.at } else { base.at }, ..base };
    let mut t =
        Thread { name: name.to_string(), at: m.at, instances: 1, delay: 0, loops: None, sched: base, cpus: None, phases: Vec::new() };
    let mut phases = None;
    for x in members {
        let p = format!("{path}.{}", x.key);
        match x.key.as_str() {
            "instance" => {
                let xv = value(x, &p)?;
                let n = int(xv, &p)?;
                t.instances = u64::try_from(n).map_err(|_| err(xv.at, &p, format!("instance must be >= 0, found {n}")))?;
                if t.instances > MAX_TASKS as u64 {
                    return Err(err(xv.at, &p, format!("instance must be at most {MAX_TASKS} (the task limit), found {n}")));
                }
            }
            "delay" => t.delay = micros(value(x, &p)?, &p)?,
            "cpus" => t.cpus = Some(cpus(value(x, &p)?, &p)?),
            "phases" => phases = Some((x, value(x, &p)?)),
            _ => {}
        }
    }
    let loop_member = members.iter().find(|x| x.key == "loop");
    match phases {
        None => {
            // one phase: the events sit in the thread object; `loop` counts the thread's
            // passes through them (default -1, forever)
            if let Some(x) = loop_member {
                t.loops = loops(value(x, &format!("{path}.loop"))?, &format!("{path}.loop"))?;
            }
            let evs = events(members, &path, THREAD_KEYS, name)?;
            if evs.is_empty() {
                return Err(err(
                    m.at,
                    &path,
                    "the thread has no events (rt-app: \"No events found. Task must have events or it's useless\")",
                ));
            }
            t.phases.push(Phase { name: name.to_string(), at: m.at, loops: Some(1), sched: None, cpus: None, events: evs });
        }
        Some((pm, pv)) => {
            if let Some(x) = loop_member {
                t.loops = loops(value(x, &format!("{path}.loop"))?, &format!("{path}.loop"))?;
            }
            for x in members {
                let key = x.key.as_str();
                if THREAD_KEYS.contains(&key) {
                    continue;
                }
                let p = format!("{path}.{key}");
                if let Some(why) = unmodelled(key) {
                    return Err(err(x.at, &p, format!("`{key}` cannot be simulated: {why}")));
                }
                let msg = if event_name(key).is_some() {
                    format!("an event beside `phases` (rt-app would ignore it): put `{key}` in a phase")
                } else {
                    format!("unknown key `{key}`; expected one of {}", expected(THREAD_KEYS))
                };
                return Err(err(x.at, &p, msg));
            }
            let list = object(pv, &format!("{path}.phases"), "phases")?;
            if list.is_empty() {
                return Err(err(pm.at, &format!("{path}.phases"), "phases is empty: the thread has no events"));
            }
            let names = workgen_names(list);
            let mut before = t.sched;
            for (x, pname) in list.iter().zip(&names) {
                let ph = phase(pname, x, &format!("{path}.phases.{}", x.key), global.default_policy, &before, name)?;
                if let Some(s) = ph.sched {
                    before = s;
                }
                t.phases.push(ph);
            }
        }
    }
    Ok(t)
}

fn global(members: &[Member]) -> Result<Global, Error> {
    once(members, "global", &[GLOBAL_KEYS, HOST_ONLY].concat())?;
    let mut g = Global { duration: None, default_policy: Policy::Other, pi_enabled: false, io_device: "/dev/null".into() };
    for m in members {
        let p = format!("global.{}", m.key);
        match m.key.as_str() {
            "duration" => {
                let v = value(m, &p)?;
                g.duration = match int(v, &p)? {
                    -1 => None,
                    s if s > 0 => Some((s as u64).checked_mul(vassal_core::SEC).ok_or_else(|| err(v.at, &p, "too long"))?),
                    s => return Err(err(v.at, &p, format!("duration is seconds > 0, or -1, found {s}"))),
                }
            }
            "default_policy" => g.default_policy = policy(value(m, &p)?, &p)?,
            "pi_enabled" => {
                let v = value(m, &p)?;
                g.pi_enabled = match v.kind {
                    Kind::Bool(b) => b,
                    _ => return Err(err(v.at, &p, format!("expected true or false, found {}", v.describe()))),
                }
            }
            "io_device" => g.io_device = string(value(m, &p)?, &p)?.to_string(),
            k if HOST_ONLY.contains(&k) => {}
            k => {
                return Err(err(m.at, &p, format!("unknown key `{k}`; expected one of {}", expected(&[GLOBAL_KEYS, HOST_ONLY].concat()))));
            }
        }
    }
    Ok(g)
}

/// Reads an rt-app document.
pub fn read(root: &Value) -> Result<RtApp, Error> {
    let top = object(root, "", "an rt-app file")?;
    let mut g = Global { duration: None, default_policy: Policy::Other, pi_enabled: false, io_device: "/dev/null".into() };
    once(top, "", &["global", "tasks", "resources"])?;
    if let Some(m) = top.iter().find(|m| m.key == "global") {
        g = global(object(value(m, "global")?, "global", "global")?)?;
    }
    let mut tasks = None;
    for m in top {
        match m.key.as_str() {
            "global" => {}
            "tasks" => tasks = Some(m),
            "resources" => {
                // rt-app 1.0 still reads a `resources` object of typed resources (mutex,
                // wait, …) that events name; it creates them from the events anyway
                object(value(m, "resources")?, "resources", "resources")?;
            }
            k => return Err(err(m.at, k, format!("unknown key `{k}`; expected `global`, `tasks`, `resources`"))),
        }
    }
    let tm = tasks.ok_or_else(|| err(root.at, "tasks", "an rt-app file needs a \"tasks\" object of threads"))?;
    let list = object(value(tm, "tasks")?, "tasks", "tasks")?;
    if list.is_empty() {
        return Err(err(tm.at, "tasks", "no threads"));
    }
    let names = workgen_names(list);
    let threads = list.iter().zip(&names).map(|(m, n)| thread(n, m, &g)).collect::<Result<Vec<_>, _>>()?;
    Ok(RtApp { global: g, threads })
}
