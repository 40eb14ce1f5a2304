#!/usr/bin/env bash
# Reproduces a server finding of the fault tests (jepsen/README.md, "Findings"): after a node's
# wall clock jumps BACK (an NTP step, a VM restore), the writes it accepts stop reaching its
# peers for about the size of the jump. Three nodes on 127.0.0.1; node 1 runs under
# libfaketime (Debian package faketime) with its wall clock moved through a file.
#   usage: jepsen/repro/clock-jump-back.sh [jump seconds, default 60] [path/to/lattice-server]
set -euo pipefail
cd "$(dirname "$0")/../.."
JUMP=${1:-60}
BIN=${2:-./target/release/lattice-server}
LIB=$(ls /usr/lib/*/faketime/libfaketime.so.1 | head -1)
source scripts/cluster-common.sh
export LATTICE_CLUSTER_SECRET=repro
P=(); Q=()
for i in 1 2 3; do P[$i]=$(free_port); Q[$i]=$(free_port); done
SEEDS=127.0.0.1:${Q[1]},127.0.0.1:${Q[2]},127.0.0.1:${Q[3]}
echo "+$JUMP" > "$WORK/clock1"
for i in 1 2 3; do
  pre=()
  [ $i = 1 ] && pre=(env LD_PRELOAD="$LIB" FAKETIME_TIMESTAMP_FILE="$WORK/clock1" FAKETIME_CACHE_DURATION=1 FAKETIME_DONT_FAKE_MONOTONIC=1)
  RUST_LOG=info "${pre[@]}" "$BIN" --port "${P[$i]}" --dir "$WORK/d$i" --node-id $i --cluster-port "${Q[$i]}" \
    --seeds "$SEEDS" --threads 1 >>"$WORK/n$i.log" 2>&1 &
  PIDS+=($!)
done
for i in 1 2 3; do wait_port "${P[$i]}"; wait_links "$WORK/n$i.log" 2; done
cli() { redis-cli -p "${P[$1]}" "${@:2}"; }
cli 1 incr c >/dev/null; sleep 1
echo "node 1's clock is +${JUMP}s: after one INCR on node 1, node 2 reads c=$(cli 2 get c)"
echo "+0" > "$WORK/clock1"; sleep 2       # the clock jumps back by $JUMP s
cli 1 incr c >/dev/null
t0=$(date +%s)
for _ in $(seq $((JUMP * 2 + 30))); do
  [ "$(cli 2 get c)" = 2 ] && break
  sleep 1
done
echo "after the jump back, a second INCR on node 1: node 2 reads c=$(cli 2 get c) (expected 2) after $(( $(date +%s) - t0 )) s"
