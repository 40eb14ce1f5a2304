#!/usr/bin/env bash
# make bench: build lattice-server (release), install redis-server, redis-tools and matplotlib
# when missing, then run bench/bench.py, the persistence section (scripts/persist-bench.sh;
# PERSIST_N=0 skips it) and the replication load (scripts/repl-load.sh; REPL_N=0 skips it). Arguments are passed on to bench.py, e.g.
#   ./bench/run.sh --quick
#   ./bench/run.sh --commands set,get --skip-memory --skip-zadd
set -euo pipefail
cd "$(dirname "$0")/.."

CARGO=${CARGO:-cargo}
VENV=target/bench-venv

echo "== building lattice-server (release)" >&2
$CARGO build --release -p lattice-server

SUDO=$([ "$(id -u)" = 0 ] || echo sudo)
apt_install() {
  echo "== installing:$*" >&2
  if [ -z "${APT_UPDATED:-}" ]; then
    $SUDO apt-get update -qq
    APT_UPDATED=1
  fi
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "$@"
}

missing=""
command -v redis-server >/dev/null || missing="$missing redis-server"
command -v redis-benchmark >/dev/null || missing="$missing redis-tools"
command -v redis-cli >/dev/null || missing="$missing redis-tools"
command -v taskset >/dev/null || missing="$missing util-linux"
command -v python3 >/dev/null || missing="$missing python3"
# shellcheck disable=SC2086 # word splitting wanted; sort -u drops the duplicate redis-tools
[ -z "$missing" ] || apt_install $(echo $missing | tr ' ' '\n' | sort -u)

# Debian's packaged redis-server starts a service on 6379 when installed; it does no harm (the
# benchmark uses its own servers on free ports), so it is left alone.

# matplotlib for the chart: a venv under target/, else pip --user, else no chart.
PY=python3
if python3 -c 'import matplotlib' 2>/dev/null; then
  PY=python3
elif [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c 'import matplotlib' 2>/dev/null; then
  PY="$VENV/bin/python"
else
  echo "== installing matplotlib into $VENV" >&2
  if ! python3 -m venv "$VENV" 2>/dev/null; then
    rm -rf "$VENV"
    apt_install python3-venv || true
    python3 -m venv "$VENV" || rm -rf "$VENV"
  fi
  if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -m pip install -q matplotlib; then
    PY="$VENV/bin/python"
  elif python3 -m pip install -q --user matplotlib; then
    PY=python3
  else
    echo "warning: matplotlib could not be installed; the report will have no chart" >&2
  fi
fi

"$PY" bench/bench.py "$@"

# Persistence: SET/INCR/LPUSH with persistence off, everysec and always, Lattice and Redis side
# by side (throughput, the everysec/off ratio of each, server CPU per request), and recovery
# of PERSIST_KEYS keys (scripts/persist-bench.sh; PERSIST_N requests per test, 0 skips).
if [ "${PERSIST_N:-200000}" != 0 ]; then
  out="bench/results/$(date -u +%Y-%m-%d)-persistence.txt"
  echo "== persistence (PERSIST_N=${PERSIST_N:-200000}), also in $out" >&2
  ./scripts/persist-bench.sh "${PERSIST_N:-200000}" "${PERSIST_KEYS:-1000000}" | tee "$out"
fi

# Replication at real data sizes: the 1M-key load into a 3-node cluster, side by side with
# Redis primary + 2 replicas and a standalone node (scripts/repl-load.sh; REPL_N keys, 0 skips).
if [ "${REPL_N:-1000000}" != 0 ]; then
  out="bench/results/$(date -u +%Y-%m-%d)-replication.txt"
  echo "== replication load (REPL_N=${REPL_N:-1000000}), also in $out" >&2
  N="${REPL_N:-1000000}" CARGO="$CARGO" ./scripts/repl-load.sh | tee "$out"
fi
