#!/usr/bin/env bash
# How long a 3-node cluster takes to agree again after one node was paused (SIGSTOP) for 3 s
# under writes on every node: runs the multi-process test that measures it and prints its line
#   cluster-pause: all 3 nodes agree N ms after SIGCONT ...
# RUNS=k repeats it k times (each run is a fresh cluster).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
CARGO=${CARGO:-cargo}
RUNS=${RUNS:-1}
LOG="$(mktemp -t lattice-cluster-pause.XXXXXX)"
trap 'rm -f "$LOG"' EXIT
for run in $(seq "$RUNS"); do
  if ! $CARGO test --release -q -p lattice-server --test cluster paused_node_catches_up -- --nocapture \
      >"$LOG" 2>&1; then
    grep -v '^20..-..-..T' "$LOG" | tail -60 >&2
    echo "cluster-pause: run $run FAILED (see above)" >&2
    exit 1
  fi
  grep '^cluster-pause:' "$LOG"
done
