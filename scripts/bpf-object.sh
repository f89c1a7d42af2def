#!/usr/bin/env bash
# Rebuilds the agent's committed BPF object (crates/agent/bpf/sched.bpf.o) from its source
# and records the source's sha256 beside it (sched.bpf.o.sha256). The agent's build uses
# the committed object where clang is missing, only if that sha256 is its source's; where
# clang is there, it builds its own and warns if the committed one differs
# (crates/agent/build.rs; docs/agent.md, "The BPF object"). Commit both files.
set -euo pipefail
cd "$(dirname "$0")/../crates/agent"
clang=${CLANG:-clang}
# The flags of build.rs (FLAGS); -fdebug-compilation-dir=. keeps the build directory out
# of the object, so every checkout builds the same bytes with the same clang.
"$clang" -target bpf -O2 -g -Wall -fdebug-compilation-dir=. -D__TARGET_ARCH_x86 -c bpf/sched.bpf.c -o bpf/sched.bpf.o
sha256sum bpf/sched.bpf.c | cut -d' ' -f1 >bpf/sched.bpf.o.sha256
echo "crates/agent/bpf/sched.bpf.o rebuilt with $("$clang" --version | head -1); source sha256 $(cat bpf/sched.bpf.o.sha256)"
