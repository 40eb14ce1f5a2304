#!/usr/bin/env bash
# Reproduces a server finding of the fault tests (jepsen/README.md, "Findings"): a replica that
# is killed -9 and restarted with an empty data directory under the SAME --node-id loses the
# writes it accepts after the restart. Three nodes on 127.0.0.1, no namespaces needed.
#   usage: jepsen/repro/restart-same-id.sh [path/to/lattice-server]
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${1:-./target/release/lattice-server}
source scripts/cluster-common.sh
export LATTICE_CLUSTER_SECRET=repro
P=(); Q=()
for i in 1 2 3; do P[$i]=$(free_port); Q[$i]=$(free_port); done
SEEDS=127.0.0.1:${Q[1]},127.0.0.1:${Q[2]},127.0.0.1:${Q[3]}
start() { # node, data dir
  RUST_LOG=info "$BIN" --port "${P[$1]}" --dir "$2" --node-id "$1" --cluster-port "${Q[$1]}" \
    --seeds "$SEEDS" --threads 1 >>"$WORK/n$1.log" 2>&1 &
  PIDS+=($!); eval "PID$1=$!"
}
for i in 1 2 3; do start $i "$WORK/d$i"; done
for i in 1 2 3; do wait_port "${P[$i]}"; wait_links "$WORK/n$i.log" 2; done
cli() { redis-cli -p "${P[$1]}" "${@:2}"; }
for k in 1 2 3 4 5; do cli 2 sadd s "before-$k" >/dev/null; cli 2 incr c >/dev/null; done
sleep 1
echo "before the restart: node 1 sees $(cli 1 scard s) members, c=$(cli 1 get c)"
kill -9 "$PID2"; wait "$PID2" 2>/dev/null || true
start 2 "$WORK/d2-empty"          # same --node-id 2, empty directory
wait_port "${P[2]}"; sleep 2       # links up again, anti-entropy has had time to run
cli 2 sadd s after-1 >/dev/null; cli 2 incr c >/dev/null
sleep 6
for i in 1 2 3; do
  echo "node $i: after-1 member? $(cli $i sismember s after-1), members $(cli $i scard s), c=$(cli $i get c) (expected 1, 6, 6)"
done
