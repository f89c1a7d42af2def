//! The host library's entry points for a mechanism (the Linux agent's `vassal ctl
//! load/unload`, the simulator): `load`, `unload`, and containment through
//! `Dispatcher::eject_failed`, on a bare dispatcher; and the ABI checks at load.

use std::collections::BTreeMap;
use std::path::PathBuf;

use vassal_core::*;
use vassal_module::{load, load_bytes, unload, LoadError, LoadOptions, Placement, WasmPolicy};

fn module(name: &str) -> PathBuf {
    vassal_module::example_path(name).unwrap()
}

fn dispatcher() -> Dispatcher {
    let rr = vassal_policies::build("rr", &BTreeMap::new()).unwrap();
    let mut d = Dispatcher::new(1, "ts", rr, HierarchyConfig::default());
    let mid = vassal_policies::build("rr", &BTreeMap::new()).unwrap();
    d.register("mid", mid, Usage::Reserved { cpu_ppm: 200_000 }, Position::Top).unwrap();
    d
}

fn names(d: &Dispatcher) -> Vec<String> {
    d.schedulers().into_iter().map(|s| s.name).collect()
}

fn joined(d: &mut Dispatcher, sched: SchedId) -> TaskId {
    let t = d.add_task(0, TaskParams::new(), CpuSet::NONE, None, true);
    assert_eq!(d.message(0, sched, Sender::ROOT, t, &Request::Join), Reply::Ok);
    t
}

#[test]
fn load_above_and_below_a_named_scheduler_then_unload_to_the_one_below() {
    let mut d = dispatcher();
    let mut opts = LoadOptions::default();
    opts.params.insert("reserved".into(), ParamValue::Float(0.3));
    let top = load(&mut d, &module("rr"), "top", &Placement::Above("mid".into()), &opts).unwrap();
    let low = load(&mut d, &module("stride"), "low", &Placement::Below("mid".into()), &opts).unwrap();
    assert_eq!(names(&d), ["top", "mid", "low", "ts"]);
    assert_eq!(d.schedulers()[0].kind, "rr.wasm");
    assert_eq!(d.schedulers()[0].usage, Usage::Reserved { cpu_ppm: 300_000 });
    let a = joined(&mut d, top);
    let got = d.schedule(0, CpuId(0), Preempt::Resched).unwrap();
    assert_eq!((got.task, got.by), (a, top));
    let moved = unload(&mut d, 10, "top").unwrap();
    assert_eq!(moved, vec![(a, d.lookup("mid").unwrap())]);
    assert_eq!(names(&d), ["mid", "low", "ts"]);
    let b = joined(&mut d, low);
    assert_eq!(unload(&mut d, 20, "low").unwrap(), vec![(b, d.default_sched())]);
    d.check_invariants().unwrap();
    assert!(matches!(unload(&mut d, 30, "low"), Err(LoadError::Init(m)) if m.contains("no scheduler named 'low'")));
}

#[test]
fn a_refused_load_changes_nothing() {
    let mut d = dispatcher();
    let mut opts = LoadOptions::default();
    opts.params.insert("reserved".into(), ParamValue::Float(0.9)); // 0.2 + 0.9 > 1 CPU − 5%
    let e = load(&mut d, &module("rr"), "big", &Placement::Top, &opts).unwrap_err();
    assert!(e.to_string().contains("conflicts with the hierarchy"), "{e}");
    let e = load(&mut d, &module("rr"), "x", &Placement::Below("nope".into()), &LoadOptions::default()).unwrap_err();
    assert!(e.to_string().contains("no scheduler named 'nope'"), "{e}");
    let e = load(&mut d, &module("rr"), "mid", &Placement::Top, &LoadOptions::default()).unwrap_err();
    assert!(e.to_string().contains("already registered"), "{e}");
    assert_eq!(names(&d), ["mid", "ts"]);
}

#[test]
fn a_trapping_module_is_ejected_through_eject_failed() {
    let mut d = dispatcher();
    let mut opts = LoadOptions::default();
    opts.params.insert("fail".into(), ParamValue::Str("trap".into()));
    opts.params.insert("after".into(), ParamValue::Int(0));
    let id = load(&mut d, &module("broken"), "bad", &Placement::Top, &opts).unwrap();
    let a = joined(&mut d, id);
    let got = d.schedule(0, CpuId(0), Preempt::Resched).unwrap();
    assert_ne!(got.by, id, "the trap fell through to the schedulers below");
    let ej = d.eject_failed(0);
    assert_eq!(ej.len(), 1);
    assert!(ej[0].reason.contains("trapped: wasm `unreachable` instruction executed"), "{}", ej[0].reason);
    assert_eq!(ej[0].moved, vec![(a, d.lookup("mid").unwrap())]);
    assert_eq!(names(&d), ["mid", "ts"]);
}

#[test]
fn fuel_and_memory_limits_are_per_load() {
    // A tiny fuel budget: even the well-behaved rr runs out in its first call.
    let mut d = dispatcher();
    let mut opts = LoadOptions::default();
    opts.limits.fuel_per_call = 50;
    let e = load(&mut d, &module("rr"), "starved", &Placement::Top, &opts).unwrap_err();
    assert!(e.to_string().contains("ran past its time budget (50 fuel units in one call)"), "{e}");
    // A memory limit below the module's initial memory refuses it at instantiation.
    let mut opts = LoadOptions::default();
    opts.limits.memory_bytes = 64 << 10;
    let e = load(&mut d, &module("rr"), "tiny", &Placement::Top, &opts).unwrap_err();
    assert!(e.to_string().contains("memory"), "{e}");
    assert_eq!(names(&d), ["mid", "ts"]);
}

fn wat(text: &str) -> Vec<u8> {
    wat::parse_str(text).unwrap()
}

#[test]
fn modules_that_break_the_abi_are_refused_with_the_reason() {
    let mut d = dispatcher();
    let o = LoadOptions::default();
    let e = load_bytes(&mut d, b"not wasm", "junk", "j", &Placement::Top, &o).unwrap_err();
    assert!(matches!(e, LoadError::Invalid(_)), "{e}");
    let e = load_bytes(&mut d, &wat("(module (memory (export \"memory\") 1))"), "empty", "e", &Placement::Top, &o).unwrap_err();
    assert!(e.to_string().contains("export 'vassal_abi'"), "{e}");
    let v2 = wat(r#"(module (memory (export "memory") 1) (func (export "vassal_abi") (result i32) i32.const 2))"#);
    let e = load_bytes(&mut d, &v2, "v2", "v", &Placement::Top, &o).unwrap_err();
    assert!(e.to_string().contains("ABI version 2"), "{e}");
    // Imports outside the ABI cannot be satisfied: no file system, no clock, nothing else.
    let wasi = wat(r#"(module (import "wasi_snapshot_preview1" "fd_write" (func (param i32 i32 i32 i32) (result i32))))"#);
    let e = load_bytes(&mut d, &wasi, "wasi", "w", &Placement::Top, &o).unwrap_err();
    assert!(e.to_string().contains("fd_write"), "{e}");
    assert_eq!(names(&d), ["mid", "ts"]);
}

#[test]
fn a_module_reports_its_parameters_errors() {
    let mut p = BTreeMap::new();
    p.insert("fail".into(), ParamValue::Str("sometimes".into()));
    let e = WasmPolicy::from_file(&module("broken"), 1, &p, Default::default()).err().unwrap();
    assert_eq!(e.to_string(), "the module refused its parameters: parameter 'fail': unknown failure 'sometimes'");
    let mut p = BTreeMap::new();
    p.insert("bad=key".into(), ParamValue::Int(1));
    let e = WasmPolicy::from_file(&module("rr"), 1, &p, Default::default()).err().unwrap();
    assert!(matches!(e, LoadError::BadParam(_)), "{e}");
}
