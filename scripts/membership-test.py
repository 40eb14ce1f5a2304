#!/usr/bin/env python3
"""Real-process test of live membership (docs/TESTING.md, "Live membership"): a partitioned
cluster of lattice-server processes grows by one node and shrinks by two under a write load.

1. --nodes nodes (default 5) start with --replication-factor RF (default 3) from --seeds, and
   --keys keys are loaded through them.
2. A writer thread keeps writing new keys (pipelines of --pipeline SETs) through the nodes that
   stay, recording every acknowledged write and the longest time with no reply.
3. A node joins with --join (one member's cluster address): the time until the ownership is
   balanced again (no node receiving or draining a slot group) is measured.
4. Two nodes leave (CLUSTER LEAVE): the time until both report `left` and nothing moves is
   measured; they are then stopped.
5. With the writer stopped: every node's DBSIZE equals the number of acknowledged keys whose
   slot CLUSTER SLOTS gives it, and every acknowledged write reads back through every node.

Prints the figures issue 18's must-show 2 asks for: time until balanced, bytes moved against
the bytes of the moved slots' keys (every key present when the change starts, redis-benchmark's
too, once per owner that gains its slot), the longest gap with no reply (with the longest in 3 s
with nothing moving, as a baseline), lost writes. Exits 1 on any
failure. Servers run on 127.0.0.1 (free ports, or from --base-port on) and are stopped at the
end.

--benchmark adds redis-benchmark load (`-t set -r KEYSPACE -P 16`, one process per staying
node, in back-to-back runs of --bench-requests requests) from before the join until after the
leaves, beside the writer: its throughput and longest latency are printed per phase, and at the
end every key it wrote must be on every owner of its slot (the writer's keys are checked one by
one as without it; redis-benchmark does not say which of its writes were acknowledged, so its
keys are checked for agreement among the owners).

KEEP_WORK=1 in the environment keeps the work directory (each node's log and data directory)
and prints its path, for looking into a run afterwards.
"""

import argparse
import csv
import importlib.util
import io
import re
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

import redis
from redis.crc import key_slot

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROCS = {}

_spec = importlib.util.spec_from_file_location("partition_test", os.path.join(ROOT, "scripts", "partition-test.py"))
partition_test = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(partition_test)
fail = partition_test.fail
owners_by_slot = partition_test.owners_by_slot
free_port = partition_test.free_port


class Ports:
    """Free ports, or consecutive ones from a base (a range set aside for the run)."""

    def __init__(self, base):
        self.next = base

    def take(self):
        if not self.next:
            return free_port()
        self.next += 1
        return self.next - 1


def launch(binary, work, node_id, port, cport, rf, cluster_args):
    log = open(os.path.join(work, "node%d.log" % node_id), "wb")
    PROCS[node_id] = subprocess.Popen(
        [binary, "--port", str(port), "--cluster-port", str(cport), "--node-id", str(node_id),
         "--replication-factor", str(rf), "--threads", "1",
         "--dir", os.path.join(work, "d%d" % node_id)] + cluster_args,
        stdout=log, stderr=log)
    return redis.Redis(port=port, socket_timeout=20)


def wait_for(what, cond, timeout, work, clients=None):
    deadline = time.time() + timeout
    while True:
        try:
            if cond():
                return
        except redis.exceptions.ConnectionError:
            pass
        if time.time() > deadline:
            for i, c in (clients or {}).items():
                info = cluster_info(c)
                print("  node %d: %s" % (i, {k: v for k, v in info.items()
                                             if k.startswith(("cluster_groups", "cluster_move", "cluster_my",
                                                              "cluster_members", "cluster_state"))}))
            fail("%s did not happen within %d s (logs in %s)" % (what, timeout, work))
        time.sleep(0.05)


def cluster_info(c):
    return c.info("cluster")


def balanced(clients, members):
    """Every node knows `members` live members and none receives or drains a group."""
    for c in clients:
        i = cluster_info(c)
        if i.get("cluster_state") != "ok" or i.get("cluster_members_known") != members:
            return False
        if i.get("cluster_groups_incoming") or i.get("cluster_groups_draining"):
            return False
        if b"disconnected" in c.execute_command("CLUSTER", "NODES"):
            return False
    return True


def moved_bytes(clients):
    return sum(cluster_info(c).get("cluster_move_bytes_sent", 0) for c in clients)


MOVE_COUNTERS = ("cluster_move_streams_done", "cluster_move_streams_restarted",
                 "cluster_move_keys_sent", "cluster_move_leaves_checked",
                 "cluster_move_leaves_wanted", "cluster_move_keys_filled")


def move_counters(clients):
    """The move counters summed over `clients` (what each phase's streams did)."""
    out = {}
    for c in clients:
        i = cluster_info(c)
        for f in MOVE_COUNTERS:
            out[f] = out.get(f, 0) + i.get(f, 0)
    return out


def counters_since(now, then):
    return ", ".join("%s %d" % (f[len("cluster_move_"):], now[f] - then.get(f, 0)) for f in MOVE_COUNTERS)


class Writer(threading.Thread):
    """Writes new keys through the given nodes, records what was acknowledged."""

    def __init__(self, ports, pipeline):
        super().__init__(daemon=True)
        self.clients = [redis.Redis(port=p, socket_timeout=20) for p in ports]
        self.pipeline = pipeline
        self.acked = {}
        # Writes not acknowledged: `refused` ones said they did not run (they must be on no
        # node), `unknown` ones may have run (a forwarded write whose reply timed out, a
        # connection error): each of those is on every owner of its slot or on none.
        self.refused = {}
        self.unknown = {}
        self.errors = 0
        self.max_gap = 0.0
        # (time of the reply, time since the one before): per phase, the longest gap.
        self.gaps = []
        self.stop = threading.Event()

    def run(self):
        n = 0
        last = time.time()
        rng = random.Random(6)
        while not self.stop.is_set():
            c = rng.choice(self.clients)
            p = c.pipeline(transaction=False)
            batch = [("w:%d" % (n + j), "v%d" % (n + j)) for j in range(self.pipeline)]
            n += self.pipeline
            for k, v in batch:
                p.set(k, v)
            try:
                replies = p.execute(raise_on_error=False)
            except redis.exceptions.RedisError:
                self.errors += len(batch)
                self.unknown.update(batch)
                continue
            now = time.time()
            self.max_gap = max(self.max_gap, now - last)
            self.gaps.append((now, now - last))
            last = now
            for (k, v), r in zip(batch, replies):
                if r is True:
                    self.acked[k] = v
                else:
                    self.errors += 1
                    if "did not run" in str(r):
                        self.refused[k] = v
                    else:
                        self.unknown[k] = v


# redis-benchmark's keys for `-t set -r N`: `key:` and 12 digits (the load's keys have fewer).
BENCH_KEY = re.compile(rb"^key:[0-9]{12}$")


class Benchmark(threading.Thread):
    """redis-benchmark SET load on one port in back-to-back runs until stopped; keeps each
    run's (end time, requests per second, max latency in ms)."""

    def __init__(self, port, keyspace, requests):
        super().__init__(daemon=True)
        self.cmd = ["redis-benchmark", "-p", str(port), "-t", "set", "-r", str(keyspace),
                    "-P", "16", "-c", "8", "-n", str(requests), "--csv"]
        self.runs = []
        self.failures = 0
        self.last_failure = b""
        self.stop = threading.Event()

    def run(self):
        while not self.stop.is_set():
            out = subprocess.run(self.cmd, capture_output=True, timeout=120)
            rows = [r for r in csv.reader(io.StringIO(out.stdout.decode(errors="replace")))
                    if r and r[0] == "SET"]
            if out.returncode != 0 or not rows:
                self.failures += 1
                self.last_failure = (out.stdout + out.stderr)[-300:]
                time.sleep(0.2)
                continue
            self.runs.append((time.time(), float(rows[0][1]), float(rows[0][7])))


def max_gap(gaps, t0, t1):
    """The longest gap that ended in [t0, t1)."""
    return max([g for at, g in gaps if t0 <= at < t1], default=0.0)


def key_sizes(values, clients, benchmark):
    """Each key's bytes (key and value) at the start of a change: the load's and the writer's
    acknowledged keys, and with --benchmark every redis-benchmark key some node holds (its
    values are 3 bytes, redis-benchmark's default -d)."""
    sizes = {k.encode(): len(k) + len(v) for k, v in values.items()}
    if benchmark:
        for keys in bench_keys(clients).values():
            for k in keys:
                sizes[k] = len(k) + 3
    return sizes


def moved_key_bytes(sizes, old, new_owners):
    """Each key's bytes once per owner that gained its slot: the least a move could ship."""
    total = 0
    for k, size in sizes.items():
        s = key_slot(k)
        total += size * len([o for o in new_owners[s] if o not in old[s]])
    return total


def bench_figures(benches, t0, t1):
    """Summed throughput and the longest latency of the runs that ended in [t0, t1)."""
    runs = [r for b in benches for r in b.runs if t0 <= r[0] < t1]
    if not runs:
        return "no run ended"
    per = {}
    for b in benches:
        mine = [r for r in b.runs if t0 <= r[0] < t1]
        if mine:
            per[b] = sum(r[1] for r in mine) / len(mine)
    return "%.0f SET/s over %d nodes, longest latency %.1f ms (%d runs)" % (
        sum(per.values()), len(per), max(r[2] for r in runs), len(runs))


def longest_holds(clients):
    """Per node, the longest time one thread held its node since the last RESETSTAT (ms)."""
    return {i: int(c.info("stats").get("host_lock_longest_hold_us", 0)) / 1000.0
            for i, c in clients.items()}


def fmt_holds(holds):
    return ", ".join("%d: %.1f" % (i, h) for i, h in sorted(holds.items()))


def bench_keys(clients):
    """Per node, the redis-benchmark keys it stores."""
    out = {}
    for i, c in clients.items():
        out[i] = set(k for k in c.scan_iter(match="key:*", count=1000) if BENCH_KEY.match(k))
    return out


def main():
    ap = argparse.ArgumentParser()
    partition_test.cluster_args(ap)
    ap.add_argument("--pipeline", type=int, default=10)
    ap.add_argument("--base-port", type=int, default=0)
    ap.add_argument("--timeout", type=int, default=60)
    ap.add_argument("--benchmark", action="store_true")
    ap.add_argument("--bench-keyspace", type=int, default=100000)
    ap.add_argument("--bench-requests", type=int, default=50000)
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="lattice-membership.")
    ports = Ports(args.base_port)
    t0 = time.time()
    try:
        n = args.nodes
        port = {i: ports.take() for i in range(1, n + 2)}
        cport = {i: ports.take() for i in range(1, n + 2)}
        seeds = ",".join("127.0.0.1:%d" % cport[i] for i in range(1, n + 1))
        clients = {i: launch(args.binary, work, i, port[i], cport[i], args.rf, ["--seeds", seeds])
                   for i in range(1, n + 1)}
        wait_for("the cluster coming up", lambda: balanced(clients.values(), n), 30, work)

        # 1. The load before any change.
        values = {}
        rng = random.Random(18)
        for at in range(0, args.keys, 100):
            p = rng.choice(list(clients.values())).pipeline(transaction=False)
            chunk = [("key:%d" % i, "v-%d" % i) for i in range(at, min(at + 100, args.keys))]
            for k, v in chunk:
                p.set(k, v)
            if not all(r is True for r in p.execute()):
                fail("a SET of the initial load was not acknowledged")
            values.update(chunk)
        leavers = [n - 1, n]
        stay = [i for i in range(1, n + 1) if i not in leavers]

        # 2. Writes through the nodes that stay, all along.
        writer = Writer([port[i] for i in stay], args.pipeline)
        writer.start()
        benches = []
        if args.benchmark:
            benches = [Benchmark(port[i], args.bench_keyspace, args.bench_requests) for i in stay]
            for b in benches:
                b.start()
            time.sleep(2)
        # A baseline: the writer's longest gap with nothing moving, and each node's longest
        # hold of its host lock then (INFO stats host_lock_longest_hold_us, sampled about once
        # a second, so a phase's figure can take in up to a second of the one before).
        for c in clients.values():
            c.config_resetstat()
        t_quiet = time.time()
        time.sleep(3)
        t_quiet_end = time.time()
        holds_quiet = longest_holds(clients)
        for c in clients.values():
            c.config_resetstat()

        # 3. A node joins.
        new = n + 1
        before = owners_by_slot(clients[1])
        sizes_join = key_sizes({**values, **writer.acked.copy()}, clients, args.benchmark)
        bytes0 = moved_bytes(clients.values())
        counts0 = move_counters(clients.values())
        t = t_join = time.time()
        clients[new] = launch(args.binary, work, new, port[new], cport[new], args.rf,
                              ["--join", "127.0.0.1:%d" % cport[1]])
        wait_for("the join balancing", lambda: balanced(clients.values(), n + 1), args.timeout, work,
                 clients)
        join_s = time.time() - t
        join_bytes = moved_bytes(clients.values()) - bytes0
        counts_join = move_counters(clients.values())
        after_join = owners_by_slot(clients[1])

        # 4. Two nodes leave.
        sizes_leave = key_sizes({**values, **writer.acked.copy()}, clients, args.benchmark)
        t = t_leave = time.time()
        for i in leavers:
            if clients[i].execute_command("CLUSTER", "LEAVE") != b"OK":
                fail("CLUSTER LEAVE on node %d" % i)
        rest = [i for i in clients if i not in leavers]
        wait_for("the leaves", lambda: all(cluster_info(clients[i]).get("cluster_my_status") == "left"
                                           for i in leavers)
                 and balanced([clients[i] for i in rest], len(rest)), args.timeout, work, clients)
        leave_s = time.time() - t
        leave_bytes = moved_bytes(clients.values()) - bytes0 - join_bytes
        counts_leave = move_counters(clients.values())
        time.sleep(1)
        t_end = time.time()
        # Before the checks below, whose reads through every node are long holds of their own.
        holds = longest_holds(clients)
        writer.stop.set()
        writer.join()
        for b in benches:
            b.stop.set()
        for b in benches:
            b.join()
        for i in leavers:
            PROCS[i].send_signal(signal.SIGTERM)
            PROCS[i].wait(timeout=10)
            del clients[i]
        after_leave = owners_by_slot(clients[1])

        # 5. Every key on exactly its owners, every acknowledged write readable.
        values.update(writer.acked)
        keys = sorted(values)
        slots = {k: key_slot(k.encode()) for k in keys}
        expected = {i: sum(1 for k in keys if port[i] in after_leave[slots[k]]) for i in clients}
        bench_total = 0
        if benches:
            # The benchmark's keys: each must be on every owner of its slot. Read once the
            # nodes are quiet (the writer's keys settle within the wait below).
            wait_for("the writer's keys settling",
                     lambda: all(clients[i].dbsize() >= expected[i] for i in clients), 30, work)
            time.sleep(1)
            held = bench_keys(clients)
            union = set().union(*held.values())
            bench_total = len(union)
            short = 0
            for i in clients:
                owned = set(k for k in union if port[i] in after_leave[key_slot(k)])
                missing = owned - held[i]
                if missing:
                    short += len(missing)
                    print("  node %d lacks %d benchmark keys of its slots (%s)"
                          % (i, len(missing), sorted(missing)[:5]))
                expected[i] += len(owned)
            if short:
                fail("owners disagree on redis-benchmark's keys")
        # The writer's writes that were not acknowledged: one that may have run counts on
        # every owner of its slot if it is on any node, and must then be on all of them; one
        # refused as not run must be on none.
        if writer.refused or writer.unknown:
            found = {}

            def unacked_settled():
                local = {i: set(k.decode() for k in clients[i].scan_iter(match="w:*", count=1000))
                         for i in clients}
                anywhere = set().union(*local.values())
                found["refused"] = sorted(anywhere & set(writer.refused))
                found["ran"] = sorted(anywhere & set(writer.unknown))
                found["short"] = {}
                for k in found["ran"]:
                    owners = [i for i in clients if port[i] in after_leave[key_slot(k.encode())]]
                    short = [i for i in owners if k not in local[i]]
                    if short:
                        found["short"][k] = short
                return not found["refused"] and not found["short"]

            try:
                wait_for("the unacknowledged writes settling", unacked_settled, 30, work)
            except SystemExit:
                for k in found["refused"][:5]:
                    print("  %s was refused as not run, but a node holds it" % k)
                for k, short in list(found["short"].items())[:5]:
                    print("  %s (not acknowledged, but it ran) is missing on owner(s) %s" % (k, short))
                raise
            for k in found["ran"]:
                for i in clients:
                    if port[i] in after_leave[key_slot(k.encode())]:
                        expected[i] += 1
            print("writes not acknowledged: %d refused as not run (on no node), %d of unknown "
                  "outcome (%d of them ran, on every owner)"
                  % (len(writer.refused), len(writer.unknown), len(found["ran"])))
        sizes = {}
        try:
            wait_for("DBSIZE matching the placement",
                     lambda: sizes.update({i: clients[i].dbsize() for i in clients}) or sizes == expected,
                     30, work, clients)
        except SystemExit:
            print("  DBSIZE %s, expected %s" % (sizes, expected))
            for i, c in clients.items():
                # redis-benchmark's keys were checked above: only the writer's and the
                # load's are compared here.
                mine = set(k.decode() for k in c.keys("*") if not BENCH_KEY.match(k))
                owned = set(k for k in keys if port[i] in after_leave[slots[k]])
                extra, missing = sorted(mine - owned), sorted(owned - mine)
                print("  node %d: %d keys it does not own (%s), %d of its own missing (%s)"
                      % (i, len(extra), extra[:5], len(missing), missing[:5]))
            raise
        missing = set()
        order = sorted(clients)
        for k, i, v in partition_test.read_back([clients[i] for i in order], keys, values.get):
            if len(missing) < 10:
                print("  GET %s through node %d answered %r" % (k, order[i], v))
            missing.add(k)
        lost = len(missing)

        print("%d nodes, replication factor %d, %d keys loaded, %d more acknowledged during the "
              "changes (%d writes refused or failed)"
              % (n, args.rf, args.keys, len(writer.acked), writer.errors))
        print("join of node %d: balanced after %.2f s; %d bytes moved for %d bytes of keys in "
              "moved slots" % (new, join_s, join_bytes, moved_key_bytes(sizes_join, before, after_join)))
        print("leave of nodes %s: done after %.2f s; %d bytes moved for %d bytes of keys in "
              "moved slots" % (leavers, leave_s, leave_bytes,
                                moved_key_bytes(sizes_leave, after_join, after_leave)))
        print("  join's streams: %s" % counters_since(counts_join, counts0))
        print("  leave's streams: %s" % counters_since(counts_leave, counts_join))
        print("longest gap with no reply to the writer: %.3f s (nothing moving, %.0f s before "
              "the join: %.3f s; during the join: %.3f s; during the leaves: %.3f s)"
              % (writer.max_gap, t_quiet_end - t_quiet, max_gap(writer.gaps, t_quiet, t_quiet_end),
                 max_gap(writer.gaps, t_join, t_leave), max_gap(writer.gaps, t_leave, t_end)))
        if benches:
            print("redis-benchmark (-t set -r %d -P 16, %d nodes): %d keys written, on every "
                  "owner; %d runs failed" % (args.bench_keyspace, len(benches), bench_total,
                                             sum(b.failures for b in benches)))
            for b in benches:
                if b.failures:
                    print("  a failed run's output: %r" % b.last_failure)
                    break
            print("  before the changes: %s" % bench_figures(benches, 0, t_join))
            print("  during the join:    %s" % bench_figures(benches, t_join, t_leave))
            print("  during the leaves:  %s" % bench_figures(benches, t_leave, t_end))
        print("longest host-lock hold per node, ms: nothing moving %s; during the changes %s"
              % (fmt_holds(holds_quiet), fmt_holds(holds)))
        for i in clients:
            # Keys in the general form (full metadata) and RSS: a node keeps the metadata of
            # the keys of groups it gained while it runs (ARCHITECTURE §92).
            repl = clients[i].info("replication")
            mem = clients[i].info("memory")
            print("  node %d: DBSIZE %d (expected %d), general_states %s, packed_keys %s, RSS %.1f MB"
                  % (i, sizes[i], expected[i], repl.get("general_states", "?"),
                     repl.get("packed_keys", "?"), mem.get("used_memory_rss", 0) / 1e6))
        print("lost acknowledged writes: %d (of %d keys, read through each of %d nodes)"
              % (lost, len(keys), len(clients)))
        if lost:
            fail("acknowledged writes are missing")
        print("membership test passed in %.1f s" % (time.time() - t0))
    finally:
        partition_test.stop(list(PROCS.values()))
        if not os.environ.get("KEEP_WORK"):
            shutil.rmtree(work, ignore_errors=True)
        else:
            print("work dir kept: %s" % work)


if __name__ == "__main__":
    main()
