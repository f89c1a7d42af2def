//! Real applications under the agent (issue 17): `real.threads` (a multithreaded process
//! spreads over both CPUs), `real.besteffort` (a best-effort loaded scheduler shares by
//! weight without real time), `real.reservation_hold` (a CPU-bound reservation held at
//! its share for 10 s). Each against the kernel's default in the same run.

use std::io;

use vassal_agent::kernel::{self, now_ns};
use vassal_agent::wire::{Answer, Call};
use vassal_agent::workers::{self, ThreadKind, Worker};

use super::{at_least, at_most, baseline, join, near, AgentProcess, RealRow, MS, SEC};

/// The CPU each of `pids` used over `dur` (process CPU clocks), in CPUs.
fn shares(pids: &[i32], dur: u64) -> io::Result<Vec<f64>> {
    let clocks: Vec<kernel::CpuClock> = pids.iter().map(|&p| kernel::CpuClock::of_process(p)).collect::<io::Result<_>>()?;
    let c0: Vec<u64> = clocks.iter().map(|c| c.read().unwrap_or(0)).collect();
    let t0 = now_ns();
    kernel::sleep_until(t0 + dur);
    let wall = (now_ns() - t0) as f64;
    Ok(clocks.iter().zip(&c0).map(|(c, &a)| c.read().unwrap_or(a).saturating_sub(a) as f64 / wall).collect())
}

/// Samples a task at a real-time policy in `pids`, every millisecond until `until`,
/// from this thread: (real-time samples, samples).
fn rt_samples(pids: &[i32], until: u64) -> (u64, u64) {
    let (mut rt, mut n) = (0, 0);
    while now_ns() < until {
        for &p in pids {
            n += 1;
            rt += u64::from(
                kernel::get_sched(p).is_ok_and(|s| matches!(s.policy & !kernel::RESET_ON_FORK, libc::SCHED_FIFO | libc::SCHED_RR)),
            );
        }
        kernel::sleep_until(now_ns() + MS);
    }
    (rt, n)
}

// ----- real.threads -----

pub(super) fn threads(exe: &std::path::Path) -> io::Result<Vec<RealRow>> {
    const N: usize = 4;
    let id = |m: &str| format!("real.threads.{m}");
    let mut rows = Vec::new();
    let kernel_cpus = {
        let w = workers::threads(N, ThreadKind::Spin, now_ns() + 5 * SEC)?;
        kernel::sleep_until(now_ns() + 300 * MS);
        shares(&[w.pid], 3 * SEC)?[0]
    };
    rows.push(baseline(&id("default.cpus"), kernel_cpus, "kernel default: CPUs a process of 4 spinning threads gets on 2 CPUs"));
    let agent = AgentProcess::start(exe, "", 60)?;
    let w = workers::threads(N, ThreadKind::Spin, now_ns() + 10 * SEC)?;
    let mut c = agent.client()?;
    join(&mut c, w.pid, None, &[])?;
    kernel::sleep_until(now_ns() + 300 * MS);
    // The dispatcher's view every 20 ms while the CPUs are measured.
    let clock = kernel::CpuClock::of_process(w.pid)?;
    let (c0, t0) = (clock.read()?, now_ns());
    let (mut both, mut n) = (0, 0);
    while now_ns() < t0 + 3 * SEC {
        if let Ok(Answer::Tasks { tasks }) = c.call(&Call::Tasks) {
            if let Some(r) = tasks.iter().find(|t| t.pid == w.pid) {
                n += 1;
                both += u64::from(r.thread_rows.iter().filter(|t| t.state.starts_with("running")).count() >= 2);
            }
        }
        kernel::sleep_until(now_ns() + 20 * MS);
    }
    let agent_cpus = (clock.read()? - c0) as f64 / (now_ns() - t0) as f64;
    drop(w);
    drop(agent);
    let together = both as f64 / n.max(1) as f64;
    rows.push(baseline(
        &id("agent.cpus"),
        agent_cpus,
        "CPUs it got under the agent (2 on an idle machine; before issue 17 at most 1: one CPU at a time)",
    ));
    rows.push(at_least(
        &id("agent.cpus_vs_default"),
        0.9,
        0.0,
        agent_cpus / kernel_cpus.max(1e-9),
        "target: at least 0.9 of what the kernel alone gives it in the same run",
    ));
    rows.push(at_least(
        &id("agent.two_selected"),
        0.9,
        0.0,
        together,
        "target: fraction of `ctl tasks` samples with two of its threads selected at once",
    ));
    Ok(rows)
}

// ----- real.besteffort -----

pub(super) fn besteffort(exe: &std::path::Path) -> io::Result<Vec<RealRow>> {
    const WEIGHTS: [i64; 4] = [1, 1, 2, 4];
    let dur = 10 * SEC;
    let id = |m: &str| format!("real.besteffort.{m}");
    let mut rows = Vec::new();
    {
        let until = now_ns() + dur + SEC;
        let hogs: Vec<Worker> = WEIGHTS.iter().map(|_| workers::hog(until)).collect::<io::Result<_>>()?;
        let pids: Vec<i32> = hogs.iter().map(|h| h.pid).collect();
        let got = shares(&pids, 3 * SEC)?;
        let total: f64 = got.iter().sum();
        rows.push(baseline(&id("default.total_cpus"), total, "kernel default: CPUs the 4 CPU-bound tasks get together"));
        rows.push(baseline(
            &id("default.w4_of_total"),
            got[3] / total.max(1e-9),
            "kernel default: the 4th task's part of the total (equal: 0.25)",
        ));
    }
    let agent = AgentProcess::start(
        exe,
        "[[scheduler]]\nname = \"fair\"\nkind = \"bvt\"\nparams = { mcu = \"1ms\", c = \"20ms\" }\nusage = \"best_effort\"\n",
        60,
    )?;
    let until = now_ns() + dur + 3 * SEC;
    let hogs: Vec<Worker> = WEIGHTS.iter().map(|_| workers::hog(until)).collect::<io::Result<_>>()?;
    let pids: Vec<i32> = hogs.iter().map(|h| h.pid).collect();
    let mut c = agent.client()?;
    for (h, w) in hogs.iter().zip(WEIGHTS) {
        join(&mut c, h.pid, Some("fair"), &[("weight", w)])?;
    }
    kernel::sleep_until(now_ns() + 500 * MS);
    // The shares over `dur`, while another thread watches the policies.
    let watch = {
        let pids = pids.clone();
        let end = now_ns() + dur;
        std::thread::spawn(move || rt_samples(&pids, end))
    };
    let got = shares(&pids, dur)?;
    let (rt, samples) = watch.join().map_err(|_| io::Error::other("the watch panicked"))?;
    let row = match c.call(&Call::Hierarchy) {
        Ok(Answer::Hierarchy { schedulers }) => schedulers.into_iter().find(|s| s.name == "fair"),
        _ => None,
    };
    drop(hogs);
    drop(agent);
    let total: f64 = got.iter().sum();
    rows.push(baseline(
        &id("fair.total_cpus"),
        total,
        "CPUs the 4 tasks got together under the best-effort BVT (the VM's CPUs are shared with other work)",
    ));
    for (k, (g, w)) in got.iter().zip(WEIGHTS).enumerate() {
        let want = w as f64 / WEIGHTS.iter().sum::<i64>() as f64;
        rows.push(near(
            &id(&format!("fair.task{k}_w{w}_of_total")),
            want,
            0.03,
            g / total.max(1e-9),
            "target: its weight's part of what the four got (1:1:2:4), within 0.03",
        ));
        rows.push(baseline(&id(&format!("fair.task{k}_w{w}_cpus")), *g, "CPUs it got (2 CPUs idle otherwise: 0.25, 0.25, 0.5, 1)"));
    }
    rows.push(at_most(
        &id("fair.realtime_samples"),
        0.0,
        0.0,
        rt as f64,
        "target: never real-time (so no RT throttling): samples at SCHED_FIFO/RR, every 1 ms",
    ));
    rows.push(baseline(&id("fair.samples"), samples as f64, "policy samples taken"));
    if let Some(r) = row {
        rows.push(baseline(
            &id("fair.hierarchy_share"),
            r.share,
            "`ctl hierarchy`: the CPU its decisions gave its tasks over the last second",
        ));
    }
    Ok(rows)
}

// ----- real.reservation_hold -----

/// rtserver with 5 ms slots in 20 ms frames (r = 0.8 of the CPUs), 1 ms tick.
fn rtserver_config() -> String {
    format!(
        "tick = \"1ms\"\n[[scheduler]]\nname = \"rtserver\"\nkind = \"rtserver\"\nparams = {{ slot = \"5ms\", frame = \"20ms\", r = 0.8, overrun_cap = \"0ms\" }}\nusage = {{ reserved = {{ cpus = {:.1} }} }}\n",
        0.8 * kernel::online_cpus() as f64
    )
}

pub(super) fn reservation_hold(exe: &std::path::Path) -> io::Result<Vec<RealRow>> {
    const UTIL: f64 = 0.25;
    let id = |m: &str| format!("real.reservation_hold.{m}");
    let ncpus = kernel::online_cpus() as usize;
    let mut rows = Vec::new();
    {
        let until = now_ns() + 4 * SEC;
        let all: Vec<Worker> = (0..ncpus + 2).map(|_| workers::hog(until)).collect::<io::Result<_>>()?;
        let got = shares(&[all[0].pid], 3 * SEC)?[0];
        rows.push(baseline(&id("default.share"), got, "kernel default: one CPU-bound task among ncpus + 1 others"));
    }
    let agent = AgentProcess::start(exe, &rtserver_config(), 60)?;
    let until = now_ns() + 14 * SEC;
    let reserved = workers::hog(until)?;
    let others: Vec<Worker> = (0..ncpus + 1).map(|_| workers::hog(until)).collect::<io::Result<_>>()?;
    let mut c = agent.client()?;
    join(&mut c, reserved.pid, Some("rtserver"), &[])?;
    match c.message(Some("rtserver"), reserved.pid, vassal_core::Request::Reserve { util: UTIL, period: 20 * MS }) {
        Ok(Answer::Ok) => {}
        other => return Err(io::Error::other(format!("real.reservation_hold: reservation refused: {other:?}"))),
    }
    // The table takes effect at the next frame.
    kernel::sleep_until(now_ns() + 300 * MS);
    let clock = kernel::CpuClock::of_process(reserved.pid)?;
    let (c0, t0) = (clock.read()?, now_ns());
    let mut seconds = Vec::new();
    let (mut cs, mut ts) = (c0, t0);
    for k in 1..=10u64 {
        kernel::sleep_until(t0 + k * SEC);
        let (c1, t1) = (clock.read()?, now_ns());
        seconds.push((c1 - cs) as f64 / (t1 - ts) as f64);
        (cs, ts) = (c1, t1);
    }
    let all = (cs - c0) as f64 / (ts - t0) as f64;
    let shown = match c.call(&Call::Tasks) {
        Ok(Answer::Tasks { tasks }) => tasks.into_iter().find(|t| t.pid == reserved.pid).map(|t| (t.reserved, t.share)),
        _ => None,
    };
    drop(others);
    drop(reserved);
    drop(agent);
    let worst = seconds.iter().map(|s| (s - UTIL).abs()).fold(0.0, f64::max);
    rows.push(near(
        &id("reserved.share_10s"),
        UTIL,
        0.02,
        all,
        "target: a CPU-bound task reserving 0.25/20ms among ncpus + 1 hogs gets 0.25 +- 0.02 over 10 s",
    ));
    rows.push(at_most(&id("reserved.worst_second_error"), 0.0, 0.02, worst, "target: every one of the 10 seconds within 0.02 of 0.25"));
    if let Some((granted, share)) = shown {
        rows.push(baseline(&id("reserved.ctl_tasks_granted"), granted, "`ctl tasks`: what it was granted"));
        rows.push(baseline(&id("reserved.ctl_tasks_share"), share, "`ctl tasks`: its share over the last second"));
    }
    Ok(rows)
}
