//! Sweeps (docs/sweep.md): variants from `[[axis]]` and `[[run]]` settings, rows over
//! them (arithmetic, `crossing`), seeds, a base file, the same results whatever the
//! number of threads, the table, CSV and JSON, and the errors.

use std::path::{Path, PathBuf};

use vassal_lab::repro::run_experiment;
use vassal_lab::sweep::Sweep;

fn write(name: &str, text: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("vassal-sweep-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

const BASE: &str = "until = \"1s\"\n[machine]\ncpus = 1\n[default]\npolicy = \"rr\"\n[[task]]\nname = \"hog\"\ncount = 1\nbehaviour = { kind = \"cpu\" }\n";

const EXPECT: &str = "[[expect]]\nid = \"t\"\nmetric = \"group.hog.cpu_frac.max[1]\"\npaper = 0\ntolerance = 1\nwhy = \"x\"\n";

#[test]
fn rows_compare_variants() {
    // 1 hog vs 4 hogs on one CPU: each of the 4 gets a quarter of what the 1 gets.
    let text = format!(
        "{BASE}[[axis]]\nname = \"n\"\nvalues = [{{ name = \"1\" }}, {{ name = \"4\", set = {{ \"task.0.count\" = 4 }} }}]\n\
         [[expect]]\nid = \"t.ratio\"\nmetric = \"group.hog.cpu_frac.max[n/4.x]\"\npaper = 0\ntolerance = 0\nwhy = \"x\"\n"
    );
    // a variant that does not exist is an error naming the row and the variants
    let e = run_experiment(&write("bad-variant.toml", &text)).unwrap_err();
    assert!(e.contains("bad-variant.toml: expect 't.ratio'") && e.contains("no variant 'n/4.x' (variants: 1, 4)"), "{e}");
    let text = text.replace("group.hog.cpu_frac.max[n/4.x]", "group.hog.cpu_frac.max[4] / group.hog.cpu_frac.max[1]");
    let rows = run_experiment(&write("ok.toml", &text)).unwrap();
    assert_eq!(rows.len(), 1);
    assert!((rows[0].ours - 0.25).abs() < 1e-3, "{}", rows[0].ours);
}

#[test]
fn a_metric_without_a_variant_is_an_error() {
    let text = format!("{BASE}[[axis]]\nname = \"n\"\nvalues = [{{ name = \"1\" }}]\n{}", EXPECT.replace("[1]", ""));
    let e = run_experiment(&write("no-variant.toml", &text)).unwrap_err();
    assert!(e.contains("needs a variant: group.hog.cpu_frac.max[VARIANT]"), "{e}");
}

const TWO: &str = r#"until = "1s"
machine = { cpus = 1, switch_cost = "0ns" }
default = { policy = "fps" }
[[task]]
name = "p"
params = { priority = 2 }
behaviour = { kind = "periodic", period = "10ms", exec = "1ms" }
[[task]]
name = "bg"
params = { priority = 1 }
behaviour = { kind = "cpu" }
"#;

#[test]
fn rows_take_differences_ratios_and_crossings() {
    // bg's share is 1 − exec/10ms: 0.9, 0.8, 0.7, 0.6 along x = 1..4; the reference run
    // (exec 2.5 ms) gives 0.75, crossed at x = 2.5 exactly. The values come in x order
    // only after sorting.
    let text = format!(
        r#"{TWO}
[[axis]]
name = "load"
values = [
  {{ name = "b", x = 2, set = {{ "task.p*.behaviour.exec" = "2ms" }} }},
  {{ name = "a", x = 1, set = {{ "task.p*.behaviour.exec" = "1ms" }} }},
  {{ name = "c", x = 3, set = {{ "task.p*.behaviour.exec" = "3ms" }} }},
  {{ name = "d", x = 4, set = {{ "task.p*.behaviour.exec" = "4ms" }} }},
]
[[run]]
name = "ref"
set = {{ "task.p.behaviour.exec" = "2.5ms" }}

[[expect]]
id = "t.cross"
metric = "crossing(load, task.bg.cpu_frac[*], task.bg.cpu_frac[ref])"
paper = 2.5
tolerance = 1e-9
why = "interpolated exactly"

[[expect]]
id = "t.diff"
metric = "task.bg.cpu_frac[a] - task.bg.cpu_frac[d]"
paper = 0.3
tolerance = 1e-9
why = "0.9 - 0.6"

[[expect]]
id = "t.ratio"
metric = "task.bg.cpu_frac[d] / task.bg.cpu_frac[b]"
paper = 0.75
tolerance = 1e-9
why = "0.6 / 0.8"

[[expect]]
id = "t.cross2"
metric = "crossing(load, 2 * task.bg.cpu_frac[*] - 1, 0.5)"
paper = 2.5
tolerance = 1e-9
why = "2y - 1 falls below 0.5 where y falls below 0.75"

[[expect]]
id = "t.never"
metric = "crossing(load, task.p.jobs_missed[*], task.p.jobs_missed[ref])"
paper = 0
tolerance = 0
why = "never below: NaN, which fails"
"#
    );
    let rows = run_experiment(&write("cross.toml", &text)).unwrap();
    let v: Vec<(String, f64, bool)> = rows.iter().map(|r| (r.id.clone(), r.ours, r.pass)).collect();
    assert!(v[0].2 && v[1].2 && v[2].2 && v[3].2, "{v:?}");
    assert!(v[4].1.is_nan() && !v[4].2, "{v:?}");
}

#[test]
fn bad_sweeps_are_refused_naming_the_file_and_what() {
    let cases = [
        ("[[axis]]\nname = \"l\"\nvalues = [{ name = \"a\", set = { \"task.nobody.params.priority\" = 1 } }]\n", "axis 'l' value 'a': set \"task.nobody.params.priority\": `task` has no element named nobody"),
        ("[[axis]]\nname = \"l\"\nvalues = [{ name = \"a\", set = { \"task.3.count\" = 2 } }]\n", "set \"task.3.count\": `task` has no element named 3"),
        ("[[axis]]\nname = \"l\"\nvalues = [{ name = \"a\", set = { \"until.x\" = 1 } }]\n", "set \"until.x\": `until` is string, neither a table nor an array"),
        ("[[axis]]\nname = \"l\"\nvalues = [{ name = \"a\", set = { \"machin.cpus\" = 1 } }]\n", "set \"machin.cpus\": no `machin`"),
        ("[[run]]\nname = \"r\"\nset = { \"task.zz*.count\" = 1 }\n", "run 'r': set \"task.zz*.count\": `task` has no element named zz*"),
        ("[[axis]]\nname = \"l\"\nvalues = [{ name = \"a\", x = \"one\" }]\n", "x must be a finite number"),
        ("[[axis]]\nname = \"l\"\nvalues = [{ name = \"a\", bogus = 1 }]\n", "unknown key `bogus`"),
        ("[[axis]]\nname = \"l\"\nvalues = [{ name = \"a\" }, { name = \"a\" }]\n", "duplicate value 'a'"),
        ("[[axis]]\nname = \"l\"\nvalues = [{ name = \"a/b\" }]\n", "without '/'"),
        ("[[axis]]\nname = \"l\"\nvalues = []\n", "values is empty"),
        ("[[axis]]\nname = \"l\"\nvalues = [{ name = \"a\" }]\n[[run]]\nname = \"a\"\n", "[[run]] 'a' has the name of another variant"),
        ("seeds = [-1]\n[[axis]]\nname = \"l\"\nvalues = [{ name = \"a\" }]\n", "seeds must be integers >= 0"),
        ("[[axis]]\nname = \"l\"\nvalues = [{ name = \"a\" }]\n[[axis]]\npath = \"until\"\nvalues = [\"1s\", \"2s\"]\n[[axis]]\npath = \"seed\"\nvalues = [1, 2, 3]\n[[axis]]\npath = \"machine.cpus\"\nvalues = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]\n[[axis]]\npath = \"machine.hz\"\nvalues = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]\n[[axis]]\npath = \"machine.switch_cost\"\nvalues = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]\n[[axis]]\npath = \"x.y\"\nvalues = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17]\n", "more than 100000 runs"),
        ("[plot]\nx = 3\n[[axis]]\nname = \"l\"\nvalues = [{ name = \"a\" }]\n", "plot.x must be a name, found 3"),
        ("[plot]\nx = \"m\"\n[[axis]]\nname = \"l\"\nvalues = [{ name = \"a\" }]\n", "plot.x 'm' is not an axis"),
        ("metrics = [\"1 +\"]\n[[axis]]\nname = \"l\"\nvalues = [{ name = \"a\" }]\n", "metrics '1 +': expression '1 +': unexpected end"),
        ("[[axis]]\nname = \"l\"\nvalues = [{ name = \"a\" }]\n[[expect]]\nid = \"c\"\nmetric = \"crossing(l, task.bg.cpu_frac[*], 1)\"\npaper = 0\ntolerance = 1\nwhy = \"x\"\n", "expect 'c': crossing: value 'a' of axis 'l' has no x"),
        // A setting the scenario parser refuses: reported for that variant, in its text.
        ("[[axis]]\nname = \"l\"\nvalues = [{ name = \"a\", set = { \"task.p.behaviour.bogus\" = 1 } }]\n", "[variant a]"),
        ("[[axis]]\nname = \"l\"\nvalues = [{ name = \"0\", set = { \"task.bg.count\" = 0 } }]\n", "count must be between 1 and 10000, found 0"),
    ];
    for (i, (sweep, want)) in cases.iter().enumerate() {
        // top-level keys first, then the base's tables
        let (top, rest) = sweep.split_at(sweep.find("[[").unwrap_or(0).min(sweep.find("[plot]").unwrap_or(usize::MAX)));
        let has_expect = rest.contains("[[expect]]");
        let text = format!(
            "{top}{TWO}{rest}{}",
            if has_expect { "" } else { "[[expect]]\nid = \"x\"\nmetric = \"1\"\npaper = 0\ntolerance = 1\nwhy = \"x\"\n" }
        );
        let p = write(&format!("bad{i}.toml"), &text);
        let e = run_experiment(&p).unwrap_err();
        assert!(e.contains(want) && e.contains(&format!("bad{i}.toml")), "{want}: {e}");
    }
}

#[test]
fn seeds_average_the_runs_and_the_table_shows_the_means() {
    let text = format!(
        "seeds = [1, 2]\nmetrics = [\"group.hog.cpu_frac.max\", {{ name = \"half\", metric = \"group.hog.cpu_frac.max / 2\" }}]\n{BASE}\
         [[axis]]\nname = \"m\"\nvalues = [{{ name = \"a\" }}, {{ name = \"b\", set = {{ \"task.0.count\" = 2 }} }}]\n"
    );
    let sweep = Sweep::load(&write("seeds-ok.toml", &text)).unwrap();
    let runs = sweep.run(2, &|_, _| {}).unwrap();
    assert_eq!(runs[0].len(), 2);
    let t = sweep.table(&runs).unwrap();
    let cells: Vec<Vec<&str>> = t.lines().map(|l| l.split_whitespace().collect()).collect();
    assert_eq!(
        cells,
        [
            vec!["group.hog.cpu_frac.max", "(mean", "of", "2", "seeds)"],
            vec!["m", "a", "b"],
            vec!["1", "0.5"],
            vec![],
            vec!["half", "(group.hog.cpu_frac.max", "/", "2,", "mean", "of", "2", "seeds)"],
            vec!["m", "a", "b"],
            vec!["0.5", "0.25"],
            vec![],
        ],
        "{t}"
    );
    assert!(sweep.variant_text("b").unwrap().contains("count = 2"));
    let csv = sweep.csv(&runs).unwrap();
    assert_eq!(csv.lines().next(), Some("variant,m,seed,group.hog.cpu_frac.max,half"));
    assert_eq!(csv.lines().count(), 1 + 2 * 2);
    assert!(csv.contains("\nb,b,2,0.5"), "{csv}");
}

/// A random workload, so that seeds and variants differ: the runs, the CSV and the JSON
/// come out the same on one thread and on four, in variant order then seed order, and
/// progress is reported once per run.
#[test]
fn the_output_does_not_depend_on_the_threads() {
    let text = format!(
        "seeds = [1, 2, 3]\nmetrics = [\"tasks.cpu_frac.sum\", \"totals.switches\"]\n{}[[axis]]\nname = \"cpus\"\nvalues = [{{ name = \"one\" }}, {{ name = \"two\", set = {{ \"machine.cpus\" = 2 }} }}]\n\
         [[axis]]\npath = \"task.hog.count\"\nvalues = [1, 3]\n[[run]]\nname = \"solo\"\n",
        BASE.replace("behaviour = { kind = \"cpu\" }", "behaviour = { kind = \"io\", run = { exp = \"2ms\" }, sleep = { exp = \"3ms\" } }")
    );
    let sweep = Sweep::load(&write("threads.toml", &text)).unwrap();
    let names: Vec<&str> = sweep.variants.iter().map(|v| v.name.as_str()).collect();
    assert_eq!(names, ["one/1", "one/3", "two/1", "two/3", "solo"]);
    let calls = std::sync::atomic::AtomicUsize::new(0);
    let one = sweep
        .run(1, &|_, total| {
            assert_eq!(total, 12);
            calls.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        })
        .unwrap();
    // "solo" (no settings) is the scenario of "one/1": its 3 runs are that variant's.
    assert_eq!(calls.into_inner(), 12, "progress once per run made");
    assert_eq!(one[4].iter().map(|r| r.to_json()).collect::<Vec<_>>(), one[0].iter().map(|r| r.to_json()).collect::<Vec<_>>());
    let four = sweep.run(4, &|_, _| {}).unwrap();
    let json = |r: &vassal_lab::sweep::Runs| r.iter().flatten().map(|x| x.to_json()).collect::<Vec<_>>();
    assert_eq!(json(&one), json(&four));
    assert_ne!(one[0][0].to_json(), one[0][1].to_json(), "seeds change the random draws");
    assert_eq!(sweep.csv(&one).unwrap(), sweep.csv(&four).unwrap());
    let j = sweep.json(&four).unwrap();
    let rows = j["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 15);
    assert_eq!((rows[4]["variant"].as_str(), rows[4]["seed"].as_u64()), (Some("one/3"), Some(2)));
    assert_eq!(rows[4]["values"]["task.hog.count"], "3");
    assert_eq!(rows[14]["values"].as_object().map(|o| o.len()), Some(0), "a [[run]] has no axis values");
    // the plot: along the first axis (cpus: one, two, no x, so spaced evenly), a line
    // per hog count, and the run as a level line
    let svg = sweep.svg(&four).unwrap().unwrap();
    assert!(svg.contains("task.hog.count = 1") && svg.contains("task.hog.count = 3") && svg.contains("solo"), "{svg}");
    assert!(svg.contains("mean of 3 seeds"));
    assert_eq!(svg.matches("<circle").count(), 4, "a dot per grid variant");
}

#[test]
fn a_base_file_holds_the_scenario() {
    let base = write(
        "base-scenario.toml",
        &format!("{BASE}[[expect]]\nid = \"ignored\"\nmetric = \"x\"\npaper = 0\ntolerance = 0\nwhy = \"x\"\n"),
    );
    let text =
        "base = \"base-scenario.toml\"\nmetrics = [\"group.hog.cpu_frac.max\"]\n[[axis]]\npath = \"task.hog.count\"\nvalues = [1, 2, 4]\n";
    let sweep = Sweep::load(&write("with-base.toml", text)).unwrap();
    assert_eq!(Path::new(&sweep.base_file), base.as_path());
    assert_eq!(sweep.axes[0].values.iter().map(|v| v.x).collect::<Vec<_>>(), [Some(1.0), Some(2.0), Some(4.0)]);
    let runs = sweep.run(2, &|_, _| {}).unwrap();
    let shares: Vec<f64> = (0..3).map(|v| sweep.variant_value(&sweep.metrics[0], &runs, v).unwrap()).collect();
    assert!((shares[0] - 1.0).abs() < 1e-3 && (shares[2] - 0.25).abs() < 1e-3, "{shares:?}");
    // with a base, other keys are mistakes; a missing base file is named
    let e = Sweep::load(&write("base-extra.toml", &format!("until = \"2s\"\n{text}"))).unwrap_err();
    assert!(e.contains("unknown key `until`"), "{e}");
    let e = Sweep::load(&write("base-missing.toml", &text.replace("base-scenario", "nope"))).unwrap_err();
    assert!(e.contains("base-missing.toml: base ") && e.contains("nope.toml"), "{e}");
}

fn example() -> Sweep {
    Sweep::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/examples/sweep/bvt-warp.toml")).unwrap()
}

/// The example of docs/sweep.md: 4 contention levels × 5 frame costs, plotted against
/// the frame cost, a line per contention level.
#[test]
fn the_example_writes_its_grid() {
    let s = example();
    assert_eq!(s.grid().len(), 20);
    let runs = s.run(2, &|_, _| {}).unwrap();
    let csv = s.csv(&runs).unwrap();
    assert_eq!(csv.lines().count(), 1 + 20);
    assert!(csv.starts_with("variant,task.hog.count,task.video.behaviour.exec,seed,task.video.response_max_ms,"), "{csv}");
    assert!(csv.lines().nth(1).unwrap().starts_with("1/4ms,1,4ms,1,"), "{csv}");
    let svg = s.svg(&runs).unwrap().unwrap();
    assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
    assert_eq!(svg.matches("<svg").count(), svg.matches("</svg>").count());
    for k in [1, 2, 4, 8] {
        assert!(svg.contains(&format!("task.hog.count = {k}")), "a line per contention level");
    }
    assert_eq!(svg.matches("<circle").count(), 20, "a dot per grid point");
}

/// What the example shows (paper 001 §2.2): a frame that fits the warp time limit
/// (6 ms) runs warped at once, so its response is its cost plus one 5 us switch however
/// many hogs compete; a frame that overruns L runs unwarped after it, and waits longer
/// the more hogs there are.
#[test]
fn warped_frames_within_the_limit_ignore_contention() {
    let s = example();
    let runs = s.run(2, &|_, _| {}).unwrap();
    let resp = |hogs: &str, exec: &str| {
        let v = s.variants.iter().position(|v| v.name == format!("{hogs}/{exec}")).unwrap();
        s.variant_value(&s.metrics[0], &runs, v).unwrap()
    };
    for hogs in ["1", "2", "4", "8"] {
        assert!((resp(hogs, "4ms") - 4.005).abs() < 1e-9);
        assert!((resp(hogs, "5ms") - 5.005).abs() < 1e-9);
        assert!((resp(hogs, "5.9ms") - 5.905).abs() < 1e-9);
        assert!(resp(hogs, "7ms") > 7.005 + 10.0, "overrunning L waits behind the hogs");
    }
    let over: Vec<f64> = ["1", "2", "4", "8"].iter().map(|h| resp(h, "7ms")).collect();
    assert!(over.windows(2).all(|w| w[1] > w[0]), "{over:?}");
}

/// The paper 004 experiments' heaviest variants (18 processes), every module, with the
/// engine's and the swapper's invariants checked after every event.
#[test]
fn the_unix_experiments_keep_the_invariants() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../experiments/unix");
    for (file, n) in [("throughput.toml", "18"), ("response.toml", "18")] {
        let sweep = Sweep::load(&dir.join(file)).unwrap();
        for m in ["v7", "fb_std_std", "fb_pri_std", "fb_std_mouse", "fb_pri_mouse"] {
            let text = sweep.variant_text(&format!("{m}/{n}")).unwrap();
            let mut sc = vassal_sim::scenario::parse_scenario(&text, file).unwrap();
            sc.until = sc.until.min(400 * vassal_core::SEC);
            let mut sim = vassal_sim::Sim::new(sc).unwrap();
            sim.set_checks(true);
            let r = sim.run().unwrap();
            assert!(r.kernel.swap_outs > 0, "{file} {m}: swapping happens");
        }
    }
}

/// A control run of a sweep (`repro`'s `[control]`): `replace` gives a value another's
/// settings, `set` applies after every variant's own; a variant whose scenario is
/// unchanged is not run again (its report is reused), and reports match a fresh run.
#[test]
fn a_control_replaces_values_and_reuses_unchanged_runs() {
    let text = format!(
        "{BASE}[[axis]]\nname = \"sched\"\nvalues = [{{ name = \"rr\", set = {{ \"default.policy\" = \"rr\" }} }}, {{ name = \"fps\", set = {{ \"default.policy\" = \"fps\" }} }}]\n[[axis]]\npath = \"task.hog.count\"\nvalues = [1, 2]\n"
    );
    let sweep = Sweep::load(&write("control.toml", &text)).unwrap();
    let calls = std::sync::atomic::AtomicUsize::new(0);
    let count = |_: usize, _: usize| {
        calls.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    };
    let (runs, known) = sweep.run_known(2, &count, &Default::default()).unwrap();
    assert_eq!(calls.swap(0, std::sync::atomic::Ordering::Relaxed), 4);
    // fps in rr's place: every variant is one already run.
    let control = sweep.with_control(&[], &[("sched.fps".into(), "rr".into())]).unwrap();
    assert_eq!(control.variants[2].name, "fps/1", "the value keeps its name");
    let (theirs, _) = control.run_known(2, &count, &known).unwrap();
    assert_eq!(calls.swap(0, std::sync::atomic::Ordering::Relaxed), 0, "nothing new to run");
    assert_eq!(theirs[2][0].to_json(), runs[0][0].to_json());
    // A setting after every variant's own: all runs are new, and as a fresh sweep's.
    let set = [("machine.cpus".to_string(), toml::Value::Integer(2))];
    let two = sweep.with_control(&set, &[]).unwrap();
    let (fresh_known, _) = two.run_known(1, &count, &known).unwrap();
    assert_eq!(calls.swap(0, std::sync::atomic::Ordering::Relaxed), 4);
    let fresh = two.run(2, &|_, _| {}).unwrap();
    let json = |r: &vassal_lab::sweep::Runs| r.iter().flatten().map(|x| x.to_json()).collect::<Vec<_>>();
    assert_eq!(json(&fresh_known), json(&fresh));
    assert!(sweep.with_control(&[], &[("sched.edf".into(), "rr".into())]).unwrap_err().contains("no value 'edf'"));
    assert!(sweep.with_control(&[], &[("nope.fps".into(), "rr".into())]).unwrap_err().contains("no axis 'nope'"));
}
