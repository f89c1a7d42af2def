//! `vassal sweep` from the command line: files written, and quiet when not on a terminal
//! (here stderr is a pipe) or with --json.

use std::path::Path;
use std::process::Command;

#[test]
fn sweep_writes_the_table_and_plot_quietly() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("sweep_cli");
    let _ = std::fs::remove_dir_all(&out);
    let spec = root.join("docs/examples/sweep/bvt-warp.toml");
    let run = |json: bool| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_vassal"));
        c.arg("sweep").arg(&spec).arg("--out").arg(&out).arg("--jobs").arg("2");
        if json {
            c.arg("--json");
        }
        let o = c.output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        (String::from_utf8(o.stdout).unwrap(), String::from_utf8(o.stderr).unwrap())
    };
    let (stdout, stderr) = run(true);
    let v: serde_json::Value = serde_json::from_str(&stdout).expect("--json prints JSON");
    assert_eq!(v["rows"].as_array().unwrap().len(), 20);
    assert_eq!(stderr, "", "--json: no progress bar, no chatter");
    let (stdout, stderr) = run(false);
    assert!(stdout.starts_with("task.video.response_max_ms\n  task.video.behaviour.exec"), "{stdout}");
    assert_eq!(stderr.lines().count(), 1, "only the files written, no bar: {stderr:?}");
    assert!(stderr.starts_with("wrote "));
    for ext in ["csv", "json", "svg"] {
        let f = out.join(format!("bvt-warp.{ext}"));
        assert!(std::fs::metadata(&f).unwrap().len() > 100, "{}", f.display());
    }
}
