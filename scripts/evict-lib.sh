# Shared by scripts/cluster-evict-check.sh and scripts/partitioned-evict-check.sh (sourced):
# starting a cluster of lattice-server processes on 127.0.0.1 and talking to it with redis-cli.
# The caller sets BIN, DIR and PIDS and stops the processes itself.

# Starts nodes 1..$1 with client ports $2.. and cluster ports $2+$1.., passing the remaining
# arguments to each (for example --replication-factor 3); waits until each answers PING.
start_nodes() {
  local n=$1 base=$2 seeds="" i
  shift 2
  for ((i = 1; i <= n; i++)); do seeds+="127.0.0.1:$((base + n + i - 1)),"; done
  for ((i = 1; i <= n; i++)); do
    mkdir -p "$DIR/n$i"
    "$BIN" --bind 127.0.0.1 --port $((base + i - 1)) --dir "$DIR/n$i" --node-id "$i" \
      --cluster-port $((base + n + i - 1)) --seeds "${seeds%,}" --threads 1 "$@" \
      >"$DIR/n$i.log" 2>&1 &
    PIDS+=($!)
  done
  for ((i = 0; i < n; i++)); do until cli $((base + i)) ping >/dev/null 2>&1; do sleep 0.1; done; done
}

cli() { redis-cli -p "$1" "${@:2}"; }

# INFO field $2 of the node on port $1.
field() { cli "$1" info everything | tr -d '\r' | sed -n "s/^$2://p"; }

# Writes keys $2..$3 (values of 1,000 bytes) through node port $1, pipelined; error replies go
# to stderr.
fill() {
  local v; v=$(head -c 1000 /dev/zero | tr '\0' v)
  for ((k = $2; k < $3; k++)); do printf 'SET key:%d %s\r\n' "$k" "$v"; done |
    redis-cli -p "$1" --pipe >/dev/null || true
}
