//! Parameter sweeps (docs/sweep.md): the example spec over its grid, the same table
//! whatever the number of threads, the table's shape, what the runs show, and errors.

use std::path::Path;

use vassal_sim::sweep_grid::{Spec, Sweep};

fn example() -> Sweep {
    Sweep::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/examples/sweep/bvt-warp.toml")).unwrap()
}

#[test]
fn the_example_sweeps_its_grid_deterministically() {
    let s = example();
    let total = s.grid().len();
    assert_eq!(total, 4 * 5);
    let calls = std::sync::atomic::AtomicUsize::new(0);
    let one = s.run(1, &|_, t| {
        assert_eq!(t, total);
        calls.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    })
    .unwrap();
    assert_eq!(calls.into_inner(), total, "progress once per run");
    let four = s.run(4, &|_, _| {}).unwrap();
    assert_eq!(one, four, "grid order and values do not depend on threads");
    // grid order: the first parameter varies slowest
    let firsts: Vec<&str> = one.iter().map(|p| p.params[0].as_str()).collect();
    assert_eq!(&firsts[..6], ["1", "1", "1", "1", "1", "2"]);

    let csv = s.csv(&one);
    assert_eq!(csv.lines().count(), 1 + total);
    assert!(csv.starts_with("task.hog.count,task.video.behaviour.exec,seed,task.video.response_max_ms,"));
    let json = s.json(&one);
    assert_eq!(json["rows"].as_array().unwrap().len(), total);
    assert_eq!(json["rows"][0]["params"]["task.hog.count"], "1");
    let svg = s.svg(&one);
    assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
    assert_eq!(svg.matches("<svg").count(), svg.matches("</svg>").count());
    for k in [1, 2, 4, 8] {
        assert!(svg.contains(&format!("task.hog.count = {k}")), "a line per contention level");
    }
    assert_eq!(svg.matches("<circle").count(), total, "a dot per grid point");
}

/// What the example shows (paper 001 §2.2): a frame that fits the warp time limit
/// (6 ms) runs warped at once, so its response is its cost plus one 5 us switch however
/// many hogs compete; a frame that overruns L runs unwarped after it, and waits longer
/// the more hogs there are.
#[test]
fn warped_frames_within_the_limit_ignore_contention() {
    let s = example();
    let points = s.run(2, &|_, _| {}).unwrap();
    let resp = |hogs: &str, exec: &str| points.iter().find(|p| p.params == [hogs, exec]).unwrap().metrics[0];
    for hogs in ["1", "2", "4", "8"] {
        assert!((resp(hogs, "4ms") - 4.005).abs() < 1e-9);
        assert!((resp(hogs, "5ms") - 5.005).abs() < 1e-9);
        assert!((resp(hogs, "5.9ms") - 5.905).abs() < 1e-9);
        assert!(resp(hogs, "7ms") > 7.005 + 10.0, "overrunning L waits behind the hogs");
    }
    let over: Vec<f64> = ["1", "2", "4", "8"].iter().map(|h| resp(h, "7ms")).collect();
    assert!(over.windows(2).all(|w| w[1] > w[0]), "{over:?}");
}

fn sweep(spec: &str, base: &str) -> Result<Sweep, String> {
    let spec: Spec = toml::from_str(spec).map_err(|e| e.to_string())?;
    Sweep::new("t".into(), spec, base, "base.toml")
}

const BASE: &str = r#"
name = "b"
until = "100ms"
[machine]
cpus = 1
[[task]]
name = "hog"
count = 2
behaviour = { kind = "cpu" }
"#;

#[test]
fn errors_name_the_parameter_or_the_grid_point() {
    let e = sweep("base = 'x'\nmetrics = ['tasks.share.spread']\n[[param]]\npath = 'task.nope.count'\nvalues = [1]", BASE).err().unwrap();
    assert!(e.contains("param path 'task.nope.count': no element of 'task' is named 'nope'"), "{e}");
    let e = sweep("base = 'x'\nmetrics = ['tasks.share.spread']\n[[param]]\npath = 'machin.cpus'\nvalues = [1]", BASE).err().unwrap();
    assert!(e.contains("the scenario has no key 'machin'"), "{e}");
    let e = sweep("base = 'x'\nmetrics = []\n[[param]]\npath = 'machine.cpus'\nvalues = [1]", BASE).err().unwrap();
    assert!(e.contains("needs metrics"), "{e}");
    let e = sweep("base = 'x'\nmetrics = ['tasks.share.spread']\nbogus = 1\n[[param]]\npath = 'machine.cpus'\nvalues = [1]", BASE).err().unwrap();
    assert!(e.contains("bogus"), "{e}");
    // A bad value is found when its point runs, and named with it.
    let s = sweep("base = 'x'\nmetrics = ['tasks.share.spread']\n[[param]]\npath = 'task.hog.count'\nvalues = [1, 0]", BASE).unwrap();
    let e = s.run(2, &|_, _| {}).unwrap_err();
    assert!(e.contains("task.hog.count = 0"), "{e}");
    let s = sweep("base = 'x'\nmetrics = ['task.hog.0.nonsense']\n[[param]]\npath = 'machine.cpus'\nvalues = [1]", BASE).unwrap();
    let e = s.run(1, &|_, _| {}).unwrap_err();
    assert!(e.contains("machine.cpus = 1") && e.contains("nonsense"), "{e}");
}

/// Seeds multiply the grid, and the plot averages over them.
#[test]
fn seeds_multiply_the_grid() {
    let base = BASE.replace("behaviour = { kind = \"cpu\" }", "behaviour = { kind = \"io\", run = { exp = \"2ms\" }, sleep = { exp = \"3ms\" } }");
    let s = sweep("base = 'x'\nseeds = [1, 2, 3]\nmetrics = ['tasks.cpu_frac.sum']\n[[param]]\npath = 'machine.cpus'\nvalues = [1, 2]", &base).unwrap();
    let p = s.run(3, &|_, _| {}).unwrap();
    assert_eq!(p.len(), 6);
    assert_eq!(p.iter().map(|x| x.seed).collect::<Vec<_>>(), [1, 2, 3, 1, 2, 3]);
    assert_ne!(p[0].metrics, p[1].metrics, "seeds change random draws");
    assert!(s.svg(&p).contains("mean of 3 seeds"));
}
