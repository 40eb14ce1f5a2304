#!/usr/bin/env bash
# SET throughput of one standalone lattice-server against one node of a 3-node cluster (the two
# other replicas receiving its writes), with the same redis-benchmark run:
#   redis-benchmark -t set -P 16 -n 200000 -c 50 -d 64
# Prints both rates and their ratio (and the same with 100k random keys, -r 100000), each
# replica's key count and the writer's link counters. Builds release first. Only 127.0.0.1 is
# used.
#
#   scripts/cluster-bench.sh            (or: make cluster-bench)
#   BENCH_N=50000 scripts/cluster-bench.sh   for a shorter run
#   CLUSTER_AOF=yes scripts/cluster-bench.sh the cluster nodes log their replicated states (their
#                                            default); without it they run with appendonly off,
#                                            as the standalone node they are compared with
#   PORT_RANGE=LOW-HIGH                      ports from that range only (scripts/cluster-common.sh)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
# shellcheck source=scripts/cluster-common.sh
. "$ROOT/scripts/cluster-common.sh"

CARGO=${CARGO:-cargo}
N=${BENCH_N:-200000}
need_redis_tools
$CARGO build --release -p lattice-server
BIN="${CARGO_TARGET_DIR:-$ROOT/target}/release/lattice-server"

# Prints the SET rate (requests per second) of a benchmark against port $1; extra
# redis-benchmark options may follow (-r K: random keys out of K instead of one key).
bench() {
  local port=$1
  shift
  redis-benchmark -h 127.0.0.1 -p "$port" -t set -P 16 -n "$N" -c 50 -d 64 -q "$@" 2>/dev/null \
    | tr '\r' '\n' | awk '/^SET:/ { print $2 }' | tail -1
}

# CPU nanoseconds a process has run, summed over its threads.
cpu_ns() {
  cat /proc/"$1"/task/*/schedstat 2>/dev/null | awk '{ s += $1 } END { print s + 0 }'
}

echo "== standalone node"
P0=$(free_port)
# Without persistence, as the cluster nodes (unless CLUSTER_AOF=yes): a comparison of
# replication's cost, not of the log's.
printf 'appendonly = "no"\n' >"$WORK/standalone.toml"
"$BIN" --bind 127.0.0.1 --port "$P0" --dir "$WORK/standalone" --config "$WORK/standalone.toml" \
  2>"$WORK/standalone.log" &
PIDS+=($!)
wait_port "$P0"
C0=$(cpu_ns "${PIDS[0]}")
STANDALONE=$(bench "$P0")
C1=$(cpu_ns "${PIDS[0]}")
STANDALONE_R=$(bench "$P0" -r 100000)
C2=$(cpu_ns "${PIDS[0]}")
stop_pid "${PIDS[0]}"
PIDS=()
echo "standalone SET: $STANDALONE requests/s (one key), $STANDALONE_R requests/s (100k random keys)"
awk -v a="$C0" -v b="$C1" -v c="$C2" -v n="$N" 'BEGIN {
  printf "standalone SET CPU per request: %.2f us (one key), %.2f us (100k random keys)\n", (b - a) / n / 1000, (c - b) / n / 1000 }'

echo "== 3-node cluster"
export LATTICE_CLUSTER_SECRET="bench-secret-$RANDOM$RANDOM"
printf 'appendonly = "%s"\n' "${CLUSTER_AOF:-no}" >"$WORK/cluster.toml"
echo "cluster nodes: appendonly ${CLUSTER_AOF:-no}"
start_cluster "$BIN" 3 node --config "$WORK/cluster.toml"
cluster_cpu() { for p in "${PIDS[@]}"; do cpu_ns "$p"; done | paste -sd' '; }
K0=$(cluster_cpu)
CLUSTER=$(bench "${PORTS[0]}")
K1=$(cluster_cpu)
CLUSTER_R=$(bench "${PORTS[0]}" -r 100000)
K2=$(cluster_cpu)
echo "cluster node 1 SET: $CLUSTER requests/s (one key), $CLUSTER_R requests/s (100k random keys), replicating to 2 peers"
awk -v a="$K0" -v b="$K1" -v c="$K2" -v n="$N" 'BEGIN {
  split(a, x, " "); split(b, y, " "); split(c, z, " ")
  printf "cluster SET CPU per request (writer / replica 2 / replica 3): %.2f / %.2f / %.2f us (one key), %.2f / %.2f / %.2f us (100k random keys)\n",
    (y[1]-x[1])/n/1000, (y[2]-x[2])/n/1000, (y[3]-x[3])/n/1000, (z[1]-y[1])/n/1000, (z[2]-y[2])/n/1000, (z[3]-y[3])/n/1000 }'
# How long the two replicas take to hold as many keys as the written node (at most 60 s; a
# replica too busy to answer within 2 s counts as not there yet).
START_MS=$(date +%s%3N)
CAUGHT_UP=no
while [ $(( $(date +%s%3N) - START_MS )) -lt 60000 ]; do
  SIZES=()
  for i in 1 2 3; do
    SIZES+=("$(timeout 2 redis-cli -p "${PORTS[$((i-1))]}" dbsize 2>/dev/null || echo busy)")
  done
  if [ "${SIZES[0]}" = "${SIZES[1]}" ] && [ "${SIZES[0]}" = "${SIZES[2]}" ]; then
    CAUGHT_UP=yes
    break
  fi
  sleep 0.1
done
ELAPSED_MS=$(( $(date +%s%3N) - START_MS ))
if [ "$CAUGHT_UP" = yes ]; then
  echo "replicas' key counts ${SIZES[*]}: equal $ELAPSED_MS ms after the benchmark ended"
else
  echo "replicas' key counts ${SIZES[*]}: NOT equal $ELAPSED_MS ms after the benchmark ended"
fi
stop_pid "${PIDS[0]}"
grep -o 'cluster link stats: .*' "$WORK/node1.log" | sed 's/^/node 1 /' || true

awk -v s="$STANDALONE" -v c="$CLUSTER" -v sr="$STANDALONE_R" -v cr="$CLUSTER_R" 'BEGIN {
  if (s > 0 && sr > 0) {
    printf "cluster-bench: standalone %.0f req/s, cluster node %.0f req/s, ratio %.2f\n", s, c, c / s
    printf "cluster-bench (100k random keys): standalone %.0f req/s, cluster node %.0f req/s, ratio %.2f\n", sr, cr, cr / sr
  } else { print "cluster-bench: no standalone figure"; exit 1 }
}'
