//! rt-app workloads (<https://github.com/scheduler-tools/rt-app>, doc/tutorial.txt) as
//! simulator scenarios: `vassal sim --rt-app FILE.json [--policy KIND]` (docs/rtapp.md).
//!
//! rt-app describes threads in JSON: `global` settings and `tasks`, each a thread object
//! with `instance`, `loop`, `delay`, scheduling keys (`policy`, `priority`,
//! `dl-runtime`/`dl-period`/`dl-deadline`), `cpus`, and events, directly or in
//! `phases` (each with its own `loop`). This module maps what the simulator models
//! faithfully onto [`Scenario`] tasks with scripted behaviours:
//!
//! - `run` (CPU work, µs) → [`Phase::Run`]; `runtime` (busy until so much wall time has
//!   passed) → [`Phase::RunWall`]; `sleep` → [`Phase::Sleep`]; `timer` (`ref`, `period`,
//!   `mode` relative/absolute, rt-app's semantics) → [`Phase::RtTimer`]; `yield` →
//!   [`Phase::Yield`]. Event keys may carry a numeric suffix (`run0`, `sleep1`) and run
//!   in file order.
//! - `loop` of a phase repeats its events; `loop` of the thread repeats all phases
//!   (-1, the default, forever); `instance` N makes N threads `NAME-0` … `NAME-{N-1}`
//!   (one thread keeps `NAME`); `delay` starts a thread later; `cpus` is its affinity.
//! - `SCHED_OTHER` threads (and `SCHED_IDLE`) stay with the default scheduler, of kind
//!   `--policy` (default `bvt`). Under `bvt`/`bvt2` a thread's nice value (`priority`
//!   for SCHED_OTHER) becomes the weight Linux CFS gives it (`sched_prio_to_weight`,
//!   nice 0 = 1024, SCHED_IDLE = 3); other kinds accept only nice 0.
//! - `SCHED_FIFO`/`SCHED_RR` threads join a fixed-priority scheduler `rt` (kind `fps`)
//!   above the default, with `priority` 1..99 (larger = more important, as in Linux);
//!   SCHED_RR with Linux's 100 ms round-robin time slice. `rt` declares 95% of the
//!   machine, like Linux's default RT bandwidth (`sched_rt_runtime_us` = 950000 of
//!   1000000); the simulator does not throttle it.
//!
//! Everything else is refused with the key's path and why (rt-app itself silently
//! ignores keys it does not know): mutexes and condition variables (`lock`, `unlock`,
//! `wait`, `signal`, `broad`, `sync`, `barrier`), `suspend`/`resume`, `fork`, `mem`,
//! `iorun`, per-phase policy or affinity changes, utilisation clamping, task groups,
//! NUMA binding, timers shared between threads, and `SCHED_DEADLINE` (vassal has no
//! EDF/CBS policy; the `dl-*` values are still checked). Host-only `global` settings
//! (logging, calibration, page locking, ftrace, gnuplot, I/O device, buffer sizes) are
//! accepted and have no effect: they do not change the schedule of simulated work.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use vassal_core::{CpuId, CpuSet, Ns, TaskParams, Usage, CPU_PPM, MAX_CPUS, MS, SEC, US};
use vassal_policies::ParamValue;

use crate::model::{Behaviour, ClockMode, Dist, Machine, Phase, PolicySpec, Scenario, SchedulerSpec, TaskSpec};

/// A JSON value that keeps the order of object keys (rt-app runs events in file order).
#[derive(Clone, Debug, PartialEq)]
pub enum Json {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    Arr(Vec<Json>),
    Obj(Vec<(String, Json)>),
}

impl<'de> Deserialize<'de> for Json {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Json, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Json;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a JSON value")
            }
            fn visit_unit<E>(self) -> Result<Json, E> {
                Ok(Json::Null)
            }
            fn visit_bool<E>(self, b: bool) -> Result<Json, E> {
                Ok(Json::Bool(b))
            }
            fn visit_i64<E>(self, v: i64) -> Result<Json, E> {
                Ok(Json::Int(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Json, E> {
                i64::try_from(v).map(Json::Int).map_err(|_| E::custom(format!("integer {v} is too large")))
            }
            fn visit_f64<E>(self, v: f64) -> Result<Json, E> {
                Ok(Json::Float(v))
            }
            fn visit_str<E>(self, s: &str) -> Result<Json, E> {
                Ok(Json::Str(s.to_string()))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut a: A) -> Result<Json, A::Error> {
                let mut v = Vec::new();
                while let Some(x) = a.next_element()? {
                    v.push(x);
                }
                Ok(Json::Arr(v))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<Json, A::Error> {
                let mut v: Vec<(String, Json)> = Vec::new();
                while let Some((k, x)) = a.next_entry::<String, Json>()? {
                    if v.iter().any(|(seen, _)| *seen == k) {
                        // rt-app's parser would keep one of them silently
                        return Err(de::Error::custom(format!("duplicate key `{k}` (number repeated events: run0, run1, …)")));
                    }
                    v.push((k, x));
                }
                Ok(Json::Obj(v))
            }
        }
        d.deserialize_any(V)
    }
}

impl Json {
    fn kind(&self) -> &'static str {
        match self {
            Json::Null => "null",
            Json::Bool(_) => "a boolean",
            Json::Int(_) => "an integer",
            Json::Float(_) => "a number",
            Json::Str(_) => "a string",
            Json::Arr(_) => "an array",
            Json::Obj(_) => "an object",
        }
    }
}

/// Settings the rt-app file does not hold.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// The default scheduler's kind for SCHED_OTHER threads (None: `bvt`).
    pub policy: Option<String>,
    /// CPUs of the simulated machine (None: one more than the highest CPU named in a
    /// `cpus` list, at least 1).
    pub cpus: Option<u16>,
    /// The horizon; needed when `global.duration` is -1 (or absent), else it overrides it.
    pub until: Option<Ns>,
}

/// CFS's nice-to-weight table (Linux kernel/sched/core.c, `sched_prio_to_weight`):
/// nice -20 .. 19.
const PRIO_TO_WEIGHT: [i64; 40] = [
    88761, 71755, 56483, 46273, 36291, 29154, 23254, 18705, 14949, 11916, 9548, 7620, 6100, 4904, 3906, 3121, 2501, 1991, 1586, 1277, 1024,
    820, 655, 526, 423, 335, 272, 215, 172, 137, 110, 87, 70, 56, 45, 36, 29, 23, 18, 15,
];
/// CFS's weight of a SCHED_IDLE task (WEIGHT_IDLEPRIO).
const IDLE_WEIGHT: i64 = 3;
/// Linux's SCHED_RR time slice (RR_TIMESLICE, 100 ms).
const RR_TIMESLICE: Ns = 100 * MS;
/// Events left after unrolling loops, at most (a bound on memory, not on behaviour).
const MAX_EVENTS: usize = 1_000_000;

/// rt-app events and keys the simulator does not model, with why.
const UNSUPPORTED: &[(&str, &str)] = &[
    ("lock", "no mutexes in the simulator"),
    ("unlock", "no mutexes in the simulator"),
    ("wait", "no condition variables in the simulator"),
    ("signal", "no condition variables in the simulator"),
    ("broad", "no condition variables in the simulator"),
    ("sync", "no condition variables in the simulator"),
    ("barrier", "no barriers in the simulator"),
    ("suspend", "threads cannot suspend and resume each other in the simulator"),
    ("resume", "threads cannot suspend and resume each other in the simulator"),
    ("fork", "threads are created at start (use delay)"),
    ("mem", "memory traffic is not modelled"),
    ("iorun", "I/O is not modelled"),
    ("util_min", "utilisation clamping is not modelled"),
    ("util_max", "utilisation clamping is not modelled"),
    ("taskgroup", "task groups are not modelled"),
    ("membind_nodes", "NUMA is not modelled"),
    ("period", "the legacy thread key; write dl-period"),
    ("deadline", "the legacy thread key; write dl-deadline"),
];

/// `global` keys that only concern the host run (logs, calibration, page locking, …):
/// accepted, with no effect on a simulated schedule.
const HOST_ONLY: &[&str] = &[
    "calibration",
    "pi_enabled",
    "lock_pages",
    "logdir",
    "log_basename",
    "log_size",
    "ftrace",
    "gnuplot",
    "io_device",
    "mem_buffer_size",
    "cumulative_slack",
];

/// An error at a key path ("tasks.thread0.phases.p1.lock: …").
fn at(path: &str, msg: impl fmt::Display) -> String {
    format!("{path}: {msg}")
}

fn unsupported(path: &str, key: &str, why: &str) -> String {
    at(&format!("{path}.{key}"), format!("rt-app key `{key}` is not supported ({why})"))
}

fn int(path: &str, v: &Json) -> Result<i64, String> {
    match v {
        Json::Int(i) => Ok(*i),
        other => Err(at(path, format!("expected an integer, found {}", other.kind()))),
    }
}

/// A duration in µs (rt-app's unit), >= 0.
fn micros(path: &str, v: &Json) -> Result<Ns, String> {
    let i = int(path, v)?;
    if i < 0 {
        return Err(at(path, format!("a duration in µs must be >= 0, found {i}")));
    }
    (i as u64).checked_mul(US).ok_or_else(|| at(path, "duration too large"))
}

/// Splits an event key into its type and suffix: "run0" → "run", "timer12" → "timer".
fn event_type(key: &str) -> &str {
    key.trim_end_matches(|c: char| c.is_ascii_digit())
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Class {
    Other,
    Idle,
    Fifo,
    Rr,
    Deadline,
}

fn class(path: &str, v: &Json) -> Result<Class, String> {
    match v {
        Json::Str(s) => match s.as_str() {
            "SCHED_OTHER" => Ok(Class::Other),
            "SCHED_IDLE" => Ok(Class::Idle),
            "SCHED_FIFO" => Ok(Class::Fifo),
            "SCHED_RR" => Ok(Class::Rr),
            "SCHED_DEADLINE" => Ok(Class::Deadline),
            other => {
                Err(at(path, format!("unknown policy `{other}`; expected SCHED_OTHER, SCHED_IDLE, SCHED_RR, SCHED_FIFO or SCHED_DEADLINE")))
            }
        },
        other => Err(at(path, format!("expected a policy name string, found {}", other.kind()))),
    }
}

/// One thread object, read.
struct Thread {
    name: String,
    instances: u64,
    delay: Ns,
    class: Class,
    priority: Option<i64>,
    cpus: Option<CpuSet>,
    /// Phases with their events, each phase unrolled `loop` times.
    events: Vec<Phase>,
    /// Thread loop count; None: forever.
    loops: Option<u64>,
    /// Timer refs used, with the path of their first use.
    timers: Vec<(String, String)>,
}

/// Reads a phase's (or a one-phase thread's) events in order into `out`; scheduling and
/// affinity keys are handled by the caller and skipped here.
fn read_events(
    path: &str,
    obj: &[(String, Json)],
    skip: &[&str],
    out: &mut Vec<Phase>,
    timers: &mut Vec<(String, String)>,
) -> Result<(), String> {
    for (key, v) in obj {
        if skip.contains(&key.as_str()) {
            continue;
        }
        let p = format!("{path}.{key}");
        match event_type(key) {
            "run" => out.push(Phase::Run(Dist::Const(micros(&p, v)?))),
            "runtime" => out.push(Phase::RunWall(Dist::Const(micros(&p, v)?))),
            "sleep" => out.push(Phase::Sleep(Dist::Const(micros(&p, v)?))),
            "yield" => match v {
                Json::Str(_) => out.push(Phase::Yield),
                other => return Err(at(&p, format!("expected a string (it may be empty), found {}", other.kind()))),
            },
            "timer" => {
                let Json::Obj(t) = v else {
                    return Err(at(&p, format!("expected {{ \"ref\": …, \"period\": … }}, found {}", v.kind())));
                };
                let (mut reference, mut period, mut relative) = (None, None, true);
                for (k, x) in t {
                    let q = format!("{p}.{k}");
                    match k.as_str() {
                        "ref" => match x {
                            Json::Str(s) => reference = Some(s.clone()),
                            other => return Err(at(&q, format!("expected a timer name, found {}", other.kind()))),
                        },
                        "period" => {
                            let d = micros(&q, x)?;
                            if d == 0 {
                                return Err(at(&q, "a timer period must be greater than 0"));
                            }
                            period = Some(d);
                        }
                        "mode" => match x {
                            Json::Str(m) if m == "relative" => relative = true,
                            Json::Str(m) if m == "absolute" => relative = false,
                            _ => return Err(at(&q, "expected \"relative\" or \"absolute\"")),
                        },
                        other => return Err(unsupported(&p, other, "a timer has ref, period and mode")),
                    }
                }
                let reference = reference.ok_or_else(|| at(&p, "a timer needs \"ref\""))?;
                let period = period.ok_or_else(|| at(&p, "a timer needs \"period\" (µs)"))?;
                let timer = match timers.iter().position(|(r, _)| *r == reference) {
                    Some(k) => k,
                    None => {
                        timers.push((reference, p.clone()));
                        timers.len() - 1
                    }
                };
                out.push(Phase::RtTimer { period, relative, timer });
            }
            _ => {
                let why = UNSUPPORTED
                    .iter()
                    .find(|(k, _)| *k == key.as_str() || *k == event_type(key))
                    .map_or("not an rt-app event or key the simulator knows", |(_, w)| w);
                return Err(unsupported(path, key, why));
            }
        }
    }
    Ok(())
}

/// A `loop` value: a count >= 1, or -1 (None) for forever.
fn loops(path: &str, v: &Json) -> Result<Option<u64>, String> {
    match int(path, v)? {
        -1 => Ok(None),
        n if n >= 1 => Ok(Some(n as u64)),
        n => Err(at(path, format!("loop must be -1 (forever) or at least 1, found {n}"))),
    }
}

fn repeat(events: &[Phase], times: u64, path: &str) -> Result<Vec<Phase>, String> {
    let total = (events.len() as u128) * times as u128;
    if total > MAX_EVENTS as u128 {
        return Err(at(
            path,
            format!("the loops unroll to {total} events, more than {MAX_EVENTS}; use a thread loop of -1 and a shorter horizon"),
        ));
    }
    let mut out = Vec::with_capacity(total as usize);
    for _ in 0..times {
        out.extend_from_slice(events);
    }
    Ok(out)
}

const SCHED_KEYS: &[&str] = &["policy", "priority", "dl-runtime", "dl-period", "dl-deadline"];

fn read_thread(name: &str, v: &Json, default_class: Class) -> Result<Thread, String> {
    let path = format!("tasks.{name}");
    let Json::Obj(obj) = v else {
        return Err(at(&path, format!("a thread is an object, found {}", v.kind())));
    };
    let mut t = Thread {
        name: name.to_string(),
        instances: 1,
        delay: 0,
        class: default_class,
        priority: None,
        cpus: None,
        events: Vec::new(),
        loops: None,
        timers: Vec::new(),
    };
    let mut dl: BTreeMap<&str, Ns> = BTreeMap::new();
    let mut phases: Option<&Vec<(String, Json)>> = None;
    let thread_keys = ["instance", "loop", "delay", "cpus", "phases", "policy", "priority", "dl-runtime", "dl-period", "dl-deadline"];
    for (key, x) in obj {
        let p = format!("{path}.{key}");
        match key.as_str() {
            "instance" => {
                let n = int(&p, x)?;
                if n < 0 {
                    return Err(at(&p, format!("instance must be >= 0, found {n}")));
                }
                t.instances = n as u64;
            }
            "loop" => t.loops = loops(&p, x)?,
            "delay" => t.delay = micros(&p, x)?,
            "policy" => t.class = class(&p, x)?,
            "priority" => t.priority = Some(int(&p, x)?),
            "dl-runtime" | "dl-period" | "dl-deadline" => {
                dl.insert(key.as_str(), micros(&p, x)?);
            }
            "cpus" => {
                let Json::Arr(list) = x else {
                    return Err(at(&p, format!("expected an array of CPU numbers, found {}", x.kind())));
                };
                if list.is_empty() {
                    return Err(at(&p, "an empty CPU list allows no CPU"));
                }
                let mut set = CpuSet::NONE;
                for c in list {
                    let c = int(&p, c)?;
                    if !(0..MAX_CPUS as i64).contains(&c) || c >= 64 {
                        return Err(at(&p, format!("CPU {c} is out of range 0..{}", MAX_CPUS.min(64))));
                    }
                    set = CpuSet(set.0 | CpuSet::only(CpuId(c as u16)).0);
                }
                t.cpus = Some(set);
            }
            "phases" => match x {
                Json::Obj(ph) if !ph.is_empty() => phases = Some(ph),
                _ => return Err(at(&p, "phases is a non-empty object of phase objects")),
            },
            _ => {}
        }
    }
    match phases {
        None => {
            // One phase: the events sit in the thread object itself.
            read_events(&path, obj, &thread_keys, &mut t.events, &mut t.timers)?;
        }
        Some(ph) => {
            for (k, _) in obj {
                if !thread_keys.contains(&k.as_str()) {
                    let why = if event_type(k) == "run" || ["runtime", "sleep", "timer", "yield"].contains(&event_type(k)) {
                        "events go inside the phases when a thread has phases"
                    } else {
                        UNSUPPORTED
                            .iter()
                            .find(|(u, _)| *u == k.as_str())
                            .map_or("not an rt-app thread key the simulator knows", |(_, w)| w)
                    };
                    return Err(unsupported(&path, k, why));
                }
            }
            let n = ph.len();
            for (idx, (pname, pv)) in ph.iter().enumerate() {
                let pp = format!("{path}.phases.{pname}");
                let Json::Obj(pobj) = pv else {
                    return Err(at(&pp, format!("a phase is an object, found {}", pv.kind())));
                };
                let mut times = Some(1);
                for (k, x) in pobj {
                    match k.as_str() {
                        "loop" => times = loops(&format!("{pp}.loop"), x)?,
                        k if SCHED_KEYS.contains(&k) => {
                            return Err(unsupported(&pp, k, "scheduling settings per phase are not supported; set them on the thread"))
                        }
                        "cpus" => return Err(unsupported(&pp, "cpus", "affinity per phase is not supported; set it on the thread")),
                        _ => {}
                    }
                }
                let mut evs = Vec::new();
                read_events(&pp, pobj, &["loop"], &mut evs, &mut t.timers)?;
                match times {
                    Some(k) => t.events.extend(repeat(&evs, k, &pp)?),
                    None if n == 1 => {
                        // one phase looping forever: the same as a thread loop of -1
                        t.events = evs;
                        t.loops = None;
                    }
                    None => {
                        return Err(at(
                            &format!("{pp}.loop"),
                            format!(
                            "a phase looping forever (-1) is supported only when it is the thread's only phase (this is phase {} of {n})",
                            idx + 1
                        ),
                        ))
                    }
                }
            }
        }
    }
    if t.events.is_empty() {
        return Err(at(&path, "the thread has no events (run, runtime, sleep, timer, yield)"));
    }
    // Linux's rules for SCHED_DEADLINE parameters (sched_setattr): 0 < runtime <= deadline <= period.
    if !dl.is_empty() {
        let runtime = dl.get("dl-runtime").copied().unwrap_or(0);
        let period = dl.get("dl-period").copied().unwrap_or(runtime);
        let deadline = dl.get("dl-deadline").copied().unwrap_or(period);
        if !(runtime > 0 && runtime <= deadline && deadline <= period) {
            return Err(at(
                &path,
                format!(
                    "dl-runtime {} µs, dl-deadline {} µs, dl-period {} µs: Linux requires 0 < runtime <= deadline <= period",
                    runtime / US,
                    deadline / US,
                    period / US
                ),
            ));
        }
        if t.class != Class::Deadline {
            return Err(at(&path, "dl-runtime, dl-period and dl-deadline apply only to SCHED_DEADLINE"));
        }
    }
    if t.class == Class::Deadline {
        return Err(at(
            &format!("{path}.policy"),
            "SCHED_DEADLINE is not supported: vassal has no EDF/CBS policy yet, so dl-runtime, dl-period and dl-deadline cannot be honoured",
        ));
    }
    Ok(t)
}

/// Reads an rt-app file.
pub fn load_rtapp(path: &Path, opts: &Options) -> Result<Scenario, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let name = path.file_stem().map_or("rt-app".to_string(), |s| s.to_string_lossy().to_string());
    parse_rtapp(&text, &name, opts).map_err(|e| format!("{}: {e}", path.display()))
}

/// Builds a scenario named `name` from rt-app JSON text. Errors name the key path.
pub fn parse_rtapp(text: &str, name: &str, opts: &Options) -> Result<Scenario, String> {
    let root: Json = serde_json::from_str(text).map_err(|e| format!("not valid JSON: {e}"))?;
    let Json::Obj(top) = root else {
        return Err("an rt-app file is a JSON object with \"tasks\" (and \"global\")".into());
    };
    let mut duration: Option<Ns> = None;
    let mut default_class = Class::Other;
    let mut tasks_obj = None;
    for (key, v) in &top {
        match key.as_str() {
            "global" => {
                let Json::Obj(g) = v else { return Err(at("global", "expected an object")) };
                for (k, x) in g {
                    let p = format!("global.{k}");
                    match k.as_str() {
                        "duration" => match int(&p, x)? {
                            -1 => duration = None,
                            s if s > 0 => duration = Some((s as u64).checked_mul(SEC).ok_or_else(|| at(&p, "too long"))?),
                            s => return Err(at(&p, format!("duration is seconds > 0, or -1, found {s}"))),
                        },
                        "default_policy" => default_class = class(&p, x)?,
                        k if HOST_ONLY.contains(&k) => {}
                        other => {
                            return Err(unsupported("global", other, "not an rt-app global key the simulator knows"));
                        }
                    }
                }
            }
            "tasks" => tasks_obj = Some(v),
            "resources" => {
                match v {
                    Json::Obj(r) if r.is_empty() => {}
                    _ => return Err(
                        "resources: rt-app key `resources` is not supported (mutexes, condition variables and barriers are not modelled)"
                            .into(),
                    ),
                }
            }
            other => return Err(format!("{other}: rt-app key `{other}` is not supported (expected global, tasks)")),
        }
    }
    let Some(Json::Obj(tasks)) = tasks_obj else {
        return Err("tasks: an rt-app file needs a \"tasks\" object of threads".into());
    };
    if tasks.is_empty() {
        return Err("tasks: no threads".into());
    }
    let threads = tasks.iter().map(|(n, v)| read_thread(n, v, default_class)).collect::<Result<Vec<_>, _>>()?;

    // Timers: any number per thread, but not shared between threads.
    let mut owners: BTreeMap<&str, &str> = BTreeMap::new();
    for t in &threads {
        for (r, p) in &t.timers {
            let unique = r.starts_with("unique");
            if !unique && t.instances > 1 {
                return Err(at(p, format!("timer `{r}` is shared by the thread's {} instances, which rt-app advances from each of them; the simulator does not model shared timers (name it unique…, one per instance)", t.instances)));
            }
            if !unique {
                if let Some(other) = owners.insert(r, &t.name) {
                    return Err(at(p, format!("timer `{r}` is shared with thread `{other}`; the simulator does not model shared timers (give each thread its own)")));
                }
            }
        }
    }

    let kind = opts.policy.clone().unwrap_or_else(|| "bvt".to_string());
    vassal_policies::build(&kind, &BTreeMap::new()).map_err(|e| format!("--policy: {e}"))?;
    let weighted = kind == "bvt" || kind == "bvt2";
    let rt: Vec<Class> =
        threads.iter().filter(|t| t.instances > 0).map(|t| t.class).filter(|c| matches!(c, Class::Fifo | Class::Rr)).collect();
    if rt.contains(&Class::Fifo) && rt.contains(&Class::Rr) {
        return Err("tasks: mixing SCHED_FIFO and SCHED_RR threads is not supported (one fixed-priority scheduler serves them, with or without a time slice)".into());
    }
    let highest_cpu = threads.iter().filter_map(|t| t.cpus).map(|s| 64 - s.0.leading_zeros() as u16).max().unwrap_or(1);
    let cpus = opts.cpus.unwrap_or(highest_cpu.max(1));
    if cpus == 0 || cpus > MAX_CPUS {
        return Err(format!("--cpus must be between 1 and {MAX_CPUS}"));
    }
    let until = match (opts.until, duration) {
        (Some(u), _) | (None, Some(u)) => u,
        (None, None) => {
            return Err("global.duration is -1 or absent (run until every thread ends): give the simulated horizon with --until".into())
        }
    };

    let mut out = Vec::new();
    for t in &threads {
        let path = format!("tasks.{}", t.name);
        if let Some(set) = t.cpus {
            if set.0 & CpuSet::first(cpus).0 == 0 || set.0 & !CpuSet::first(cpus).0 != 0 {
                return Err(at(&format!("{path}.cpus"), format!("names a CPU the {cpus}-CPU machine does not have (use --cpus)")));
            }
        }
        let mut params = TaskParams::new();
        let scheduler = match t.class {
            Class::Fifo | Class::Rr => {
                let prio = t.priority.unwrap_or(10);
                if !(1..=99).contains(&prio) {
                    return Err(at(&format!("{path}.priority"), format!("SCHED_FIFO/SCHED_RR priority must be 1..99, found {prio}")));
                }
                params.insert("priority".into(), prio);
                Some("rt".to_string())
            }
            Class::Other | Class::Idle => {
                let weight = if t.class == Class::Idle {
                    if t.priority.is_some_and(|p| p != 0) {
                        return Err(at(&format!("{path}.priority"), "SCHED_IDLE takes no priority"));
                    }
                    IDLE_WEIGHT
                } else {
                    let nice = t.priority.unwrap_or(0);
                    if !(-20..=19).contains(&nice) {
                        return Err(at(
                            &format!("{path}.priority"),
                            format!("a SCHED_OTHER priority is a nice value -20..19, found {nice}"),
                        ));
                    }
                    PRIO_TO_WEIGHT[(nice + 20) as usize]
                };
                if weighted {
                    params.insert("weight".into(), weight);
                } else if weight != PRIO_TO_WEIGHT[20] {
                    return Err(at(&path, format!("a nice value other than 0 (or SCHED_IDLE) needs a weighted policy for SCHED_OTHER (--policy bvt or bvt2), not {kind}")));
                }
                None
            }
            Class::Deadline => unreachable!("refused in read_thread"),
        };
        let behaviour = Behaviour::Script {
            phases: match t.loops {
                None => t.events.clone(),
                Some(n) => repeat(&t.events, n, &path)?,
            },
            repeat: t.loops.is_none(),
        };
        if t.loops.is_none() && !t.events.iter().any(crate::scenario::phase_takes_time) {
            return Err(at(&path, "the thread loops forever through events that take no time"));
        }
        for k in 0..t.instances {
            let name = if t.instances == 1 { t.name.clone() } else { format!("{}-{k}", t.name) };
            out.push(TaskSpec {
                name,
                start: t.delay,
                scheduler: scheduler.clone(),
                affinity: t.cpus.unwrap_or(CpuSet::first(cpus)),
                params: params.clone(),
                uid: 0,
                behaviour: behaviour.clone(),
                loop_at: None,
            });
        }
    }
    if out.is_empty() {
        return Err("tasks: every thread has instance 0; nothing to simulate".into());
    }
    let mut schedulers = Vec::new();
    if !rt.is_empty() {
        let mut p = BTreeMap::new();
        if rt.contains(&Class::Rr) {
            p.insert("quantum".to_string(), ParamValue::Str(format!("{}ms", RR_TIMESLICE / MS)));
        }
        schedulers.push(SchedulerSpec {
            name: "rt".into(),
            policy: PolicySpec { kind: "fps".into(), params: p },
            usage: Usage::Reserved { cpu_ppm: CPU_PPM * cpus as u64 * 95 / 100 },
            load_at: 0,
            unload_at: None,
        });
    }
    Ok(Scenario {
        name: name.to_string(),
        machine: Machine {
            cpus,
            clock: ClockMode::OneShot,
            hz: crate::scenario::DEFAULT_HZ,
            switch_cost: 0,
            migration_cost: 0,
            unscheduled: None,
            min_best_effort_ppm: None,
        },
        default_name: "default".into(),
        default_policy: PolicySpec { kind, params: BTreeMap::new() },
        schedulers,
        tasks: out,
        interrupts: Vec::new(),
        until,
        seed: 1,
        memory: None,
    })
}
