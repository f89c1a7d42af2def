//! Where the SDK's example modules (`sdk/examples/*`, built to
//! `vassal_module_<name>.wasm`) are, for tests and tools in this repository.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The directory holding the SDK's example modules, built first (once per process) with
/// `cargo build --release --target wasm32-unknown-unknown --manifest-path sdk/Cargo.toml`.
///
/// sdk/ is a workspace of its own with its own target dir (`CARGO_TARGET_DIR` is not
/// passed on), so calling this from a test does not deadlock with the cargo running the
/// test. The cargo used is `$CARGO`, else `cargo`. The path is that of this source tree
/// (fixed at compile time): this is for tests and tools run from a checkout. An error
/// says why the modules could not be built (e.g. the wasm32 target is not installed).
pub fn examples_dir() -> Result<&'static Path, String> {
    static DIR: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    DIR.get_or_init(|| {
        let sdk = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../sdk");
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let out = Command::new(&cargo)
            .args(["build", "--release", "--target", "wasm32-unknown-unknown", "--manifest-path"])
            .arg(sdk.join("Cargo.toml"))
            .env_remove("CARGO_TARGET_DIR")
            .output()
            .map_err(|e| format!("running {cargo} to build the SDK's example modules: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "building sdk/ for wasm32 failed (is the target installed? `rustup target add wasm32-unknown-unknown`):\n{}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Ok(sdk.join("target/wasm32-unknown-unknown/release"))
    })
    .as_ref()
    .map(|p| p.as_path())
    .map_err(Clone::clone)
}

/// The file of the SDK's example module `name` (e.g. "rr", "stride", "bvt"):
/// `vassal_module_<name>.wasm` in [`examples_dir`], which it builds first.
pub fn example_path(name: &str) -> Result<PathBuf, String> {
    Ok(examples_dir()?.join(format!("vassal_module_{name}.wasm")))
}

/// The native (host-target shared library) form of the SDK's example module `name`:
/// `libvassal_module_<name>.so` in sdk/target/release, built first (once per process)
/// with `cargo build --release --manifest-path sdk/Cargo.toml`.
pub fn native_example_path(name: &str) -> Result<PathBuf, String> {
    static DIR: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let dir = DIR
        .get_or_init(|| {
            let sdk = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../sdk");
            let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
            let out = Command::new(&cargo)
                .args(["build", "--release", "--manifest-path"])
                .arg(sdk.join("Cargo.toml"))
                .env_remove("CARGO_TARGET_DIR")
                .output()
                .map_err(|e| format!("running {cargo} to build the SDK's native example modules: {e}"))?;
            if !out.status.success() {
                return Err(format!("building sdk/ for the host failed:\n{}", String::from_utf8_lossy(&out.stderr)));
            }
            Ok(sdk.join("target/release"))
        })
        .as_ref()
        .map_err(Clone::clone)?;
    Ok(dir.join(format!("{}vassal_module_{name}{}", std::env::consts::DLL_PREFIX, std::env::consts::DLL_SUFFIX)))
}
