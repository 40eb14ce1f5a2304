#!/usr/bin/env bash
# TLS SET/GET throughput and server CPU per request: lattice-server against redis-server, both
# serving TLS with client certificates required (tls-auth-clients yes), measured with
# redis-benchmark --tls at P=1 and P=16; the same loads over plaintext for reference.
#
#   scripts/tls-bench.sh [--requests N] [--clients C] [--data-size D] [--threads T]
#
# CPU is the server process's user+system time (all threads) from /proc/<pid>/stat before and
# after each run, divided by the requests. Both servers run without persistence (`appendonly
# no`, `save ''`) and, by default, on one event loop thread (Redis's io-threads default is 1).
# Certificates are made by scripts/tls-certs.sh (openssl) in a temporary directory. Ports:
# $BASE_PORT (default 7300) and the next three.
# Prints one markdown table row per run, with the load average at its start.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
N=200000
C=50
DATA=64
THREADS=1
BASE_PORT=${BASE_PORT:-7300}
while [ $# -gt 0 ]; do
    case "$1" in
        --requests) N="$2"; shift 2 ;;
        --clients) C="$2"; shift 2 ;;
        --data-size) DATA="$2"; shift 2 ;;
        --threads) THREADS="$2"; shift 2 ;;
        *) sed -n '2,13p' "$0"; exit 2 ;;
    esac
done
for tool in redis-server redis-benchmark redis-cli openssl; do
    command -v "$tool" >/dev/null || { echo "$tool is required (apt-get install redis-server redis-tools openssl)"; exit 2; }
done
BIN="${LATTICE_BIN:-$ROOT/target/release/lattice-server}"
[ -x "$BIN" ] || { echo "no $BIN: cargo build --release -p lattice-server"; exit 2; }

WORK=$(mktemp -d)
PIDS=()
cleanup() {
    for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT

"$ROOT/scripts/tls-certs.sh" "$WORK"
TLS_CLIENT=(--tls --cert "$WORK/client.crt" --key "$WORK/client.key" --cacert "$WORK/ca.crt")

# --- servers ------------------------------------------------------------------------------
L_PORT=$BASE_PORT; L_TLS=$((BASE_PORT + 1)); R_PORT=$((BASE_PORT + 2)); R_TLS=$((BASE_PORT + 3))
cat > "$WORK/lattice.toml" <<EOF
appendonly = "no"
tls-port = $L_TLS
tls-cert-file = "$WORK/server.crt"
tls-key-file = "$WORK/server.key"
tls-ca-cert-file = "$WORK/ca.crt"
tls-auth-clients = "yes"
EOF
"$BIN" --config "$WORK/lattice.toml" --port "$L_PORT" --bind 127.0.0.1 --dir "$WORK/lattice" \
    --threads "$THREADS" >"$WORK/lattice.log" 2>&1 &
PIDS+=($!); L_PID=$!
redis-server --port "$R_PORT" --tls-port "$R_TLS" --bind 127.0.0.1 --save '' --appendonly no \
    --tls-cert-file "$WORK/server.crt" --tls-key-file "$WORK/server.key" \
    --tls-ca-cert-file "$WORK/ca.crt" --tls-auth-clients yes --io-threads "$THREADS" \
    --dir "$WORK" --logfile "$WORK/redis.log" &
PIDS+=($!); R_PID=$!
for port in "$L_PORT" "$R_PORT"; do
    for _ in $(seq 1 100); do
        redis-cli -p "$port" ping >/dev/null 2>&1 && break
        sleep 0.1
    done
done
for port in "$L_TLS" "$R_TLS"; do
    [ "$(redis-cli -p "$port" "${TLS_CLIENT[@]}" ping 2>&1)" = PONG ] \
        || { echo "TLS port $port does not answer"; cat "$WORK"/*.log; exit 1; }
done

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
TICK_US=$((1000000 / $(getconf CLK_TCK)))

echo "| server | transport | P | test | requests/s | server CPU µs/request | load average (1 min) |"
echo "|---|---|---|---|---|---|---|"
for P in 1 16; do
    for transport in tls plain; do
        for server in lattice redis; do
            if [ "$server" = lattice ]; then pid=$L_PID; else pid=$R_PID; fi
            case "$server/$transport" in
                lattice/tls) args=(-p "$L_TLS" "${TLS_CLIENT[@]}") ;;
                lattice/plain) args=(-p "$L_PORT") ;;
                redis/tls) args=(-p "$R_TLS" "${TLS_CLIENT[@]}") ;;
                redis/plain) args=(-p "$R_PORT") ;;
            esac
            for t in set get; do
                # A short warm-up (connections, allocator), then the measured run.
                redis-benchmark "${args[@]}" -c "$C" -d "$DATA" -r 100000 -P "$P" -n 20000 \
                    -t "$t" -q >/dev/null 2>&1
                load=$(cut -d' ' -f1 /proc/loadavg)
                before=$(cpu_ticks "$pid")
                out=$(redis-benchmark "${args[@]}" -c "$C" -d "$DATA" -r 100000 -P "$P" -n "$N" \
                    -t "$t" -q 2>&1 | tr '\r' '\n' | grep -E 'requests per second' | tail -1)
                after=$(cpu_ticks "$pid")
                rps=$(echo "$out" | sed -E 's/.*: ([0-9.]+) requests per second.*/\1/')
                cpu=$(awk -v d=$((after - before)) -v t="$TICK_US" -v n="$N" \
                    'BEGIN { printf "%.2f", d * t / n }')
                echo "| $server | $transport | $P | ${t^^} | $rps | $cpu | $load |"
            done
        done
    done
done
