#!/usr/bin/env bash
# The compose cluster's test: start 3 nodes from lattice-server:local, write through node 1,
# read through nodes 2 and 3, check the secret is required, tear everything down (volumes too).
set -euo pipefail
cd "$(dirname "$0")"
export LATTICE_CLUSTER_SECRET="docker-test-$RANDOM$RANDOM"
project=lattice-docker-test
dc() { docker-compose -p "$project" -f compose.yaml "$@"; }
cleanup() { dc down -v --remove-orphans >/dev/null 2>&1 || true; }
trap cleanup EXIT
command -v redis-cli >/dev/null || { echo "redis-cli missing (apt-get install redis-tools)" >&2; exit 1; }
for p in 6381 6382 6383 7381 7382 7383; do
  if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then echo "port $p is busy" >&2; exit 1; fi
done
cleanup
dc up -d
for p in 6381 6382 6383; do
  for _ in $(seq 100); do redis-cli -p $p ping >/dev/null 2>&1 && break; sleep 0.1; done
done
value="hello-$RANDOM"
redis-cli -p 6381 set docker:k "$value" >/dev/null
redis-cli -p 6381 incrby docker:c 5 >/dev/null
redis-cli -p 6382 incrby docker:c 7 >/dev/null
ok=""
for _ in $(seq 100); do   # at most 10 s for the writes to reach the other nodes
  if [ "$(redis-cli -p 6382 get docker:k)" = "$value" ] && [ "$(redis-cli -p 6383 get docker:k)" = "$value" ] \
     && [ "$(redis-cli -p 6383 get docker:c)" = 12 ] && [ "$(redis-cli -p 6381 get docker:c)" = 12 ]; then
    ok=1; break
  fi
  sleep 0.1
done
dc logs --no-color | grep -E 'link to node .* up' | head -6 || true
if [ -z "$ok" ]; then
  echo "FAIL: node 2 reads '$(redis-cli -p 6382 get docker:k)', node 3 '$(redis-cli -p 6383 get docker:k)', counter on node 3 '$(redis-cli -p 6383 get docker:c)'" >&2
  dc logs --no-color | tail -30 >&2
  exit 1
fi
echo "docker-test: written through node 1, read through nodes 2 and 3: '$value', counter 12 everywhere"
docker image inspect lattice-server:local --format 'image lattice-server:local: {{.Size}} bytes'
