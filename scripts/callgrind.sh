#!/usr/bin/env bash
# Instructions per request, counted by callgrind: repeatable whatever else the machine is doing,
# so a hot-path change can be judged without benchmark noise.
#
#   scripts/callgrind.sh [--server lattice|redis] [--pipeline P] [--requests N] [--tests set,get]
#
# Starts the server under `valgrind --tool=callgrind` on a free 127.0.0.1 port, warms it with the
# same load, zeroes the counters (callgrind_control -z), runs redis-benchmark (50 clients,
# 64-byte values, -r 100000), dumps the counters and divides the instructions (Ir) by the
# requests. Startup and warm-up are not counted. Output: one line per command, and the dumps
# under target/callgrind/ for callgrind_annotate.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SERVER=lattice
P=16
N=100000
TESTS=set,get
while [ $# -gt 0 ]; do
    case "$1" in
        --server) SERVER="$2"; shift 2 ;;
        --pipeline) P="$2"; shift 2 ;;
        --requests) N="$2"; shift 2 ;;
        --tests) TESTS="$2"; shift 2 ;;
        *) sed -n '2,11p' "$0"; exit 2 ;;
    esac
done
command -v valgrind >/dev/null || { echo "valgrind is required (apt-get install valgrind)"; exit 2; }
command -v callgrind_control >/dev/null || { echo "callgrind_control is required (valgrind)"; exit 2; }
OUT="$ROOT/target/callgrind"
mkdir -p "$OUT"
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
case "$SERVER" in
    lattice)
        BIN="${LATTICE_BIN:-$ROOT/target/release/lattice-server}"
        [ -x "$BIN" ] || { echo "no $BIN: cargo build --release -p lattice-server"; exit 2; }
        DIR=$(mktemp -d)
        CMD=("$BIN" --port "$PORT" --bind 127.0.0.1 --dir "$DIR" --threads 1) ;;
    redis)
        CMD=(redis-server --port "$PORT" --bind 127.0.0.1 --save '' --appendonly no) ;;
    *) echo "unknown server $SERVER"; exit 2 ;;
esac
valgrind --tool=callgrind --callgrind-out-file="$OUT/$SERVER.%p.out" "${CMD[@]}" \
    >"$OUT/$SERVER.server.log" 2>&1 &
PID=$!
trap 'kill $PID 2>/dev/null || true; wait $PID 2>/dev/null || true' EXIT
for _ in $(seq 1 300); do
    redis-cli -p "$PORT" ping >/dev/null 2>&1 && break
    sleep 0.1
done
for t in ${TESTS//,/ }; do
    bench() { redis-benchmark -p "$PORT" -c 50 -d 64 -r 100000 -P "$P" -n "$1" -t "$t" -q >/dev/null; }
    bench 20000
    callgrind_control -z "$PID" >/dev/null 2>&1
    bench "$N"
    rm -f "$OUT/$SERVER.$PID.out."*
    callgrind_control -d "$t" "$PID" >/dev/null 2>&1
    sleep 0.5
    DUMP=$(ls -t "$OUT/$SERVER.$PID.out".* | head -1)
    IR=$(grep -m1 '^summary:' "$DUMP" | awk '{print $2}')
    # Several threads dump separately (one file each with --separate-threads); sum them.
    TOTAL=0
    for f in "$OUT/$SERVER.$PID.out".*; do
        s=$(grep -m1 '^summary:' "$f" | awk '{print $2}')
        TOTAL=$((TOTAL + s))
    done
    [ -n "$IR" ] || { echo "no summary in $DUMP"; exit 1; }
    printf '%-8s %-6s P=%-3s %8d instructions/request (%d requests)\n' "$SERVER" "$t" "$P" $((TOTAL / N)) "$N"
    cp "$DUMP" "$OUT/$SERVER.$t.P$P.out"
done
