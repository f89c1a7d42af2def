#!/usr/bin/env bash
# Runs every test: unit, property and stress tests of all crates, then the paper
# reproductions (which exit non-zero if any row fails) and a quick benchmark smoke run.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --locked
# The policy SDK's example modules (sdk/, its own workspace), for the module tests and
# the bench; they need the wasm32 target (.ci/run adds it on a fresh machine).
cargo build --release --locked --target wasm32-unknown-unknown --manifest-path sdk/Cargo.toml
cargo test --release --locked --workspace
./target/release/vassal repro
./target/release/vassal bench --quick
