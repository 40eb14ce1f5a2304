#!/usr/bin/env bash
# maxmemory on a partitioned cluster of real lattice-server processes (issue 20; ARCHITECTURE
# §86): five nodes with --replication-factor 3, keys written through node 1 (each lands on its
# slot's three owners). Node 1 then runs with maxmemory 512 KiB above its use and allkeys-lru,
# and about 8 MB more keys are written through it: it evicts keys it owns once their two other
# owners said they hold them. Checks, from each node's own keys (SCAN, which lists a node's local keys):
# - every acknowledged key is on three nodes, or on two other nodes when node 1 evicted it;
# - the keys on two nodes without node 1 are exactly node 1's evicted_keys;
# - a write through node 2 to a key node 1 evicted reads back on node 1.
# Ports BASE..BASE+9 on 127.0.0.1. Usage: scripts/partitioned-evict-check.sh [BASE] (default
# 7560); needs redis-cli and a release build of lattice-server.
set -euo pipefail
BASE=${1:-7560}
BIN=${LATTICE_BIN:-./target/release/lattice-server}
KEYS=${KEYS:-20000}
N=5
DIR=$(mktemp -d)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$DIR"; }
trap cleanup EXIT
. "$(dirname "$0")/evict-lib.sh"
start_nodes $N "$BASE" --replication-factor 3
# Keyed commands wait for the membership: until every node answers a keyed command.
for i in $(seq 0 $((N - 1))); do
  until [ "$(cli $((BASE + i)) exists probe 2>/dev/null)" = 0 ]; do sleep 0.1; done
done
fill "$BASE" 0 "$KEYS"
# Long enough for every owner to merge the writes and the GC frontier to pass them: only then
# may node 1 ask the other owners about a key.
sleep 4
for i in $(seq 0 $((N - 1))); do echo "node $((i + 1)) DBSIZE $(cli $((BASE + i)) dbsize) before"; done
used=$(field "$BASE" used_memory)
limit=$((used + 512 * 1024))
echo "node 1 used_memory $used; maxmemory set to $limit (512 KiB above), policy allkeys-lru"
cli "$BASE" config set maxmemory-policy allkeys-lru >/dev/null
cli "$BASE" config set maxmemory "$limit" >/dev/null
# Past the limit: ROUNDS x 1,000 more keys (about 1 MB each, three fifths of it on node 1)
# written through node 1 in rounds a moment apart, as a node grows into its limit. A proof
# takes a round trip to the other owners, so a node stocks its eviction pool from 90% of the
# limit; a write it still cannot make room for is refused with -OOM, and such keys exist
# nowhere and are counted apart.
refused=0
total=$KEYS
for round in $(seq 1 "${ROUNDS:-8}"); do
  r=$(fill "$BASE" "$total" $((total + 1000)) 2>&1 | { grep -c OOM || true; })
  refused=$((refused + r))
  total=$((total + 1000))
  sleep 0.2
done
# The limit is lifted before anything is counted: a node over its limit evicts before every
# command, the SCANs and INFOs below included.
cli "$BASE" config set maxmemory 0 >/dev/null
sleep 2
echo "writes refused with -OOM: $refused of $((total - KEYS))"
evicted=$(field "$BASE" evicted_keys)
echo "node 1: evicted_keys $evicted, evicted_stubs $(field "$BASE" evicted_stubs)," \
  "eviction_proofs_asked $(field "$BASE" eviction_proofs_asked)," \
  "eviction_proofs_confirmed $(field "$BASE" eviction_proofs_confirmed)," \
  "used_memory $(field "$BASE" used_memory) (the limit was $limit)"
for i in $(seq 0 $((N - 1))); do echo "node $((i + 1)) DBSIZE $(cli $((BASE + i)) dbsize)"; done
[ "$evicted" -gt 0 ] || { echo "FAIL: node 1 evicted nothing"; exit 1; }
# Each node's own keys, tagged with the node.
for i in $(seq 1 $N); do
  redis-cli -p $((BASE + i - 1)) --scan --pattern 'key:*' | sed "s/\$/ $i/"
done >"$DIR/held"
# Per key: how many nodes hold it, and whether node 1 is one of them.
awk '{n[$1]++; if ($2 == 1) one[$1] = 1} END {for (k in n) print k, n[k], (k in one)}' \
  "$DIR/held" >"$DIR/count"
keys_held=$(wc -l <"$DIR/count")
three=$(awk '$2 == 3' "$DIR/count" | wc -l)
two_without_1=$(awk '$2 == 2 && $3 == 0' "$DIR/count" | wc -l)
short=$(awk '!($2 == 3 || ($2 == 2 && $3 == 0))' "$DIR/count" | wc -l)
echo "keys held somewhere: $keys_held of $((total - refused)) acknowledged; on 3 nodes: $three;" \
  "on 2 nodes without node 1: $two_without_1; any other count: $short"
[ "$keys_held" = $((total - refused)) ] || { echo "FAIL: acknowledged keys missing everywhere"; exit 1; }
[ "$short" = 0 ] || { echo "FAIL: keys held by too few nodes"; awk '!($2 == 3 || ($2 == 2 && $3 == 0))' "$DIR/count" | head; exit 1; }
[ "$two_without_1" = "$evicted" ] || { echo "FAIL: $two_without_1 keys short of node 1, $evicted evicted"; exit 1; }
# A write through node 2 to a key node 1 evicted reads back on node 1 (an owner: read there).
k=$(awk '$2 == 2 && $3 == 0 {print $1; exit}' "$DIR/count")
cli $((BASE + 1)) set "$k" rewritten >/dev/null
sleep 2
got=$(cli "$BASE" get "$k")
echo "$k rewritten through node 2 reads on node 1 as: $got"
[ "$got" = rewritten ] || { echo "FAIL"; exit 1; }
echo "OK: node 1 evicted $evicted keys it owns; their two other owners hold every one"
