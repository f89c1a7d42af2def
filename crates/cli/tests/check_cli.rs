//! `vassal check OLD NEW` (docs/check.md): a deliberately stalling module (the SDK's
//! `broken` example with `fail=starve`: it keeps its tasks to itself and stops picking
//! them) is flagged with the scenario and seed that replay it, while the reference
//! built-in and a well-behaved module are not; the same check gives the same numbers.

use std::path::PathBuf;
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn vassal(args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_vassal")).args(args).current_dir(root()).output().expect("run vassal");
    (out.status.code(), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn check_flags_a_stalling_module_with_its_seed() {
    let broken = vassal_module::example_path("broken").unwrap();
    let (code, out, err) = vassal(&[
        "check",
        "rr",
        broken.to_str().unwrap(),
        "--new-param",
        "fail=starve",
        "--scenario",
        "desktop",
        "--seeds",
        "1,2",
        "--until",
        "3s",
    ]);
    assert_eq!(code, Some(1), "a stall in NEW fails the gate: {out}{err}");
    for seed in [1, 2] {
        let line = out
            .lines()
            .find(|l| {
                l.contains("STALL (new)")
                    && l.ends_with(&format!(
                        "replay: vassal check rr {} --new-param fail=starve --scenario desktop --seeds {seed}",
                        broken.display()
                    ))
            })
            .unwrap_or_else(|| panic!("seed {seed}: {out}"));
        // starved from the start until the 1 s watchdog ejects the module
        let waited: f64 = line.split("for ").nth(1).unwrap().split(" ms").next().unwrap().parse().unwrap();
        assert!((500.0..=1100.0).contains(&waited), "{line}");
    }
    assert!(!out.contains("STALL (old)"), "{out}");
    assert!(out.contains("new: ") && out.contains("ejected: watchdog"), "{out}");
}

#[test]
fn check_passes_a_sound_module_and_repeats_itself() {
    let rr = vassal_module::example_path("rr").unwrap();
    let args = ["check", "rr", rr.to_str().unwrap(), "--seeds", "3", "--until", "2s", "--json"];
    let (code, out, err) = vassal(&args);
    assert_eq!(code, Some(0), "{out}{err}");
    let rows: serde_json::Value = serde_json::from_str(&out).unwrap();
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len(), 2, "desktop and realtime");
    for r in rows {
        assert!(r["stalls"].as_array().unwrap().is_empty(), "{r}");
        assert!(r["new"]["tasks"].as_array().unwrap().iter().all(|t| t["share"].as_f64().unwrap() > 0.0), "{r}");
    }
    assert_eq!(vassal(&args).1, out, "the same seeds give the same numbers");
}

#[test]
fn check_refuses_unknown_policies() {
    let (code, _, err) = vassal(&["check", "rr", "nosuchpolicy"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("nosuchpolicy"), "{err}");
    let (code, _, err) = vassal(&["check", "rr", "missing.wasm"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("missing.wasm: no such module file"), "{err}");
    let (code, _, err) = vassal(&["check", "rr", "bvt", "--scenario", "office"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("no scenario 'office'; expected one of desktop, realtime"), "{err}");
}
