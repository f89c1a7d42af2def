//! `real.scale` (issue 17 item 4): the agent with 10, 100 and 500 managed threads — the
//! same active few (a warped periodic thread, two CPU-bound ones, a reserved one) and
//! the rest threads that do nothing (sleeping processes of up to 50 threads) —, its own
//! CPU and the warped thread's wake-to-run latency at each size. Targets: the agent's
//! CPU at 500 threads at most twice its CPU at 10 (a pass costs what changed, not what
//! is managed), and the warped thread's p99 at most 150 µs at every size.

use std::io;

use vassal_agent::kernel::now_ns;
use vassal_agent::workers::{self, quantile, ThreadKind, Worker};

use super::{at_most, baseline, join, AgentProcess, RealRow, MS, SEC};

/// The sizes, in managed threads.
const SIZES: [usize; 3] = [10, 100, 500];
/// Sleeping threads per process.
const PER_PROCESS: usize = 50;
/// The active threads: the warped one, two hogs, the reserved one.
const ACTIVE: usize = 4;
/// How long each size is measured.
const MEASURE: u64 = 8 * SEC;
/// The warped thread: released every 10 ms, 1 ms of work.
const PERIOD: u64 = 10 * MS;
const BURN: u64 = MS;

/// rtserver (5 ms slots, 20 ms frames, r = 0.5) above the default BVT, 1 ms tick; the
/// reserved thread holds one slot per frame.
const CONFIG: &str = "tick = \"1ms\"\n[[scheduler]]\nname = \"rtserver\"\nkind = \"rtserver\"\nparams = { slot = \"5ms\", frame = \"20ms\", r = 0.5 }\nusage = { reserved = { cpus = 1.0 } }\n";

struct Sized {
    cpu_pct: f64,
    passes: f64,
    us_per_pass: f64,
    wake_p99_us: f64,
    wake_p50_us: f64,
    managed: usize,
}

fn one(exe: &std::path::Path, n: usize) -> io::Result<Sized> {
    let agent = AgentProcess::start(exe, CONFIG, 120)?;
    let mut c = agent.client()?;
    // The idle threads first: their joins are over before the measurement starts.
    let idle = n.saturating_sub(ACTIVE);
    let far = now_ns() + 120 * SEC;
    let mut sleepers: Vec<Worker> = Vec::new();
    let mut left = idle;
    while left > 0 {
        let k = left.min(PER_PROCESS);
        let w = workers::threads(k, ThreadKind::Sleep, far)?;
        join(&mut c, w.pid, None, &[])?;
        sleepers.push(w);
        left -= k;
    }
    let start = now_ns() + 500 * MS;
    let count = (MEASURE / PERIOD) as usize;
    let until = start + MEASURE + SEC;
    let hogs: Vec<Worker> = (0..2).map(|_| workers::hog(until)).collect::<io::Result<_>>()?;
    let reserved = workers::hog(until)?;
    let mut warped = workers::periodic(start, PERIOD, BURN, count, 0)?;
    for h in &hogs {
        join(&mut c, h.pid, None, &[])?;
    }
    join(&mut c, reserved.pid, Some("rtserver"), &[])?;
    match c.message(Some("rtserver"), reserved.pid, vassal_core::Request::Reserve { util: 0.25, period: 20 * MS }) {
        Ok(vassal_agent::wire::Answer::Ok) => {}
        other => return Err(io::Error::other(format!("real.scale: reservation refused: {other:?}"))),
    }
    join(&mut c, warped.pid, None, &[("warp", SEC as i64)])?;
    vassal_agent::kernel::sleep_until(start);
    let status = |c: &mut vassal_agent::client::Client| c.status().map_err(|e| io::Error::other(e.to_string()));
    let s0 = status(&mut c)?;
    let managed = s0.managed_threads;
    warped.wait();
    let s1 = status(&mut c)?;
    drop(hogs);
    drop(reserved);
    drop(sleepers);
    let wall = (s1.uptime_ns - s0.uptime_ns).max(1) as f64;
    let passes = (s1.passes - s0.passes).max(1) as f64;
    // The first releases come while the agent settles the joins.
    let mut wake: Vec<u64> = workers::periodic_results(&warped).iter().skip(3).map(|x| x.0).collect();
    Ok(Sized {
        cpu_pct: 100.0 * (s1.agent_cpu_ns - s0.agent_cpu_ns) as f64 / wall,
        passes: passes / (wall / 1e9),
        us_per_pass: s1.dispatcher_cpu_ns.saturating_sub(s0.dispatcher_cpu_ns) as f64 / 1e3 / passes,
        wake_p99_us: quantile(&mut wake, 0.99) as f64 / 1e3,
        wake_p50_us: quantile(&mut wake, 0.5) as f64 / 1e3,
        managed,
    })
}

pub(super) fn scale(exe: &std::path::Path, names: &[String]) -> io::Result<Vec<RealRow>> {
    let wanted = |n: usize| {
        let p = format!("real.scale.threads{n}.");
        names.is_empty() || names.iter().any(|x| p.starts_with(x.as_str()) || x.starts_with(&p) || x.starts_with("real.scale.cpu_ratio"))
    };
    let mut rows = Vec::new();
    let mut cpu = Vec::new();
    for n in SIZES {
        if !wanted(n) {
            continue;
        }
        let s = one(exe, n)?;
        let id = |m: &str| format!("real.scale.threads{n}.{m}");
        rows.push(baseline(&id("managed"), s.managed as f64, "threads the agent managed (the active 4 and the idle rest)"));
        rows.push(baseline(&id("cpu_pct"), s.cpu_pct, "the agent's CPU (all its threads), % of one CPU, BPF events, 1 ms tick"));
        rows.push(baseline(&id("passes_per_s"), s.passes, "dispatcher passes per second"));
        rows.push(baseline(&id("us_per_pass"), s.us_per_pass, "dispatcher CPU per pass, us"));
        rows.push(baseline(&id("wake_p50_us"), s.wake_p50_us, "warped periodic thread: release-to-run p50"));
        rows.push(at_most(
            &id("wake_p99_us"),
            150.0,
            0.0,
            s.wake_p99_us,
            "target: warped thread release-to-run p99 at most 150 us at every size",
        ));
        cpu.push((n, s.cpu_pct));
    }
    let at = |n: usize| cpu.iter().find(|c| c.0 == n).map(|c| c.1);
    if let (Some(small), Some(big)) = (at(10), at(500)) {
        rows.push(at_most(
            "real.scale.cpu_ratio_500_to_10",
            2.0,
            0.0,
            big / small.max(1e-9),
            "target: the agent's CPU with 500 managed threads at most twice its CPU with 10 (the same active four)",
        ));
    }
    Ok(rows)
}
