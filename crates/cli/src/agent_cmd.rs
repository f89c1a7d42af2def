//! `vassal agent`, `vassal run`, `vassal ctl` (issue 6): the Linux agent and its clients.
//! The mechanism lives in the vassal-agent crate; this is argument handling and output.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{anyhow, bail, Context, Result};
use clap::{Args, Subcommand};
use vassal_agent::client::{Client, HeldChild};
use vassal_agent::config::{UsageSpec, Value, DEFAULT_SOCKET};
use vassal_agent::wire::{Answer, Call};
use vassal_agent::Config;
use vassal_core::{parse_duration, Request};

#[derive(Args)]
pub struct AgentArgs {
    /// The TOML configuration (docs/agent.md); default: built-in defaults.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Overrides the config's socket path.
    #[arg(long)]
    socket: Option<String>,
    /// Overrides the config's tick, e.g. "4ms".
    #[arg(long)]
    tick: Option<String>,
    /// Write the agent's decisions, wakes, blocks and scheduler events to FILE for the
    /// Perfetto UI (docs/trace.md): Perfetto protobuf (per-CPU sched_switch and
    /// sched_waking, written at the stop) if FILE ends in .pftrace, .perfetto-trace or
    /// .pb, else a Chrome trace (written as it goes).
    #[arg(long, value_name = "FILE")]
    trace: Option<PathBuf>,
}

#[derive(Args)]
pub struct RunArgs {
    /// The agent's socket (default: $VASSAL_SOCKET, else /run/vassal.sock).
    #[arg(long)]
    socket: Option<String>,
    /// Join this scheduler (default: the default scheduler).
    #[arg(long)]
    sched: Option<String>,
    /// BVT weight.
    #[arg(long)]
    weight: Option<i64>,
    /// BVT warp, e.g. "20ms".
    #[arg(long)]
    warp: Option<String>,
    /// BVT warp time limit L, e.g. "5ms".
    #[arg(long)]
    warp_limit: Option<String>,
    /// BVT unwarp time requirement U, e.g. "50ms".
    #[arg(long)]
    unwarp: Option<String>,
    /// A reservation UTIL/PERIOD, e.g. 0.25/16ms, sent to the scheduler joined.
    #[arg(long)]
    reserve: Option<String>,
    /// The command and its arguments.
    #[arg(last = true, required = true)]
    cmd: Vec<String>,
}

#[derive(Args)]
pub struct CtlArgs {
    /// The agent's socket (default: $VASSAL_SOCKET, else /run/vassal.sock).
    #[arg(long)]
    socket: Option<String>,
    /// Print the agent's reply as JSON.
    #[arg(long)]
    json: bool,
    #[command(subcommand)]
    cmd: CtlCmd,
}

/// A process, or one thread of it: `PID`, `--tid TID` (its process found from /proc) or
/// both.
#[derive(Args, Clone, Copy)]
struct Target {
    /// The process (optional with --tid).
    #[arg(required_unless_present = "tid")]
    pid: Option<i32>,
    /// One thread of the process (a thread id, as `ps -L` lists it).
    #[arg(long)]
    tid: Option<i32>,
}

impl Target {
    /// (pid, tid): the pid given, or the thread's process.
    fn resolve(self) -> Result<(i32, Option<i32>)> {
        match (self.pid, self.tid) {
            (Some(p), t) => Ok((p, t)),
            (None, Some(t)) => {
                let p = vassal_agent::kernel::tgid(t).with_context(|| format!("--tid {t}: no such thread"))?;
                Ok((p, Some(t)))
            }
            (None, None) => bail!("name a process (PID) or a thread (--tid TID)"),
        }
    }
}

#[derive(Subcommand)]
enum CtlCmd {
    /// Manage an existing process (every thread of it) and move it — or with --tid one
    /// thread — to a scheduler (JOIN).
    Join {
        #[command(flatten)]
        target: Target,
        #[arg(long)]
        sched: Option<String>,
        /// Task parameters NAME=VALUE (integers or durations like 10ms): the process's
        /// (each thread gets them, the weight divided), or with --tid that thread's.
        #[arg(long = "param", value_name = "NAME=VALUE")]
        params: Vec<String>,
    },
    /// Return a process (or with --tid one thread) to the default scheduler (LEAVE).
    Leave {
        #[command(flatten)]
        target: Target,
    },
    /// Stop managing a process: its original scheduling comes back (every thread).
    Release { pid: i32 },
    /// Set a task parameter, e.g. `ctl set 1234 weight 2` or `ctl set 1234 warp 10ms`
    /// (`--tid TID`: that thread's own).
    Set {
        pid: i32,
        name: String,
        value: String,
        #[arg(long)]
        tid: Option<i32>,
    },
    /// Turn BVT warp on or off.
    Warp {
        pid: i32,
        on: OnOff,
        #[arg(long)]
        tid: Option<i32>,
    },
    /// Reserve UTIL/PERIOD (e.g. 0.25/16ms) for a process (divided among its threads) or
    /// with --tid for one thread.
    Reserve {
        pid: i32,
        spec: String,
        #[arg(long)]
        sched: Option<String>,
        #[arg(long)]
        tid: Option<i32>,
    },
    /// Free a process's reservation.
    Free {
        pid: i32,
        #[arg(long)]
        sched: Option<String>,
        #[arg(long)]
        tid: Option<i32>,
    },
    /// Replace a process's reservation.
    Modify {
        pid: i32,
        spec: String,
        #[arg(long)]
        sched: Option<String>,
        #[arg(long)]
        tid: Option<i32>,
    },
    /// How much reservable CPU is left (asked about a managed process, to its scheduler).
    Avail {
        pid: i32,
        #[arg(long)]
        sched: Option<String>,
    },
    /// MessageToScheduler: a request in JSON, e.g. '{"kind":"set","delay_ns":1000000}'.
    Msg {
        sched: String,
        pid: i32,
        request: String,
        #[arg(long)]
        tid: Option<i32>,
    },
    /// The hierarchy, top-down.
    Hierarchy,
    /// The managed processes and their threads, with share, dispatch latency and kernel
    /// state.
    Tasks,
    /// The agent's own figures (CPU used, passes).
    Status,
    /// Register a built-in policy in the running hierarchy.
    Register {
        name: String,
        kind: String,
        /// reserved:CPUS (e.g. reserved:0.5), hard:UTIL@CPU,CPU (e.g. hard:0.2@0,1) or
        /// best-effort (no guarantee: its tasks never run real-time).
        #[arg(long)]
        usage: String,
        #[arg(long = "param", value_name = "NAME=VALUE")]
        params: Vec<String>,
        /// Insert just above this scheduler (default: at the top).
        #[arg(long)]
        above: Option<String>,
    },
    /// Unregister a scheduler; its tasks return to the default scheduler.
    Unregister { name: String },
    /// Load a policy module (a .wasm built with the SDK, docs/modules.md) into the running
    /// hierarchy; root only. The module declares its CPU usage (conflict-checked).
    Load {
        /// The module file (sent to the agent as an absolute path; the agent reads it).
        file: PathBuf,
        /// The scheduler's name in the hierarchy.
        #[arg(long)]
        name: String,
        /// Insert just above this scheduler (default: at the top).
        #[arg(long, conflicts_with = "below")]
        above: Option<String>,
        /// Insert just below this scheduler (not below the default).
        #[arg(long)]
        below: Option<String>,
        /// Module parameters NAME=VALUE (an integer, a number, true/false, else a string
        /// such as "10ms").
        #[arg(long = "param", value_name = "NAME=VALUE")]
        params: Vec<String>,
        /// The containment watchdog: a runnable task of the module's unserved this long
        /// gets it ejected (default 1s; 0 for none).
        #[arg(long)]
        watchdog: Option<String>,
    },
    /// Unload a module; its tasks go to the scheduler below it.
    Unload { name: String },
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum OnOff {
    On,
    Off,
}

fn socket(s: &Option<String>) -> String {
    s.clone().or_else(|| std::env::var("VASSAL_SOCKET").ok()).unwrap_or_else(|| DEFAULT_SOCKET.into())
}

pub fn agent(a: AgentArgs) -> Result<ExitCode> {
    let mut cfg = match &a.config {
        Some(p) => Config::load(p).map_err(anyhow::Error::msg)?,
        None => Config::default(),
    };
    if let Some(s) = a.socket {
        cfg.socket = s;
    }
    if let Some(t) = a.tick {
        cfg.tick = parse_duration(&t).with_context(|| format!("--tick {t}"))?;
    }
    cfg.trace = a.trace;
    vassal_agent::agent::run(cfg).map_err(anyhow::Error::msg)?;
    Ok(ExitCode::SUCCESS)
}

/// An integer, or a duration in ns ("10ms").
fn int_or_duration(s: &str) -> Result<i64> {
    if let Ok(i) = s.trim().parse::<i64>() {
        return Ok(i);
    }
    let d = parse_duration(s).with_context(|| format!("'{s}' is neither an integer nor a duration"))?;
    i64::try_from(d).map_err(|_| anyhow!("'{s}' is too large"))
}

fn parse_params(list: &[String]) -> Result<BTreeMap<String, i64>> {
    list.iter()
        .map(|p| {
            let (k, v) = p.split_once('=').ok_or_else(|| anyhow!("--param {p}: expected NAME=VALUE"))?;
            Ok((k.trim().to_string(), int_or_duration(v).with_context(|| format!("--param {p}"))?))
        })
        .collect()
}

/// UTIL/PERIOD, e.g. 0.25/16ms (the utilisation [`above_zero`]).
fn parse_reserve(s: &str) -> Result<(f64, u64)> {
    let (u, p) = s.split_once('/').ok_or_else(|| anyhow!("reservation '{s}': expected UTIL/PERIOD, e.g. 0.25/16ms"))?;
    let util: f64 = u.trim().parse().with_context(|| format!("reservation '{s}': utilisation '{u}'"))?;
    above_zero(util).with_context(|| format!("reservation '{s}': utilisation"))?;
    let period = parse_duration(p).with_context(|| format!("reservation '{s}': period '{p}'"))?;
    Ok((util, period))
}

/// A number of CPUs or a fraction of one: finite and above 0. JSON has no NaN or infinity
/// (serde_json would send `null`, which the agent could only call a malformed request);
/// the agent and each scheduler check their own ranges.
fn above_zero(v: f64) -> Result<f64> {
    if !(v.is_finite() && v > 0.0) {
        bail!("{v} must be a finite number above 0 (e.g. 0.25)");
    }
    Ok(v)
}

fn parse_usage(s: &str) -> Result<UsageSpec> {
    if s == "best-effort" || s == "best_effort" {
        return Ok(UsageSpec::BestEffort);
    }
    if let Some(c) = s.strip_prefix("reserved:") {
        let cpus = c.parse().with_context(|| format!("--usage {s}"))?;
        return Ok(UsageSpec::Reserved { cpus: above_zero(cpus).with_context(|| format!("--usage {s}"))? });
    }
    if let Some(rest) = s.strip_prefix("hard:") {
        let (u, cpus) = rest.split_once('@').ok_or_else(|| anyhow!("--usage {s}: expected hard:UTIL@CPU,CPU"))?;
        let cpus =
            cpus.split(',').map(|c| c.trim().parse::<u16>()).collect::<Result<Vec<_>, _>>().with_context(|| format!("--usage {s}"))?;
        let util = u.parse().with_context(|| format!("--usage {s}"))?;
        return Ok(UsageSpec::HardTime { util: above_zero(util).with_context(|| format!("--usage {s}"))?, cpus });
    }
    bail!("--usage {s}: expected reserved:CPUS, hard:UTIL@CPU,CPU or best-effort")
}

fn connect(sock: &str) -> Result<Client> {
    Client::connect(sock).map_err(|e| anyhow!("{e} (is `vassal agent` running?)"))
}

pub fn run(a: RunArgs) -> Result<ExitCode> {
    let sock = socket(&a.socket);
    let mut params = BTreeMap::new();
    if let Some(w) = a.weight {
        params.insert("weight".to_string(), w);
    }
    for (k, v) in [("warp", &a.warp), ("warp_limit", &a.warp_limit), ("unwarp", &a.unwarp)] {
        if let Some(v) = v {
            params.insert(k.to_string(), int_or_duration(v).with_context(|| format!("--{}", k.replace('_', "-")))?);
        }
    }
    let reserve = a.reserve.as_deref().map(parse_reserve).transpose()?;
    let mut client = connect(&sock)?;
    let mut child = HeldChild::spawn(&a.cmd).with_context(|| format!("cannot start {:?}", a.cmd))?;
    client.join_pid(child.pid, a.sched.as_deref(), params).map_err(|e| anyhow!("join: {e}"))?;
    if let Some((util, period)) = reserve {
        client.message(a.sched.as_deref(), child.pid, Request::Reserve { util, period }).map_err(|e| anyhow!("reserve: {e}"))?;
    }
    child.release()?;
    // What its schedulers say about the process while it runs (e.g. rtserver removing a
    // reservation it overran, paper 002 §2.3) is told to its owner here, on stderr.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watcher = {
        let (stop, pid) = (stop.clone(), child.pid);
        std::thread::spawn(move || tell_notes(client, pid, &stop))
    };
    // The terminal's SIGINT goes to the child; wait for it rather than die first.
    vassal_agent::kernel::ignore_sigint();
    let code = child.wait();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let _ = watcher.join();
    Ok(ExitCode::from(code?.clamp(0, 255) as u8))
}

/// Prints each new note the agent keeps about process `pid` (`ctl tasks`), twice a
/// second, until `stop`.
fn tell_notes(mut client: Client, pid: i32, stop: &std::sync::atomic::AtomicBool) {
    let mut told = std::collections::BTreeSet::new();
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        for _ in 0..10 {
            if stop.load(std::sync::atomic::Ordering::Relaxed) {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        let Ok(Answer::Tasks { tasks }) = client.call(&Call::Tasks) else { continue };
        for n in tasks.into_iter().filter(|t| t.pid == pid).flat_map(|t| t.notes) {
            if told.insert(n.clone()) {
                eprintln!("vassal run: {n}");
            }
        }
    }
}

pub fn ctl(a: CtlArgs) -> Result<ExitCode> {
    let sock = socket(&a.socket);
    let msg = |sched: Option<String>, pid: i32, tid: Option<i32>, request: Request| Call::Message { sched, pid, tid, request };
    let call = match a.cmd {
        CtlCmd::Join { target, sched, params } => {
            let (pid, tid) = target.resolve()?;
            Call::Join { pid, tid, sched, params: parse_params(&params)? }
        }
        CtlCmd::Leave { target } => {
            let (pid, tid) = target.resolve()?;
            Call::Leave { pid, tid }
        }
        CtlCmd::Release { pid } => Call::Release { pid },
        CtlCmd::Set { pid, name, value, tid } => Call::Param { pid, tid, name, value: int_or_duration(&value)? },
        CtlCmd::Warp { pid, on, tid } => msg(None, pid, tid, Request::Warp { on: matches!(on, OnOff::On) }),
        CtlCmd::Reserve { pid, spec, sched, tid } => {
            let (util, period) = parse_reserve(&spec)?;
            msg(sched, pid, tid, Request::Reserve { util, period })
        }
        CtlCmd::Free { pid, sched, tid } => msg(sched, pid, tid, Request::Free),
        CtlCmd::Modify { pid, spec, sched, tid } => {
            let (util, period) = parse_reserve(&spec)?;
            msg(sched, pid, tid, Request::Modify { util, period })
        }
        CtlCmd::Avail { pid, sched } => msg(sched, pid, None, Request::Avail),
        CtlCmd::Msg { sched, pid, request, tid } => {
            let request: Request = serde_json::from_str(&request).with_context(|| format!("request '{request}'"))?;
            msg(Some(sched), pid, tid, request)
        }
        CtlCmd::Hierarchy => Call::Hierarchy,
        CtlCmd::Tasks => Call::Tasks,
        CtlCmd::Status => Call::Status,
        CtlCmd::Register { name, kind, usage, params, above } => {
            let params = params
                .iter()
                .map(|p| {
                    let (k, v) = p.split_once('=').ok_or_else(|| anyhow!("--param {p}: expected NAME=VALUE"))?;
                    let v = match v {
                        "true" => Value::Bool(true),
                        "false" => Value::Bool(false),
                        _ => v.parse::<i64>().map(Value::Int).unwrap_or_else(|_| Value::Str(v.to_string())),
                    };
                    Ok((k.to_string(), v))
                })
                .collect::<Result<BTreeMap<_, _>>>()?;
            Call::Register { name, kind, params, usage: parse_usage(&usage)?, above }
        }
        CtlCmd::Unregister { name } => Call::Unregister { name },
        CtlCmd::Load { file, name, above, below, params, watchdog } => {
            // Made absolute here, read by the agent: a caller who may not read the file (or
            // its folder) still gets the agent's answer, e.g. "only root may load".
            let path = std::fs::canonicalize(&file)
                .or_else(|_| std::path::absolute(&file))
                .with_context(|| format!("module file {}", file.display()))?;
            let params = params
                .iter()
                .map(|p| {
                    let (k, v) = p.split_once('=').ok_or_else(|| anyhow!("--param {p}: expected NAME=VALUE"))?;
                    anyhow::ensure!(!k.is_empty(), "--param {p}: empty name");
                    let v = match v {
                        "true" => Value::Bool(true),
                        "false" => Value::Bool(false),
                        _ => v
                            .parse::<i64>()
                            .map(Value::Int)
                            .or_else(|_| v.parse::<f64>().map(Value::Float))
                            .unwrap_or_else(|_| Value::Str(v.to_string())),
                    };
                    Ok((k.to_string(), v))
                })
                .collect::<Result<BTreeMap<_, _>>>()?;
            let watchdog_ns = watchdog.map(|w| parse_duration(&w).with_context(|| format!("--watchdog {w}"))).transpose()?;
            Call::Load { path: path.to_string_lossy().into_owned(), name, above, below, params, watchdog_ns }
        }
        CtlCmd::Unload { name } => Call::Unload { name },
    };
    let answer = connect(&sock)?.call(&call).map_err(|e| anyhow!("{e}"))?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&answer)?);
    } else {
        print_answer(&answer);
    }
    Ok(if answer.is_ok() { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

fn print_answer(a: &Answer) {
    match a {
        Answer::Ok => println!("ok"),
        Answer::Value { value } => println!("{value}"),
        Answer::Fraction { num, den } => println!("{num}/{den} ({:.4} CPUs)", *num as f64 / (*den).max(1) as f64),
        Answer::Refused { reason } => eprintln!("refused: {reason}"),
        Answer::Error { message } => eprintln!("error: {message}"),
        Answer::Closing { reason } => eprintln!("the agent closed the connection: {reason}"),
        Answer::Joined { task, sched } => println!("joined {sched} as task{task}"),
        Answer::Hierarchy { schedulers } => {
            // A loaded module is marked "module" and named by its file after its usage.
            // share: the CPU its decisions gave its tasks over the last second (in CPUs);
            // granted: what it declared (paper 000 §8), "-" for best effort.
            println!(
                "{:<16} {:<14} {:<8} {:>6} {:>10} {:>8} {:>7} {:>8}  usage",
                "name", "kind", "loaded", "tasks", "decided", "refused", "share", "granted"
            );
            for s in schedulers {
                let (from, file) = match &s.module {
                    Some(f) => ("module", format!("  [{f}]")),
                    None => ("built-in", String::new()),
                };
                let granted = s.granted.map_or("-".to_string(), |g| format!("{g:.3}"));
                println!(
                    "{:<16} {:<14} {:<8} {:>6} {:>10} {:>8} {:>7.3} {:>8}  {}{file}",
                    s.name, s.kind, from, s.tasks, s.decided, s.refused, s.share, granted, s.usage
                );
            }
        }
        Answer::Tasks { tasks } => {
            // A process's line adds up its threads (share: of one CPU, so up to 100% per
            // CPU); a multithreaded process's threads follow it, each share of one CPU.
            println!(
                "{:>7} {:>6} {:<10} {:<16} {:<18} {:>7} {:>9} {:>9} {:>10} {:>9}",
                "pid", "uid", "sched", "state", "kernel", "share", "lat p50", "lat p99", "cpu", "budget"
            );
            for t in tasks {
                // budget: what is left of the running decision's slice ("-": not selected,
                // or a decision without a slice).
                let budget = t.budget_ns.map_or("-".to_string(), |b| format!("{:.1}ms", b as f64 / 1e6));
                println!(
                    "{:>7} {:>6} {:<10} {:<16} {:<18} {:>6.1}% {:>7.0}us {:>7.0}us {:>8.1}ms {:>9}",
                    t.pid,
                    t.uid,
                    t.sched,
                    t.state,
                    t.kernel,
                    t.share * 100.0,
                    t.latency_p50_us,
                    t.latency_p99_us,
                    t.cpu_ns as f64 / 1e6,
                    budget
                );
                if t.reserved > 0.0 {
                    println!(
                        "{:>7}   reserved {:.1}% of one CPU, got {:.1}% over the last second",
                        "",
                        t.reserved * 100.0,
                        t.share * 100.0
                    );
                }
                if t.thread_rows.len() > 1 {
                    for th in &t.thread_rows {
                        let budget = th.budget_ns.map_or("-".to_string(), |b| format!("{:.1}ms", b as f64 / 1e6));
                        println!(
                            "{:>7} {:>6} {:<10} {:<16} {:<18} {:>6.1}% {:>7.0}us {:>7.0}us {:>8.1}ms {:>9}",
                            format!("/{}", th.tid),
                            "",
                            th.sched,
                            th.state,
                            th.kernel,
                            th.share * 100.0,
                            th.latency_p50_us,
                            th.latency_p99_us,
                            th.cpu_ns as f64 / 1e6,
                            budget
                        );
                    }
                }
                // What its schedulers said about it (e.g. a reservation removed).
                for n in &t.notes {
                    println!("{:>7}   note: {n}", "");
                }
            }
        }
        Answer::Status(s) => {
            let up = s.uptime_ns.max(1) as f64;
            println!("uptime {:.1}s, {} CPUs, tick {}, events from {}", up / 1e9, s.ncpus, vassal_core::fmt_duration(s.tick_ns), s.events);
            println!(
                "agent CPU {:.3}% of one CPU (dispatcher {:.3}%), {} passes, {} processes ({} threads) managed, {} ledger records, {} kernel errors",
                s.agent_cpu_ns as f64 / up * 100.0,
                s.dispatcher_cpu_ns as f64 / up * 100.0,
                s.passes,
                s.managed,
                s.managed_threads,
                s.ledger_records,
                s.kernel_errors
            );
            if s.events == "bpf" {
                println!(
                    "{} BPF events; {} runs replayed (quiet wakes), {} sleeps replayed (quiet blocks), {} CPU-clock bounds fired",
                    s.bpf_events, s.replayed_runs, s.replayed_sleeps, s.bounds_fired
                );
            }
            if s.backstop_refused {
                println!("no kernel backstop (RLIMIT_RTTIME) on other users' processes: the kernel refused it (no CAP_SYS_RESOURCE)");
            }
            for e in &s.ejections {
                println!(
                    "ejected {:.1}s ago: module scheduler '{}' ({}): {}; tasks [{}]",
                    vassal_agent::kernel::now_ns().saturating_sub(e.at_ns) as f64 / 1e9,
                    e.name,
                    e.module,
                    e.reason,
                    e.moved.join(", ")
                );
            }
        }
    }
}

/// `vassal repro --real`: the real-process experiments (vassal_lab::real), printed in
/// `vassal repro`'s row format.
pub fn repro_real(names: &[String], json: bool) -> Result<ExitCode> {
    let exe = std::env::current_exe().context("cannot find the vassal binary")?;
    let rows = vassal_lab::real::run(&exe, names).map_err(anyhow::Error::msg)?;
    let failed = rows.iter().filter(|r| !r.pass && r.known_difference.is_none()).count();
    if json {
        let v: Vec<serde_json::Value> = rows
            .iter()
            .map(|r| {
                serde_json::json!({
                    "id": r.id,
                    "paper": if r.paper.is_finite() { serde_json::json!(r.paper) } else { serde_json::Value::Null },
                    "ours": r.ours,
                    "tolerance": if r.tolerance.is_finite() { serde_json::json!(r.tolerance) } else { serde_json::Value::Null },
                    "pass": r.pass,
                })
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        println!("{:<44} {:>12} {:>12} {:>10}  result", "id", "paper", "ours", "tolerance");
        for r in &rows {
            let result = match (r.tolerance.is_infinite(), r.pass, &r.known_difference) {
                (true, _, _) => "baseline",
                (_, true, _) => "pass",
                (_, false, Some(_)) => "DIFFERS",
                _ => "FAIL",
            };
            let paper = if r.paper.is_finite() { format!("{:.4}", r.paper) } else { "-".into() };
            let tol = if r.tolerance.is_finite() { format!("{:.4}", r.tolerance) } else { "-".into() };
            println!("{:<44} {:>12} {:>12.4} {:>10}  {result}  {}", r.id, paper, r.ours, tol, r.why);
        }
        for r in rows.iter().filter(|r| !r.pass) {
            if let Some(k) = &r.known_difference {
                println!("\n{}: differs: {k}", r.id);
            }
        }
        println!(
            "\n{} rows: {} with a target pass, {} fail, {} differ (known, explained above), {} kernel baselines",
            rows.len(),
            rows.iter().filter(|r| r.pass && r.tolerance.is_finite()).count(),
            failed,
            rows.iter().filter(|r| !r.pass && r.known_difference.is_some()).count(),
            rows.iter().filter(|r| r.tolerance.is_infinite()).count()
        );
    }
    Ok(if failed == 0 { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}
