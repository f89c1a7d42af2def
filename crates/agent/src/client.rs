//! The client library: talk to a running agent.
//!
//! Paper 000 §5's loop — JOIN the real-time scheduler, then SET the next wake-up each
//! iteration — is:
//!
//! ```no_run
//! use vassal_agent::client::Client;
//! let mut c = Client::connect_default()?;
//! c.join(Some("timed"))?;                         // JOIN
//! let period = 1_000_000;                          // 1 ms
//! let mut next = vassal_agent::kernel::now_ns();
//! loop {
//!     // ... the iteration's work ...
//!     next += period;
//!     c.wake_at(next)?;                            // SET, then sleep until `next`
//! }
//! # Ok::<(), vassal_agent::client::ClientError>(())
//! ```
//!
//! `wake_at` sends SET for `next` (as `set_at`; the broker makes it SET(next − now)) to the task's scheduler and then sleeps on an absolute
//! CLOCK_MONOTONIC timer until `next`. The scheduler arms an event `lead` before the
//! target; the agent keeps the sleeping task armed at its running priority, so the
//! kernel runs it the instant its timer fires.

use std::collections::BTreeMap;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;

use vassal_core::{Ns, Request};

use crate::config::DEFAULT_SOCKET;
use crate::kernel;
use crate::wire::{self, Answer, Call, TaskRow};

/// What can go wrong talking to the agent.
#[derive(Debug)]
pub enum ClientError {
    /// The socket failed (no agent running, connection lost).
    Io(io::Error),
    /// The agent or a scheduler refused, or said the call was malformed.
    Refused(String),
    /// The agent sent something this client does not understand.
    Protocol(String),
    /// The connection ended after a call was sent and before its answer came (a reset or
    /// an end of file): the agent may have died, and whether it carried the call out is
    /// unknown.
    Closed,
}

impl std::fmt::Display for ClientError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClientError::Io(e) => write!(f, "talking to the vassal agent: {e}"),
            ClientError::Refused(r) => write!(f, "refused: {r}"),
            ClientError::Protocol(p) => write!(f, "unexpected reply from the agent: {p}"),
            ClientError::Closed => write!(f, "the agent closed the connection before answering — it may have died; see its log"),
        }
    }
}

impl std::error::Error for ClientError {}

impl From<io::Error> for ClientError {
    fn from(e: io::Error) -> Self {
        ClientError::Io(e)
    }
}

/// An error that says the other end of the connection is gone.
fn gone(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset | io::ErrorKind::ConnectionAborted | io::ErrorKind::NotConnected
    )
}

/// A connection to the agent.
///
/// The agent closes a connection that stays idle past its `client_timeout` (default 5 s),
/// after telling it so (a `closing` line, docs/agent.md "Connections"); the next call then
/// goes over a new connection, transparently. A call the agent had not read when it
/// closed (it said `closing`, or the socket was closed before the call was written) is
/// sent again, once; a connection that ends after a call was sent and before its answer
/// is [`ClientError::Closed`], never retried (the call may have been carried out).
pub struct Client {
    path: String,
    /// None: closed by the agent; reopened at the next call.
    sock: Option<UnixStream>,
    /// Bytes received and not yet consumed as reply lines.
    inbuf: Vec<u8>,
    /// Replies still owed for SETs sent by `wake_at` without waiting.
    pending: usize,
    pid: i32,
}

impl Client {
    pub fn connect(path: &str) -> Result<Client, ClientError> {
        let s = UnixStream::connect(path).map_err(|e| io::Error::new(e.kind(), format!("{path}: {e}")))?;
        Ok(Client { path: path.to_string(), sock: Some(s), inbuf: Vec::new(), pending: 0, pid: std::process::id() as i32 })
    }

    /// Connects to $VASSAL_SOCKET, else /run/vassal.sock.
    pub fn connect_default() -> Result<Client, ClientError> {
        let path = std::env::var("VASSAL_SOCKET").unwrap_or_else(|_| DEFAULT_SOCKET.to_string());
        Client::connect(&path)
    }

    /// Forgets a connection the agent closed (SETs still owed an answer were for times
    /// already past: `wake_at` slept until them).
    fn lost(&mut self) {
        self.sock = None;
        self.inbuf.clear();
        self.pending = 0;
    }

    /// One read of what is waiting (`wait`: blocks for it). Ok(false): nothing waiting;
    /// Err(Closed): end of file or reset.
    fn fill(&mut self, wait: bool) -> Result<bool, ClientError> {
        let Some(s) = &self.sock else { return Err(ClientError::Closed) };
        let mut tmp = [0u8; 4096];
        loop {
            let flags = if wait { 0 } else { libc::MSG_DONTWAIT };
            // SAFETY: receives into a local buffer of its length.
            let n = unsafe { libc::recv(s.as_raw_fd(), tmp.as_mut_ptr().cast(), tmp.len(), flags) };
            if n > 0 {
                self.inbuf.extend_from_slice(&tmp[..n as usize]);
                return Ok(true);
            }
            if n == 0 {
                return Err(ClientError::Closed);
            }
            let e = io::Error::last_os_error();
            match e.kind() {
                io::ErrorKind::Interrupted => {}
                io::ErrorKind::WouldBlock => return Ok(false),
                _ if gone(&e) => return Err(ClientError::Closed),
                _ => return Err(e.into()),
            }
        }
    }

    /// The next reply line; `wait = false`: None if none has fully arrived.
    fn next_reply(&mut self, wait: bool) -> Result<Option<Answer>, ClientError> {
        loop {
            if let Some(pos) = self.inbuf.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.inbuf.drain(..=pos).collect();
                let text = String::from_utf8_lossy(&line);
                return serde_json::from_str(text.trim_end()).map(Some).map_err(|e| ClientError::Protocol(format!("{e}: {text}")));
            }
            if !self.fill(wait)? {
                return Ok(None);
            }
        }
    }

    /// Before a call, with no answer owed: has the agent closed this connection (said
    /// `closing`, or shut it)? Then it is forgotten, and the call opens a new one. Any
    /// other line waiting (a refusal of the connection) is left for the call to read.
    fn check_open(&mut self) {
        if self.sock.is_none() {
            return;
        }
        let ended = loop {
            match self.fill(false) {
                Ok(true) => {}
                Ok(false) => break false,
                Err(_) => break true,
            }
        };
        let closing = self
            .inbuf
            .iter()
            .position(|&b| b == b'\n')
            .is_some_and(|pos| matches!(serde_json::from_slice::<Answer>(&self.inbuf[..pos]), Ok(Answer::Closing { .. })));
        if closing || (ended && !self.inbuf.contains(&b'\n')) {
            self.lost();
        }
    }

    /// Sends one line, over a new connection if the agent closed the last one.
    fn send(&mut self, line: &[u8]) -> Result<(), ClientError> {
        if self.sock.is_none() {
            let s = UnixStream::connect(&self.path).map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("the agent closed the connection, and a new one to {} failed: {e} (it may have died; see its log)", self.path),
                )
            })?;
            self.sock = Some(s);
        }
        let s = self.sock.as_ref().expect("just connected");
        let mut rest = line;
        while !rest.is_empty() {
            // SAFETY: sends from a live slice; MSG_NOSIGNAL: an agent gone is an error, not
            // a SIGPIPE that would kill the caller.
            let n = unsafe { libc::send(s.as_raw_fd(), rest.as_ptr().cast(), rest.len(), libc::MSG_NOSIGNAL) };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e.into());
            }
            rest = &rest[n as usize..];
        }
        Ok(())
    }

    /// Collects the replies to SETs sent without waiting; the first refusal is returned.
    fn settle_pending(&mut self, wait: bool) -> Result<(), ClientError> {
        let mut first_err = None;
        while self.pending > 0 {
            match self.next_reply(wait) {
                Ok(None) => break,
                Ok(Some(Answer::Closing { .. })) | Err(ClientError::Closed) => self.lost(),
                Err(e) => return Err(e),
                Ok(Some(a)) => {
                    self.pending -= 1;
                    if let (Answer::Refused { reason } | Answer::Error { message: reason }, None) = (a, &first_err) {
                        first_err = Some(ClientError::Refused(reason));
                    }
                }
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    /// Sends one call and reads its answer (refusals come back as `Ok(Answer::Refused)`).
    pub fn call(&mut self, call: &Call) -> Result<Answer, ClientError> {
        self.settle_pending(true)?;
        self.check_open();
        let line = wire::encode(call);
        let mut again = true;
        loop {
            let sent = match self.send(line.as_bytes()) {
                Ok(()) => true,
                // The agent closed the connection: what it said last may still be there.
                Err(ClientError::Io(e)) if gone(&e) => false,
                Err(e) => return Err(e),
            };
            match self.next_reply(true) {
                Ok(Some(Answer::Closing { .. })) if again => {}
                Ok(Some(Answer::Closing { .. })) => {
                    self.lost();
                    return Err(ClientError::Closed);
                }
                Ok(Some(a)) => return Ok(a),
                Ok(None) => return Err(ClientError::Protocol("no reply".into())),
                // Closed before it could have read the call.
                Err(ClientError::Closed) if !sent && again => {}
                Err(ClientError::Closed) => {
                    self.lost();
                    return Err(ClientError::Closed);
                }
                Err(e) => return Err(e),
            }
            // Not carried out: once more, on a new connection.
            self.lost();
            again = false;
        }
    }

    /// Like `call`, with refusals and errors as `Err`.
    pub fn ok(&mut self, call: &Call) -> Result<Answer, ClientError> {
        match self.call(call)? {
            Answer::Refused { reason } => Err(ClientError::Refused(reason)),
            Answer::Error { message } => Err(ClientError::Refused(message)),
            a => Ok(a),
        }
    }

    /// JOIN: the calling thread joins `sched` (None: the default scheduler), as Vassal's
    /// JOIN is a thread's (its process is managed whole; its other threads stay where
    /// they are).
    pub fn join(&mut self, sched: Option<&str>) -> Result<(), ClientError> {
        let call = Call::Join { pid: self.pid, tid: Some(kernel::gettid()), sched: sched.map(str::to_string), params: BTreeMap::new() };
        self.ok(&call).map(|_| ())
    }

    /// JOIN for process `pid`: every thread of it joins `sched` with `params`.
    pub fn join_pid(&mut self, pid: i32, sched: Option<&str>, params: BTreeMap<String, i64>) -> Result<(), ClientError> {
        self.ok(&Call::Join { pid, tid: None, sched: sched.map(str::to_string), params }).map(|_| ())
    }

    /// JOIN for thread `tid` of process `pid` alone.
    pub fn join_thread(&mut self, pid: i32, tid: i32, sched: Option<&str>, params: BTreeMap<String, i64>) -> Result<(), ClientError> {
        self.ok(&Call::Join { pid, tid: Some(tid), sched: sched.map(str::to_string), params }).map(|_| ())
    }

    /// MessageToScheduler about process `pid` (to each thread's owner if `sched` is None).
    pub fn message(&mut self, sched: Option<&str>, pid: i32, request: Request) -> Result<Answer, ClientError> {
        self.ok(&Call::Message { sched: sched.map(str::to_string), pid, tid: None, request })
    }

    /// MessageToScheduler about thread `tid` of process `pid`.
    pub fn message_thread(&mut self, sched: Option<&str>, pid: i32, tid: i32, request: Request) -> Result<Answer, ClientError> {
        self.ok(&Call::Message { sched: sched.map(str::to_string), pid, tid: Some(tid), request })
    }

    /// SET(delay): run the calling thread `delay` ns from now (paper 000 §5). Returns at
    /// once.
    pub fn set(&mut self, delay: Ns) -> Result<(), ClientError> {
        self.message_thread(None, self.pid, kernel::gettid(), Request::Set { delay }).map(|_| ())
    }

    /// SET for the absolute CLOCK_MONOTONIC time `at`, then sleep until `at`. A time
    /// already past returns at once (the caller is late: it catches up).
    ///
    /// The SET is sent without waiting for its reply, which is collected at the next
    /// call (a refusal of an earlier SET is returned then): once it has asked for a time
    /// the task is ineligible (paper 000 §5), so the agent parks it — waiting for the
    /// reply, it could not even get to its sleep under load. Sleeping on its own timer,
    /// it is armed at its running priority and runs the instant the timer fires.
    pub fn wake_at(&mut self, at: Ns) -> Result<(), ClientError> {
        match self.settle_pending(false) {
            Err(ClientError::Refused(r)) if r.contains("already past") => {}
            r => r?,
        }
        if self.pending == 0 {
            self.check_open();
        }
        if at > kernel::now_ns() {
            let call = Call::Message { sched: None, pid: self.pid, tid: Some(kernel::gettid()), request: Request::SetAt { at } };
            let line = wire::encode(&call);
            match self.send(line.as_bytes()) {
                // Closed before it read the SET: once more, on a new connection.
                Err(ClientError::Io(e)) if gone(&e) => {
                    self.lost();
                    self.send(line.as_bytes())?;
                }
                r => r?,
            }
            self.pending += 1;
            kernel::sleep_until(at);
            while kernel::now_ns() < at {
                kernel::sleep_until(at);
            }
        }
        Ok(())
    }

    pub fn tasks(&mut self) -> Result<Vec<TaskRow>, ClientError> {
        match self.ok(&Call::Tasks)? {
            Answer::Tasks { tasks } => Ok(tasks),
            a => Err(ClientError::Protocol(format!("{a:?}"))),
        }
    }

    pub fn status(&mut self) -> Result<wire::Status, ClientError> {
        match self.ok(&Call::Status)? {
            Answer::Status(s) => Ok(s),
            a => Err(ClientError::Protocol(format!("{a:?}"))),
        }
    }
}

/// A child process forked and held before `exec` until [`HeldChild::release`], so it can
/// be joined (and given its parameters and reservation) before it runs a single
/// instruction of the command. Dropping an unreleased child kills and reaps it.
pub struct HeldChild {
    pub pid: i32,
    go: Option<std::os::fd::OwnedFd>,
    reaped: bool,
}

impl HeldChild {
    /// Forks; the child waits for `release`, then execs `argv[0]` (searched in PATH) with
    /// `argv`. Call it from a single-threaded process (the `vassal` command is).
    pub fn spawn(argv: &[String]) -> io::Result<HeldChild> {
        use std::ffi::CString;
        use std::os::fd::AsRawFd;
        if argv.is_empty() {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "no command"));
        }
        let args: Vec<CString> = argv
            .iter()
            .map(|a| CString::new(a.as_bytes()).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in argument")))
            .collect::<io::Result<_>>()?;
        let mut ptrs: Vec<*const libc::c_char> = args.iter().map(|a| a.as_ptr()).collect();
        ptrs.push(std::ptr::null());
        let (read, go) = kernel::pipe_cloexec()?;
        let (read_fd, go_fd) = (read.as_raw_fd(), go.as_raw_fd());
        // SAFETY: the child only reads, closes and execs (async-signal-safe).
        let pid = unsafe { libc::fork() };
        if pid == -1 {
            return Err(io::Error::last_os_error());
        }
        if pid == 0 {
            // SAFETY: see above; _exit on every failure path (no destructor runs).
            unsafe {
                libc::close(go_fd);
                let mut b = 0u8;
                let n = libc::read(read_fd, (&mut b as *mut u8).cast(), 1);
                if n != 1 {
                    libc::_exit(127); // the parent gave up
                }
                libc::execvp(ptrs[0], ptrs.as_ptr());
                libc::_exit(127);
            }
        }
        drop(read);
        Ok(HeldChild { pid, go: Some(go), reaped: false })
    }

    /// Lets the child exec its command.
    pub fn release(&mut self) -> io::Result<()> {
        use std::os::fd::AsRawFd;
        if let Some(go) = self.go.take() {
            // SAFETY: writes one byte from a local to our fd.
            if unsafe { libc::write(go.as_raw_fd(), [1u8].as_ptr().cast(), 1) } != 1 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(())
    }

    /// Waits for the child; its exit code (128 + signal if killed).
    pub fn wait(&mut self) -> io::Result<i32> {
        let mut status = 0;
        loop {
            // SAFETY: waitpid on our child.
            let r = unsafe { libc::waitpid(self.pid, &mut status, 0) };
            if r == self.pid {
                break;
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
        self.reaped = true;
        Ok(if libc::WIFEXITED(status) { libc::WEXITSTATUS(status) } else { 128 + libc::WTERMSIG(status) })
    }
}

impl Drop for HeldChild {
    fn drop(&mut self) {
        if !self.reaped {
            // SAFETY: signals and reaps our own child.
            unsafe {
                libc::kill(self.pid, libc::SIGKILL);
                libc::waitpid(self.pid, std::ptr::null_mut(), 0);
            }
        }
    }
}
