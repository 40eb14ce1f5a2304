# Shared by scripts/cluster-*.sh: free ports, readiness waits, cleanup of started servers.
# Source it; it defines functions and the PIDS array, and kills every started server on exit.

PIDS=()
WORK="$(mktemp -d -t lattice-cluster.XXXXXX)"

cleanup() {
  local pid
  for pid in "${PIDS[@]}"; do
    kill -CONT "$pid" 2>/dev/null || true
    kill "$pid" 2>/dev/null || true
  done
  # A server still busy after 3 s is killed outright.
  for _ in $(seq 30); do
    local alive=0
    for pid in "${PIDS[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
    [ "$alive" = 0 ] && break
    sleep 0.1
  done
  for pid in "${PIDS[@]}"; do
    kill -9 "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  rm -rf "$WORK"
}
trap cleanup EXIT

# SIGTERM to server $1, SIGKILL if it is still there after 3 s.
stop_pid() {
  kill "$1" 2>/dev/null || return 0
  for _ in $(seq 30); do
    kill -0 "$1" 2>/dev/null || break
    sleep 0.1
  done
  kill -9 "$1" 2>/dev/null || true
  wait "$1" 2>/dev/null || true
}

# True when something accepts connections on 127.0.0.1:$1.
port_open() {
  (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# Prints a port nobody listens on (tried at most 200 times), from below the kernel's ephemeral
# range: a port from inside it can be taken, between this check and the server's bind, as the
# local end of an outgoing connection (a replica link, a benchmark client), which made
# back-to-back runs fail with "Address already in use".
# PORT_RANGE=LOW-HIGH (say 7150-7199) takes the ports from that range instead, in order: for
# machines where each user of the host has been given a range of its own.
free_port() {
  local p i low
  if [ -n "${PORT_RANGE:-}" ]; then
    # Called in $(...), so the ports handed out are kept in a file, not a variable.
    for ((p = ${PORT_RANGE%-*}; p <= ${PORT_RANGE#*-}; p++)); do
      if ! port_open "$p" && ! grep -qx "$p" "$WORK/.ports" 2>/dev/null; then
        echo "$p" >>"$WORK/.ports"
        echo "$p"
        return 0
      fi
    done
    echo "no free port in $PORT_RANGE" >&2
    return 1
  fi
  low=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
  [ "${low:-0}" -gt 12000 ] 2>/dev/null || low=32768
  for i in $(seq 200); do
    p=$((10000 + RANDOM % (low - 10000)))
    if ! port_open "$p" && [[ " ${USED_PORTS:-} " != *" $p "* ]]; then
      USED_PORTS="${USED_PORTS:-} $p"
      echo "$p"
      return 0
    fi
  done
  echo "no free port found" >&2
  return 1
}

# Waits up to 10 s for 127.0.0.1:$1 to accept connections.
wait_port() {
  local i
  for i in $(seq 200); do
    port_open "$1" && return 0
    sleep 0.05
  done
  echo "nothing listens on port $1 after 10 s" >&2
  return 1
}

# Waits up to 15 s until log $1 shows $2 outgoing links up.
wait_links() {
  local i
  for i in $(seq 300); do
    [ "$(grep -c 'outgoing link to node .* up$' "$1" || true)" -ge "$2" ] && return 0
    sleep 0.05
  done
  echo "links not up in $1:" >&2
  cat "$1" >&2
  # The other nodes' logs say why (a node that could not bind its port, say).
  local other
  for other in "$(dirname "$1")"/*.log; do
    [ "$other" = "$1" ] && continue
    echo "--- $other" >&2
    tail -5 "$other" >&2
  done
  return 1
}

# Installs redis-tools (redis-benchmark, redis-cli) if missing.
need_redis_tools() {
  command -v redis-benchmark >/dev/null && return 0
  local sudo=""
  [ "$(id -u)" = 0 ] || sudo=sudo
  echo "== installing redis-tools" >&2
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq redis-tools
}

# start_cluster BIN N NAME [server args...]: starts N lattice-server replicas of one cluster on
# free ports (client ports in PORTS, cluster ports in CPORTS, pids appended to PIDS), with data
# directories and logs $WORK/NAME<i>[.log], and waits until every node has its links up.
start_cluster() {
  local bin=$1 n=$2 name=$3 i seeds=""
  shift 3
  PORTS=(); CPORTS=()
  for i in $(seq "$n"); do
    PORTS+=("$(free_port)"); CPORTS+=("$(free_port)")
    seeds="$seeds${seeds:+,}127.0.0.1:${CPORTS[$((i-1))]}"
  done
  for i in $(seq "$n"); do
    NO_COLOR=1 "$bin" --bind 127.0.0.1 --port "${PORTS[$((i-1))]}" --node-id "$i" \
      --cluster-port "${CPORTS[$((i-1))]}" --seeds "$seeds" --dir "$WORK/$name$i" "$@" \
      2>"$WORK/$name$i.log" &
    PIDS+=($!)
  done
  for i in $(seq "$n"); do
    wait_port "${PORTS[$((i-1))]}"
    wait_links "$WORK/$name$i.log" $((n - 1))
  done
}
