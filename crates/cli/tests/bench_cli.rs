//! `vassal bench --only NAME --until DUR` (docs/bench.md, scripts/bench-instructions.sh):
//! one of the bench's simulator scenarios run once, and what it simulated printed; a
//! name or horizon it does not know is an error naming it.

use std::process::Command;

fn vassal(args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_vassal")).args(args).output().expect("run vassal");
    (out.status.code(), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn one_bench_scenario_prints_its_events_and_jobs() {
    let (code, out, err) = vassal(&["bench", "--only", "rm_1cpu", "--until", "2s", "--json"]);
    assert_eq!(code, Some(0), "{out}{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(v["scenario"], "rm_1cpu");
    assert_eq!(v["until_ns"], 2_000_000_000u64);
    // 20 tasks of periods 10·k ms: every job released before 2 s but the last of each
    // task finishes within it (utilisation 0.7 under RM), so jobs are between those due
    // and those released.
    let released: u64 = (1..=20u64).map(|k| 2_000u64.div_ceil(10 * k)).sum();
    let due: u64 = (1..=20u64).map(|k| 2_000 / (10 * k)).sum();
    let jobs = v["jobs"].as_u64().unwrap();
    assert!(due <= jobs && jobs <= released, "jobs {jobs}: due {due}, released {released}");
    assert!(v["events"].as_u64().unwrap() >= 2 * jobs, "a release and a completion per job: {v}");

    let (code, out, err) = vassal(&["bench", "--only", "gedf_4cpu", "--until", "2s"]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.starts_with("gedf_4cpu: ") && out.contains(" jobs in 2.000 s simulated"), "{out}");
}

#[test]
fn an_unknown_bench_scenario_or_horizon_is_refused_by_name() {
    // vassal's errors exit 2 (as clap's do)
    let (code, out, err) = vassal(&["bench", "--only", "rm", "--until", "1s"]);
    assert_eq!(code, Some(2), "{out}{err}");
    assert!(err.contains("no bench scenario 'rm'") && err.contains("events, rm_1cpu, gedf_4cpu"), "{err}");
    assert!(out.is_empty(), "{out}");
    let (code, _, err) = vassal(&["bench", "--only", "events", "--until", "soon"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--until soon"), "{err}");
    // --until belongs to --only
    let (code, _, err) = vassal(&["bench", "--until", "1s"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--only <SCENARIO>"), "{err}");
}
