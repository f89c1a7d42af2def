//! The BPF event source: block and wake events of managed threads from the scheduler
//! tracepoints (`crates/agent/bpf/sched.bpf.c`), through one ring buffer.
//!
//! - `tp_btf/sched_switch`: `prev` is managed, not preempted and its state is not
//!   TASK_RUNNING: it went to sleep ([`Kind::Block`]; the state is kept, so an exit,
//!   TASK_DEAD, is told apart);
//! - `tp_btf/sched_wakeup`: a managed thread whose last event was a block is on a run
//!   queue again ([`Kind::Wake`], told once per block, with the CPU the kernel woke it
//!   on: [`Event::cpu`]). Not `sched_waking`: that one fires in `try_to_wake_up` before
//!   the waker has waited for the sleeper to finish switching out, so on another CPU a
//!   sleeper's wake could be traced before its own block; `sched_wakeup` fires once the
//!   task is on a run queue, after its switch-out was traced, so the ring buffer's order
//!   is the true order;
//! - `tp_btf/sched_switch` again: a managed thread switched in or preempted while its
//!   last event was a block (the kernel ran no program for its wake — on this VM now and
//!   then, sched.bpf.c —, or it was running when watched: a watch starts as blocked) — a
//!   [`Kind::Wake`] marked [`MISSED_WAKE`];
//! - `tp_btf/sched_wakeup_new`: a new thread of a managed process ([`Kind::New`]), with
//!   the thread that created it ([`Event::creator`]: the program runs in its context).
//!
//! Managed threads are the keys of the BPF hash map `tids` (value: the process they
//! belong to, and the programs' [`BLOCKED`] flag), which the agent fills at join and
//! rescan and empties at leave; the programs alone write it in between. Every event wakes
//! the agent's dispatcher except the wake of a thread marked [`QUIET_WAKE`] in the map
//! `quiet` and the block (not an exit) of one marked [`QUIET_BLOCK`] while no thread
//! waits for a CPU (the array map `waiting` holds 0): [`EventSource::set_quiet`],
//! [`EventSource::set_waiting`]. Such a record waits in the ring buffer for the
//! dispatcher's next pass.
//!
//! The loader is `aya` (pure Rust): the object is compiled by `build.rs` with clang when
//! clang is there (the cfg `vassal_bpf`); without it the agent is built without BPF and
//! [`EventSource::load`] says so, and the agent polls /proc instead.

use std::os::fd::RawFd;

/// What happened to a managed thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// It went to sleep (or stopped, or exited: see [`Event::exited`]).
    Block,
    /// It became runnable.
    Wake,
    /// A new thread of a managed process (`tgid`) was started.
    New,
}

/// One event from the ring buffer (`struct vassal_event` in sched.bpf.c).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Event {
    pub tid: i32,
    pub tgid: i32,
    pub kind: Kind,
    /// The thread's state at a block (`prev_state`); at a wake, [`MISSED_WAKE`] if it
    /// stands for a wake the programs missed; 0 otherwise.
    pub state: u32,
    /// The thread that created it, at [`Kind::New`] (of the same process); 0 otherwise.
    pub creator: i32,
    /// The CPU it was woken on, at [`Kind::Wake`] (`p->wake_cpu`); None otherwise.
    pub cpu: Option<u16>,
    /// When, CLOCK_MONOTONIC ns (`bpf_ktime_get_ns`).
    pub time: u64,
    /// The thread's CPU time so far, ns (`se.sum_exec_runtime`, the first field of
    /// /proc/TID/schedstat): exact at a [`Kind::Block`], whose switch-out brought it up
    /// to date; at a wake, what it was at the block before.
    pub runtime: u64,
}

/// The size of `struct vassal_event`.
pub const EVENT_SIZE: usize = 32;
/// TASK_DEAD in a task's state (include/linux/sched.h).
const TASK_DEAD: u32 = 0x80;

impl Event {
    /// Decodes one ring-buffer record (native endianness, the kernel's). `None` for a
    /// record of the wrong size, an unknown kind or a non-positive tid.
    pub fn decode(b: &[u8]) -> Option<Event> {
        if b.len() != EVENT_SIZE {
            return None;
        }
        let u32_at = |i: usize| u32::from_ne_bytes(b[i..i + 4].try_into().expect("4 bytes"));
        let code = u32_at(8);
        let kind = match code {
            1 => Kind::Block,
            2 | 4 => Kind::Wake,
            3 => Kind::New,
            _ => return None,
        };
        let tid = u32_at(0) as i32;
        let tgid = u32_at(4) as i32;
        if tid <= 0 || tgid <= 0 {
            return None;
        }
        // The fourth field is the state at a block, the CPU at a wake and the creator's
        // tid at a new thread.
        let state = match code {
            1 => u32_at(12),
            4 => MISSED_WAKE,
            _ => 0,
        };
        let creator = if kind == Kind::New { u32_at(12) as i32 } else { 0 };
        let cpu = if kind == Kind::Wake { u16::try_from(u32_at(12)).ok() } else { None };
        let u64_at = |i: usize| u64::from_ne_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        Some(Event { tid, tgid, kind, state, creator, cpu, time: u64_at(16), runtime: u64_at(24) })
    }

    /// The thread exited (its block was its last switch-out).
    pub fn exited(&self) -> bool {
        self.kind == Kind::Block && self.state & TASK_DEAD != 0
    }

    /// Encodes as the BPF program does (for tests).
    pub fn encode(&self) -> [u8; EVENT_SIZE] {
        let mut b = [0u8; EVENT_SIZE];
        b[0..4].copy_from_slice(&(self.tid as u32).to_ne_bytes());
        b[4..8].copy_from_slice(&(self.tgid as u32).to_ne_bytes());
        let k: u32 = match self.kind {
            Kind::Block => 1,
            Kind::Wake if self.state == MISSED_WAKE => 4,
            Kind::Wake => 2,
            Kind::New => 3,
        };
        b[8..12].copy_from_slice(&k.to_ne_bytes());
        let fourth = match self.kind {
            Kind::New => self.creator as u32,
            Kind::Wake => self.cpu.map_or(u32::MAX, u32::from),
            Kind::Block => self.state,
        };
        b[12..16].copy_from_slice(&fourth.to_ne_bytes());
        b[16..24].copy_from_slice(&self.time.to_ne_bytes());
        b[24..32].copy_from_slice(&self.runtime.to_ne_bytes());
        b
    }
}

/// The flag in a `tids` value that the programs set at a thread's block and clear at its
/// wake (sched.bpf.c): a thread seen running with it set had its wake missed. A watch
/// starts with it: the thread's state is read from /proc after its tid is in the map, so
/// a wake between the two is told (a thread that was running is told as a missed wake at
/// its next switch, which the agent, knowing it runnable, ignores).
pub const BLOCKED: u32 = 0x4000_0000;
/// `Event::state` of a [`Kind::Wake`] that stands for a missed wake: the thread was seen
/// switched in or preempted while its last event was a block (sched.bpf.c, RUNNING).
pub const MISSED_WAKE: u32 = 1;
/// A `quiet` value's bit: the thread's wakes do not wake the agent.
pub const QUIET_WAKE: u8 = 1;
/// A `quiet` value's bit: the thread's blocks do not wake the agent while `waiting` is 0.
pub const QUIET_BLOCK: u8 = 2;

/// Whether this build carries the BPF object (built by clang, or the committed one:
/// crates/agent/build.rs).
pub const BUILT: bool = cfg!(vassal_bpf);

/// Where this build's BPF object came from (build.rs), for the agent's log.
pub const ORIGIN: &str = match option_env!("VASSAL_BPF_ORIGIN") {
    Some(o) => o,
    None => "none (built without BPF)",
};

#[cfg(vassal_bpf)]
mod imp {
    use super::*;
    use aya::maps::{Array, HashMap, MapData, RingBuf};
    use aya::programs::BtfTracePoint;
    use aya::{Btf, Ebpf};
    use std::os::fd::AsRawFd;

    static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/sched.bpf.o"));

    /// The loaded and attached programs, the tid map and the ring buffer. Dropping it
    /// detaches the programs and frees the maps.
    pub struct EventSource {
        ring: RingBuf<MapData>,
        tids: HashMap<MapData, u32, u32>,
        quiet: HashMap<MapData, u32, u8>,
        waiting: Array<MapData, u32>,
        /// Owns the programs and their links (kept attached while this lives).
        _bpf: Ebpf,
    }

    impl EventSource {
        /// Loads the object, attaches the three programs and opens the maps.
        pub fn load() -> Result<EventSource, String> {
            let mut bpf = Ebpf::load(OBJECT).map_err(|e| format!("loading the BPF object: {e}"))?;
            let btf = Btf::from_sys_fs().map_err(|e| format!("kernel BTF (/sys/kernel/btf/vmlinux): {e}"))?;
            for (prog, tp) in
                [("vassal_switch", "sched_switch"), ("vassal_wakeup", "sched_wakeup"), ("vassal_wakeup_new", "sched_wakeup_new")]
            {
                let p: &mut BtfTracePoint = bpf
                    .program_mut(prog)
                    .ok_or_else(|| format!("no program {prog} in the BPF object"))?
                    .try_into()
                    .map_err(|e| format!("{prog}: {e}"))?;
                p.load(tp, &btf).map_err(|e| format!("loading {prog} on tp_btf/{tp}: {e}"))?;
                p.attach().map_err(|e| format!("attaching {prog} to tp_btf/{tp}: {e}"))?;
            }
            let ring = RingBuf::try_from(bpf.take_map("events").ok_or("no map 'events'")?).map_err(|e| format!("ring buffer: {e}"))?;
            let tids = HashMap::try_from(bpf.take_map("tids").ok_or("no map 'tids'")?).map_err(|e| format!("tid map: {e}"))?;
            let quiet = HashMap::try_from(bpf.take_map("quiet").ok_or("no map 'quiet'")?).map_err(|e| format!("quiet map: {e}"))?;
            let waiting = Array::try_from(bpf.take_map("waiting").ok_or("no map 'waiting'")?).map_err(|e| format!("waiting map: {e}"))?;
            Ok(EventSource { ring, tids, quiet, waiting, _bpf: bpf })
        }
        /// The ring buffer's fd: readable (epoll) when events are waiting.
        pub fn fd(&self) -> RawFd {
            self.ring.as_raw_fd()
        }
        /// Watches `tid` of process `tgid`. False if the map is full (the caller polls it).
        /// Its value starts with [`BLOCKED`] (see there).
        pub fn watch(&mut self, tid: i32, tgid: i32) -> bool {
            self.tids.insert(tid as u32, tgid as u32 | BLOCKED, 0).is_ok()
        }
        pub fn unwatch(&mut self, tid: i32) {
            let _ = self.tids.remove(&(tid as u32));
            let _ = self.quiet.remove(&(tid as u32));
        }
        /// Makes the wakes ([`QUIET_WAKE`]) and blocks ([`QUIET_BLOCK`]) of watched `tid`
        /// quiet, or neither (0): see the module documentation. False if the map refused.
        pub fn set_quiet(&mut self, tid: i32, bits: u8) -> bool {
            // A map of its own: the programs' flags in `tids` are never written here.
            if bits != 0 {
                self.quiet.insert(tid as u32, bits, 0).is_ok()
            } else {
                // removed, or it was not there
                self.quiet.remove(&(tid as u32)).is_ok() || self.quiet.get(&(tid as u32), 0).is_err()
            }
        }
        /// Whether a thread waits for a CPU: while one does, every block is loud. False
        /// if the map refused.
        pub fn set_waiting(&mut self, waiting: bool) -> bool {
            self.waiting.set(0, waiting as u32, 0).is_ok()
        }
        /// Sets the programs' BLOCKED flag of watched `tid` as if its last event had been a
        /// block (tests: a wake the programs missed).
        #[cfg(test)]
        pub fn mark_blocked(&mut self, tid: i32) -> bool {
            let v = self.tids.get(&(tid as u32), 0).unwrap_or(0);
            self.tids.insert(tid as u32, v | BLOCKED, 0).is_ok()
        }
        /// Appends every waiting event to `out` (records that do not decode are dropped).
        pub fn drain(&mut self, out: &mut Vec<Event>) {
            while let Some(item) = self.ring.next() {
                if let Some(e) = Event::decode(&item) {
                    out.push(e);
                }
            }
        }
    }
}

#[cfg(not(vassal_bpf))]
mod imp {
    use super::*;

    /// Built without BPF: never loads.
    pub struct EventSource(());

    impl EventSource {
        pub fn load() -> Result<EventSource, String> {
            Err("this agent was built without BPF (no clang at build time)".into())
        }
        pub fn fd(&self) -> RawFd {
            -1
        }
        pub fn watch(&mut self, _tid: i32, _tgid: i32) -> bool {
            false
        }
        pub fn unwatch(&mut self, _tid: i32) {}
        pub fn set_quiet(&mut self, _tid: i32, _bits: u8) -> bool {
            false
        }
        pub fn set_waiting(&mut self, _waiting: bool) -> bool {
            false
        }
        pub fn drain(&mut self, _out: &mut Vec<Event>) {}
    }
}

pub use imp::EventSource;

/// For the live-kernel tests: the event source, or `None` (the test says it is skipped)
/// when this process may not load BPF programs.
#[cfg(all(test, vassal_bpf))]
impl EventSource {
    pub(crate) fn loaded_for_test() -> Option<EventSource> {
        if !crate::kernel::is_root() {
            crate::skip::skip("loading BPF programs needs root");
            return None;
        }
        Some(EventSource::load().expect("the BPF event source loads on this kernel"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_what_the_program_writes() {
        for (kind, state, creator, cpu) in [
            (Kind::Block, 1, 0, None),
            (Kind::Block, TASK_DEAD, 0, None),
            (Kind::Wake, 0, 0, Some(1)),
            (Kind::Wake, MISSED_WAKE, 0, Some(1)),
            (Kind::New, 0, 1201, None),
        ] {
            let e = Event { tid: 1234, tgid: 1200, kind, state, creator, cpu, time: 987_654_321_012, runtime: 4_321_000 };
            assert_eq!(Event::decode(&e.encode()), Some(e));
        }
        let dead = Event { tid: 7, tgid: 7, kind: Kind::Block, state: TASK_DEAD, creator: 0, cpu: None, time: 1, runtime: 0 };
        assert!(dead.exited());
        assert!(!Event { state: 1, ..dead }.exited());
        // A wake's state field is ignored; a new thread's is its creator, never an exit.
        let mut b = Event { tid: 7, tgid: 7, kind: Kind::Wake, state: 0, creator: 0, cpu: Some(0), time: 1, runtime: 0 }.encode();
        b[12] = 0x80;
        assert_eq!(Event::decode(&b).map(|e| (e.exited(), e.cpu)), Some((false, Some(0x80))));
        b[8..12].copy_from_slice(&3u32.to_ne_bytes());
        assert_eq!(Event::decode(&b).map(|e| (e.exited(), e.creator)), Some((false, 0x80)));
    }

    /// The programs on the live kernel: a watched thread's sleep is a block then a wake,
    /// in that order, and its exit a block with TASK_DEAD; an unwatched thread is silent.
    #[cfg(vassal_bpf)]
    #[test]
    #[ignore = "needs root: scripts/test.sh runs it as root"]
    fn sees_a_watched_thread_block_wake_and_exit() {
        let Some(mut src) = EventSource::loaded_for_test() else { return };
        let (tx, rx) = std::sync::mpsc::channel::<i32>();
        let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
        let spawn = |tx: std::sync::mpsc::Sender<i32>, go: std::sync::mpsc::Receiver<()>| {
            std::thread::spawn(move || {
                tx.send(crate::kernel::gettid()).unwrap();
                go.recv().unwrap();
                std::thread::sleep(std::time::Duration::from_millis(20));
            })
        };
        let watched = spawn(tx.clone(), go_rx);
        let (go2_tx, go2_rx) = std::sync::mpsc::channel::<()>();
        let other = spawn(tx, go2_rx);
        let (tid, other_tid) = (rx.recv().unwrap(), rx.recv().unwrap());
        let pid = std::process::id() as i32;
        assert!(src.watch(tid, pid));
        let t0 = crate::kernel::now_ns();
        go_tx.send(()).unwrap();
        go2_tx.send(()).unwrap();
        watched.join().unwrap();
        other.join().unwrap();
        // `join` returns when the thread's tid is cleared (CLONE_CHILD_CLEARTID, early in
        // do_exit), before its last switch-out with TASK_DEAD is traced: drained until the
        // exit is seen, for up to a second (a fresh clone's CI run once drained first).
        let mut evs = Vec::new();
        let until = crate::kernel::now_ns() + 1_000_000_000;
        loop {
            src.drain(&mut evs);
            if evs.last().is_some_and(|e| e.exited()) || crate::kernel::now_ns() > until {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        src.unwatch(tid);
        assert!(evs.iter().all(|e| e.tid == tid && e.tgid == pid && e.time >= t0.saturating_sub(1_000_000)), "{evs:?} (other {other_tid})");
        let kinds: Vec<(Kind, bool)> = evs.iter().map(|e| (e.kind, e.exited())).collect();
        let sleep = kinds.windows(2).position(|w| w[0] == (Kind::Block, false) && w[1] == (Kind::Wake, false));
        assert!(sleep.is_some(), "no block then wake in {kinds:?}");
        // Each wake told once, and only after a block (or first: a watch starts as
        // blocked).
        for w in kinds.windows(2) {
            assert!(w[1].0 != Kind::Wake || w[0].0 == Kind::Block, "a wake not after a block: {kinds:?}");
        }
        assert_eq!(kinds.last(), Some(&(Kind::Block, true)), "the exit is the last event: {kinds:?}");
        for w in evs.windows(2) {
            assert!(w[0].time <= w[1].time, "out of order: {evs:?}");
        }
    }

    /// A wake the programs missed is told when the thread is seen running: a watched
    /// thread whose last event says blocked (its BLOCKED flag set by hand here, as the
    /// missed wake leaves it) and that runs — switched in or preempted — comes out as a
    /// wake marked `MISSED_WAKE`, once; its next block and wake are ordinary events. (On
    /// this VM the kernel ran the sched_wakeup program for all but 0-2 of the wakes of a
    /// 2 s rt-app run, and each missed one could leave a thread parked for seconds:
    /// sched.bpf.c.)
    #[cfg(vassal_bpf)]
    #[test]
    #[ignore = "needs root: scripts/test.sh runs it as root"]
    fn a_missed_wake_is_told_when_the_thread_runs() {
        use std::sync::atomic::{AtomicBool, Ordering};
        let Some(mut src) = EventSource::loaded_for_test() else { return };
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let (tx, rx) = std::sync::mpsc::channel::<i32>();
        // Two threads spinning on CPU 0 (yielding to each other): the watched one is
        // switched in and out without blocking.
        let spinner = |tx: std::sync::mpsc::Sender<i32>, stop: std::sync::Arc<AtomicBool>| {
            std::thread::spawn(move || {
                let _ = crate::kernel::set_affinity(0, &crate::kernel::one_cpu(0));
                tx.send(crate::kernel::gettid()).unwrap();
                while !stop.load(Ordering::Relaxed) {
                    std::thread::yield_now();
                }
            })
        };
        let t = spinner(tx.clone(), stop.clone());
        let u = spinner(tx, stop.clone());
        let (tid, _) = (rx.recv().unwrap(), rx.recv().unwrap());
        let pid = std::process::id() as i32;
        assert!(src.watch(tid, pid));
        std::thread::sleep(std::time::Duration::from_millis(10));
        let mut evs = Vec::new();
        src.drain(&mut evs);
        // A watch starts as blocked: the running thread's first switch tells a missed
        // wake (which the agent, knowing it runnable, ignores), and then nothing.
        assert!(evs.first().is_some_and(|e| e.state == MISSED_WAKE), "{evs:?}");
        assert!(evs.iter().skip(1).all(|e| e.state != MISSED_WAKE), "{evs:?}");
        let n = evs.len();
        // Its last event now says blocked, and no wake comes (as when one is missed).
        assert!(src.mark_blocked(tid));
        std::thread::sleep(std::time::Duration::from_millis(30));
        stop.store(true, Ordering::Relaxed);
        t.join().unwrap();
        u.join().unwrap();
        src.drain(&mut evs);
        src.unwatch(tid);
        let after = &evs[n..];
        let missed: Vec<&Event> = after.iter().filter(|e| e.state == MISSED_WAKE).collect();
        assert!(!missed.is_empty(), "no missed wake told: {after:?}");
        assert!(missed.iter().all(|e| e.kind == Kind::Wake && e.tid == tid && e.cpu == Some(0)), "{missed:?}");
        // Told once: telling it clears the flag.
        assert_eq!(missed.len(), 1, "{after:?}");
    }

    /// Quiet blocks and wakes: a watched thread marked `QUIET_WAKE | QUIET_BLOCK` sleeps
    /// and wakes three times while the reader waits in poll(2) on the empty ring buffer,
    /// which is not woken (the events are there when it drains, and the last block's CPU
    /// time is schedstat's while the thread stays blocked); with `waiting` set, its next
    /// block wakes the reader at once; its exit always does. (Each round is started
    /// from another thread 20 ms after the reader began to wait: poll(2) also returns at
    /// once if records are waiting when it is called, whatever their flags.)
    #[cfg(vassal_bpf)]
    #[test]
    #[ignore = "needs root: scripts/test.sh runs it as root"]
    fn quiet_blocks_wake_the_reader_only_while_a_thread_waits() {
        use std::sync::mpsc::{channel, Sender};
        use std::time::{Duration, Instant};
        let Some(mut src) = EventSource::loaded_for_test() else { return };
        let (tid_tx, tid_rx) = channel::<i32>();
        let (go_tx, go_rx) = channel::<u32>();
        let worker = std::thread::spawn(move || {
            tid_tx.send(crate::kernel::gettid()).unwrap();
            // Each message: that many 5 ms sleeps (a block and a wake each); a closed
            // channel: exit.
            while let Ok(n) = go_rx.recv() {
                for _ in 0..n {
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
        });
        let tid = tid_rx.recv().unwrap();
        // Sends `n` sleeps (None: sends nothing) 20 ms from now, then waits in poll(2)
        // for up to `ms`: how long the reader waited (at its timeout poll(2) looks once
        // more, and returns the records then waiting, so the time tells a wake-up).
        let round = |src: &EventSource, go: Option<Sender<u32>>, n: u32, ms: i32| {
            let t = std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(20));
                if let Some(go) = go {
                    go.send(n).unwrap();
                }
            });
            let t0 = Instant::now();
            let mut p = libc::pollfd { fd: src.fd(), events: libc::POLLIN, revents: 0 };
            // SAFETY: one pollfd we own.
            unsafe { libc::poll(&mut p, 1, ms) };
            t.join().unwrap();
            t0.elapsed()
        };
        let pid = std::process::id() as i32;
        assert!(src.watch(tid, pid));
        // A first sleep, loud, so the watch's start (as blocked) is behind us.
        go_tx.send(1).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        let mut evs = Vec::new();
        src.drain(&mut evs);
        assert!(src.set_quiet(tid, QUIET_WAKE | QUIET_BLOCK) && src.set_waiting(false));
        evs.clear();
        let waited = round(&src, Some(go_tx.clone()), 3, 300);
        src.drain(&mut evs);
        assert!(waited >= Duration::from_millis(300), "a quiet block or wake woke the reader after {waited:?}: {evs:?}");
        let blocks = evs.iter().filter(|e| e.tid == tid && e.kind == Kind::Block).count();
        let wakes = evs.iter().filter(|e| e.tid == tid && e.kind == Kind::Wake).count();
        assert!(blocks >= 3 && wakes >= 3, "the quiet events are in the ring buffer: {evs:?}");
        // Blocked since its last block (in recv): the event's CPU time is schedstat's.
        let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat")).unwrap();
        let last = evs.iter().rev().find(|e| e.tid == tid && e.kind == Kind::Block).unwrap();
        assert_eq!(stat.split_whitespace().next().and_then(|f| f.parse().ok()), Some(last.runtime), "{stat}");
        assert!(evs.windows(2).all(|w| w[0].runtime <= w[1].runtime), "{evs:?}");
        // A thread waits for a CPU: blocks are loud again (the wakes stay quiet).
        assert!(src.set_waiting(true));
        let waited = round(&src, Some(go_tx.clone()), 1, 1000);
        assert!(waited < Duration::from_millis(500), "a block while a thread waits woke the reader after {waited:?}");
        std::thread::sleep(Duration::from_millis(50));
        src.drain(&mut evs);
        // Quiet again: the exit wakes the reader all the same.
        assert!(src.set_waiting(false));
        let exit = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            drop(go_tx);
        });
        let waited = round(&src, None, 0, 1000);
        exit.join().unwrap();
        worker.join().unwrap();
        assert!(waited < Duration::from_millis(500), "the exit of a quiet thread woke the reader after {waited:?}");
        let until = crate::kernel::now_ns() + 1_000_000_000;
        while !evs.iter().any(|e| e.exited()) && crate::kernel::now_ns() < until {
            src.drain(&mut evs);
            std::thread::sleep(Duration::from_millis(1));
        }
        src.unwatch(tid);
        assert!(evs.iter().any(|e| e.tid == tid && e.exited()), "{evs:?}");
    }

    /// A new thread of a watched process is told with the thread that created it.
    #[cfg(vassal_bpf)]
    #[test]
    #[ignore = "needs root: scripts/test.sh runs it as root"]
    fn a_new_thread_is_told_with_its_creator() {
        let Some(mut src) = EventSource::loaded_for_test() else { return };
        let pid = std::process::id() as i32;
        // Watching the main thread makes every new thread of this process an event.
        assert!(src.watch(pid, pid));
        let me = crate::kernel::gettid();
        let (outer, inner) = std::thread::spawn(|| {
            let outer = crate::kernel::gettid();
            (outer, std::thread::spawn(crate::kernel::gettid).join().unwrap())
        })
        .join()
        .unwrap();
        let mut evs = Vec::new();
        src.drain(&mut evs);
        src.unwatch(pid);
        let creator = |tid: i32| evs.iter().find(|e| e.kind == Kind::New && e.tid == tid).map(|e| (e.tgid, e.creator));
        assert_eq!(creator(outer), Some((pid, me)), "{evs:?}");
        assert_eq!(creator(inner), Some((pid, outer)), "{evs:?}");
    }

    /// The committed object (crates/agent/bpf/sched.bpf.o, used where clang is missing) is
    /// built from this very source: its recorded sha256 is the source's; and where clang
    /// is the compiler that built it, compiling the source gives the same bytes.
    #[test]
    fn the_committed_object_is_built_from_this_source() {
        use sha2::{Digest, Sha256};
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("bpf");
        let source = std::fs::read(dir.join("sched.bpf.c")).unwrap();
        let hex: String = Sha256::digest(&source).iter().map(|b| format!("{b:02x}")).collect();
        let recorded = std::fs::read_to_string(dir.join("sched.bpf.o.sha256")).unwrap();
        assert_eq!(recorded.trim(), hex, "bpf/sched.bpf.c changed since the committed object was built: run scripts/bpf-object.sh");
        let committed = std::fs::read(dir.join("sched.bpf.o")).unwrap();
        let clang = std::env::var("CLANG").unwrap_or_else(|_| "clang".into());
        let Ok(v) = std::process::Command::new(&clang).arg("--version").output() else {
            crate::skip::skip("no clang: the committed BPF object's bytes are not rebuilt");
            return;
        };
        let version = String::from_utf8_lossy(&v.stdout).lines().next().unwrap_or("").to_string();
        if !committed.windows(version.len().max(1)).any(|w| w == version.as_bytes()) {
            crate::skip::skip("this clang did not build the committed BPF object: its bytes are not compared");
            return;
        }
        let out = std::env::temp_dir().join(format!("vassal-bpf-check-{}.o", std::process::id()));
        let ok = std::process::Command::new(&clang)
            .args([
                "-target",
                "bpf",
                "-O2",
                "-g",
                "-Wall",
                "-fdebug-compilation-dir=.",
                "-D__TARGET_ARCH_x86",
                "-c",
                "bpf/sched.bpf.c",
                "-o",
            ])
            .arg(&out)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .status()
            .unwrap()
            .success();
        assert!(ok, "{clang} could not build bpf/sched.bpf.c");
        let fresh = std::fs::read(&out).unwrap();
        let _ = std::fs::remove_file(&out);
        assert!(
            fresh == committed,
            "the committed bpf/sched.bpf.o is not what {version} builds from its source: run scripts/bpf-object.sh"
        );
    }

    #[test]
    fn refuses_malformed_records() {
        let good = Event { tid: 5, tgid: 5, kind: Kind::Wake, state: 0, creator: 0, cpu: Some(1), time: 9, runtime: 0 }.encode();
        assert!(Event::decode(&good[..EVENT_SIZE - 1]).is_none());
        assert!(Event::decode(&[good.as_slice(), &[0]].concat()).is_none());
        assert!(Event::decode(&[]).is_none());
        for kind in [0u32, 5, u32::MAX] {
            let mut b = good;
            b[8..12].copy_from_slice(&kind.to_ne_bytes());
            assert!(Event::decode(&b).is_none(), "kind {kind}");
        }
        for tid in [0u32, u32::MAX] {
            let mut b = good;
            b[0..4].copy_from_slice(&tid.to_ne_bytes());
            assert!(Event::decode(&b).is_none(), "tid {tid}");
        }
    }
}
