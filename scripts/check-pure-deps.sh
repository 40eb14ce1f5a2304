#!/usr/bin/env bash
# The dependency gate: the pure crates (everything the simulator runs as node logic) may not
# pull in an async runtime, sockets or OS randomness, even transitively. Fails listing the
# offending crate and the path that brings it in.
set -euo pipefail
cd "$(dirname "$0")/.."
pure=(lattice-resp lattice-store lattice-crdt lattice-node lattice-persist lattice-placement lattice-router)
banned='^(tokio|mio|socket2|getrandom|async-std|smol)$'
status=0
for crate in "${pure[@]}"; do
    deps=$(cargo tree -p "$crate" -e normal --prefix none --format '{p}' | awk '{print $1}' | sort -u)
    bad=$(echo "$deps" | grep -E "$banned" || true)
    if [ -n "$bad" ]; then
        echo "dependency gate: $crate pulls in: $bad"
        for b in $bad; do cargo tree -p "$crate" -e normal -i "$b" | head -20; done
        status=1
    else
        echo "dependency gate: $crate ok ($(echo "$deps" | wc -l) crates, none of tokio/mio/socket2/getrandom)"
    fi
done
exit $status
