#!/usr/bin/env bash
# maxmemory on a three-replica cluster of real lattice-server processes (issue 20; ARCHITECTURE
# §79): node 1 runs with maxmemory and allkeys-lru and is filled past its limit; it evicts
# locally while nodes 2 and 3 keep every key. Prints INFO evicted_keys and evicted_stubs of
# node 1 and each node's DBSIZE, checks that every key node 1 evicted is still on nodes 2 and 3,
# and that a write elsewhere brings an evicted key back to node 1.
# Ports BASE..BASE+5 on 127.0.0.1. Usage: scripts/cluster-evict-check.sh [BASE] (default 7550);
# needs redis-cli and a release build of lattice-server.
set -euo pipefail
BASE=${1:-7550}
BIN=${LATTICE_BIN:-./target/release/lattice-server}
KEYS=${KEYS:-20000}
DIR=$(mktemp -d)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$DIR"; }
trap cleanup EXIT
. "$(dirname "$0")/evict-lib.sh"
start_nodes 3 "$BASE"
fill "$BASE" 0 "$KEYS"
# Long enough for every replica to merge the writes and the GC frontier to pass them: only
# then may node 1 evict a key.
sleep 4
used=$(field "$BASE" used_memory)
limit=$((used - 8 * 1024 * 1024))
echo "node 1 used_memory $used; maxmemory set to $limit (8 MiB below), policy allkeys-lru"
cli "$BASE" config set maxmemory-policy allkeys-lru >/dev/null
cli "$BASE" config set maxmemory "$limit" >/dev/null
# Past the limit: more writes through node 1. A command evicts at most 1,024 keys before it
# runs (as standalone), so the first few writes past an 8 MiB gap are refused with -OOM: those
# keys exist nowhere and are counted apart.
refused=$(fill "$BASE" "$KEYS" $((KEYS + 2000)) 2>&1 | { grep -c OOM || true; })
echo "writes refused with -OOM: $refused"
sleep 2
total=$((KEYS + 2000))
evicted=$(field "$BASE" evicted_keys)
echo "node 1: evicted_keys $evicted, evicted_stubs $(field "$BASE" evicted_stubs), used_memory $(field "$BASE" used_memory)"
for i in 0 1 2; do echo "node $((i + 1)) DBSIZE $(cli $((BASE + i)) dbsize)"; done
[ "$evicted" -gt 0 ] || { echo "FAIL: node 1 evicted nothing"; exit 1; }
# Every key missing on node 1 must be on nodes 2 and 3.
exists() { for ((k = 0; k < total; k++)); do printf 'EXISTS key:%d\r\n' "$k"; done | redis-cli -p "$1"; }
paste <(exists "$BASE") <(exists $((BASE + 1))) <(exists $((BASE + 2))) >"$DIR/exists"
missing1=$(awk '$1 == 0' "$DIR/exists" | wc -l)
nowhere=$(awk '$1 == 0 && $2 == 0 && $3 == 0' "$DIR/exists" | wc -l)
lost=$(awk '$1 == 0 && ($2 != 1 || $3 != 1) && !($2 == 0 && $3 == 0)' "$DIR/exists" | wc -l)
echo "keys missing on node 1: $missing1; on no node (refused writes): $nowhere; on one other node only: $lost"
[ "$nowhere" = "$refused" ] || { echo "FAIL: $nowhere keys missing everywhere, $refused refused"; exit 1; }
for i in 1 2; do
  n=$(cli $((BASE + i)) dbsize)
  [ "$n" = $((total - refused)) ] || { echo "FAIL: node $((i + 1)) holds $n of $((total - refused)) keys"; exit 1; }
done
[ "$lost" = 0 ] || { echo "FAIL: evicted keys are gone elsewhere"; exit 1; }
# A write on node 2 to a key node 1 evicted comes back to node 1.
k=$(awk '$1 == 0 && $2 == 1 {print NR - 1; exit}' "$DIR/exists")
cli $((BASE + 1)) set "key:$k" rewritten >/dev/null
sleep 2
got=$(cli "$BASE" get "key:$k")
echo "key:$k rewritten on node 2 reads on node 1 as: $got"
[ "$got" = rewritten ] || { echo "FAIL"; exit 1; }
echo "OK: node 1 evicted $evicted keys locally; nodes 2 and 3 hold all $((total - refused)) acknowledged keys"
