//! The real side of `vassal twin`: the real rt-app 1.0 binary runs the workload (as
//! [`super::strict`] writes it) with each thread a vassal task under a fresh agent
//! configured with the simulated hierarchy — or under the kernel's own scheduler with
//! `--kernel` — while ftrace records the kernel's switches ([`crate::ftrace`]).
//!
//! Sequence: start the agent (under `timeout -s KILL`); start rt-app (killed with us:
//! PR_SET_PDEATHSIG); its threads are created at once and sleep [`super::HOLD`] (their
//! `delay`); each is found (`/proc/PID/task`, in creation order = rt-app's thread index,
//! checked against its name) and joined to its scheduler with its parameters
//! (`join --tid`); their CPU time is read then and again at the end of the window; rt-app
//! ends by its `duration`, or is killed at a hard limit; the agent is stopped (SIGTERM:
//! every thread restored). Root only. Nothing is left behind: rt-app and the agent are
//! killed and reaped by guards, and rt-app's threads run at most `duration` + a margin.

use std::collections::BTreeMap;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use vassal_agent::kernel::{self, now_ns};
use vassal_agent::wire::Call;
use vassal_core::Usage;
use vassal_core::{CPU_PPM, MS, SEC};
use vassal_sim::model::Scenario;
use vassal_sim::Slice;

use super::log::{self, LogRow};
use super::{strict, Workload, BVT_PARAMS, HOLD};
use crate::ftrace;
use crate::real::AgentProcess;

/// Settings of the real run.
pub struct LiveOptions<'a> {
    /// The `vassal` binary (it runs the agent).
    pub exe: &'a Path,
    /// Under the kernel's own scheduler instead of the agent.
    pub kernel: bool,
    /// Record the kernel's switches (ftrace).
    pub trace: bool,
    /// rt-app's loop calibration, ns (None: rt-app measures it).
    pub calibration: Option<u64>,
    /// Keep rt-app's file and logs here.
    pub keep: Option<&'a Path>,
}

/// The real run's results, per thread in the workload's order.
pub struct Live {
    /// "agent (bpf events, 1 ms tick)" or "kernel".
    pub mode: String,
    pub rows: Vec<Vec<LogRow>>,
    pub cpu_share: Vec<f64>,
    /// CLOCK_MONOTONIC ns of the run's start (every thread's `delay` counts from it).
    pub t0: u64,
    /// What held each CPU, relative to t0: lanes are the threads, then the agent, then
    /// everything else (see `lanes`).
    pub slices: Vec<Slice>,
    pub lanes: Vec<String>,
    /// The kernel's trace as Perfetto protobuf (None without ftrace).
    pub perfetto: Option<Vec<u8>>,
    pub notes: Vec<String>,
    /// CPUs the agent and everything else on the machine (not rt-app) used over the
    /// window, from the kernel trace.
    pub agent_cpus: Option<f64>,
    pub other_cpus: Option<f64>,
    /// rt-app's process and the agent's (gone when [`run`] returns).
    pub pid: i32,
    pub agent_pid: Option<i32>,
}

/// The agent's configuration for `sc`'s hierarchy: its default scheduler (with the
/// twin's BVT parameters) and its schedulers with their declared usage.
pub fn agent_config(sc: &Scenario) -> String {
    let mut c = String::from(
        "tick = \"1ms\"\n# the simulated hierarchy declares up to 95% of the machine (Linux's RT bandwidth)\nrt_fraction = 0.96\n",
    );
    c.push_str(&format!("[default]\nkind = \"{}\"\n", sc.default_policy.kind));
    let params = |p: &BTreeMap<String, vassal_policies::ParamValue>| -> String {
        let v: Vec<String> = p.iter().map(|(k, v)| format!("{k} = {}", toml_value(v))).collect();
        format!("{{ {} }}", v.join(", "))
    };
    if !sc.default_policy.params.is_empty() {
        c.push_str(&format!("params = {}\n", params(&sc.default_policy.params)));
    } else if sc.default_policy.kind == "bvt" {
        let v: Vec<String> = BVT_PARAMS.iter().map(|(k, v)| format!("{k} = \"{v}\"")).collect();
        c.push_str(&format!("params = {{ {} }}\n", v.join(", ")));
    }
    for s in &sc.schedulers {
        // A module declares its own usage (docs/modules.md).
        if let Some(path) = vassal_sim::modules::module_path(&s.policy) {
            c.push_str(&format!(
                "[[scheduler]]\nname = \"{}\"\nmodule = {}\n",
                s.name,
                serde_json::to_string(&path.display().to_string()).unwrap_or_default()
            ));
            if !s.policy.params.is_empty() {
                c.push_str(&format!("params = {}\n", params(&s.policy.params)));
            }
            continue;
        }
        c.push_str(&format!("[[scheduler]]\nname = \"{}\"\nkind = \"{}\"\n", s.name, s.policy.kind));
        if !s.policy.params.is_empty() {
            c.push_str(&format!("params = {}\n", params(&s.policy.params)));
        }
        match s.usage {
            Usage::Reserved { cpu_ppm } => {
                c.push_str(&format!("usage = {{ reserved = {{ cpus = {} }} }}\n", cpu_ppm as f64 / CPU_PPM as f64))
            }
            _ => c.push_str("usage = \"best_effort\"\n"),
        }
    }
    c
}

fn toml_value(v: &vassal_policies::ParamValue) -> String {
    use vassal_policies::ParamValue as P;
    match v {
        P::Str(s) => format!("\"{s}\""),
        other => serde_json::to_string(other).unwrap_or_default(),
    }
}

/// rt-app, killed and reaped when dropped.
struct RtApp {
    child: Child,
}

impl Drop for RtApp {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

fn comm(tid: i32, pid: i32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/comm")).unwrap_or_default().trim_end().to_string()
}

/// A thread's CPU time, ns (first field of its schedstat).
fn cpu_ns(pid: i32, tid: i32) -> Option<u64> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/schedstat")).ok()?.split_whitespace().next()?.parse().ok()
}

fn state(pid: i32, tid: i32) -> Option<char> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/stat")).ok()?;
    s.rsplit_once(") ")?.1.chars().next()
}

/// Runs `w` for real. `sc` is the simulated scenario (its hierarchy configures the agent).
pub fn run(w: &Workload, sc: &Scenario, opts: &LiveOptions) -> Result<Live, String> {
    if !kernel::is_root() {
        return Err("the real run needs root (the agent changes other processes' scheduling); --sim-only simulates only".into());
    }
    let which = Command::new("rt-app").stdout(Stdio::null()).stderr(Stdio::null()).spawn();
    match which {
        Ok(mut c) => {
            let _ = c.wait();
        }
        Err(e) => return Err(format!("rt-app is not installed here ({e}): apt-get install rt-app; --sim-only simulates only")),
    }
    let cpus = kernel::online_cpus();
    if !opts.kernel {
        strict::check_for_agent(&w.app, cpus)?;
    }
    let dir = std::env::temp_dir().join(format!("vassal-twin-{}-{}", std::process::id(), now_ns()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let out = run_in(w, sc, opts, &dir, cpus);
    if let Some(keep) = opts.keep {
        let _ = std::fs::create_dir_all(keep);
        if let Ok(rd) = std::fs::read_dir(&dir) {
            for f in rd.flatten() {
                let _ = std::fs::copy(f.path(), keep.join(f.file_name()));
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    out
}

fn run_in(w: &Workload, sc: &Scenario, opts: &LiveOptions, dir: &Path, cpus: u16) -> Result<Live, String> {
    let mut notes = Vec::new();
    let duration_s = (w.duration + HOLD).div_ceil(SEC);
    let setup = strict::Setup {
        duration_s,
        logdir: &dir.to_string_lossy(),
        basename: "twin",
        calibration: opts.calibration,
        agent: !opts.kernel,
        hold: HOLD,
        cpus,
    };
    let json = strict::strict(&w.text, &w.app, &setup)?;
    let file = dir.join(format!("{}.json", w.name));
    std::fs::write(&file, &json).map_err(|e| format!("{}: {e}", file.display()))?;
    if opts.calibration.is_none() {
        notes.push("rt-app calibrated its own loop (no machine file with rtapp_ns_per_loop)".into());
    }

    // the agent first (so that its start does not eat into the run)
    let limit_s = (duration_s + 60) as u32;
    let agent = if opts.kernel {
        None
    } else {
        // With a directory to keep files in, the agent writes its decisions as a Perfetto
        // trace (`agent.pftrace`, at its orderly stop — the end of this function —, kept
        // with the run's other files: crate agent's decisions.rs).
        let trace = opts.keep.map(|_| dir.join("agent.pftrace"));
        let args: Vec<&std::ffi::OsStr> = match &trace {
            Some(t) => vec!["--trace".as_ref(), t.as_os_str()],
            None => Vec::new(),
        };
        let a = AgentProcess::start_with(opts.exe, &agent_config(sc), limit_s, &args).map_err(|e| format!("starting the agent: {e}"))?;
        Some(a)
    };
    let mut client = match &agent {
        Some(a) => Some(a.client().map_err(|e| format!("connecting to the agent: {e}"))?),
        None => None,
    };
    let mode = match client.as_mut().map(|c| c.status()) {
        None => "kernel (its own scheduler: CFS/EEVDF, SCHED_FIFO/RR as the file says)".to_string(),
        Some(Ok(s)) => format!("agent ({} events, {} ms tick)", s.events, s.tick_ns as f64 / 1e6),
        Some(Err(e)) => return Err(format!("the agent's status: {e}")),
    };
    let recorder = if opts.trace {
        match ftrace::Recorder::start() {
            Ok(r) => Some(r),
            Err(e) => {
                notes.push(format!("no kernel trace: {e}"));
                None
            }
        }
    } else {
        None
    };

    let t_spawn = now_ns();
    let stdout = std::fs::File::create(dir.join("rt-app.out")).map_err(|e| e.to_string())?;
    let stderr = stdout.try_clone().map_err(|e| e.to_string())?;
    let mut cmd = Command::new("rt-app");
    cmd.arg(&file).current_dir(dir).stdin(Stdio::null()).stdout(stdout).stderr(stderr);
    // SAFETY: prctl in the child before exec; async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    let mut rtapp = RtApp { child: cmd.spawn().map_err(|e| format!("starting rt-app: {e}"))? };
    let pid = rtapp.child.id() as i32;
    let hard_limit = t_spawn + duration_s * SEC + 40 * SEC;
    let failed = |rtapp: &mut RtApp, what: String| -> String {
        let _ = rtapp.child.kill();
        let _ = rtapp.child.wait();
        let out = std::fs::read_to_string(dir.join("rt-app.out")).unwrap_or_default();
        let tail: Vec<&str> = out.lines().rev().take(6).collect::<Vec<_>>().into_iter().rev().collect();
        format!("{what}; rt-app said:\n{}", tail.join("\n"))
    };

    // its threads, in creation order: the first within 30 s (rt-app first measures its
    // loop when it is given no calibration), the others within HOLD / 2 of it; their
    // common start is HOLD after the first appeared (rt-app takes it just before)
    let n = w.threads.len();
    let mut tids: Vec<i32> = Vec::new();
    let mut first_seen = None;
    let mut found_by = t_spawn + 30 * SEC;
    while tids.len() < n {
        if let Ok(Some(st)) = rtapp.child.try_wait() {
            return Err(failed(&mut rtapp, format!("rt-app ended ({st}) before its threads started")));
        }
        if now_ns() > found_by {
            return Err(failed(&mut rtapp, format!("rt-app created {} of its {n} threads in time", tids.len())));
        }
        std::thread::sleep(Duration::from_millis(1));
        tids = kernel::threads(pid).unwrap_or_default().into_iter().filter(|&t| t != pid).collect();
        tids.sort_unstable();
        if first_seen.is_none() && !tids.is_empty() {
            let now = now_ns();
            first_seen = Some(now);
            found_by = now + HOLD / 2;
        }
    }
    let t_start = first_seen.unwrap_or(t_spawn);
    if tids.len() > n {
        return Err(failed(&mut rtapp, format!("rt-app has {} threads, the file {n}", tids.len())));
    }
    // each named by now (rt-app names a thread right after creating it)
    for (t, &tid) in w.threads.iter().zip(&tids) {
        let want: String = t.key.chars().take(15).collect();
        let mut c = comm(tid, pid);
        while c != want && now_ns() < found_by {
            std::thread::sleep(Duration::from_millis(1));
            c = comm(tid, pid);
        }
        if c != want {
            return Err(failed(&mut rtapp, format!("thread {tid} is called `{c}`, expected `{want}` (rt-app's thread {})", t.index)));
        }
    }
    // each asleep in its delay (its own settings done), then joined
    for &tid in &tids {
        while state(pid, tid) != Some('S') && now_ns() < found_by {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    if let Some(c) = client.as_mut() {
        for (t, &tid) in w.threads.iter().zip(&tids) {
            let to = t.scheduler.as_deref().unwrap_or("the default");
            // Joined first, then its parameters set where it now is: the agent's `join
            // --tid` with parameters sends them to the thread's current scheduler before
            // the move, which refuses another scheduler's parameters (docs/twin.md).
            c.join_thread(pid, tid, t.scheduler.as_deref(), BTreeMap::new())
                .map_err(|e| failed(&mut rtapp, format!("joining thread {} ({tid}) to {to}: {e}", t.name)))?;
            // A module (`--load`) may not take rt-app's parameters as messages (the SDK's
            // fifo takes none): a refusal is noted, not fatal — in the simulation the
            // module is given them at attach and may ignore them there too.
            let module = t
                .scheduler
                .as_deref()
                .and_then(|n| sc.schedulers.iter().find(|s| s.name == n))
                .is_some_and(|s| vassal_sim::modules::module_path(&s.policy).is_some());
            for (k, v) in &t.params {
                let call = Call::Param { pid, tid: Some(tid), name: k.clone(), value: *v };
                match c.ok(&call) {
                    Err(e) if module => notes.push(format!("thread {} in module {to}: {k} = {v} refused ({e})", t.name)),
                    r => {
                        r.map_err(|e| failed(&mut rtapp, format!("thread {} ({tid}) in {to}: {k} = {v}: {e}", t.name)))?;
                    }
                }
            }
        }
    }
    let joined = now_ns();
    if joined > t_start + HOLD - 50 * MS {
        notes.push(format!(
            "the threads were joined {} ms after they appeared, close to their start at {} ms",
            (joined - t_start) / MS,
            HOLD / MS
        ));
    }
    let cpu0: Vec<Option<u64>> = tids.iter().map(|&t| cpu_ns(pid, t)).collect();

    // the window's end, then rt-app's
    let t_end = t_start + HOLD + w.duration;
    kernel::sleep_until(t_end);
    let t_end = now_ns();
    let cpu1: Vec<Option<u64>> = tids.iter().map(|&t| cpu_ns(pid, t)).collect();
    let status = loop {
        match rtapp.child.try_wait() {
            Ok(Some(st)) => break Some(st),
            Ok(None) if now_ns() > hard_limit => break None,
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => return Err(format!("waiting for rt-app: {e}")),
        }
    };
    match status {
        None => notes.push(format!("rt-app did not end by its duration; killed at {} s", (hard_limit - t_spawn) / SEC)),
        Some(st) if !st.success() => return Err(failed(&mut rtapp, format!("rt-app failed ({st})"))),
        Some(_) => {}
    }
    drop(rtapp);
    let trace = match recorder.map(|r| r.finish()) {
        Some(Ok((text, lost))) => {
            if lost > 0 {
                notes.push(format!("the kernel trace lost {lost} events (ring buffer full)"));
            }
            Some(text)
        }
        Some(Err(e)) => {
            notes.push(format!("no kernel trace: {e}"));
            None
        }
        None => None,
    };
    let agent_pid = agent.as_ref().and_then(|a| a.pid());
    drop(client);
    drop(agent); // SIGTERM: every thread restored

    // rt-app's logs
    let mut raw = Vec::with_capacity(n);
    for t in &w.threads {
        let f = dir.join(format!("twin-{}-{}.log", t.key, t.index));
        let text = std::fs::read_to_string(&f).map_err(|e| format!("rt-app's log {}: {e}", f.display()))?;
        raw.push(log::parse_log(&text).map_err(|e| format!("{}: {e}", f.display()))?);
    }
    // t0: the threads' common start (rt-app's start + HOLD), from their first rows
    let t0 = w
        .threads
        .iter()
        .zip(&raw)
        .filter_map(|(t, r)| {
            let delay = w.app.threads.iter().find(|x| x.name == t.key).map_or(0, |x| x.delay);
            r.first().map(|f| (f.start_us * 1000).saturating_sub(delay))
        })
        .min()
        .ok_or("rt-app logged no rows")?;
    let rows: Vec<Vec<LogRow>> = raw.iter().map(|r| log::relative(r, t0)).collect();
    let window = t_end.saturating_sub(t0).max(1);
    let cpu_share = cpu0
        .iter()
        .zip(&cpu1)
        .map(|(a, b)| match (a, b) {
            (Some(a), Some(b)) => b.saturating_sub(*a) as f64 / window as f64,
            _ => f64::NAN,
        })
        .collect();

    // the kernel's trace: the CPU timeline and the Perfetto file
    let mut lanes: Vec<String> = w.threads.iter().map(|t| t.name.clone()).collect();
    lanes.push("vassal agent".into());
    lanes.push("other".into());
    let (mut slices, mut perfetto) = (Vec::new(), None);
    if let Some(text) = trace {
        if opts.keep.is_some() {
            let _ = std::fs::write(dir.join("ftrace.txt"), &text);
        }
        let mut names = BTreeMap::new();
        names.insert(pid, format!("rt-app {}", w.name));
        if let Some(a) = agent_pid {
            names.insert(a, "vassal agent".to_string());
        }
        let kt = ftrace::kernel_trace(&text, cpus as u32, t0, t_end.max(t0), &names);
        if kt.mended > 0 {
            notes.push(format!("{} of the kernel trace's switches did not chain (events the trace lost), mended", kt.mended));
        }
        let lane_of = |tid: i32| -> usize {
            if let Some(k) = tids.iter().position(|&t| t == tid) {
                return k;
            }
            match kt.tgid.get(&tid) {
                Some(&g) if Some(g) == agent_pid => n,
                _ => n + 1,
            }
        };
        for h in &kt.held {
            slices.push(Slice { cpu: h.cpu as u16, task: lane_of(h.tid), start: h.start, end: h.end, by: "kernel".into() });
        }
        perfetto = Some(vassal_perfetto::encode(&kt.sched)?);
    }
    let busy = |lane: usize| -> Option<f64> {
        (!slices.is_empty()).then(|| {
            let ns: u64 =
                slices.iter().filter(|s| s.task == lane).map(|s| s.end.min(w.duration).saturating_sub(s.start.min(w.duration))).sum();
            ns as f64 / w.duration as f64
        })
    };
    let (agent_cpus, other_cpus) = (busy(n).filter(|_| agent_pid.is_some()), busy(n + 1));
    Ok(Live { mode, rows, cpu_share, t0, slices, lanes, perfetto, notes, agent_cpus, other_cpus, pid, agent_pid })
}

/// Where the kept files go by default.
pub fn keep_dir(out: &Path) -> PathBuf {
    out.join("real")
}
