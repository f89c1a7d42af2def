//! `vassal repro --report` and `vassal sim --report` from the command line write the
//! page; `sim --rt-app` runs a shipped rt-app example.

use std::path::Path;
use std::process::Command;

fn vassal(args: &[&str]) -> (String, String) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let o = Command::new(env!("CARGO_BIN_EXE_vassal")).current_dir(&root).args(args).output().unwrap();
    assert!(o.status.success(), "vassal {args:?}: {}", String::from_utf8_lossy(&o.stderr));
    (String::from_utf8(o.stdout).unwrap(), String::from_utf8(o.stderr).unwrap())
}

#[test]
fn repro_and_sim_write_their_reports() {
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("report_cli");
    std::fs::create_dir_all(&out).unwrap();
    let repro = out.join("r.html");
    let (stdout, _) = vassal(&["repro", "bvt.fig", "--report", repro.to_str().unwrap()]);
    let page = std::fs::read_to_string(&repro).unwrap();
    for line in stdout.lines().filter(|l| l.starts_with("bvt.fig")) {
        let id = line.split_whitespace().next().unwrap();
        assert!(page.contains(&format!("<td>{id}</td>")), "row {id} missing from the page");
    }
    assert!(page.contains("Actual virtual time A_i") && page.contains("Effective virtual time E_i"));

    let sim = out.join("fig3.html");
    vassal(&["sim", "experiments/bvt/fig3.toml", "--until", "1s", "--report", sim.to_str().unwrap()]);
    assert!(std::fs::read_to_string(&sim).unwrap().contains("vassal sim: bvt-fig3"));

    let rt = out.join("fifo.html");
    let (stdout, _) = vassal(&["sim", "--rt-app", "docs/examples/rt-app/fifo.json", "--report", rt.to_str().unwrap()]);
    assert!(stdout.contains("control") && stdout.contains("batch-2"), "{stdout}");
    assert!(std::fs::read_to_string(&rt).unwrap().contains("CPU timeline"));
}
