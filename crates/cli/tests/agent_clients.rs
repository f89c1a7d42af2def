//! The agent's connections under abuse (issue 14, items 3 and 5). Root-only (they start an
//! agent and connect as another uid); skipped with a message otherwise. Every agent runs
//! under `timeout`, every flooding child has a deadline and is killed and reaped on drop.
//!
//! - a flood of hundreds of stalled connections by one ordinary user (some send nothing,
//!   some half a call; each one closed is opened again) while root's `status` keeps
//!   answering quickly, and the agent's memory is back to its level afterwards;
//! - a client over its per-uid or the global limit reads the refusal (not a broken
//!   pipe), and root is never refused for what users hold;
//! - a client sending half a call, or nothing, is dropped after `client_timeout`; one not
//!   reading its answers is dropped too; the client library reconnects transparently
//!   after an idle close;
//! - `ctl load` of a FIFO or /dev/zero is refused at once, the broker still serving;
//! - `vassal ctl hierarchy` into a closed pipe dies of SIGPIPE quietly;
//! - a native module that panics is ejected, and the agent goes on.

#[path = "common/agent_proc.rs"]
mod agent_proc;

use std::ffi::CString;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use agent_proc::{root, serial, AgentProc};
use vassal_agent::client::Client;
use vassal_agent::kernel::now_ns;

const SEC: u64 = 1_000_000_000;

/// The agent's resident memory, KiB.
fn rss_kib(pid: i32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    s.lines().find_map(|l| l.strip_prefix("VmRSS:")).and_then(|v| v.split_whitespace().next()?.parse().ok()).unwrap_or(0)
}

/// What a flooding child saw.
#[derive(Debug, Default, Clone, Copy)]
struct FloodReport {
    connects: u64,
    refused: u64,
    closing: u64,
    errors: u64,
}

/// A forked child that runs as `uid` and holds `n` connections to the agent until its
/// deadline: every `half`-th one (1-based index odd when `half` is 2, ...) sends half a
/// call, the others nothing. With `reopen`, each connection the agent ends (after a
/// refusal, a `closing` line, an error) is opened again at once — a flood; without, it
/// stays closed. The child only makes async-signal-safe calls (no allocation after the
/// fork), and exits at its deadline; it is killed and reaped on drop.
struct Flood {
    pid: i32,
    report: Option<OwnedFd>,
}

impl Flood {
    fn start(sock: &str, uid: u32, n: usize, half: usize, secs: f64, reopen: bool) -> Flood {
        // Everything the child needs, made before the fork.
        let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
        addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
        for (d, s) in addr.sun_path.iter_mut().zip(sock.as_bytes()) {
            *d = *s as libc::c_char;
        }
        let mut fds = vec![-1i32; n];
        let mut pfds = vec![libc::pollfd { fd: -1, events: libc::POLLIN, revents: 0 }; n];
        let half_line = b"{\"op\":\"sta";
        let mut pipe = [0i32; 2];
        assert_eq!(unsafe { libc::pipe2(pipe.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
        let deadline_ns = now_ns() + (secs * 1e9) as u64;
        // SAFETY: the child below makes only async-signal-safe calls and _exits.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork");
        if pid == 0 {
            unsafe {
                libc::close(pipe[0]);
                if libc::setgid(uid) != 0 || libc::setuid(uid) != 0 {
                    libc::_exit(3);
                }
                let mut rep = [0u64; 4];
                let open = |i: usize, rep: &mut [u64; 4]| -> i32 {
                    let fd = libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
                    if fd < 0 {
                        return -1;
                    }
                    let len = size_of::<libc::sockaddr_un>() as libc::socklen_t;
                    if libc::connect(fd, (&addr as *const libc::sockaddr_un).cast(), len) != 0 {
                        libc::close(fd);
                        return -1;
                    }
                    rep[0] += 1;
                    if half > 0 && i % half == half - 1 {
                        libc::send(fd, half_line.as_ptr().cast(), half_line.len(), libc::MSG_NOSIGNAL);
                    }
                    fd
                };
                for (i, fd) in fds.iter_mut().enumerate() {
                    *fd = open(i, &mut rep);
                }
                let now = || {
                    let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
                    libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t);
                    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
                };
                let mut buf = [0u8; 256];
                while now() < deadline_ns {
                    for (p, &fd) in pfds.iter_mut().zip(fds.iter()) {
                        p.fd = fd;
                        p.revents = 0;
                    }
                    libc::poll(pfds.as_mut_ptr(), n as libc::nfds_t, 50);
                    for i in 0..n {
                        if fds[i] < 0 {
                            if reopen {
                                fds[i] = open(i, &mut rep);
                            }
                            continue;
                        }
                        if pfds[i].revents == 0 {
                            continue;
                        }
                        let got = libc::recv(fds[i], buf.as_mut_ptr().cast(), buf.len(), libc::MSG_DONTWAIT);
                        if got > 0 {
                            let line = &buf[..got as usize];
                            if line.starts_with(b"{\"reply\":\"refused\"") {
                                rep[1] += 1;
                            } else if line.starts_with(b"{\"reply\":\"closing\"") {
                                rep[2] += 1;
                            } else {
                                rep[3] += 1;
                            }
                        }
                        libc::close(fds[i]);
                        fds[i] = if reopen { open(i, &mut rep) } else { -1 };
                    }
                }
                libc::write(pipe[1], rep.as_ptr().cast(), size_of_val(&rep));
                libc::_exit(0);
            }
        }
        unsafe { libc::close(pipe[1]) };
        Flood { pid, report: Some(unsafe { OwnedFd::from_raw_fd(pipe[0]) }) }
    }

    /// Waits for the child's deadline; what it saw.
    fn finish(mut self) -> FloodReport {
        let mut status = 0;
        unsafe { libc::waitpid(self.pid, &mut status, 0) };
        self.pid = 0;
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "the flooding child failed: {status:#x}");
        let mut f = std::fs::File::from(self.report.take().unwrap());
        let mut b = [0u8; 32];
        f.read_exact(&mut b).unwrap();
        let w = |i: usize| u64::from_ne_bytes(b[i * 8..i * 8 + 8].try_into().unwrap());
        FloodReport { connects: w(0), refused: w(1), closing: w(2), errors: w(3) }
    }
}

impl Drop for Flood {
    fn drop(&mut self) {
        if self.pid > 0 {
            unsafe {
                libc::kill(self.pid, libc::SIGKILL);
                libc::waitpid(self.pid, std::ptr::null_mut(), 0);
            }
        }
    }
}

fn quantile(sorted: &[f64], q: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn a_flood_of_stalled_connections_neither_starves_root_nor_keeps_memory() {
    if !root() {
        return;
    }
    let _serial = serial();
    // Idle connections are dropped after 2 s here, so the flood's admitted ones turn over.
    let agent = AgentProc::start("client_timeout = \"2s\"\n");
    let apid = agent.agent_pid();
    // Root's status over a new connection each time (as `vassal ctl status`), ms.
    let status_ms = || {
        let t = Instant::now();
        let mut c = Client::connect(&agent.sock).expect("root connects");
        c.status().expect("root's status");
        t.elapsed().as_secs_f64() * 1e3
    };
    // The machine's own noise, without a flood: 20 calls.
    let mut quiet: Vec<f64> = (0..20)
        .map(|_| {
            std::thread::sleep(Duration::from_millis(20));
            status_ms()
        })
        .collect();
    quiet.sort_by(f64::total_cmp);
    std::thread::sleep(Duration::from_millis(300));
    let before = rss_kib(apid);

    // 300 connections of uid 65534, every other one sending half a call, reopened as soon
    // as the agent ends them, for 7 s.
    let flood_secs = 7.0;
    let flood = Flood::start(&agent.sock, 65534, 300, 2, flood_secs, true);
    let t0 = Instant::now();
    std::thread::sleep(Duration::from_millis(300));
    // Root's status 40 times spread over the flood; the agent's memory sampled at each.
    let mut lat_ms = Vec::new();
    let mut during = 0;
    while lat_ms.len() < 40 {
        lat_ms.push(status_ms());
        during = during.max(rss_kib(apid));
        std::thread::sleep(Duration::from_millis(100));
    }
    let calls_took = t0.elapsed().as_secs_f64();
    let report = flood.finish();
    // Every connection of the flood gone: closed by the child at its exit; the agent
    // drops what it drains within DRAIN_FOR (1 s).
    std::thread::sleep(Duration::from_millis(1500));
    let mut c = agent.client();
    c.status().unwrap();
    let after = rss_kib(apid);
    let mut sorted = lat_ms.clone();
    sorted.sort_by(f64::total_cmp);
    let (p50, p95, max) = (quantile(&sorted, 0.5), quantile(&sorted, 0.95), sorted[sorted.len() - 1]);
    let (q50, q95) = (quantile(&quiet, 0.5), quantile(&quiet, 0.95));
    eprintln!(
        "flood: {report:?}; root's status (connect + call) over {} calls: p50 {p50:.2} ms, p95 {p95:.2} ms, max {max:.2} ms (without the flood: p50 {q50:.2} ms, p95 {q95:.2} ms); agent RSS before {before} KiB, during (max) {during} KiB, after {after} KiB",
        lat_ms.len()
    );
    assert!(calls_took < flood_secs, "the calls were all made during the flood ({calls_took:.1} s)");
    assert!(report.connects > 300 && report.refused > 100, "the flood was refused over the limit: {report:?}");
    assert!(report.closing + report.errors > 0, "stalled connections were dropped at the timeout: {report:?}");
    // Robust to a 2-CPU VM's noise (measured: p50 6 ms, p95 15 ms, max 15-26 ms with
    // the machine at a load of 25 from other work): all but one call within 100 ms
    // (p97.5 of 40) — or three times the quiet p95 if the machine is that loaded —, none
    // beyond a second. Before, root failed with a broken pipe for the flood's length.
    let limit = 100f64.max(3.0 * q95);
    assert!(sorted[sorted.len() - 2] <= limit, "root's status was slow during the flood (limit {limit:.0} ms): {lat_ms:?}");
    assert!(max <= 1000.0, "root's status was stalled during the flood: {lat_ms:?}");
    assert!(p50 <= limit / 4.0, "{lat_ms:?}");
    // Memory: a stalled connection costs no thread, so the flood does not grow the agent
    // (before: 64 threads' locked stacks, +18 MB, kept).
    assert!(during <= before + 2048, "RSS grew during the flood: {before} -> {during} KiB");
    assert!(after <= before + 512, "RSS did not return after the flood: {before} -> {after} KiB");
}

/// `n` connections of `uid` held (not reopened) for `secs`; returns once they are made.
fn hold(sock: &str, uid: u32, n: usize, secs: f64) -> Flood {
    let f = Flood::start(sock, uid, n, 0, secs, false);
    std::thread::sleep(Duration::from_millis(300));
    f
}

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn a_client_over_its_limit_reads_the_refusal_and_root_always_gets_in() {
    if !root() {
        return;
    }
    let _serial = serial();
    let agent = AgentProc::start("max_clients = 16\nmax_clients_per_uid = 8\n");
    let nobody = hold(&agent.sock, 65534, 8, 10.0);
    // The ninth of uid 65534 is refused, and reads why (through the client library).
    let (ok, out) = agent.ctl_as(65534, &["status"]);
    assert!(!ok && out.contains("refused: too many connections for uid 65534 (at most 8 at once)"), "{out}");
    assert!(!out.contains("Broken pipe") && !out.contains("reset"), "{out}");
    // A raw client that reads before writing sees the same line.
    let raw = {
        let f = Flood::start(&agent.sock, 65534, 1, 0, 1.0, false);
        f.finish()
    };
    assert_eq!((raw.refused, raw.errors), (1, 0), "{raw:?}");
    // Another uid is not limited by uid 65534's connections...
    let (ok, out) = agent.ctl_as(65533, &["status"]);
    assert!(ok, "{out}");
    // ... until ordinary users together hold max_clients.
    let other = hold(&agent.sock, 65533, 8, 10.0);
    let (ok, out) = agent.ctl_as(65532, &["status"]);
    assert!(!ok && out.contains("refused: too many clients"), "{out}");
    // Root is counted apart: never refused for what users hold.
    for _ in 0..20 {
        let (ok, out) = agent.ctl(&["status"]);
        assert!(ok, "{out}");
    }
    let mut roots: Vec<Client> = (0..16).map(|_| agent.client()).collect();
    for c in &mut roots {
        c.status().expect("root's connections beyond the users' limit");
    }
    // Once uid 65534's connections close, it gets in again.
    drop(nobody);
    std::thread::sleep(Duration::from_millis(200));
    let (ok, out) = agent.ctl_as(65534, &["status"]);
    assert!(ok, "{out}");
    drop(other);
}

/// Reads until EOF (at most 5 s): the lines read, and when EOF came.
fn read_to_eof(s: &mut UnixStream, t0: Instant) -> (String, Duration) {
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut text = String::new();
    let _ = s.read_to_string(&mut text);
    (text, t0.elapsed())
}

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn a_stalled_client_is_dropped_after_the_timeout() {
    if !root() {
        return;
    }
    let _serial = serial();
    let agent = AgentProc::start("client_timeout = \"1s\"\n");
    let within = |d: Duration| d >= Duration::from_millis(950) && d <= Duration::from_millis(1600);
    // Half a call: an error saying so, then the end.
    let t0 = Instant::now();
    let mut s = UnixStream::connect(&agent.sock).unwrap();
    s.write_all(b"{\"op\":\"sta").unwrap();
    let (text, took) = read_to_eof(&mut s, t0);
    eprintln!("half a call: {text:?} after {took:?}");
    assert_eq!(text, "{\"reply\":\"error\",\"message\":\"incomplete call: no end of line within 1s\"}\n");
    assert!(within(took), "{took:?}");
    // Half a call sent a byte at a time, each within the timeout: the whole call must
    // come within it, so this is dropped as well.
    let t0 = Instant::now();
    let mut s = UnixStream::connect(&agent.sock).unwrap();
    let writer = {
        let mut w = s.try_clone().unwrap();
        std::thread::spawn(move || {
            for b in b"{\"op\":\"status\"}" {
                if w.write_all(&[*b]).is_err() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(300));
            }
        })
    };
    let (text, took) = read_to_eof(&mut s, t0);
    assert!(text.contains("incomplete call"), "{text:?}");
    assert!(within(took), "{took:?}");
    writer.join().unwrap();
    // Nothing at all: told `closing`, then the end.
    let t0 = Instant::now();
    let mut s = UnixStream::connect(&agent.sock).unwrap();
    let (text, took) = read_to_eof(&mut s, t0);
    assert_eq!(text, "{\"reply\":\"closing\",\"reason\":\"idle for 1s: the connection is closed\"}\n");
    assert!(within(took), "{took:?}");
    // A client that sends calls and never reads the answers: dropped once its socket is
    // full and an answer waits past the timeout.
    let t0 = Instant::now();
    let s = UnixStream::connect(&agent.sock).unwrap();
    s.set_nonblocking(true).unwrap();
    let call = b"{\"op\":\"status\"}\n".repeat(64);
    let dropped = loop {
        let n = unsafe { libc::send(s.as_raw_fd(), call.as_ptr().cast(), call.len(), libc::MSG_NOSIGNAL) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::WouldBlock {
                break t0.elapsed();
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(t0.elapsed() < Duration::from_secs(5), "a client that does not read was not dropped");
    };
    eprintln!("a client not reading its answers was dropped after {dropped:?}");
    // The library's connection, idle past the timeout, is reopened transparently.
    let mut c = agent.client();
    c.status().unwrap();
    std::thread::sleep(Duration::from_millis(1300));
    c.status().expect("a call after an idle close goes over a new connection");
    assert!(c.tasks().unwrap().is_empty());
}

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn ctl_load_of_a_fifo_or_a_device_is_refused_at_once() {
    if !root() {
        return;
    }
    let _serial = serial();
    let agent = AgentProc::start("");
    let fifo = agent.dir.join("module.fifo");
    let c = CString::new(fifo.to_str().unwrap()).unwrap();
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    assert!(agent.ctl(&["status"]).0); // (the first `ctl` copies the binary: not timed)
    for (file, why) in [(fifo.to_str().unwrap(), "not a regular file (a FIFO)"), ("/dev/zero", "not a regular file (a character device)")] {
        let t0 = Instant::now();
        let (ok, out) = agent.ctl(&["load", file, "--name", "m"]);
        let took = t0.elapsed();
        assert!(!ok && out.contains(why), "{file}: {out}");
        assert!(took < Duration::from_secs(2), "{file}: {took:?}");
        eprintln!("ctl load {file}: refused in {took:?}: {}", out.trim());
    }
    // The broker still serves, and nothing was loaded.
    let (ok, out) = agent.ctl(&["hierarchy"]);
    assert!(ok && !out.lines().any(|l| l.starts_with("m ")), "{out}");
    assert!(agent.client().status().is_ok());
}

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn ctl_into_a_closed_pipe_dies_of_sigpipe_quietly() {
    if !root() {
        return;
    }
    let _serial = serial();
    let agent = AgentProc::start("");
    // `vassal ctl hierarchy | (exec 0<&-; true)`: the reader is gone before it writes.
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let out = Command::new(env!("CARGO_BIN_EXE_vassal"))
        .args(["ctl", "--socket", &agent.sock, "hierarchy"])
        .stdout(Stdio::from(writer))
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    assert_eq!(out.status.signal(), Some(libc::SIGPIPE), "{:?}", out.status);
    assert!(out.stderr.is_empty(), "{}", String::from_utf8_lossy(&out.stderr));
    // The same through a shell, as a user would type it: 141 = 128 + SIGPIPE.
    let vassal = env!("CARGO_BIN_EXE_vassal");
    let sh = format!("{vassal} ctl --socket {} hierarchy | (exec 0<&-; sleep 0.2); echo ${{PIPESTATUS[0]}}", agent.sock);
    let out = Command::new("bash").args(["-c", &sh]).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "141");
    assert!(!String::from_utf8_lossy(&out.stderr).contains("panicked"), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(agent.client().status().is_ok(), "the agent goes on");
}

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn a_panicking_native_module_is_ejected_and_the_agent_goes_on() {
    if !root() {
        return;
    }
    let _serial = serial();
    let module = vassal_module::native_example_path("broken").expect("build the SDK's native examples");
    let agent = AgentProc::start("");
    let (ok, out) = agent.ctl(&["load", module.to_str().unwrap(), "--name", "bad", "--param", "fail=trap", "--param", "after=0"]);
    assert!(ok, "{out}");
    let until = now_ns() + 20 * SEC;
    let mut hog = vassal_agent::workers::hog(until).unwrap();
    let (ok, out) = agent.ctl(&["join", &hog.pid.to_string(), "--sched", "bad"]);
    assert!(ok, "{out}");
    // Its first decision with a task panics: caught in the module, ejected by the agent.
    let mut c = agent.client();
    let t0 = Instant::now();
    let ejected = loop {
        let s = c.status().expect("the agent is alive");
        if let Some(e) = s.ejections.first() {
            break e.clone();
        }
        assert!(t0.elapsed() < Duration::from_secs(5), "not ejected: {}", agent.log());
        std::thread::sleep(Duration::from_millis(20));
    };
    eprintln!("ejected: {}", ejected.reason);
    assert!(ejected.reason.contains("panicked at") && ejected.reason.contains("deliberate failure"), "{}", ejected.reason);
    assert_eq!(ejected.name, "bad");
    // The hog went to the default scheduler (bvt) and is still managed; the agent serves on.
    let tasks = c.tasks().unwrap();
    assert!(tasks.iter().any(|t| t.pid == hog.pid && t.sched == "bvt"), "{tasks:?}");
    let (ok, out) = agent.ctl(&["hierarchy"]);
    assert!(ok && !out.contains("bad"), "{out}");
    assert!(agent.log().contains("deliberate failure"), "{}", agent.log());
    hog.kill();
}
