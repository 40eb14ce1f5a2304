#!/usr/bin/env bash
# Instructions per request in lattice-server, counted by callgrind: steadier than CPU time on a
# shared machine, so it shows whether a change made the request path cheaper or dearer.
#
#   bench/callgrind.sh [server binary] [requests] [pipeline] [tests]
#   bench/callgrind.sh target/release/lattice-server 100000 16 set,get
#
# The server runs under callgrind pinned to one core; for each test the counters are zeroed,
# redis-benchmark sends the requests (-c 50 -d 64 -r 100000, as bench.py does), and the counters
# are dumped: instructions (Ir) over all threads divided by requests. Start-up is not counted.
# Tests run in order on the same server, so GET after SET finds its keys.
set -euo pipefail
cd "$(dirname "$0")/.."

BIN=${1:-target/release/lattice-server}
N=${2:-100000}
P=${3:-16}
TESTS=${4:-set,get}
for tool in valgrind callgrind_control callgrind_annotate redis-benchmark redis-cli; do
  command -v "$tool" >/dev/null || { echo "missing: $tool" >&2; exit 1; }
done

WORK=$(mktemp -d /tmp/lattice-callgrind.XXXXXX)
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
taskset -c 0 valgrind --tool=callgrind --callgrind-out-file="$WORK/cg.%p" \
  "$BIN" --port "$PORT" --bind 127.0.0.1 --dir "$WORK/data" >"$WORK/server.log" 2>&1 &
VG=$!
trap 'kill "$VG" 2>/dev/null; wait "$VG" 2>/dev/null; rm -rf "$WORK"' EXIT
for _ in $(seq 600); do
  redis-cli -p "$PORT" ping >/dev/null 2>&1 && break
  sleep 0.2
done
redis-cli -p "$PORT" ping >/dev/null

echo "| test | requests | pipeline | Ir total | Ir per request |"
echo "|---|--:|--:|--:|--:|"
for t in ${TESTS//,/ }; do
  callgrind_control -z "$VG" >/dev/null 2>&1
  taskset -c 1 redis-benchmark -p "$PORT" -c 50 -n "$N" -d 64 -r 100000 -P "$P" -t "$t" -q >/dev/null
  rm -f "$WORK"/cg.*.[0-9]*
  callgrind_control -d "$VG" >/dev/null 2>&1
  # Every dump file (one per thread when threads are separated) adds up to the total.
  ir=0
  for f in "$WORK"/cg.*.[0-9]*; do
    n=$(grep -m1 '^summary:' "$f" | awk '{print $2}')
    ir=$((ir + ${n:-0}))
  done
  echo "| ${t^^} | $N | $P | $ir | $((ir / N)) |"
done
