//! `vassal calibrate`: this machine's costs, measured, written as a machine model file
//! that `vassal twin` simulates on (docs/twin.md, "Calibration"). What it measures, each
//! with SCHED_FIFO threads (root) so that the machine's other work does not get in the
//! way, and each bounded in time:
//!
//! - CPUs (online) and HZ (the resolution of CLOCK_MONOTONIC_COARSE is one jiffy);
//! - the context switch: two threads on one CPU passing a byte back and forth through
//!   two pipes, half a round trip less one pipe write and read (lmbench's `lat_ctx`
//!   way of subtracting what is not the switch) — the simulator's `switch_cost`;
//! - the timer wake-up latency: a thread sleeping on absolute 1 ms CLOCK_MONOTONIC
//!   deadlines, how late it runs (as cyclictest, and as rt-app's `wu_lat`) — p50 is the
//!   simulator's `wake_latency`;
//! - a wake-up across CPUs: the same ping-pong with the threads on two CPUs;
//! - time taken from a spinning thread (the host's stalls, interrupts, kernel threads):
//!   gaps in its clock readings over [`STALL_MIN`], per second, p50/p99/max;
//! - rt-app's busy loop: ns per iteration of the loop its `run` events count (its
//!   `calibration`), from rt-app itself at SCHED_FIFO — so the real run does exactly the
//!   work the simulation assumes.
//!
//! Without a file `vassal twin` uses [`MachineModel::default_here`]: this machine's CPUs
//! and HZ with the costs measured on the project's VMs (/work/shared/MACHINE.md).

use std::io::{Read, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use vassal_agent::kernel::{self, now_ns};

/// A gap in a spinning thread's clock readings at least this long counts as a stall.
pub const STALL_MIN: u64 = 10_000;

/// The machine a workload is simulated on, as `vassal calibrate` measured it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MachineModel {
    /// Where the numbers come from.
    pub source: String,
    pub cpus: u16,
    pub hz: u32,
    /// One context switch on one CPU, ns.
    pub switch_cost_ns: u64,
    /// A timer wake-up's latency (timer time to running), p50 and p99, ns.
    pub wake_latency_ns: u64,
    pub wake_latency_p99_ns: u64,
    /// A wake-up of a thread blocked on another CPU, p50, ns (0: one CPU).
    pub cross_wake_ns: u64,
    /// Gaps of at least [`STALL_MIN`] in a spinning SCHED_FIFO thread's time: how many
    /// per second per CPU, their p50, p99 and longest, and the share of time they took
    /// (parts per million).
    pub stalls_per_s: f64,
    pub stall_p50_ns: u64,
    pub stall_p99_ns: u64,
    pub stall_max_ns: u64,
    pub stolen_ppm: u64,
    /// rt-app's busy loop, ns per iteration (None: rt-app was not measured).
    pub rtapp_ns_per_loop: Option<f64>,
    /// The same timer wake-up latency, p50 and p99, for a thread the agent schedules in
    /// a loaded scheduler (`rt`, kind fps): each wake-up costs a dispatcher pass before
    /// the thread runs (None: not measured).
    #[serde(default)]
    pub agent_wake_latency_ns: Option<u64>,
    #[serde(default)]
    pub agent_wake_latency_p99_ns: Option<u64>,
}

/// HZ from the coarse clock's resolution (one jiffy); 250 if it cannot be read.
pub fn hz() -> u32 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: writes one timespec we own.
    let r = unsafe { libc::clock_getres(libc::CLOCK_MONOTONIC_COARSE, &mut ts) };
    let ns = ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64;
    if r != 0 || ns == 0 {
        return 250;
    }
    (1_000_000_000f64 / ns as f64).round() as u32
}

impl MachineModel {
    /// This machine's CPUs and HZ with the costs measured on the project's 2-vCPU VMs
    /// (MACHINE.md, 2026-11-22: a context switch ~3 µs, cyclictest p50 22–35 µs and p99
    /// 50–100 µs, a wake-up from the other CPU ~18 µs).
    pub fn default_here() -> MachineModel {
        MachineModel {
            source: "default (no machine file: this machine's CPUs and HZ, costs from the project's VMs; run `vassal calibrate`)".into(),
            cpus: kernel::online_cpus(),
            hz: hz(),
            switch_cost_ns: 3_000,
            wake_latency_ns: 30_000,
            wake_latency_p99_ns: 100_000,
            cross_wake_ns: 18_000,
            stalls_per_s: 0.0,
            stall_p50_ns: 0,
            stall_p99_ns: 0,
            stall_max_ns: 0,
            stolen_ppm: 0,
            rtapp_ns_per_loop: None,
            agent_wake_latency_ns: None,
            agent_wake_latency_p99_ns: None,
        }
    }

    /// Reads a machine model file. Errors name the file and what is wrong.
    pub fn read(path: &Path) -> Result<MachineModel, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        Self::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// Parses a machine model (TOML) and checks its values.
    pub fn parse(text: &str) -> Result<MachineModel, String> {
        let m: MachineModel = toml::from_str(text).map_err(|e| e.to_string().trim_end().to_string())?;
        let bad = |k: &str, why: &str| Err(format!("`{k}`: {why}"));
        if m.cpus == 0 || m.cpus > vassal_core::MAX_CPUS {
            return bad("cpus", &format!("must be between 1 and {}", vassal_core::MAX_CPUS));
        }
        if m.hz == 0 || m.hz > 10_000 {
            return bad("hz", "must be between 1 and 10000");
        }
        for (k, v) in [
            ("switch_cost_ns", m.switch_cost_ns),
            ("wake_latency_ns", m.wake_latency_ns),
            ("wake_latency_p99_ns", m.wake_latency_p99_ns),
            ("cross_wake_ns", m.cross_wake_ns),
            ("stall_p50_ns", m.stall_p50_ns),
            ("stall_p99_ns", m.stall_p99_ns),
            ("stall_max_ns", m.stall_max_ns),
            ("agent_wake_latency_ns", m.agent_wake_latency_ns.unwrap_or(0)),
            ("agent_wake_latency_p99_ns", m.agent_wake_latency_p99_ns.unwrap_or(0)),
        ] {
            if v >= 1_000_000_000 {
                return bad(k, &format!("{v} ns is a second or more: not a cost of this kind"));
            }
        }
        if m.stolen_ppm > 1_000_000 {
            return bad("stolen_ppm", "is a share of time in millionths: at most 1000000");
        }
        if !(m.stalls_per_s.is_finite() && m.stalls_per_s >= 0.0) {
            return bad("stalls_per_s", "must be a number >= 0");
        }
        if let Some(l) = m.rtapp_ns_per_loop {
            if !(l.is_finite() && (0.01..1e6).contains(&l)) {
                return bad("rtapp_ns_per_loop", "must be a number of ns between 0.01 and 1000000");
            }
        }
        Ok(m)
    }

    /// The model as a file's text (TOML, with a header saying what each key is).
    pub fn to_toml(&self) -> String {
        let body = toml::to_string(self).expect("a machine model serialises");
        format!(
            "# A machine model for `vassal twin` (docs/twin.md, \"Calibration\"), written by `vassal calibrate`.\n\
             # switch_cost_ns: one context switch; wake_latency_ns: a timer wake-up's p50 (the simulated\n\
             # machine's wake_latency), p99 beside it; cross_wake_ns: a wake-up from the other CPU; stall_*: gaps\n\
             # of at least {} us in a spinning SCHED_FIFO thread's time; rtapp_ns_per_loop: rt-app's busy loop.\n{body}",
            STALL_MIN / 1000
        )
    }
}

// ----- measurements -----

fn pipe() -> std::io::Result<(std::fs::File, std::fs::File)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two fds we then own.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fresh fds, owned once each.
    let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    Ok((r.into(), w.into()))
}

/// Puts the calling thread at SCHED_FIFO `prio` on `cpu`.
fn pin_fifo(cpu: u16, prio: i32) -> Result<(), String> {
    kernel::set_affinity(0, &kernel::one_cpu(cpu)).map_err(|e| format!("binding a thread to CPU {cpu}: {e}"))?;
    kernel::set_self(prio).map_err(|e| format!("SCHED_FIFO {prio}: {e}"))
}

fn median(v: &mut [u64]) -> u64 {
    v.sort_unstable();
    v.get(v.len() / 2).copied().unwrap_or(0)
}

fn pct(v: &[u64], p: f64) -> u64 {
    if v.is_empty() {
        return 0;
    }
    v[((p * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1]
}

/// A pipe write and read in one thread, ns (median of batches).
fn pipe_pair() -> Result<u64, String> {
    let (mut r, mut w) = pipe().map_err(|e| e.to_string())?;
    let mut b = [0u8; 1];
    let mut batches = Vec::new();
    for _ in 0..20 {
        let t0 = now_ns();
        for _ in 0..500 {
            w.write_all(&b).map_err(|e| e.to_string())?;
            r.read_exact(&mut b).map_err(|e| e.to_string())?;
        }
        batches.push((now_ns() - t0) / 500);
    }
    Ok(median(&mut batches))
}

/// A round trip through two pipes between this thread on `here` and a partner on
/// `there`, both SCHED_FIFO: per batch of `n`, ns per round trip; median of batches.
fn ping_pong(here: u16, there: u16, batches: usize, n: usize) -> Result<u64, String> {
    let (mut ar, mut aw) = pipe().map_err(|e| e.to_string())?;
    let (mut br, mut bw) = pipe().map_err(|e| e.to_string())?;
    let total = batches * n;
    let partner = std::thread::spawn(move || -> Result<(), String> {
        pin_fifo(there, 10)?;
        let mut b = [0u8; 1];
        for _ in 0..total {
            ar.read_exact(&mut b).map_err(|e| e.to_string())?;
            bw.write_all(&b).map_err(|e| e.to_string())?;
        }
        Ok(())
    });
    let me = std::thread::spawn(move || -> Result<Vec<u64>, String> {
        let r = (|| {
            pin_fifo(here, 10)?;
            let mut b = [0u8; 1];
            let mut out = Vec::with_capacity(batches);
            for _ in 0..batches {
                let t0 = now_ns();
                for _ in 0..n {
                    aw.write_all(&b).map_err(|e| e.to_string())?;
                    br.read_exact(&mut b).map_err(|e| e.to_string())?;
                }
                out.push((now_ns() - t0) / n as u64);
            }
            Ok(out)
        })();
        drop(aw); // the partner, if it is still reading, gets EOF and ends
        r
    });
    let mine = me.join().map_err(|_| "the ping-pong thread panicked".to_string())?;
    let joined = partner.join().map_err(|_| "the ping-pong partner panicked".to_string())?;
    let mut v = mine?;
    joined?;
    Ok(median(&mut v))
}

/// Timer wake-up latencies (ns) of a SCHED_FIFO thread on `cpu` sleeping to `n`
/// absolute deadlines 1 ms apart.
fn timer_latencies(cpu: u16, n: usize) -> Result<Vec<u64>, String> {
    std::thread::spawn(move || -> Result<Vec<u64>, String> {
        pin_fifo(cpu, 80)?;
        let mut out = Vec::with_capacity(n);
        let mut next = now_ns() + 1_000_000;
        for _ in 0..n {
            kernel::sleep_until(next);
            let now = now_ns();
            out.push(now.saturating_sub(next));
            next += 1_000_000;
            if next < now {
                next = now + 1_000_000; // a stall longer than a period: start again
            }
        }
        Ok(out)
    })
    .join()
    .map_err(|_| "the timer thread panicked".to_string())?
}

/// Gaps (ns) of at least `min` in the clock readings of a SCHED_FIFO thread spinning on
/// `cpu` for `span` ns, and the total of gaps of 1 µs or more.
fn spin_gaps(cpu: u16, span: u64, min: u64) -> Result<(Vec<u64>, u64), String> {
    std::thread::spawn(move || -> Result<(Vec<u64>, u64), String> {
        pin_fifo(cpu, 80)?;
        let start = now_ns();
        let mut last = start;
        let (mut gaps, mut stolen) = (Vec::new(), 0u64);
        while last - start < span {
            let now = now_ns();
            let d = now - last;
            if d >= 1_000 {
                stolen += d;
            }
            if d >= min {
                gaps.push(d);
            }
            last = now;
        }
        let _ = kernel::set_self(0);
        Ok((gaps, stolen))
    })
    .join()
    .map_err(|_| "the spinning thread panicked".to_string())?
}

/// rt-app's ns per loop: rt-app itself runs a SCHED_FIFO thread 20 times 20 ms of `run`
/// counted at a guessed 100 ns per loop (then rt-app waits out its 2 s `duration`: with
/// -1 it would not end); each row's wall time over its loop count.
fn rtapp_loop(dir: &Path) -> Result<f64, String> {
    let json = format!(
        "{{ \"global\": {{ \"duration\": 2, \"calibration\": 100, \"logdir\": \"{}\", \"log_basename\": \"cal\", \"default_policy\": \"SCHED_FIFO\" }},\n  \"tasks\": {{ \"cal\": {{ \"priority\": 10, \"loop\": 20, \"run\": 20000, \"sleep\": 2000 }} }} }}\n",
        dir.display()
    );
    let file = dir.join("cal.json");
    std::fs::write(&file, json).map_err(|e| e.to_string())?;
    let out = std::process::Command::new("timeout")
        .args(["-s", "KILL", "30", "rt-app"])
        .arg(&file)
        .output()
        .map_err(|e| format!("running rt-app: {e}"))?;
    if !out.status.success() {
        return Err(format!("rt-app failed ({}): {}", out.status, String::from_utf8_lossy(&out.stderr).trim()));
    }
    let log = std::fs::read_to_string(dir.join("cal-cal-0.log")).map_err(|e| format!("rt-app's log: {e}"))?;
    let mut per_loop: Vec<f64> = Vec::new();
    for line in log.lines().filter(|l| !l.trim_start().starts_with('#') && !l.trim().is_empty()) {
        let f: Vec<f64> = line.split_whitespace().filter_map(|x| x.parse().ok()).collect();
        if f.len() >= 3 && f[1] > 0.0 {
            per_loop.push(f[2] * 1000.0 / f[1]); // run (µs) over perf (loops)
        }
    }
    if per_loop.len() < 10 {
        return Err(format!("rt-app logged {} rows, expected 20", per_loop.len()));
    }
    per_loop.sort_by(f64::total_cmp);
    Ok((per_loop[per_loop.len() / 2] * 100.0).round() / 100.0)
}

/// Timer wake-up latencies under the agent: a fresh agent (`exe agent`, under a kill
/// timer) with an `rt` scheduler of kind fps; a thread of ours joins it and sleeps to
/// 1 ms deadlines, as [`timer_latencies`]; the agent is stopped (SIGTERM: the thread
/// restored) before this returns.
fn agent_latencies(exe: &Path, n: usize) -> Result<Vec<u64>, String> {
    let config = "tick = \"1ms\"\n[[scheduler]]\nname = \"rt\"\nkind = \"fps\"\nusage = { reserved = { cpus = 0.5 } }\n";
    let agent = crate::real::AgentProcess::start(exe, config, 30).map_err(|e| format!("starting the agent: {e}"))?;
    let mut client = agent.client().map_err(|e| e.to_string())?;
    std::thread::spawn(move || -> Result<Vec<u64>, String> {
        client.join(Some("rt")).map_err(|e| format!("joining rt: {e}"))?;
        let (pid, tid) = (std::process::id() as i32, kernel::gettid());
        let call = vassal_agent::wire::Call::Param { pid, tid: Some(tid), name: "priority".into(), value: 10 };
        client.ok(&call).map_err(|e| format!("priority: {e}"))?;
        let mut out = Vec::with_capacity(n);
        let mut next = now_ns() + 20_000_000;
        for _ in 0..n {
            kernel::sleep_until(next);
            let now = now_ns();
            out.push(now.saturating_sub(next));
            next = (next + 1_000_000).max(now + 500_000);
        }
        Ok(out)
    })
    .join()
    .map_err(|_| "the measuring thread panicked".to_string())?
}

/// Measures this machine (root; about 5 s). `exe` is the vassal binary, to measure the
/// agent's wake-ups too (None: not measured). `progress` is told each step.
pub fn measure(exe: Option<&Path>, progress: &mut dyn FnMut(&str)) -> Result<MachineModel, String> {
    if !kernel::is_root() {
        return Err("vassal calibrate needs root (its measuring threads run at SCHED_FIFO)".into());
    }
    let cpus = kernel::online_cpus();
    let mut m = MachineModel::default_here();
    progress("context switch (ping-pong on one CPU)");
    let pair = pipe_pair()?;
    let rt = ping_pong(0, 0, 30, 500)?;
    m.switch_cost_ns = (rt / 2).saturating_sub(pair);
    if cpus > 1 {
        progress("wake-up across CPUs (ping-pong on two CPUs)");
        let rt = ping_pong(0, 1, 30, 200)?;
        m.cross_wake_ns = (rt / 2).saturating_sub(pair);
    } else {
        m.cross_wake_ns = 0;
    }
    progress("timer wake-up latency (1 ms deadlines, SCHED_FIFO)");
    let mut lat = Vec::new();
    for c in 0..cpus {
        lat.extend(timer_latencies(c, (2000 / cpus as usize).max(200))?);
    }
    lat.sort_unstable();
    m.wake_latency_ns = pct(&lat, 0.5);
    m.wake_latency_p99_ns = pct(&lat, 0.99);
    progress("stalls (a spinning SCHED_FIFO thread per CPU, 300 ms each)");
    let span = 300_000_000;
    let (mut gaps, mut stolen) = (Vec::new(), 0u64);
    for c in 0..cpus {
        let (g, s) = spin_gaps(c, span, STALL_MIN)?;
        gaps.extend(g);
        stolen += s;
        std::thread::sleep(Duration::from_millis(20));
    }
    gaps.sort_unstable();
    let spun = span * cpus as u64;
    m.stalls_per_s = gaps.len() as f64 / (spun as f64 / 1e9);
    m.stall_p50_ns = pct(&gaps, 0.5);
    m.stall_p99_ns = pct(&gaps, 0.99);
    m.stall_max_ns = gaps.last().copied().unwrap_or(0);
    m.stolen_ppm = ((stolen as u128 * 1_000_000) / spun as u128) as u64;
    progress("rt-app's busy loop");
    let dir = std::env::temp_dir().join(format!("vassal-calibrate-{}-{}", std::process::id(), now_ns()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let loop_ns = rtapp_loop(&dir);
    let _ = std::fs::remove_dir_all(&dir);
    let mut notes = String::new();
    match loop_ns {
        Ok(l) => m.rtapp_ns_per_loop = Some(l),
        Err(e) => notes = format!("; rt-app not measured: {}", e.lines().next().unwrap_or_default()),
    }
    if let Some(exe) = exe {
        progress("timer wake-up latency under the agent (a thread of its rt scheduler)");
        match agent_latencies(exe, 1000) {
            Ok(mut l) => {
                l.sort_unstable();
                m.agent_wake_latency_ns = Some(pct(&l, 0.5));
                m.agent_wake_latency_p99_ns = Some(pct(&l, 0.99));
            }
            Err(e) => notes.push_str(&format!("; the agent not measured: {}", e.lines().next().unwrap_or_default())),
        }
    }
    let mut uts: libc::utsname = unsafe_zeroed_utsname();
    // SAFETY: uname writes into a struct we own.
    let kernel_release = if unsafe { libc::uname(&mut uts) } == 0 {
        // SAFETY: the kernel NUL-terminates release.
        unsafe { std::ffi::CStr::from_ptr(uts.release.as_ptr()) }.to_string_lossy().into_owned()
    } else {
        "?".into()
    };
    m.source = format!("vassal calibrate, Linux {kernel_release}, {}{notes}", utc_now());
    Ok(m)
}

fn unsafe_zeroed_utsname() -> libc::utsname {
    // SAFETY: utsname is plain bytes; all-zero is a valid value.
    unsafe { std::mem::zeroed() }
}

/// Now as "YYYY-MM-DD HH:MM UTC" (the civil-from-days algorithm of H. Hinnant).
fn utc_now() -> String {
    let s = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs()) as i64;
    let (days, rem) = (s.div_euclid(86_400), s.rem_euclid(86_400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02} {:02}:{:02} UTC", rem / 3600, rem % 3600 / 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_model_round_trips_through_its_file() {
        let mut m = MachineModel::default_here();
        m.rtapp_ns_per_loop = Some(16.25);
        m.stalls_per_s = 3.5;
        m.agent_wake_latency_ns = Some(90_000);
        let text = m.to_toml();
        assert!(text.starts_with("# A machine model"), "{text}");
        assert_eq!(MachineModel::parse(&text).unwrap(), m);
        m.rtapp_ns_per_loop = None;
        assert_eq!(MachineModel::parse(&m.to_toml()).unwrap(), m);
    }

    #[test]
    fn a_bad_model_is_refused_by_key() {
        let good = MachineModel::default_here().to_toml();
        let with = |from: &str, to: &str| MachineModel::parse(&good.replace(from, to)).unwrap_err();
        assert!(with("cpus = ", "cpus = 0\nx = ").contains("unknown field `x`"), "{}", with("cpus = ", "cpus = 0\nx = "));
        let e = MachineModel::parse(&good.replacen(&format!("cpus = {}", kernel::online_cpus()), "cpus = 0", 1)).unwrap_err();
        assert!(e.contains("`cpus`: must be between 1"), "{e}");
        let e = MachineModel::parse(&good.replace("switch_cost_ns = 3000", "switch_cost_ns = 5000000000")).unwrap_err();
        assert!(e.contains("`switch_cost_ns`: 5000000000 ns is a second or more"), "{e}");
        let e = MachineModel::parse(&good.replace("switch_cost_ns = 3000", "switch_cost_ns = -1")).unwrap_err();
        assert!(e.contains("switch_cost_ns"), "{e}");
        let e = MachineModel::parse(&good.replace("stalls_per_s = 0.0", "stalls_per_s = nan")).unwrap_err();
        assert!(e.contains("stalls_per_s"), "{e}");
        let e = MachineModel::parse("cpus = 2\n").unwrap_err();
        assert!(e.contains("missing field"), "{e}");
    }

    #[test]
    fn the_date_is_civil() {
        let d = utc_now();
        assert!(d.len() == 20 && d.ends_with(" UTC") && d.starts_with("20"), "{d}");
    }

    #[test]
    fn hz_is_a_tick_rate() {
        let h = hz();
        assert!([100, 250, 300, 1000].contains(&h), "HZ {h}");
    }
}
