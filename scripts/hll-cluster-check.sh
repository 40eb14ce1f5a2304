#!/usr/bin/env bash
# Replicated HyperLogLogs on three real lattice-server processes (issue 20, must-show 4):
# different elements PFADDed on each node, part of them while node 3 is stopped (its
# writes made before it stopped and after it restarts on its directory), then PFCOUNT on
# every node against one standalone node fed every element. Ports BASE..BASE+9 on 127.0.0.1.
# Usage: scripts/hll-cluster-check.sh [BASE] (default 7350); needs redis-cli.
set -euo pipefail
BASE=${1:-7350}
BIN=${LATTICE_BIN:-./target/release/lattice-server}
DIR=$(mktemp -d)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$DIR"; }
trap cleanup EXIT
SEEDS=127.0.0.1:$((BASE + 5)),127.0.0.1:$((BASE + 6)),127.0.0.1:$((BASE + 7))
start() { # node index 1..3
  "$BIN" --bind 127.0.0.1 --port $((BASE + $1 - 1)) --dir "$DIR/n$1" --node-id "$1" \
    --cluster-port $((BASE + 4 + $1)) --seeds "$SEEDS" >"$DIR/n$1.log" 2>&1 &
  PIDS[$1]=$!
}
mkdir -p "$DIR"/n1 "$DIR"/n2 "$DIR"/n3 "$DIR"/single
for i in 1 2 3; do start "$i"; done
"$BIN" --bind 127.0.0.1 --port $((BASE + 3)) --dir "$DIR/single" >"$DIR/single.log" 2>&1 &
PIDS[4]=$!
cli() { redis-cli -p "$1" "${@:2}"; }
for p in $BASE $((BASE + 1)) $((BASE + 2)) $((BASE + 3)); do
  until cli "$p" ping >/dev/null 2>&1; do sleep 0.1; done
done
add() { # node port, tag, count: the same PFADD on the node and on the single node
  local args; args=$(seq -f "$2:%g" 1 "$3" | tr '\n' ' ')
  cli "$1" pfadd h $args >/dev/null
  cli $((BASE + 3)) pfadd h $args >/dev/null
}
sleep 1
add $BASE a 100; add $((BASE + 1)) b 100; add $((BASE + 2)) c 100
# Concurrent creation of a second key on all three at once.
ADDS=()
for i in 0 1 2; do cli $((BASE + i)) pfadd h2 "x$i" "y$i" >/dev/null & ADDS+=($!); done
wait "${ADDS[@]}"
# Node 3 stopped; the others keep adding, then node 3 comes back and adds its own.
kill "${PIDS[3]}"; wait "${PIDS[3]}" 2>/dev/null || true
add $BASE d 2000; add $((BASE + 1)) e 2000
start 3
until cli $((BASE + 2)) ping >/dev/null 2>&1; do sleep 0.1; done
add $((BASE + 2)) f 2000
sleep 3
echo "single node: PFCOUNT h = $(cli $((BASE + 3)) pfcount h)"
ok=1
for i in 0 1 2; do
  c=$(cli $((BASE + i)) pfcount h); c2=$(cli $((BASE + i)) pfcount h2)
  enc=$(cli $((BASE + i)) pfdebug encoding h)
  echo "node $((i + 1)) (port $((BASE + i))): PFCOUNT h = $c ($enc), PFCOUNT h2 = $c2"
  [ "$c" = "$(cli $((BASE + 3)) pfcount h)" ] && [ "$c2" = 6 ] || ok=0
done
[ $ok = 1 ] && echo "equal on every node and to the single node" || { echo "DIFFERENT"; exit 1; }
