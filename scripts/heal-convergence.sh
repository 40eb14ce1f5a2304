#!/usr/bin/env bash
# How long after a partition heals do the replicas agree? Runs lattice-maelstrom-harness RUNS
# times (seeds 1..RUNS) per workload, 3 nodes under the partition nemesis with message loss,
# and reports the harness's "final reads agree after X s of healing" figures: p50, p99, max.
# The harness reads every node in rounds 250 ms apart, so figures are that coarse.
#
#   scripts/heal-convergence.sh [RUNS] [WORKLOADS]     # default: 20 "g-set g-counter pn-counter"
set -uo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-20}
WORKLOADS=${2:-"g-set g-counter pn-counter"}
TARGET=${CARGO_TARGET_DIR:-target}
HARNESS=$TARGET/release/lattice-maelstrom-harness
BIN=$TARGET/release/lattice-maelstrom
OUT=${OUT:-target/heal-convergence}
for f in "$HARNESS" "$BIN"; do
  [ -x "$f" ] || { echo "missing $f: cargo build --release -p lattice-maelstrom" >&2; exit 2; }
done
status=0
for w in $WORKLOADS; do
  times=()
  for seed in $(seq 1 "$RUNS"); do
    line=$("$HARNESS" --bin "$BIN" --out "$OUT" --seed "$seed" --expect valid --workload "$w" \
      --nodes 3 --clients 6 --ops 300 --rate 250 --nemesis partition --loss 0.05 \
      --nemesis-interval-ms 1000 2>&1 | grep -m1 'final reads')
    t=$(echo "$line" | sed -n 's/.*after \([0-9.]*\)s of healing.*/\1/p')
    if [ -z "$t" ] || echo "$line" | grep -q DISAGREE; then
      echo "$w seed $seed: ${line:-no final reads}" >&2
      status=1
      continue
    fi
    times+=("$t")
  done
  printf '%s\n' "${times[@]}" | sort -n | awk -v w="$w" '
    { v[NR] = $1 }
    END {
      if (NR == 0) { print w ": no runs agreed"; exit }
      p50 = v[int((NR + 1) / 2)]; p99 = v[int(0.99 * NR + 0.999)]
      printf "%s: %d runs, agree after healing p50 %.2f s, p99 %.2f s, max %.2f s\n", w, NR, p50, p99, v[NR]
    }'
done
exit $status
