#!/usr/bin/env bash
# Instructions per simulated event and per job, for one or more `vassal` binaries: the
# bench's three simulator scenarios (`vassal bench --only`) run under valgrind's
# instruction counter at two horizons each, and the difference of the two counts divided
# by the difference of the events (1,000 tasks) or jobs (RM on 1 CPU, global EDF on 4)
# simulated. Start-up, parsing, building and the report cancel out, and the count does
# not move with the host's load, so two builds compare to a few instructions where
# `vassal bench`'s rates on a shared machine differ by ±30 % (docs/bench.md).
#
#   scripts/bench-instructions.sh [BIN ...]     (default: target/release/vassal)
#
# Needs valgrind (apt-get install valgrind). About 15 s per binary.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v valgrind >/dev/null || { echo "bench-instructions: needs valgrind (apt-get install valgrind)" >&2; exit 2; }
[ $# -gt 0 ] || set -- target/release/vassal

# scenario, what is counted, the two horizons
runs=("events events 10s 20s" "rm_1cpu jobs 200s 400s" "gedf_4cpu jobs 100s 200s")

# Instructions and the counted quantity of one run: "INSTR COUNT".
measure() {
  local bin=$1 name=$2 what=$3 until=$4 log counts instr
  log=$(mktemp)
  counts=$(valgrind --tool=cachegrind --cache-sim=no --cachegrind-out-file=/dev/null --log-file="$log" \
    "$bin" bench --only "$name" --until "$until" --json)
  instr=$(sed -n 's/.*I *refs: *\([0-9,]*\).*/\1/p' "$log" | tr -d ,)
  rm -f "$log"
  [ -n "$instr" ] || { echo "bench-instructions: no instruction count from valgrind for $bin $name" >&2; exit 1; }
  echo "$instr $(python3 -c 'import json,sys; print(json.load(sys.stdin)[sys.argv[1]])' "$what" <<<"$counts")"
}

printf '%-40s %14s %14s %14s\n' "binary" "per event" "per RM job" "per EDF job"
for bin in "$@"; do
  [ -x "$bin" ] || { echo "bench-instructions: $bin is not an executable" >&2; exit 2; }
  help=$("$bin" bench --help 2>&1 || true)
  [[ $help == *--only* ]] ||
    { echo "bench-instructions: $bin has no 'bench --only' (built before it was added)" >&2; exit 2; }
  row=()
  for r in "${runs[@]}"; do
    read -r name what short long <<<"$r"
    m1=$(measure "$bin" "$name" "$what" "$short")
    m2=$(measure "$bin" "$name" "$what" "$long")
    read -r i1 n1 <<<"$m1"
    read -r i2 n2 <<<"$m2"
    row+=("$(python3 -c 'import sys; i1,n1,i2,n2=map(int,sys.argv[1:]); print(f"{(i2-i1)/(n2-n1):,.0f}")' "$i1" "$n1" "$i2" "$n2")")
  done
  printf '%-40s %14s %14s %14s\n' "$bin" "${row[@]}"
done
