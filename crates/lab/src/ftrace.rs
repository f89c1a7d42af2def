//! The kernel's own scheduling trace of a real run: ftrace's `sched_switch` and
//! `sched_waking` tracepoints, recorded in an ftrace instance of its own (tracefs
//! `instances/`, so nothing else using ftrace is disturbed, and removed afterwards) on
//! CLOCK_MONOTONIC, read as text while the run goes on, and turned into the same
//! Perfetto trace the simulator writes (vassal-perfetto): so a simulated and a real run
//! of one workload open side by side in Perfetto (`vassal twin`, docs/twin.md). The
//! text format gives µs, so the real trace's times are whole µs.
//!
//! Root only; [`Recorder::start`] mounts tracefs on /sys/kernel/tracing if it is not
//! mounted (and unmounts it again when done).

use std::collections::BTreeMap;
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use vassal_perfetto::{Process, SchedTrace, State, Switch, Thread, Waking};

const TRACEFS: &str = "/sys/kernel/tracing";
/// Per-CPU ring buffer, KiB (read while the run goes on; a loss is counted).
const BUFFER_KB: u32 = 16384;

/// An ftrace instance recording sched_switch and sched_waking.
pub struct Recorder {
    dir: PathBuf,
    mounted: bool,
    stop: Arc<AtomicBool>,
    reader: Option<JoinHandle<std::io::Result<Vec<u8>>>>,
    /// CLOCK_MONOTONIC ns when recording began.
    pub begin: u64,
}

fn write(dir: &Path, file: &str, value: &str) -> Result<(), String> {
    std::fs::write(dir.join(file), value).map_err(|e| format!("tracefs {}: {e}", dir.join(file).display()))
}

impl Recorder {
    pub fn start() -> Result<Recorder, String> {
        let root = Path::new(TRACEFS);
        let mut mounted = false;
        if !root.join("instances").is_dir() {
            let c = |s: &str| std::ffi::CString::new(s).expect("no NUL");
            let (src, dst, fs) = (c("nodev"), c(TRACEFS), c("tracefs"));
            // SAFETY: mount(2) with NUL-terminated strings we own and no data.
            if unsafe { libc::mount(src.as_ptr(), dst.as_ptr(), fs.as_ptr(), 0, std::ptr::null()) } != 0 {
                return Err(format!("tracefs is not mounted on {TRACEFS} and mounting it failed: {}", std::io::Error::last_os_error()));
            }
            mounted = true;
        }
        // an instance left by a `vassal twin` that was killed: removed (by its pid)
        if let Ok(rd) = std::fs::read_dir(root.join("instances")) {
            for e in rd.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                let pid = name.strip_prefix("vassal-").and_then(|r| r.split('-').next()).and_then(|p| p.parse::<u32>().ok());
                if pid.is_some_and(|p| p != std::process::id() && !Path::new(&format!("/proc/{p}")).exists()) {
                    let _ = std::fs::remove_dir(e.path());
                }
            }
        }
        let dir = root.join("instances").join(format!("vassal-{}-{}", std::process::id(), vassal_agent::kernel::now_ns()));
        if let Err(e) = std::fs::create_dir(&dir) {
            Self::unmount(mounted);
            return Err(format!("creating the ftrace instance {}: {e}", dir.display()));
        }
        let mut me = Recorder { dir, mounted, stop: Arc::new(AtomicBool::new(false)), reader: None, begin: 0 };
        write(&me.dir, "tracing_on", "0")?;
        write(&me.dir, "trace_clock", "mono")?;
        write(&me.dir, "buffer_size_kb", &BUFFER_KB.to_string())?;
        let _ = write(&me.dir, "options/record-tgid", "1");
        write(&me.dir, "events/sched/sched_switch/enable", "1")?;
        write(&me.dir, "events/sched/sched_waking/enable", "1")?;
        let pipe = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(me.dir.join("trace_pipe"))
            .map_err(|e| format!("opening trace_pipe: {e}"))?;
        let stop = Arc::clone(&me.stop);
        me.reader = Some(std::thread::spawn(move || read_pipe(pipe, &stop)));
        me.begin = vassal_agent::kernel::now_ns();
        write(&me.dir, "tracing_on", "1")?;
        Ok(me)
    }

    /// Stops recording; the trace's text and the events the ring buffer lost.
    pub fn finish(mut self) -> Result<(String, u64), String> {
        write(&self.dir, "tracing_on", "0")?;
        self.stop.store(true, Ordering::SeqCst);
        let bytes = match self.reader.take().map(|h| h.join()) {
            Some(Ok(Ok(b))) => b,
            Some(Ok(Err(e))) => return Err(format!("reading trace_pipe: {e}")),
            _ => return Err("the trace reader panicked".into()),
        };
        let mut lost = 0;
        for cpu in std::fs::read_dir(self.dir.join("per_cpu")).map_err(|e| e.to_string())?.flatten() {
            let stats = std::fs::read_to_string(cpu.path().join("stats")).unwrap_or_default();
            for l in stats.lines() {
                if let Some(v) = l.strip_prefix("overrun:").or_else(|| l.strip_prefix("dropped events:")) {
                    lost += v.trim().parse::<u64>().unwrap_or(0);
                }
            }
        }
        Ok((String::from_utf8_lossy(&bytes).into_owned(), lost))
    }

    fn unmount(mounted: bool) {
        if mounted {
            let dst = std::ffi::CString::new(TRACEFS).expect("no NUL");
            // SAFETY: umount2 on a path we mounted.
            unsafe { libc::umount2(dst.as_ptr(), libc::MNT_DETACH) };
        }
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        let _ = write(&self.dir, "tracing_on", "0");
        self.stop.store(true, Ordering::SeqCst);
        if let Some(h) = self.reader.take() {
            let _ = h.join();
        }
        let _ = write(&self.dir, "events/sched/sched_switch/enable", "0");
        let _ = write(&self.dir, "events/sched/sched_waking/enable", "0");
        let _ = std::fs::remove_dir(&self.dir);
        Self::unmount(self.mounted);
    }
}

/// Reads the pipe until told to stop and it is empty.
fn read_pipe(mut pipe: std::fs::File, stop: &AtomicBool) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        match pipe.read(&mut buf) {
            Ok(0) => {
                if stop.load(Ordering::SeqCst) {
                    return Ok(out);
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if stop.load(Ordering::SeqCst) {
                    return Ok(out);
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// One traced event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    pub ts: u64,
    pub cpu: u32,
    /// The task the event was recorded in (the waker, or the task switching out).
    pub tid: i32,
    pub tgid: Option<i32>,
    pub kind: Kind,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Kind {
    Switch { prev: Task, prev_state: State, next: Task },
    Waking { task: Task, target_cpu: u32 },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Task {
    pub comm: String,
    pub pid: i32,
    pub prio: i32,
}

/// `KEY=` value up to ` NEXTKEY=` (a comm may hold spaces).
fn field<'a>(s: &'a str, key: &str, next: Option<&str>) -> Option<&'a str> {
    let from = s.find(&format!("{key}="))? + key.len() + 1;
    let rest = &s[from..];
    let to = match next {
        Some(n) => rest.find(&format!(" {n}="))?,
        None => rest.find(' ').unwrap_or(rest.len()),
    };
    Some(&rest[..to])
}

fn state(s: &str) -> State {
    match s.chars().next() {
        Some('R') => State::Runnable,
        Some('D') => State::Uninterruptible,
        Some('X' | 'Z' | 'x') => State::Dead,
        _ => State::Sleeping, // S, T (stopped), t, I (idle kernel thread), P
    }
}

/// One line of the trace's text (None: a comment or another event).
pub fn parse_line(line: &str) -> Option<Event> {
    let (head, rest, switch) = if let Some(k) = line.find(": sched_switch: ") {
        (&line[..k], &line[k + 16..], true)
    } else if let Some(k) = line.find(": sched_waking: ") {
        (&line[..k], &line[k + 16..], false)
    } else {
        return None;
    };
    // head: "COMM-TID (TGID) [CPU] FLAGS TS" (TGID with record-tgid; "-------" unknown)
    let ts_s = head.rsplit(' ').next()?;
    let (sec, frac) = ts_s.split_once('.')?;
    let us: u64 = format!("{sec}{frac:0<6}").get(..sec.len() + 6)?.parse().ok()?;
    let open = head.rfind('[')?;
    let close = open + head[open..].find(']')?;
    let cpu: u32 = head[open + 1..close].trim().parse().ok()?;
    let before = head[..open].trim_end();
    let (task_part, tgid) = match before.strip_suffix(')') {
        Some(b) => {
            let p = b.rfind('(')?;
            (b[..p].trim_end(), b[p + 1..].trim().parse::<i32>().ok())
        }
        None => (before, None),
    };
    let tid: i32 = task_part.rsplit('-').next()?.trim().parse().ok()?;
    let kind = if switch {
        let prev = Task {
            comm: field(rest, "prev_comm", Some("prev_pid"))?.to_string(),
            pid: field(rest, "prev_pid", None)?.parse().ok()?,
            prio: field(rest, "prev_prio", None)?.parse().ok()?,
        };
        let prev_state = state(field(rest, "prev_state", None)?);
        let next = Task {
            comm: field(rest, "next_comm", Some("next_pid"))?.to_string(),
            pid: field(rest, "next_pid", None)?.parse().ok()?,
            prio: field(rest, "next_prio", None)?.parse().ok()?,
        };
        Kind::Switch { prev, prev_state, next }
    } else {
        let task = Task {
            comm: field(rest, "comm", Some("pid"))?.to_string(),
            pid: field(rest, "pid", None)?.parse().ok()?,
            prio: field(rest, "prio", None)?.parse().ok()?,
        };
        let target_cpu = field(rest, "target_cpu", None)?.trim_start_matches('0').parse().unwrap_or(0);
        Kind::Waking { task, target_cpu }
    };
    Some(Event { ts: us * 1000, cpu, tid, tgid, kind })
}

/// A span during which `tid` held `cpu`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Held {
    pub cpu: u32,
    pub tid: i32,
    pub start: u64,
    pub end: u64,
}

/// A real run's trace: the Perfetto form and what ran where.
pub struct KernelTrace {
    pub sched: SchedTrace,
    /// Who held each CPU (idle left out), from `begin` to `end`.
    pub held: Vec<Held>,
    /// Thread → process, as recorded.
    pub tgid: BTreeMap<i32, i32>,
    /// Switches that did not chain (events the ring buffer lost), mended.
    pub mended: usize,
}

/// Builds the trace of the events of `text` within [begin, end] on `cpus` CPUs, with
/// times from `begin` (so a real run's trace starts at 0, as a simulated one does);
/// `names` gives process names (tgid → name) where known.
pub fn kernel_trace(text: &str, cpus: u32, begin: u64, end: u64, names: &BTreeMap<i32, String>) -> KernelTrace {
    let mut events: Vec<Event> = text
        .lines()
        .filter_map(parse_line)
        .filter(|e| e.cpu < cpus && e.ts >= begin && e.ts <= end)
        .map(|mut e| {
            e.ts -= begin;
            e
        })
        .collect();
    let (begin, end) = (0, end.saturating_sub(begin));
    events.sort_by_key(|e| e.ts); // stable: per-CPU order kept
    let mut threads: BTreeMap<i32, Thread> = BTreeMap::new();
    let mut tgid: BTreeMap<i32, i32> = BTreeMap::new();
    let see = |t: &Task, threads: &mut BTreeMap<i32, Thread>| {
        if t.pid != 0 {
            let e = threads.entry(t.pid).or_insert(Thread { tid: t.pid, pid: t.pid, name: t.comm.clone(), prio: t.prio });
            e.name = t.comm.clone();
            e.prio = t.prio;
        }
    };
    for e in &events {
        if let Some(g) = e.tgid.filter(|&g| g > 0 && e.tid > 0) {
            tgid.insert(e.tid, g);
        }
        match &e.kind {
            Kind::Switch { prev, next, .. } => {
                see(prev, &mut threads);
                see(next, &mut threads);
            }
            Kind::Waking { task, .. } => see(task, &mut threads),
        }
    }
    if events.iter().any(|e| e.tid != 0 && !threads.contains_key(&e.tid)) {
        for e in &events {
            threads.entry(e.tid).or_insert(Thread { tid: e.tid, pid: e.tid, name: format!("tid {}", e.tid), prio: 120 });
        }
        threads.remove(&0);
    }
    for th in threads.values_mut() {
        th.pid = tgid.get(&th.tid).copied().unwrap_or(th.tid);
    }
    let mut pids: BTreeMap<i32, String> = BTreeMap::new();
    for th in threads.values() {
        let name =
            names.get(&th.pid).cloned().or_else(|| threads.get(&th.pid).map(|m| m.name.clone())).unwrap_or(format!("pid {}", th.pid));
        pids.insert(th.pid, name);
    }
    // Per CPU: who holds it, since when (None before its first event: then the CPU was
    // the first switch's `prev`'s from `begin` on, as far as the trace can tell, which
    // Perfetto is shown as a switch from idle at `begin`).
    let mut holder: BTreeMap<u32, (i32, u64)> = BTreeMap::new();
    let (mut switches, mut wakings, mut held) = (Vec::new(), Vec::new(), Vec::new());
    let mut mended = 0;
    for e in &events {
        match &e.kind {
            Kind::Switch { prev, prev_state, next } => {
                let since = match holder.get(&e.cpu).copied() {
                    None => {
                        let from = begin.min(e.ts);
                        if prev.pid != 0 {
                            switches.push(Switch { ts: from, cpu: e.cpu, prev: 0, prev_state: State::Runnable, next: prev.pid });
                        }
                        from
                    }
                    Some((cur, since)) if cur == prev.pid => since,
                    Some((cur, since)) => {
                        // a switch the ring buffer lost: `cur` gave the CPU to `prev` unseen
                        mended += 1;
                        if cur != 0 {
                            held.push(Held { cpu: e.cpu, tid: cur, start: since, end: e.ts });
                        }
                        switches.push(Switch { ts: e.ts, cpu: e.cpu, prev: cur, prev_state: State::Runnable, next: prev.pid });
                        e.ts
                    }
                };
                if prev.pid != 0 {
                    held.push(Held { cpu: e.cpu, tid: prev.pid, start: since, end: e.ts });
                }
                switches.push(Switch { ts: e.ts, cpu: e.cpu, prev: prev.pid, prev_state: *prev_state, next: next.pid });
                holder.insert(e.cpu, (next.pid, e.ts));
            }
            Kind::Waking { task, target_cpu } => {
                if task.pid != 0 && *target_cpu < cpus {
                    wakings.push(Waking { ts: e.ts, cpu: e.cpu, waker: e.tid, tid: task.pid, target_cpu: *target_cpu });
                }
            }
        }
    }
    for (&cpu, &(tid, since)) in &holder {
        if tid != 0 && end > since {
            held.push(Held { cpu, tid, start: since, end });
        }
    }
    held.retain(|h| h.end > h.start);
    held.sort_by_key(|h| (h.cpu, h.start));
    let sched = SchedTrace {
        cpus,
        processes: pids.into_iter().map(|(pid, name)| Process { pid, name }).collect(),
        threads: threads.into_values().collect(),
        switches,
        wakings,
    };
    KernelTrace { sched, held, tgid, mended }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "\
# tracer: nop
            bash-21887   (  21887) [000] d..2.  5352.434549: sched_switch: prev_comm=bash prev_pid=21887 prev_prio=120 prev_state=R ==> next_comm=lto cgu.01 next_pid=17007 next_prio=120
 lto cgu.01-17007   (  17000) [000] d..2.  5352.435301: sched_waking: comm=rt-a pid=300 prio=89 target_cpu=001
          <idle>-0       (-------) [001] dN.4.  5352.435310: sched_switch: prev_comm=swapper/1 prev_pid=0 prev_prio=120 prev_state=R ==> next_comm=rt-a next_pid=300 next_prio=89
 lto cgu.01-17007   (  17000) [000] d..2.  5352.436040: sched_switch: prev_comm=lto cgu.01 prev_pid=17007 prev_prio=120 prev_state=S ==> next_comm=swapper/0 next_pid=0 next_prio=120
            rt-a-300     (    299) [001] d..2.  5352.437000: sched_switch: prev_comm=rt-a prev_pid=300 prev_prio=89 prev_state=S ==> next_comm=swapper/1 next_pid=0 next_prio=120
";

    #[test]
    fn lines_are_read_with_spaces_in_names_and_tgids() {
        let e = parse_line(TEXT.lines().nth(2).unwrap()).unwrap();
        assert_eq!(
            e,
            Event {
                ts: 5_352_435_301_000,
                cpu: 0,
                tid: 17007,
                tgid: Some(17000),
                kind: Kind::Waking { task: Task { comm: "rt-a".into(), pid: 300, prio: 89 }, target_cpu: 1 }
            }
        );
        let e = parse_line(TEXT.lines().nth(1).unwrap()).unwrap();
        let Kind::Switch { next, prev_state, .. } = e.kind else { panic!() };
        assert_eq!((next.comm.as_str(), next.pid, prev_state), ("lto cgu.01", 17007, State::Runnable));
        assert_eq!(parse_line("# tracer: nop"), None);
        assert_eq!(parse_line("x-1 [000] d..2. 1.000001: sched_wakeup: comm=a pid=2 prio=120 target_cpu=000"), None);
        let e = parse_line("          <idle>-0       [001] d..2.   12.5: sched_switch: prev_comm=swapper/1 prev_pid=0 prev_prio=120 prev_state=R ==> next_comm=a next_pid=2 next_prio=120").unwrap();
        assert_eq!((e.ts, e.cpu, e.tgid), (12_500_000_000, 1, None), "no tgid column, and a short fraction");
    }

    #[test]
    fn a_kernel_trace_chains_from_the_start_and_encodes() {
        let begin = 5_352_434_000_000;
        let t = kernel_trace(TEXT, 2, begin, 5_352_438_000_000, &BTreeMap::new());
        assert_eq!(t.mended, 0);
        assert_eq!(t.tgid.get(&300), Some(&299));
        let held: Vec<(u32, i32, u64, u64)> = t.held.iter().map(|h| (h.cpu, h.tid, h.start, h.end)).collect();
        assert_eq!(held, [(0, 21887, 0, 549_000), (0, 17007, 549_000, 2_040_000), (1, 300, 1_310_000, 3_000_000)]);
        assert_eq!(t.sched.switches[0].ts, 0, "times from the start");
        // events before the start are left out; the CPU was the first switch's prev's
        let later = kernel_trace(TEXT, 2, 5_352_435_000_000, 5_352_438_000_000, &BTreeMap::new());
        let held: Vec<(u32, i32, u64, u64)> = later.held.iter().map(|h| (h.cpu, h.tid, h.start, h.end)).collect();
        assert_eq!(held, [(0, 17007, 0, 1_040_000), (1, 300, 310_000, 2_000_000)]);
        let bytes = vassal_perfetto::encode(&t.sched).unwrap();
        let back = vassal_perfetto::decode(&bytes).unwrap();
        let names: Vec<String> = back
            .packet
            .iter()
            .filter(|p| p.has_process_tree())
            .flat_map(|p| p.process_tree().threads.iter().map(|t| t.name().to_string()))
            .collect();
        assert_eq!(names, ["rt-a", "lto cgu.01", "bash"]);
        // a lost switch is mended, and counted
        let lossy = TEXT.lines().filter(|l| !l.contains("5352.436040")).collect::<Vec<_>>().join("\n")
            + "\n            rt-b-301     (    299) [000] d..2.  5352.437500: sched_switch: prev_comm=rt-b prev_pid=301 prev_prio=120 prev_state=S ==> next_comm=swapper/0 next_pid=0 next_prio=120\n";
        let t = kernel_trace(&lossy, 2, begin, 5_352_438_000_000, &BTreeMap::new());
        assert_eq!(t.mended, 1);
        vassal_perfetto::encode(&t.sched).unwrap();
    }
}
