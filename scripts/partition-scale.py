#!/usr/bin/env python3
"""A partitioned cluster at full size (issue 18, must-show 1): --nodes lattice-server processes
(default 5) at --replication-factor RF (default 3) loaded with --keys keys (default 1,000,000),
against a standalone node loaded the same way.

1. A standalone node is loaded with the keys (`key:<i>` = `v-key:<i>`, through `redis-cli
   --pipe`); its RSS before and after gives bytes per key. It is stopped.
2. The cluster comes up; the same keys are piped in, each to its slot's first owner (as a
   cluster client sends them), every node's share at once.
3. Once replication is quiet, each node's DBSIZE must equal the number of keys whose slot it
   owns (CLUSTER SLOTS), about RF/N of them; DBSIZE, share, RSS and bytes per key (RSS growth
   over the keys it holds) are printed per node.
4. --sample random keys are read through every node (pipelines of 500, so most reads are
   forwarded in per-peer batches): all correct.
5. redis-py's RedisCluster runs --ops mixed operations (reads of loaded keys checked, SET,
   GET, INCR, HSET/HGET, MSET/MGET with hash tags): 0 errors.
6. redis-rs's cluster client (crates/server/tests/redis_cluster.rs, pointed at this cluster)
   reads --sample loaded keys through cluster pipelines and runs --rs-ops mixed operations
   checked against a model: 0 errors.

Exits 1 on any failure. Servers run on 127.0.0.1 with free ports and are stopped at the end.
Needs redis-py (the venv `make partition-deps` builds) and redis-cli.

  target/partition-venv/bin/python scripts/partition-scale.py [--keys 1000000] [--ops 20000]
"""

import argparse
import importlib.util
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

import redis
from redis.cluster import RedisCluster
from redis.crc import key_slot

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_spec = importlib.util.spec_from_file_location(
    "partition_test", os.path.join(ROOT, "scripts", "partition-test.py"))
pt = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(pt)
fail = pt.fail


def key(i):
    return "key:%d" % i


def value(i):
    return "v-key:%d" % i


def resp_sets(ids):
    """The RESP encoding of SET key:i v-key:i for each i of ids."""
    out = []
    for i in ids:
        k, v = key(i).encode(), value(i).encode()
        out.append(b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n" % (len(k), k, len(v), v))
    return b"".join(out)


def pipe_in(ports, keys, work, owner_of=None):
    """Loads keys [0, keys) with `redis-cli --pipe`, one pipe per port at once: each key to
    `owner_of(key)` (a port), or without it a contiguous share per port. Returns the seconds
    taken. Fails unless every SET was answered without error."""
    shares = {port: [] for port in ports}
    step = (keys + len(ports) - 1) // len(ports)
    for i in range(keys):
        port = owner_of(key(i)) if owner_of else ports[i // step]
        shares[port].append(i)
    t = time.time()
    procs = []
    for n, (port, ids) in enumerate(shares.items()):
        path = os.path.join(work, "load.%d.resp" % n)
        with open(path, "wb") as f:
            f.write(resp_sets(ids))
        with open(path, "rb") as f:
            procs.append((subprocess.Popen(["redis-cli", "-p", str(port), "--pipe"], stdin=f,
                                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT),
                          len(ids)))
    for p, count in procs:
        out = p.communicate(timeout=900)[0].decode()
        if p.returncode != 0 or "errors: 0, replies: %d" % count not in out:
            fail("redis-cli --pipe: %s" % out.strip()[-2000:])
    return time.time() - t


def mixed_redis_py(rc, rng, ops, loaded):
    """redis-py RedisCluster, mixed operations; returns the number of errors."""
    errors = 0
    counters = {}
    for n in range(ops):
        k = "py:%d" % rng.randrange(2000)
        op = rng.random()
        try:
            if op < 0.25:
                i = rng.randrange(loaded)
                if rc.get(key(i)) != value(i).encode():
                    errors += 1
            elif op < 0.45:
                rc.set(k, n)
                if rc.get(k) != str(n).encode():
                    errors += 1
            elif op < 0.60:
                rc.get(k)
            elif op < 0.75:
                ck = "py-ctr:%d" % rng.randrange(50)
                counters[ck] = counters.get(ck, 0) + 1
                if rc.incr(ck) != counters[ck]:
                    errors += 1
            elif op < 0.88:
                rc.hset("py-h:" + k, "f", n)
                if rc.hget("py-h:" + k, "f") != str(n).encode():
                    errors += 1
            else:
                tag = "{py%d}" % rng.randrange(100)
                rc.mset({tag + "a": n, tag + "b": n + 1})
                if rc.mget(tag + "a", tag + "b") != [str(n).encode(), str(n + 1).encode()]:
                    errors += 1
        except redis.exceptions.RedisError as e:
            errors += 1
            print("  RedisCluster error: %r" % e)
    return errors


def standalone_bytes_per_key(binary, work, keys, port):
    proc = subprocess.Popen([binary, "--port", str(port), "--threads", "1",
                             "--dir", os.path.join(work, "standalone")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        c = redis.Redis(port=port, socket_timeout=20)
        deadline = time.time() + 30
        while True:
            try:
                c.ping()
                break
            except redis.exceptions.ConnectionError:
                if time.time() > deadline:
                    fail("the standalone node did not come up")
                time.sleep(0.1)
        before = pt.rss_kib(proc.pid)
        secs = pipe_in([port], keys, work)
        if c.dbsize() != keys:
            fail("the standalone node holds %d keys, not %d" % (c.dbsize(), keys))
        after = pt.rss_kib(proc.pid)
        return before, after, secs
    finally:
        pt.stop([proc])


def main():
    ap = argparse.ArgumentParser()
    pt.cluster_args(ap)
    ap.set_defaults(keys=1000000)
    ap.add_argument("--sample", type=int, default=20000)
    ap.add_argument("--ops", type=int, default=20000)
    ap.add_argument("--rs-ops", type=int, default=20000)
    ap.add_argument("--no-standalone", action="store_true")
    ap.add_argument("--base-port", type=int, default=0,
                    help="client ports from here on, then cluster ports, then the standalone "
                         "node's (default: free ports)")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="lattice-scale.")
    rng = random.Random(69)
    t0 = time.time()
    with open("/proc/loadavg") as f:
        print("load average at the start: %s" % " ".join(f.read().split()[:3]))
    try:
        if not args.no_standalone:
            before, after, secs = standalone_bytes_per_key(
                args.binary, work, args.keys,
                args.base_port + 2 * args.nodes if args.base_port else pt.free_port())
            print("standalone node: %d keys piped in %.1f s; RSS %d KiB empty, %d KiB loaded: "
                  "%.0f B/key" % (args.keys, secs, before, after,
                                  (after - before) * 1024 / args.keys))

        ports, clients = pt.start(args.binary, work, args.nodes, args.rf, args.base_port)
        empty = [pt.rss_kib(p.pid) for p in pt.PROCS]
        owners = pt.owners_by_slot(clients[0])
        for c in clients[1:]:
            if pt.owners_by_slot(c) != owners:
                fail("nodes disagree on CLUSTER SLOTS")
        # Each key to its slot's first owner, as a cluster client sends it: a flood of
        # forwarded SETs (redis-cli --pipe has no window) would outrun the owners and get
        # TRYAGAIN once a forward waits past its 5 s bound; forwarding at scale is checked
        # with windowed pipelines below.
        first_owner = lambda k: owners[key_slot(k.encode())][0]
        secs = pipe_in(ports, args.keys, work, first_owner)
        print("%d nodes, replication factor %d: %d keys piped in to their first owners in %.1f s "
              "(%.0f SETs/s)" % (args.nodes, args.rf, args.keys, secs, args.keys / secs))

        per_slot = [0] * 16384
        for i in range(args.keys):
            per_slot[key_slot(key(i).encode())] += 1
        expected = [sum(n for s, n in enumerate(per_slot) if port in owners[s]) for port in ports]
        t = time.time()
        sizes = pt.wait_quiet(clients, expected, 300)
        print("every node held exactly its slots' keys %.1f s after the load" % (time.time() - t))
        print("| node | DBSIZE | share of the keys | RSS KiB empty | RSS KiB loaded | B/key "
              "| commands it forwarded | commands it ran for peers |")
        print("|---|---|---|---|---|---|---|---|")
        for i, c in enumerate(clients):
            info = c.info("cluster")
            rss = pt.rss_kib(pt.PROCS[i].pid)
            print("| %d | %d | %.3f | %d | %d | %.0f | %d | %d |"
                  % (i + 1, sizes[i], sizes[i] / args.keys, empty[i], rss,
                     (rss - empty[i]) * 1024 / sizes[i], info.get("cluster_forwarded", 0),
                     info.get("cluster_served_for_peers", 0)))
        if sum(sizes) != args.rf * args.keys:
            fail("the nodes hold %d keys, not %d x %d" % (sum(sizes), args.rf, args.keys))

        sample = [rng.randrange(args.keys) for _ in range(args.sample)]
        keys = [key(i) for i in sample]
        t = time.time()
        for k, i, v in pt.read_back(clients, keys, lambda k: "v-" + k):
            fail("GET %s through node %d answered %r" % (k, i + 1, v))
        print("GET of %d random keys through every node: %d reads correct in %.1f s"
              % (len(keys), len(keys) * len(clients), time.time() - t))

        rc = RedisCluster(host="127.0.0.1", port=ports[0], socket_timeout=20)
        t = time.time()
        errors = mixed_redis_py(rc, rng, args.ops, args.keys)
        print("redis-py RedisCluster mixed workload: %d operations, %d errors, %.1f s"
              % (args.ops, errors, time.time() - t))
        if errors:
            fail("RedisCluster saw errors")

        env = dict(os.environ, LATTICE_CLUSTER_PORTS=",".join(map(str, ports)),
                   LATTICE_LOADED_KEYS=str(args.keys), LATTICE_OPS=str(args.rs_ops),
                   LATTICE_KEY_PREFIX="rs:")
        t = time.time()
        r = subprocess.run(["cargo", "test", "-q", "--release", "-p", "lattice-server", "--test",
                            "redis_cluster", "--", "--nocapture"], cwd=ROOT, env=env,
                           capture_output=True, text=True)
        for line in r.stdout.splitlines():
            if line.startswith("redis-rs"):
                print(line)
        if r.returncode != 0:
            fail("redis-rs cluster client:\n%s\n%s" % (r.stdout[-3000:], r.stderr[-3000:]))
        print("redis-rs cluster client done in %.1f s" % (time.time() - t))
        with open("/proc/loadavg") as f:
            print("load average at the end: %s" % " ".join(f.read().split()[:3]))
        print("partition scale run passed in %.1f s" % (time.time() - t0))
    finally:
        pt.stop(pt.PROCS)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
