//! A running `vassal agent` for the root-only real-process tests (agent.rs,
//! agent_modules.rs): a child process under `timeout -s KILL 60`, its stderr (the agent's
//! log) in a file; stopped with SIGTERM (an orderly restore), then killed, and reaped on
//! drop.

#![allow(dead_code)] // each test file uses its own part

use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use vassal_agent::client::Client;

static N: AtomicU32 = AtomicU32::new(0);

/// The tests run one at a time (within a file): each measures real scheduling, which
/// another test's processes would disturb.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Whether this test may run: the real-process tests need root (they change other
/// processes' scheduling); they are `#[ignore]`d for other users, so this only says why
/// when one is forced to run.
pub fn root() -> bool {
    if !vassal_agent::kernel::is_root() {
        vassal_agent::skip::skip("needs root (it changes other processes' scheduling policy)");
    }
    vassal_agent::kernel::is_root()
}

/// Waits up to `within` for `f` to hold; returns how long it took.
pub fn wait_for(within: Duration, mut f: impl FnMut() -> bool) -> Option<Duration> {
    let t0 = Instant::now();
    loop {
        if f() {
            return Some(t0.elapsed());
        }
        if t0.elapsed() > within {
            return None;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// Whether the process is stopped (state T) or about to be (a SIGSTOP pending: a
/// runnable task not on a CPU stops when it next gets one): the agent holds it (see
/// `KState::Held`).
pub fn stopped(pid: i32) -> bool {
    let state_t = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|s| s.rsplit_once(')').is_some_and(|(_, r)| r.trim_start().starts_with('T')));
    let pending_stop = std::fs::read_to_string(format!("/proc/{pid}/status")).is_ok_and(|s| {
        s.lines()
            .filter_map(|l| l.strip_prefix("ShdPnd:"))
            .any(|m| u64::from_str_radix(m.trim(), 16).is_ok_and(|m| m & (1 << (libc::SIGSTOP - 1)) != 0))
    });
    state_t || pending_stop
}

pub struct AgentProc {
    pub child: Child,
    pub sock: String,
    pub dir: PathBuf,
}

impl AgentProc {
    pub fn start(config: &str) -> AgentProc {
        AgentProc::start_with(config, &[])
    }
    /// `vassal agent --config <config with the socket line> ARGS`, once its socket answers.
    pub fn start_with(config: &str, args: &[&str]) -> AgentProc {
        let (child, sock, dir) = spawn(config, args);
        let mut me = AgentProc { child, sock, dir };
        let deadline = Instant::now() + Duration::from_secs(10);
        while UnixStream::connect(&me.sock).is_err() {
            if Instant::now() > deadline || matches!(me.child.try_wait(), Ok(Some(_))) {
                panic!("the agent did not open {}: {}", me.sock, me.log());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        me
    }
    /// Runs an agent that is expected to refuse `config` and exit: its exit status and log.
    pub fn run_to_exit(config: &str) -> (ExitStatus, String) {
        let (mut child, _, dir) = spawn(config, &[]);
        let status = child.wait().expect("wait for the agent");
        let log = std::fs::read_to_string(dir.join("agent.log")).unwrap_or_default();
        let _ = std::fs::remove_dir_all(&dir);
        (status, log)
    }
    pub fn client(&self) -> Client {
        Client::connect(&self.sock).expect("connect")
    }
    /// What the agent wrote to stderr so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("agent.log")).unwrap_or_default()
    }
    /// The agent's own pid (the child is `timeout`, whose child is the agent).
    pub fn agent_pid(&self) -> i32 {
        first_child(self.child.id() as i32).expect("the agent runs under timeout")
    }
    pub fn guardian_pid(&self) -> i32 {
        first_child(self.agent_pid()).expect("the agent has a guardian child")
    }
    /// `vassal ctl ARGS` as uid `uid` (0: root).
    pub fn ctl_as(&self, uid: u32, args: &[&str]) -> (bool, String) {
        // A copy another uid can run even if the build tree is private (e.g. /root).
        let exe = self.dir.join("vassal");
        if !exe.exists() {
            std::fs::copy(env!("CARGO_BIN_EXE_vassal"), &exe).unwrap();
            std::fs::set_permissions(&exe, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        }
        let mut cmd = Command::new(&exe);
        cmd.arg("ctl").arg("--socket").arg(&self.sock).args(args);
        if uid != 0 {
            cmd.uid(uid).gid(65534);
        }
        let out = cmd.output().expect("run vassal ctl");
        (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr))
    }
    pub fn ctl(&self, args: &[&str]) -> (bool, String) {
        self.ctl_as(0, args)
    }
}

/// Starts `vassal agent` in a fresh directory with `config` (and the socket line).
fn spawn(config: &str, args: &[&str]) -> (Child, String, PathBuf) {
    let n = N.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("vassal-test-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // Unprivileged test clients must reach the socket.
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let sock = dir.join("agent.sock").to_string_lossy().into_owned();
    let cfg = dir.join("agent.toml");
    std::fs::write(&cfg, format!("socket = \"{sock}\"\n{config}")).unwrap();
    let log = std::fs::File::create(dir.join("agent.log")).unwrap();
    let child = Command::new("timeout")
        .args(["-s", "KILL", "60"])
        .arg(env!("CARGO_BIN_EXE_vassal"))
        .arg("agent")
        .arg("--config")
        .arg(&cfg)
        .args(args)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("start the agent");
    (child, sock, dir)
}

fn first_child(pid: i32) -> Option<i32> {
    let kids = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).ok()?;
    kids.split_whitespace().next()?.parse().ok()
}

impl Drop for AgentProc {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            if let Some(a) = first_child(self.child.id() as i32) {
                // SAFETY: SIGTERM to our agent: it restores every managed task.
                unsafe { libc::kill(a, libc::SIGTERM) };
            }
            let deadline = Instant::now() + Duration::from_secs(3);
            while Instant::now() < deadline && matches!(self.child.try_wait(), Ok(None)) {
                std::thread::sleep(Duration::from_millis(10));
            }
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
