//! A fuzz target for the wire protocol (issue 14 item 6): structured mutations of valid
//! calls, decoded and handled as an unprivileged caller, about processes that caller
//! must never touch — PID 1, kthreadd (PID 2) and its kernel threads, the agent's own
//! process and threads (the test is the agent here: the broker runs in-process), and a
//! process of another user. Every call that could change something must be refused (or
//! be malformed), and nothing may change: the agent manages nothing, its ledger stays
//! empty, its hierarchy is as configured, and those processes keep their scheduling.
//!
//! Bounded for the test suite (scripts/test.sh runs it through `cargo test`): 3,000
//! cases by default, in a few seconds; `VASSAL_FUZZ_CASES=200000 cargo test --release -p
//! vassal-agent --test fuzz` runs longer.
//!
//! As root, `join` about PID 1, kthreadd and its kernel threads, or the agent's own
//! process and threads is refused too (the agent never manages the mechanism, issue 14
//! item 4): `root_cannot_make_the_agent_manage_the_mechanism`.

use std::collections::BTreeMap;
use std::os::unix::process::CommandExt;

use proptest::prelude::*;
use proptest::test_runner::{Config as RunnerConfig, TestCaseError, TestRunner};
use vassal_agent::broker::{handle, Caller, Shared};
use vassal_agent::config::{UsageSpec, Value};
use vassal_agent::guardian::Ledger;
use vassal_agent::kernel;
use vassal_agent::state::Agent;
use vassal_agent::wire::{decode, encode, Answer, Call};
use vassal_agent::Config;
use vassal_core::Request;

/// The tests watch this process's own threads, which the other test's broker calls raise
/// for a moment (the priority ceiling): one at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn cases() -> u32 {
    std::env::var("VASSAL_FUZZ_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(3000)
}

/// Kernel threads: kthreadd's children (at most 16 of them).
fn kernel_threads() -> Vec<i32> {
    let kids = std::fs::read_to_string("/proc/2/task/2/children").unwrap_or_default();
    kids.split_whitespace().filter_map(|s| s.parse().ok()).take(16).collect()
}

/// This process's threads (the in-process agent's own tids).
fn own_tids() -> Vec<i32> {
    std::fs::read_dir("/proc/self/task").map(|d| d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok()).collect()).unwrap_or_default()
}

fn pid_max() -> i32 {
    std::fs::read_to_string("/proc/sys/kernel/pid_max").ok().and_then(|s| s.trim().parse().ok()).unwrap_or(4_194_304)
}

/// A sleeping process of another user (uid 65533), if this test may start one (root).
struct OtherUser(Option<std::process::Child>);

impl OtherUser {
    fn start() -> OtherUser {
        if !kernel::is_root() {
            return OtherUser(None);
        }
        OtherUser(std::process::Command::new("sleep").arg("60").uid(65533).gid(65533).spawn().ok())
    }
    fn pid(&self) -> Option<i32> {
        self.0.as_ref().map(|c| c.id() as i32)
    }
}

impl Drop for OtherUser {
    fn drop(&mut self) {
        if let Some(c) = &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn name() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec!["weight", "warp", "warp_limit", "unwarp", "timed", "rtserver", "default", "bvt", "", "ts"])
            .prop_map(str::to_string),
        "[a-z_]{1,10}",
    ]
}

fn params() -> impl Strategy<Value = BTreeMap<String, i64>> {
    prop::collection::btree_map(name(), prop_oneof![Just(0i64), Just(1), Just(i64::MAX), Just(-1), any::<i64>()], 0..3)
}

fn request() -> impl Strategy<Value = Request> {
    let ns = prop_oneof![Just(0u64), Just(1_000_000), Just(u64::MAX), any::<u64>()];
    prop_oneof![
        ns.clone().prop_map(|delay| Request::Set { delay }),
        ns.clone().prop_map(|at| Request::SetAt { at }),
        any::<bool>().prop_map(|on| Request::Warp { on }),
        (name(), any::<i64>()).prop_map(|(name, value)| Request::Param { name, value }),
        (prop_oneof![Just(0.25), Just(1.0), Just(-1.0), Just(f64::MAX)], ns.clone())
            .prop_map(|(util, period)| Request::Reserve { util, period }),
        Just(Request::Free),
        (any::<f64>().prop_filter("finite", |f| f.is_finite()), ns.clone()).prop_map(|(util, period)| Request::Modify { util, period }),
        Just(Request::Avail),
        (ns.clone(), ns.clone(), ns).prop_map(|(start, need, deadline)| Request::Deadline { start, need, deadline }),
    ]
}

/// A valid call about one of `pids`.
fn call(pids: Vec<i32>) -> impl Strategy<Value = Call> {
    let pid = prop::sample::select(pids.clone());
    // A thread named too (issue 17: `--tid`): one of the same ids, another process's
    // thread or the pid itself.
    let tid = prop::option::of(prop::sample::select(pids));
    let sched = || prop::option::of(name());
    let path = prop::sample::select(vec!["/dev/zero", "/etc/passwd", "/proc/self/mem", "relative.wasm", "/tmp"]).prop_map(str::to_string);
    prop_oneof![
        (pid.clone(), tid.clone(), sched(), params()).prop_map(|(pid, tid, sched, params)| Call::Join { pid, tid, sched, params }),
        (pid.clone(), tid.clone()).prop_map(|(pid, tid)| Call::Leave { pid, tid }),
        pid.clone().prop_map(|pid| Call::Release { pid }),
        (pid.clone(), tid.clone(), name(), any::<i64>()).prop_map(|(pid, tid, name, value)| Call::Param { pid, tid, name, value }),
        (pid, tid, sched(), request()).prop_map(|(pid, tid, sched, request)| Call::Message { sched, pid, tid, request }),
        Just(Call::Hierarchy),
        Just(Call::Tasks),
        Just(Call::Status),
        (name(), name(), sched()).prop_map(|(name, kind, above)| Call::Register {
            name,
            kind,
            params: [("x".to_string(), Value::Int(1))].into(),
            usage: UsageSpec::Reserved { cpus: 0.1 },
            above,
        }),
        name().prop_map(|name| Call::Unregister { name }),
        (path, name(), sched()).prop_map(|(path, name, above)| Call::Load {
            path,
            name,
            above,
            below: None,
            params: BTreeMap::new(),
            watchdog_ns: Some(0)
        }),
        name().prop_map(|name| Call::Unload { name }),
    ]
}

/// How a valid call's line is mutated; the numbers pick positions and values.
#[derive(Clone, Debug)]
enum Mutation {
    None,
    /// The pid field written another way: as a string, a float, an exponent, plus 2³²,
    /// negated, null.
    PidForm(u8),
    /// Another corpus pid instead.
    OtherPid(i32),
    /// A second "pid" key (first or last wins?).
    DuplicatePid(i32),
    /// A field the caller has no say in (its uid, its pid).
    Claim(u8),
    /// Another op with the same fields.
    Op(u8),
    /// `"pid"` spelt with a unicode escape.
    EscapedKey,
    Truncate(usize),
    Byte(usize, u8),
    Spaces(usize),
    Wrap(u8),
}

fn mutation(pids: Vec<i32>) -> impl Strategy<Value = Mutation> {
    let pid = prop::sample::select(pids);
    prop_oneof![
        Just(Mutation::None),
        any::<u8>().prop_map(Mutation::PidForm),
        pid.clone().prop_map(Mutation::OtherPid),
        pid.prop_map(Mutation::DuplicatePid),
        any::<u8>().prop_map(Mutation::Claim),
        any::<u8>().prop_map(Mutation::Op),
        Just(Mutation::EscapedKey),
        any::<usize>().prop_map(Mutation::Truncate),
        (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Mutation::Byte(i, b)),
        any::<usize>().prop_map(Mutation::Spaces),
        any::<u8>().prop_map(Mutation::Wrap),
    ]
}

const OPS: [&str; 12] =
    ["join", "leave", "release", "param", "message", "hierarchy", "tasks", "register", "unregister", "load", "unload", "status"];

fn mutate(line: &str, m: &Mutation) -> Vec<u8> {
    let pid_value = || -> Option<(usize, usize)> {
        let start = line.find("\"pid\":")? + 6;
        let len = line[start..].find([',', '}']).unwrap_or(line.len() - start);
        Some((start, start + len))
    };
    let close = line.rfind('}').unwrap_or(line.len());
    let out = match m {
        Mutation::None => line.to_string(),
        Mutation::PidForm(k) => match pid_value() {
            Some((a, b)) => {
                let p: i64 = line[a..b].parse().unwrap_or(1);
                let form = match k % 7 {
                    0 => format!("\"{p}\""),
                    1 => format!("{p}.0"),
                    2 => format!("{p}e0"),
                    3 => (p + (1i64 << 32)).to_string(),
                    4 => (-p).to_string(),
                    5 => "null".to_string(),
                    _ => format!("0{p}"),
                };
                format!("{}{form}{}", &line[..a], &line[b..])
            }
            None => line.to_string(),
        },
        Mutation::OtherPid(q) => match pid_value() {
            Some((a, b)) => format!("{}{q}{}", &line[..a], &line[b..]),
            None => line.to_string(),
        },
        Mutation::DuplicatePid(q) => format!("{},\"pid\":{q}{}", &line[..close], &line[close..]),
        Mutation::Claim(k) => {
            let field = match k % 4 {
                0 => "\"uid\":0",
                1 => "\"caller\":{\"uid\":0,\"pid\":1}",
                2 => "\"root\":true",
                _ => "\"sched\":\"default\"",
            };
            format!("{},{field}{}", &line[..close], &line[close..])
        }
        Mutation::Op(k) => match line.find("\"op\":\"") {
            Some(a) => {
                let a = a + 6;
                let b = a + line[a..].find('"').unwrap_or(0);
                format!("{}{}{}", &line[..a], OPS[*k as usize % OPS.len()], &line[b..])
            }
            None => line.to_string(),
        },
        Mutation::EscapedKey => line.replacen("\"pid\"", "\"p\\u0069d\"", 1),
        Mutation::Truncate(i) => line[..line.floor_char_boundary(i % (line.len() + 1))].to_string(),
        Mutation::Byte(i, b) => {
            let mut v = line.as_bytes().to_vec();
            let i = i % v.len().max(1);
            if let Some(x) = v.get_mut(i) {
                *x = if *b == b'\n' { b' ' } else { *b };
            }
            return v;
        }
        Mutation::Spaces(i) => {
            let i = line.floor_char_boundary(i % (line.len() + 1));
            format!("{} \t {}", &line[..i], &line[i..])
        }
        Mutation::Wrap(k) => match k % 3 {
            0 => format!("[{line}]"),
            1 => format!("{{\"op\":\"status\",\"call\":{line}}}"),
            _ => format!("{line}{line}"),
        },
    };
    out.into_bytes()
}

/// The process a call is about, if any.
fn target(c: &Call) -> Option<i32> {
    match c {
        Call::Join { pid, .. } | Call::Leave { pid, .. } | Call::Release { pid } | Call::Param { pid, .. } | Call::Message { pid, .. } => {
            Some(*pid)
        }
        _ => None,
    }
}

fn read_only(c: &Call) -> bool {
    matches!(c, Call::Hierarchy | Call::Tasks | Call::Status)
}

#[test]
fn mutated_calls_from_an_unprivileged_caller_are_refused_and_change_nothing() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let other = OtherUser::start();
    let me = std::process::id() as i32;
    let beyond = pid_max() + 1; // no such process, ever
    let mut pids = vec![1, 2, me, beyond, i32::MAX];
    pids.extend(kernel_threads());
    pids.extend(own_tids());
    pids.extend(other.pid());
    pids.sort_unstable();
    pids.dedup();
    // Callers: ordinary uids that own none of those processes.
    let my_uid = unsafe { libc::getuid() };
    let callers: Vec<u32> = [65534u32, 1000, 4242].into_iter().filter(|&u| u != my_uid).collect();
    // The real processes' scheduling before.
    let watched: Vec<i32> = pids.iter().copied().filter(|&p| p < beyond).collect();
    let before: Vec<_> = watched.iter().map(|&p| kernel::get_sched(p).ok()).collect();

    let agent = Agent::new(Config::default(), Ledger::new().unwrap(), kernel::now_ns()).unwrap();
    let sh = Shared::new(agent);
    let schedulers = |sh: &Shared| match sh.with_agent(|a| a.hierarchy()) {
        Answer::Hierarchy { schedulers } => schedulers.iter().map(|s| s.name.clone()).collect::<Vec<_>>(),
        a => panic!("{a:?}"),
    };
    let hierarchy = schedulers(&sh);

    let mut runner = TestRunner::new(RunnerConfig { cases: cases(), failure_persistence: None, ..RunnerConfig::default() });
    // Calls decoded and handled, lines malformed.
    let handled = std::cell::Cell::new([0usize; 2]);
    let count = |i: usize| {
        let mut h = handled.get();
        h[i] += 1;
        handled.set(h);
    };
    let strategy = (call(pids.clone()), mutation(pids.clone()), prop::sample::select(callers));
    let result = runner.run(&strategy, |(c, m, uid)| {
        let line = mutate(encode(&c).trim_end(), &m);
        let caller = Caller { pid: me, uid };
        match decode(&line) {
            Err(e) => {
                prop_assert!(!e.is_empty());
                count(1);
            }
            Ok(call) => {
                // Only calls about the corpus: a mutation may name a process nobody
                // chose (a byte flip in a pid), which might be the caller's own.
                if target(&call).is_some_and(|p| !pids.contains(&p)) {
                    return Ok(());
                }
                count(0);
                let answer = handle(&sh, caller, call.clone());
                if !read_only(&call) {
                    prop_assert!(
                        matches!(answer, Answer::Refused { .. } | Answer::Error { .. }),
                        "{} as uid {uid}: {:?} was not refused: {answer:?}",
                        String::from_utf8_lossy(&line),
                        call
                    );
                }
            }
        }
        let (managed, ledger) = sh.with_agent(|a| (a.managed(), a.ledger_records()));
        prop_assert_eq!((managed, ledger), (0, 0), "after {}", String::from_utf8_lossy(&line));
        if schedulers(&sh) != hierarchy {
            return Err(TestCaseError::fail(format!("the hierarchy changed after {}", String::from_utf8_lossy(&line))));
        }
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    let after: Vec<_> = watched.iter().map(|&p| kernel::get_sched(p).ok()).collect();
    for ((p, b), a) in watched.iter().zip(&before).zip(&after) {
        // A thread of ours or a kernel thread may have ended meanwhile; one that is still
        // there has the scheduling it had.
        if let (Some(b), Some(a)) = (b, a) {
            assert_eq!(b, a, "process {p}'s scheduling changed");
        }
    }
    let handled = handled.get();
    eprintln!(
        "{} cases over {} pids ({} kernel threads): {} calls handled, {} malformed",
        cases(),
        pids.len(),
        kernel_threads().len(),
        handled[0],
        handled[1]
    );
    assert!(handled[0] > cases() as usize / 4, "most mutants still decode: {handled:?}");
}

#[test]
fn root_cannot_make_the_agent_manage_the_mechanism() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let me = std::process::id() as i32;
    let mut pids = vec![1, 2, me];
    pids.extend(kernel_threads());
    pids.extend(own_tids());
    let before: Vec<_> = pids.iter().map(|&p| kernel::get_sched(p).ok()).collect();
    let agent = Agent::new(Config::default(), Ledger::new().unwrap(), kernel::now_ns()).unwrap();
    let sh = Shared::new(agent);
    let root = Caller { pid: me, uid: 0 };
    for &pid in &pids {
        for params in [BTreeMap::new(), [("warp".to_string(), 20_000_000)].into()] {
            let answer = handle(&sh, root, Call::Join { pid, tid: None, sched: None, params });
            // A thread listed above (another test's, a kernel worker) may have exited since.
            let gone = !std::path::Path::new(&format!("/proc/{pid}")).exists();
            if gone && matches!(&answer, Answer::Refused { reason } if reason.contains("no process")) {
                continue;
            }
            assert!(
                matches!(&answer, Answer::Refused { reason } if reason.contains("never managed") || reason.contains("a thread of process")),
                "root's join of {pid}: {answer:?}"
            );
        }
    }
    assert_eq!(sh.with_agent(|a| (a.managed(), a.ledger_records())), (0, 0));
    let after: Vec<_> = pids.iter().map(|&p| kernel::get_sched(p).ok()).collect();
    for ((p, b), a) in pids.iter().zip(&before).zip(&after) {
        if let (Some(b), Some(a)) = (b, a) {
            assert_eq!(b, a, "process {p}'s scheduling changed");
        }
    }
}
