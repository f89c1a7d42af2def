//! The registry: kinds, building by name, and refusals that name what is wrong.

mod common;

use std::collections::BTreeMap;

use common::*;
use vassal_policies::{build as build_policy, kinds, ParamValue};

fn map(kv: &[(&str, ParamValue)]) -> BTreeMap<String, ParamValue> {
    kv.iter().map(|(k, v)| (k.to_string(), v.clone())).collect()
}

fn err(kind: &str, kv: &[(&str, ParamValue)]) -> String {
    match build_policy(kind, &map(kv)) {
        Ok(p) => panic!("{kind} {kv:?} built a {}", p.kind()),
        Err(e) => e,
    }
}

#[test]
fn registry_lists_the_baselines() {
    let names: Vec<&str> = kinds().iter().map(|(k, _)| *k).collect();
    for k in ["rr", "fps", "wrr", "bvt"] {
        assert!(names.contains(&k), "{k} missing from {names:?}");
        let p = build_policy(k, &BTreeMap::new()).unwrap();
        assert_eq!(p.kind(), k);
    }
    assert!(kinds().iter().all(|(_, d)| !d.is_empty()));
}

#[test]
fn registry_refuses_unknown_kind() {
    let e = err("lottery", &[]);
    assert!(e.contains("lottery") && e.contains("rr") && e.contains("fps") && e.contains("wrr"), "{e}");
}

#[test]
fn registry_refuses_unknown_params() {
    for kind in ["rr", "fps", "wrr"] {
        let e = err(kind, &[("quantum", dur("5ms")), ("bogus", ParamValue::Int(1))]);
        assert!(e.contains("bogus") && e.contains(kind), "{e}");
    }
    // rm belongs to fps only.
    let e = err("rr", &[("rm", ParamValue::Bool(true))]);
    assert!(e.contains("rm"), "{e}");
}

#[test]
fn registry_refuses_wrong_types_and_values() {
    let e = err("rr", &[("quantum", ParamValue::Int(10))]);
    assert!(e.contains("quantum") && e.contains("rr"), "{e}");
    let e = err("wrr", &[("quantum", dur("10"))]);
    assert!(e.contains("quantum"), "{e}");
    let e = err("fps", &[("rm", dur("yes"))]);
    assert!(e.contains("rm") && e.contains("fps"), "{e}");
    let e = err("fps", &[("quantum", ParamValue::Float(1.5))]);
    assert!(e.contains("quantum"), "{e}");
    for kind in ["rr", "fps", "wrr"] {
        let e = err(kind, &[("quantum", dur("0ms"))]);
        assert!(e.contains("quantum") && e.contains("zero"), "{e}");
    }
}

#[test]
fn registry_parameters_take_effect() {
    // rr: 3ms quantum.
    let mut s = Sim::new(1, build("rr", &[("quantum", dur("3ms"))]));
    s.add(&[], None, true);
    s.add(&[], None, true);
    s.run_until(ms(6));
    assert_eq!(s.timeline(), vec![(0, 0, Some(3)), (3, 1, Some(3)), (6, 0, Some(3))]);
    // rr: the default is 10ms.
    let mut s = Sim::new(1, build("rr", &[]));
    s.add(&[], None, true);
    assert_eq!(s.timeline(), vec![(0, 0, Some(10))]);
    // fps: no quantum by default; rm reads periods.
    let mut s = Sim::new(1, build("fps", &[]));
    s.add(&[], None, true);
    assert_eq!(s.timeline(), vec![(0, 0, None)]);
    let mut s = Sim::new(1, build("fps", &[("rm", ParamValue::Bool(true)), ("quantum", dur("2ms"))]));
    s.add(&[("period", 50)], None, true);
    s.add(&[("period", 40)], None, true);
    assert_eq!(s.timeline(), vec![(0, 0, Some(2)), (0, 1, Some(2))]);
    // wrr: weight x quantum.
    let mut s = Sim::new(1, build("wrr", &[("quantum", dur("4ms"))]));
    s.add(&[("weight", 5)], None, true);
    assert_eq!(s.timeline(), vec![(0, 0, Some(20))]);
}
