//! Every JSON workload that rt-app ships (Debian package `rt-app` 1.0:
//! /usr/share/doc/rt-app, its examples/ and examples/tutorial/) that rt-app reads runs in
//! the simulator, with the engine's invariant checks on; the ones rt-app 1.0 itself
//! cannot read are refused with the reason and the line. Which is which was found by
//! running rt-app 1.0 on each file (docs/rtapp.md, "rt-app's own examples"). Skipped,
//! and counted as skipped by scripts/test.sh, where the package is not installed.

use std::io::Write;
use std::path::{Path, PathBuf};

use vassal_core::SEC;
use vassal_sim::rtapp::{load_rtapp, Options};
use vassal_sim::Sim;

const DOC: &str = "/usr/share/doc/rt-app";

/// Records that the test is skipped, and why (as vassal_agent::skip does: the simulator
/// does not depend on the agent).
fn skip(reason: &str) {
    eprintln!("SKIPPED: {reason}");
    if let Some(path) = std::env::var_os("VASSAL_SKIP_LOG") {
        if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(path) {
            let _ = writeln!(f, "{reason}");
        }
    }
}

fn json_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            json_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "json") {
            out.push(p);
        }
    }
}

/// Files rt-app 1.0 does not read, and what the refusal must name.
const NOT_READ_BY_RT_APP: &[(&str, &str)] = &[
    // "[json] Error while parsing config": snippets for merge.py, no "tasks"
    ("examples/merge/global.json", "1:1: tasks: an rt-app file needs a \"tasks\" object"),
    ("examples/merge/resources.json", "1:1: tasks: an rt-app file needs a \"tasks\" object"),
    // the pre-1.0 grammar: "Unknown or mismatch lock_order event type !!!"
    ("examples/merge/thread0.json", ":4:10: tasks.thread0.exec: `exec` cannot be simulated: it belongs to rt-app's pre-1.0 grammar"),
    ("examples/merge/thread1.json", ":4:10: tasks.thread1.exec: `exec` cannot be simulated: it belongs to rt-app's pre-1.0 grammar"),
    ("examples/merge/thread2.json", ":4:10: tasks.thread2.exec: `exec` cannot be simulated: it belongs to rt-app's pre-1.0 grammar"),
    ("examples/merge/thread3.json", ":4:10: tasks.thread3.exec: `exec` cannot be simulated: it belongs to rt-app's pre-1.0 grammar"),
    ("taskset.json", ":4:10: tasks.ThreadA.exec: `exec` cannot be simulated: it belongs to rt-app's pre-1.0 grammar"),
];

#[test]
fn every_workload_rt_app_reads_runs() {
    let doc = Path::new(DOC);
    if !doc.join("examples").is_dir() {
        skip("rt-app's examples are not installed (apt-get install rt-app): /usr/share/doc/rt-app/examples");
        return;
    }
    let mut files = Vec::new();
    json_files(doc, &mut files);
    files.sort();
    assert!(files.len() >= 20, "{files:?}");
    let mut ran = 0;
    for f in &files {
        let rel = f.strip_prefix(doc).unwrap().to_string_lossy().to_string();
        // two simulated seconds of each (their durations run up to 600 s)
        let opts = Options { until: Some(2 * SEC), ..Options::default() };
        let got = load_rtapp(f, &opts);
        match NOT_READ_BY_RT_APP.iter().find(|(n, _)| *n == rel) {
            Some((_, want)) => {
                let e = got.expect_err(&rel);
                assert!(e.contains(want), "{rel}: {e}");
            }
            None => {
                let sc = got.unwrap_or_else(|e| panic!("{rel}: {e}"));
                let mut sim = Sim::new(sc.clone()).unwrap_or_else(|e| panic!("{rel}: {e}"));
                sim.set_checks(true);
                let r = sim.run().unwrap_or_else(|e| panic!("{rel}: {e}"));
                assert_eq!(r.elapsed_ns, 2 * SEC, "{rel}");
                assert!(r.tasks.iter().any(|t| t.cpu_ns > 0), "{rel}: nothing ran");
                eprintln!(
                    "{rel}: {} threads, {} schedulers, busy {:.1} ms",
                    r.tasks.len(),
                    r.schedulers.len(),
                    r.cpus.iter().map(|c| c.busy_ns).sum::<u64>() as f64 / 1e6
                );
                ran += 1;
            }
        }
    }
    assert_eq!(ran + NOT_READ_BY_RT_APP.len(), files.len());
}
