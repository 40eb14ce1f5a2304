#!/usr/bin/env bash
# Replica catch-up with real processes, on 127.0.0.1 ports 7301-7333 (BASE=7300 to move them).
#
# Part 1, restart (K keys, default 100,000): three replicas; K keys written through node 1;
#   (a) node 3 stopped, its directory wiped, started again: a full transfer from its peers;
#   (b) node 3 stopped (SIGTERM), 100 writes on node 1 (50 new keys, 50 overwrites), node 3
#       started again on its own directory: it recovers its replicated states locally, and
#       anti-entropy ships it what it missed.
#   Prints the bytes node 3 received from its peers (INFO replication repl_bytes_received) in
#   each case until it equals the writer, and their ratio.
# Part 2, empty replica under load (N keys, default 1,000,000; N=0 skips it): nodes 1 and 2
#   hold N keys; node 3 starts empty while redis-benchmark writes through node 1; prints the
#   writer's latency (p50, worst p99 and max of the benchmark runs during the catch-up), the
#   time until node 3 holds the N keys with no transfer pending, and the bytes shipped.
#
#   scripts/catchup.sh                 K=100000 N=1000000
#   K=20000 N=200000 scripts/catchup.sh
#   PART=2 N=200000 scripts/catchup.sh part 2 only
#   BASE=7150 scripts/catchup.sh        ports BASE+1..BASE+33 instead of 7301-7333
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
# shellcheck source=scripts/cluster-common.sh
. "$ROOT/scripts/cluster-common.sh"
CARGO=${CARGO:-cargo}
K=${K:-100000}
N=${N:-1000000}
need_redis_tools
$CARGO build --release -p lattice-server >/dev/null 2>&1 || $CARGO build --release -p lattice-server
BIN="${CARGO_TARGET_DIR:-$ROOT/target}/release/lattice-server"
export LATTICE_CLUSTER_SECRET="catchup-$RANDOM$RANDOM"

now_ms() { date +%s%3N; }
field() { # field PORT NAME: a number from INFO replication
  redis-cli -p "$1" info replication | tr -d '\r' | awk -F: -v f="$2" '$1 == f { print $2 }'
}
dbsize() { timeout 5 redis-cli -p "$1" dbsize 2>/dev/null || echo busy; }
# Transfers still pending on the links of the node at port $1 (owed leaves + slices in flight).
pending() {
  redis-cli -p "$1" info replication | tr -d '\r' | grep '^peer' |
    sed -E 's/.*transfer_owed_leaves=([0-9]+),transfer_inflight_slices=([0-9]+).*/\1 \2/' |
    awk '{ s += $1 + $2 } END { print s + 0 }'
}

# Cluster of three on client ports BASE+1..3, cluster ports BASE+11..13, dirs $WORK/n<base>-<i>.
declare -A PID
SEEDS=""
start_node() { # start_node BASE I
  local base=$1 i=$2
  NO_COLOR=1 "$BIN" --bind 127.0.0.1 --port $((base + i)) --node-id "$i" \
    --cluster-port $((base + 10 + i)) --seeds "$SEEDS" --dir "$WORK/n$base-$i" \
    2>>"$WORK/n$base-$i.log" &
  PID[$base-$i]=$!
  PIDS+=($!)
  wait_port $((base + i))
}
stop_node() { stop_pid "${PID[$1-$2]}"; }
seeds_for() { SEEDS="127.0.0.1:$(($1 + 11)),127.0.0.1:$(($1 + 12)),127.0.0.1:$(($1 + 13))"; }
# Loads COUNT keys PREFIX<i> with 64-byte values through port $1 (one pipelined stream).
load_keys() {
  local port=$1 count=$2 prefix=$3
  awk -v n="$count" -v p="$prefix" 'BEGIN {
      v = sprintf("%064d", 0);
      for (i = 0; i < n; i++) printf "*3\r\n$3\r\nSET\r\n$%d\r\n%s%d\r\n$64\r\n%s\r\n", length(p i), p, i, v
    }' | redis-cli -p "$port" --pipe >/dev/null
}
# Waits until node at $2 holds as many keys as node at $1 and has no transfer pending, for at
# most $3 s; prints the milliseconds it took (or "not within ...").
wait_equal() {
  local a=$1 b=$2 limit=$3 start
  start=$(now_ms)
  while [ $(( $(now_ms) - start )) -lt $((limit * 1000)) ]; do
    if [ "$(dbsize "$a")" = "$(dbsize "$b")" ] && [ "$(pending "$b")" = 0 ] &&
       [ "$(pending "$a")" = 0 ]; then
      echo $(( $(now_ms) - start ))
      return 0
    fi
    sleep 0.05
  done
  echo "not within $((limit * 1000))"
}

echo "== load average: $(cut -d' ' -f1-3 /proc/loadavg)"
if [ "${PART:-all}" != 2 ]; then
echo "== part 1: restart of a replica that missed 100 writes, $K keys"
B=${BASE:-7300}
seeds_for $B
for i in 1 2 3; do start_node $B $i; done
for i in 1 2 3; do wait_links "$WORK/n$B-$i.log" 2; done
load_keys $((B + 1)) "$K" "key:"
t=$(wait_equal $((B + 1)) $((B + 3)) 120)
echo "  loaded: $(dbsize $((B + 1))) keys on node 1, node 3 equal after $t ms"

# (a) full transfer: node 3 restarted on an empty directory.
stop_node $B 3
rm -rf "$WORK/n$B-3"
start_node $B 3
t=$(wait_equal $((B + 1)) $((B + 3)) 300)
sleep 1
full=$(field $((B + 3)) repl_bytes_received)
echo "  (a) empty directory: equal after $t ms, node 3 received $full bytes"

# (b) restart on its own directory after missing 100 writes.
stop_node $B 3
for i in $(seq 0 49); do
  redis-cli -p $((B + 1)) set "missed:$i" "written while node 3 was down" >/dev/null
  redis-cli -p $((B + 1)) set "key:$((i * 1999 % K))" "overwritten while node 3 was down" >/dev/null
done
start_node $B 3
t=$(wait_equal $((B + 1)) $((B + 3)) 120)
sleep 1
catch=$(field $((B + 3)) repl_bytes_received)
loaded=$(field $((B + 3)) states_loaded)
probe=$(redis-cli -p $((B + 3)) get "key:$((49 * 1999 % K))")
echo "  (b) own directory ($loaded states recovered): equal after $t ms, node 3 received $catch bytes; probe: $probe"
awk -v c="$catch" -v f="$full" 'BEGIN { printf "  catch-up / full transfer = %.3f%%\n", c * 100 / f }'
# Every state node 3 held must come back from its directory (a snapshot and the records after
# it may both hold a key, so the count may exceed K, never fall short of it).
if [ "${loaded:-0}" -lt "$K" ]; then
  echo "  FAILED: node 3 recovered $loaded states from its directory, fewer than its $K keys"
  exit 1
fi
for i in 1 2 3; do stop_node $B "$i"; done
fi

[ "$N" -gt 0 ] || exit 0
echo "== part 2: a replica started empty next to two holding $N keys, writer under redis-benchmark"
B=$((${BASE:-7300} + 20))
seeds_for $B
for i in 1 2; do start_node $B $i; done
for i in 1 2; do wait_links "$WORK/n$B-$i.log" 1; done
start=$(now_ms)
load_keys $((B + 1)) "$N" "pre:"
while [ "$(dbsize $((B + 2)))" != "$N" ]; do sleep 0.2; done
echo "  loaded $N keys into nodes 1 and 2 in $(( $(now_ms) - start )) ms; load average $(cut -d' ' -f1-3 /proc/loadavg)"
start_node $B 3
start=$(now_ms)
caught=""
: >"$WORK/bench.csv"
while [ -z "$caught" ]; do
  redis-benchmark -p $((B + 1)) -t set -n 20000 -r 100000000 -d 64 -c 10 -P 1 --csv 2>/dev/null |
    tail -1 >>"$WORK/bench.csv"
  if [ "$(pending $((B + 1)))" = 0 ] && [ "$(pending $((B + 2)))" = 0 ] &&
     [ "$(dbsize $((B + 3)))" -ge "$N" ] 2>/dev/null; then
    caught=$(( $(now_ms) - start ))
  fi
  [ $(( $(now_ms) - start )) -lt 600000 ] || caught="not within 600000"
done
load=$(cut -d' ' -f1-3 /proc/loadavg)
# CSV: "test","rps","avg","min","p50","p95","p99","max"
median_p50=$(tr -d '"' <"$WORK/bench.csv" | cut -d, -f5 | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }')
awk -F, -v m="$median_p50" '{ gsub(/"/, ""); n++; rps += $2; if ($7 + 0 > p99) p99 = $7 + 0; if ($8 + 0 > mx) mx = $8 + 0 }
  END { printf "  writer during the catch-up (%d benchmark runs): %.0f req/s, p50 %s ms (median of runs), worst p99 %s ms, max %s ms\n", n, rps / n, m, p99, mx }' \
  "$WORK/bench.csv"
sent1=$(field $((B + 1)) repl_bytes_sent)
sent2=$(field $((B + 2)) repl_bytes_sent)
got=$(field $((B + 3)) repl_bytes_received)
t=$(wait_equal $((B + 1)) $((B + 3)) 120)
echo "  node 3 caught up after $caught ms (equal to the writer $t ms after the load); it received $got bytes (nodes 1 and 2 sent $sent1 and $sent2 bytes in all); load average $load"
for i in 1 2; do
  redis-cli -p $((B + i)) info replication | tr -d '\r' | grep -E '^(peer|transfer_)' | sed "s/^/  node $i /"
done
