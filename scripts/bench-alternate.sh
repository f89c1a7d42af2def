#!/usr/bin/env bash
# The simulator's rates of one or more `vassal` binaries on a shared machine: full
# `vassal bench --json` runs, the binaries alternated round after round so that a busy
# or quiet spell of the host falls on all of them alike, then per binary the median and
# the range of each rate (docs/bench.md, seventeenth round). One run of one binary may
# fall 40 % below its median on a virtual machine whose neighbours are busy; the
# medians of 15 rounds compare two builds to a few per cent,
# `scripts/bench-instructions.sh` to the instruction.
#
#   scripts/bench-alternate.sh [-n ROUNDS] [--quick] BIN ...    (default: 15 rounds)
#
# About 9 s per run (1 s with --quick, whose figures are rougher).
set -euo pipefail
rounds=15
quick=()
bins=()
while [ $# -gt 0 ]; do
  case $1 in
    -n) [[ ${2:-} =~ ^[1-9][0-9]*$ ]] || { echo "bench-alternate: -n needs a positive number of rounds" >&2; exit 2; }
        rounds=$2; shift 2 ;;
    --quick) quick=(--quick); shift ;;
    -*) echo "bench-alternate: unknown option $1" >&2; exit 2 ;;
    *) [ -x "$1" ] || { echo "bench-alternate: $1 is not an executable" >&2; exit 2; }
       bins+=("$1"); shift ;;
  esac
done
[ ${#bins[@]} -gt 0 ] || { echo "usage: scripts/bench-alternate.sh [-n ROUNDS] [--quick] BIN ..." >&2; exit 2; }

runs=$(mktemp)
trap 'rm -f "$runs"' EXIT
for ((r = 1; r <= rounds; r++)); do
  for b in "${bins[@]}"; do
    out=$("$b" bench "${quick[@]}" --json) || { echo "bench-alternate: $b bench failed" >&2; exit 1; }
    printf '%s\t%s\n' "$b" "$out" >>"$runs"
  done
  echo "round $r of $rounds" >&2
done

python3 - "$runs" "$rounds" <<'EOF'
import json, statistics, sys
# (column, where the bench's JSON has it, unit divisor, format)
FIGURES = [("events M/s", ("events_per_sec",), 1e6, ".2f"), ("rm_1cpu M jobs/s", ("jobs_per_sec", "rm_1cpu"), 1e6, ".2f"),
           ("gedf_4cpu M jobs/s", ("jobs_per_sec", "gedf_4cpu"), 1e6, ".2f"), ("fixed cost ms", ("fixed_cost_ms",), 1, ".3f")]
rates = {}  # binary -> column -> values
for line in open(sys.argv[1]):
    b, out = line.rstrip("\n").split("\t", 1)
    f, d = rates.setdefault(b, {}), json.loads(out)
    for name, path, scale, _ in FIGURES:
        v = d
        for k in path:
            v = v.get(k) if isinstance(v, dict) else None
        if v is not None:  # an older binary may not measure it
            f.setdefault(name, []).append(v / scale)
print(f"{'binary':40s}" + "".join(f"{name:>26s}" for name, *_ in FIGURES))
for b, f in rates.items():
    cells = []
    for name, _, _, fm in FIGURES:
        xs = f.get(name)
        cells.append(f"{statistics.median(xs):{fm}} ({min(xs):{fm}}-{max(xs):{fm}})" if xs else "-")
    print(f"{b:40s}" + "".join(f"{c:>26s}" for c in cells))
print(f"median (min-max) of each figure over {sys.argv[2]} alternated rounds")
EOF
