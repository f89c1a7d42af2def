#!/usr/bin/env bash
# Runs every test: format and lint gates, unit, property and stress tests of all crates,
# the root-only real-process tests when run as root, then the paper reproductions (which
# exit non-zero if any row fails) and a quick benchmark smoke run. Ends with a count of
# what ran and of what was skipped, and why.
set -euo pipefail
cd "$(dirname "$0")/.."

# What the full suite needs, installed when this can (root with apt): clang compiles the
# agent's BPF event source (crates/agent/bpf, by build.rs) and checks the committed
# object against it (without clang the committed object is used: see the end of this
# script), Chromium renders the HTML reports (crates/lab/tests/html_report.rs; without it
# that check skips), rt-app runs the workload of `vassal repro --real real.rtapp_video`
# and ships the workloads that crates/sim/tests/rtapp_shipped.rs runs (without it that
# test skips).
missing=()
command -v clang >/dev/null 2>&1 || missing+=(clang)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
{ command -v rt-app >/dev/null 2>&1 && [ -d /usr/share/doc/rt-app/examples ]; } || missing+=(rt-app)
if [ ${#missing[@]} -gt 0 ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null) ||
    echo "could not install ${missing[*]}: the tests that need them will skip" >&2
fi

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

log=$(mktemp)
# A test that finds at run time it cannot run here (no BPF build, no Chromium, one CPU)
# calls vassal_agent::skip::skip, which appends its reason to this file: it is counted
# below as skipped, not passed.
export VASSAL_SKIP_LOG=$(mktemp)
trap 'rm -f "$log" "$VASSAL_SKIP_LOG"' EXIT
# (The wire protocol's fuzz target, crates/agent/tests/fuzz.rs, runs 3,000 cases here, a
# fraction of a second; VASSAL_FUZZ_CASES=N runs it longer.)
cargo test --release --locked --workspace 2>&1 | tee -a "$log"
# The real-process tests change other processes' scheduling: they need root, and are
# marked #[ignore = "needs root: ..."], so that elsewhere they show as ignored, not passed.
root_only=$(grep -rh 'ignore = "needs root' crates | wc -l)
if [ "$(id -u)" = 0 ]; then
  cargo test --release --locked --workspace -- --ignored 2>&1 | tee -a "$log"
  root_only=0
fi
./target/release/vassal repro
./target/release/vassal bench --quick
# The committed BPF object, as a machine without clang gets it (crates/agent/build.rs):
# built with no clang to be found, it must load and see events on this kernel (root).
if [ "$(id -u)" = 0 ]; then
  CLANG=/nonexistent/clang CARGO_TARGET_DIR=target/noclang \
    cargo test --release --locked -p vassal-agent --lib bpf -- --ignored 2>&1 | tee -a "$log"
fi

# What ran, and what did not and why.
sum() { grep -E '^test result:' "$log" | sed -E "s/.* ([0-9]+) $1.*/\1/" | awk '{s+=$1} END {print s+0}'; }
run_time=$(wc -l <"$VASSAL_SKIP_LOG")
passed=$(( $(sum passed) - run_time ))
failed=$(sum failed)
echo
echo "tests: $passed passed, $failed failed, $((root_only + run_time)) skipped"
[ "$root_only" -gt 0 ] && echo "skipped: $root_only real-process tests need root (run scripts/test.sh as root)"
[ "$run_time" -gt 0 ] && sort "$VASSAL_SKIP_LOG" | uniq -c | sed -E 's/^ *([0-9]+) /skipped at run time: \1 test(s): /'
command -v clang >/dev/null 2>&1 ||
  echo "no clang: the agent used the committed BPF object, not compared with what clang builds from its source"
exit 0
