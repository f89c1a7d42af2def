//! The guardian: a separate process that returns every thread of every managed process
//! to its original policy, priority, nice and affinity the moment the agent dies, however
//! it dies.
//!
//! Mechanism (not an exit handler):
//! - The **ledger** is a shared anonymous mapping created before the guardian is forked,
//!   so both processes see the same pages. It holds two kinds of record, each written
//!   completely and only then marked valid (a release store):
//!   - a **thread record** per managed thread: tid, start time (so a recycled tid is
//!     never touched) and the thread's original state. Written before the agent first
//!     changes the thread's scheduling, cleared after the agent restored the thread
//!     itself (or saw it exit), so it is valid whenever the thread may be in a state the
//!     agent gave it. A thread listed at join has the state it had then as original. A
//!     thread the process created later did not start in its own state: it inherited
//!     the one the agent gave its creator (bound to one CPU, SCHED_IDLE, or SCHED_OTHER
//!     at nice 0 from a raised creator — SCHED_RESET_ON_FORK resets only a real-time
//!     policy and a negative nice, never SCHED_IDLE or the affinity). Its original is
//!     therefore the state it would have had without the agent: what it inherits
//!     (`kernel::inherited`, the kernel's fork rules) from its creator's original when
//!     the creator is known and recorded (the BPF new-thread event names it), else from
//!     the process's template;
//!   - a **template** per managed process: its main thread's original state, tid and
//!     start time, written at join before anything is changed, cleared when the agent
//!     stops managing the process.
//!
//!   A thread record also names the process the agent has stopped (SIGSTOP: a *held*
//!   process, hard-capped outside its reservation; see `state::KState::Held`), set before
//!   the stop and cleared after the SIGCONT, so a restore never leaves a stopped task.
//! - A **restore** (`Ledger::restore_all` in the guardian; `Ledger::restore` and
//!   `Ledger::restore_process` when the agent unmanages a process: `ctl release`, its
//!   SIGTERM, the guardian's death, a main thread that exited) returns every thread of
//!   every managed process: first each recorded thread that still exists (same tid and
//!   start time) to its record, then, for each template whose process is still the
//!   recorded one (its main thread's start time, checked through its /proc directory,
//!   held open), a **sweep** of /proc/TGID/task: each thread not restored from a record —
//!   one created since the agent last adopted threads, up to a rescan period, or one pass
//!   with BPF events — is set to the template's inherited state. The sweep lists the
//!   threads again while a listing finds new ones (created meanwhile by a thread still in
//!   the agent's state), at most [`SWEEP_ROUNDS`] times. The guardian's restore allocates
//!   nothing for the sweep (its list of threads done is allocated before it waits).
//! - The **life line** is a pipe: the agent holds the write end, the guardian blocks in
//!   `poll` on the read end. The kernel closes the write end when the agent exits for any
//!   reason — SIGTERM, a panic (the agent aborts on panic), SIGKILL, OOM — and the poll
//!   returns POLLHUP at once. The guardian runs at a SCHED_FIFO priority above
//!   everything the agent hands out, with its memory locked, so it runs within
//!   microseconds even when managed tasks hold every CPU at real-time priority; it then
//!   restores (above; and continues every process the agent had stopped) and exits.
//! - The **life lock** hears of a death sooner. The kernel closes a dying process's files
//!   only after it has torn down its address space, and under load the agent's
//!   time-sharing threads (main, broker) take a while to get the CPU to die: the life
//!   line alone heard of a SIGKILL up to over 100 ms late (docs/agent.md, "Safety").
//!   The life lock is a robust process-shared mutex in a shared page, held by the
//!   dispatcher thread (SCHED_FIFO) from its start, and waited for by a second guardian
//!   thread. When the dispatcher thread dies — SIGKILL, abort, or its own exit — the
//!   kernel walks its robust list as the first step of its exit, before any memory is
//!   freed, marks the mutex owner-dead and wakes the waiter (`EOWNERDEAD`). The
//!   dispatcher tells the guardian it holds the lock by writing one byte into the life
//!   line; only then does the waiter start, so it can never take the lock first.
//!   Whichever of the two hears first restores; the other does nothing.
//! - The agent watches the guardian in turn (a pidfd in the dispatcher's wait set):
//!   if the guardian dies, the agent restores every task itself and exits, so no task
//!   is ever managed without a guardian. (If both are killed at the same instant nothing
//!   is left to restore; the kernel's RT throttling still bounds a raised task to 95%
//!   of its CPU.)

use std::collections::BTreeMap;
use std::io;
use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, Ordering};

use crate::kernel::{self, SchedState, MASK_WORDS};

/// How many records the ledger can hold: one per managed thread and one per managed
/// process (a join beyond it is refused).
pub const LEDGER_CAPACITY: usize = 4096;

/// How many times a restore lists a process's threads at most (see `Ledger::sweep`).
pub const SWEEP_ROUNDS: usize = 3;

const FREE: u32 = 0;
/// A thread's record: its original state.
const VALID: u32 = 2;
/// A process's template: its main thread's original state (see the module documentation).
const PROCESS: u32 = 3;

#[repr(C)]
struct Record {
    state: AtomicU32,
    /// The thread; in a template, the process (its main thread).
    tid: i32,
    start_time: u64,
    policy: i32,
    prio: i32,
    nice: i32,
    /// The process (tgid) the agent stopped with SIGSTOP, or 0.
    stopped: AtomicI32,
    affinity: [u64; MASK_WORDS],
    /// In a template: the process's RLIMIT_RTTIME before the agent lowered it (the
    /// real-time backstop, `state::Agent::set_backstop`), valid when `rttime_saved` is 1.
    rttime_saved: AtomicU32,
    rttime_soft: AtomicU64,
    rttime_hard: AtomicU64,
}

/// The shared table of saved thread states and process templates (see the module
/// documentation).
pub struct Ledger {
    base: *mut Record,
    /// Records the agent has used (a hint for `alloc`; the guardian scans all).
    next: usize,
    /// The agent's index of its templates, by process (the guardian scans the records).
    templates: BTreeMap<i32, Slot>,
    /// The threads a restore has set (sorted): the guardian's is allocated before it
    /// waits, so that its restore allocates nothing up to `LEDGER_CAPACITY` threads.
    done: Vec<i32>,
}

// SAFETY: the mapping lives for the process; all access goes through &mut self (the
// agent's state mutex) or happens in the single-threaded guardian.
unsafe impl Send for Ledger {}

/// A slot in the ledger, held by the agent for one managed thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slot(usize);

impl Ledger {
    /// Maps a new, empty ledger shared with processes forked after this call.
    pub fn new() -> io::Result<Ledger> {
        let len = LEDGER_CAPACITY * size_of::<Record>();
        // SAFETY: a fresh anonymous shared mapping, zero-filled (FREE records).
        let p = unsafe {
            libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED | libc::MAP_ANONYMOUS, -1, 0)
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Ledger { base: p.cast(), next: 0, templates: BTreeMap::new(), done: Vec::new() })
    }

    /// Another view of the same mapping, for the guardian (its own index, empty, and a
    /// `done` list allocated now).
    fn for_guardian(&self) -> Ledger {
        Ledger { base: self.base, next: 0, templates: BTreeMap::new(), done: Vec::with_capacity(LEDGER_CAPACITY) }
    }

    fn rec(&self, i: usize) -> &Record {
        assert!(i < LEDGER_CAPACITY);
        // SAFETY: in bounds of the mapping, which is never unmapped.
        unsafe { &*self.base.add(i) }
    }

    fn rec_mut(&mut self, i: usize) -> *mut Record {
        assert!(i < LEDGER_CAPACITY);
        // SAFETY: in bounds.
        unsafe { self.base.add(i) }
    }

    /// Records a thread's original state; valid once this returns. `None`: full.
    pub fn save(&mut self, tid: i32, start_time: u64, s: &SchedState) -> Option<Slot> {
        self.write(VALID, tid, start_time, s)
    }

    /// Records the template of process `tgid` — its main thread's original state, with
    /// the main thread's start time — before the agent changes any of its threads; valid
    /// once this returns. `None`: full.
    pub fn save_process(&mut self, tgid: i32, start_time: u64, s: &SchedState) -> Option<Slot> {
        let slot = self.write(PROCESS, tgid, start_time, s)?;
        if let Some(old) = self.templates.insert(tgid, slot) {
            self.clear(old);
        }
        Some(slot)
    }

    /// Forgets the template of process `tgid` without restoring anything (a join that
    /// changed nothing).
    pub fn forget_process(&mut self, tgid: i32) {
        if let Some(slot) = self.templates.remove(&tgid) {
            self.clear(slot);
        }
    }

    /// The template of process `tgid` (see `save_process`).
    pub fn template(&self, tgid: i32) -> Option<SchedState> {
        self.templates.get(&tgid).map(|&slot| self.saved(slot).2)
    }

    fn write(&mut self, kind: u32, tid: i32, start_time: u64, s: &SchedState) -> Option<Slot> {
        let i =
            (0..LEDGER_CAPACITY).map(|k| (self.next + k) % LEDGER_CAPACITY).find(|&i| self.rec(i).state.load(Ordering::Acquire) == FREE)?;
        self.next = (i + 1) % LEDGER_CAPACITY;
        let r = self.rec_mut(i);
        // SAFETY: the record is FREE, so the guardian ignores it while we fill it; the
        // release store below publishes the fields.
        unsafe {
            (*r).tid = tid;
            (*r).start_time = start_time;
            (*r).policy = s.policy;
            (*r).prio = s.prio;
            (*r).nice = s.nice;
            (*r).affinity = s.affinity;
            (*r).stopped.store(0, Ordering::Relaxed);
            (*r).rttime_saved.store(0, Ordering::Relaxed);
        }
        self.rec(i).state.store(kind, Ordering::Release);
        Some(Slot(i))
    }

    /// Notes, before the agent lowers it, process `tgid`'s RLIMIT_RTTIME in its template:
    /// every restore of the process gives it back. False if the process has no template.
    pub fn save_rttime(&mut self, tgid: i32, r: kernel::Rlimit) -> bool {
        let Some(&slot) = self.templates.get(&tgid) else {
            return false;
        };
        let rec = self.rec(slot.0);
        rec.rttime_soft.store(r.soft, Ordering::Relaxed);
        rec.rttime_hard.store(r.hard, Ordering::Relaxed);
        rec.rttime_saved.store(1, Ordering::Release);
        true
    }

    /// The saved state in a slot.
    pub fn saved(&self, slot: Slot) -> (i32, u64, SchedState) {
        let r = self.rec(slot.0);
        (r.tid, r.start_time, SchedState { policy: r.policy, prio: r.prio, nice: r.nice, affinity: r.affinity })
    }

    /// Notes that the agent is about to stop (`Some(tgid)`: SIGSTOP) or has continued
    /// (`None`: SIGCONT) the thread's process: a restore then continues it.
    pub fn set_stopped(&mut self, slot: Slot, tgid: Option<i32>) {
        self.rec(slot.0).stopped.store(tgid.unwrap_or(0), Ordering::Release);
    }

    /// Restores one thread to its saved state, if it still exists (same tid and start
    /// time), and continues its process if the agent had stopped it; the record stays
    /// valid (see `clear`). Whether the thread still existed (and so was restored, as far
    /// as the kernel let it).
    pub fn restore(&self, slot: Slot) -> bool {
        let (tid, start, s) = self.saved(slot);
        let stopped = self.rec(slot.0).stopped.load(Ordering::Acquire);
        if kernel::start_time(tid).ok() != Some(start) {
            return false;
        }
        let _ = kernel::restore(tid, &s);
        if stopped != 0 {
            // After the policy: it resumes at its original scheduling.
            let _ = kernel::signal_thread(stopped, tid, libc::SIGCONT);
        }
        true
    }

    /// Forgets a slot (after the agent restored the thread, or the thread exited).
    pub fn clear(&mut self, slot: Slot) {
        self.rec(slot.0).state.store(FREE, Ordering::Release);
    }

    /// How many thread records are valid.
    pub fn valid(&self) -> usize {
        (0..LEDGER_CAPACITY).filter(|&i| self.rec(i).state.load(Ordering::Acquire) == VALID).count()
    }

    /// Sets every thread of the process whose template is in `slot` that is not in
    /// `self.done` (sorted: the threads restored from their own records) to the state it
    /// would have had without the agent, `kernel::inherited(template)`, and adds it to
    /// `done`. Those are the threads it created since the agent last listed its threads
    /// (crate::state's adoption: up to a rescan period, or one pass with BPF events). The
    /// process's threads are listed through its /proc directory, held open, after its main
    /// thread's start time was checked, so a process that is not the recorded one is never
    /// touched; they are listed again while a listing finds threads not set yet (created
    /// meanwhile by a thread still in the agent's state), up to [`SWEEP_ROUNDS`] times.
    /// Returns how many threads it set.
    fn sweep(&mut self, slot: Slot) -> usize {
        let (tgid, start, template) = self.saved(slot);
        let want = kernel::inherited(&template);
        let Ok(dir) = kernel::ProcDir::open(tgid) else {
            return 0;
        };
        if dir.start_time().ok() != Some(start) {
            return 0;
        }
        let rec = self.rec(slot.0);
        if rec.rttime_saved.load(Ordering::Acquire) == 1 {
            let r = kernel::Rlimit { soft: rec.rttime_soft.load(Ordering::Relaxed), hard: rec.rttime_hard.load(Ordering::Relaxed) };
            let _ = kernel::set_rttime(tgid, r);
        }
        let done = &mut self.done;
        let mut n = 0;
        for _ in 0..SWEEP_ROUNDS {
            let mut found = 0;
            let listed = dir.threads(|tid| {
                if let Err(i) = done.binary_search(&tid) {
                    done.insert(i, tid);
                    let _ = kernel::restore(tid, &want);
                    found += 1;
                }
            });
            n += found;
            if found == 0 || listed.is_err() {
                break;
            }
        }
        n
    }

    /// Restores process `tgid` after the agent restored the threads in `restored` from
    /// their records (`restore`): its other threads are set from its template (`sweep`),
    /// and the template is forgotten. Returns how many threads the sweep set.
    pub fn restore_process(&mut self, tgid: i32, restored: &[i32]) -> usize {
        let Some(slot) = self.templates.remove(&tgid) else {
            return 0;
        };
        self.done.clear();
        self.done.extend_from_slice(restored);
        self.done.sort_unstable();
        let n = self.sweep(slot);
        self.clear(slot);
        n
    }

    /// Restores everything the ledger holds and clears it: first every thread record
    /// whose thread still exists (same tid and start time), then every process with a
    /// template, whose threads without a record are set from it (`sweep`). Returns how
    /// many threads were restored or set.
    pub fn restore_all(&mut self) -> usize {
        let mut n = 0;
        self.done.clear();
        for i in 0..LEDGER_CAPACITY {
            if self.rec(i).state.load(Ordering::Acquire) != VALID {
                continue;
            }
            if self.restore(Slot(i)) {
                n += 1;
                self.done.push(self.rec(i).tid);
            }
            self.clear(Slot(i));
        }
        self.done.sort_unstable();
        for i in 0..LEDGER_CAPACITY {
            if self.rec(i).state.load(Ordering::Acquire) == PROCESS {
                n += self.sweep(Slot(i));
                self.clear(Slot(i));
            }
        }
        self.templates.clear();
        n
    }
}

/// The life lock (module documentation): a robust, process-shared mutex in a page shared
/// with the guardian.
struct LifeLock(*mut libc::pthread_mutex_t);

// SAFETY: the mutex is made for use by several threads and processes.
unsafe impl Send for LifeLock {}
// SAFETY: as above; its one operation (`lock`) is the mutex's own, thread-safe.
unsafe impl Sync for LifeLock {}

impl LifeLock {
    fn new() -> io::Result<LifeLock> {
        let len = size_of::<libc::pthread_mutex_t>();
        // SAFETY: a fresh anonymous shared mapping; the mutex is initialised in it before
        // anyone uses it, with attributes that are destroyed after.
        unsafe {
            let p =
                libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED | libc::MAP_ANONYMOUS, -1, 0);
            if p == libc::MAP_FAILED {
                return Err(io::Error::last_os_error());
            }
            let m: *mut libc::pthread_mutex_t = p.cast();
            let mut attr: libc::pthread_mutexattr_t = std::mem::zeroed();
            libc::pthread_mutexattr_init(&mut attr);
            libc::pthread_mutexattr_setpshared(&mut attr, libc::PTHREAD_PROCESS_SHARED);
            libc::pthread_mutexattr_setrobust(&mut attr, libc::PTHREAD_MUTEX_ROBUST);
            let r = libc::pthread_mutex_init(m, &attr);
            libc::pthread_mutexattr_destroy(&mut attr);
            if r != 0 {
                return Err(io::Error::from_raw_os_error(r));
            }
            Ok(LifeLock(m))
        }
    }
    /// Locks it; returns when it is held or its holder died (`EOWNERDEAD`: held now).
    fn lock(&self) -> i32 {
        // SAFETY: an initialised mutex in a mapping that is never unmapped.
        unsafe { libc::pthread_mutex_lock(self.0) }
    }
}

/// A running guardian, as the agent sees it.
pub struct Guardian {
    pub pid: i32,
    /// The write end of the life line; the agent writes one byte to it, when the
    /// dispatcher holds the life lock, and otherwise only keeps it open.
    _life: std::os::fd::OwnedFd,
    lock: LifeLock,
}

impl Guardian {
    /// Forks the guardian. Call it while the process is still single-threaded (before
    /// the broker and dispatcher threads start), after creating the ledger.
    pub fn spawn(ledger: &Ledger, prio: i32) -> io::Result<Guardian> {
        use std::os::fd::AsRawFd;
        let lock = LifeLock::new()?;
        let (read, life) = kernel::pipe_cloexec()?;
        // SAFETY: the process is single-threaded here (documented precondition), so the
        // child may run ordinary code.
        let pid = unsafe { libc::fork() };
        if pid == -1 {
            return Err(io::Error::last_os_error());
        }
        if pid == 0 {
            drop(life);
            let code = guard(ledger.for_guardian(), read.as_raw_fd(), LifeLock(lock.0), prio);
            // SAFETY: leave without running the parent's atexit handlers or destructors.
            unsafe { libc::_exit(code) };
        }
        drop(read);
        Ok(Guardian { pid, _life: life, lock })
    }

    /// Takes the life lock for the calling thread — the dispatcher, at its start — and
    /// tells the guardian so (module documentation). The thread then holds it until it
    /// dies.
    pub fn hold_life_lock(&self) -> io::Result<()> {
        use std::os::fd::AsRawFd;
        let r = self.lock.lock();
        if r != 0 {
            return Err(io::Error::from_raw_os_error(r));
        }
        // SAFETY: writes one byte from a local to our own pipe.
        if unsafe { libc::write(self._life.as_raw_fd(), b"L".as_ptr().cast(), 1) } != 1 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Moves the agent's end of the life line to an fd above every fd open now. When the
    /// agent dies, its files are released last-opened-first here (the kernel runs the
    /// deferred releases of an exiting task's files in reverse order of fd), and
    /// releasing a BPF link waits for tracepoint grace periods (longer, under load, than
    /// the 100 ms a restore may take): with the life line above them the guardian hears
    /// of the death before that, not after (`sigkill_of_the_agent_restores_every_task`).
    /// Call it after the BPF event source is loaded.
    pub fn raise_life_line(&mut self) -> io::Result<()> {
        use std::os::fd::{AsRawFd, FromRawFd};
        // SAFETY: duplicates our own fd to the lowest free fd >= 1000.
        let fd = unsafe { libc::fcntl(self._life.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 1000) };
        if fd == -1 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a fresh fd we own; the old one is closed by the assignment.
        self._life = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
        Ok(())
    }

    /// Whether the guardian is still running (reaps it if not).
    pub fn alive(&self) -> bool {
        let mut status = 0;
        // SAFETY: waitpid on our own child.
        unsafe { libc::waitpid(self.pid, &mut status, libc::WNOHANG) == 0 }
    }
}

/// The guardian's whole life: wait for the agent to go, then restore. Two threads wait:
/// this one on the life line, and (once the dispatcher holds it) one on the life lock.
/// The first to hear restores every record and ends the guardian (`_exit`).
fn guard(mut ledger: Ledger, life: i32, lock: LifeLock, prio: i32) -> i32 {
    // SAFETY: simple syscalls in a single-threaded child.
    unsafe {
        let name = c"vassal-guardian";
        libc::prctl(libc::PR_SET_NAME, name.as_ptr() as libc::c_ulong, 0, 0, 0);
        // systemd (KillMode=control-group) sends SIGTERM to every process of the unit: the
        // guardian keeps guarding until the agent itself is gone.
        libc::signal(libc::SIGTERM, libc::SIG_IGN);
        libc::signal(libc::SIGINT, libc::SIG_IGN);
        libc::signal(libc::SIGHUP, libc::SIG_IGN);
    }
    let _ = kernel::mlockall();
    let _ = kernel::set_self(prio);
    static RESTORING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    // Restores once, from whichever thread gets here first, and ends the process; the
    // other waits for that end (returning, it could end the process mid-restore).
    let restore = move |ledger: &mut Ledger, why: &str| {
        if RESTORING.swap(true, Ordering::AcqRel) {
            loop {
                std::thread::park();
            }
        }
        let t0 = kernel::now_ns();
        let n = ledger.restore_all();
        if n > 0 {
            let us = kernel::now_ns().saturating_sub(t0) / 1000;
            eprintln!("vassal-guardian: the agent is gone ({why}); restored {n} thread(s) to their original scheduling in {us} µs");
        }
        // SAFETY: ends the guardian, both threads, without running anything else.
        unsafe { libc::_exit(0) };
    };
    let mut lock = Some(lock);
    loop {
        let mut p = libc::pollfd { fd: life, events: libc::POLLIN, revents: 0 };
        // SAFETY: one pollfd we own.
        let r = unsafe { libc::poll(&mut p, 1, -1) };
        if r != 1 {
            continue;
        }
        let mut byte = 0u8;
        // SAFETY: reads at most one byte into a local.
        let n = if p.revents & libc::POLLIN != 0 { unsafe { libc::read(life, (&mut byte as *mut u8).cast(), 1) } } else { 0 };
        if n == 1 {
            // The dispatcher holds the life lock: wait for it in a thread of our own.
            if let Some(lock) = lock.take() {
                let mut theirs = ledger.for_guardian();
                let waiter = std::thread::Builder::new().stack_size(64 * 1024).spawn(move || {
                    let _ = kernel::set_self(prio);
                    // The dispatcher never unlocks it: this returns when it died.
                    match lock.lock() {
                        0 | libc::EOWNERDEAD => restore(&mut theirs, "its dispatcher thread died"),
                        e => eprintln!("vassal-guardian: life lock: {}; the life line alone guards", io::Error::from_raw_os_error(e)),
                    }
                });
                if waiter.is_err() {
                    eprintln!("vassal-guardian: cannot start the life-lock waiter; the life line alone guards");
                }
            }
            continue;
        }
        if n == 0 || p.revents & (libc::POLLHUP | libc::POLLERR) != 0 {
            break;
        }
    }
    restore(&mut ledger, "its life line closed");
    0
}
