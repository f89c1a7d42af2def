//! The wire protocol between clients and the broker: one JSON object per line, each way.
//! A call is answered by exactly one reply line; a connection may carry many calls.
//!
//! Calls (`"op"`): `join`, `leave`, `release`, `param`, `message`, `hierarchy`, `tasks`,
//! `register`, `unregister`, `load`, `unload`, `status`. Replies (`"reply"`): `ok`, `value`, `fraction`, `refused`
//! (the scheduler or the broker said no: permission, ceiling, admission), `error` (the
//! call itself was malformed), `joined`, `hierarchy`, `tasks`, `status`, and `closing`
//! (not an answer: the agent is about to close an idle connection, and the call the
//! client may have sent meanwhile was not handled — send it again on a new connection).
//! docs/agent.md has examples of each. A line longer than [`MAX_LINE`] bytes, or not
//! UTF-8, or not a call, gets an `error` reply naming what was wrong; the agent never
//! panics on input. docs/agent.md, "Connections", has the limits and timeouts.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use vassal_core::{Ns, Reply, Request};

use crate::config::{UsageSpec, Value};

/// The longest call line accepted, in bytes.
pub const MAX_LINE: usize = 64 * 1024;

/// A client's call.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum Call {
    /// Manage process `pid` (every thread of it) and move it to scheduler `sched`
    /// (default: the default scheduler), with task parameters `params` (e.g. weight,
    /// warp, warp_limit, unwarp in ns). A process already managed just moves (Vassal's
    /// JOIN). With `tid`, only that thread of `pid` moves and gets `params` (the process
    /// is managed whole all the same).
    Join {
        pid: i32,
        #[serde(default)]
        tid: Option<i32>,
        #[serde(default)]
        sched: Option<String>,
        #[serde(default)]
        params: BTreeMap<String, i64>,
    },
    /// Return the process (or thread `tid` of it) to the default scheduler (Vassal's LEAVE).
    Leave {
        pid: i32,
        #[serde(default)]
        tid: Option<i32>,
    },
    /// Stop managing the process: its threads get their original scheduling back.
    Release { pid: i32 },
    /// Set one task parameter through its scheduler (`Request::Param`): of the process
    /// (each thread, the weight divided among them), or of thread `tid` alone.
    Param {
        pid: i32,
        #[serde(default)]
        tid: Option<i32>,
        name: String,
        value: i64,
    },
    /// MessageToScheduler: `request` about `pid` to scheduler `sched` (default: the
    /// scheduler that owns the process). vassal_core's `Request` itself, in its JSON form
    /// (`{"kind":"set","delay_ns":1000000}`, times in ns with an `_ns` suffix; `set_at`
    /// takes an absolute CLOCK_MONOTONIC time, `Request::resolve`; `join` and `leave` are
    /// calls of their own, not requests).
    /// With `tid`, about that thread of `pid`; without, about the process (docs/agent.md,
    /// "Unit of scheduling", says which threads each request goes to).
    Message {
        #[serde(default)]
        sched: Option<String>,
        pid: i32,
        #[serde(default)]
        tid: Option<i32>,
        request: Request,
    },
    /// The hierarchy, top-down.
    Hierarchy,
    /// The managed processes with live figures.
    Tasks,
    /// RegisterScheduler: load a built-in policy `kind` as `name`, at the top or just
    /// above `above`. Root only.
    Register {
        name: String,
        kind: String,
        #[serde(default)]
        params: BTreeMap<String, Value>,
        usage: UsageSpec,
        #[serde(default)]
        above: Option<String>,
    },
    /// UnregisterScheduler: its tasks return to the default scheduler. Root only.
    Unregister { name: String },
    /// Load a policy module (a WebAssembly file built with the SDK, docs/modules.md) as
    /// scheduler `name`: at the top, just above `above` or just below `below`. Root only.
    /// `path` is the module file as the agent sees it (absolute; `vassal ctl load` makes
    /// it so): the agent reads it, since only root may load and a module is larger than a
    /// call line may be. The module declares its CPU usage, which goes through the
    /// conflict check (paper 000 §8); `params` are its scheduler-level parameters;
    /// `watchdog_ns` its containment watchdog (default 1 s; 0: none).
    Load {
        path: String,
        name: String,
        #[serde(default)]
        above: Option<String>,
        #[serde(default)]
        below: Option<String>,
        #[serde(default)]
        params: BTreeMap<String, Value>,
        #[serde(default)]
        watchdog_ns: Option<Ns>,
    },
    /// Unload a loaded module: each of its tasks goes to the scheduler directly below it
    /// (or, if that one refuses it, the next one down). Root only.
    Unload { name: String },
    /// The agent's own figures.
    Status,
}

impl Call {
    /// The process a call is about.
    pub fn pid(&self) -> Option<i32> {
        match self {
            Call::Join { pid, .. }
            | Call::Leave { pid, .. }
            | Call::Release { pid }
            | Call::Param { pid, .. }
            | Call::Message { pid, .. } => Some(*pid),
            _ => None,
        }
    }
    /// The thread of that process it is about, if it names one.
    pub fn tid(&self) -> Option<i32> {
        match self {
            Call::Join { tid, .. } | Call::Leave { tid, .. } | Call::Param { tid, .. } | Call::Message { tid, .. } => *tid,
            _ => None,
        }
    }
}

/// A registered scheduler, for `hierarchy`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SchedRow {
    pub name: String,
    pub kind: String,
    pub usage: String,
    pub decided: u64,
    pub refused: u64,
    pub tasks: usize,
    /// For a loaded module: the file it was loaded from (None: a built-in policy).
    #[serde(default)]
    pub module: Option<String>,
    /// The CPU its decisions gave its tasks over the last second, in CPUs (measured).
    #[serde(default)]
    pub share: f64,
    /// What it was granted: its declared demand in CPUs (hard time: util × CPUs;
    /// reserved: its share); None for best effort.
    #[serde(default)]
    pub granted: Option<f64>,
}

/// A loaded module the agent ejected (docs/modules.md, "Containment"), for `status`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EjectionRow {
    /// When, in CLOCK_MONOTONIC ns.
    pub at_ns: Ns,
    pub name: String,
    /// The module's file.
    pub module: String,
    pub reason: String,
    /// Each of its tasks, "PID -> SCHEDULER" (where it went).
    pub moved: Vec<String>,
}

/// A managed process, for `tasks`: its figures are its threads' together (each thread's
/// are in `thread_rows`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TaskRow {
    pub pid: i32,
    pub uid: u32,
    /// The task of its main thread.
    pub task: u32,
    /// Its threads' schedulers ("a+b" if they differ).
    pub sched: String,
    pub threads: usize,
    /// Running (on which CPUs) if a thread is, else runnable if one is, else blocked, as
    /// the dispatcher sees it.
    pub state: String,
    /// What the agent made of it in the kernel: its thread's, e.g. "fifo50 cpu1", "armed
    /// fifo51 cpu0", "other cpu0", "idle"; for several threads, each distinct state with
    /// how many threads are in it.
    pub kernel: String,
    /// CPU used, ns, since it joined (all its threads, gone ones included).
    pub cpu_ns: u64,
    /// Its threads' shares of one CPU over the last second, added up (2.0: two CPUs).
    pub share: f64,
    /// Dispatch latency (seen runnable by the agent → selected), µs, p50 and p99.
    pub latency_p50_us: f64,
    pub latency_p99_us: f64,
    /// While selected: what is left of the slice its scheduler's decision gave it (Vassal
    /// §4: the dispatcher runs a decision for its slice, then asks again), ns. None when
    /// not selected or the decision has no slice (runs until it blocks or is preempted).
    #[serde(default)]
    pub budget_ns: Option<u64>,
    /// The parameters it joined with or was given.
    pub params: BTreeMap<String, i64>,
    /// What its schedulers said about it lately (e.g. a reservation removed for
    /// overrunning, paper 002 §2.3), oldest first.
    #[serde(default)]
    pub notes: Vec<String>,
    /// Its reservations together, in CPUs (granted; `share` is what it got).
    #[serde(default)]
    pub reserved: f64,
    /// Each thread.
    #[serde(default)]
    pub thread_rows: Vec<ThreadRow>,
}

/// A managed thread (one task), for `tasks`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ThreadRow {
    pub tid: i32,
    pub task: u32,
    pub sched: String,
    pub state: String,
    pub kernel: String,
    /// CPU used, ns, since it was adopted.
    pub cpu_ns: u64,
    /// Its share of one CPU over the last second (at most 1).
    pub share: f64,
    pub latency_p50_us: f64,
    pub latency_p99_us: f64,
    #[serde(default)]
    pub budget_ns: Option<u64>,
    /// The weight its scheduler has (its process's, divided; or its own).
    pub weight: i64,
    /// Its reservation, in CPUs (0: none).
    pub reserved: f64,
    /// Parameters set for this thread alone (`--tid`).
    pub params: BTreeMap<String, i64>,
}

/// The broker's answer to one call.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "reply", rename_all = "snake_case")]
pub enum Answer {
    Ok,
    Value { value: i64 },
    Fraction { num: u64, den: u64 },
    Refused { reason: String },
    Error { message: String },
    Joined { task: u32, sched: String },
    Hierarchy { schedulers: Vec<SchedRow> },
    Tasks { tasks: Vec<TaskRow> },
    Status(Status),
    // Not an answer: the agent closes this connection (it stayed idle past
    // `client_timeout`); whatever the client sent after the last answer was not handled.
    // (A plain comment: a doc comment here would make rustfmt lay every variant out
    // vertically.)
    Closing { reason: String },
}

/// The agent's own figures, for `status`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Status {
    pub ncpus: u16,
    pub tick_ns: Ns,
    pub uptime_ns: Ns,
    /// CPU used by the whole agent process (dispatcher, broker, main thread), ns.
    pub agent_cpu_ns: Ns,
    /// CPU used by the dispatcher thread alone, ns.
    pub dispatcher_cpu_ns: Ns,
    pub passes: u64,
    /// Managed processes, and their threads (the tasks).
    pub managed: usize,
    #[serde(default)]
    pub managed_threads: usize,
    pub ledger_records: usize,
    pub kernel_errors: u64,
    /// Modules ejected since the agent started (the last 64), oldest first.
    #[serde(default)]
    pub ejections: Vec<EjectionRow>,
    /// Where blocks and wakes come from: "bpf" or "poll" (config key `events`).
    #[serde(default)]
    pub events: String,
    /// BPF events the dispatcher has read from the ring buffer (0 when polling). Quiet
    /// wakes and blocks (docs/agent.md) wait there until the next pass, which `tasks`
    /// brings and `status` does not.
    #[serde(default)]
    pub bpf_events: u64,
    /// Runs of armed processes the dispatcher heard of only after they blocked again
    /// (quiet wakes, docs/agent.md), told to the policies in order.
    #[serde(default)]
    pub replayed_runs: u64,
    /// Sleeps of running best-effort threads the dispatcher heard of only after they woke
    /// again (quiet blocks, docs/agent.md), told to the policies in order.
    #[serde(default)]
    pub replayed_sleeps: u64,
    /// Times an armed process's CPU-clock bound fired (it ran a tick of CPU unseen).
    #[serde(default)]
    pub bounds_fired: u64,
    /// The kernel refused the RLIMIT_RTTIME backstop on another user's process (no
    /// CAP_SYS_RESOURCE): only the agent's real-time budgets bound their real time.
    #[serde(default)]
    pub backstop_refused: bool,
}

impl Answer {
    pub fn refused(why: impl Into<String>) -> Answer {
        Answer::Refused { reason: why.into() }
    }
    pub fn error(why: impl Into<String>) -> Answer {
        Answer::Error { message: why.into() }
    }
    pub fn is_ok(&self) -> bool {
        !matches!(self, Answer::Refused { .. } | Answer::Error { .. } | Answer::Closing { .. })
    }
}

impl From<Reply> for Answer {
    fn from(r: Reply) -> Answer {
        match r {
            Reply::Ok => Answer::Ok,
            Reply::Value(v) => Answer::Value { value: v },
            Reply::Fraction { num, den } => Answer::Fraction { num, den },
            Reply::Refused(reason) => Answer::Refused { reason },
        }
    }
}

/// Decodes one call line (without its newline). Errors name what was wrong.
pub fn decode(line: &[u8]) -> Result<Call, String> {
    if line.len() > MAX_LINE {
        return Err(format!("call of {} bytes is longer than the limit of {MAX_LINE}", line.len()));
    }
    let text = std::str::from_utf8(line).map_err(|e| format!("call is not UTF-8: {e}"))?;
    let call: Call = serde_json::from_str(text).map_err(|e| format!("malformed call: {e}"))?;
    if let Some(p) = call.pid().filter(|&p| p <= 0) {
        return Err(format!("pid {p} is not a process id"));
    }
    if let Some(t) = call.tid().filter(|&t| t <= 0) {
        return Err(format!("tid {t} is not a thread id"));
    }
    Ok(call)
}

/// Encodes a value as one line, newline included.
pub fn encode<T: Serialize>(v: &T) -> String {
    let mut s = serde_json::to_string(v).unwrap_or_else(|e| format!("{{\"reply\":\"error\",\"message\":\"encoding: {e}\"}}"));
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_calls() {
        assert_eq!(decode(br#"{"op":"leave","pid":5}"#), Ok(Call::Leave { pid: 5, tid: None }));
        assert_eq!(decode(br#"{"op":"leave","pid":5,"tid":6}"#), Ok(Call::Leave { pid: 5, tid: Some(6) }));
        assert_eq!(
            decode(br#"{"op":"message","pid":5,"request":{"kind":"set","delay_ns":1000000}}"#),
            Ok(Call::Message { sched: None, pid: 5, tid: None, request: Request::Set { delay: 1_000_000 } })
        );
        assert_eq!(decode(br#"{"op":"tasks"}"#), Ok(Call::Tasks));
    }

    /// Every request's JSON form, as clients have always sent it (`Request` is core's;
    /// its field names and the `_ns` suffixes are serde attributes there).
    #[test]
    fn requests_keep_their_wire_form() {
        let forms = [
            (Request::Set { delay: 1_000_000 }, r#"{"kind":"set","delay_ns":1000000}"#),
            (Request::SetAt { at: 5 }, r#"{"kind":"set_at","at_ns":5}"#),
            (Request::Warp { on: true }, r#"{"kind":"warp","on":true}"#),
            (Request::Param { name: "weight".into(), value: -2 }, r#"{"kind":"param","name":"weight","value":-2}"#),
            (Request::Reserve { util: 0.25, period: 20_000_000 }, r#"{"kind":"reserve","util":0.25,"period_ns":20000000}"#),
            (Request::Free, r#"{"kind":"free"}"#),
            (Request::Modify { util: 0.5, period: 7 }, r#"{"kind":"modify","util":0.5,"period_ns":7}"#),
            (Request::Avail, r#"{"kind":"avail"}"#),
            (Request::Deadline { start: 1, need: 2, deadline: 3 }, r#"{"kind":"deadline","start_ns":1,"need_ns":2,"deadline_ns":3}"#),
        ];
        for (req, json) in forms {
            assert_eq!(serde_json::to_string(&req).unwrap(), json);
            assert_eq!(serde_json::from_str::<Request>(json).unwrap(), req);
        }
        // Join and leave are calls of their own (the broker checks them), never requests;
        // a request has exactly its fields.
        for bad in [r#"{"kind":"join"}"#, r#"{"kind":"leave"}"#, r#"{"kind":"set","delay":5}"#, r#"{"kind":"warp","on":true,"x":1}"#] {
            let line = format!(r#"{{"op":"message","pid":5,"request":{bad}}}"#);
            assert!(decode(line.as_bytes()).unwrap_err().contains("malformed"), "{bad}");
        }
        let e = decode(br#"{"op":"message","pid":5,"request":{"kind":"join"}}"#).unwrap_err();
        assert!(e.contains("expected one of `set`, `set_at`, `warp`, `param`, `reserve`, `free`, `modify`, `avail`, `deadline`"), "{e}");
    }

    #[test]
    fn refuses_malformed_calls_with_reasons() {
        assert!(decode(b"{").unwrap_err().contains("malformed"));
        assert!(decode(br#"{"op":"leave","pid":-1}"#).unwrap_err().contains("-1"));
        assert!(decode(br#"{"op":"join","pid":5,"tid":0}"#).unwrap_err().contains("tid 0"));
        assert!(decode(br#"{"op":"leave","pid":5,"x":1}"#).unwrap_err().contains("x"));
        assert!(decode(br#"{"op":"fly"}"#).unwrap_err().contains("fly"));
        assert!(decode(&[0xff, 0xfe]).unwrap_err().contains("UTF-8"));
        assert!(decode(&vec![b' '; MAX_LINE + 1]).unwrap_err().contains("limit"));
    }

    #[test]
    fn round_trips() {
        let c = Call::Join { pid: 7, tid: Some(8), sched: Some("timed".into()), params: [("weight".to_string(), 2)].into() };
        let line = encode(&c);
        assert_eq!(decode(line.trim_end().as_bytes()), Ok(c));
        let a = Answer::Closing { reason: "idle for 5s: the connection is closed".into() };
        assert_eq!(encode(&a), "{\"reply\":\"closing\",\"reason\":\"idle for 5s: the connection is closed\"}\n");
        assert!(!a.is_ok());
    }
}
