//! Native modules (issue 8 item 4): the SDK's examples built for the host target as shared
//! libraries, loaded with the same `load` as WebAssembly ones, told apart by their first
//! bytes, and making exactly the built-in policy's decisions.

use std::collections::BTreeMap;
use std::path::PathBuf;

use vassal_core::driver::{self, Hooks};
use vassal_core::*;
use vassal_module::{load, Backend, LoadOptions, Placement};

fn native(name: &str) -> PathBuf {
    vassal_module::native_example_path(name).unwrap()
}

fn wasm(name: &str) -> PathBuf {
    vassal_module::example_path(name).unwrap()
}

/// One CPU; the default an idle rr; `top` (built-in `bvt` when None, else loaded from the
/// file) above it with six tasks of weights 1–3. Then 3,000 steps of 1 ms: charge the
/// running task, and now and then block it or wake a blocked one (some warped), and ask
/// for the next decision. Returns every decision (task, slice, by whom) and each task's
/// virtual-time view as the dispatcher logs it.
fn bvt_decisions(top: Option<&PathBuf>) -> Vec<(Option<TaskId>, Option<Ns>, Option<u64>)> {
    let rr = vassal_policies::build("rr", &BTreeMap::new()).unwrap();
    let mut d = Dispatcher::new(1, "ts", rr, HierarchyConfig::default());
    let id = match top {
        None => {
            let bvt = vassal_policies::build("bvt", &BTreeMap::new()).unwrap();
            d.register("bvt", bvt, Usage::Reserved { cpu_ppm: 500_000 }, Position::Top).unwrap()
        }
        Some(path) => load(&mut d, path, "bvt", &Placement::Top, &LoadOptions::default()).unwrap(),
    };
    let mut tasks = Vec::new();
    for i in 0..6 {
        let mut p = TaskParams::new();
        p.insert("weight".into(), 1 + (i % 3) as i64);
        let t = d.add_task(0, p, CpuSet::first(1), None, true);
        assert_eq!(d.message(0, id, Sender::ROOT, t, &Request::Join), Reply::Ok);
        tasks.push(t);
    }
    let cpu = CpuId(0);
    let mut m = OneCpu { drv: Driver::new(d), running: None, last: None };
    let mut out = Vec::new();
    let mut now = 0;
    let mut rng: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    driver::decide(&mut m, now, cpu, Preempt::Resched);
    driver::settle(&mut m, now);
    for _ in 0..3_000 {
        now += MS;
        let r = next();
        if let Some((task, _)) = m.running {
            Hooks::account(&mut m, now, cpu);
            if r % 7 == 0 {
                m.drv.disp.block(now, task, Block { voluntary: true });
                m.running = None;
            }
        }
        if r % 5 == 0 {
            let t = tasks[(r >> 8) as usize % tasks.len()];
            if m.drv.disp.state(t) == TaskState::Blocked {
                m.drv.disp.wake(now, t, Wake { voluntary: true, warp: r % 3 == 0, interrupt: None, cpu: None });
            }
        }
        driver::decide(&mut m, now, cpu, Preempt::SliceExpired);
        driver::settle(&mut m, now);
        let cur = m.last;
        out.push((cur.as_ref().map(|x| x.task), cur.as_ref().and_then(|x| x.slice), cur.as_ref().map(|x| u64::from(x.by.0))));
    }
    let d = &mut m.drv.disp;
    d.check_invariants().unwrap();
    assert!(d.eject_failed(now).is_empty(), "no fault, no invalid decision");
    out
}

/// The mechanism of [`bvt_decisions`]: one CPU whose running task is charged the time
/// since it was dispatched (or last charged).
struct OneCpu {
    drv: Driver,
    running: Option<(TaskId, Ns)>,
    /// The last decision.
    last: Option<Dispatched>,
}

impl Hooks for OneCpu {
    fn driver(&mut self) -> &mut Driver {
        &mut self.drv
    }
    fn account(&mut self, now: Ns, cpu: CpuId) {
        if let Some((t, since)) = self.running.filter(|&(_, since)| now > since) {
            self.drv.disp.account(now, t, cpu, now - since);
            self.running = Some((t, now));
        }
    }
    fn dispatched(&mut self, now: Ns, _cpu: CpuId, _why: Preempt, _before: Option<TaskId>, d: Option<Dispatched>) {
        self.running = d.map(|d| (d.task, now));
        self.last = d;
    }
}

#[test]
fn native_bvt_module_makes_the_builtin_bvts_decisions() {
    let builtin = bvt_decisions(None);
    let by_bvt = builtin.iter().filter(|x| x.2 == Some(1)).count();
    assert!(by_bvt > 2_000, "the bvt scheduler made most decisions ({by_bvt} of 3000)");
    assert_eq!(bvt_decisions(Some(&native("bvt"))), builtin, "native module vs built-in");
    assert_eq!(bvt_decisions(Some(&wasm("bvt"))), builtin, "wasm module vs built-in");
}

#[test]
fn the_backend_is_told_from_the_file_and_only_wasm_is_sandboxed() {
    let (w, n) = (Backend::of_file(&wasm("rr")).unwrap(), Backend::of_file(&native("rr")).unwrap());
    assert_eq!((w, w.sandboxed()), (Backend::Wasm, true));
    assert_eq!((n, n.sandboxed()), (Backend::Native, false));
    let o = vassal_module::open_file(&native("rr"), 1, &BTreeMap::new(), Default::default()).unwrap();
    assert_eq!((o.backend, o.usage), (Backend::Native, Usage::Reserved { cpu_ppm: 500_000 }));
    // Text that is neither goes to the WebAssembly host, which refuses it.
    assert_eq!(Backend::of(b"not a module"), Backend::Wasm);
}

#[test]
fn two_loads_of_one_native_file_are_independent_instances() {
    // The SDK keeps a module's state in the library's statics: were both loads one
    // instance, the second `vassal_init` would replace the first's policy and the first
    // scheduler would pick the second's tasks (an invalid decision that ejects it).
    let rr = vassal_policies::build("rr", &BTreeMap::new()).unwrap();
    let mut d = Dispatcher::new(1, "ts", rr, HierarchyConfig::default());
    let mut opts = LoadOptions::default();
    opts.params.insert("reserved".into(), ParamValue::Float(0.3));
    let a = load(&mut d, &native("rr"), "a", &Placement::Top, &opts).unwrap();
    let b = load(&mut d, &native("rr"), "b", &Placement::Below("a".into()), &opts).unwrap();
    let tb = d.add_task(0, TaskParams::new(), CpuSet::NONE, None, true);
    assert_eq!(d.message(0, b, Sender::ROOT, tb, &Request::Join), Reply::Ok);
    let got = d.schedule(0, CpuId(0), Preempt::Resched).unwrap();
    assert_eq!((got.task, got.by), (tb, b), "a has no task and no opinion; b runs its own");
    let ta = d.add_task(0, TaskParams::new(), CpuSet::NONE, None, true);
    assert_eq!(d.message(0, a, Sender::ROOT, ta, &Request::Join), Reply::Ok);
    d.account(MS, tb, CpuId(0), MS);
    let got = d.schedule(MS, CpuId(0), Preempt::SliceExpired).unwrap();
    assert_eq!((got.task, got.by), (ta, a));
    assert!(d.eject_failed(MS).is_empty());
    assert_eq!(vassal_module::unload(&mut d, 2 * MS, "a").unwrap(), vec![(ta, b)]);
    d.check_invariants().unwrap();
}

#[test]
fn a_native_module_refusing_its_parameters_is_refused_with_the_reason() {
    let mut p = BTreeMap::new();
    p.insert("fail".into(), ParamValue::Str("sometimes".into()));
    let e = vassal_module::open_file(&native("broken"), 1, &p, Default::default()).err().unwrap();
    assert_eq!(e.to_string(), "the module refused its parameters: parameter 'fail': unknown failure 'sometimes'");
}

#[test]
fn a_native_module_making_an_invalid_decision_is_ejected() {
    // The dispatcher's own checks hold for native modules too (fuel and memory do not).
    let rr = vassal_policies::build("rr", &BTreeMap::new()).unwrap();
    let mut d = Dispatcher::new(1, "ts", rr, HierarchyConfig::default());
    let other = d.add_task(0, TaskParams::new(), CpuSet::NONE, None, true);
    let mut opts = LoadOptions::default();
    opts.params.insert("fail".into(), ParamValue::Str("not_yours".into()));
    opts.params.insert("after".into(), ParamValue::Int(0));
    let id = load(&mut d, &native("broken"), "bad", &Placement::Top, &opts).unwrap();
    let mine = d.add_task(0, TaskParams::new(), CpuSet::NONE, None, true);
    assert_eq!(d.message(0, id, Sender::ROOT, mine, &Request::Join), Reply::Ok);
    let got = d.schedule(0, CpuId(0), Preempt::Resched).unwrap();
    assert_ne!(got.by, id);
    let ej = d.eject_failed(0);
    assert_eq!(ej.len(), 1, "{ej:?}");
    assert!(ej[0].reason.contains("task belongs to another scheduler"), "{}", ej[0].reason);
    let _ = other;
}

#[test]
fn a_panicking_native_module_is_ejected_and_the_host_goes_on() {
    // The SDK catches the panic at the module's boundary (the examples are built with
    // `panic = "unwind"`): the module turns inert and reports it as its fault, and the
    // dispatcher ejects it as it ejects a trapping WebAssembly module. Before, the panic
    // aborted the host (the agent with it).
    let bytes = std::fs::read(native("rr")).unwrap();
    assert!(vassal_module::NativePolicy::from_bytes(&bytes, "rr", 1, &BTreeMap::new()).unwrap().catches_panics());
    let rr = vassal_policies::build("rr", &BTreeMap::new()).unwrap();
    let mut d = Dispatcher::new(1, "ts", rr, HierarchyConfig::default());
    let mut opts = LoadOptions::default();
    opts.params.insert("fail".into(), ParamValue::Str("trap".into()));
    opts.params.insert("after".into(), ParamValue::Int(0));
    let id = load(&mut d, &native("broken"), "bad", &Placement::Top, &opts).unwrap();
    let t = d.add_task(0, TaskParams::new(), CpuSet::NONE, None, true);
    assert_eq!(d.message(0, id, Sender::ROOT, t, &Request::Join), Reply::Ok);
    // Its first pick panics: no opinion, so the default serves the task as a guest.
    let got = d.schedule(0, CpuId(0), Preempt::Resched).unwrap();
    assert_ne!(got.by, id);
    let ej = d.eject_failed(0);
    assert_eq!(ej.len(), 1, "{ej:?}");
    let why = &ej[0].reason;
    assert!(why.contains("panicked at") && why.contains("src/lib.rs") && why.contains("deliberate failure"), "{why}");
    assert_eq!(d.lookup("bad"), None);
    d.check_invariants().unwrap();
    // The task is the default's now, and runs.
    d.account(MS, t, CpuId(0), MS);
    let got = d.schedule(MS, CpuId(0), Preempt::SliceExpired).unwrap();
    assert_eq!((got.task, got.by.0), (t, 0));
}
