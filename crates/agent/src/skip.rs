//! Runtime skips for tests that cannot run on this machine (issue 15, "honest test
//! counts"). libtest has no runtime skip: a test that returns early counts as passed. A
//! test that finds it cannot run calls [`skip`], which says why on stderr and, when
//! `VASSAL_SKIP_LOG` names a file (scripts/test.sh sets it), appends the reason there;
//! scripts/test.sh then counts those tests as skipped, not passed, and lists the reasons.

use std::io::Write;

/// Records that the calling test is skipped, and why. The test must return after it.
pub fn skip(reason: &str) {
    eprintln!("SKIPPED: {reason}");
    if let Some(path) = std::env::var_os("VASSAL_SKIP_LOG") {
        if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(path) {
            let _ = writeln!(f, "{reason}");
        }
    }
}
