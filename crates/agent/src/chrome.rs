//! `vassal agent --trace FILE` (issue 7 item 1): what the agent decided, as a Chrome trace
//! that the Perfetto UI and chrome://tracing open, in the simulator's layout
//! (docs/trace.md): process "CPUs" (pid 1) with one track per CPU (tid 100 + N) and a
//! slice for each span a managed process was selected to run there, named by its pid,
//! with the deciding scheduler as category and argument; process "Tasks" (pid 2) with a
//! track per managed process (tid = its pid) and `wake` / `block` instants as the agent
//! saw them (polling: up to a few ticks late); process "Schedulers" (pid 3) with one
//! track per scheduler (tid 10 + its position) and an instant `event` per scheduler event
//! fired (e.g. rtserver's slot boundaries). Times are µs since the agent started.
//!
//! It is written in the JSON *array* form, one event per line, flushed after every
//! dispatcher pass that wrote something: a trace cut short by a crash or SIGKILL still
//! opens (the format allows the closing `]` to be missing); an orderly stop closes it.

use std::collections::BTreeSet;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;

use vassal_core::Ns;

pub struct ChromeTrace {
    out: BufWriter<File>,
    t0: Ns,
    /// Per CPU: the open slice (pid, start, scheduler).
    open: Vec<Option<(u32, Ns, String)>>,
    tasks: BTreeSet<u32>,
    scheds: Vec<String>,
    dirty: bool,
}

fn us(ns: Ns) -> String {
    format!("{}.{:03}", ns / 1000, ns % 1000)
}

/// A JSON string literal.
fn js(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"?\"".into())
}

impl ChromeTrace {
    pub fn create(path: &Path, t0: Ns, ncpus: u16) -> io::Result<ChromeTrace> {
        let mut t = ChromeTrace {
            out: BufWriter::new(File::create(path)?),
            t0,
            open: vec![None; ncpus as usize],
            tasks: BTreeSet::new(),
            scheds: Vec::new(),
            dirty: true,
        };
        t.line("[".into());
        t.meta("process_name", 1, 100, r#"{"name":"CPUs"}"#);
        t.meta("process_name", 2, 1, r#"{"name":"Tasks"}"#);
        t.meta("process_name", 3, 10, r#"{"name":"Schedulers"}"#);
        for c in 0..ncpus {
            t.meta("thread_name", 1, 100 + c as u64, &format!(r#"{{"name":"cpu{c}"}}"#));
        }
        Ok(t)
    }

    fn line(&mut self, s: String) {
        let _ = writeln!(self.out, "{s}");
        self.dirty = true;
    }

    fn meta(&mut self, what: &str, pid: u32, tid: u64, args: &str) {
        self.line(format!(r#"{{"name":"{what}","ph":"M","pid":{pid},"tid":{tid},"args":{args}}},"#));
    }

    fn task(&mut self, pid: u32) {
        if self.tasks.insert(pid) {
            self.meta("thread_name", 2, pid as u64, &format!(r#"{{"name":"pid {pid}"}}"#));
        }
    }

    fn close(&mut self, now: Ns, cpu: usize) {
        if let Some((pid, start, sched)) = self.open.get_mut(cpu).and_then(Option::take) {
            let dur = now.saturating_sub(start);
            if dur > 0 {
                let (ts, d) = (us(start - self.t0.min(start)), us(dur));
                self.line(format!(
                    r#"{{"name":"pid {pid}","cat":{s},"ph":"X","pid":1,"tid":{},"ts":{ts},"dur":{d},"args":{{"scheduler":{s}}}}},"#,
                    100 + cpu,
                    s = js(&sched)
                ));
                self.line(format!(
                    r#"{{"name":"running on cpu{cpu}","cat":{s},"ph":"X","pid":2,"tid":{pid},"ts":{ts},"dur":{d},"args":{{"scheduler":{s}}}}},"#,
                    s = js(&sched)
                ));
            }
        }
    }

    /// The dispatcher decided for `cpu` at `now`: `task` (pid, deciding scheduler) or idle.
    pub fn decision(&mut self, now: Ns, cpu: u16, task: Option<(u32, &str)>) {
        let c = cpu as usize;
        if c >= self.open.len() {
            return;
        }
        if let (Some((pid, _, sched)), Some((p, s))) = (&self.open[c], task) {
            if *pid == p && sched == s {
                return; // the same task goes on running: one slice
            }
        }
        self.close(now, c);
        if let Some((pid, sched)) = task {
            self.task(pid);
            self.open[c] = Some((pid, now, sched.to_string()));
        }
    }

    /// The agent saw `pid` become runnable (`woke`) or block.
    pub fn runnable(&mut self, now: Ns, pid: u32, woke: bool) {
        self.task(pid);
        let name = if woke { "wake" } else { "block" };
        self.line(format!(
            r#"{{"name":"{name}","cat":"task","ph":"i","s":"t","pid":2,"tid":{pid},"ts":{}}},"#,
            us(now.saturating_sub(self.t0))
        ));
    }

    /// A scheduler event of `sched` fired.
    pub fn event(&mut self, now: Ns, sched: &str) {
        let k = match self.scheds.iter().position(|s| s == sched) {
            Some(k) => k,
            None => {
                self.scheds.push(sched.to_string());
                let k = self.scheds.len() - 1;
                self.meta("thread_name", 3, 10 + k as u64, &format!(r#"{{"name":{}}}"#, js(sched)));
                k
            }
        };
        self.line(format!(
            r#"{{"name":"event","cat":"scheduler","ph":"i","s":"t","pid":3,"tid":{},"ts":{}}},"#,
            10 + k,
            us(now.saturating_sub(self.t0))
        ));
    }

    /// After a pass: put what was written on disk.
    pub fn flush(&mut self) {
        if self.dirty {
            let _ = self.out.flush();
            self.dirty = false;
        }
    }

    /// An orderly stop at `now`: close the open slices and the array.
    pub fn finish(&mut self, now: Ns) {
        for c in 0..self.open.len() {
            self.close(now, c);
        }
        // The array's last element may not end with a comma: a final metadata event.
        self.line(r#"{"name":"trace_end","ph":"M","pid":1,"tid":100,"args":{"generator":"vassal agent"}}]"#.into());
        self.flush();
    }
}
