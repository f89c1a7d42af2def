//! Sweep experiments (docs/repro.md, "Sweeps"): variants from `[[axis]]` overrides, rows
//! over them, and their errors.

use std::path::PathBuf;

use vassal_sim::repro::run_experiment;
use vassal_sim::sweep::load;

fn write(name: &str, text: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("vassal-sweep-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

const BASE: &str = "until = \"1s\"\n[machine]\ncpus = 1\n[default]\npolicy = \"rr\"\n[[task]]\nname = \"hog\"\ncount = 1\nbehaviour = { kind = \"cpu\" }\n";

#[test]
fn rows_compare_variants() {
    // 1 hog vs 4 hogs on one CPU: each of the 4 gets a quarter of what the 1 gets.
    let text = format!(
        "{BASE}[[axis]]\nname = \"n\"\nvalues = [{{ name = \"1\" }}, {{ name = \"4\", set = {{ \"task.0.count\" = 4 }} }}]\n\
         [[expect]]\nid = \"t.ratio\"\nmetric = \"group.hog.cpu_frac.max[n/4.x]\"\npaper = 0\ntolerance = 0\nwhy = \"x\"\n"
    );
    // a variant that does not exist is an error naming the variants
    let e = run_experiment(&write("bad-variant.toml", &text)).unwrap_err();
    assert!(e.contains("no variant 'n/4.x'") && e.contains("variants: 1, 4"), "{e}");
    let text = text.replace("group.hog.cpu_frac.max[n/4.x]", "group.hog.cpu_frac.max[4] / group.hog.cpu_frac.max[1]");
    let rows = run_experiment(&write("ok.toml", &text)).unwrap();
    assert_eq!(rows.len(), 1);
    assert!((rows[0].ours - 0.25).abs() < 1e-3, "{}", rows[0].ours);
}

#[test]
fn a_metric_without_a_variant_is_an_error() {
    let text = format!(
        "{BASE}[[axis]]\nname = \"n\"\nvalues = [{{ name = \"1\" }}]\n[[expect]]\nid = \"t\"\nmetric = \"group.hog.cpu_frac.max\"\npaper = 0\ntolerance = 0\nwhy = \"x\"\n"
    );
    let e = run_experiment(&write("no-variant.toml", &text)).unwrap_err();
    assert!(e.contains("needs a variant: group.hog.cpu_frac.max[VARIANT]"), "{e}");
}

#[test]
fn bad_overrides_name_the_axis_and_value() {
    let text = format!("{BASE}[[axis]]\nname = \"n\"\nvalues = [{{ name = \"2\", set = {{ \"task.3.count\" = 2 }} }}]\n");
    let e = load(&write("bad-path.toml", &text)).unwrap_err();
    assert!(e.contains("axis 'n' value '2': set \"task.3.count\": no `task.3`"), "{e}");
    // a value the scenario refuses: reported in the variant's text, under its name
    let text = format!("{BASE}[[axis]]\nname = \"n\"\nvalues = [{{ name = \"0\", set = {{ \"task.0.count\" = 0 }} }}]\n");
    let sweep = load(&write("bad-value.toml", &text)).unwrap();
    let e = sweep.run().unwrap_err();
    assert!(e.contains("[variant 0]:") && e.contains("count must be between 1 and 10000, found 0"), "{e}");
    // duplicate and malformed values
    let text = format!("{BASE}[[axis]]\nname = \"n\"\nvalues = [{{ name = \"a\" }}, {{ name = \"a\" }}]\n");
    assert!(load(&write("dup.toml", &text)).unwrap_err().contains("duplicate value 'a'"));
    let text = format!("{BASE}[[axis]]\nname = \"n\"\nvalues = [{{ name = \"a/b\" }}]\n");
    assert!(load(&write("slash.toml", &text)).unwrap_err().contains("without '/'"));
    let text = format!("seeds = [-1]\n{BASE}[[axis]]\nname = \"n\"\nvalues = [{{ name = \"a\" }}]\n");
    assert!(load(&write("seeds.toml", &text)).unwrap_err().contains("seeds must be integers >= 0"));
}

#[test]
fn seeds_average_the_runs_and_tables_show_the_curves() {
    let text = format!(
        "seeds = [1, 2]\n{BASE}[[axis]]\nname = \"m\"\nvalues = [{{ name = \"a\" }}, {{ name = \"b\", set = {{ \"task.0.count\" = 2 }} }}]\n\
         [[show]]\nname = \"share\"\nmetric = \"group.hog.cpu_frac.max\"\n"
    );
    let sweep = load(&write("seeds-ok.toml", &text)).unwrap();
    let runs = sweep.run().unwrap();
    assert_eq!(runs["a"].len(), 2);
    let t = sweep.tables(&runs).unwrap();
    assert!(t.contains("share (group.hog.cpu_frac.max)") && t.contains("a ") && t.contains("0.5000"), "{t}");
    assert!(sweep.variant_text("b").unwrap().contains("count = 2"));
}
