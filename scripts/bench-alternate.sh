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
cd "$(dirname "$0")/.."
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
rates = {}  # binary -> figure -> values
for line in open(sys.argv[1]):
    b, out = line.rstrip("\n").split("\t", 1)
    d = json.loads(out)
    f = rates.setdefault(b, {})
    jobs = d.get("jobs_per_sec", {})
    for name, v, scale in [("events M/s", d.get("events_per_sec"), 1e6), ("rm_1cpu M jobs/s", jobs.get("rm_1cpu"), 1e6),
                           ("gedf_4cpu M jobs/s", jobs.get("gedf_4cpu"), 1e6), ("fixed cost ms", d.get("fixed_cost_ms"), 1)]:
        if v is not None:  # an older binary may not measure it
            f.setdefault(name, []).append(v / scale)
names = ["events M/s", "rm_1cpu M jobs/s", "gedf_4cpu M jobs/s", "fixed cost ms"]
print(f"{'binary':40s}" + "".join(f"{n:>26s}" for n in names))
for b, f in rates.items():
    fmt = lambda n, x: f"{x:.3f}" if n.endswith("ms") else f"{x:.2f}"
    cells = [f"{fmt(n, statistics.median(f[n]))} ({fmt(n, min(f[n]))}-{fmt(n, max(f[n]))})" if n in f else "-" for n in names]
    print(f"{b:40s}" + "".join(f"{c:>26s}" for c in cells))
print(f"median (min-max) of each figure over {sys.argv[2]} alternated rounds")
EOF
