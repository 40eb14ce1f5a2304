#!/usr/bin/env bash
# Persistence benchmark, Lattice and redis-server side by side in one run:
#  1. redis-benchmark SET/INCR/LPUSH at P=1 and P=16 with persistence off, appendfsync everysec
#     and appendfsync always (the ratio everysec/off is the cost of durability), and the
#     server's CPU time per request (all its threads, /proc/<pid>/task/*/schedstat):
#     on a shared machine throughput is noisy, CPU per request much less so;
#  2. recovery of 1M keys: Lattice from its snapshot and from its log alone, Redis from its RDB
#     and from its AOF; bytes on disk per key.
# Usage: scripts/persist-bench.sh [requests per test, default 200000] [keys, default 1000000]
# Environment: PORT (default 7390), SKIP_RECOVERY=1 (part 1 only).
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-200000}
KEYS=${2:-1000000}
LATTICE=./target/release/lattice-server
WORK=$(mktemp -d /tmp/persist-bench.XXXXXX)
PORT=${PORT:-7390}
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$WORK"' EXIT

start() { # server mode dir
    local server=$1 mode=$2 dir=$3
    mkdir -p "$dir"
    if [ "$server" = lattice ]; then
        if [ "$mode" = off ]; then
            printf 'appendonly = "no"\n' > "$dir.toml"
        else
            printf 'appendonly = "yes"\nappendfsync = "%s"\n' "$mode" > "$dir.toml"
        fi
        $LATTICE --port $PORT --dir "$dir" --config "$dir.toml" > "$dir.log" 2>&1 &
        SERVER_PID=$!
    else
        local ao=yes fs=$mode
        if [ "$mode" = off ]; then ao=no; fs=everysec; fi
        redis-server --port $PORT --bind 127.0.0.1 --dir "$dir" --save '' --appendonly $ao \
            --appendfsync $fs --logfile "$dir.log" &
        SERVER_PID=$!
    fi
    for _ in $(seq 200); do redis-cli -p $PORT ping >/dev/null 2>&1 && return; sleep 0.05; done
    echo "server did not start"; cat "$dir.log"; exit 1
}

stop() { redis-cli -p $PORT shutdown nosave >/dev/null 2>&1 || true; wait 2>/dev/null || true; }

# Nanoseconds of CPU the server's threads have run (schedstat: exact, where utime+stime counts
# 10 ms ticks, too coarse for a short run at P=16).
cpu_ns() { cat /proc/"$SERVER_PID"/task/*/schedstat | awk '{s += $1} END {printf "%.0f\n", s}'; }

declare -A R
echo "== throughput (redis-benchmark -n $N -c 50 -r 100000, requests/s) and server CPU per request"
echo "   (load average at start: $(cut -d' ' -f1-3 /proc/loadavg))"
for P in 1 16; do
    for mode in off everysec always; do
        for server in lattice redis; do
            dir=$WORK/$server-$mode-$P
            start $server $mode "$dir"
            for t in set incr lpush; do
                c0=$(cpu_ns)
                out=$(redis-benchmark -p $PORT -n "$N" -c 50 -r 100000 -P $P -t $t --csv -q 2>/dev/null)
                c1=$(cpu_ns)
                while IFS=, read -r name rps avg min p50 p95 p99 max; do
                    name=${name//\"/}; rps=${rps//\"/}; p99=${p99//\"/}
                    case $name in SET|INCR|LPUSH) ;; *) continue ;; esac
                    R[$server,$mode,$P,$name]=$rps
                    R[$server,$mode,$P,$name,p99]=$p99
                    R[$server,$mode,$P,$name,cpu]=$(echo "($c1 - $c0) / 1000 / $N" | bc -l)
                done <<< "$out"
            done
            stop
        done
    done
    printf '\nP=%s %-6s | %10s %10s %10s %6s | %10s %10s %10s %6s | %8s %8s\n' $P cmd \
        "lat off" "lat es" "lat always" "es/off" "redis off" "r es" "r always" "es/off" \
        "p99 l.al" "p99 r.al"
    for c in SET INCR LPUSH; do
        lo=${R[lattice,off,$P,$c]}; le=${R[lattice,everysec,$P,$c]}; la=${R[lattice,always,$P,$c]}
        ro=${R[redis,off,$P,$c]}; re=${R[redis,everysec,$P,$c]}; ra=${R[redis,always,$P,$c]}
        printf '    %-6s | %10s %10s %10s %6.3f | %10s %10s %10s %6.3f | %8s %8s\n' $c \
            "$lo" "$le" "$la" "$(echo "$le / $lo" | bc -l)" "$ro" "$re" "$ra" "$(echo "$re / $ro" | bc -l)" \
            "${R[lattice,always,$P,$c,p99]}" "${R[redis,always,$P,$c,p99]}"
    done
    printf '  server CPU us/request | %10s %10s %10s %6s | %10s %10s %10s %6s\n' \
        "lat off" "lat es" "lat always" "off/es" "redis off" "r es" "r always" "off/es"
    for c in SET INCR LPUSH; do
        lo=${R[lattice,off,$P,$c,cpu]}; le=${R[lattice,everysec,$P,$c,cpu]}; la=${R[lattice,always,$P,$c,cpu]}
        ro=${R[redis,off,$P,$c,cpu]}; re=${R[redis,everysec,$P,$c,cpu]}; ra=${R[redis,always,$P,$c,cpu]}
        printf '    %-6s                | %10.2f %10.2f %10.2f %6.3f | %10.2f %10.2f %10.2f %6.3f\n' $c \
            "$lo" "$le" "$la" "$(echo "$lo / $le" | bc -l)" "$ro" "$re" "$ra" "$(echo "$ro / $re" | bc -l)"
    done
done
echo "   (load average at end: $(cut -d' ' -f1-3 /proc/loadavg))"
[ "${SKIP_RECOVERY:-0}" = 1 ] && exit 0

echo
echo "== recovery of $KEYS keys (SET key:<i> <16-byte value>) =="
gen() { python3 - "$KEYS" <<'EOF'
import sys
n = int(sys.argv[1])
out = sys.stdout.buffer
for i in range(n):
    k = b"key:%d" % i
    v = b"value-%010d" % i
    out.write(b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n" % (len(k), k, len(v), v))
EOF
}
gen > "$WORK/load.resp"
ms_since() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }
wait_ready() { for _ in $(seq 2000); do redis-cli -p $PORT ping 2>/dev/null | grep -q PONG && return; sleep 0.01; done; }

for server in lattice redis; do
    dir=$WORK/rec-$server
    start $server everysec "$dir"
    redis-cli -p $PORT --pipe < "$WORK/load.resp" > /dev/null
    redis-cli -p $PORT dbsize
    log_bytes=$(du -sb "$dir" | cut -f1)
    # Log only (Lattice: records; Redis: AOF without rewrite is its base + incr files).
    if [ "$server" = lattice ]; then kill -TERM %% 2>/dev/null || redis-cli -p $PORT shutdown >/dev/null 2>&1 || true; else redis-cli -p $PORT shutdown >/dev/null 2>&1 || true; fi
    wait 2>/dev/null || true
    t=$(date +%s%N); start $server everysec "$dir"; wait_ready; log_ms=$(ms_since $t)
    keys=$(redis-cli -p $PORT dbsize)
    # Compact: snapshot (Lattice) / BGREWRITEAOF (Redis, RDB preamble).
    redis-cli -p $PORT bgrewriteaof >/dev/null
    for _ in $(seq 600); do
        redis-cli -p $PORT info persistence | grep -q 'aof_rewrite_in_progress:0' && \
          ! redis-cli -p $PORT info persistence | grep -q 'aof_rewrite_scheduled:1' && break; sleep 0.1; done
    sleep 0.5
    snap_bytes=$(du -sb "$dir" | cut -f1)
    redis-cli -p $PORT shutdown >/dev/null 2>&1 || true; wait 2>/dev/null || true
    t=$(date +%s%N); start $server everysec "$dir"; wait_ready; snap_ms=$(ms_since $t)
    keys2=$(redis-cli -p $PORT dbsize)
    stop
    # Redis's RDB alone (appendonly no): SAVE then load.
    rdb_ms=-; rdb_bytes=-
    if [ "$server" = redis ]; then
        rdir=$WORK/rdb; start redis off "$rdir"; redis-cli -p $PORT --pipe < "$WORK/load.resp" > /dev/null
        redis-cli -p $PORT save > /dev/null; rdb_bytes=$(du -sb "$rdir" | cut -f1); stop
        t=$(date +%s%N); start redis off "$rdir"; wait_ready; rdb_ms=$(ms_since $t); stop
    fi
    echo "$server: log-only recovery $log_ms ms ($keys keys, $log_bytes bytes = $((log_bytes / KEYS)) B/key); after compaction $snap_ms ms ($keys2 keys, $snap_bytes bytes = $((snap_bytes / KEYS)) B/key); RDB $rdb_ms ms ($rdb_bytes bytes)"
    grep -h 'data loaded\|DB loaded\|Done loading' "$dir.log" | tail -2 || true
done
