#!/usr/bin/env python3
"""Real-process test of a partitioned cluster: --nodes lattice-server processes with
--replication-factor RF (default 5 and 3), checked with redis-py (from the venv `make
partition-test` builds).

1. --keys keys are written through random nodes (pipelines of 100 plain SETs: most of them
   forwarded, so reply order inside a pipeline is exercised).
2. Once replication is quiet, each node's DBSIZE must equal the number of written keys whose
   slot it owns (CLUSTER SLOTS, CRC16 slots as redis-py computes them): about RF/N of the keys.
   DBSIZE and RSS per node are printed.
3. GET of every key through every node returns the value written (pipelines of 500).
4. redis-py's RedisCluster runs --ops mixed operations (SET, GET, INCR, HSET/HGET, MSET/MGET
   with hash tags) with 0 errors; a plain client's cross-slot MGET gets CROSSSLOT.
5. A node is stopped: GETs of its keys through the others are served by the other owners.

Exits 1 on any failure. Servers run on 127.0.0.1 with free ports and are stopped at the end.
"""

import argparse
import importlib.util
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import redis
from redis.cluster import RedisCluster
from redis.crc import key_slot

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROCS = []


_spec = importlib.util.spec_from_file_location("crash_test", os.path.join(ROOT, "scripts", "crash-test.py"))
crash_test = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(crash_test)
free_port = crash_test.free_port


def fail(msg):
    print("FAIL: " + msg, flush=True)
    sys.exit(1)


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def start(binary, work, n, rf, base_port=None):
    """Starts n nodes; client ports from base_port on (then cluster ports), else free ones."""
    if base_port:
        ports = list(range(base_port, base_port + n))
        cports = list(range(base_port + n, base_port + 2 * n))
    else:
        ports = [free_port() for _ in range(n)]
        cports = [free_port() for _ in range(n)]
    seeds = ",".join("127.0.0.1:%d" % p for p in cports)
    for i in range(n):
        log = open(os.path.join(work, "node%d.log" % (i + 1)), "wb")
        proc = subprocess.Popen(
            [binary, "--port", str(ports[i]), "--cluster-port", str(cports[i]),
             "--node-id", str(i + 1), "--seeds", seeds, "--replication-factor", str(rf),
             "--threads", "1", "--dir", os.path.join(work, "d%d" % (i + 1))],
            stdout=log, stderr=log)
        PROCS.append(proc)
    clients = [redis.Redis(port=p, socket_timeout=20) for p in ports]
    deadline = time.time() + 30
    for c in clients:
        while True:
            try:
                if b"cluster_state:ok" in c.execute_command("CLUSTER", "INFO"):
                    break
            except redis.exceptions.ConnectionError:
                pass
            if time.time() > deadline:
                fail("the cluster did not come up (logs in %s)" % work)
            time.sleep(0.1)
    return ports, clients


def stop(procs):
    """SIGTERM every server still running, then wait for each (SIGKILL after 5 s)."""
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def owners_by_slot(client):
    """slot -> list of client ports owning it, from CLUSTER SLOTS."""
    owners = [None] * 16384
    for entry in client.execute_command("CLUSTER", "SLOTS"):
        start, end = entry[0], entry[1]
        ports = [node[1] for node in entry[2:]]
        for s in range(start, end + 1):
            owners[s] = ports
    if any(o is None for o in owners):
        fail("CLUSTER SLOTS leaves slots unassigned")
    return owners


def wait_quiet(clients, expected, timeout):
    deadline = time.time() + timeout
    while True:
        sizes = [c.dbsize() for c in clients]
        if sizes == expected:
            return sizes
        if time.time() > deadline:
            fail("DBSIZE per node %s, expected %s" % (sizes, expected))
        time.sleep(0.2)


def cluster_args(ap):
    """The options every real-process cluster test takes."""
    ap.add_argument("--nodes", type=int, default=5)
    ap.add_argument("--rf", type=int, default=3)
    ap.add_argument("--keys", type=int, default=20000)
    ap.add_argument("--binary", default=os.path.join(ROOT, "target", "release", "lattice-server"))


def read_back(clients, keys, value_of):
    """GETs every key through every client (pipelines of 500); yields (key, client index,
    answer) for each answer that is not `value_of(key)` as bytes."""
    for i, c in enumerate(clients):
        for at in range(0, len(keys), 500):
            p = c.pipeline(transaction=False)
            chunk = keys[at:at + 500]
            for k in chunk:
                p.get(k)
            for k, v in zip(chunk, p.execute()):
                if v != value_of(k).encode():
                    yield k, i, v


def main():
    ap = argparse.ArgumentParser()
    cluster_args(ap)
    ap.add_argument("--ops", type=int, default=20000)
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="lattice-partition.")
    rng = random.Random(18)
    t0 = time.time()
    try:
        ports, clients = start(args.binary, work, args.nodes, args.rf)
        owners = owners_by_slot(clients[0])
        for c in clients[1:]:
            if owners_by_slot(c) != owners:
                fail("nodes disagree on CLUSTER SLOTS")

        # 1. Writes through random nodes, pipelined.
        keys = ["key:%d" % i for i in range(args.keys)]
        t = time.time()
        for at in range(0, len(keys), 100):
            c = rng.choice(clients)
            p = c.pipeline(transaction=False)
            for k in keys[at:at + 100]:
                p.set(k, "v-" + k)
            if not all(r is True for r in p.execute()):
                fail("a SET in a pipeline was not acknowledged")
        write_s = time.time() - t

        # 2. Each node holds exactly the keys of its slots.
        expected = [sum(1 for k in keys if port in owners[key_slot(k.encode())]) for port in ports]
        sizes = wait_quiet(clients, expected, 60)
        print("%d nodes, replication factor %d, %d keys written through random nodes in %.1f s"
              % (args.nodes, args.rf, args.keys, write_s))
        for i, c in enumerate(clients):
            info = c.info("cluster")
            print("  node %d: DBSIZE %d (%.3f of the keys; expected %d), RSS %d KiB, forwarded %d, served for peers %d"
                  % (i + 1, sizes[i], sizes[i] / args.keys, expected[i], rss_kib(PROCS[i].pid),
                     info.get("cluster_forwarded", 0), info.get("cluster_served_for_peers", 0)))
        if sum(sizes) != args.rf * args.keys:
            fail("the nodes hold %d keys, not %d x %d" % (sum(sizes), args.rf, args.keys))

        # 3. Every key through every node.
        t = time.time()
        for k, i, v in read_back(clients, keys, lambda k: "v-" + k):
            fail("GET %s through node %d answered %r" % (k, i + 1, v))
        print("GET of every key through every node: %d reads correct in %.1f s"
              % (len(keys) * len(clients), time.time() - t))

        # 4. redis-py's cluster client, mixed workload.
        rc = RedisCluster(host="127.0.0.1", port=ports[0], socket_timeout=20)
        errors = 0
        counters = {}
        t = time.time()
        for n in range(args.ops):
            k = "rc:%d" % rng.randrange(2000)
            op = rng.random()
            try:
                if op < 0.35:
                    rc.set(k, n)
                elif op < 0.65:
                    rc.get(k)
                elif op < 0.80:
                    ck = "ctr:%d" % rng.randrange(50)
                    counters[ck] = counters.get(ck, 0) + 1
                    if rc.incr(ck) != counters[ck]:
                        errors += 1
                elif op < 0.90:
                    rc.hset("h:" + k, "f", n)
                    if rc.hget("h:" + k, "f") != str(n).encode():
                        errors += 1
                else:
                    tag = "{u%d}" % rng.randrange(100)
                    rc.mset({tag + "a": n, tag + "b": n + 1})
                    if rc.mget(tag + "a", tag + "b") != [str(n).encode(), str(n + 1).encode()]:
                        errors += 1
            except redis.exceptions.RedisError as e:
                errors += 1
                print("  RedisCluster error: %r" % e)
        print("RedisCluster mixed workload: %d operations, %d errors, %.1f s"
              % (args.ops, errors, time.time() - t))
        if errors:
            fail("RedisCluster saw errors")
        try:
            clients[0].mget("a", "b")
            fail("a cross-slot MGET was accepted")
        except redis.exceptions.ResponseError as e:
            if "CROSSSLOT" not in str(e):
                fail("cross-slot MGET answered %s" % e)

        # 5. A node stops: the others serve its keys from the other owners.
        victim = args.nodes - 1
        PROCS[victim].send_signal(signal.SIGKILL)
        PROCS[victim].wait()
        time.sleep(4)  # the links notice a silent peer within about 3 s
        sample = keys[:2000]
        for i, c in enumerate(clients[:victim]):
            p = c.pipeline(transaction=False)
            for k in sample:
                p.get(k)
            for k, v in zip(sample, p.execute()):
                if v != ("v-" + k).encode():
                    fail("with node %d down, GET %s through node %d answered %r" % (victim + 1, k, i + 1, v))
        print("node %d killed: %d keys read correctly through each of the other nodes"
              % (victim + 1, len(sample)))
        print("partition test passed in %.1f s" % (time.time() - t0))
    finally:
        stop(PROCS)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
