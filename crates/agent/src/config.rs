//! The agent's configuration: a TOML file (docs/agent.md lists every key), every key
//! optional, unknown keys refused.
//!
//! ```toml
//! socket = "/run/vassal.sock"
//! rt_fraction = 0.9          # r (paper 002 eqs. 1-3): what loaded schedulers may reserve
//! tick = "1ms"               # the dispatcher's polling period
//! dispatcher_priority = 90   # SCHED_FIFO of the dispatcher thread
//! guardian_priority = 95     # SCHED_FIFO of the guardian process
//! run_priority = 50          # SCHED_FIFO of a selected real-time task (a wake-armed one gets +1)
//! best_effort_run = "other"  # how a selected task of the default scheduler runs: "other" or "fifo"
//! best_effort_sleep = "fair" # how a blocked best-effort task waits: "fair" or "idle"
//! loaded_best_effort_nice = -10  # the nice of a root-owned task a loaded best-effort scheduler selects
//! events = "auto"            # block/wake events: "bpf", "poll" (/proc), or "auto" (BPF if it loads)
//!
//! [default]                  # the bottom scheduler (this is the built-in default)
//! kind = "bvt"
//! params = { mcu = "1ms", c = "20ms" }
//!
//! [ceilings]                 # the largest value a non-root user may set, per task parameter
//! weight = 1
//! warp = "20ms"
//!
//! [[scheduler]]              # loaded at start, top-down
//! name = "timed"
//! kind = "timed"
//! params = { lead = "200us" }
//! usage = { hard_time = { util = 0.2, cpus = [0, 1] } }
//!
//! [[scheduler]]              # a policy module (docs/modules.md): it declares its usage
//! name = "proto"
//! module = "modules/stride.wasm"   # relative to this file's directory
//! params = { quantum = "5ms" }
//! watchdog = "1s"
//! ```

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};
use vassal_core::{parse_duration, CpuSet, Ns, Usage, CPU_PPM, MS, SEC};

/// A duration key of the config (e.g. `tick = "1ms"`), or `default` when it is absent;
/// an error names the key.
fn duration_or(value: &Option<String>, key: &str, default: Ns) -> Result<Ns, String> {
    value.as_deref().map_or(Ok(default), |s| parse_duration(s).map_err(|e| format!("{key}: {e}")))
}

/// A policy parameter as written in TOML or JSON: [`vassal_core::ParamValue`]
/// (untagged: `true`, `5`, `0.5`, `"10ms"`), under the name the agent's callers use.
pub use vassal_core::ParamValue as Value;

/// A scheduler's declared CPU use (paper 000 §8), in the config and on the wire.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum UsageSpec {
    /// A share of the machine, in CPUs (0.5 = half of one CPU).
    Reserved { cpus: f64 },
    /// Definite moments on the listed CPUs, up to `util` of each.
    HardTime { util: f64, cpus: Vec<u16> },
    /// No guarantee (`usage = "best_effort"`): its tasks run in the kernel's fair class,
    /// never at a real-time priority (issue 17; docs/agent.md, "Classes").
    BestEffort,
}

impl UsageSpec {
    pub fn to_usage(&self, ncpus: u16) -> Result<Usage, String> {
        let ppm = |x: f64, what: &str| -> Result<u64, String> {
            if !x.is_finite() || x < 0.0 || x > ncpus as f64 {
                return Err(format!("usage {what} {x} is not between 0 and {ncpus}"));
            }
            Ok((x * CPU_PPM as f64).round() as u64)
        };
        match self {
            UsageSpec::BestEffort => Ok(Usage::BestEffort),
            UsageSpec::Reserved { cpus } => Ok(Usage::Reserved { cpu_ppm: ppm(*cpus, "cpus")? }),
            UsageSpec::HardTime { util, cpus } => {
                let mut set = CpuSet::NONE;
                for &c in cpus {
                    if c >= ncpus {
                        return Err(format!("usage names CPU {c}; this machine has CPUs 0..{}", ncpus - 1));
                    }
                    set = CpuSet(set.0 | (1 << c));
                }
                if *util > 1.0 {
                    return Err(format!("usage util {util} is more than one CPU"));
                }
                Ok(Usage::HardTime { cpus: set, util_ppm: ppm(*util, "util")? })
            }
        }
    }
}

/// A scheduler loaded at start: a built-in policy (`kind`, with its declared `usage`) or
/// a policy module (`module` = a WebAssembly file, docs/modules.md; it declares its own
/// usage, and is contained with `watchdog`, default 1 s, "0s" for none).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SchedSpec {
    pub name: String,
    /// The built-in policy ("" when `module` is given).
    #[serde(default)]
    pub kind: String,
    /// A module file instead of a built-in kind; a relative path is relative to the
    /// config file's directory ([`Config::load`] resolves it).
    #[serde(default)]
    pub module: Option<String>,
    #[serde(default)]
    pub params: BTreeMap<String, Value>,
    /// Required for a built-in kind; not allowed for a module.
    #[serde(default)]
    pub usage: Option<UsageSpec>,
    /// A module's containment watchdog, e.g. "1s".
    #[serde(default)]
    pub watchdog: Option<String>,
}

impl SchedSpec {
    /// The declared usage of a built-in scheduler.
    pub fn usage(&self) -> Result<&UsageSpec, String> {
        self.usage.as_ref().ok_or_else(|| format!("scheduler '{}': no usage declared", self.name))
    }

    /// A module's watchdog in ns (None: no watchdog); the default is 1 s.
    pub fn watchdog_ns(&self) -> Result<Option<Ns>, String> {
        match &self.watchdog {
            None => Ok(Some(vassal_module::DEFAULT_WATCHDOG)),
            Some(w) => {
                let ns = parse_duration(w).map_err(|e| format!("scheduler '{}': watchdog: {e}", self.name))?;
                Ok((ns > 0).then_some(ns))
            }
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DefaultSpec {
    #[serde(default)]
    pub kind: String,
    /// Refused with the reason: the default scheduler cannot be a module (see
    /// [`Config::from_toml`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub module: Option<String>,
    #[serde(default)]
    pub params: BTreeMap<String, Value>,
}

/// How a task selected by the default (best-effort) scheduler runs in the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BestEffortRun {
    /// SCHED_OTHER at its own nice: it shares its CPU with unmanaged processes, so
    /// time-sharing work outside the agent is never starved (paper 002's 1 − r).
    Other,
    /// SCHED_FIFO at `run_priority`, like a real-time selection.
    Fifo,
}

/// How a blocked best-effort task (no real-time grant, not exclusive to a loaded
/// scheduler) waits in the kernel (docs/agent.md, "A blocked best-effort thread").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BestEffortSleep {
    /// SCHED_OTHER at its own nice, with its own affinity: the kernel runs it the instant
    /// it wakes, as it would without the agent; with BPF events its wakes are quiet (the
    /// policy hears of its run at the next pass). A task with a warp sleeps as `Idle`
    /// says: its warp asks for the policy's decision at the wake (BVT §2.2).
    Fair,
    /// SCHED_IDLE with its own affinity, and every wake wakes the dispatcher: it runs
    /// where nothing else is eligible until the pass its wake brings selects it.
    Idle,
}

/// Where the dispatcher learns of blocks and wakes (docs/agent.md, "Event source").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventsMode {
    /// BPF if it loads (root, BTF, a build with clang), else polling.
    Auto,
    /// BPF on the scheduler tracepoints; the agent refuses to start without it.
    Bpf,
    /// Polling /proc/TID/wchan (or stat) of managed threads.
    Poll,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    socket: Option<String>,
    rt_fraction: Option<f64>,
    tick: Option<String>,
    dispatcher_priority: Option<i32>,
    guardian_priority: Option<i32>,
    run_priority: Option<i32>,
    best_effort_run: Option<BestEffortRun>,
    best_effort_sleep: Option<BestEffortSleep>,
    loaded_best_effort_nice: Option<i32>,
    max_clients: Option<usize>,
    max_clients_per_uid: Option<usize>,
    client_timeout: Option<String>,
    events: Option<EventsMode>,
    max_rt_per_uid: Option<f64>,
    rt_window: Option<String>,
    rt_backstop: Option<String>,
    #[serde(default)]
    default: Option<DefaultSpec>,
    #[serde(default)]
    ceilings: BTreeMap<String, Value>,
    #[serde(default)]
    scheduler: Vec<SchedSpec>,
}

/// The agent's configuration, validated.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    pub socket: String,
    /// r: the fraction of the machine loaded schedulers may declare; 1 − r is kept for
    /// best-effort work (the hierarchy's §8 check refuses registrations beyond it).
    pub rt_fraction: f64,
    pub tick: Ns,
    pub dispatcher_priority: i32,
    pub guardian_priority: i32,
    pub run_priority: i32,
    pub best_effort_run: BestEffortRun,
    pub best_effort_sleep: BestEffortSleep,
    /// The nice a root-owned task runs at (SCHED_OTHER) while a loaded best-effort
    /// scheduler selects it (`loaded_best_effort_nice`, -20..=19, default -10): strong
    /// enough that the scheduler's choice holds against unmanaged time-sharing work (a
    /// nice-0 task gets about a tenth of the CPU beside it). Another user's task keeps
    /// its own nice: a stronger one would be a privilege of its own.
    pub loaded_best_effort_nice: i32,
    pub max_clients: usize,
    /// At most this many connections of one ordinary uid at once (root's are counted
    /// apart: docs/agent.md, "Connections").
    pub max_clients_per_uid: usize,
    /// A client must send a whole call within this long of connecting or of its last
    /// answer, and read each answer within it, or it is dropped (`client_timeout`).
    pub client_timeout: Ns,
    /// The event source (`events`).
    pub events: EventsMode,
    pub default: DefaultSpec,
    /// Per task parameter, the most privileged value a non-root caller may set (BVT
    /// §6.3.2's nice semantics): the largest `weight`, `warp` or `warp_limit` (whose 0, no
    /// limit, is never theirs), the smallest `unwarp`. A parameter with no ceiling may be
    /// set by root only.
    pub ceilings: BTreeMap<String, i64>,
    /// The longest warp time limit a non-root user's task gets (`ceilings.warp_limit`,
    /// else 10 ms): a warped task of theirs always has a finite limit, this one when they
    /// gave none.
    pub max_warp_limit: Ns,
    /// The real-time CPU one non-root uid may obtain, in millionths of one CPU
    /// (`max_rt_per_uid`, in CPUs): their reservations together are admitted up to it,
    /// and all their tasks' real-time CPU is charged to a budget refilled at this rate
    /// (crate::budget).
    pub max_rt_per_uid_ppm: u64,
    /// The window of every real-time budget: a budget holds at most rate × window.
    pub rt_window: Ns,
    /// RLIMIT_RTTIME given to non-root processes the agent manages: the kernel's own
    /// bound on real-time CPU used without blocking (SIGXCPU at it, SIGKILL at twice it),
    /// should the agent fail to demote a task.
    pub rt_backstop: Ns,
    pub schedulers: Vec<SchedSpec>,
    /// A Chrome trace of the agent's decisions (`vassal agent --trace FILE`, not a key of
    /// the file).
    pub trace: Option<std::path::PathBuf>,
}

pub const DEFAULT_SOCKET: &str = "/run/vassal.sock";

impl Default for Config {
    fn default() -> Self {
        Config::from_toml("").expect("the empty config is valid")
    }
}

impl Config {
    pub fn load(path: &Path) -> Result<Config, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let mut cfg = Config::from_toml(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        // A module's path is relative to the config file's directory.
        let dir = path.parent().unwrap_or(Path::new("."));
        for s in &mut cfg.schedulers {
            if let Some(m) = s.module.as_mut().filter(|m| Path::new(m.as_str()).is_relative()) {
                *m = dir.join(&*m).to_string_lossy().into_owned();
            }
        }
        Ok(cfg)
    }

    pub fn from_toml(text: &str) -> Result<Config, String> {
        let raw: Raw = toml::from_str(text).map_err(|e| e.to_string())?;
        let rt_fraction = raw.rt_fraction.unwrap_or(0.9);
        if !(rt_fraction.is_finite() && rt_fraction > 0.0 && rt_fraction < 1.0) {
            return Err(format!("rt_fraction {rt_fraction}: must be more than 0 and less than 1"));
        }
        let tick = duration_or(&raw.tick, "tick", MS)?;
        if !(100_000..=100 * MS).contains(&tick) {
            return Err(format!("tick {tick} ns: must be between 100us and 100ms"));
        }
        let dispatcher_priority = raw.dispatcher_priority.unwrap_or(90);
        let guardian_priority = raw.guardian_priority.unwrap_or(95);
        let run_priority = raw.run_priority.unwrap_or(50);
        for (k, v) in
            [("dispatcher_priority", dispatcher_priority), ("guardian_priority", guardian_priority), ("run_priority", run_priority)]
        {
            if !(1..=99).contains(&v) {
                return Err(format!("{k} {v}: must be a SCHED_FIFO priority 1..=99"));
            }
        }
        if run_priority + 1 >= dispatcher_priority || dispatcher_priority >= guardian_priority {
            return Err(format!(
                "priorities must satisfy run_priority + 1 < dispatcher_priority < guardian_priority (got {run_priority}, {dispatcher_priority}, {guardian_priority})"
            ));
        }
        let max_rt_per_uid = raw.max_rt_per_uid.unwrap_or(0.5);
        if !(max_rt_per_uid.is_finite() && (0.0..=64.0).contains(&max_rt_per_uid)) {
            return Err(format!("max_rt_per_uid {max_rt_per_uid}: must be a number of CPUs between 0 and 64"));
        }
        let rt_window = duration_or(&raw.rt_window, "rt_window", 200 * MS)?;
        if !(10 * MS..=10 * SEC).contains(&rt_window) {
            return Err(format!("rt_window {}: must be between 10ms and 10s", vassal_core::fmt_duration(rt_window)));
        }
        let mut ceilings = BTreeMap::new();
        for (k, v) in &raw.ceilings {
            let n = match v {
                Value::Int(i) => *i,
                Value::Str(s) => parse_duration(s).map_err(|e| format!("ceilings.{k}: {e}"))? as i64,
                other => return Err(format!("ceilings.{k}: expected an integer or a duration, found {other:?}")),
            };
            ceilings.insert(k.clone(), n);
        }
        let max_warp_limit = match ceilings.get("warp_limit") {
            Some(&l) if l > 0 => l as Ns,
            Some(l) => return Err(format!("ceilings.warp_limit {l}: must be a positive duration (0 would mean no limit)")),
            None => 10 * MS,
        };
        let max_rt_per_uid_ppm = (max_rt_per_uid * CPU_PPM as f64).round() as u64;
        let rt_backstop = duration_or(&raw.rt_backstop, "rt_backstop", 500 * MS)?;
        // The backstop must never catch a task the agent runs within its grants: the
        // longest real-time run without a block it allows is a warp episode or a uid's
        // whole budget, and the kernel counts in ticks (up to 10 ms at HZ = 100).
        let uid_depth = (max_rt_per_uid_ppm as u128 * rt_window as u128 / CPU_PPM as u128) as Ns;
        let least = max_warp_limit.max(uid_depth) + 100 * MS;
        if rt_backstop < least {
            return Err(format!(
                "rt_backstop {}: must be at least {} (the longest real-time run the agent grants a non-root task, max(ceilings.warp_limit, max_rt_per_uid × rt_window), plus 100ms)",
                vassal_core::fmt_duration(rt_backstop),
                vassal_core::fmt_duration(least)
            ));
        }
        // BVT charges whole mcu per run (§2): with the paper's 10 ms a 4 ms video frame
        // is charged 10 ms and its warp is used up by overcharging within seconds. The
        // agent sees CPU use per 1 ms poll (4 ms kernel-tick resolution for a task
        // running elsewhere), so its default charges per 1 ms, and allows C = 20 ms.
        let default = raw.default.unwrap_or_else(|| DefaultSpec {
            kind: "bvt".into(),
            module: None,
            params: [("mcu".to_string(), Value::Str("1ms".into())), ("c".to_string(), Value::Str("20ms".into()))].into(),
        });
        // A module is contained: when it fails it is ejected and its tasks go to the
        // scheduler below it. The default scheduler has nothing below it, so the
        // hierarchy refuses to contain it (`Dispatcher::contain`); a module goes in a
        // [[scheduler]] above it instead.
        if let Some(m) = &default.module {
            return Err(format!(
                "default: module \"{m}\": the default scheduler cannot be a module (a module is ejected into the scheduler below it when it fails, and nothing is below the default); load it as a [[scheduler]] above the default"
            ));
        }
        // Build once to check kinds and parameters now, with their names in the error.
        vassal_policies::build(&default.kind, &default.params).map_err(|e| format!("default: {e}"))?;
        for s in &raw.scheduler {
            match (&s.module, s.kind.is_empty()) {
                (Some(_), false) => return Err(format!("scheduler '{}': give either kind or module, not both", s.name)),
                (Some(_), true) if s.usage.is_some() => {
                    return Err(format!("scheduler '{}': a module declares its own usage; remove the usage key", s.name))
                }
                (Some(_), true) => {
                    s.watchdog_ns()?;
                }
                (None, true) => return Err(format!("scheduler '{}': needs a kind (a built-in policy) or a module (a file)", s.name)),
                (None, false) => {
                    if s.watchdog.is_some() {
                        return Err(format!("scheduler '{}': watchdog applies to modules only", s.name));
                    }
                    s.usage()?;
                    vassal_policies::build(&s.kind, &s.params).map_err(|e| format!("scheduler '{}': {e}", s.name))?;
                }
            }
        }
        let loaded_best_effort_nice = raw.loaded_best_effort_nice.unwrap_or(-10);
        if !(-20..=19).contains(&loaded_best_effort_nice) {
            return Err(format!("loaded_best_effort_nice {loaded_best_effort_nice}: must be a nice value -20..=19"));
        }
        let max_clients = raw.max_clients.unwrap_or(64);
        let max_clients_per_uid = raw.max_clients_per_uid.unwrap_or(max_clients.min(8));
        if max_clients == 0 || !(1..=max_clients).contains(&max_clients_per_uid) {
            return Err(format!(
                "max_clients {max_clients}, max_clients_per_uid {max_clients_per_uid}: need 1 <= max_clients_per_uid <= max_clients"
            ));
        }
        let client_timeout = duration_or(&raw.client_timeout, "client_timeout", 5_000 * MS)?;
        if !(100 * MS..=3_600_000 * MS).contains(&client_timeout) {
            return Err(format!("client_timeout {client_timeout} ns: must be between 100ms and 1h"));
        }
        Ok(Config {
            socket: raw.socket.unwrap_or_else(|| DEFAULT_SOCKET.into()),
            rt_fraction,
            tick,
            dispatcher_priority,
            guardian_priority,
            run_priority,
            best_effort_run: raw.best_effort_run.unwrap_or(BestEffortRun::Other),
            best_effort_sleep: raw.best_effort_sleep.unwrap_or(BestEffortSleep::Fair),
            loaded_best_effort_nice,
            max_clients,
            max_clients_per_uid,
            client_timeout,
            events: raw.events.unwrap_or(EventsMode::Auto),
            default,
            ceilings,
            max_warp_limit,
            max_rt_per_uid_ppm,
            rt_window,
            rt_backstop,
            schedulers: raw.scheduler,
            trace: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_config_has_defaults() {
        let c = Config::default();
        assert_eq!(c.socket, DEFAULT_SOCKET);
        assert_eq!(c.tick, MS);
        assert_eq!(c.default.kind, "bvt");
        assert_eq!(c.events, EventsMode::Auto);
        assert_eq!(Config::from_toml("events = \"poll\"").unwrap().events, EventsMode::Poll);
        assert_eq!(Config::from_toml("events = \"bpf\"").unwrap().events, EventsMode::Bpf);
        assert_eq!(c.loaded_best_effort_nice, -10);
        assert_eq!(c.best_effort_sleep, BestEffortSleep::Fair);
        assert_eq!(Config::from_toml("best_effort_sleep = \"idle\"").unwrap().best_effort_sleep, BestEffortSleep::Idle);
        // A loaded scheduler may declare best effort (issue 17).
        let c = Config::from_toml("[[scheduler]]\nname = \"fair\"\nkind = \"bvt\"\nusage = \"best_effort\"").unwrap();
        assert_eq!(c.schedulers[0].usage().unwrap().to_usage(2).unwrap(), Usage::BestEffort);
    }

    #[test]
    fn refuses_bad_values_by_name() {
        assert!(Config::from_toml("tick = \"10\"").unwrap_err().contains("tick"));
        assert!(Config::from_toml("rt_fraction = 1.5").unwrap_err().contains("rt_fraction"));
        assert!(Config::from_toml("bogus = 1").unwrap_err().contains("bogus"));
        assert!(Config::from_toml("[default]\nkind = \"nope\"").unwrap_err().contains("nope"));
        assert!(Config::from_toml("run_priority = 95").is_err());
        assert!(Config::from_toml("events = \"ebpf\"").unwrap_err().contains("ebpf"));
        assert!(Config::from_toml("best_effort_sleep = \"deep\"").unwrap_err().contains("deep"));
        assert!(Config::from_toml("loaded_best_effort_nice = -21").unwrap_err().contains("loaded_best_effort_nice"));
        let e = Config::from_toml(
            "[[scheduler]]\nname = \"t\"\nkind = \"timed\"\nparams = { lead = 5 }\nusage = { reserved = { cpus = 0.1 } }",
        )
        .unwrap_err();
        assert!(e.contains("scheduler 't'") && e.contains("lead"), "{e}");
    }

    #[test]
    fn client_limits_and_timeout() {
        let c = Config::default();
        assert_eq!((c.max_clients, c.max_clients_per_uid, c.client_timeout), (64, 8, 5 * SEC));
        let c = Config::from_toml("max_clients = 10\nmax_clients_per_uid = 10\nclient_timeout = \"500ms\"").unwrap();
        assert_eq!((c.max_clients, c.max_clients_per_uid, c.client_timeout), (10, 10, 500 * MS));
        assert_eq!(Config::from_toml("max_clients = 4").unwrap().max_clients_per_uid, 4);
        assert!(Config::from_toml("max_clients = 4\nmax_clients_per_uid = 5").unwrap_err().contains("max_clients_per_uid"));
        assert!(Config::from_toml("max_clients_per_uid = 0").unwrap_err().contains("max_clients_per_uid"));
        assert!(Config::from_toml("client_timeout = \"1ms\"").unwrap_err().contains("client_timeout"));
        assert!(Config::from_toml("client_timeout = \"soon\"").unwrap_err().contains("client_timeout"));
    }

    #[test]
    fn module_schedulers_are_checked_by_name() {
        let c = Config::from_toml("[[scheduler]]\nname = \"m\"\nmodule = \"/x/rr.wasm\"\nparams = { reserved = 0.2 }\nwatchdog = \"2s\"")
            .unwrap();
        assert_eq!(c.schedulers[0].module.as_deref(), Some("/x/rr.wasm"));
        assert_eq!(c.schedulers[0].watchdog_ns(), Ok(Some(2 * SEC)));
        let e = Config::from_toml("[[scheduler]]\nname = \"m\"\nmodule = \"x.wasm\"\nusage = { reserved = { cpus = 0.1 } }").unwrap_err();
        assert!(e.contains("scheduler 'm'") && e.contains("declares its own usage"), "{e}");
        let e = Config::from_toml("[[scheduler]]\nname = \"m\"\nkind = \"rr\"\nmodule = \"x.wasm\"").unwrap_err();
        assert!(e.contains("either kind or module"), "{e}");
        let e = Config::from_toml("[[scheduler]]\nname = \"m\"").unwrap_err();
        assert!(e.contains("needs a kind"), "{e}");
        let e = Config::from_toml("[[scheduler]]\nname = \"m\"\nkind = \"rr\"").unwrap_err();
        assert!(e.contains("no usage declared"), "{e}");
        let e = Config::from_toml("[default]\nmodule = \"x.wasm\"").unwrap_err();
        assert!(e.contains("default scheduler cannot be a module"), "{e}");
        // A relative module path is relative to the config file.
        let dir = std::env::temp_dir().join(format!("vassal-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("a.toml");
        std::fs::write(&f, "[[scheduler]]\nname = \"m\"\nmodule = \"mods/rr.wasm\"").unwrap();
        let c = Config::load(&f).unwrap();
        assert_eq!(c.schedulers[0].module.as_deref(), Some(dir.join("mods/rr.wasm").to_str().unwrap()));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn reads_ceilings_and_schedulers() {
        let c = Config::from_toml(
            "[ceilings]\nweight = 4\nwarp = \"20ms\"\n[[scheduler]]\nname = \"t\"\nkind = \"timed\"\nusage = { hard_time = { util = 0.2, cpus = [0] } }",
        )
        .unwrap();
        assert_eq!(c.ceilings["weight"], 4);
        assert_eq!(c.ceilings["warp"], 20 * MS as i64);
        assert_eq!(c.schedulers[0].usage().unwrap().to_usage(2).unwrap(), Usage::HardTime { cpus: CpuSet(1), util_ppm: 200_000 });
    }
}
