#!/usr/bin/env bash
# Instructions per request, counted by callgrind: repeatable whatever else the machine is doing,
# so a hot-path change can be judged without benchmark noise.
#
#   scripts/callgrind.sh [--server lattice|redis] [--pipeline P] [--requests N] [--tests set,get]
#                        [--cluster] [--keys K] [--data-size D] [--tls] [--appendonly yes|no]
#                        [--appendfsync always|everysec|no]
#
# --appendonly / --appendfsync: Lattice's persistence settings (default: its own defaults,
# appendonly yes and everysec), so the cost of persistence is the difference of two runs.
#
# --cluster: the lattice server under callgrind is node 1 of a 3-node cluster (the two other
# replicas run normally), so the count is the writer's cost with replication on.
# --tls: the load goes to the server's TLS port (client certificates required, made by
# scripts/tls-certs.sh), so the count includes the encryption; with --cluster the replica links
# run over TLS too (tls-replication).
#
# Starts the server under `valgrind --tool=callgrind` on a free 127.0.0.1 port, warms it with the
# same load, zeroes the counters (callgrind_control -z), runs redis-benchmark (50 clients,
# 64-byte values, -r 100000), dumps the counters and divides the instructions (Ir) by the
# requests. Startup and warm-up are not counted. Output: one line per command, and the dumps
# under target/callgrind/ for callgrind_annotate. PORT_RANGE=LOW-HIGH: ports from that range only.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SERVER=lattice
P=16
N=100000
TESTS=set,get
CLUSTER=0
KEYS=100000
DATA=64
TLS=0
APPENDONLY=
APPENDFSYNC=
while [ $# -gt 0 ]; do
    case "$1" in
        --server) SERVER="$2"; shift 2 ;;
        --pipeline) P="$2"; shift 2 ;;
        --requests) N="$2"; shift 2 ;;
        --tests) TESTS="$2"; shift 2 ;;
        --cluster) CLUSTER=1; shift ;;
        --keys) KEYS="$2"; shift 2 ;;
        --data-size) DATA="$2"; shift 2 ;;
        --tls) TLS=1; shift ;;
        --appendonly) APPENDONLY="$2"; shift 2 ;;
        --appendfsync) APPENDFSYNC="$2"; shift 2 ;;
        *) sed -n '2,18p' "$0"; exit 2 ;;
    esac
done
command -v valgrind >/dev/null || { echo "valgrind is required (apt-get install valgrind)"; exit 2; }
command -v callgrind_control >/dev/null || { echo "callgrind_control is required (valgrind)"; exit 2; }
OUT="$ROOT/target/callgrind"
mkdir -p "$OUT"
# PORT_RANGE=LOW-HIGH takes every port from that range (for hosts whose users each have a
# range of their own), each once per run (free_port runs in $(...), so a file remembers them).
PORTS_TAKEN=$(mktemp)
free_port() {
    if [ -n "${PORT_RANGE:-}" ]; then
        local p
        for ((p = ${PORT_RANGE%-*}; p <= ${PORT_RANGE#*-}; p++)); do
            if ! grep -qx "$p" "$PORTS_TAKEN" && python3 -c 'import socket,sys; s=socket.socket(); s.bind(("127.0.0.1",int(sys.argv[1])))' "$p" 2>/dev/null; then
                echo "$p" >>"$PORTS_TAKEN"
                echo "$p"
                return 0
            fi
        done
        echo "no free port in $PORT_RANGE" >&2
        return 1
    fi
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
PORT=${CALLGRIND_PORT:-$(free_port)}
BENCH_TARGET=(-p "$PORT")
if [ "$TLS" = 1 ]; then
    CERTS=$(mktemp -d)
    "$ROOT/scripts/tls-certs.sh" "$CERTS"
    TLS_PORT=$(free_port)
    TLS_SERVER=(--tls-port "$TLS_PORT" --tls-cert-file "$CERTS/server.crt"
        --tls-key-file "$CERTS/server.key" --tls-ca-cert-file "$CERTS/ca.crt")
    BENCH_TARGET=(-p "$TLS_PORT" --tls --cert "$CERTS/client.crt" --key "$CERTS/client.key"
        --cacert "$CERTS/ca.crt")
fi
case "$SERVER" in
    lattice)
        BIN="${LATTICE_BIN:-$ROOT/target/release/lattice-server}"
        [ -x "$BIN" ] || { echo "no $BIN: cargo build --release -p lattice-server"; exit 2; }
        DIR=$(mktemp -d)
        CMD=("$BIN" --port "$PORT" --bind 127.0.0.1 --dir "$DIR" --threads 1 ${TLS_SERVER[@]+"${TLS_SERVER[@]}"})
        if [ -n "$APPENDONLY$APPENDFSYNC" ]; then
            {
                [ -n "$APPENDONLY" ] && printf 'appendonly = "%s"\n' "$APPENDONLY"
                [ -n "$APPENDFSYNC" ] && printf 'appendfsync = "%s"\n' "$APPENDFSYNC"
            } > "$DIR.toml"
            CMD+=(--config "$DIR.toml")
        fi
        if [ "$CLUSTER" = 1 ]; then
            CPORTS=("$(free_port)" "$(free_port)" "$(free_port)")
            SEEDS="127.0.0.1:${CPORTS[0]},127.0.0.1:${CPORTS[1]},127.0.0.1:${CPORTS[2]}"
            export LATTICE_CLUSTER_SECRET="callgrind-$RANDOM"
            CMD+=(--node-id 1 --cluster-port "${CPORTS[0]}" --seeds "$SEEDS")
            LINK_TLS=()
            if [ "$TLS" = 1 ]; then
                LINK_TLS=(--tls-replication yes --tls-cert-file "$CERTS/server.crt"
                    --tls-key-file "$CERTS/server.key" --tls-ca-cert-file "$CERTS/ca.crt")
                CMD+=(--tls-replication yes)
            fi
            REPLICAS=()
            for i in 2 3; do
                "$BIN" --port "$(free_port)" --bind 127.0.0.1 --dir "$DIR/n$i" --node-id "$i" \
                    --cluster-port "${CPORTS[$((i - 1))]}" --seeds "$SEEDS" \
                    ${LINK_TLS[@]+"${LINK_TLS[@]}"} >"$OUT/replica$i.log" 2>&1 &
                REPLICAS+=($!)
            done
        fi ;;
    redis)
        CMD=(redis-server --port "$PORT" --bind 127.0.0.1 --save '' --appendonly no ${TLS_SERVER[@]+"${TLS_SERVER[@]}"}) ;;
    *) echo "unknown server $SERVER"; exit 2 ;;
esac
valgrind --tool=callgrind --callgrind-out-file="$OUT/$SERVER.%p.out" "${CMD[@]}" \
    >"$OUT/$SERVER.server.log" 2>&1 &
PID=$!
trap 'kill $PID ${REPLICAS[*]:-} 2>/dev/null || true; wait $PID 2>/dev/null || true; rm -f "$PORTS_TAKEN"' EXIT
for _ in $(seq 1 300); do
    redis-cli -p "$PORT" ping >/dev/null 2>&1 && break
    sleep 0.1
done
for t in ${TESTS//,/ }; do
    bench() { redis-benchmark "${BENCH_TARGET[@]}" -c 50 -d "$DATA" -r "$KEYS" -P "$P" -n "$1" -t "$t" -q >/dev/null; }
    bench 20000
    callgrind_control -z "$PID" >/dev/null 2>&1
    bench "$N"
    rm -f "$OUT/$SERVER.$PID.out."*
    callgrind_control -d "$t" "$PID" >/dev/null 2>&1
    sleep 0.5
    DUMP=$(ls -t "$OUT/$SERVER.$PID.out".* | head -1)
    # One dump covers every thread (callgrind is not asked to separate them).
    IR=$(grep -m1 '^summary:' "$DUMP" | awk '{print $2}')
    [ -n "$IR" ] || { echo "no summary in $DUMP"; exit 1; }
    printf '%-8s %-6s P=%-3s %8d instructions/request (%d requests)%s%s\n' "$SERVER" "$t" "$P" \
        $((IR / N)) "$N" "$([ "$CLUSTER" = 1 ] && echo ', writer of a 3-node cluster')" \
        "$([ "$TLS" = 1 ] && echo ', over TLS')"
    cp "$DUMP" "$OUT/$SERVER.$t.P$P.out"
done
