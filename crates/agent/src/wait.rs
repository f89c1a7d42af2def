//! What the dispatcher sleeps on: one epoll set of
//! - a timerfd armed with an absolute CLOCK_MONOTONIC time (`TFD_TIMER_ABSTIME`): the
//!   next scheduler event, slice end or poll, exact on the monotonic clock;
//! - an eventfd the broker writes after every call that changed the state ([`Waker`]);
//! - the BPF ring buffer's fd, readable when block/wake events are waiting;
//! - a pidfd of the guardian, readable when it dies (no periodic `waitpid`).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

fn fd_or_err(r: libc::c_int) -> io::Result<OwnedFd> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        // SAFETY: a new fd the kernel just returned, owned by no one else.
        Ok(unsafe { OwnedFd::from_raw_fd(r) })
    }
}

/// An eventfd: the broker's "the state changed, re-plan" to the dispatcher. Writing it
/// when nobody waits is kept (a counter), so no notification is lost between the
/// dispatcher's unlock and its wait.
pub struct Waker(OwnedFd);

impl Waker {
    pub fn new() -> io::Result<Waker> {
        // SAFETY: plain syscall.
        fd_or_err(unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) }).map(Waker)
    }
    /// Wakes the dispatcher (the name of the condition variable call it replaces).
    pub fn notify_one(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes we own; EAGAIN (counter full) means it is set anyway.
        unsafe { libc::write(self.0.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }
    pub fn notify_all(&self) {
        self.notify_one()
    }
    /// Clears it (after a wake-up).
    pub fn clear(&self) {
        let mut n: u64 = 0;
        // SAFETY: reads 8 bytes into `n`; EAGAIN when it was not set.
        unsafe { libc::read(self.0.as_raw_fd(), (&mut n as *mut u64).cast(), 8) };
    }
    pub fn fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

/// A timerfd on CLOCK_MONOTONIC, armed with absolute times.
pub struct Timer {
    fd: OwnedFd,
    armed: u64,
}

impl Timer {
    pub fn new() -> io::Result<Timer> {
        // SAFETY: plain syscall.
        let fd = fd_or_err(unsafe { libc::timerfd_create(libc::CLOCK_MONOTONIC, libc::TFD_CLOEXEC | libc::TFD_NONBLOCK) })?;
        Ok(Timer { fd, armed: 0 })
    }
    /// Fires at the absolute CLOCK_MONOTONIC time `at` (ns); re-arming clears a past
    /// expiry. Skips the syscall when `at` is what is armed and has not fired.
    pub fn arm(&mut self, at: u64, fired: bool) -> io::Result<()> {
        if at == self.armed && !fired {
            return Ok(());
        }
        let at = at.max(1);
        let spec = libc::itimerspec {
            it_interval: libc::timespec { tv_sec: 0, tv_nsec: 0 },
            it_value: libc::timespec { tv_sec: (at / 1_000_000_000) as libc::time_t, tv_nsec: (at % 1_000_000_000) as _ },
        };
        // SAFETY: reads one itimerspec we own.
        let r = unsafe { libc::timerfd_settime(self.fd.as_raw_fd(), libc::TFD_TIMER_ABSTIME, &spec, std::ptr::null_mut()) };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        self.armed = at;
        Ok(())
    }
    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// A signalfd for one signal, which the caller has blocked in every thread: readable
/// while an instance of it is pending for the process.
pub struct Signals(OwnedFd);

impl Signals {
    pub fn new(sig: i32) -> io::Result<Signals> {
        // SAFETY: sigset manipulation on a local set; a plain syscall.
        let fd = unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, sig);
            libc::signalfd(-1, &set, libc::SFD_CLOEXEC | libc::SFD_NONBLOCK)
        };
        fd_or_err(fd).map(Signals)
    }
    /// Takes every pending instance, appending the value each carries (a POSIX timer's
    /// `sigev_value`) to `out`.
    pub fn drain(&self, out: &mut Vec<u64>) {
        // SAFETY: signalfd_siginfo is plain data.
        let mut info: [libc::signalfd_siginfo; 8] = unsafe { std::mem::zeroed() };
        loop {
            // SAFETY: reads into our array.
            let r = unsafe { libc::read(self.0.as_raw_fd(), info.as_mut_ptr().cast(), size_of_val(&info)) };
            if r <= 0 {
                return;
            }
            let n = r as usize / size_of::<libc::signalfd_siginfo>();
            out.extend(info[..n].iter().map(|i| i.ssi_ptr));
        }
    }
    pub fn fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

/// A pidfd (readable when the process exits).
pub fn pidfd(pid: i32) -> io::Result<OwnedFd> {
    // SAFETY: plain syscall.
    fd_or_err(unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) } as libc::c_int)
}

/// An epoll set; each fd is registered with a token returned by [`Epoll::wait`].
pub struct Epoll {
    fd: OwnedFd,
    evs: [libc::epoll_event; 8],
}

impl Epoll {
    pub fn new() -> io::Result<Epoll> {
        // SAFETY: plain syscall.
        let fd = fd_or_err(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })?;
        Ok(Epoll { fd, evs: [libc::epoll_event { events: 0, u64: 0 }; 8] })
    }
    pub fn add(&self, fd: RawFd, token: u64) -> io::Result<()> {
        let mut ev = libc::epoll_event { events: libc::EPOLLIN as u32, u64: token };
        // SAFETY: reads one epoll_event we own.
        let r = unsafe { libc::epoll_ctl(self.fd.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
    /// Waits until one of the fds is readable; returns a bit set of the ready tokens
    /// (token t is bit t). EINTR returns an empty set.
    pub fn wait(&mut self) -> u64 {
        // SAFETY: the kernel writes at most evs.len() events into our array.
        let n = unsafe { libc::epoll_wait(self.fd.as_raw_fd(), self.evs.as_mut_ptr(), self.evs.len() as i32, -1) };
        let mut ready = 0;
        for e in &self.evs[..n.max(0) as usize] {
            let t = e.u64;
            ready |= 1u64 << t.min(63);
        }
        ready
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timer_fires_at_an_absolute_time_and_the_waker_wakes() {
        let mut ep = Epoll::new().unwrap();
        let mut timer = Timer::new().unwrap();
        let waker = Waker::new().unwrap();
        ep.add(timer.fd(), 0).unwrap();
        ep.add(waker.fd(), 1).unwrap();
        let at = crate::kernel::now_ns() + 5_000_000;
        timer.arm(at, false).unwrap();
        assert_eq!(ep.wait(), 1);
        assert!(crate::kernel::now_ns() >= at);
        // Re-arming far ahead clears the expiry; the waker alone is then ready.
        timer.arm(at + 60_000_000_000, true).unwrap();
        waker.notify_one();
        assert_eq!(ep.wait(), 2);
        waker.clear();
        waker.notify_one();
        assert_eq!(ep.wait(), 2);
    }
}
