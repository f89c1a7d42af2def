#!/usr/bin/env bash
# Runs every test: unit, property and stress tests of all crates, then the paper
# reproductions (which exit non-zero if any row fails) and a quick benchmark smoke run.
set -euo pipefail
cd "$(dirname "$0")/.."
# The habits CI enforces (issue 15): one format (rustfmt.toml) and no clippy warning.
cargo fmt --all --check
(cd sdk && cargo fmt --all --check)
cargo clippy --release --locked --workspace --all-targets -- -D warnings
cargo build --release --locked
# The policy SDK's example modules (sdk/, its own workspace), for the module tests and
# the bench: as WebAssembly (they need rustup's wasm32 target) and as native shared
# libraries for this machine.
if command -v rustup >/dev/null 2>&1 && ! rustup target list --installed | grep -qx wasm32-unknown-unknown; then
  rustup target add wasm32-unknown-unknown
fi
cargo build --release --locked --target wasm32-unknown-unknown --manifest-path sdk/Cargo.toml
cargo build --release --locked --manifest-path sdk/Cargo.toml
# (The wire protocol's fuzz target, crates/agent/tests/fuzz.rs, runs 3,000 cases here, a
# fraction of a second; VASSAL_FUZZ_CASES=N runs it longer.)
cargo test --release --locked --workspace
./target/release/vassal repro
./target/release/vassal bench --quick
