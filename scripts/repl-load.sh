#!/usr/bin/env bash
# The 1M-key replicated load of issue "replication at real data sizes", side by side:
#   a 3-node Lattice cluster (every node a replica of every key),
#   Redis 7 primary + 2 replicas (--replicaof), and a standalone Lattice node,
# each loaded through its first node with
#   redis-benchmark -t set -n $N -r 100000000 -d 64 -P 32 -c 50
# Prints per system: throughput, p50/p99/max latency, the longest wait for a reply seen by a
# probe client pinging each node during the load (scripts/gap-probe.py), RSS per key on every node,
# CPU seconds per node (all threads, /proc/<pid>/stat), and the time after the load until every
# replica holds as many keys as the writer. Only 127.0.0.1 is used; everything started is
# stopped on exit.
#
#   scripts/repl-load.sh             (N=1000000)
#   N=200000 scripts/repl-load.sh    a shorter run
#   WATCH=60 ...                      the Lattice nodes' key forms and RSS every 5 s for 60 s
#   PORT_RANGE=7150-7199 ...          ports from that range (scripts/cluster-common.sh)
#   ONLY=lattice ...                  the Lattice cluster alone (no Redis, no standalone run)
#   CLUSTER_AOF=yes ...               the cluster nodes log their replicated states (their
#                                     default); without it they run with appendonly off, as the
#                                     Redis servers and the standalone node of this comparison
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
# shellcheck source=scripts/cluster-common.sh
. "$ROOT/scripts/cluster-common.sh"
CARGO=${CARGO:-cargo}
N=${N:-1000000}
need_redis_tools
$CARGO build --release -p lattice-server >/dev/null 2>&1 || $CARGO build --release -p lattice-server
BIN="${CARGO_TARGET_DIR:-$ROOT/target}/release/lattice-server"
REDIS=$(command -v redis-server)

rss_kb() { awk '/VmRSS/ { print $2 }' "/proc/$1/status"; }
# CPU seconds of process $1, all threads (utime + stime from /proc/<pid>/stat).
cpu_s() { awk -v hz="$(getconf CLK_TCK)" '{ print ($14 + $15) / hz }' "/proc/$1/stat"; }

# load NAME: runs the load through the first of the servers in PIDS (ports in LPORTS, same
# order), then waits for the others to hold as many keys.
load() {
  local name=$1
  local ports=("${LPORTS[@]}") pids=("${PIDS[@]}") p
  local cpu0=()
  for p in "${pids[@]}"; do cpu0+=("$(cpu_s "$p")"); done
  # A probe per server: a replica that stops answering while it merges is a stall too.
  local probes=() i=0
  for p in "${ports[@]}"; do
    i=$((i + 1))
    python3 "$ROOT/scripts/gap-probe.py" "$p" 600 >"$WORK/$name.gap$i" &
    probes+=($!)
  done
  redis-benchmark -h 127.0.0.1 -p "${ports[0]}" -t set -n "$N" -r 100000000 -d 64 -P 32 -c 50 --csv \
    2>/dev/null | tail -1 >"$WORK/$name.csv"
  for p in "${probes[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${probes[@]}"; do wait "$p" 2>/dev/null || true; done
  local gaps="" g
  for i in $(seq "${#ports[@]}"); do
    g=$(sed -E 's/longest_gap_ms=([0-9.]+) gaps_over_100ms=([0-9]+).*/\1 ms (\2 over 100)/' "$WORK/$name.gap$i")
    gaps="$gaps${gaps:+, }node $i: $g"
  done
  local start_ms caught=no sizes=()
  start_ms=$(date +%s%3N)
  while [ $(( $(date +%s%3N) - start_ms )) -lt 120000 ]; do
    sizes=()
    for p in "${ports[@]}"; do sizes+=("$(timeout 2 redis-cli -p "$p" dbsize 2>/dev/null || echo busy)"); done
    local same=yes
    for s in "${sizes[@]}"; do [ "$s" = "${sizes[0]}" ] || same=no; done
    if [ "$same" = yes ]; then caught=yes; break; fi
    sleep 0.05
  done
  local conv_ms=$(( $(date +%s%3N) - start_ms ))
  [ "$caught" = yes ] || conv_ms="not within ${conv_ms}"
  sleep 1 # let background work (GC, last acks) finish before reading memory
  local keys=${sizes[0]}
  local rss="" cpu="" i=0
  for p in "${pids[@]}"; do
    rss="$rss $(awk -v r="$(rss_kb "$p")" -v k="$keys" 'BEGIN { printf "%.0f", r * 1024 / k }')"
    cpu="$cpu $(awk -v a="${cpu0[$i]}" -v b="$(cpu_s "$p")" 'BEGIN { printf "%.1f", b - a }')"
    i=$((i + 1))
  done
  IFS=, read -r _ rps _ _ p50 _ p99 max <"$WORK/$name.csv"
  printf '%-28s %10s req/s  p50 %6s ms  p99 %7s ms  max %8s ms  %s  keys %s  RSS B/key:%s  CPU s:%s  replicas equal after: %s ms\n' \
    "$name" "${rps//\"/}" "${p50//\"/}" "${p99//\"/}" "${max//\"/}" "longest gap $gaps" "$keys" "$rss" "$cpu" "$conv_ms"
}

echo "== $N SETs of 64-byte values on random keys (-r 100000000), P=32, 50 clients"
# Lattice, 3 nodes.
export LATTICE_CLUSTER_SECRET="load-secret-$RANDOM$RANDOM"
# Clustered nodes persist by default (a log of replicated states and its snapshots); Redis and
# the standalone node below run without persistence, so the cluster does too unless asked.
printf 'appendonly = "%s"\n' "${CLUSTER_AOF:-no}" >"$WORK/cluster.toml"
start_cluster "$BIN" 3 lattice --config "$WORK/cluster.toml"
LPORTS=("${PORTS[@]}")
load "lattice 3-node cluster"
redis-cli -p "${PORTS[0]}" info replication | grep -E '^(peer|gc_sweep|queued)' | sed 's/^/  lattice node 1 /' || true
# Every node's keys by form (packed records, table entries, general states among them), the
# applied GC frontier's lag and RSS, now and then every 5 s for WATCH seconds (default 0).
forms() {
  local i p f
  for i in "${!PORTS[@]}"; do
    p=${PORTS[$i]}
    f=$(timeout 5 redis-cli -p "$p" info replication 2>/dev/null | tr -d '\r' |
      grep -E '^(replicated_keys|packed_keys|table_keys|general_states|dots_above_gc_frontier|gc_frontiers_adopted|gc_queued_keys|gc_sweep_pending_keys):' |
      tr '\n' ' ')
    f="$f $(timeout 5 redis-cli -p "$p" info memory 2>/dev/null | tr -d '\r' | grep -E '^used_memory:')"
    echo "  +$1 s node $((i + 1)): $f RSS_kB:$(rss_kb "${PIDS[$i]}")"
  done
}
forms 0
for t in $(seq 5 5 "${WATCH:-0}"); do sleep 5; forms "$t"; done
# Outgoing links each node lost since it started, by reason: a link replaced or dropped under
# the load is a PeerDown and a PeerUp for the node, whose replication then takes another path.
for i in "${!PORTS[@]}"; do
  lost=$(grep -o 'outgoing link to node .* down: .*' "$WORK/lattice$((i + 1)).log" |
    sed -E 's/^outgoing link to node ([0-9]+) \([^)]*\) down: /to \1: /' | sort | uniq -c |
    awk '{ $1 = $1 "x"; print }' | paste -sd ';' - || true)
  echo "  node $((i + 1)) links lost: ${lost:-none}"
done
for p in "${PIDS[@]}"; do stop_pid "$p"; done
PIDS=()
[ "${ONLY:-}" != lattice ] || exit 0

# Redis, primary + 2 replicas, no persistence (as the Lattice nodes, unless CLUSTER_AOF=yes).
RP=(); for i in 1 2 3; do RP+=("$(free_port)"); done
"$REDIS" --port "${RP[0]}" --bind 127.0.0.1 --save '' --appendonly no --dir "$WORK" --dbfilename p.rdb \
  >"$WORK/redis1.log" 2>&1 &
PIDS+=($!)
wait_port "${RP[0]}"
for i in 2 3; do
  "$REDIS" --port "${RP[$((i-1))]}" --bind 127.0.0.1 --save '' --appendonly no --dir "$WORK" \
    --dbfilename "r$i.rdb" --replicaof 127.0.0.1 "${RP[0]}" >"$WORK/redis$i.log" 2>&1 &
  PIDS+=($!)
done
for i in 2 3; do
  wait_port "${RP[$((i-1))]}"
  for _ in $(seq 100); do
    redis-cli -p "${RP[$((i-1))]}" info replication | grep -q 'master_link_status:up' && break
    sleep 0.1
  done
done
LPORTS=("${RP[@]}")
load "redis primary + 2 replicas"
for p in "${PIDS[@]}"; do stop_pid "$p"; done
PIDS=()

# Lattice standalone (the memory baseline).
SP=$(free_port)
# Without persistence, as the cluster nodes (unless CLUSTER_AOF=yes) and the Redis servers.
printf 'appendonly = "no"\n' >"$WORK/standalone.toml"
"$BIN" --bind 127.0.0.1 --port "$SP" --dir "$WORK/standalone" --config "$WORK/standalone.toml" \
  2>"$WORK/standalone.log" &
PIDS+=($!)
wait_port "$SP"
LPORTS=("$SP")
load "lattice standalone"
