#!/usr/bin/env bash
# Runs suites of Redis 7.0.15's own Tcl test suite (from Debian's source package) against
# lattice-server and/or redis-server, in external-server mode, and tabulates [ok]/[err] counts.
#
#   scripts/compat.sh [--server lattice|redis|both] [--suites "unit/type/string unit/expire ..."]
#                     [--quick] [--strict] [--skip-lattice NAME] [--timeout SECS] [--lattice-bin PATH]
#                     [--redis-bin PATH] [--build] [--no-durable] [--lenient] [--with-save]
#                     [--unskip-first-block] [--with-debug] [--ports LO]
#
# Every suite gets a FRESH server on a free port on 127.0.0.1, which is stopped afterwards.
# Output of each run: target/compat/<server>/<suite>.log, the [err] lines with the start of
# their reasons in target/compat/<server>/<suite>.failed, the server's own output in
# target/compat/<server>/<suite>.server.log, and the table in target/compat/summary.txt.
#
# Options:
#   --server S      lattice, redis or both (default both)
#   --suites LIST   space-separated suite names (default: the eleven suites of the issue:
#                   string, incr, list, hash, set, zset, expire, keyspace, multi, pubsub, scan)
#   --quick         also skip tests tagged "slow" and use a 180 s per-suite timeout
#   --strict        exit non-zero if lattice has any [err], not only on aborted suites
#   --skip-lattice NAME  skip the test named NAME on lattice only (runtest --skiptest); for a
#                   test that cannot apply to Lattice, documented where the option is used.
#                   Repeatable; Redis still runs it, so its ok count stays one higher.
#                   The tests in LATTICE_SKIPS below are skipped on lattice as well (each
#                   with its reason, printed before the run) unless --no-skips is given.
#   --no-skips      run the tests of LATTICE_SKIPS on lattice too
#   --timeout SECS  per-suite wall-clock limit (default 600); a suite killed by it is aborted
#   --ports LO      keep to the 40 ports LO..LO+39 (for a machine shared with others who
#                   were given port ranges): the server under test takes a free one of
#                   LO..LO+7, runtest's own test server one of LO+8..LO+39 (--baseport LO+40;
#                   runtest also probes each candidate + 10000 for a moment). Default: random
#                   free ports from 20000 up.
#   --build         run `cargo build --release -p lattice-server` first
#   --no-durable    do not pass --durable to runtest (then an exception inside a test aborts
#                   the suite instead of being counted as [err])
#   --with-save     also run the tests tagged needs:save (SAVE against the running server;
#                   those that also need DEBUG RELOAD stay out with needs:debug). Restarts
#                   after a save are checked by scripts/save-test.py, which owns its servers.
#   --with-debug    also run the tests tagged needs:debug. Lattice's DEBUG has RELOAD [NOSAVE]
#                   and LOADAOF (a real reload from the data directory) and refuses every other
#                   subcommand, so use it on suites whose needs:debug tests only reload (the
#                   others fail on Lattice; --skip-lattice names those that cannot apply).
#   --lenient       run from a copy of the suite whose external-server setup tolerates a
#                   failing `FUNCTION FLUSH` (the harness sends it before every start_server
#                   block; without FUNCTION support every suite aborts before its first test)
#   --unskip-first-block  run from a copy of the suites whose FIRST start_server block loses
#                   its external:skip tag. Such a block (unit/acl's main one) is skipped in
#                   external mode because its tests change server-wide state (users, the
#                   default user's password); every suite gets a fresh server here, so they
#                   can run. Later blocks (which need config files or restarts) stay skipped.
#
# Aborted column: "no" (completed) or why not: exception (the test client died on an
# uncaught error), block-exception (with --durable: an error outside any test skipped the
# rest of a start_server block), timeout, crash (server process gone), io-error (a
# connection to the server failed), incomplete (no final summary), nostart (server did
# not answer PING).
#
# Exit status: 1 if a lattice suite aborted (or, with --strict, had an [err]); 2 on setup
# problems (no source, no binary); 0 otherwise.

set -u -o pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SRC_CACHE="$ROOT/target/redis-src"
SRC_DIR="$SRC_CACHE/redis"
OUT_DIR="$ROOT/target/compat"

SERVER=both
SUITES="unit/type/string unit/type/incr unit/type/list unit/type/hash unit/type/set unit/type/zset unit/expire unit/keyspace unit/multi unit/pubsub unit/scan"
QUICK=0
STRICT=0
SKIP_LATTICE=()
TIMEOUT=600
TIMEOUT_SET=0
BUILD=0
DURABLE=1
LENIENT=0
UNSKIP=0
WITH_SAVE=0
WITH_DEBUG=0
NO_SKIPS=0
PORT_LO=""
LATTICE_BIN="$ROOT/target/release/lattice-server"
REDIS_BIN="$(command -v redis-server || echo /usr/bin/redis-server)"

usage() { sed -n '2,59p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }

while [ $# -gt 0 ]; do
    case "$1" in
        --server) SERVER="$2"; shift 2 ;;
        --suites) SUITES="$2"; shift 2 ;;
        --quick) QUICK=1; shift ;;
        --strict) STRICT=1; shift ;;
        --skip-lattice) SKIP_LATTICE+=(--skiptest "$2"); shift 2 ;;
        --no-skips) NO_SKIPS=1; shift ;;
        --timeout) TIMEOUT="$2"; TIMEOUT_SET=1; shift 2 ;;
        --ports) PORT_LO="$2"; shift 2 ;;
        --build) BUILD=1; shift ;;
        --no-durable) DURABLE=0; shift ;;
        --lenient) LENIENT=1; shift ;;
        --unskip-first-block) UNSKIP=1; shift ;;
        --with-save) WITH_SAVE=1; shift ;;
        --with-debug) WITH_DEBUG=1; shift ;;
        --lattice-bin) LATTICE_BIN="$2"; shift 2 ;;
        --redis-bin) REDIS_BIN="$2"; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        *) echo "compat.sh: unknown argument: $1" >&2; usage >&2; exit 2 ;;
    esac
done

case "$SERVER" in
    lattice) SERVERS="lattice" ;;
    redis) SERVERS="redis" ;;
    both) SERVERS="lattice redis" ;;
    *) echo "compat.sh: --server must be lattice, redis or both" >&2; exit 2 ;;
esac
if [ "$QUICK" = 1 ] && [ "$TIMEOUT_SET" = 0 ]; then
    TIMEOUT=180
fi

TAGS="-needs:repl -needs:config-maxmemory -needs:reset"
if [ "$WITH_DEBUG" = 0 ]; then
    TAGS="-needs:debug $TAGS"
fi
if [ "$WITH_SAVE" = 0 ]; then
    TAGS="$TAGS -needs:save"
fi
if [ "$QUICK" = 1 ]; then
    TAGS="$TAGS -slow"
fi

log() { echo "compat.sh: $*" >&2; }

# ---------------------------------------------------------------------------------------
# Tests skipped on Lattice, one per line: "suite|test name|reason". Applied to the suites a
# run includes (lattice only; redis-server runs them, so its ok count is higher by these),
# and printed before the run. "cannot apply" marks a test of something Lattice does not have
# by design; "not yet" marks a gap still open, with what closes it.
# ---------------------------------------------------------------------------------------
LATTICE_SKIPS=(
    "unit/other|EXPIRES after AOF reload (without rewrite)|cannot apply: sets aof-use-rdb-preamble; Lattice's log has no RDB preamble"
    "unit/functions|FUNCTION - test debug reload different options|cannot apply: DEBUG RELOAD NOFLUSH / MERGE; a Lattice reload always replaces the dataset and refuses those options"
    "unit/functions|FUNCTION - test debug reload with nosave and noflush|cannot apply: DEBUG RELOAD NOFLUSH; as above"
    "unit/acl|ACLs can block all DEBUG subcommands except one|cannot apply: rules on DEBUG subcommands Lattice does not have"
    "unit/acl|ACL GETUSER is able to translate back command permissions|cannot apply: the rules name DEBUG subcommands Lattice does not have"
    "unit/acl|ACL #5998 regression: memory leaks adding / removing subcommands|cannot apply: adds and removes DEBUG subcommands Lattice does not have"
    "unit/introspection|CONFIG SET rollback on apply error|cannot apply: sets port at run time and expects the listener to move; Lattice's port is fixed at start (its listeners are made once, before the event loops start)"
    "unit/introspection-2|COMMAND LIST FILTERBY PATTERN - list all commands/subcommands|cannot apply: expects CONFIG REWRITE; Lattice's config file is TOML of its own options, not redis.conf, so there is no file CONFIG SET's parameters could be rewritten into"
    "unit/introspection-2|MIGRATE command is marked with movablekeys|cannot apply: Lattice has no MIGRATE (moving keys between servers; a cluster places its keys itself), so COMMAND INFO MIGRATE is nil"
    "unit/dump|RESTORE fail with invalid payload size|cannot apply: redis-server 7.0.15 fails it too: the test expects 'Bad data format' for a payload claiming RDB version 12, which 7.0 (and Lattice) reject first as 'DUMP payload version or checksum are wrong'"
)

# Adds the skips for the suites of this run to SKIP_LATTICE and prints them.
apply_skips() {
    local line suite name reason n=0
    [ "$NO_SKIPS" = 1 ] && return 0
    for line in "${LATTICE_SKIPS[@]}"; do
        suite="${line%%|*}"
        name="${line#*|}"; name="${name%%|*}"
        reason="${line##*|}"
        [[ " $SUITES " == *" $suite "* ]] || continue
        SKIP_LATTICE+=(--skiptest "$name")
        SKIPPED_IN[$suite]=$(( ${SKIPPED_IN[$suite]:-0} + 1 ))
        echo "compat.sh: skipped on lattice: $suite: \"$name\" ($reason)"
        n=$((n + 1))
    done
    [ "$n" -gt 0 ] && echo "compat.sh: $n test(s) skipped on lattice (--no-skips runs them)"
    return 0
}
declare -A SKIPPED_IN

# ---------------------------------------------------------------------------------------
# Redis 7.0.15 source (with tests/) from Debian, cached in target/redis-src/.
# ---------------------------------------------------------------------------------------
ensure_tools() {
    local missing=""
    command -v tclsh8.6 >/dev/null 2>&1 || command -v tclsh >/dev/null 2>&1 || missing="$missing tcl"
    command -v dpkg-source >/dev/null 2>&1 || missing="$missing dpkg-dev"
    if [ -n "$missing" ]; then
        log "installing:$missing"
        apt-get install -y $missing >/dev/null || { log "cannot install$missing"; exit 2; }
    fi
}

ensure_deb_src() {
    if grep -rqsE '^(Types:.*deb-src|deb-src )' /etc/apt/sources.list /etc/apt/sources.list.d/; then
        return 0
    fi
    local src=/etc/apt/sources.list.d/debian.sources dst=/etc/apt/sources.list.d/lattice-src.sources
    log "adding deb-src entries in $dst"
    if [ -f "$src" ]; then
        # Same URIs/Suites/Components/Signed-By as the binary entries.
        sed -e 's/^Types:[[:space:]]*deb[[:space:]]*$/Types: deb-src/' "$src" > "$dst"
    else
        cat > "$dst" <<'EOF'
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb-src
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
    fi
    apt-get update >/dev/null || { log "apt-get update failed"; exit 2; }
}

ensure_source() {
    if [ -x "$SRC_DIR/runtest" ] && [ -f "$SRC_DIR/tests/test_helper.tcl" ]; then
        return 0
    fi
    ensure_tools
    ensure_deb_src
    mkdir -p "$SRC_CACHE"
    local ver
    ver="$(dpkg-query -W -f='${source:Version}' redis-server 2>/dev/null || true)"
    (
        cd "$SRC_CACHE" || exit 1
        rm -rf redis redis_*.dsc redis_*.tar.* 2>/dev/null
        if [ -n "$ver" ] && apt-get source --download-only "redis=$ver" >/dev/null 2>&1; then
            :
        else
            apt-get source --download-only redis >/dev/null 2>&1 || exit 1
        fi
        dpkg-source -x redis_*.dsc redis >/dev/null 2>&1 || exit 1
    ) || { log "could not fetch the redis source package"; rm -rf "$SRC_DIR"; exit 2; }
    local v
    v="$(sed -n 's/.*REDIS_VERSION "\(.*\)"/\1/p' "$SRC_DIR/src/version.h")"
    log "redis source $v ready in $SRC_DIR"
    case "$v" in 7.0.*) ;; *) log "warning: expected 7.0.x, got $v" ;; esac
}

# A copy of the test tree to patch (--lenient, --unskip-first-block).
make_run_copy() {
    local dst="$SRC_CACHE/patched"
    rm -rf "$dst"
    mkdir -p "$dst"
    cp -a "$SRC_DIR/runtest" "$SRC_DIR/tests" "$dst/"
    # src/ is only consulted for binaries the external mode does not use; link it anyway.
    ln -s "$SRC_DIR/src" "$dst/src"
    RUN_DIR="$dst"
}

# run_external_server_test ignores a failing FUNCTION FLUSH.
make_lenient() {
    sed -i 's/^\([[:space:]]*\)r function flush$/\1catch {r function flush}/' \
        "$RUN_DIR/tests/support/server.tcl"
    grep -q 'catch {r function flush}' "$RUN_DIR/tests/support/server.tcl" \
        || { log "could not patch server.tcl for --lenient"; exit 2; }
}

# The first start_server line of each suite loses its external:skip tag.
unskip_first_blocks() {
    local suite f n
    for suite in $SUITES; do
        f="$RUN_DIR/tests/$suite.tcl"
        [ -f "$f" ] || continue
        n=$(grep -n -m1 '^start_server' "$f" | cut -d: -f1)
        [ -n "$n" ] && sed -i "${n}s/ external:skip//; ${n}s/external:skip //; ${n}s/\"external:skip\"//" "$f"
    done
}

# ---------------------------------------------------------------------------------------
# Servers
# ---------------------------------------------------------------------------------------
SERVER_PID=""
SERVER_TMP=""

cleanup() {
    if [ -n "$SERVER_PID" ]; then
        kill -9 "$SERVER_PID" 2>/dev/null
        wait "$SERVER_PID" 2>/dev/null
        SERVER_PID=""
    fi
    if [ -n "$SERVER_TMP" ]; then
        rm -rf "$SERVER_TMP"
        SERVER_TMP=""
    fi
}
trap cleanup EXIT
trap 'cleanup; exit 130' INT TERM

port_in_use() {
    ss -Htln "sport = :$1" 2>/dev/null | grep -q .
}

free_port() {
    local p i
    if [ -n "$PORT_LO" ]; then
        for p in $(seq "$PORT_LO" $((PORT_LO + 7))); do
            port_in_use "$p" || { echo "$p"; return 0; }
        done
        return 1
    fi
    for i in $(seq 1 200); do
        # Below the kernel's ephemeral range (32768 and up by default): a port there can be
        # the local end of some outgoing connection, which no listener check sees.
        p=$(( 20000 + (RANDOM * 32768 + RANDOM) % 12000 ))
        if ! port_in_use "$p"; then
            echo "$p"
            return 0
        fi
    done
    return 1
}

# PING over RESP with bash's /dev/tcp (no client binary needed).
ping_port() {
    local port=$1 line=""
    { exec 3<>"/dev/tcp/127.0.0.1/$port"; } 2>/dev/null || return 1
    printf '*1\r\n$4\r\nPING\r\n' >&3
    IFS= read -r -t 2 line <&3
    exec 3<&- 3>&-
    [ "${line%$'\r'}" = "+PONG" ]
}

# start_server KIND PORT LOGFILE -> sets SERVER_PID/SERVER_TMP; returns 1 if no PONG in 20 s.
start_server() {
    local kind=$1 port=$2 logfile=$3 i
    SERVER_TMP="$(mktemp -d /tmp/lattice-compat.XXXXXX)"
    if [ "$kind" = lattice ]; then
        # One I/O thread: Redis's suite sends a command on one connection and, without waiting
        # for its reply, acts on another, assuming a single event loop runs them in send order.
        # Lattice's multi-threaded I/O does not order requests across connections (neither
        # does Redis with io-threads), so those tests would race; one thread restores the order.
        "$LATTICE_BIN" --port "$port" --bind 127.0.0.1 --dir "$SERVER_TMP" --threads 1 >"$logfile" 2>&1 9>&- &
    else
        # Redis 7 refuses DEBUG unless enabled; --with-debug runs the tests that use it.
        local debug=()
        [ "$WITH_DEBUG" = 1 ] && debug=(--enable-debug-command yes)
        "$REDIS_BIN" --port "$port" --bind 127.0.0.1 --save "" --appendonly no \
            --daemonize no --dir "$SERVER_TMP" "${debug[@]}" >"$logfile" 2>&1 9>&- &
    fi
    SERVER_PID=$!
    for i in $(seq 1 200); do
        if ping_port "$port"; then
            return 0
        fi
        if ! kill -0 "$SERVER_PID" 2>/dev/null; then
            return 1
        fi
        sleep 0.1
    done
    return 1
}

# ---------------------------------------------------------------------------------------
# One suite against one server
# ---------------------------------------------------------------------------------------
declare -A OK ERR ABORT

run_suite() {
    local kind=$1 suite=$2
    local base="$OUT_DIR/$kind/$suite"
    mkdir -p "$(dirname "$base")"
    local logf="$base.log" failf="$base.failed" srvlog="$base.server.log"
    rm -f "$logf" "$failf" "$srvlog"

    local port
    port="$(free_port)" || { log "no free port"; exit 2; }
    if ! start_server "$kind" "$port" "$srvlog"; then
        log "$kind did not start for $suite (see $srvlog)"
        echo "server did not answer PING on port $port" > "$logf"
        OK[$kind,$suite]=0; ERR[$kind,$suite]=0; ABORT[$kind,$suite]=nostart
        cleanup
        return
    fi

    local durable=()
    [ "$DURABLE" = 1 ] && durable=(--durable)
    local skips=()
    [ "$kind" = lattice ] && skips=("${SKIP_LATTICE[@]}")
    # runtest's own test-server port lies just below --baseport (default 21111, so 21079):
    # a random base keeps two runs on one machine from colliding there. Kept below the
    # ephemeral range: at 38224 the test server once found its port taken by the local end of
    # an outgoing connection ("couldn't open socket: address already in use").
    local baseport=$(( 22000 + (RANDOM % 160) * 64 ))
    [ -n "$PORT_LO" ] && baseport=$((PORT_LO + 40))
    log "$kind: $suite (port $port, timeout ${TIMEOUT}s)"
    local rc=0
    (
        cd "$RUN_DIR" || exit 2
        TERM=dumb exec timeout -k 10 "$TIMEOUT" ./runtest --host 127.0.0.1 --port "$port" \
            --singledb --ignore-encoding --ignore-digest --single "$suite" --clients 1 \
            --timeout "$TIMEOUT" --baseport "$baseport" "${durable[@]}" "${skips[@]}" --tags "$TAGS"
    ) >"$logf" 2>&1 </dev/null 9>&- || rc=$?

    local alive=1
    kill -0 "$SERVER_PID" 2>/dev/null || alive=0
    cleanup

    local ok err why="-"
    ok=$(grep -c '^\[ok\]:' "$logf")
    err=$(grep -c '^\[err\]:' "$logf")
    # Each failed test with the first lines of its reason (runtest prints them below it).
    awk '/^\[err\]:/ {p = 1; n = 0; print; next}
         /^\[[a-zA-Z0-9\/ ]+\]:/ || /^\*\*\* / || /^!!! / {p = 0}
         p && n < 3 {print "    " substr($0, 1, 300); n++}' "$logf" > "$failf"
    if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
        why=timeout
    elif [ "$alive" = 0 ]; then
        why=crash
    elif grep -q '^\[exception\]:' "$logf"; then
        why=exception
    elif grep '^\[err\]:' "$logf" | grep -qv ' in tests/.*\.tcl$'; then
        # With --durable, an error outside any test (in a start_server block) is reported
        # as an [err] without a test name, and the rest of that block is skipped.
        why=block-exception
    elif grep -q '^\[TIMEOUT\]:' "$logf"; then
        why=timeout
    elif grep -qE 'I/O error|connection reset|connection refused|broken pipe' "$logf"; then
        why=io-error
    elif ! grep -qE 'All tests passed without errors|^\[[0-9]+/[0-9]+ done\]' "$logf"; then
        why=incomplete
    fi
    OK[$kind,$suite]=$ok; ERR[$kind,$suite]=$err; ABORT[$kind,$suite]=$why
    echo "rc=$rc server_alive=$alive ok=$ok err=$err aborted=$why" >> "$logf"
}

# ---------------------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------------------
mkdir -p "$OUT_DIR"
# One run at a time per work tree: runs share target/compat/ and the cached test tree.
exec 9>"$OUT_DIR/.lock"
if ! flock -n 9; then
    log "another compat.sh run holds $OUT_DIR/.lock; waiting for it"
    flock 9
fi
ensure_source
RUN_DIR="$SRC_DIR"
if [ "$LENIENT" = 1 ] || [ "$UNSKIP" = 1 ]; then
    make_run_copy
fi
if [ "$LENIENT" = 1 ]; then
    make_lenient
fi
if [ "$UNSKIP" = 1 ]; then
    unskip_first_blocks
fi

if [[ " $SERVERS " == *" lattice "* ]]; then
    if [ "$BUILD" = 1 ]; then
        (cd "$ROOT" && cargo build --release -p lattice-server) || { log "build failed"; exit 2; }
    fi
    if [ ! -x "$LATTICE_BIN" ]; then
        log "lattice-server not found at $LATTICE_BIN (build it, pass --build, or --server redis)"
        exit 2
    fi
fi
if [[ " $SERVERS " == *" redis "* ]] && [ ! -x "$REDIS_BIN" ]; then
    log "redis-server not found at $REDIS_BIN"
    exit 2
fi

if [[ " $SERVERS " == *" lattice "* ]]; then
    apply_skips
fi

for suite in $SUITES; do
    if [ ! -f "$SRC_DIR/tests/$suite.tcl" ]; then
        log "unknown suite $suite (no tests/$suite.tcl)"
        exit 2
    fi
    for kind in $SERVERS; do
        run_suite "$kind" "$suite"
    done
done

cell() { # kind suite field
    local k="$1,$2"
    case "$3" in
        ok) echo "${OK[$k]:--}" ;;
        err) echo "${ERR[$k]:--}" ;;
    esac
}

status=0
{
    printf '%-22s | %10s | %11s | %12s | %8s | %9s | %s\n' suite "lattice ok" "lattice err" "skipped (L)" "redis ok" "redis err" "aborted?"
    printf '%s\n' "-----------------------+------------+-------------+--------------+----------+-----------+---------------------"
    for suite in $SUITES; do
        ab=""
        for kind in $SERVERS; do
            a="${ABORT[$kind,$suite]}"
            if [ "$a" != "-" ]; then
                ab="$ab $kind:$a"
            fi
        done
        [ -z "$ab" ] && ab=" no"
        printf '%-22s | %10s | %11s | %12s | %8s | %9s |%s\n' "$suite" \
            "$(cell lattice "$suite" ok)" "$(cell lattice "$suite" err)" "${SKIPPED_IN[$suite]:-0}" \
            "$(cell redis "$suite" ok)" "$(cell redis "$suite" err)" "$ab"
    done
} | tee "$OUT_DIR/summary.txt"

for suite in $SUITES; do
    if [[ " $SERVERS " == *" lattice "* ]]; then
        if [ "${ABORT[lattice,$suite]}" != "-" ]; then
            status=1
        fi
        if [ "$STRICT" = 1 ] && [ "${ERR[lattice,$suite]}" != 0 ]; then
            log "FAILED (--strict): $suite has ${ERR[lattice,$suite]} [err] on lattice (see $OUT_DIR/lattice/$suite.failed)"
            status=1
        fi
    fi
done
echo "logs: $OUT_DIR/<server>/<suite>.log, failed tests: <suite>.failed"
exit $status
