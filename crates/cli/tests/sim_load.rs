//! The prototyping loop of docs/modules.md, end to end through the `vassal` binary:
//! build a module, `vassal sim docs/examples/proto.toml --load FILE --name proto`, read
//! the report; a module that breaks is ejected and the run still completes.

use std::path::PathBuf;
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn module(name: &str) -> PathBuf {
    vassal_module::example_path(name).unwrap()
}

fn vassal(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_vassal")).args(args).current_dir(root()).output().expect("run vassal");
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn sim_load_runs_each_example_module_in_the_placeholder() {
    for m in ["rr", "stride", "bvt"] {
        let file = module(m);
        let (ok, out, err) = vassal(&["sim", "docs/examples/proto.toml", "--load", file.to_str().unwrap(), "--name", "proto"]);
        assert!(ok, "{m}: {err}");
        let loaded = out.lines().find(|l| l.contains("scheduler 'proto' loaded from module")).unwrap_or_else(|| panic!("{m}: {out}"));
        assert!(loaded.contains(&format!("(vassal_module_{m}.wasm), reserved 50.0% of one CPU")), "{m}: {loaded}");
        assert!(out.contains("module scheduler 'proto' unloaded [a -> ts, b -> ts, c -> ts]"), "{m}: {out}");
        assert!(!out.contains("ejected"), "{m}: {out}");
    }
}

#[test]
fn sim_load_with_params_times_and_json() {
    let file = module("stride");
    let (ok, out, err) = vassal(&[
        "sim",
        "docs/examples/proto.toml",
        "--load",
        file.to_str().unwrap(),
        "--name",
        "proto",
        "--param",
        "quantum=5ms",
        "--load-at",
        "1s",
        "--unload-at",
        "2s",
        "--json",
    ]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("JSON report");
    let log: Vec<String> = v["log"].as_array().unwrap().iter().map(|l| l.as_str().unwrap().to_string()).collect();
    assert!(log.iter().any(|l| l.contains("1.000000000s scheduler 'proto' loaded from module")), "{log:#?}");
    assert!(log.iter().any(|l| l.contains("2.000000000s module scheduler 'proto' unloaded")), "{log:#?}");
}

#[test]
fn a_broken_module_is_ejected_and_the_run_completes() {
    let file = module("broken");
    let (ok, out, err) =
        vassal(&["sim", "docs/examples/proto.toml", "--load", file.to_str().unwrap(), "--name", "proto", "--param", "fail=trap"]);
    assert!(ok, "{err}");
    assert!(out.contains("scheduler 'proto' ejected: module vassal_module_broken.wasm trapped"), "{out}");
}

#[test]
fn sim_load_mistakes_are_clear_errors() {
    let (ok, _, err) = vassal(&["sim", "docs/examples/proto.toml", "--load", "nope.wasm"]);
    assert!(!ok);
    assert!(err.contains("--load nope.wasm") && err.contains("cannot read module file nope.wasm"), "{err}");
    let file = module("rr");
    let (ok, _, err) = vassal(&["sim", "docs/examples/proto.toml", "--load", file.to_str().unwrap(), "--name", "x", "--below", "ts"]);
    assert!(!ok);
    assert!(err.contains("nothing can be placed below the default scheduler"), "{err}");
    let (ok, _, err) = vassal(&["sim", "docs/examples/proto.toml", "--load", file.to_str().unwrap(), "--param", "novalue"]);
    assert!(!ok);
    assert!(err.contains("expected KEY=VALUE"), "{err}");
}
