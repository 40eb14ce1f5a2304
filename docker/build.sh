#!/usr/bin/env bash
# Builds the lattice-server:local image FROM scratch around the statically linked binary that
# `make docker-image` compiled (target/static/<host>/release/lattice-server), stripped.
set -euo pipefail
cd "$(dirname "$0")/.."
host=$(rustc -vV | sed -n 's/^host: //p')
bin=target/static/$host/release/lattice-server
[ -x "$bin" ] || { echo "missing $bin: run make docker-image" >&2; exit 1; }
if ! file "$bin" | grep -q 'static'; then
  echo "$bin is not statically linked" >&2; exit 1
fi
ctx=target/docker-context
rm -rf "$ctx"; mkdir -p "$ctx"
strip -o "$ctx/lattice-server" "$bin"
cp docker/Dockerfile "$ctx/"
docker build -q -t lattice-server:local "$ctx"
size=$(docker image inspect lattice-server:local --format '{{.Size}}')
echo "image lattice-server:local: $size bytes ($((size / 1024)) KiB)"
