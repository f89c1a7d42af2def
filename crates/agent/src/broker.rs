//! The broker (paper 002 §2.2): serves clients over a Unix socket, identifies every caller
//! by its kernel credentials, checks what the caller may do, and hands the call to the
//! hierarchy, whose schedulers run their own admission control (`on_attach`,
//! `on_message`) for root and users alike.
//!
//! Rules for a caller with uid u (from SO_PEERCRED, never from the message):
//! - root may do anything;
//! - otherwise a call about process p is allowed only if p's real and effective uid are
//!   both u (a setuid program run by u is not u's), and, if p is managed, it was joined
//!   by u;
//! - a task parameter may be set to at most its ceiling from the config, or lowered below
//!   its current value (BVT §6.3.2: "users can lower but not raise" — the nice rule); a
//!   parameter without a ceiling is root's only;
//! - registering and unregistering schedulers, and loading and unloading modules, is
//!   root's only.
//!
//! Priority inversion: the broker runs at SCHED_OTHER (admission tests may take variable
//! time, paper 002 §2.2), but the agent's state is shared with the real-time dispatcher.
//! A broker thread therefore raises itself to SCHED_FIFO `dispatcher_priority − 1` just
//! for the time it holds the state lock (the immediate priority-ceiling protocol), so a
//! preempted broker can never hold the dispatcher up; all parsing, permission checks and
//! /proc reads happen before, at normal priority.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::io::{self, Read};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use vassal_core::Request;

use crate::kernel;
use crate::state::Agent;
use crate::wire::{self, Answer, Call, MAX_LINE};

/// What the broker, the dispatcher and the main thread share.
pub struct Shared {
    pub agent: Mutex<Agent>,
    /// Signalled after every change a call made, so the dispatcher re-plans its sleep (an
    /// eventfd in the dispatcher's epoll set: crate::wait).
    pub wake: crate::wait::Waker,
    pub stop: AtomicBool,
    pub dispatcher_cpu_ns: AtomicU64,
    ceiling_prio: i32,
}

impl Shared {
    pub fn new(agent: Agent) -> Shared {
        let ceiling_prio = agent.cfg.dispatcher_priority - 1;
        Shared {
            agent: Mutex::new(agent),
            wake: crate::wait::Waker::new().expect("eventfd"),
            stop: AtomicBool::new(false),
            dispatcher_cpu_ns: AtomicU64::new(0),
            ceiling_prio,
        }
    }

    /// Locks the state under the priority ceiling (see the module documentation).
    pub fn with_agent<R>(&self, f: impl FnOnce(&mut Agent) -> R) -> R {
        self.with_agent_inner(f)
    }

    /// `with_agent` for a call's handler: an `Err` becomes a refusal.
    fn run(&self, f: impl FnOnce(&mut Agent) -> Result<Answer, String>) -> Answer {
        if self.stop.load(Ordering::SeqCst) {
            return Answer::refused("the agent is shutting down");
        }
        self.with_agent_inner(f).unwrap_or_else(Answer::refused)
    }

    fn with_agent_inner<R>(&self, f: impl FnOnce(&mut Agent) -> R) -> R {
        let before = kernel::get_sched(0).ok();
        let raised = kernel::set_self(self.ceiling_prio).is_ok();
        let r = {
            let mut g = lock(&self.agent);
            f(&mut g)
        };
        if raised {
            let _ = match before {
                Some(s) if s.policy & !kernel::RESET_ON_FORK == libc::SCHED_FIFO => kernel::set_self(s.prio),
                _ => kernel::set_self(0),
            };
        }
        self.wake.notify_one();
        r
    }
}

/// Locks a mutex, carrying on if a thread panicked holding it (the agent aborts on
/// panic anyway; the guardian restores).
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A caller, as the kernel names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Caller {
    pub pid: i32,
    pub uid: u32,
}

// ----- connections (docs/agent.md, "Connections") -----
//
// One thread (`serve`) does all the socket I/O, non-blocking, in an epoll loop: accepting,
// reading call lines, writing answers, and the timeouts. A complete call goes to a small
// pool of worker threads (`Pool`, at most `MAX_WORKERS`, started as needed) that run
// `handle`; a connection has at most one call in a worker at a time, and its next line
// is not even read before the answer is written. So a connection that sends nothing, or
// half a line, costs a few hundred bytes and no thread, and memory returns to its level
// once such connections are gone.

/// How long a refused or closed connection is kept to drain what its client sends after
/// our last line (so the client reads that line instead of getting EPIPE or a reset).
const DRAIN_FOR: Duration = Duration::from_secs(1);
/// At most this many connections draining at once (beyond, they are closed at once).
const MAX_DRAINING: usize = 256;
/// At most this many bytes drained from one connection.
const DRAIN_BYTES: usize = 1 << 20;
/// Worker threads for calls (started when a call finds none idle; they stay).
const MAX_WORKERS: usize = 4;
/// A worker's stack (locked by the agent's mlockall: resident), as the dispatcher's: a
/// module's callbacks run on it (a join's `on_attach`, a message's `on_message`), and
/// wasmtime lets WebAssembly use up to 512 KiB of the native stack (`max_wasm_stack`)
/// before it traps — a smaller stack would overflow first and crash the agent.
const WORKER_STACK: usize = 1 << 20;

const LISTENER: u64 = 0;
const DONE: u64 = 1;

/// Accepts clients until `stop` (see above and docs/agent.md, "Connections"): an ordinary
/// uid gets at most `max_clients_per_uid` connections, ordinary users together at most
/// `max_clients`; root's are counted apart (at most `max_clients` of its own), so a flood
/// by users never locks root out. A call must arrive whole within `client_timeout` of the
/// connection or of the last answer, and each answer be read within it. A connection
/// refused or dropped gets a last line saying why (`refused`, `error`, or `closing` when
/// idle), then its write side is shut and what the client still sends is drained for
/// `DRAIN_FOR`, so the client reads that line.
pub fn serve(listener: UnixListener, shared: Arc<Shared>) {
    let limits = {
        let a = lock(&shared.agent);
        Limits { max: a.cfg.max_clients, per_uid: a.cfg.max_clients_per_uid, timeout: Duration::from_nanos(a.cfg.client_timeout) }
    };
    match Broker::new(listener, shared, limits) {
        Ok(mut b) => b.run(),
        Err(e) => {
            eprintln!("vassal agent: the broker cannot start ({e}); no client will be served")
        }
    }
}

#[derive(Clone, Copy)]
struct Limits {
    max: usize,
    per_uid: usize,
    timeout: Duration,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Waiting for a whole call line, until `deadline`.
    Reading,
    /// Its call is with a worker.
    Busy,
    /// Writing an answer, which must be taken by `deadline`.
    Writing,
    /// Writing its last line, then draining until EOF or `deadline`.
    Closing,
}

struct Conn {
    sock: UnixStream,
    caller: Caller,
    inbuf: Vec<u8>,
    out: Vec<u8>,
    sent: usize,
    phase: Phase,
    deadline: Instant,
    /// Counted against the limits (every phase but Closing).
    counted: bool,
    /// The epoll events it is registered for (None: not registered).
    events: Option<u32>,
    /// The write side is shut (Closing, after the last line).
    shut: bool,
    drained: usize,
    /// The client hung up while its call was with a worker.
    gone: bool,
}

/// Open connections per uid.
#[derive(Default)]
struct Counts {
    by_uid: HashMap<u32, usize>,
    /// Of ordinary users, together.
    users: usize,
    draining: usize,
}

struct Broker {
    ep: Epoll,
    listener: UnixListener,
    shared: Arc<Shared>,
    pool: Arc<Pool>,
    limits: Limits,
    conns: HashMap<u64, Conn>,
    next_id: u64,
    counts: Counts,
    /// Refusals since the last log line about them (logged at most every 10 s).
    refused: u64,
    refused_logged: Instant,
}

impl Broker {
    fn new(listener: UnixListener, shared: Arc<Shared>, limits: Limits) -> io::Result<Broker> {
        listener.set_nonblocking(true)?;
        let ep = Epoll::new()?;
        let pool = Arc::new(Pool::new(shared.clone())?);
        ep.ctl(libc::EPOLL_CTL_ADD, listener.as_raw_fd(), libc::EPOLLIN as u32, LISTENER)?;
        ep.ctl(libc::EPOLL_CTL_ADD, pool.waker.fd(), libc::EPOLLIN as u32, DONE)?;
        Ok(Broker {
            ep,
            listener,
            shared,
            pool,
            limits,
            conns: HashMap::new(),
            next_id: DONE + 1,
            counts: Counts::default(),
            refused: 0,
            refused_logged: Instant::now(),
        })
    }

    fn run(&mut self) {
        let mut events = vec![libc::epoll_event { events: 0, u64: 0 }; 64];
        loop {
            if self.shared.stop.load(Ordering::Relaxed) {
                return;
            }
            let now = Instant::now();
            let next = self.conns.values().filter(|c| c.phase != Phase::Busy).map(|c| c.deadline).min();
            // Ceiling to the ms, at most a second (to see `stop`).
            let wait = next.map_or(1000, |d| (d.saturating_duration_since(now).as_micros().div_ceil(1000)).min(1000) as i32);
            let n = self.ep.wait(&mut events, wait);
            // Answers and root's connections first, then the rest: under a flood of
            // connections by users, root's calls do not queue behind theirs.
            for first in [true, false] {
                for ev in &events[..n] {
                    let (token, flags) = (ev.u64, ev.events);
                    let urgent = token == DONE || self.conns.get(&token).is_some_and(|c| c.caller.uid == 0);
                    if urgent != first {
                        continue;
                    }
                    match token {
                        LISTENER => self.accept_all(),
                        DONE => self.completions(),
                        id => self.on_event(id, flags),
                    }
                }
            }
            self.expire(Instant::now());
            self.log_refusals();
        }
    }

    fn accept_all(&mut self) {
        loop {
            match self.listener.accept() {
                Ok((s, _)) => self.accept(s),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    // Out of fds or memory: the connection waits in the backlog; do not spin.
                    eprintln!("vassal agent: accept: {e}");
                    std::thread::sleep(Duration::from_millis(10));
                    return;
                }
            }
        }
    }

    /// Why a new connection of `uid` is refused, if it is.
    fn admit(&self, uid: u32) -> Result<(), String> {
        let mine = self.counts.by_uid.get(&uid).copied().unwrap_or(0);
        let Limits { max, per_uid, .. } = self.limits;
        if uid == 0 {
            return if mine >= max { Err(format!("too many connections for uid 0 (at most {max} at once)")) } else { Ok(()) };
        }
        if mine >= per_uid {
            return Err(format!("too many connections for uid {uid} (at most {per_uid} at once)"));
        }
        if self.counts.users >= max {
            return Err(format!("too many clients (at most {max} connections of users other than root at once)"));
        }
        Ok(())
    }

    fn accept(&mut self, sock: UnixStream) {
        let Ok((pid, uid, _)) = kernel::peer_cred(&sock) else { return };
        if sock.set_nonblocking(true).is_err() {
            return;
        }
        let caller = Caller { pid, uid };
        let refusal = self.admit(uid).err();
        let id = self.next_id;
        self.next_id += 1;
        let now = Instant::now();
        let conn = Conn {
            sock,
            caller,
            inbuf: Vec::new(),
            out: Vec::new(),
            sent: 0,
            phase: Phase::Reading,
            deadline: now + self.limits.timeout,
            counted: false,
            events: None,
            shut: false,
            drained: 0,
            gone: false,
        };
        self.conns.insert(id, conn);
        match refusal {
            None => {
                self.count(id, true);
                // Its call may be there already (a client writes as it connects).
                self.read(id);
            }
            Some(why) => {
                self.refused += 1;
                self.close_with(id, &Answer::refused(why));
            }
        }
    }

    fn count(&mut self, id: u64, on: bool) {
        let Some(c) = self.conns.get_mut(&id) else { return };
        if c.counted == on {
            return;
        }
        c.counted = on;
        let uid = c.caller.uid;
        let n = self.counts.by_uid.entry(uid).or_insert(0);
        if on {
            *n += 1;
        } else {
            *n -= 1;
            if *n == 0 {
                self.counts.by_uid.remove(&uid);
            }
        }
        if uid != 0 {
            if on {
                self.counts.users += 1;
            } else {
                self.counts.users -= 1;
            }
        }
    }

    fn set_events(&mut self, id: u64, events: u32) {
        let Some(c) = self.conns.get_mut(&id) else { return };
        if c.events == Some(events) {
            return;
        }
        let op = if c.events.is_some() { libc::EPOLL_CTL_MOD } else { libc::EPOLL_CTL_ADD };
        if self.ep.ctl(op, c.sock.as_raw_fd(), events, id).is_ok() {
            c.events = Some(events);
        } else {
            self.remove(id);
        }
    }

    fn remove(&mut self, id: u64) {
        self.count(id, false);
        if let Some(c) = self.conns.remove(&id) {
            if c.phase == Phase::Closing {
                self.counts.draining -= 1;
            }
            // Closing the fd takes it out of the epoll set.
        }
        if self.conns.is_empty() {
            self.conns.shrink_to(16);
        }
    }

    /// Ends the connection with `last` as its last line (see `serve`).
    fn close_with(&mut self, id: u64, last: &Answer) {
        self.count(id, false);
        let draining = self.counts.draining;
        let Some(c) = self.conns.get_mut(&id) else { return };
        if c.phase == Phase::Closing {
            return;
        }
        c.phase = Phase::Closing;
        c.out = wire::encode(last).into_bytes();
        c.sent = 0;
        c.inbuf = Vec::new();
        c.deadline = Instant::now() + DRAIN_FOR;
        self.counts.draining += 1;
        if draining >= MAX_DRAINING {
            // Too many to drain: the line, if the socket takes it, and close.
            let _ = send_some(&c.sock, &c.out);
            self.remove(id);
            return;
        }
        self.progress(id);
    }

    /// Carries a connection on as far as it goes without waiting.
    fn progress(&mut self, id: u64) {
        let timeout = self.limits.timeout;
        loop {
            let Some(c) = self.conns.get_mut(&id) else { return };
            match c.phase {
                Phase::Busy => return,
                Phase::Writing | Phase::Closing => match flush(c) {
                    Err(_) => return self.remove(id),
                    Ok(false) => {
                        let ev = if c.phase == Phase::Closing { libc::EPOLLIN | libc::EPOLLOUT } else { libc::EPOLLOUT };
                        return self.set_events(id, ev as u32);
                    }
                    Ok(true) if c.phase == Phase::Closing => {
                        if !c.shut {
                            c.shut = true;
                            let _ = c.sock.shutdown(std::net::Shutdown::Write);
                        }
                        return self.set_events(id, libc::EPOLLIN as u32);
                    }
                    Ok(true) => {
                        c.phase = Phase::Reading;
                        c.deadline = Instant::now() + timeout;
                        c.out.clear();
                        c.sent = 0;
                        if c.out.capacity() > 16 * 1024 {
                            c.out = Vec::new();
                        }
                    }
                },
                Phase::Reading => {
                    let Some(pos) = c.inbuf.iter().position(|&b| b == b'\n') else {
                        if c.inbuf.len() > MAX_LINE {
                            // Cannot find the next call's start: answer and hang up.
                            return self.close_with(id, &Answer::error(format!("call longer than {MAX_LINE} bytes")));
                        }
                        return self.set_events(id, libc::EPOLLIN as u32);
                    };
                    if pos > MAX_LINE {
                        return self.close_with(id, &Answer::error(format!("call longer than {MAX_LINE} bytes")));
                    }
                    let line: Vec<u8> = c.inbuf.drain(..=pos).collect();
                    if c.inbuf.capacity() > 16 * 1024 && c.inbuf.len() < 1024 {
                        c.inbuf.shrink_to(1024);
                    }
                    match wire::decode(&line[..pos]) {
                        Err(e) => {
                            c.out = wire::encode(&Answer::error(e)).into_bytes();
                            c.sent = 0;
                            c.phase = Phase::Writing;
                            c.deadline = Instant::now() + timeout;
                        }
                        Ok(call) => {
                            c.phase = Phase::Busy;
                            let caller = c.caller;
                            // Only a hang-up (always reported) while the call is handled.
                            self.set_events(id, 0);
                            self.pool.submit(Job { id, caller, call });
                            return;
                        }
                    }
                }
            }
        }
    }

    fn on_event(&mut self, id: u64, flags: u32) {
        let hup = flags & (libc::EPOLLHUP | libc::EPOLLERR) as u32 != 0;
        let Some(c) = self.conns.get_mut(&id) else { return };
        match c.phase {
            Phase::Reading => self.read(id),
            Phase::Busy => {
                if hup {
                    // Out of the set until its answer comes back, then dropped.
                    c.gone = true;
                    let _ = self.ep.ctl(libc::EPOLL_CTL_DEL, c.sock.as_raw_fd(), 0, id);
                    c.events = None;
                }
            }
            Phase::Writing => self.progress(id),
            Phase::Closing => {
                if c.sent < c.out.len() {
                    self.progress(id);
                }
                self.drain(id);
            }
        }
    }

    /// Reads what a Reading connection sent, up to one whole line, then goes on.
    fn read(&mut self, id: u64) {
        let mut buf = [0u8; 4096];
        let Some(c) = self.conns.get_mut(&id) else { return };
        while !c.inbuf.contains(&b'\n') && c.inbuf.len() <= MAX_LINE {
            match (&c.sock).read(&mut buf) {
                Ok(0) => return self.remove(id), // hung up (half a line is dropped)
                Ok(n) => c.inbuf.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return self.remove(id),
            }
        }
        self.progress(id);
    }

    /// Reads and drops what a Closing connection sends, until EOF.
    fn drain(&mut self, id: u64) {
        let mut buf = [0u8; 4096];
        let Some(c) = self.conns.get_mut(&id) else { return };
        loop {
            match (&c.sock).read(&mut buf) {
                Ok(0) => return self.remove(id),
                Ok(n) => {
                    c.drained += n;
                    if c.drained > DRAIN_BYTES {
                        return self.remove(id);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return self.remove(id),
            }
        }
    }

    /// The workers' answers.
    fn completions(&mut self) {
        self.pool.waker.clear();
        let done = std::mem::take(&mut *lock(&self.pool.done));
        let timeout = self.limits.timeout;
        for (id, line) in done {
            let Some(c) = self.conns.get_mut(&id) else { continue };
            if c.gone {
                self.remove(id);
                continue;
            }
            c.out = line.into_bytes();
            c.sent = 0;
            c.phase = Phase::Writing;
            c.deadline = Instant::now() + timeout;
            self.progress(id);
        }
    }

    /// Connections past their deadline: an idle one is told it is closed, half a call
    /// gets an error, a client not reading its answer or a drain that did not end are
    /// closed.
    fn expire(&mut self, now: Instant) {
        let late: Vec<(u64, Phase, bool)> = self
            .conns
            .iter()
            .filter(|(_, c)| c.phase != Phase::Busy && c.deadline <= now)
            .map(|(&id, c)| (id, c.phase, c.inbuf.is_empty()))
            .collect();
        if late.is_empty() {
            return;
        }
        let t = vassal_core::fmt_duration(self.limits.timeout.as_nanos() as u64);
        for (id, phase, idle) in late {
            match phase {
                Phase::Reading if idle => {
                    self.close_with(id, &Answer::Closing { reason: format!("idle for {t}: the connection is closed") })
                }
                Phase::Reading => self.close_with(id, &Answer::error(format!("incomplete call: no end of line within {t}"))),
                _ => self.remove(id),
            }
        }
    }

    fn log_refusals(&mut self) {
        if self.refused > 0 && self.refused_logged.elapsed() >= Duration::from_secs(10) {
            eprintln!(
                "vassal agent: refused {} connections over the limits (max_clients {}, max_clients_per_uid {}) in the last {:.0}s",
                self.refused,
                self.limits.max,
                self.limits.per_uid,
                self.refused_logged.elapsed().as_secs_f64()
            );
            self.refused = 0;
            self.refused_logged = Instant::now();
        }
    }
}

/// Writes what is left of `c.out`; true when all of it is written.
fn flush(c: &mut Conn) -> io::Result<bool> {
    while c.sent < c.out.len() {
        match send_some(&c.sock, &c.out[c.sent..]) {
            Ok(n) => c.sent += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

/// One non-blocking send, without SIGPIPE for a client gone.
fn send_some(sock: &UnixStream, bytes: &[u8]) -> io::Result<usize> {
    // SAFETY: sends from a live slice on our socket.
    let n = unsafe { libc::send(sock.as_raw_fd(), bytes.as_ptr().cast(), bytes.len(), libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// An epoll set keyed by u64 tokens.
struct Epoll(OwnedFd);

impl Epoll {
    fn new() -> io::Result<Epoll> {
        // SAFETY: plain syscall.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a new fd we own.
        Ok(Epoll(unsafe { OwnedFd::from_raw_fd(fd) }))
    }
    fn ctl(&self, op: i32, fd: i32, events: u32, token: u64) -> io::Result<()> {
        let mut ev = libc::epoll_event { events, u64: token };
        // SAFETY: reads one epoll_event we own.
        if unsafe { libc::epoll_ctl(self.0.as_raw_fd(), op, fd, &mut ev) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
    fn wait(&self, events: &mut [libc::epoll_event], timeout_ms: i32) -> usize {
        // SAFETY: the kernel writes at most `events.len()` entries.
        let n = unsafe { libc::epoll_wait(self.0.as_raw_fd(), events.as_mut_ptr(), events.len() as i32, timeout_ms) };
        n.max(0) as usize
    }
}

/// A call for a worker.
struct Job {
    id: u64,
    caller: Caller,
    call: Call,
}

#[derive(Default)]
struct Queue {
    jobs: VecDeque<Job>,
    idle: usize,
    threads: usize,
}

/// The workers that run `handle`: started when a call would otherwise wait, at most
/// `MAX_WORKERS`; each answer goes to `done` and wakes the I/O thread through `waker`.
struct Pool {
    shared: Arc<Shared>,
    queue: Mutex<Queue>,
    ready: Condvar,
    done: Mutex<Vec<(u64, String)>>,
    waker: crate::wait::Waker,
}

impl Pool {
    fn new(shared: Arc<Shared>) -> io::Result<Pool> {
        Ok(Pool { shared, queue: Mutex::default(), ready: Condvar::new(), done: Mutex::default(), waker: crate::wait::Waker::new()? })
    }

    fn submit(self: &Arc<Self>, job: Job) {
        // A load compiles its module (about a second for the BVT example): on a thread of
        // its own, so the workers stay free for other calls (root's only: handle refuses
        // others' at once).
        let job = if matches!(job.call, Call::Load { .. }) && job.caller.uid == 0 {
            let p = self.clone();
            let (tx, rx) = std::sync::mpsc::channel();
            let spawned = std::thread::Builder::new().name("vassal-load".into()).stack_size(WORKER_STACK).spawn(move || {
                if let Ok(job) = rx.recv() {
                    p.run(job);
                }
            });
            match spawned {
                Ok(_) => return tx.send(job).unwrap_or(()),
                Err(_) => job,
            }
        } else {
            job
        };
        let mut q = lock(&self.queue);
        q.jobs.push_back(job);
        if q.jobs.len() > q.idle && q.threads < MAX_WORKERS {
            let p = self.clone();
            let spawned = std::thread::Builder::new().name("vassal-call".into()).stack_size(WORKER_STACK).spawn(move || p.work());
            if spawned.is_ok() {
                q.threads += 1;
            } else if q.threads == 0 {
                // No thread to answer it: answer now.
                let j = q.jobs.pop_back().expect("just pushed");
                lock(&self.done).push((j.id, wire::encode(&Answer::error("the agent cannot start a thread for the call"))));
                self.waker.notify_one();
            }
        }
        drop(q);
        self.ready.notify_one();
    }

    fn work(&self) {
        loop {
            let job = {
                let mut q = lock(&self.queue);
                loop {
                    if let Some(j) = q.jobs.pop_front() {
                        break j;
                    }
                    q.idle += 1;
                    q = self.ready.wait(q).unwrap_or_else(|e| e.into_inner());
                    q.idle -= 1;
                }
            };
            self.run(job);
        }
    }

    fn run(&self, job: Job) {
        let answer = handle(&self.shared, job.caller, job.call);
        lock(&self.done).push((job.id, wire::encode(&answer)));
        self.waker.notify_one();
    }
}

/// May `caller` act on process `pid`, and on its thread `tid` if the call names one?
/// (Before the lock: reads /proc.) A thread must be one of `pid`'s, and its own real and
/// effective uid must be the caller's too: credentials are per thread in Linux, so a
/// thread that changed its own uids (a raw `setresuid`) is not the caller's even in the
/// caller's process.
fn may_touch(caller: Caller, pid: i32, tid: Option<i32>) -> Result<(), String> {
    if let Some(t) = tid {
        if kernel::thread_uids(pid, t).is_err() {
            return Err(format!("no thread {t} in process {pid}"));
        }
    }
    if caller.uid == 0 {
        return Ok(());
    }
    match kernel::uids(pid) {
        Ok((r, e)) if r == caller.uid && e == caller.uid => {}
        Ok(_) => return Err(format!("process {pid} does not belong to uid {}", caller.uid)),
        Err(_) => return Err(format!("no process {pid}")),
    }
    // The thread named, or — a call about the whole process — every thread of it.
    let tids = match tid {
        Some(t) => vec![t],
        None => kernel::threads(pid).map_err(|_| format!("no process {pid}"))?,
    };
    for t in tids {
        match kernel::thread_uids(pid, t) {
            Ok((r, e)) if r == caller.uid && e == caller.uid => {}
            Ok(_) => return Err(format!("thread {t} of process {pid} does not belong to uid {}", caller.uid)),
            // Gone meanwhile (an exit): nothing to act on.
            Err(_) if tid.is_none() => {}
            Err(_) => return Err(format!("no thread {t} in process {pid}")),
        }
    }
    Ok(())
}

/// How much a parameter's value gives, as a number that grows with privilege: more
/// `weight`, `warp` or `warp_limit` is more (and a `warp_limit` of 0, no limit, is the
/// most of all); a shorter `unwarp` time requirement (BVT §2.2) lets a task warp more
/// often, so less `unwarp` is more.
fn privilege(name: &str, value: i64) -> i128 {
    match name {
        "warp_limit" if value <= 0 => i128::MAX,
        "unwarp" => -(value as i128),
        _ => value as i128,
    }
}

/// The ceiling rule for one parameter (see the module documentation): a non-root caller
/// may set a value up to the ceiling's privilege, or any value less privileged than the
/// task's current one. A warp time limit is never unlimited for them, and is at most
/// `max_warp_limit` (the `warp_limit` ceiling, 10 ms if none is configured).
fn check_ceiling(agent: &Agent, caller: Caller, pid: i32, tid: Option<i32>, name: &str, value: i64) -> Result<(), String> {
    if caller.uid == 0 {
        return Ok(());
    }
    let ceiling = match name {
        "warp_limit" => Some(agent.cfg.max_warp_limit.min(i64::MAX as u64) as i64),
        _ => agent.cfg.ceilings.get(name).copied(),
    };
    let p = privilege(name, value);
    let current = agent.param(pid, tid, name);
    match ceiling {
        Some(c) if p <= privilege(name, c) => Ok(()),
        _ if current.is_some_and(|cur| p <= privilege(name, cur)) => Ok(()),
        Some(c) if name == "warp_limit" => {
            Err(format!("warp_limit {value}: a non-root user's warp time limit must be between 1 and {c} ns (0, no limit, is root's only)"))
        }
        Some(c) if name == "unwarp" => Err(format!("unwarp {value} is below the floor of {c} for non-root users")),
        Some(c) => Err(format!("{name} {value} is above the ceiling of {c} for non-root users")),
        None => Err(format!("only root may set {name} (no ceiling is configured for it)")),
    }
}

/// A managed process must also have been joined by the caller.
fn check_joined_by(agent: &Agent, caller: Caller, pid: i32) -> Result<(), String> {
    match agent.uid_of_task(pid) {
        Some(u) if caller.uid != 0 && u != caller.uid => Err(format!("process {pid} is managed for uid {u}")),
        _ => Ok(()),
    }
}

/// Handles one call from `caller`.
pub fn handle(shared: &Shared, caller: Caller, call: Call) -> Answer {
    if let Some(pid) = call.pid() {
        if let Err(e) = may_touch(caller, pid, call.tid()) {
            return Answer::refused(e);
        }
    }
    if matches!(call, Call::Register { .. } | Call::Unregister { .. }) && caller.uid != 0 {
        return Answer::refused("only root may register or unregister schedulers");
    }
    if matches!(call, Call::Load { .. } | Call::Unload { .. }) && caller.uid != 0 {
        return Answer::refused("only root may load or unload modules");
    }
    let now = kernel::now_ns;
    match call {
        Call::Join { pid, tid, sched, mut params } => shared.run(|a| {
            check_joined_by(a, caller, pid)?;
            for (k, v) in &params {
                check_ceiling(a, caller, pid, tid, k, *v)?;
            }
            // A non-root user's warp always has a finite limit: theirs, else the ceiling.
            if caller.uid != 0 && params.get("warp").is_some_and(|&w| w > 0) && a.param(pid, tid, "warp_limit").is_none() {
                params.entry("warp_limit".into()).or_insert(a.cfg.max_warp_limit.min(i64::MAX as u64) as i64);
            }
            let sched = match sched {
                None => None,
                Some(n) => Some(a.lookup(&n).ok_or_else(|| format!("no scheduler named '{n}'"))?),
            };
            let uid = if caller.uid == 0 { kernel::uids(pid).map(|u| u.0).unwrap_or(0) } else { caller.uid };
            Ok(a.join(now(), pid, tid, uid, sched, &params))
        }),
        Call::Leave { pid, tid } => shared.run(|a| {
            check_joined_by(a, caller, pid)?;
            Ok(a.leave(now(), pid, tid, caller.uid))
        }),
        Call::Release { pid } => shared.run(|a| {
            check_joined_by(a, caller, pid)?;
            Ok(a.release(now(), pid))
        }),
        Call::Param { pid, tid, name, value } => shared.run(|a| {
            check_joined_by(a, caller, pid)?;
            check_ceiling(a, caller, pid, tid, &name, value)?;
            Ok(a.message(now(), None, pid, tid, caller.uid, &Request::Param { name, value }))
        }),
        Call::Message { sched, pid, tid, request } => shared.run(|a| {
            check_joined_by(a, caller, pid)?;
            if let Request::Param { name, value } = &request {
                check_ceiling(a, caller, pid, tid, name, *value)?;
            }
            let sched = match sched {
                None => None,
                Some(n) => Some(a.lookup(&n).ok_or_else(|| format!("no scheduler named '{n}'"))?),
            };
            let n = now();
            let req = request.resolve(n)?;
            Ok(a.message(n, sched, pid, tid, caller.uid, &req))
        }),
        Call::Hierarchy => shared.run(|a| Ok(a.hierarchy())),
        // A pass first, so the listing is of the threads as they are: a quiet block or
        // wake (docs/agent.md, "Quiet wakes and blocks") waits in the ring buffer for
        // the next pass, up to a second when nothing else brings one.
        Call::Tasks => shared.run(|a| {
            a.pass(now());
            Ok(Answer::Tasks { tasks: a.task_rows() })
        }),
        Call::Register { name, kind, params, usage, above } => {
            shared.run(|a| Ok(a.register(now(), &name, &kind, &params, &usage, above.as_deref())))
        }
        Call::Unregister { name } => shared.run(|a| Ok(a.unregister(now(), &name))),
        Call::Load { path, name, above, below, params, watchdog_ns } => {
            let place = match (above, below) {
                (Some(_), Some(_)) => return Answer::refused("give --above or --below, not both"),
                (Some(a), None) => vassal_module::Placement::Above(a),
                (None, Some(b)) => vassal_module::Placement::Below(b),
                (None, None) => vassal_module::Placement::Top,
            };
            if !std::path::Path::new(&path).is_absolute() {
                return Answer::refused(format!("module path '{path}' is not absolute (the agent does not share the caller's directory)"));
            }
            let watchdog = match watchdog_ns {
                None => Some(vassal_module::DEFAULT_WATCHDOG),
                Some(0) => None,
                Some(w) => Some(w),
            };
            // Compiled before the agent's lock is taken: the dispatcher never waits for it.
            let ncpus = shared.with_agent(|a| a.ncpus());
            let (opened, took) = Agent::open_module(ncpus, &path, &params);
            shared.run(|a| Ok(a.load(now(), &path, &name, &place, opened, took, watchdog)))
        }
        Call::Unload { name } => shared.run(|a| Ok(a.unload(now(), &name))),
        Call::Status => {
            let dcpu = shared.dispatcher_cpu_ns.load(Ordering::Relaxed);
            shared.run(|a| {
                let n = now();
                Ok(Answer::Status(wire::Status {
                    ncpus: a.ncpus(),
                    tick_ns: a.cfg.tick,
                    uptime_ns: a.uptime(n),
                    agent_cpu_ns: kernel::process_cpu_ns(),
                    dispatcher_cpu_ns: dcpu,
                    passes: a.passes,
                    managed: a.managed(),
                    managed_threads: a.managed_threads(),
                    ledger_records: a.ledger_records(),
                    kernel_errors: a.kernel_errors,
                    ejections: a.ejections(),
                    events: a.source_name().into(),
                    bpf_events: a.bpf_events,
                    replayed_runs: a.replayed_runs,
                    replayed_sleeps: a.replayed_sleeps,
                    bounds_fired: a.bounds_fired,
                    backstop_refused: a.backstop_refused,
                }))
            })
        }
    }
}

/// Params as a map (for callers building `Join`).
pub fn params(pairs: &[(&str, i64)]) -> BTreeMap<String, i64> {
    pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}
