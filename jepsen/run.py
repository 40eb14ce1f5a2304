#!/usr/bin/env python3
"""Lattice fault tests: real lattice-server processes in network namespaces, a seeded nemesis,
concurrent RESP clients, a recorded history, checkers and a report. See jepsen/README.md.

  run.py run   --nodes 3 --nemesis all --seed 42 [--plant ...] [--bin ...]   one run
  run.py suite quick|full|canaries                                            a set of runs

Everything random (the schedule, the victims, the operations) comes from the printed seed, so
`run.py run ... --seed S` replays a run's schedule; the servers' own timing is not replayable.
"""

import argparse
import ctypes
import json
import os
import random
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from resp import Conn, RespError  # noqa: E402
import checkers  # noqa: E402
import report  # noqa: E402

ROOT = os.path.dirname(HERE)
# Addresses exist only inside the namespaces this run creates (a bridge in a hub namespace, no
# address in the root namespace, no route out): nothing can leave the machine.
SUBNET = "10.213.0"
CLIENT_IP = SUBNET + ".2"
REDIS_PORT = 6379
CLUSTER_PORT = 7000
SECRET = "jepsen-secret"
FAKETIME_LIBS = ["/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
                 "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
                 "/usr/lib/faketime/libfaketime.so.1"]

PARTITIONS = ["partition-halves", "partition-one", "partition-ring", "partition-oneway"]
SINGLE = PARTITIONS + ["kill", "pause", "clock-skew", "clock-jump"]
COMBINED = {"combined-a": ["partition-halves", "kill", "clock-skew"],
            "combined-b": ["partition-oneway", "pause", "clock-jump"],
            "combined-c": ["partition-ring", "kill", "pause"]}
WORKLOADS = ["counter", "set", "register", "hash", "list"]
# Runner-side planted faults (see README): each makes exactly one checker fail.
PLANTS = ["lose-sadd", "stale-register", "lose-push", "amnesia", "no-final-heal"]

OP_TIMEOUT = 1.0
libc = ctypes.CDLL(None, use_errno=True)


def node_ip(i):
    return "%s.%d" % (SUBNET, 10 + i)


def sh(*cmd, check=True, timeout=20):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)
    if check and r.returncode != 0:
        raise RuntimeError("%s: %s" % (" ".join(cmd), r.stderr.decode().strip()))
    return r


def log(msg):
    print("[%s] %s" % (time.strftime("%H:%M:%S"), msg), flush=True)


# ---------------------------------------------------------------- network namespaces

NS_RE = re.compile(r"^lj(\d+)[hcn]")


def remove_stale_namespaces():
    """Namespaces left by a runner that died without cleaning up (SIGKILL): their pid is gone."""
    out = sh("ip", "netns", "list", check=False).stdout.decode()
    for line in out.splitlines():
        name = line.split()[0] if line.split() else ""
        m = NS_RE.match(name)
        if m and not os.path.exists("/proc/%s" % m.group(1)):
            kill_namespace_processes(name)
            sh("ip", "netns", "del", name, check=False)


def kill_namespace_processes(name):
    r = sh("ip", "netns", "pids", name, check=False)
    for pid in r.stdout.decode().split():
        if pid == str(os.getpid()):
            continue  # this runner's own threads live in the client namespace
        try:
            os.kill(int(pid), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            pass


class Net:
    def __init__(self, n):
        tag = "lj%d" % os.getpid()
        self.hub = tag + "h"
        self.client = tag + "c"
        self.nodes = {i: "%sn%d" % (tag, i) for i in range(1, n + 1)}
        self.created = []

    def _ns(self, name):
        sh("ip", "netns", "add", name)
        self.created.append(name)
        sh("ip", "-n", name, "link", "set", "lo", "up")

    def _attach(self, name, veth, ip):
        sh("ip", "-n", self.hub, "link", "add", veth, "type", "veth", "peer", "name", "eth0",
           "netns", name)
        sh("ip", "-n", self.hub, "link", "set", veth, "master", "br0", "up")
        sh("ip", "-n", name, "addr", "add", ip + "/24", "dev", "eth0")
        sh("ip", "-n", name, "link", "set", "eth0", "up")

    def up(self):
        self._ns(self.hub)
        sh("ip", "-n", self.hub, "link", "add", "br0", "type", "bridge")
        sh("ip", "-n", self.hub, "link", "set", "br0", "up")
        self._ns(self.client)
        self._attach(self.client, "vc", CLIENT_IP)
        for i, name in self.nodes.items():
            self._ns(name)
            self._attach(name, "v%d" % i, node_ip(i))
            sh("ip", "netns", "exec", name, "iptables", "-F", "INPUT")

    def down(self):
        for name in reversed(self.created):
            kill_namespace_processes(name)
            sh("ip", "netns", "del", name, check=False)
        self.created = []

    def enter_client(self):
        """Moves this thread (and every thread it starts later) into the client namespace."""
        fd = os.open("/var/run/netns/%s" % self.client, os.O_RDONLY)
        try:
            if libc.setns(fd, 0x40000000) != 0:  # CLONE_NEWNET
                raise OSError(ctypes.get_errno(), "setns into %s" % self.client)
        finally:
            os.close(fd)

    def drop(self, dst, src):
        """Node dst drops every packet from node src."""
        sh("ip", "netns", "exec", self.nodes[dst], "iptables", "-A", "INPUT", "-s", node_ip(src),
           "-j", "DROP")

    def heal(self):
        for name in self.nodes.values():
            sh("ip", "netns", "exec", name, "iptables", "-F", "INPUT")


# ---------------------------------------------------------------- nodes

class Node:
    def __init__(self, run, i):
        self.run = run
        self.i = i
        self.inc = 0
        self.proc = None
        self.paused = False
        self.dir = os.path.join(run.dir, "n%d" % i)
        os.makedirs(self.dir, exist_ok=True)
        self.clock_file = os.path.join(self.dir, "faketime")
        self.set_clock(0)

    def set_clock(self, offset_s):
        with open(self.clock_file + ".tmp", "w") as f:
            f.write("%+d\n" % offset_s)
        os.replace(self.clock_file + ".tmp", self.clock_file)

    def start(self):
        self.inc += 1
        data = os.path.join(self.dir, "data%d" % self.inc)
        os.makedirs(data, exist_ok=True)
        logf = open(os.path.join(self.dir, "server.log"), "ab")
        logf.write(b"==== incarnation %d\n" % self.inc)
        logf.flush()
        self.log_start = os.path.getsize(os.path.join(self.dir, "server.log"))
        env_args = []
        if self.run.faketime:
            env_args = ["LD_PRELOAD=" + self.run.faketime,
                        "FAKETIME_TIMESTAMP_FILE=" + self.clock_file,
                        "FAKETIME_CACHE_DURATION=1", "FAKETIME_DONT_FAKE_MONOTONIC=1"]
        seeds = ",".join("%s:%d" % (node_ip(j), CLUSTER_PORT) for j in self.run.node_ids)
        cmd = (["ip", "netns", "exec", self.run.net.nodes[self.i], "env"] + env_args +
               [self.run.bin, "--bind", node_ip(self.i), "--port", str(REDIS_PORT),
                "--dir", data, "--threads", "1", "--node-id", str(self.node_id()),
                "--cluster-port", str(CLUSTER_PORT), "--seeds", seeds,
                # Every node owns every key: the checkers compare whole replicas.
                "--replication-factor", str(len(self.run.node_ids))])
        env = dict(os.environ, LATTICE_CLUSTER_SECRET=SECRET, RUST_LOG="info")
        self.proc = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, env=env,
                                     start_new_session=True)
        logf.close()
        self.paused = False

    def node_id(self):
        """A restarted node has lost its state; by default it rejoins as a new replica id
        (--restart-id fresh), because reusing the id loses its new writes (README: findings)."""
        if self.run.args.restart_id == "same" or self.inc == 1:
            return self.i
        return self.i + 100 * (self.inc - 1)

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def wait_port(self, timeout=15):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if not self.alive():
                raise RuntimeError("node %d exited: see %s/server.log" % (self.i, self.dir))
            try:
                socket.create_connection((node_ip(self.i), REDIS_PORT), timeout=0.5).close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("node %d: nothing listens after %ds" % (self.i, timeout))

    def links_up(self):
        with open(os.path.join(self.dir, "server.log"), "rb") as f:
            f.seek(self.log_start)
            text = f.read().decode(errors="replace")
        return len(set(re.findall(r"outgoing link to node (\d+) .* up", text)))

    def kill(self):
        if self.alive():
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)
        self.paused = False

    def stop(self):
        if not self.alive():
            return
        self.proc.send_signal(signal.SIGCONT)
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=3)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def signal(self, sig):
        if self.alive():
            self.proc.send_signal(sig)


def call_once(i, *args, timeout=OP_TIMEOUT):
    c = Conn(node_ip(i), REDIS_PORT, timeout)
    try:
        return c.call(*args)
    finally:
        c.close()


# ---------------------------------------------------------------- workload clients

class History:
    def __init__(self, t0):
        self.t0 = t0
        self.ops = []
        self.lock = threading.Lock()
        self.n = 0

    def now(self):
        return round(time.monotonic() - self.t0, 6)

    def add(self, rec):
        with self.lock:
            rec["index"] = self.n
            self.n += 1
            self.ops.append(rec)


class Client(threading.Thread):
    """One client process of the history: stays on one node, one request at a time."""

    def __init__(self, run, cid, node):
        super().__init__(daemon=True)
        self.runner = run
        self.cid = cid
        self.node = node
        self.rng = random.Random(run.seed * 1000 + cid)
        self.conn = None
        self.conn_inc = 0
        self.seq = 0
        self.seen = {}  # set key -> members seen in the last read (SREM picks from these)

    def unique(self):
        self.seq += 1
        return "c%d-%d" % (self.cid, self.seq)

    def gen(self):
        r = self.rng
        w = r.choice(self.runner.workloads)
        key = "%s:%d" % (w, r.randrange(self.runner.keys))
        x = r.random()
        if w == "counter":
            if x < 0.75:
                d = r.choice([-5, -3, -2, -1, 1, 2, 3, 5, 7, 10])
                return ("incrby", key, d) if d > 0 else ("decrby", key, -d)
            return ("get", key, None)
        if w == "set":
            if x < 0.55:
                return ("sadd", key, self.unique())
            if x < 0.75 and self.seen.get(key):
                return ("srem", key, r.choice(sorted(self.seen[key])))
            return ("smembers", key, None)
        if w == "register":
            return ("set", key, self.unique()) if x < 0.6 else ("get", key, None)
        if w == "hash":
            if x < 0.4:
                return ("hset", key, ["f%d" % r.randrange(3), self.unique()])
            if x < 0.75:
                return ("hincrby", key, ["c%d" % r.randrange(3), r.choice([-2, -1, 1, 2, 3, 5])])
            return ("hgetall", key, None)
        if x < 0.65:
            return ("lpush", key, self.unique())
        return ("lrange", key, None)

    @staticmethod
    def command(f, key, v):
        if f in ("get", "smembers", "hgetall"):
            return (f.upper(), key)
        if f == "lrange":
            return ("LRANGE", key, 0, -1)
        if f in ("hset", "hincrby"):
            return (f.upper(), key, v[0], v[1])
        return (f.upper(), key, v)

    def do(self, f, key, v):
        run, h = self.runner, self.runner.history
        base = {"process": self.cid, "node": self.node, "f": f, "key": key, "value": v}
        inv = dict(base, type="invoke", time=h.now())
        sent = False
        try:
            if self.conn is None:
                inc = run.nodes[self.node].inc
                self.conn = Conn(node_ip(self.node), REDIS_PORT, OP_TIMEOUT)
                self.conn_inc = inc
            inv["inc"] = self.conn_inc
            h.add(inv)
            sent = True
            res = self.conn.call(*self.command(f, key, v))
            done = dict(base, type="ok", time=h.now(), inc=self.conn_inc)
            if f in ("get", "smembers", "hgetall", "lrange", "sadd", "srem", "incrby", "decrby",
                     "hincrby", "lpush"):
                done["result"] = res
            if f == "hgetall" and isinstance(res, list):
                done["result"] = dict(zip(res[0::2], res[1::2]))
            h.add(done)
            if f == "smembers" and isinstance(res, list):
                self.seen[key] = set(res)
            run.plant_hook(self, f, key, v, res)
        except RespError as e:
            if not sent:
                return
            h.add(dict(base, type="fail", time=h.now(), inc=self.conn_inc, error=str(e)))
        except (OSError, ConnectionError) as e:
            if self.conn:
                self.conn.close()
            self.conn = None
            if sent:
                # The request may or may not have been applied: indeterminate.
                h.add(dict(base, type="info", time=h.now(), inc=self.conn_inc,
                           error=type(e).__name__))
            else:
                time.sleep(0.05)  # node down: nothing was sent, nothing recorded

    def run(self):
        run = self.runner
        count = 0
        while (not run.stop_clients.is_set() and count < run.max_ops_per_client
               and time.monotonic() < run.client_deadline):
            self.do(*self.gen())
            count += 1
            time.sleep(run.think_s)
        if self.conn:
            self.conn.close()


# ---------------------------------------------------------------- the run

class Run:
    def __init__(self, args):
        self.args = args
        self.seed = args.seed if args.seed is not None else random.SystemRandom().randrange(10**9)
        self.rng = random.Random(self.seed)
        self.n = args.nodes
        self.node_ids = list(range(1, self.n + 1))
        self.bin = os.path.abspath(args.bin)
        self.workloads = args.workloads.split(",") if args.workloads != "all" else WORKLOADS
        self.plant = args.plant
        self.keys = args.keys
        self.think_s = 0.004
        self.max_ops_per_client = 100000
        name = args.name or "n%d-%s-s%d%s" % (self.n, args.nemesis.replace(",", "+"), self.seed,
                                             "-" + self.plant if self.plant else "")
        self.dir = os.path.join(os.path.abspath(args.out), name)
        # A rerun of the same seed must not start its servers on the last run's data
        # directories (they would load its writes, which this run's history never made).
        shutil.rmtree(self.dir, ignore_errors=True)
        os.makedirs(self.dir, exist_ok=True)
        self.faketime = next((p for p in FAKETIME_LIBS if os.path.exists(p)), None)
        self.events = []  # nemesis windows and kills, for the checkers and the plots
        self.kills = []  # (node, incarnation, time)
        self.convergence = []  # per heal: {"step", "nemesis", "ms"}
        self.clock_checks = []
        self.stop_clients = threading.Event()
        self.client_deadline = 0
        self.net = None
        self.nodes = {}
        self.plant_state = {"done": 0}
        self.hidden_restart = set()

    def replay_command(self):
        a = self.args
        py = os.path.relpath(sys.executable, ROOT) if sys.executable.startswith(ROOT) else "python3"
        cmd = [py, "jepsen/run.py", "run", "--nodes", str(self.n), "--nemesis", a.nemesis,
               "--seed", str(self.seed), "--workloads", a.workloads, "--steps", str(a.steps),
               "--fault-s", str(a.fault_s), "--quiet-s", str(a.quiet_s), "--keys", str(a.keys),
               "--bin", os.path.relpath(self.bin, ROOT)]
        if a.clock_max_s:
            cmd += ["--clock-max-s", str(a.clock_max_s)]
        if a.restart_id != "fresh":
            cmd += ["--restart-id", a.restart_id]
        if self.plant:
            cmd += ["--plant", self.plant]
        return " ".join(shlex.quote(c) for c in cmd)

    # ------------------------------------------------------------ schedule

    def schedule(self):
        spec = self.args.nemesis
        if spec == "all":
            kinds = [[k] for k in SINGLE] + [COMBINED["combined-a"]]
        elif spec == "none":
            kinds = []
        else:
            kinds = []
            for part in spec.split(","):
                kinds.append(COMBINED[part] if part in COMBINED else [part])
            for k in kinds:
                for x in k:
                    if x not in SINGLE:
                        raise SystemExit("unknown nemesis %r (known: %s, %s)" %
                                         (x, ", ".join(SINGLE), ", ".join(COMBINED)))
            kinds = kinds * self.args.steps
        steps = []
        r = self.rng
        for k in kinds:
            faults = []
            used = set()
            for kind in k:
                faults.append(self.plan_fault(kind, used))
            steps.append({"kinds": k, "faults": faults,
                          "fault_s": round(self.args.fault_s * r.uniform(0.8, 1.2), 2)})
        if spec == "all":
            r.shuffle(steps)
        return steps

    def plan_fault(self, kind, used):
        r = self.rng
        ids = self.node_ids
        free = [i for i in ids if i not in used] or ids
        if kind == "partition-halves":
            s = ids[:]
            r.shuffle(s)
            a, b = s[:len(s) // 2], s[len(s) // 2:]
            return {"kind": kind, "groups": [sorted(a), sorted(b)],
                    "drops": [(x, y) for x in a for y in b] + [(y, x) for x in a for y in b]}
        if kind == "partition-one":
            v = r.choice(ids)
            return {"kind": kind, "victim": v,
                    "drops": [(v, y) for y in ids if y != v] + [(y, v) for y in ids if y != v]}
        if kind == "partition-ring":
            s = ids[:]
            r.shuffle(s)
            pos = {x: k for k, x in enumerate(s)}
            n = len(s)
            near = lambda x, y: (pos[x] - pos[y]) % n in (1, n - 1)  # noqa: E731
            return {"kind": kind, "ring": s,
                    "drops": [(x, y) for x in ids for y in ids if x != y and not near(x, y)]}
        if kind == "partition-oneway":
            v = r.choice(ids)
            return {"kind": kind, "victim": v, "note": "victim hears nobody; others hear it",
                    "drops": [(v, y) for y in ids if y != v]}
        v = r.choice(free)
        used.add(v)
        if kind == "kill":
            return {"kind": kind, "victim": v}
        if kind == "pause":
            return {"kind": kind, "victim": v}
        cap = self.args.clock_max_s or 10**6
        if kind == "clock-skew":
            return {"kind": kind, "victim": v,
                    "offset_s": r.choice([-1, 1]) * min(cap // 2, r.randint(5, 40))}
        if kind == "clock-jump":
            return {"kind": kind, "victim": v,
                    "offset_s": r.choice([-1, 1]) * min(cap, r.randint(60, 600))}
        raise ValueError(kind)

    # ------------------------------------------------------------ faults

    def apply(self, f):
        k = f["kind"]
        if k.startswith("partition"):
            for dst, src in f["drops"]:
                self.net.drop(dst, src)
        elif k == "kill":
            node = self.nodes[f["victim"]]
            self.kills.append({"node": node.i, "inc": node.inc, "time": self.history.now()})
            node.kill()
        elif k == "pause":
            self.nodes[f["victim"]].signal(signal.SIGSTOP)
            self.nodes[f["victim"]].paused = True
        elif k.startswith("clock"):
            self.nodes[f["victim"]].set_clock(f["offset_s"])

    def heal(self, f):
        k = f["kind"]
        if k.startswith("partition"):
            self.net.heal()
        elif k == "kill":
            node = self.nodes[f["victim"]]
            node.start()
            node.wait_port()
        elif k == "pause":
            self.nodes[f["victim"]].signal(signal.SIGCONT)
            self.nodes[f["victim"]].paused = False
        elif k.startswith("clock"):
            self.check_clock(f["victim"], f["offset_s"])
            self.nodes[f["victim"]].set_clock(0)
            time.sleep(1.2)  # libfaketime re-reads the offset once a second

    def check_clock(self, i, offset):
        """Whether libfaketime moved the node's wall clock: TIME against ours."""
        try:
            secs, micros = call_once(i, "TIME")
            seen = int(secs) + int(micros) / 1e6 - time.time()
            self.clock_checks.append({"node": i, "offset_s": offset, "observed_s": round(seen, 2)})
        except (OSError, ConnectionError, RespError, ValueError) as e:
            self.clock_checks.append({"node": i, "offset_s": offset, "error": str(e)})

    def probe(self, step, when):
        """Writes a marker on every reachable node; returns the keys written."""
        keys = []
        for i, node in self.nodes.items():
            if not node.alive() or node.paused:
                continue
            key = "probe:%d:%s:%d" % (step, when, i)
            try:
                call_once(i, "SET", key, "1")
                keys.append(key)
            except (OSError, ConnectionError, RespError):
                pass
        return keys

    def wait_markers(self, keys, timeout=40):
        """Milliseconds until every node holds every marker (None: not within timeout)."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            ok = True
            for i in self.node_ids:
                try:
                    vals = call_once(i, "MGET", *keys) if keys else []
                except (OSError, ConnectionError, RespError):
                    ok = False
                    break
                if any(v is None for v in vals):
                    ok = False
                    break
            if ok:
                return round((time.monotonic() - t0) * 1000, 1)
            time.sleep(0.02)
        return None

    def nemesis(self, steps):
        quiet = self.args.quiet_s
        time.sleep(quiet)
        for n, step in enumerate(steps):
            label = "+".join(step["kinds"])
            t_start = self.history.now()
            log("step %d/%d: %s %s" % (n + 1, len(steps), label,
                                       "; ".join(describe(f) for f in step["faults"])))
            for f in step["faults"]:
                self.apply(f)
            if self.plant == "amnesia" and n == 0:
                self.plant_amnesia()
            time.sleep(step["fault_s"])
            keys = self.probe(n, "before")
            t_heal = self.history.now()
            for f in step["faults"]:
                self.heal(f)
            t0 = time.monotonic()
            # Writes made right after the heal must spread too: a node whose timers stalled
            # (e.g. after its clock went back) holds them back even when the backlog arrived.
            keys += self.probe(n, "after")
            ms = self.wait_markers(keys)
            if ms is not None:
                ms = round((time.monotonic() - t0) * 1000, 1)
            self.convergence.append({"step": n, "nemesis": label, "ms": ms})
            self.events.append({"step": n, "nemesis": label, "start": t_start, "heal": t_heal,
                                "faults": step["faults"], "converged_ms": ms})
            log("  healed; converged in %s" % ("%.0f ms" % ms if ms is not None else
                                               "NOT within 40 s"))
            time.sleep(quiet)

    # ------------------------------------------------------------ planted faults

    def plant_hook(self, client, f, key, v, res):
        """Runner-side planted faults, each an unrecorded request that breaks one promise."""
        p = self.plant
        st = self.plant_state
        if p == "lose-sadd" and f == "sadd" and st["done"] < 5 and client.rng.random() < 0.2:
            # A node that forgets an acknowledged add: an SREM nobody recorded.
            client.conn.call("SREM", key, v)
            st["done"] += 1
        elif p == "lose-push" and f == "lpush" and st["done"] < 5 and client.rng.random() < 0.2:
            client.conn.call("LREM", key, 0, v)
            st["done"] += 1

    def plant_stale_register(self):
        """A node that brings back an old value: after the clients stopped, each register is
        set again, unrecorded, to its first acknowledged value, which later acknowledged
        writes had replaced."""
        firsts = {}
        for rec in self.history.ops:
            if rec["type"] == "ok" and rec["f"] == "set" and rec["key"] not in firsts:
                firsts[rec["key"]] = rec["value"]
        log("  planted stale-register: %d registers set back to their first value" %
            len(firsts))
        for key, v in sorted(firsts.items()):
            call_once(1, "SET", key, v)

    def plant_amnesia(self):
        """A node that silently loses its state: node 1 is isolated, killed and restarted
        empty, and the history is not told (its incarnation number stays the same)."""
        node = self.nodes[1]
        log("  planted amnesia: node 1 isolated, killed and restarted empty, unrecorded")
        for y in self.node_ids:
            if y != 1:
                self.net.drop(1, y)
                self.net.drop(y, 1)
        node.kill()
        inc = node.inc
        node.start()
        node.inc = inc
        node.wait_port()
        time.sleep(2.0)
        self.net.heal()

    # ------------------------------------------------------------ final state

    def read_state(self, i):
        state = {}
        c = Conn(node_ip(i), REDIS_PORT, 5)
        try:
            for w in self.workloads:
                for k in range(self.keys):
                    key = "%s:%d" % (w, k)
                    if w in ("counter", "register"):
                        state[key] = c.call("GET", key)
                    elif w == "set":
                        state[key] = sorted(c.call("SMEMBERS", key))
                    elif w == "hash":
                        r = c.call("HGETALL", key)
                        state[key] = dict(sorted(zip(r[0::2], r[1::2])))
                    else:
                        state[key] = c.call("LRANGE", key, 0, -1)
        finally:
            c.close()
        return state

    def final_states(self, timeout):
        t0 = time.monotonic()
        states = {}
        while True:
            states = {}
            for i in self.node_ids:
                try:
                    states[i] = self.read_state(i)
                except (OSError, ConnectionError, RespError) as e:
                    states[i] = {"__error__": str(e)}
            vals = list(states.values())
            if all(v == vals[0] for v in vals) or time.monotonic() - t0 > timeout:
                ms = round((time.monotonic() - t0) * 1000, 1)
                return states, ms, all(v == vals[0] for v in vals)
            time.sleep(0.25)

    # ------------------------------------------------------------ main

    def execute(self):
        args = self.args
        log("seed %d: %s" % (self.seed, self.dir))
        log("replay: %s" % self.replay_command())
        steps = self.schedule()
        remove_stale_namespaces()
        self.net = Net(self.n)
        results = None
        try:
            self.net.up()
            self.net.enter_client()
            self.nodes = {i: Node(self, i) for i in self.node_ids}
            for node in self.nodes.values():
                node.start()
            for node in self.nodes.values():
                node.wait_port()
            end = time.monotonic() + 20
            while any(nd.links_up() < self.n - 1 for nd in self.nodes.values()):
                if time.monotonic() > end:
                    raise RuntimeError("replica links not up within 20 s")
                time.sleep(0.1)
            self.history = History(time.monotonic())
            total = (len(steps) * (args.fault_s * 1.2 + args.quiet_s + 45) + args.quiet_s + 60)
            self.client_deadline = time.monotonic() + total
            clients = []
            per_node = args.clients_per_node
            for c in range(self.n * per_node):
                clients.append(Client(self, c, self.node_ids[c % self.n]))
            for c in clients:
                c.start()
            self.nemesis(steps)
            if self.plant == "no-final-heal":
                log("  planted: node 1 stays isolated after the final heal")
                for y in self.node_ids:
                    if y != 1:
                        self.net.drop(1, y)
                        self.net.drop(y, 1)
                time.sleep(2.0)
            self.stop_clients.set()
            for c in clients:
                c.join(timeout=5)
            if self.plant == "stale-register":
                self.plant_stale_register()
            t_end = self.history.now()
            states, conv_ms, converged = self.final_states(10 if self.plant == "no-final-heal"
                                                           else 60)
            log("final state %s after %.0f ms" % ("agreed" if converged else "DISAGREES",
                                                  conv_ms))
            with open(os.path.join(self.dir, "final-state.json"), "w") as f:
                json.dump({str(k): v for k, v in states.items()}, f)
            results = checkers.check_all(self, states, converged)
            results["final_convergence_ms"] = conv_ms
            results["end_time"] = t_end
        except BaseException as e:
            log("run aborted (%s: %s); seed %d; replay with: %s" % (
                type(e).__name__, e, self.seed, self.replay_command()))
            raise
        finally:
            for node in self.nodes.values():
                node.stop()
            self.net.down()
            if hasattr(self, "history"):
                self.write_history()
        return self.finish(results)

    def write_history(self):
        with open(os.path.join(self.dir, "history.jsonl"), "w") as f:
            for op in self.history.ops:
                f.write(json.dumps(op, separators=(",", ":")) + "\n")

    def finish(self, results):
        meta = {"seed": self.seed, "nodes": self.n, "nemesis": self.args.nemesis,
                "plant": self.plant, "binary": self.bin, "replay": self.replay_command(),
                "events": self.events, "kills": self.kills, "convergence": self.convergence,
                "clock_checks": self.clock_checks, "faketime": self.faketime,
                "ops": len(self.history.ops), "dir": self.dir,
                "workloads": self.workloads}
        results["meta"] = meta
        with open(os.path.join(self.dir, "results.json"), "w") as f:
            json.dump(results, f, indent=1, default=str)
        report.write_run(self.dir, self.history.ops, results)
        valid = results["valid"]
        for name, r in results["checkers"].items():
            log("  %-12s %s %s" % (name, "valid" if r["valid"] else "INVALID",
                                   r.get("summary", "")))
            for e in r.get("errors", [])[:5]:
                log("      " + e)
        log("%s: seed %d, report %s/index.html" % ("VALID" if valid else "INVALID", self.seed,
                                                   self.dir))
        if not valid:
            log("replay with: %s" % self.replay_command())
        return results


def describe(f):
    k = f["kind"]
    if "groups" in f:
        return "%s %s" % (k, f["groups"])
    if "ring" in f:
        return "%s %s" % (k, f["ring"])
    if "offset_s" in f:
        return "%s node %d %+ds" % (k, f["victim"], f["offset_s"])
    return "%s node %d" % (k, f["victim"])


# ---------------------------------------------------------------- suites

def run_args(base, **kw):
    a = argparse.Namespace(**vars(base))
    for k, v in kw.items():
        setattr(a, k, v)
    return a


def suite(args):
    out = os.path.abspath(os.path.join(args.out, args.suite))
    os.makedirs(out, exist_ok=True)
    rng = random.Random(args.seed if args.seed is not None else time.time_ns())
    base = argparse.Namespace(nodes=3, nemesis="all", seed=None, workloads="all", steps=1,
                              fault_s=args.fault_s, quiet_s=args.quiet_s, keys=args.keys,
                              bin=args.bin, plant=None, out=out, name=None, restart_id="fresh",
                              clients_per_node=args.clients_per_node,
                              clock_max_s=args.clock_max_s)
    plan = []
    if args.suite == "quick":
        plan.append(run_args(base, seed=rng.randrange(10**9)))
    elif args.suite == "full":
        for n in (3, 5):
            for nem in SINGLE + list(COMBINED):
                plan.append(run_args(base, nodes=n, nemesis=nem, steps=2,
                                     seed=rng.randrange(10**9)))
    elif args.suite == "canaries":
        # Each checker shown to fail. planted-bug binary: the node's own canary (counters).
        plan.append(run_args(base, nemesis="partition-halves", steps=2, bin=args.planted_bin,
                             workloads="counter,hash", seed=rng.randrange(10**9),
                             name="canary-planted-bug-binary"))
        for p in PLANTS:
            wl = {"lose-sadd": "set", "stale-register": "register", "lose-push": "list",
                  "amnesia": "set,list", "no-final-heal": "all"}[p]
            nem = "partition-one" if p != "amnesia" else "pause"
            plan.append(run_args(base, nemesis=nem, workloads=wl, plant=p,
                                 seed=rng.randrange(10**9), name="canary-" + p))
    rows = []
    for a in plan:
        t0 = time.monotonic()
        try:
            res = Run(a).execute()
            rows.append({"dir": os.path.relpath(res["meta"]["dir"], out),
                         "results": res, "wall_s": round(time.monotonic() - t0, 1)})
        except Exception as e:  # a run that could not run: recorded, the suite goes on
            log("run failed to execute: %s" % e)
            rows.append({"dir": None, "error": str(e), "args": vars(a),
                         "wall_s": round(time.monotonic() - t0, 1)})
    summary = report.write_suite(out, args.suite, rows)
    print(summary, flush=True)
    if args.suite == "canaries":
        bad = [r for r in rows if "error" in r or r["results"]["valid"]]
        ok = not bad
        log("canaries: %s" % ("every planted fault was caught" if ok else
                              "%d planted fault(s) NOT caught" % len(bad)))
    else:
        ok = all("error" not in r and r["results"]["valid"] for r in rows)
    return 0 if ok else 1


def recheck(d):
    """Checks a saved run again (history.jsonl, final-state.json, results.json's meta)."""
    with open(os.path.join(d, "results.json")) as f:
        old = json.load(f)
    meta = old["meta"]
    with open(os.path.join(d, "history.jsonl")) as f:
        ops = [json.loads(line) for line in f]
    with open(os.path.join(d, "final-state.json")) as f:
        states = {int(k): v for k, v in json.load(f).items()}
    wl = meta.get("workloads") or WORKLOADS
    fake = argparse.Namespace(history=argparse.Namespace(ops=ops), kills=meta["kills"],
                              convergence=meta["convergence"], workloads=wl)
    vals = [v for v in states.values()]
    res = checkers.check_all(fake, states, all(v == vals[0] for v in vals))
    for name, r in res["checkers"].items():
        print("%-12s %s %s" % (name, "valid" if r["valid"] else "INVALID", r["summary"]))
        for e in r["errors"][:5]:
            print("    " + e)
    print(json.dumps(res["stats"]))
    return 0 if res["valid"] else 1


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    rp = sub.add_parser("report", help="re-render a run directory's index.html and plots")
    rp.add_argument("dir")
    cp = sub.add_parser("check", help="re-run the checkers on a run directory's saved history")
    cp.add_argument("dir")
    for name in ("run", "suite"):
        s = sub.add_parser(name)
        s.add_argument("--seed", type=int)
        s.add_argument("--bin", default=os.path.join(ROOT, "target/release/lattice-server"))
        s.add_argument("--out", default=os.path.join(ROOT, "target/jepsen"))
        s.add_argument("--fault-s", type=float, default=4.0)
        s.add_argument("--quiet-s", type=float, default=2.0)
        s.add_argument("--keys", type=int, default=6)
        s.add_argument("--clients-per-node", type=int, default=2)
        s.add_argument("--clock-max-s", type=int, default=0,
                       help="cap clock jumps at this many seconds (skews at half); 0: no cap")
        if name == "run":
            s.add_argument("--nodes", type=int, default=3)
            s.add_argument("--nemesis", default="all",
                           help="all | none | comma list of: %s, %s" %
                           (", ".join(SINGLE), ", ".join(COMBINED)))
            s.add_argument("--steps", type=int, default=1, help="repeat the listed nemeses")
            s.add_argument("--workloads", default="all")
            s.add_argument("--plant", choices=PLANTS)
            s.add_argument("--name")
            s.add_argument("--restart-id", choices=["fresh", "same"], default="fresh",
                           help="node id after kill -9 and an empty restart")
        else:
            s.add_argument("suite", choices=["quick", "full", "canaries"])
            s.add_argument("--planted-bin",
                           default=os.path.join(ROOT, "target/planted/release/lattice-server"))
    args = p.parse_args()
    if args.cmd == "report":
        with open(os.path.join(args.dir, "history.jsonl")) as f:
            ops = [json.loads(line) for line in f]
        with open(os.path.join(args.dir, "results.json")) as f:
            report.write_run(args.dir, ops, json.load(f))
        return 0
    if args.cmd == "check":
        return recheck(args.dir)
    if os.geteuid() != 0:
        raise SystemExit("the fault tests need root (network namespaces, iptables)")

    def on_signal(signum, frame):
        raise KeyboardInterrupt()
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)
    if args.cmd == "run":
        res = Run(args).execute()
        return 0 if res["valid"] else 1
    return suite(args)


if __name__ == "__main__":
    sys.exit(main())
