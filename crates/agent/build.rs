//! Gives the agent its BPF event source (bpf/sched.bpf.c) — compiled here when clang is
//! there, else the object kept in the repository — and then sets the cfg `vassal_bpf`
//! (docs/agent.md, "The BPF object").
//!
//! - **clang present** (`CLANG`, default `clang`): `clang -target bpf -O2 -g` builds the
//!   object into OUT_DIR, and it is checked against the committed one
//!   (bpf/sched.bpf.o): if the committed object was built from another source (the
//!   sha256 in bpf/sched.bpf.o.sha256 is not the source's), or — same source, same clang
//!   version (the object's `.comment` names its compiler) — its bytes differ, cargo
//!   prints a warning to refresh it with scripts/bpf-object.sh. The fresh object is used.
//! - **no clang**: the committed object is used if it was built from this very source
//!   (the sha256), on a little-endian target (BPF bytecode takes the host's byte order);
//!   a stale one is not used, with a warning, and the agent is built without BPF (it
//!   polls /proc).
//! - `VASSAL_NO_BPF=1` builds without BPF on purpose; `VASSAL_BPF_PREBUILT=1` uses the
//!   committed object even where clang is (to try what a machine without clang gets).
//!
//! The env var `VASSAL_BPF_ORIGIN` tells the crate which it was (the agent logs it).

use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};

/// The flags the object is built with, here and in scripts/bpf-object.sh.
const FLAGS: &[&str] = &["-target", "bpf", "-O2", "-g", "-Wall", "-fdebug-compilation-dir=."];

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

/// The compiler named in an object's `.comment` ("Debian clang version 14.0.6").
fn compiler_of(object: &[u8]) -> Option<String> {
    let at = object.windows(14).position(|w| w == b"clang version ")?;
    let start = object[..at].iter().rposition(|&b| b == 0).map_or(0, |z| z + 1);
    let end = object[at..].iter().position(|&b| b == 0 || b == b'(' || b == b'\n').map_or(object.len(), |e| at + e);
    Some(String::from_utf8_lossy(&object[start..end]).trim().to_string())
}

fn main() {
    println!("cargo::rustc-check-cfg=cfg(vassal_bpf)");
    println!("cargo::rerun-if-changed=bpf");
    for v in ["VASSAL_NO_BPF", "VASSAL_BPF_PREBUILT", "CLANG"] {
        println!("cargo::rerun-if-env-changed={v}");
    }
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() != Ok("linux") {
        return;
    }
    let on = |v: &str| std::env::var_os(v).is_some_and(|v| v != "0" && !v.is_empty());
    if on("VASSAL_NO_BPF") {
        println!("cargo::warning=VASSAL_NO_BPF is set: the agent is built without its BPF event source (it polls /proc)");
        return;
    }
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR")).join("sched.bpf.o");
    let source = std::fs::read("bpf/sched.bpf.c").expect("bpf/sched.bpf.c");
    let committed = std::fs::read("bpf/sched.bpf.o").ok();
    let recorded = std::fs::read_to_string("bpf/sched.bpf.o.sha256").ok().map(|s| s.split_whitespace().next().unwrap_or("").to_string());
    let in_sync = committed.is_some() && recorded.as_deref() == Some(sha256_hex(&source).as_str());
    let clang = std::env::var("CLANG").unwrap_or_else(|_| "clang".into());
    let arch = match std::env::var("CARGO_CFG_TARGET_ARCH").as_deref() {
        Ok("x86_64") => "x86",
        Ok("aarch64") => "arm64",
        Ok(other) => other,
        Err(_) => "x86",
    }
    .to_string();
    let little = std::env::var("CARGO_CFG_TARGET_ENDIAN").as_deref() == Ok("little");
    let use_committed = |why: &str| {
        if !in_sync {
            println!(
                "cargo::warning={why}, and the committed bpf/sched.bpf.o was not built from this bpf/sched.bpf.c \
                 (its sha256 is not the one in bpf/sched.bpf.o.sha256): the agent is built without its BPF event source \
                 (it polls /proc). Refresh the object with scripts/bpf-object.sh"
            );
            return;
        }
        if !little {
            println!("cargo::warning={why}, and the committed BPF object is little-endian: the agent is built without BPF");
            return;
        }
        std::fs::write(&out, committed.as_deref().expect("in sync")).expect("write the BPF object");
        println!("cargo::rustc-cfg=vassal_bpf");
        println!("cargo::rustc-env=VASSAL_BPF_ORIGIN=the committed bpf/sched.bpf.o (checked against its source's sha256)");
    };
    if on("VASSAL_BPF_PREBUILT") {
        return use_committed("VASSAL_BPF_PREBUILT is set");
    }
    let r =
        Command::new(&clang).args(FLAGS).arg(format!("-D__TARGET_ARCH_{arch}")).args(["-c", "bpf/sched.bpf.c", "-o"]).arg(&out).output();
    match r {
        Ok(o) if o.status.success() => {
            println!("cargo::rustc-cfg=vassal_bpf");
            println!("cargo::rustc-env=VASSAL_BPF_ORIGIN=bpf/sched.bpf.c, built by {clang}");
            check_committed(&out, committed.as_deref(), in_sync);
        }
        Ok(o) => use_committed(&format!(
            "`{clang} -target bpf` failed ({})",
            String::from_utf8_lossy(&o.stderr).lines().next().unwrap_or("").replace('\n', " ")
        )),
        Err(e) => use_committed(&format!("no clang ({clang}: {e})")),
    }
}

/// Warns when the committed object no longer is what clang makes of the source.
fn check_committed(fresh: &Path, committed: Option<&[u8]>, in_sync: bool) {
    let fresh = std::fs::read(fresh).expect("the object just built");
    match committed {
        None => println!("cargo::warning=no committed bpf/sched.bpf.o: machines without clang get no BPF; run scripts/bpf-object.sh"),
        Some(_) if !in_sync => println!(
            "cargo::warning=the committed bpf/sched.bpf.o was built from another bpf/sched.bpf.c: machines without clang get no BPF \
             until it is refreshed with scripts/bpf-object.sh"
        ),
        Some(c) if compiler_of(c) == compiler_of(&fresh) && c != fresh.as_slice() => println!(
            "cargo::warning=the committed bpf/sched.bpf.o differs from what this clang builds from the same source: \
             refresh it with scripts/bpf-object.sh"
        ),
        Some(_) => {}
    }
}
