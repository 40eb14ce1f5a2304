#!/usr/bin/env bash
# Runs the Maelstrom workload matrix with lattice-maelstrom-harness and prints a summary.
#   maelstrom/run.sh full    # make maelstrom: the whole matrix (a few minutes)
#   maelstrom/run.sh quick   # make maelstrom-quick: a short run of each kind (seconds)
# Each row states what it must show: valid, invalid, or any (reported, not enforced).
# Failing runs keep history.jsonl, summary.txt and node logs under $OUT (target/maelstrom).
set -uo pipefail
cd "$(dirname "$0")/.."
MODE=${1:-quick}
TARGET=${CARGO_TARGET_DIR:-target}
HARNESS=$TARGET/release/lattice-maelstrom-harness
BIN=$TARGET/release/lattice-maelstrom
OUT=${OUT:-target/maelstrom}
SEED=${SEED:-1}
for f in "$HARNESS" "$BIN"; do
  [ -x "$f" ] || { echo "missing $f: cargo build --release -p lattice-maelstrom" >&2; exit 2; }
done

rows=()
failed=0
run() { # expect, then harness flags
  local expect=$1; shift
  local out rc
  out=$("$HARNESS" --bin "$BIN" --out "$OUT" --seed "$SEED" --expect "$expect" "$@" 2>/dev/null)
  rc=$?
  echo "$out"
  local summary
  summary=$(echo "$out" | grep -m1 '^workload=')
  if [ $rc -ne 0 ]; then
    failed=$((failed + 1))
    rows+=("FAIL (expected $expect) ${summary:-harness error, rc=$rc}")
  else
    rows+=("ok   (expected $expect) $summary")
  fi
}

# Multi-node runs: node-to-node loss on top of partitions, a little client loss so that some
# operations are indeterminate, and a partition every second or so.
MULTI=(--nemesis partition --loss 0.05 --client-loss 0.01 --nemesis-interval-ms 1000)

case "$MODE" in
  full)
    run valid --workload lin-kv --nodes 1 --clients 10 --ops 2500 --rate 1000 --client-loss 0.01 --op-timeout-ms 500
    for n in 3 5; do
      for w in g-counter pn-counter g-set broadcast; do
        run valid --workload "$w" --nodes "$n" --clients 10 --ops 1500 --rate 250 "${MULTI[@]}"
      done
    done
    # Not linearizable by design (eventually consistent replicas): the checker must say so.
    run any --workload lin-kv --nodes 3 --clients 10 --ops 1500 --rate 300 --nemesis partition
    ;;
  quick)
    run valid --workload lin-kv --nodes 1 --clients 10 --ops 400 --rate 1000 --client-loss 0.01 --op-timeout-ms 300
    run valid --workload pn-counter --nodes 1 --clients 4 --ops 200 --rate 1000
    run valid --workload g-set --nodes 1 --clients 4 --ops 200 --rate 1000
    run valid --workload pn-counter --nodes 3 --clients 6 --ops 600 --rate 250 "${MULTI[@]}"
    run valid --workload g-set --nodes 3 --clients 6 --ops 600 --rate 250 "${MULTI[@]}"
    ;;
  *) echo "usage: $0 full|quick" >&2; exit 2 ;;
esac

echo
echo "== maelstrom ($MODE) summary =="
for r in "${rows[@]}"; do echo "$r"; done
total=${#rows[@]}
echo "$((total - failed)) passed, $failed failed"
[ "$failed" -eq 0 ]
