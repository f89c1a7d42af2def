//! The agent's client refuses a reservation or a usage it cannot send before it connects:
//! JSON has no NaN or infinity (serde_json would send `null`, which the agent could only
//! call a malformed request). No agent is needed: the socket named does not exist, so a
//! well-formed request gets as far as connecting and fails there.

use std::process::Command;

fn vassal(args: &[&str]) -> (bool, String) {
    let dir = std::env::temp_dir().join(format!("vassal-client-args-{}", std::process::id()));
    let sock = dir.join("no-agent.sock");
    let out = Command::new(env!("CARGO_BIN_EXE_vassal")).args(args).env("VASSAL_SOCKET", &sock).output().unwrap();
    (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn a_reservation_that_is_not_a_finite_positive_number_is_refused_before_connecting() {
    for (spec, shown) in [("NaN/20ms", "NaN"), ("inf/20ms", "inf"), ("0/20ms", "0"), ("0.0e0/20ms", "0")] {
        for args in [&["run", "--reserve", spec, "--", "true"][..], &["ctl", "reserve", "1", spec], &["ctl", "modify", "1", spec]] {
            let (ok, err) = vassal(args);
            assert!(!ok, "{args:?}");
            assert!(
                err.contains(&format!("reservation '{spec}': utilisation: {shown} must be a finite number above 0")),
                "{args:?}: {err}"
            );
            assert!(!err.contains("talking to the vassal agent"), "{args:?}: {err}");
        }
    }
    let (ok, err) = vassal(&["ctl", "reserve", "1", "0.25/20ms"]);
    assert!(!ok && err.contains("talking to the vassal agent"), "{err}");
}

#[test]
fn a_usage_that_is_not_a_finite_positive_number_is_refused_before_connecting() {
    for usage in ["hard:NaN@0", "hard:inf@0,1", "reserved:NaN", "reserved:0"] {
        let (ok, err) = vassal(&["ctl", "register", "x", "fps", "--usage", usage]);
        assert!(!ok && err.contains(&format!("--usage {usage}: ")) && err.contains("must be a finite number above 0"), "{usage}: {err}");
    }
    let (ok, err) = vassal(&["ctl", "register", "x", "fps", "--usage", "hard:0.2@0"]);
    assert!(!ok && err.contains("talking to the vassal agent"), "{err}");
}
