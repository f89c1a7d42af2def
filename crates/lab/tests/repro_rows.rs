//! What makes `vassal repro`'s rows worth reading (issue 19, docs/repro.md "Controls" and
//! "Seeds"): every experiment runs a control — the policy the paper contrasts — and at
//! least one of its rows passes for ours and fails under the control, so the rows can
//! fail; and a row that rests on random draws keeps its status for at least 9 of seeds
//! 1–10 (or is a mean over several seeds).

use std::path::PathBuf;

use vassal_lab::expect::Status;
use vassal_lab::repro::{find_experiments, is_seedless_or_averaged, run_experiment_full, statuses_with_seed};

fn experiments() -> (PathBuf, Vec<PathBuf>) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../experiments");
    let files = find_experiments(&dir, &[]).unwrap();
    assert!(files.len() > 30, "experiments missing under {}", dir.display());
    (dir, files)
}

#[test]
fn every_experiment_runs_a_control_that_some_row_fails() {
    let (dir, files) = experiments();
    let mut vacuous = Vec::new();
    for f in &files {
        let rel = f.strip_prefix(&dir).unwrap().to_string_lossy().replace('\\', "/");
        let run = run_experiment_full(f, false).unwrap();
        let control = run.control.as_ref().unwrap_or_else(|| panic!("{rel} has no [control]"));
        assert!(run.rows.iter().all(|r| r.control.is_some()), "{rel}: a row has no control value");
        let told = run.rows.iter().filter(|r| r.tells_control_apart()).count();
        if told == 0 {
            vacuous.push(format!("{rel} (control {})", control.name));
        }
    }
    assert!(vacuous.is_empty(), "no row of these fails under their control: {vacuous:?}");
}

#[test]
fn a_row_keeps_its_status_for_nine_of_seeds_1_to_10() {
    let (dir, files) = experiments();
    let mut unstable = Vec::new();
    for f in &files {
        if is_seedless_or_averaged(f).unwrap() {
            continue;
        }
        let rel = f.strip_prefix(&dir).unwrap().to_string_lossy().replace('\\', "/");
        let run = run_experiment_full(f, false).unwrap();
        let mut same = vec![0usize; run.rows.len()];
        let mut seen: Vec<Vec<Status>> = vec![Vec::new(); run.rows.len()];
        for seed in 1..=10 {
            for (k, s) in statuses_with_seed(f, seed).unwrap().into_iter().enumerate() {
                same[k] += usize::from(s == run.rows[k].status);
                seen[k].push(s);
            }
        }
        for (k, row) in run.rows.iter().enumerate() {
            if same[k] < 9 {
                unstable.push(format!(
                    "{rel}: {} is {:?} at the file's seed, {}/10 of seeds 1-10 agree: {:?}",
                    row.id, row.status, same[k], seen[k]
                ));
            }
        }
    }
    assert!(unstable.is_empty(), "rows that rest on one random run:\n{}", unstable.join("\n"));
}
