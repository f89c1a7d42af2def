#!/usr/bin/env bash
# Runs every test: unit, property and stress tests of all crates, then the paper
# reproductions (which exit non-zero if any row fails) and a quick benchmark smoke run.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --locked
cargo test --release --locked --workspace
./target/release/vassal repro
./target/release/vassal bench --quick
