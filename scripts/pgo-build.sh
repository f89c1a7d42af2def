#!/usr/bin/env bash
# A profile-guided build of the `vassal` binary, for long simulations (docs/bench.md,
# "Ninth round": 11-21 % fewer instructions per simulated event or job). Three
# steps: an instrumented release build, a training run of `vassal repro` (the papers'
# experiments in simulation, not the bench's own scenarios), and a release build that
# uses the merged profile. Writes target/pgo/vassal and prints its path; the ordinary
# `cargo build --release` is not touched. Takes two release builds from scratch
# (15 minutes on the 2-CPU development machine).
#
# The profile's format follows rustc's own LLVM, which a distribution's llvm-profdata
# may not read (Debian 12's LLVM 14 cannot read rustc 1.95's), so the llvm-profdata of
# rustup's llvm-tools component is used; it is added if missing.
set -euo pipefail
cd "$(dirname "$0")/.."

host=$(rustc -vV | sed -n 's/^host: //p')
profdata="$(rustc --print sysroot)/lib/rustlib/$host/bin/llvm-profdata"
if [ ! -x "$profdata" ]; then
  rustup component add llvm-tools
fi

dir="$PWD/target/pgo"
rm -rf "$dir/profiles"
mkdir -p "$dir/profiles"

echo "pgo: 1/3 instrumented build" >&2
CARGO_TARGET_DIR="$dir/gen" RUSTFLAGS="-Cprofile-generate=$dir/profiles" cargo build --release -p vassal

echo "pgo: 2/3 training run (vassal repro; its report in $dir/train.log)" >&2
# A failing row still leaves a usable profile; the training run only has to run.
"$dir/gen/release/vassal" repro >"$dir/train.log" 2>&1 || echo "pgo: vassal repro exited $? (see $dir/train.log); the profile is used anyway" >&2
"$profdata" merge -o "$dir/vassal.profdata" "$dir/profiles"

echo "pgo: 3/3 optimised build" >&2
CARGO_TARGET_DIR="$dir/use" RUSTFLAGS="-Cprofile-use=$dir/vassal.profdata" cargo build --release -p vassal
cp "$dir/use/release/vassal" "$dir/vassal"
echo "$dir/vassal"
