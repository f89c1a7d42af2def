//! Integration tests of the Linux agent with real processes (issue 6). They need root
//! (the agent changes other processes' scheduling) and skip with a message otherwise.
//! Every test runs under a hard time limit: each agent is started with `timeout`, every
//! worker spins or sleeps only until a deadline, and Drop guards kill and reap agents
//! and workers on every path, so no real-time or stopped task is ever left behind.

#[path = "common/agent_proc.rs"]
mod agent_proc;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::time::Duration;

use agent_proc::{root, serial, stopped, wait_for, AgentProc};
use vassal_agent::client::Client;
use vassal_agent::kernel::{self, now_ns};
use vassal_agent::wire::{Answer, Call, Status};
use vassal_agent::workers::{self, Worker};
use vassal_core::Request;

const MS: u64 = 1_000_000;
const SEC: u64 = 1_000_000_000;

fn policy(pid: i32) -> i32 {
    kernel::get_sched(pid).map(|s| s.policy & !kernel::RESET_ON_FORK).unwrap_or(-1)
}

/// A hog with a known original state: nice 3, affinity CPU 0 only... unless the machine
/// has one CPU, then all.
fn hog_with_state(until: u64) -> (Worker, kernel::SchedState) {
    let w = workers::hog(until).unwrap();
    kernel::set_nice(w.pid, 3).unwrap();
    let before = kernel::get_sched(w.pid).unwrap();
    (w, before)
}

fn same_state(pid: i32, s: &kernel::SchedState) -> bool {
    kernel::get_sched(pid).is_ok_and(|now| now == *s)
}

/// Three hogs with known original states ([`hog_with_state`]).
fn three_hogs(until: u64) -> Vec<(Worker, kernel::SchedState)> {
    (0..3).map(|_| hog_with_state(until)).collect()
}

/// Every hog is back in its original state.
fn all_restored(hogs: &[(Worker, kernel::SchedState)]) -> bool {
    hogs.iter().all(|(w, s)| same_state(w.pid, s))
}

/// Some hog is parked at SCHED_IDLE (the agent has taken them over).
fn any_parked(hogs: &[(Worker, kernel::SchedState)]) -> bool {
    hogs.iter().any(|(w, _)| policy(w.pid) == libc::SCHED_IDLE)
}

fn join(c: &mut Client, pid: i32, params: &[(&str, i64)]) {
    let params = params.iter().map(|(k, v)| (k.to_string(), *v)).collect();
    c.join_pid(pid, None, params).expect("join");
}

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn sigkill_of_the_agent_restores_every_task() {
    sigkill_restores("");
}

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn sigkill_of_the_agent_restores_every_task_polling() {
    sigkill_restores(POLL);
}

fn sigkill_restores(config: &str) {
    if !root() {
        return;
    }
    let _serial = serial();
    let until = now_ns() + 20 * SEC;
    let agent = AgentProc::start(config);
    let hogs = three_hogs(until);
    let (w1, w2, w3) = (&hogs[0].0, &hogs[1].0, &hogs[2].0);
    let mut c = agent.client();
    join(&mut c, w1.pid, &[("warp", 20 * MS as i64)]);
    join(&mut c, w2.pid, &[]);
    join(&mut c, w3.pid, &[]);
    // The warped hog is raised to SCHED_FIFO (selected or armed); on two CPUs or fewer
    // one of the others is parked at SCHED_IDLE. (BVT takes turns among the three: under
    // heavy load the selected hogs progress slowly, and the warped one may wait seconds.)
    let changed = wait_for(Duration::from_secs(10), || {
        policy(w1.pid) == libc::SCHED_FIFO && [w2, w3].iter().any(|w| policy(w.pid) == libc::SCHED_IDLE || kernel::online_cpus() > 2)
    });
    assert!(
        changed.is_some(),
        "the agent never changed the hogs' scheduling: policies {:?}, tasks {:?}",
        [w1, w2, w3].map(|w| policy(w.pid)),
        c.tasks()
    );
    assert!([w1, w2, w3].iter().any(|w| policy(w.pid) == libc::SCHED_FIFO || policy(w.pid) == libc::SCHED_IDLE));
    let guardian = agent.guardian_pid();
    // SAFETY: SIGKILL to our agent.
    unsafe { libc::kill(agent.agent_pid(), libc::SIGKILL) };
    let took = wait_for(Duration::from_secs(2), || all_restored(&hogs));
    let took = took.unwrap_or_else(|| {
        panic!("not restored: {:?} {:?} {:?}", kernel::get_sched(w1.pid), kernel::get_sched(w2.pid), kernel::get_sched(w3.pid))
    });
    eprintln!("restored 3 tasks {took:?} after SIGKILL of the agent (requirement: 100 ms)");
    // The guardian leaves once it has restored.
    assert!(wait_for(Duration::from_secs(2), || std::fs::metadata(format!("/proc/{guardian}")).is_err()
        || std::fs::read_to_string(format!("/proc/{guardian}/stat")).is_ok_and(|s| s.contains(") Z")))
    .is_some());
}

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn sigterm_restores_every_task() {
    if !root() {
        return;
    }
    let _serial = serial();
    let until = now_ns() + 20 * SEC;
    let agent = AgentProc::start("");
    let hogs = three_hogs(until);
    let mut c = agent.client();
    for (w, _) in &hogs {
        join(&mut c, w.pid, &[]);
    }
    assert!(wait_for(Duration::from_secs(3), || any_parked(&hogs)).is_some());
    // SAFETY: SIGTERM to our agent.
    unsafe { libc::kill(agent.agent_pid(), libc::SIGTERM) };
    assert!(
        wait_for(Duration::from_secs(2), || all_restored(&hogs)).is_some(),
        "SIGTERM did not restore every task: {:?}",
        hogs.iter().map(|(w, s)| (w.pid, s, kernel::get_sched(w.pid))).collect::<Vec<_>>()
    );
}

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn death_of_the_guardian_makes_the_agent_restore_and_exit() {
    if !root() {
        return;
    }
    let _serial = serial();
    let until = now_ns() + 20 * SEC;
    let mut agent = AgentProc::start("");
    let hogs = three_hogs(until);
    let mut c = agent.client();
    for (w, _) in &hogs {
        join(&mut c, w.pid, &[]);
    }
    assert!(wait_for(Duration::from_secs(3), || any_parked(&hogs)).is_some());
    // SAFETY: SIGKILL to the guardian.
    unsafe { libc::kill(agent.guardian_pid(), libc::SIGKILL) };
    assert!(wait_for(Duration::from_secs(2), || all_restored(&hogs)).is_some());
    assert!(
        wait_for(Duration::from_secs(2), || matches!(agent.child.try_wait(), Ok(Some(_)))).is_some(),
        "the agent kept running without a guardian"
    );
}

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn a_warped_task_beats_hogs() {
    warped_task_beats_hogs("");
}

/// The same with the polling event source.
#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn a_warped_task_beats_hogs_polling() {
    warped_task_beats_hogs(POLL);
}

/// The config line that makes the agent poll /proc instead of taking BPF events.
const POLL: &str = "events = \"poll\"\n";

fn warped_task_beats_hogs(config: &str) {
    if !root() {
        return;
    }
    let _serial = serial();
    let ncpus = kernel::online_cpus() as usize;
    // The built-in default scheduler: BVT with mcu = 1 ms and C = 20 ms. A warp far
    // larger than C (BVT §2.2) lets the task preempt a hog the moment it wakes.
    let agent = AgentProc::start(config);
    let start = now_ns() + 300 * MS;
    let (period, burn, count) = (10 * MS, 2 * MS, 150);
    let until = start + count as u64 * period + SEC;
    let hogs: Vec<Worker> = (0..ncpus + 1).map(|_| workers::hog(until).unwrap()).collect();
    // The same periodic task twice, one warped, one not (the control).
    let mut warped = workers::periodic(start, period, burn, count, 0).unwrap();
    let mut plain = workers::periodic(start + period / 2, period, burn, count, 0).unwrap();
    let mut c = agent.client();
    for h in &hogs {
        join(&mut c, h.pid, &[]);
    }
    join(&mut c, warped.pid, &[("warp", SEC as i64)]);
    join(&mut c, plain.pid, &[]);
    warped.wait();
    plain.wait();
    drop(hogs);
    let lat = |w: &Worker| {
        let r = workers::periodic_results(w);
        assert_eq!(r.len(), count);
        let mut v: Vec<u64> = r.iter().skip(5).map(|x| x.0).collect();
        (workers::quantile(&mut v, 0.5), workers::quantile(&mut v, 0.99))
    };
    let (w50, w99) = lat(&warped);
    let (p50, p99) = lat(&plain);
    eprintln!(
        "among {} hogs: warped task wake latency p50 {} us, p99 {} us; unwarped p50 {} us, p99 {} us",
        ncpus + 1,
        w50 / 1000,
        w99 / 1000,
        p50 / 1000,
        p99 / 1000
    );
    // Warped and armed, it preempts a hog the instant it wakes; unwarped, it waits for
    // BVT to reach it (up to C = 20 ms behind the hogs).
    assert!(w50 < 500_000, "a warped task should run within half a millisecond of its release (p50 {w50} ns)");
    assert!(w50 < p50, "the warped task (p50 {w50} ns) should wake faster than the unwarped one (p50 {p50} ns)");
}

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn one_uid_cannot_touch_another_uids_process() {
    if !root() {
        return;
    }
    let _serial = serial();
    let agent = AgentProc::start(&format!("[ceilings]\nweight = 4\n{}", rtserver_config("5ms", "20ms")));
    // A process of nobody (65534) and one of root.
    let mut mine = Command::new("sleep").arg("30").uid(65534).gid(65534).spawn().unwrap();
    let mut roots = Command::new("sleep").arg("30").spawn().unwrap();
    let (m, r) = (mine.id().to_string(), roots.id().to_string());
    let nobody = 65534;
    let other = 65533;
    let (ok, out) = agent.ctl_as(nobody, &["join", &r]);
    assert!(!ok && out.contains("does not belong"), "nobody joined root's process: {out}");
    let (ok, out) = agent.ctl_as(nobody, &["join", &m]);
    assert!(ok, "nobody could not join its own process: {out}");
    // Another uid may not set, reserve, free, release or message it.
    for args in [
        vec!["set", &m, "weight", "1"],
        vec!["reserve", &m, "0.1/10ms"],
        vec!["modify", &m, "0.2/10ms"],
        vec!["free", &m],
        vec!["release", &m],
        vec!["leave", &m],
        vec!["warp", &m, "on"],
    ] {
        let (ok, out) = agent.ctl_as(other, &args);
        assert!(!ok && out.contains("does not belong"), "uid {other} ran {args:?}: {out}");
    }
    // Ceilings: the owner may set weight up to 4, not above; root may.
    let (ok, out) = agent.ctl_as(nobody, &["set", &m, "weight", "9"]);
    assert!(!ok && out.contains("ceiling"), "{out}");
    let (ok, out) = agent.ctl_as(nobody, &["set", &m, "weight", "3"]);
    assert!(ok, "{out}");
    let (ok, out) = agent.ctl_as(nobody, &["set", &m, "warp", "10ms"]);
    assert!(!ok && out.contains("only root"), "{out}");
    let (ok, out) = agent.ctl_as(0, &["set", &m, "weight", "9"]);
    assert!(ok, "{out}");
    // Once root raised it, the owner may lower it (9 -> 6 is above the ceiling but below
    // the current value), never raise it again.
    let (ok, out) = agent.ctl_as(nobody, &["set", &m, "weight", "6"]);
    assert!(ok, "{out}");
    let (ok, _) = agent.ctl_as(nobody, &["set", &m, "weight", "7"]);
    assert!(!ok);
    let (ok, out) = agent.ctl_as(nobody, &["register", "x", "timed", "--usage", "reserved:0.1"]);
    assert!(!ok && out.contains("only root"), "{out}");
    // A reservation (paper 002 §2.1): the owner makes it; another uid can neither
    // modify nor free it; the owner can.
    let (ok, out) = agent.ctl_as(nobody, &["join", &m, "--sched", "rtserver"]);
    assert!(ok, "{out}");
    let (ok, out) = agent.ctl_as(nobody, &["reserve", &m, "0.1/10ms"]);
    assert!(ok, "nobody could not reserve for its own process: {out}");
    for args in [vec!["modify", &m, "0.2/10ms"], vec!["free", &m], vec!["reserve", &m, "0.1/10ms"]] {
        let (ok, out) = agent.ctl_as(other, &args);
        assert!(!ok && out.contains("does not belong"), "uid {other} ran {args:?} on a reservation of uid {nobody}: {out}");
    }
    let (ok, out) = agent.ctl_as(nobody, &["modify", &m, "0.2/10ms"]);
    assert!(ok, "{out}");
    let (ok, out) = agent.ctl_as(nobody, &["free", &m]);
    assert!(ok, "{out}");
    let (ok, _) = agent.ctl_as(nobody, &["free", &m]);
    assert!(!ok, "freed twice");
    let _ = mine.kill();
    let _ = roots.kill();
    let _ = mine.wait();
    let _ = roots.wait();
}

/// An `rtserver` (paper 002's reservation server) above the default scheduler, with
/// r = 0.8 of the machine, declared as such.
fn rtserver_config(slot: &str, frame: &str) -> String {
    format!(
        "[[scheduler]]\nname = \"rtserver\"\nkind = \"rtserver\"\nparams = {{ slot = \"{slot}\", frame = \"{frame}\", r = 0.8, overrun_cap = \"0ms\" }}\nusage = {{ reserved = {{ cpus = {:.1} }} }}\n",
        0.8 * kernel::online_cpus() as f64
    )
}

/// Paper 002 §2.3: a reserved task runs in its slots of the dispatch table. A CPU-bound
/// task reserving 0.25 (5 ms every 20 ms) among more CPU-bound hogs than CPUs gets its
/// 25% of a CPU and, its slot ends being scheduler events on absolute CLOCK_MONOTONIC
/// timers and the task held (stopped) outside its slots, hardly more (overrun_cap = 0:
/// nothing past the slot end; the target is at most one 1 ms tick per 20 ms period).
#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn a_reservation_is_enforced() {
    if !root() {
        return;
    }
    let _serial = serial();
    let ncpus = kernel::online_cpus() as usize;
    let agent = AgentProc::start(&format!("tick = \"1ms\"\n{}", rtserver_config("5ms", "20ms")));
    let until = now_ns() + 8 * SEC;
    let reserved = workers::hog(until).unwrap();
    // Unmanaged hogs, one per CPU and one more: the kernel's own time-sharing.
    let hogs: Vec<Worker> = (0..ncpus + 1).map(|_| workers::hog(until).unwrap()).collect();
    let clock = kernel::CpuClock::of_process(reserved.pid).unwrap();
    let mut c = agent.client();
    c.join_pid(reserved.pid, Some("rtserver"), Default::default()).expect("join rtserver");
    let r = c.message(Some("rtserver"), reserved.pid, Request::Reserve { util: 0.25, period: 20 * MS });
    assert!(matches!(r, Ok(Answer::Ok)), "reserve: {r:?}");
    // What is left: r·N − 0.25 CPUs (paper 002's getAvailResource).
    match c.message(Some("rtserver"), reserved.pid, Request::Avail) {
        Ok(Answer::Fraction { num, den }) => {
            let left = num as f64 / den as f64;
            assert!((left - (0.8 * ncpus as f64 - 0.25)).abs() < 1e-9, "avail {num}/{den}");
        }
        other => panic!("avail: {other:?}"),
    }
    // The table takes effect at the next 20 ms frame.
    std::thread::sleep(Duration::from_millis(300));
    let share = |secs: u64| {
        let (c0, t0) = (clock.read().unwrap(), now_ns());
        std::thread::sleep(Duration::from_secs(secs));
        (clock.read().unwrap() - c0) as f64 / (now_ns() - t0) as f64
    };
    let reserved_share = share(3);
    // Modify to 0.5 (10 ms every 20 ms): the new share from the next frame.
    let r = c.message(Some("rtserver"), reserved.pid, Request::Modify { util: 0.5, period: 20 * MS });
    assert!(matches!(r, Ok(Answer::Ok)), "modify: {r:?}");
    std::thread::sleep(Duration::from_millis(100));
    let modified_share = share(2);
    // `ctl tasks` shows it granted 0.5 and its measured share beside it (issue 17).
    let row = c.tasks().unwrap().into_iter().find(|t| t.pid == reserved.pid).expect("listed");
    eprintln!("ctl tasks: reserved {:.3}, share {:.3}", row.reserved, row.share);
    assert!((row.reserved - 0.5).abs() < 1e-6, "{row:?}");
    assert!((row.share - 0.5).abs() <= 0.05, "{row:?}");
    // Outside its slots it is held: stopped (it is CPU-bound, so always runnable).
    let held = wait_for(Duration::from_secs(1), || stopped(reserved.pid)).is_some();
    drop(agent);
    // The agent's orderly exit continues it and restores its policy.
    let released = wait_for(Duration::from_secs(2), || !stopped(reserved.pid) && policy(reserved.pid) == libc::SCHED_OTHER);
    drop(hogs);
    eprintln!("reserved 0.25 among {} hogs: share {reserved_share:.3}; modified to 0.5: {modified_share:.3}", ncpus + 1);
    assert!(held, "the reserved task was never held (stopped) outside its slots");
    assert!(released.is_some(), "the reserved task was left stopped or not restored after the agent exited");
    // The slot ends are exact to the dispatcher's wake-up latency (p99 ~60 µs), and held
    // outside them the task gets nothing more (the measurements, with and without the
    // hold: docs/measurements/agent-2026-11-22.md, run F). The margin, 0.02 (0.4 ms per 20 ms period), holds
    // a host stall of the VM (1-30 ms now and then) inside the 2-3 s of measurement; the
    // target, one 1 ms tick per period, would be 0.05.
    for (want, got) in [(0.25, reserved_share), (0.5, modified_share)] {
        assert!((got - want).abs() <= 0.02, "reserved {want} of a CPU, got {got:.3}");
    }
}

/// A held (stopped) reserved task is continued by the guardian when the agent is
/// SIGKILLed: the ledger names the process the agent stopped.
#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn sigkill_of_the_agent_continues_a_held_task() {
    if !root() {
        return;
    }
    let _serial = serial();
    let ncpus = kernel::online_cpus() as usize;
    let agent = AgentProc::start(&format!("tick = \"1ms\"\n{}", rtserver_config("5ms", "20ms")));
    let until = now_ns() + 20 * SEC;
    let (reserved, before) = hog_with_state(until);
    let hogs: Vec<Worker> = (0..ncpus + 1).map(|_| workers::hog(until).unwrap()).collect();
    let mut c = agent.client();
    c.join_pid(reserved.pid, Some("rtserver"), Default::default()).expect("join rtserver");
    let r = c.message(Some("rtserver"), reserved.pid, Request::Reserve { util: 0.25, period: 20 * MS });
    assert!(matches!(r, Ok(Answer::Ok)), "reserve: {r:?}");
    // Held for 15 ms of every 20: caught stopped within a few tries.
    assert!(wait_for(Duration::from_secs(3), || stopped(reserved.pid)).is_some(), "the reserved task was never held");
    let guardian = agent.guardian_pid();
    // SAFETY: SIGKILL to our agent.
    unsafe { libc::kill(agent.agent_pid(), libc::SIGKILL) };
    let took = wait_for(Duration::from_secs(2), || !stopped(reserved.pid) && same_state(reserved.pid, &before));
    drop(hogs);
    let took = took.unwrap_or_else(|| {
        panic!("not continued and restored: stopped {} state {:?}", stopped(reserved.pid), kernel::get_sched(reserved.pid))
    });
    eprintln!("continued and restored the held task {took:?} after SIGKILL of the agent");
    // And it runs: its CPU clock advances.
    let clock = kernel::CpuClock::of_process(reserved.pid).unwrap();
    let c0 = clock.read().unwrap();
    assert!(wait_for(Duration::from_secs(2), || clock.read().unwrap() > c0 + 10 * MS).is_some(), "the continued task does not run");
    assert!(wait_for(Duration::from_secs(2), || std::fs::metadata(format!("/proc/{guardian}")).is_err()
        || std::fs::read_to_string(format!("/proc/{guardian}/stat")).is_ok_and(|s| s.contains(") Z")))
    .is_some());
}

/// Raw lines to the broker; the reply to each.
fn raw(sock: &str, lines: &[Vec<u8>]) -> Vec<String> {
    let s = UnixStream::connect(sock).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut w = s.try_clone().unwrap();
    let mut r = BufReader::new(s);
    let mut out = Vec::new();
    for l in lines {
        // The agent may hang up after answering an over-long line before it is all sent.
        let _ = w.write_all(l).and_then(|_| w.write_all(b"\n"));
        let mut reply = String::new();
        r.read_line(&mut reply).expect("the agent answers every line");
        out.push(reply);
    }
    out
}

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn malformed_calls_get_an_error_and_the_agent_keeps_serving() {
    if !root() {
        return;
    }
    let _serial = serial();
    let agent = AgentProc::start("");
    // Deterministic pseudo-random garbage and near-miss calls.
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    // Mutations of a harmless call; any mutant that would still decode to a call that
    // changes some process (join, release, param, message, register) is not sent, so a
    // random pid is never touched.
    let sleeper = workers::sleeper(now_ns() + 20 * SEC).unwrap();
    let valid = format!(r#"{{"op":"leave","pid":{}}}"#, sleeper.pid).into_bytes();
    let mut lines: Vec<Vec<u8>> = vec![
        b"".to_vec(),
        b"{}".to_vec(),
        b"null".to_vec(),
        b"[1,2,3]".to_vec(),
        br#"{"op":"join"}"#.to_vec(),
        br#"{"op":"join","pid":"x"}"#.to_vec(),
        br#"{"op":"join","pid":0}"#.to_vec(),
        br#"{"op":"join","pid":99999999999}"#.to_vec(),
        br#"{"op":"message","pid":1,"request":{"kind":"reserve","util":1e999,"period_ns":1}}"#.to_vec(),
        br#"{"op":"message","pid":1,"request":{"kind":"teleport"}}"#.to_vec(),
        format!(r#"{{"op":"message","pid":{},"request":{{"kind":"set","delay_ns":1000}}}}"#, sleeper.pid).into_bytes(),
        br#"{"op":"register","name":"x","kind":"timed","usage":{"reserved":{"cpus":-1}}}"#.to_vec(),
        vec![0xff, 0x00, 0xc3],
    ];
    for _ in 0..200 {
        let mut l = valid.clone();
        for _ in 0..(next() % 4 + 1) {
            let i = (next() as usize) % l.len();
            match next() % 3 {
                0 => l[i] = (next() % 256) as u8,
                1 => {
                    l.remove(i);
                }
                _ => l.insert(i, b"{}[]\",:0-e"[(next() % 10) as usize]),
            }
        }
        l.retain(|&b| b != b'\n');
        let harmless = match vassal_agent::wire::decode(&l) {
            Err(_) => true,
            Ok(c) => matches!(c, Call::Leave { .. } | Call::Hierarchy | Call::Tasks | Call::Status),
        };
        if harmless {
            lines.push(l);
        }
    }
    let replies = raw(&agent.sock, &lines);
    assert!(lines.len() > 100);
    for (l, r) in lines.iter().zip(&replies) {
        let a: Answer = serde_json::from_str(r.trim_end()).unwrap_or_else(|e| panic!("reply {r:?} to {l:?}: {e}"));
        if vassal_agent::wire::decode(l).is_err() {
            assert!(matches!(a, Answer::Error { .. }), "{l:?} got {a:?}");
        }
    }
    // Too long a line: an error, then the connection closes; the agent still serves.
    let long = vec![b'a'; vassal_agent::wire::MAX_LINE + 10];
    let r = raw(&agent.sock, &[long]);
    assert!(r[0].contains("error"), "{r:?}");
    let mut c = agent.client();
    assert!(c.status().is_ok());
    // The garbage managed nothing; a valid call still works.
    assert!(c.tasks().unwrap().is_empty());
    assert!(c.message(None, sleeper.pid, Request::Avail).is_err(), "not managed, so refused");
    drop(sleeper);
}

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn a_task_over_its_warp_limit_is_demoted() {
    warp_limit_demotes("");
}

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn a_task_over_its_warp_limit_is_demoted_polling() {
    warp_limit_demotes(POLL);
}

fn warp_limit_demotes(config: &str) {
    if !root() {
        return;
    }
    let _serial = serial();
    let ncpus = kernel::online_cpus() as usize;
    let agent = AgentProc::start(config);
    let until = now_ns() + 5 * SEC;
    // A warped task that never blocks (BVT Table 5's rt "failing into an infinite
    // loop"), warp limit 10 ms, among hogs: one per CPU and one more.
    let looping = workers::hog(until).unwrap();
    let hogs: Vec<Worker> = (0..ncpus).map(|_| workers::hog(until).unwrap()).collect();
    let mut c = agent.client();
    join(&mut c, looping.pid, &[("warp", SEC as i64), ("warp_limit", 10 * MS as i64), ("unwarp", SEC as i64)]);
    for h in &hogs {
        join(&mut c, h.pid, &[]);
    }
    std::thread::sleep(Duration::from_millis(300));
    let clock = kernel::CpuClock::of_process(looping.pid).unwrap();
    let (c0, t0) = (clock.read().unwrap(), now_ns());
    std::thread::sleep(Duration::from_millis(1000));
    let share = (clock.read().unwrap() - c0) as f64 / (now_ns() - t0) as f64;
    drop(hogs);
    eprintln!(
        "looping warped task's share of a CPU after its warp limit: {share:.3} (fair share {:.3})",
        ncpus as f64 / (ncpus + 1) as f64
    );
    // Left at its real-time priority it would hold a CPU (95% under RT throttling);
    // unwarped at the limit, BVT gives it its weighted share, ncpus/(ncpus+1) of a CPU.
    assert!(share < 0.85, "a task past its warp limit kept its CPU (share {share:.3})");
}

/// `vassal agent --trace FILE` (issue 7 item 1): the agent's decisions as a Chrome trace —
/// well-formed after an orderly stop, slices on declared CPU tracks that never overlap,
/// the managed processes' slices and their wake/block instants.
#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn the_agent_writes_a_chrome_trace() {
    if !root() {
        return;
    }
    let _serial = serial();
    let file = std::env::temp_dir().join(format!("vassal-agent-trace-{}.json", std::process::id()));
    let agent = AgentProc::start_with("", &["--trace", file.to_str().unwrap()]);
    let start = now_ns() + 200 * MS;
    let until = start + SEC;
    let hog = workers::hog(until).unwrap();
    // Not warped: a warped task is armed while blocked, so the kernel runs it the instant
    // it wakes and the agent may never see it runnable. This one (5 ms every 20 ms) is
    // seen by the polls and selected.
    let mut sleeper = workers::periodic(start, 20 * MS, 5 * MS, 40, 0).unwrap();
    let mut c = agent.client();
    join(&mut c, hog.pid, &[]);
    join(&mut c, sleeper.pid, &[]);
    sleeper.wait();
    let hog_pid = hog.pid;
    drop(hog);
    drop(agent); // SIGTERM: restores and closes the trace
    let text = std::fs::read_to_string(&file).expect("the trace was written");
    let _ = std::fs::remove_file(&file);
    let events: Vec<serde_json::Value> = serde_json::from_str(&text).expect("a JSON array after an orderly stop");
    let declared: BTreeSet<(u64, u64)> = events
        .iter()
        .filter(|e| e["ph"] == "M" && e["name"] == "thread_name")
        .map(|e| (e["pid"].as_u64().unwrap(), e["tid"].as_u64().unwrap()))
        .collect();
    let mut per_track: BTreeMap<(u64, u64), Vec<(f64, f64)>> = BTreeMap::new();
    for e in events.iter().filter(|e| e["ph"] == "X") {
        let key = (e["pid"].as_u64().unwrap(), e["tid"].as_u64().unwrap());
        assert!(declared.contains(&key), "slice on an undeclared track: {e}");
        assert!(e["args"]["scheduler"].is_string(), "{e}");
        let (ts, dur) = (e["ts"].as_f64().unwrap(), e["dur"].as_f64().unwrap());
        assert!(dur > 0.0, "{e}");
        per_track.entry(key).or_default().push((ts, ts + dur));
    }
    for (track, v) in &mut per_track {
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        for w in v.windows(2) {
            assert!(w[0].1 <= w[1].0 + 1e-3, "overlapping slices on {track:?}: {w:?}");
        }
    }
    for pid in [hog_pid as u64, sleeper.pid as u64] {
        assert!(
            per_track.contains_key(&(2, pid)),
            "no slices for pid {pid}: {:?}; {} events",
            per_track.keys().collect::<Vec<_>>(),
            events.len()
        );
    }
    let marks = |what: &str| {
        events.iter().filter(|e| e["ph"] == "i" && e["pid"] == 2 && e["tid"] == sleeper.pid as u64 && e["name"] == what).count()
    };
    assert!(marks("wake") >= 5 && marks("block") >= 5, "wakes {} blocks {}", marks("wake"), marks("block"));
}

/// `vassal agent --trace FILE.pftrace` (issue 18 item 3): the agent's decisions as a
/// Perfetto protobuf trace, decoded with Perfetto's schema — every managed thread declared
/// with its process, per-CPU `sched_switch` events that chain (each switch's prev is the
/// CPU's previous next) with spans for a hog and a sleeper, each CPU ending idle,
/// the sleeper's spans ending in S when it blocked, and its `sched_waking` events.
#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn the_agent_writes_a_perfetto_trace() {
    if !root() {
        return;
    }
    let _serial = serial();
    let file = std::env::temp_dir().join(format!("vassal-agent-trace-{}.pftrace", std::process::id()));
    let agent = AgentProc::start_with("", &["--trace", file.to_str().unwrap()]);
    let start = now_ns() + 200 * MS;
    let until = start + SEC;
    let hog = workers::hog(until).unwrap();
    let mut sleeper = workers::periodic(start, 20 * MS, 5 * MS, 40, 0).unwrap();
    let mut c = agent.client();
    join(&mut c, hog.pid, &[]);
    join(&mut c, sleeper.pid, &[]);
    sleeper.wait();
    let (hog_pid, sleeper_pid) = (hog.pid, sleeper.pid);
    drop(hog);
    drop(agent); // SIGTERM: restores and writes the trace
    let bytes = std::fs::read(&file).expect("the trace was written");
    let _ = std::fs::remove_file(&file);
    let trace = vassal_perfetto::decode(&bytes).expect("a Perfetto trace");
    let tree = trace.packet.iter().find(|p| p.has_process_tree()).expect("a process tree").process_tree();
    let declared: BTreeMap<i32, i32> = tree.threads.iter().map(|t| (t.tid(), t.tgid())).collect();
    assert_eq!(declared.get(&hog_pid), Some(&hog_pid), "{declared:?}");
    assert_eq!(declared.get(&sleeper_pid), Some(&sleeper_pid), "{declared:?}");
    let mut spans: BTreeMap<i32, usize> = BTreeMap::new();
    let mut sleeps = 0;
    let mut wakes = 0;
    for p in trace.packet.iter().filter(|p| p.has_ftrace_events()) {
        let b = p.ftrace_events();
        let mut on = 0;
        let mut last = 0;
        for e in &b.event {
            assert!(e.timestamp() >= last, "cpu{} out of order", b.cpu());
            last = e.timestamp();
            if e.has_sched_switch() {
                let s = e.sched_switch();
                assert_eq!(s.prev_pid(), on, "cpu{}: switches chain", b.cpu());
                on = s.next_pid();
                if on != 0 {
                    assert!(declared.contains_key(&on), "undeclared {on}");
                    *spans.entry(on).or_default() += 1;
                }
                if s.prev_pid() == sleeper_pid && s.prev_state() == 1 {
                    sleeps += 1;
                }
            } else if e.has_sched_waking() && e.sched_waking().pid() == sleeper_pid {
                wakes += 1;
            }
        }
        assert_eq!(on, 0, "cpu{} ends idle", b.cpu());
    }
    assert!(spans.get(&hog_pid).is_some_and(|&n| n >= 1), "{spans:?}");
    assert!(spans.get(&sleeper_pid).is_some_and(|&n| n >= 5), "{spans:?}");
    assert!(sleeps >= 5 && wakes >= 5, "the sleeper: {sleeps} spans ending asleep, {wakes} wakes");
}

/// The event source (issue 6): with `events = "bpf"` the agent says it takes BPF events,
/// and a managed process that sleeps 40 ms of every 50 is seen blocked and seen running,
/// each wake acted on within a fraction of a tick (the dispatcher's latency from the
/// kernel's wake to its decision, p50); with `events = "poll"` the same states are seen
/// through /proc and no BPF event is counted.
#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn bpf_events_show_a_process_block_and_wake() {
    if !bpf_built() {
        return;
    }
    sees_block_and_wake("bpf");
}

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn polling_shows_a_process_block_and_wake() {
    sees_block_and_wake("poll");
}

fn sees_block_and_wake(events: &str) {
    if !root() {
        return;
    }
    let _serial = serial();
    // Its sleeps parked (SCHED_IDLE), so that every wake wakes the dispatcher: asleep in
    // the fair class (the default) the task's wakes are quiet, and its decisions come
    // at its blocks (`a_best_effort_sleepers_wakes_are_quiet_in_the_fair_class`).
    let agent = AgentProc::start(&format!("events = \"{events}\"\nbest_effort_sleep = \"idle\"\n"));
    let mut c = agent.client();
    let s0 = c.status().expect("status");
    assert_eq!(s0.events, events, "the agent reports its event source");
    let start = now_ns() + 200 * MS;
    let count = 30;
    let mut w = workers::periodic(start, 50 * MS, 10 * MS, count, 0).unwrap();
    join(&mut c, w.pid, &[]);
    let mut seen = BTreeSet::new();
    let mut row = None;
    let deadline = start + count as u64 * 50 * MS;
    while now_ns() < deadline {
        if let Some(r) = c.tasks().expect("tasks").into_iter().find(|t| t.pid == w.pid) {
            seen.insert(r.state.split(' ').next().unwrap_or("").to_string());
            row = Some(r);
        }
        std::thread::sleep(Duration::from_millis(3));
    }
    w.wait();
    let s1 = c.status().expect("status");
    let row = row.expect("the process was listed");
    eprintln!(
        "events = {events}: states seen {seen:?}; wake-to-decision p50 {} us, p99 {} us; {} BPF events; {} passes in {:.1} s",
        row.latency_p50_us,
        row.latency_p99_us,
        s1.bpf_events - s0.bpf_events,
        s1.passes - s0.passes,
        (s1.uptime_ns - s0.uptime_ns) as f64 / 1e9
    );
    assert!(seen.contains("blocked") && seen.contains("running"), "states seen: {seen:?}");
    if events == "bpf" {
        // Each of the 30 periods is a wake and a block.
        assert!(s1.bpf_events - s0.bpf_events >= count as u64, "{} BPF events for {count} periods", s1.bpf_events - s0.bpf_events);
        // From the kernel's wake (the BPF event's time) to the dispatcher's decision: one
        // wake-up of the dispatcher (p50 ~20-100 us on this VM), not a poll period.
        assert!(row.latency_p50_us < 1000.0, "wake-to-decision p50 {} us", row.latency_p50_us);
    } else {
        assert_eq!(s1.bpf_events, 0);
    }
}

/// Whether the agent was built with its BPF event source; if not, the test is counted
/// as skipped (vassal_agent::skip), saying why.
fn bpf_built() -> bool {
    if !vassal_agent::bpf::BUILT {
        vassal_agent::skip::skip("the agent was built without its BPF event source (no clang at build time)");
    }
    vassal_agent::bpf::BUILT
}

/// Quiet wakes over `periods` periods of a task that wakes and blocks once each, between
/// two `status` readings: each period is a wake and a block (at least two BPF events,
/// but for `slack` periods at the edges); only the blocks (and broker calls) wake the
/// dispatcher, and each block's pass replays the run that ended.
fn assert_wakes_were_quiet(s0: &Status, s1: &Status, periods: u64, slack: u64) {
    let (events, passes, replayed) = (s1.bpf_events - s0.bpf_events, s1.passes - s0.passes, s1.replayed_runs - s0.replayed_runs);
    assert!(events >= 2 * (periods - slack), "{events} BPF events for {periods} periods");
    assert!(replayed >= periods / 2, "{replayed} runs replayed in {periods} periods");
    assert!(passes * 4 < events * 3, "{passes} passes for {events} events: the wakes woke the dispatcher");
}

/// Quiet wakes (docs/agent.md, "Quiet wakes"): the wakes of a warped (armed) task do not
/// wake the dispatcher — the kernel already runs it — and each of its runs is told to the
/// policy when it blocks again; when it stops blocking (BVT Table 5's rt "failing into an
/// infinite loop") the POSIX timer on its CPU clock brings the pass that dispatches it.
#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn a_warped_tasks_quiet_wakes_are_replayed_and_bounded() {
    if !bpf_built() {
        return;
    }
    if !root() {
        return;
    }
    let _serial = serial();
    // A 4 ms tick: the bound is 4 ms of CPU, above the task's 2 ms bursts.
    let agent = AgentProc::start("events = \"bpf\"\ntick = \"4ms\"\n");
    let mut c = agent.client();
    let (count, period) = (40, 25 * MS);
    let start = now_ns() + 300 * MS;
    let periodic_end = start + count as u64 * period;
    let spin_to = periodic_end + 1500 * MS;
    let hog = workers::hog(spin_to + SEC).unwrap();
    let mut w = workers::periodic(start, period, 2 * MS, count, spin_to).unwrap();
    join(&mut c, hog.pid, &[]);
    join(&mut c, w.pid, &[("warp", SEC as i64), ("warp_limit", 10 * MS as i64), ("unwarp", SEC as i64)]);
    kernel::sleep_until(start);
    let s0 = c.status().expect("status");
    // Before the last release: from then on no broker call wakes the dispatcher.
    let last_release = periodic_end - period;
    kernel::sleep_until(last_release - 5 * MS);
    let s1 = c.status().expect("status");
    let periods = count as u64 - 1;
    eprintln!(
        "{periods} periods: {} BPF events, {} passes, {} runs replayed, {} bounds fired",
        s1.bpf_events - s0.bpf_events,
        s1.passes - s0.passes,
        s1.replayed_runs - s0.replayed_runs,
        s1.bounds_fired - s0.bounds_fired
    );
    assert_wakes_were_quiet(&s0, &s1, periods, 2);
    // After its last release it loops without blocking, and nothing but its CPU-clock
    // bound tells the agent: the hog alone has no slice ends, and the once-a-second
    // rescans come ~1 s and ~2 s after the joins, while the loop starts ~1.3 s after.
    kernel::sleep_until(last_release + 300 * MS);
    let s2 = c.status().expect("status");
    let row = c.tasks().expect("tasks").into_iter().find(|t| t.pid == w.pid).expect("listed");
    eprintln!("looping task: '{}' after its last release; {} bounds fired", row.state, s2.bounds_fired - s1.bounds_fired);
    assert!(s2.bounds_fired > s1.bounds_fired, "no CPU-clock bound fired for the looping task");
    assert_ne!(row.state, "blocked", "the agent did not see the looping warped task run");
    w.kill();
    drop(hog);
}

/// A blocked best-effort task sleeps in the fair class (`best_effort_sleep = "fair"`, the
/// default; docs/agent.md, "A blocked best-effort thread"): SCHED_OTHER at its own nice,
/// so the kernel runs it the instant it wakes, as without the agent; with BPF events
/// neither its wakes (it has no warp) nor, while no thread waits for a CPU (a hog beside
/// it on two CPUs), its blocks wake the dispatcher, which would preempt the very tasks
/// it woke for: the policy hears of its runs and sleeps at the passes its CPU-clock bound
/// brings (a sleep and a wake are replayed in order).
#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn a_best_effort_sleepers_wakes_are_quiet_in_the_fair_class() {
    if !bpf_built() {
        return;
    }
    if !root() {
        return;
    }
    let _serial = serial();
    let agent = AgentProc::start("events = \"bpf\"\ntick = \"4ms\"\n");
    let mut c = agent.client();
    let (count, period) = (40, 25 * MS);
    let start = now_ns() + 300 * MS;
    let end = start + count as u64 * period;
    let hog = workers::hog(end + SEC).unwrap();
    let w = workers::periodic(start, period, 2 * MS, count, 0).unwrap();
    join(&mut c, hog.pid, &[]);
    join(&mut c, w.pid, &[]);
    kernel::sleep_until(start);
    let s0 = c.status().expect("status");
    // Between its bursts (2 ms from each release) it is blocked: its class then, and
    // what `ctl tasks` says (its block was quiet: the listing's own pass tells it).
    let mut asleep = Vec::new();
    let mut listed = Vec::new();
    for k in [10u64, 20, 30] {
        kernel::sleep_until(start + k * period - 5 * MS);
        asleep.push(policy(w.pid));
        listed.push(c.tasks().expect("tasks").into_iter().find(|t| t.pid == w.pid).map(|t| t.state).unwrap_or_default());
    }
    kernel::sleep_until(end - period - 5 * MS);
    // Quiet blocks and wakes wait in the ring buffer until a pass reads them, and
    // `status` counts the events read: the listing's pass reads the last ones first (a
    // CI run counted 68 of 78 without it, the events of the last few periods unread).
    c.tasks().expect("tasks");
    let s1 = c.status().expect("status");
    let periods = count as u64 - 1;
    let mut lat: Vec<u64> = workers::periodic_results(&w).iter().map(|r| r.0 / 1000).collect();
    eprintln!(
        "{periods} periods: {} BPF events, {} passes, {} runs and {} sleeps replayed, {} bounds fired; \
         classes asleep {asleep:?}; release-to-run p50 {} us, p99 {} us",
        s1.bpf_events - s0.bpf_events,
        s1.passes - s0.passes,
        s1.replayed_runs - s0.replayed_runs,
        s1.replayed_sleeps - s0.replayed_sleeps,
        s1.bounds_fired - s0.bounds_fired,
        workers::quantile(&mut lat, 0.5),
        workers::quantile(&mut lat, 0.99)
    );
    assert!(asleep.iter().all(|&p| p == libc::SCHED_OTHER), "classes while asleep: {asleep:?} (SCHED_OTHER is {})", libc::SCHED_OTHER);
    assert!(listed.iter().all(|s| s == "blocked"), "listed while asleep: {listed:?}");
    let (events, passes) = (s1.bpf_events - s0.bpf_events, s1.passes - s0.passes);
    assert!(events >= 2 * (periods - 4), "{events} BPF events for {periods} periods");
    // One pass per period, at its block, was the rule before blocks were quiet too.
    assert!(passes * 3 < events, "{passes} passes for {events} events: the blocks woke the dispatcher");
    assert!(s1.replayed_sleeps > s0.replayed_sleeps, "no sleep told to the policy");
    drop(w);
    drop(hog);
}

/// `vassal run` (issue 6 item 2): the command is joined, with its parameters, before it
/// execs; it runs under the agent (warped, so armed while it sleeps); `vassal run` exits
/// with the command's exit status; and the agent forgets the process once it has exited.
#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn vassal_run_starts_a_command_under_the_agent() {
    if !root() {
        return;
    }
    let _serial = serial();
    let agent = AgentProc::start("");
    let mut run = Command::new("timeout")
        .args(["-s", "KILL", "20"])
        .arg(env!("CARGO_BIN_EXE_vassal"))
        .args(["run", "--socket", &agent.sock, "--warp", "20ms", "--", "sh", "-c", "sleep 0.5; exit 7"])
        .spawn()
        .unwrap();
    let mut c = agent.client();
    let mut seen = None;
    wait_for(Duration::from_secs(3), || {
        seen = c.tasks().expect("tasks").into_iter().find(|t| t.params.get("warp") == Some(&(20 * MS as i64)));
        seen.is_some()
    });
    let row = seen.expect("the command was never managed by the agent");
    eprintln!("vassal run: pid {} '{}', kernel '{}'", row.pid, row.state, row.kernel);
    assert_eq!(row.sched, "bvt");
    let status = run.wait().unwrap();
    assert_eq!(status.code(), Some(7), "vassal run's exit status is the command's");
    assert!(
        wait_for(Duration::from_secs(3), || c.tasks().expect("tasks").iter().all(|t| t.pid != row.pid)).is_some(),
        "the agent still lists the exited process"
    );
}
