//! The few Linux calls the agent makes, each wrapped once with an `io::Result`.
//!
//! The scheduling calls (`sched_setscheduler`, `sched_getscheduler`, `sched_getparam`,
//! `sched_{get,set}affinity`, `{get,set}priority` on another thread, `clock_getcpuclockid`,
//! `SO_PEERCRED`, `mlockall`) go straight to `libc`: neither `nix` nor `rustix` offers
//! `sched_setscheduler` on another task, and one audited module is clearer than three
//! crates. Nothing else in the agent calls `libc` for scheduling.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

/// The `SCHED_RESET_ON_FORK` flag: children of a raised task start at SCHED_OTHER, so a
/// managed task cannot pass a real-time priority on to processes the agent never saw.
pub const RESET_ON_FORK: i32 = 0x4000_0000;

/// How many CPUs an affinity mask holds here (1024, as glibc's `cpu_set_t`).
pub const MASK_WORDS: usize = 16;

/// CPU affinity as a bit mask.
pub type Mask = [u64; MASK_WORDS];

/// CLOCK_MONOTONIC in nanoseconds: the agent's clock (scheduler events are absolute
/// times on it).
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Sleeps until the absolute CLOCK_MONOTONIC time `at` (ns).
pub fn sleep_until(at: u64) {
    let ts = libc::timespec { tv_sec: (at / 1_000_000_000) as libc::time_t, tv_nsec: (at % 1_000_000_000) as _ };
    // SAFETY: a timespec by value; EINTR just returns early, the callers loop.
    unsafe { libc::clock_nanosleep(libc::CLOCK_MONOTONIC, libc::TIMER_ABSTIME, &ts, std::ptr::null_mut()) };
}

fn check(r: libc::c_int) -> io::Result<()> {
    if r == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// A thread's scheduling state: what the agent saves at join and the guardian restores.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SchedState {
    /// SCHED_* policy, with [`RESET_ON_FORK`] or'ed in if it was set.
    pub policy: i32,
    pub prio: i32,
    pub nice: i32,
    pub affinity: Mask,
}

pub fn get_sched(tid: i32) -> io::Result<SchedState> {
    // SAFETY: plain syscalls on a tid; the param and mask are ours.
    unsafe {
        let policy = libc::sched_getscheduler(tid);
        if policy == -1 {
            return Err(io::Error::last_os_error());
        }
        let mut p = libc::sched_param { sched_priority: 0 };
        check(libc::sched_getparam(tid, &mut p))?;
        *libc::__errno_location() = 0;
        let nice = libc::getpriority(libc::PRIO_PROCESS, tid as libc::id_t);
        if nice == -1 && *libc::__errno_location() != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(SchedState { policy, prio: p.sched_priority, nice, affinity: get_affinity(tid)? })
    }
}

pub fn set_policy(tid: i32, policy: i32, prio: i32) -> io::Result<()> {
    let p = libc::sched_param { sched_priority: prio };
    // SAFETY: a syscall with a param we own.
    check(unsafe { libc::sched_setscheduler(tid, policy, &p) })
}

pub fn set_nice(tid: i32, nice: i32) -> io::Result<()> {
    // SAFETY: a syscall on a tid.
    check(unsafe { libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, nice) })
}

/// The nice of thread `tid` now.
pub fn get_nice(tid: i32) -> io::Result<i32> {
    // SAFETY: getpriority returns -1 both as a value and as an error: errno tells them
    // apart, so it is cleared first.
    unsafe {
        *libc::__errno_location() = 0;
        let n = libc::getpriority(libc::PRIO_PROCESS, tid as libc::id_t);
        if n == -1 && *libc::__errno_location() != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(n)
    }
}

pub fn get_affinity(tid: i32) -> io::Result<Mask> {
    let mut m: Mask = [0; MASK_WORDS];
    // SAFETY: the kernel writes at most size_of::<Mask>() bytes into `m`.
    check(unsafe { libc::sched_getaffinity(tid, size_of::<Mask>(), m.as_mut_ptr().cast()) })?;
    Ok(m)
}

pub fn set_affinity(tid: i32, m: &Mask) -> io::Result<()> {
    // SAFETY: the kernel reads size_of::<Mask>() bytes from `m`.
    check(unsafe { libc::sched_setaffinity(tid, size_of::<Mask>(), m.as_ptr().cast()) })
}

pub fn one_cpu(cpu: u16) -> Mask {
    let mut m: Mask = [0; MASK_WORDS];
    m[cpu as usize / 64] |= 1 << (cpu % 64);
    m
}

/// Sends `sig` to the process (thread group) `pid`: SIGSTOP and SIGCONT hold and release
/// a process the agent hard-caps (see `state::KState::Held`). About the cost of a
/// sched_setscheduler (docs/measurements/agent-2026-11-22.md, run F).
pub fn signal_process(pid: i32, sig: i32) -> io::Result<()> {
    // SAFETY: a syscall on a pid.
    check(unsafe { libc::kill(pid, sig) })
}

/// Sends `sig` to thread `tid` of process `tgid` (ESRCH if `tid` is not in `tgid`): the
/// guardian's SIGCONT names the thread it checked (tid and start time) and the process
/// the agent stopped.
pub fn signal_thread(tgid: i32, tid: i32, sig: i32) -> io::Result<()> {
    // SAFETY: a syscall on ids.
    check(unsafe { libc::syscall(libc::SYS_tgkill, tgid, tid, sig) } as libc::c_int)
}

/// Restores a saved state: affinity, then policy and priority, then nice.
pub fn restore(tid: i32, s: &SchedState) -> io::Result<()> {
    let aff = set_affinity(tid, &s.affinity);
    set_policy(tid, s.policy, s.prio)?;
    if s.policy & !RESET_ON_FORK == libc::SCHED_OTHER || s.policy & !RESET_ON_FORK == libc::SCHED_BATCH {
        set_nice(tid, s.nice)?;
    }
    aff
}

/// The state a thread created by a thread in state `parent` starts with: the parent's
/// policy, priority, nice and affinity, except that with [`RESET_ON_FORK`] the child of a
/// real-time (FIFO or RR) thread starts at SCHED_OTHER, nice 0, another's negative nice
/// is reset to 0, and the child does not carry the flag (the kernel's `sched_fork`).
/// SCHED_IDLE and the affinity are always inherited. What a thread that a managed process
/// created would have had without the agent (crate::guardian, "templates").
pub fn inherited(parent: &SchedState) -> SchedState {
    if parent.policy & RESET_ON_FORK == 0 {
        return *parent;
    }
    let policy = parent.policy & !RESET_ON_FORK;
    if policy == libc::SCHED_FIFO || policy == libc::SCHED_RR {
        SchedState { policy: libc::SCHED_OTHER, prio: 0, nice: 0, affinity: parent.affinity }
    } else {
        SchedState { policy, prio: parent.prio, nice: parent.nice.max(0), affinity: parent.affinity }
    }
}

/// A process's /proc directory, held open: what is read through it is that process's
/// for good (once it is reaped the reads fail, even if its pid is reused), and nothing is
/// allocated — the guardian's sweep of a process's threads (crate::guardian).
pub struct ProcDir(std::os::fd::OwnedFd);

impl ProcDir {
    /// Opens /proc/PID.
    pub fn open(pid: i32) -> io::Result<ProcDir> {
        use std::os::fd::FromRawFd;
        // "/proc/" and at most 11 characters of a pid, NUL-terminated.
        let mut path = [0u8; 24];
        path[..6].copy_from_slice(b"/proc/");
        let n = 6 + write_decimal(&mut path[6..], pid);
        path[n] = 0;
        // SAFETY: a NUL-terminated path in a local buffer.
        let fd = unsafe { libc::open(path.as_ptr().cast(), libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC) };
        check(fd)?;
        // SAFETY: a fresh fd we own.
        Ok(ProcDir(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) }))
    }

    /// Its main thread's start time, as [`start_time`] gives it.
    pub fn start_time(&self) -> io::Result<u64> {
        use std::os::fd::FromRawFd;
        // SAFETY: openat relative to our directory fd, with a NUL-terminated name.
        let fd = unsafe { libc::openat(self.0.as_raw_fd(), c"stat".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
        check(fd)?;
        // SAFETY: a fresh fd we own (closed on drop).
        let file = unsafe { File::from_raw_fd(fd) };
        let mut buf = [0u8; 1024];
        let n = std::os::unix::fs::FileExt::read_at(&file, &mut buf, 0)?;
        stat_start_time(&buf[..n]).ok_or_else(|| io::ErrorKind::InvalidData.into())
    }

    /// Calls `f` with the tid of each of its threads (/proc/PID/task), in the kernel's
    /// order.
    pub fn threads(&self, mut f: impl FnMut(i32)) -> io::Result<()> {
        use std::os::fd::FromRawFd;
        // SAFETY: openat relative to our directory fd, with a NUL-terminated name.
        let fd = unsafe { libc::openat(self.0.as_raw_fd(), c"task".as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC) };
        check(fd)?;
        // SAFETY: a fresh fd we own (closed on drop).
        let dir = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
        // struct linux_dirent64 records: d_ino (8), d_off (8), d_reclen (2), d_type (1),
        // d_name (NUL-terminated); 8-byte aligned.
        let mut buf = [0u64; 512];
        loop {
            // SAFETY: the kernel writes at most the buffer's size into it.
            let n = unsafe { libc::syscall(libc::SYS_getdents64, dir.as_raw_fd(), buf.as_mut_ptr(), size_of_val(&buf)) };
            if n < 0 {
                return Err(io::Error::last_os_error());
            }
            if n == 0 {
                return Ok(());
            }
            // SAFETY: the first n bytes of the buffer, as bytes.
            let bytes = unsafe { std::slice::from_raw_parts(buf.as_ptr().cast::<u8>(), n as usize) };
            let mut at = 0;
            while at + 19 < bytes.len() {
                let len = u16::from_ne_bytes([bytes[at + 16], bytes[at + 17]]) as usize;
                let name = &bytes[at + 19..(at + len).min(bytes.len())];
                let name = &name[..name.iter().position(|&b| b == 0).unwrap_or(name.len())];
                if let Some(tid) = std::str::from_utf8(name).ok().and_then(|s| s.parse().ok()) {
                    f(tid);
                }
                if len == 0 {
                    break;
                }
                at += len;
            }
        }
    }
}

/// The start time in a /proc/.../stat line, without allocating (as `stat_fields` finds
/// it: field 22, the 20th after "(comm)").
fn stat_start_time(line: &[u8]) -> Option<u64> {
    let close = line.iter().rposition(|&b| b == b')')?;
    let field = line[close + 1..].split(|&b| b == b' ').filter(|f| !f.is_empty()).nth(19)?;
    std::str::from_utf8(field).ok()?.trim_end().parse().ok()
}

/// Writes `v` (≥ 0) in decimal at the start of `out`; returns how many bytes.
fn write_decimal(out: &mut [u8], v: i32) -> usize {
    let mut digits = [0u8; 10];
    let (mut v, mut n) = (v.max(0) as u32, 0);
    loop {
        digits[n] = b'0' + (v % 10) as u8;
        n += 1;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    for i in 0..n {
        out[i] = digits[n - 1 - i];
    }
    n
}

/// The threads of a process.
pub fn threads(pid: i32) -> io::Result<Vec<i32>> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(format!("/proc/{pid}/task"))? {
        if let Some(t) = e?.file_name().to_str().and_then(|s| s.parse().ok()) {
            out.push(t);
        }
    }
    out.sort_unstable();
    Ok(out)
}

/// The fields of /proc/.../stat after "(comm)": state is field 3, starttime field 22.
fn stat_fields(text: &str) -> Option<Vec<&str>> {
    let close = text.rfind(')')?;
    Some(text[close + 1..].split_whitespace().collect())
}

/// A thread's start time (clock ticks since boot): with the tid it names one thread for
/// good, so a restore never touches a recycled tid.
pub fn start_time(tid: i32) -> io::Result<u64> {
    let line = std::fs::read(format!("/proc/{tid}/stat"))?;
    stat_start_time(&line).ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "malformed stat"))
}

/// The thread group (process) a task id belongs to (`Tgid:` of /proc/ID/status).
pub fn tgid(tid: i32) -> io::Result<i32> {
    let text = std::fs::read_to_string(format!("/proc/{tid}/status"))?;
    text.lines()
        .find_map(|l| l.strip_prefix("Tgid:"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "no Tgid line"))
}

/// Whether a task is a kernel thread (PF_KTHREAD in the flags of /proc/ID/stat).
pub fn is_kernel_thread(tid: i32) -> io::Result<bool> {
    const PF_KTHREAD: u64 = 0x0020_0000;
    let text = std::fs::read_to_string(format!("/proc/{tid}/stat"))?;
    let flags: u64 = stat_fields(&text)
        .and_then(|f| f.get(6).and_then(|s| s.parse().ok()))
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "malformed stat"))?;
    Ok(flags & PF_KTHREAD != 0)
}

/// A resource limit, soft and hard (RLIM_INFINITY: none).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rlimit {
    pub soft: u64,
    pub hard: u64,
}

/// A process's RLIMIT_RTTIME (µs of real-time CPU without a blocking call).
pub fn rttime(pid: i32) -> io::Result<Rlimit> {
    let mut old = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: prlimit writes one rlimit we own.
    check(unsafe { libc::prlimit(pid, libc::RLIMIT_RTTIME, std::ptr::null(), &mut old) })?;
    Ok(Rlimit { soft: old.rlim_cur, hard: old.rlim_max })
}

/// Sets a process's RLIMIT_RTTIME (root may lower and raise it).
pub fn set_rttime(pid: i32, r: Rlimit) -> io::Result<()> {
    let new = libc::rlimit { rlim_cur: r.soft, rlim_max: r.hard };
    // SAFETY: prlimit reads one rlimit.
    check(unsafe { libc::prlimit(pid, libc::RLIMIT_RTTIME, &new, std::ptr::null_mut()) })
}

/// The real and effective uid of a process.
pub fn uids(pid: i32) -> io::Result<(u32, u32)> {
    uids_in(&std::fs::read_to_string(format!("/proc/{pid}/status"))?)
}

fn uids_in(text: &str) -> io::Result<(u32, u32)> {
    let line = text.lines().find(|l| l.starts_with("Uid:")).ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "no Uid line"))?;
    let mut it = line[4..].split_whitespace().map(|s| s.parse::<u32>());
    match (it.next(), it.next()) {
        (Some(Ok(r)), Some(Ok(e))) => Ok((r, e)),
        _ => Err(io::Error::new(io::ErrorKind::InvalidData, "malformed Uid line")),
    }
}

/// A thread's state, read from a kept-open /proc/TID/stat (no open/close per poll) — the
/// polling event source.
pub struct StatFile {
    tid: i32,
    file: File,
    /// /proc/TID/wchan, when this kernel names the function a blocked task sleeps in
    /// (see [`use_wchan`]): "0" exactly when the task is runnable. Reading it costs about a
    /// third of reading the stat line (docs/agent.md, "Event source"). Opened at the
    /// first [`StatFile::runnable`] (a thread the BPF events watch never needs it).
    wchan: Option<File>,
    buf: [u8; 1024],
}

static WCHAN: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Checks once that /proc/TID/wchan names the sleeping function of a blocked thread (some
/// kernels print "0" for every task); if so, [`StatFile::runnable`] uses it. Returns
/// whether it does.
pub fn use_wchan() -> bool {
    let (tx, rx) = std::sync::mpsc::channel::<i32>();
    let t = std::thread::spawn(move || {
        let _ = tx.send(gettid());
        std::thread::sleep(std::time::Duration::from_millis(50));
    });
    let ok = rx.recv().ok().is_some_and(|tid| {
        std::thread::sleep(std::time::Duration::from_millis(10));
        std::fs::read_to_string(format!("/proc/{tid}/wchan")).is_ok_and(|w| !w.trim().is_empty() && w.trim() != "0")
    });
    let _ = t.join();
    WCHAN.store(ok, std::sync::atomic::Ordering::Relaxed);
    ok
}

impl StatFile {
    pub fn open(tid: i32) -> io::Result<StatFile> {
        Ok(StatFile { tid, file: File::open(format!("/proc/{tid}/stat"))?, wchan: None, buf: [0; 1024] })
    }
    /// The state letter (R running/runnable, S, D, T, Z, ...). An error or 'Z'/'X' means
    /// the thread is gone.
    pub fn state(&mut self) -> io::Result<u8> {
        // One pread at offset 0 regenerates the line (no seek, no size probe, no second
        // read for end of file: the line is far shorter than the buffer).
        use std::os::unix::fs::FileExt;
        let n = self.file.read_at(&mut self.buf, 0)?;
        let line = &self.buf[..n];
        let close = line.iter().rposition(|&b| b == b')').ok_or_else(|| io::Error::from(io::ErrorKind::InvalidData))?;
        line.get(close + 2).copied().ok_or_else(|| io::Error::from(io::ErrorKind::InvalidData))
    }
    /// Whether the thread is runnable (running or waiting for a CPU). A zombie may look
    /// runnable through wchan: callers check [`StatFile::state`] now and then.
    pub fn runnable(&mut self) -> io::Result<bool> {
        use std::os::unix::fs::FileExt;
        if self.wchan.is_none() && WCHAN.load(std::sync::atomic::Ordering::Relaxed) {
            self.wchan = Some(File::open(format!("/proc/{}/wchan", self.tid))?);
        }
        match &self.wchan {
            Some(w) => {
                let n = w.read_at(&mut self.buf, 0)?;
                Ok(self.buf[..n].trim_ascii() == b"0")
            }
            None => Ok(self.state()? == b'R'),
        }
    }
}

/// A thread's CPU time, read from a kept-open /proc/TID/schedstat (its first field,
/// `sum_exec_runtime` in ns; ~0.7 µs a read, MACHINE.md). Exact to the read: the kernel's
/// `task_sched_runtime` brings a thread running on another CPU up to date first, where
/// a process CPU clock read from another process only sums what its threads' last ticks
/// and switches recorded (up to a 4 ms kernel tick behind for each running thread). Linux
/// lets a thread CPU clock (`clock_gettime`) be read only within its own process.
pub struct RunTime {
    file: File,
    buf: [u8; 96],
}

impl RunTime {
    pub fn open(tid: i32) -> io::Result<RunTime> {
        Ok(RunTime { file: File::open(format!("/proc/{tid}/schedstat"))?, buf: [0; 96] })
    }
    /// CPU time used so far, ns (an error: the thread is gone).
    pub fn read(&mut self) -> io::Result<u64> {
        use std::os::unix::fs::FileExt;
        let n = self.file.read_at(&mut self.buf, 0)?;
        parse_schedstat(&self.buf[..n]).ok_or_else(|| io::Error::from(io::ErrorKind::InvalidData))
    }
}

/// The first field of a schedstat line ("runtime wait timeslices").
fn parse_schedstat(line: &[u8]) -> Option<u64> {
    let end = line.iter().position(|&b| b == b' ' || b == b'\n').unwrap_or(line.len());
    std::str::from_utf8(&line[..end]).ok()?.parse().ok()
}

/// The real and effective uid of thread `tid` of process `pid` (credentials are per
/// thread in Linux: a raw `setresuid` changes one thread's only), from
/// /proc/PID/task/TID/status, so a tid of another process is not found.
pub fn thread_uids(pid: i32, tid: i32) -> io::Result<(u32, u32)> {
    uids_in(&std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/status"))?)
}

/// Raises this process's soft limit on open files to its hard limit: the agent keeps two
/// /proc files open per managed thread (stat and schedstat; three when polling), and the
/// usual soft limit of 1,024 would end a join of a few hundred threads. Returns the limit.
pub fn raise_nofile() -> io::Result<u64> {
    let mut r = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit/setrlimit on a struct we own.
    check(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) })?;
    if r.rlim_cur < r.rlim_max {
        r.rlim_cur = r.rlim_max;
        // SAFETY: as above.
        check(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &r) })?;
    }
    Ok(r.rlim_cur)
}

/// A process's CPU-time clock (all its threads).
#[derive(Clone, Copy, Debug)]
pub struct CpuClock(libc::clockid_t);

impl CpuClock {
    pub fn of_process(pid: i32) -> io::Result<CpuClock> {
        let mut id: libc::clockid_t = 0;
        // SAFETY: writes one clockid we own.
        let r = unsafe { libc::clock_getcpuclockid(pid, &mut id) };
        if r != 0 {
            return Err(io::Error::from_raw_os_error(r));
        }
        Ok(CpuClock(id))
    }
    /// CPU time used so far, ns.
    pub fn read(&self) -> io::Result<u64> {
        let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: writes one timespec we own.
        check(unsafe { libc::clock_gettime(self.0, &mut ts) })?;
        Ok(ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
    }
}

/// A pipe, both ends close-on-exec: (read end, write end).
pub fn pipe_cloexec() -> io::Result<(std::os::fd::OwnedFd, std::os::fd::OwnedFd)> {
    use std::os::fd::FromRawFd;
    let mut fds = [0i32; 2];
    // SAFETY: pipe2 writes two fds.
    check(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) })?;
    // SAFETY: two fresh fds, each owned once.
    Ok(unsafe { (std::os::fd::OwnedFd::from_raw_fd(fds[0]), std::os::fd::OwnedFd::from_raw_fd(fds[1])) })
}

/// The signal a [`CpuTimer`] raises: the first real-time signal glibc leaves to programs
/// plus one. The agent blocks it in every thread and reads it from a signalfd
/// (`wait::Signals`) in the dispatcher's wait set.
pub fn cpu_timer_signal() -> i32 {
    libc::SIGRTMIN() + 1
}

/// A POSIX timer on another process's CPU clock: it raises [`cpu_timer_signal`] in this
/// process when that process has used CPU up to a set amount. The kernel checks CPU
/// timers at its own tick on the CPU where the process runs, so it fires within one
/// kernel tick (4 ms at HZ = 250) of the amount.
pub struct CpuTimer(libc::timer_t);

// SAFETY: a timer id is a plain handle; every call on it takes &mut self or self.
unsafe impl Send for CpuTimer {}

impl CpuTimer {
    /// A timer on `clock` whose signal carries `tag` (`wait::Signals::drain`).
    pub fn new(clock: &CpuClock, tag: u32) -> io::Result<CpuTimer> {
        // SAFETY: sigevent is plain data; zeroed is a valid start.
        let mut sev: libc::sigevent = unsafe { std::mem::zeroed() };
        sev.sigev_notify = libc::SIGEV_SIGNAL;
        sev.sigev_signo = cpu_timer_signal();
        sev.sigev_value = libc::sigval { sival_ptr: tag as usize as *mut libc::c_void };
        let mut id: libc::timer_t = std::ptr::null_mut();
        // SAFETY: reads one sigevent, writes one timer id we own.
        check(unsafe { libc::timer_create(clock.0, &mut sev, &mut id) })?;
        Ok(CpuTimer(id))
    }
    /// Fires when the process's CPU clock reaches `at` ns (absolute); 0 disarms it.
    pub fn set(&mut self, at: u64) -> io::Result<()> {
        let spec = libc::itimerspec {
            it_interval: libc::timespec { tv_sec: 0, tv_nsec: 0 },
            it_value: libc::timespec { tv_sec: (at / 1_000_000_000) as libc::time_t, tv_nsec: (at % 1_000_000_000) as _ },
        };
        // SAFETY: our timer; reads one itimerspec.
        check(unsafe { libc::timer_settime(self.0, libc::TIMER_ABSTIME, &spec, std::ptr::null_mut()) })
    }
}

impl Drop for CpuTimer {
    fn drop(&mut self) {
        // SAFETY: our timer, deleted once.
        unsafe { libc::timer_delete(self.0) };
    }
}

/// The calling thread's CPU time, ns (for the agent's own overhead).
pub fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: writes one timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// This process's CPU time, ns.
pub fn process_cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: writes one timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The kernel credentials of a Unix-socket peer: (pid, uid, gid) from SO_PEERCRED.
pub fn peer_cred(sock: &impl AsRawFd) -> io::Result<(i32, u32, u32)> {
    let mut c = libc::ucred { pid: 0, uid: 0, gid: 0 };
    let mut len = size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `c`.
    check(unsafe {
        libc::getsockopt(sock.as_raw_fd(), libc::SOL_SOCKET, libc::SO_PEERCRED, (&mut c as *mut libc::ucred).cast(), &mut len)
    })?;
    Ok((c.pid, c.uid, c.gid))
}

/// Locks all current and future memory of this process (no page fault in the dispatcher).
pub fn mlockall() -> io::Result<()> {
    // SAFETY: no pointers.
    check(unsafe { libc::mlockall(libc::MCL_CURRENT | libc::MCL_FUTURE) })
}

/// Puts the calling thread at SCHED_FIFO `prio` (0: back to SCHED_OTHER).
pub fn set_self(prio: i32) -> io::Result<()> {
    if prio == 0 {
        set_policy(0, libc::SCHED_OTHER, 0)
    } else {
        set_policy(0, libc::SCHED_FIFO, prio)
    }
}

/// Whether the effective uid is root.
pub fn is_root() -> bool {
    // SAFETY: no arguments.
    unsafe { libc::geteuid() == 0 }
}

/// The CPUs this process may use (the agent manages these).
pub fn online_cpus() -> u16 {
    std::thread::available_parallelism().map_or(1, |n| n.get().min(64) as u16)
}

/// Ignores SIGINT in this process (`vassal run` lets its child take the terminal's ^C).
pub fn ignore_sigint() {
    // SAFETY: sets one signal disposition.
    unsafe { libc::signal(libc::SIGINT, libc::SIG_IGN) };
}

pub fn gettid() -> i32 {
    // SAFETY: no arguments.
    unsafe { libc::gettid() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_survive_parentheses_in_comm() {
        let f = stat_fields("12 (a) b) S 1 2 3").unwrap();
        assert_eq!(f[0], "S");
        let line = "12 (a) b) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 4242 19 20\n";
        assert_eq!(stat_start_time(line.as_bytes()), Some(4242));
        assert_eq!(stat_fields(line).and_then(|f| f[19].parse().ok()), Some(4242u64));
    }

    #[test]
    fn a_thread_inherits_its_creators_state_as_sched_fork_says() {
        let aff = one_cpu(0);
        let other = SchedState { policy: libc::SCHED_OTHER, prio: 0, nice: 3, affinity: aff };
        assert_eq!(inherited(&other), other);
        let idle = SchedState { policy: libc::SCHED_IDLE | RESET_ON_FORK, prio: 0, nice: 0, affinity: aff };
        assert_eq!(inherited(&idle), SchedState { policy: libc::SCHED_IDLE, ..idle });
        let fifo = SchedState { policy: libc::SCHED_FIFO | RESET_ON_FORK, prio: 50, nice: -5, affinity: aff };
        assert_eq!(inherited(&fifo), SchedState { policy: libc::SCHED_OTHER, prio: 0, nice: 0, affinity: aff });
        assert_eq!(inherited(&SchedState { policy: libc::SCHED_FIFO, ..fifo }), SchedState { policy: libc::SCHED_FIFO, ..fifo });
        let negative = SchedState { policy: libc::SCHED_OTHER | RESET_ON_FORK, prio: 0, nice: -5, affinity: aff };
        assert_eq!(inherited(&negative), SchedState { policy: libc::SCHED_OTHER, nice: 0, ..negative });
        let positive = SchedState { nice: 5, ..negative };
        assert_eq!(inherited(&positive), SchedState { policy: libc::SCHED_OTHER, ..positive });
    }

    #[test]
    fn a_proc_dir_lists_the_threads_and_start_time_of_its_process() {
        let me = std::process::id() as i32;
        let (tx, rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
        let t = std::thread::spawn(move || {
            tx.send(gettid()).unwrap();
            let _ = stop_rx.recv();
        });
        let other = rx.recv().unwrap();
        let dir = ProcDir::open(me).unwrap();
        assert_eq!(dir.start_time().unwrap(), start_time(me).unwrap());
        let mut seen = Vec::new();
        dir.threads(|tid| seen.push(tid)).unwrap();
        // (Other tests' threads come and go meanwhile: only these two are sure.)
        assert!(seen.contains(&me) && seen.contains(&other), "{seen:?}");
        stop_tx.send(()).unwrap();
        t.join().unwrap();
        let mut buf = [0u8; 10];
        for v in [0, 7, 42, 12345, i32::MAX] {
            let n = write_decimal(&mut buf, v);
            assert_eq!(&buf[..n], v.to_string().as_bytes());
        }
        assert!(ProcDir::open(i32::MAX).is_err());
    }

    #[test]
    fn reads_own_state() {
        let me = std::process::id() as i32;
        let s = get_sched(me).unwrap();
        assert!(s.affinity.iter().any(|&w| w != 0));
        let mut st = StatFile::open(gettid()).unwrap();
        assert_eq!(st.state().unwrap(), b'R');
        assert!(st.runnable().unwrap());
        let mut rt = RunTime::open(gettid()).unwrap();
        let (a, b) = (rt.read().unwrap(), rt.read().unwrap());
        assert!(a > 0 && b >= a, "{a} {b}");
        assert_eq!(parse_schedstat(b"123 456 7\n"), Some(123));
        assert_eq!(parse_schedstat(b"x"), None);
        assert_eq!(thread_uids(me, gettid()).unwrap(), uids(me).unwrap());
        assert!(thread_uids(me, 1).is_err(), "PID 1 is no thread of this process");
        assert!(start_time(me).unwrap() > 0);
        assert!(CpuClock::of_process(me).unwrap().read().unwrap() > 0);
        assert!(threads(me).unwrap().contains(&me));
        assert_eq!(tgid(me).unwrap(), me);
        assert!(!is_kernel_thread(me).unwrap());
        // kthreadd is pid 2 on Linux.
        assert!(is_kernel_thread(2).unwrap());
        assert_eq!(rttime(me).unwrap(), rttime(0).unwrap());
    }
}
