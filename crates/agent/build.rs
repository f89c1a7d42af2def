//! Builds the BPF event source (bpf/*.bpf.c) with `clang -target bpf -O2 -g` when clang
//! is there, and then sets the cfg `vassal_bpf`; without clang (or if it fails) the agent
//! is built without BPF, polls /proc, and cargo prints a warning. `VASSAL_NO_BPF=1`
//! builds without BPF on purpose; `CLANG` names the compiler (default `clang`).

use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo::rustc-check-cfg=cfg(vassal_bpf)");
    println!("cargo::rerun-if-changed=bpf");
    println!("cargo::rerun-if-env-changed=VASSAL_NO_BPF");
    println!("cargo::rerun-if-env-changed=CLANG");
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() != Ok("linux") {
        return;
    }
    if std::env::var_os("VASSAL_NO_BPF").is_some_and(|v| v != "0" && !v.is_empty()) {
        println!("cargo::warning=VASSAL_NO_BPF is set: the agent is built without its BPF event source (it polls /proc)");
        return;
    }
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR")).join("sched.bpf.o");
    let clang = std::env::var("CLANG").unwrap_or_else(|_| "clang".into());
    let arch = match std::env::var("CARGO_CFG_TARGET_ARCH").as_deref() {
        Ok("x86_64") => "x86",
        Ok("aarch64") => "arm64",
        Ok(other) => other,
        Err(_) => "x86",
    }
    .to_string();
    let r = Command::new(&clang)
        .args(["-target", "bpf", "-O2", "-g", "-Wall"])
        .arg(format!("-D__TARGET_ARCH_{arch}"))
        .args(["-c", "bpf/sched.bpf.c", "-o"])
        .arg(&out)
        .output();
    match r {
        Ok(o) if o.status.success() => println!("cargo::rustc-cfg=vassal_bpf"),
        Ok(o) => println!(
            "cargo::warning=`{clang} -target bpf` failed; the agent is built without its BPF event source (it polls /proc): {}",
            String::from_utf8_lossy(&o.stderr).lines().next().unwrap_or("")
        ),
        Err(e) => println!(
            "cargo::warning=no clang ({clang}: {e}); the agent is built without its BPF event source (it polls /proc). Install clang for it."
        ),
    }
}
