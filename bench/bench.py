#!/usr/bin/env python3
"""Lattice vs Redis benchmark: throughput, server CPU per request, latency, memory per key,
and ZADD into one growing key.

Both servers are pinned to one core (--server-core, default 0) and redis-benchmark to another
(--client-core, default 1). Servers listen on free ports on 127.0.0.1 and are started and stopped
by this script, also when it fails or is interrupted.

Uses only the standard library; matplotlib, when importable, draws the PNG chart.
See bench/README.md for what each figure means.
"""

import argparse
import atexit
import datetime
import json
import math
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The ten commands. Built-in redis-benchmark tests by their -t name; ZADD has no built-in test
# in 7.0, so it is sent as a custom command line.
COMMANDS = ["set", "get", "incr", "lpush", "rpush", "lpop", "rpop", "sadd", "hset", "zadd"]
CUSTOM = {
    "zadd": ["zadd", "myzset", "__rand_int__", "element:__rand_int__"],
}


def zadd_growth_test(batch):
    """The growing-key section's command line for one batch. Scores and members come from a
    10^9 range, so few collide within a batch; the batch number in the member keeps batches
    apart, since redis-benchmark seeds its random numbers from the time and its process id,
    and two runs could draw the same sequence (a batch then added nothing: seen on both
    servers)."""
    return ["zadd", "bigzset", "__rand_int__", "member:%d:__rand_int__" % batch]

SERVERS = ["lattice", "redis"]

CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def log(msg):
    print(msg, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------------
# A tiny RESP client: enough for PING, INFO, DBSIZE, FLUSHALL, ZCARD and a pipelined loader.


class Resp:
    def __init__(self, port, timeout=30.0):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    @staticmethod
    def encode(*args):
        out = [b"*%d\r\n" % len(args)]
        for a in args:
            if not isinstance(a, bytes):
                a = str(a).encode()
            out.append(b"$%d\r\n%s\r\n" % (len(a), a))
        return b"".join(out)

    def _fill(self):
        chunk = self.sock.recv(1 << 16)
        if not chunk:
            raise ConnectionError("server closed the connection")
        self.buf += chunk

    def _line(self):
        while True:
            i = self.buf.find(b"\r\n")
            if i >= 0:
                line, self.buf = self.buf[:i], self.buf[i + 2:]
                return line
            self._fill()

    def read(self):
        line = self._line()
        kind, rest = line[:1], line[1:]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            return RuntimeError(rest.decode(errors="replace"))
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            if n < 0:
                return None
            while len(self.buf) < n + 2:
                self._fill()
            data, self.buf = self.buf[:n], self.buf[n + 2:]
            return data.decode(errors="replace")
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self.read() for _ in range(n)]
        if kind == b"%":  # RESP3 map, in case
            return [self.read() for _ in range(2 * int(rest))]
        raise ValueError("unexpected RESP line %r" % line[:80])

    def call(self, *args):
        self.sock.sendall(self.encode(*args))
        reply = self.read()
        if isinstance(reply, RuntimeError):
            raise reply
        return reply

    def send_raw_and_count(self, payload, replies):
        """Send a pipelined payload and consume `replies` simple replies; return error count."""
        self.sock.sendall(payload)
        errors = 0
        for _ in range(replies):
            if isinstance(self.read(), RuntimeError):
                errors += 1
        return errors


def info(port, section=None):
    c = Resp(port)
    try:
        text = c.call("INFO", section) if section else c.call("INFO")
    finally:
        c.close()
    out = {}
    for line in (text or "").splitlines():
        if ":" in line and not line.startswith("#"):
            k, v = line.split(":", 1)
            out[k.strip()] = v.strip()
    return out


def simple(port, *args):
    c = Resp(port)
    try:
        return c.call(*args)
    finally:
        c.close()


# --------------------------------------------------------------------------------------------
# /proc readings


def thread_ids(pid):
    try:
        return sorted(os.listdir("/proc/%d/task" % pid))
    except OSError:
        return []


def cpu_reading(pid):
    """CPU time the process has used: (schedstat ns summed over its threads, thread ids,
    utime+stime in ns from /proc/<pid>/stat). The schedstat sum is None when unavailable."""
    tids = thread_ids(pid)
    total = 0
    ok = bool(tids)
    for tid in tids:
        try:
            with open("/proc/%d/task/%s/schedstat" % (pid, tid)) as f:
                total += int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            # A thread that ended between listdir and open: the set check below catches it.
            ok = False
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])
    return (total if ok else None, tids, ticks * 1_000_000_000 // CLK_TCK)


def cpu_delta_ns(before, after):
    """Nanoseconds of CPU between two readings, and which source gave it. The per-thread
    schedstat sum is exact but loses threads that exit in between; then utime+stime (whole
    process, including exited threads, but only clock-tick precision) is used instead."""
    s0, t0, c0 = before
    s1, t1, c1 = after
    if s0 is not None and s1 is not None and t0 == t1:
        return s1 - s0, "schedstat"
    return c1 - c0, "stat"


def core_busy_ns(core):
    """Non-idle time of one core from /proc/stat (clock ticks, as ns), or None."""
    if core is None:
        return None
    try:
        with open("/proc/stat") as f:
            for line in f:
                if line.startswith("cpu%d " % core):
                    v = [int(x) for x in line.split()[1:]]
                    idle = v[3] + (v[4] if len(v) > 4 else 0)
                    return (sum(v[:8]) - idle) * 1_000_000_000 // CLK_TCK
    except (OSError, ValueError):
        pass
    return None


def vm_rss_bytes(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


# --------------------------------------------------------------------------------------------
# Servers


# "LO-HI" from --ports: the servers take free ports from this range only (None: any free port).
PORT_RANGE = None


def free_port():
    """A free port on 127.0.0.1: in PORT_RANGE when one is set, else any the kernel gives."""
    if PORT_RANGE is None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]
    lo, hi = PORT_RANGE
    for port in range(lo, hi + 1):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port in %d-%d" % (lo, hi))


class Server:
    def __init__(self, kind, binary, core, workdir):
        self.kind = kind
        self.binary = binary
        self.core = core
        self.workdir = workdir
        self.proc = None
        self.port = None
        self.logf = None
        self.starts = 0

    def start(self):
        self.port = free_port()
        self.starts += 1
        d = os.path.join(self.workdir, "%s-%d" % (self.kind, self.starts))
        os.makedirs(d, exist_ok=True)
        if self.kind == "lattice":
            # Persistence off, like the redis-server it is compared with (its cost is measured
            # by scripts/persist-bench.sh).
            cfg = os.path.join(d, "lattice.toml")
            with open(cfg, "w") as f:
                f.write('appendonly = "no"\n')
            argv = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", d,
                    "--config", cfg]
        else:
            argv = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", d,
                    "--save", "", "--appendonly", "no", "--daemonize", "no",
                    "--protected-mode", "no", "--logfile", ""]
        if self.core is not None:
            argv = ["taskset", "-c", str(self.core)] + argv
        self.logf = open(os.path.join(d, "server.log"), "wb")
        # taskset execs the server, so the child's pid is the server's pid.
        self.proc = subprocess.Popen(argv, stdout=self.logf, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL)
        deadline = time.time() + 20
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("%s exited at start (code %s); log in %s"
                                   % (self.kind, self.proc.returncode, d))
            try:
                if simple(self.port, "PING") == "PONG":
                    return
            except (OSError, ConnectionError, RuntimeError, ValueError):
                pass
            time.sleep(0.05)
        raise RuntimeError("%s did not answer PING within 20 s" % self.kind)

    @property
    def pid(self):
        return self.proc.pid

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self):
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
        if self.logf:
            self.logf.close()
            self.logf = None

    def restart(self):
        self.stop()
        self.start()


LIVE = []


def stop_all():
    for s in LIVE:
        try:
            s.stop()
        except Exception as e:  # noqa: BLE001 - best effort at exit
            log("stopping %s: %s" % (s.kind, e))


# --------------------------------------------------------------------------------------------
# redis-benchmark


def bench_argv(args, port, test, pipeline, n, keyspace):
    argv = [args.benchmark_bin, "-h", "127.0.0.1", "-p", str(port), "-c", str(args.clients),
            "-n", str(n), "-d", str(args.data_size), "-r", str(keyspace), "-P", str(pipeline),
            "--csv"]
    if isinstance(test, list):
        argv += test
    elif test in CUSTOM:
        argv += CUSTOM[test]
    else:
        argv += ["-t", test]
    if args.client_core is not None:
        argv = ["taskset", "-c", str(args.client_core)] + argv
    return argv


def parse_csv(text):
    """The data row of redis-benchmark --csv: rps and latency columns, or None."""
    header = None
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith('"'):
            continue
        cells = [c.strip('"') for c in line.split('","')]
        if cells[0] == "test":
            header = cells
            continue
        if header and len(cells) == len(header):
            row = dict(zip(header, cells))
            try:
                return {
                    "rps": float(row["rps"]),
                    "avg_ms": float(row.get("avg_latency_ms", "nan")),
                    "p50_ms": float(row.get("p50_latency_ms", "nan")),
                    "p99_ms": float(row.get("p99_latency_ms", "nan")),
                    "max_ms": float(row.get("max_latency_ms", "nan")),
                }
            except ValueError:
                return None
    return None


def run_one(args, server, test, pipeline, n, keyspace):
    """One redis-benchmark run against one server, with the server's CPU time around it."""
    argv = bench_argv(args, server.port, test, pipeline, n, keyspace)
    before = cpu_reading(server.pid)
    core0 = core_busy_ns(args.server_core)
    t0 = time.perf_counter()
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=args.run_timeout)
        out, err, rc = p.stdout, p.stderr, p.returncode
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        err, rc = "timed out after %ss" % args.run_timeout, -1
    wall = time.perf_counter() - t0
    if not server.alive():
        return {"ok": False, "error": "server exited (code %s)" % server.proc.returncode}
    after = cpu_reading(server.pid)
    core1 = core_busy_ns(args.server_core)
    row = parse_csv(out)
    if rc != 0 or row is None:
        msg = (err.strip() or out.strip() or "no output").splitlines()
        msg = (msg[-1] if msg else "failed").replace("Error from server: ", "")
        return {"ok": False, "error": msg.split(", with args")[0][:200]}
    cpu_ns, source = cpu_delta_ns(before, after)
    row.update({"ok": True, "cpu_ns": cpu_ns, "cpu_source": source, "wall_s": wall,
                "cpu_us_per_req": cpu_ns / 1000.0 / n})
    if core0 is not None and core1 is not None and wall > 0:
        # Share of the server core used by anything other than the server during the run:
        # other people's compiles and the like. High values mean noisy throughput figures.
        row["foreign_share"] = max(0.0, (core1 - core0 - cpu_ns) / (wall * 1e9))
    return row


# --------------------------------------------------------------------------------------------
# Sections


def section_throughput(args, servers):
    """results[P][test][server] = list of per-round rows."""
    results = {p: {t: {s: [] for s in SERVERS} for t in args.commands} for p in args.pipelines}
    unsupported = {s: {} for s in SERVERS}  # server -> test -> error
    for rnd in range(args.rounds):
        for p in args.pipelines:
            for s in SERVERS:
                try:
                    simple(servers[s].port, "FLUSHALL")
                except (RuntimeError, OSError, ConnectionError, ValueError) as e:
                    log("  %s FLUSHALL failed (%s); restarting it" % (s, e))
                    servers[s].restart()
            for i, test in enumerate(args.commands):
                order = SERVERS if (rnd + i) % 2 == 0 else SERVERS[::-1]
                for s in order:
                    if test in unsupported[s]:
                        continue
                    row = run_one(args, servers[s], test, p, args.requests, args.keyspace)
                    if not row["ok"]:
                        log("  %-7s %-5s P=%-2d round %d: n/a (%s)"
                            % (s, test, p, rnd + 1, row["error"]))
                        unsupported[s][test] = row["error"]
                        if not servers[s].alive():
                            log("  %s died; restarting it" % s)
                            servers[s].restart()
                        continue
                    results[p][test][s].append(row)
                    log("  round %d P=%-2d %-5s %-7s %10.0f req/s  %6.2f CPU-us/req  (%s)"
                        % (rnd + 1, p, test, s, row["rps"], row["cpu_us_per_req"],
                           row["cpu_source"]))
    return results, unsupported


def section_memory(args, servers):
    """Load args.mem_keys 64-byte strings into each fresh server with a pipelined loader."""
    out = {}
    value = b"x" * args.data_size
    batch = 1000
    for s in SERVERS:
        srv = servers[s]
        srv.restart()
        time.sleep(1.2)  # lattice refreshes INFO used_memory once a second
        rss0 = vm_rss_bytes(srv.pid)
        used0 = int(info(srv.port, "memory").get("used_memory", 0))
        c = Resp(srv.port, timeout=120)
        t0 = time.perf_counter()
        errors = 0
        try:
            for start in range(0, args.mem_keys, batch):
                end = min(start + batch, args.mem_keys)
                payload = b"".join(
                    b"*3\r\n$3\r\nSET\r\n$16\r\nkey:%012d\r\n$%d\r\n%s\r\n"
                    % (k, len(value), value) for k in range(start, end))
                errors += c.send_raw_and_count(payload, end - start)
        finally:
            c.close()
        load_s = time.perf_counter() - t0
        time.sleep(1.5)
        rss1 = vm_rss_bytes(srv.pid)
        used1 = int(info(srv.port, "memory").get("used_memory", 0))
        keys = simple(srv.port, "DBSIZE")
        out[s] = {"keys": keys, "errors": errors, "load_s": load_s,
                  "rss_before": rss0, "rss_after": rss1,
                  "used_before": used0, "used_after": used1,
                  "rss_per_key": (rss1 - rss0) / max(keys, 1),
                  "used_per_key": (used1 - used0) / max(keys, 1)}
        log("  %-7s %d keys in %.1f s: RSS %+.1f B/key, used_memory %+.1f B/key"
            % (s, keys, load_s, out[s]["rss_per_key"], out[s]["used_per_key"]))
    return out


def section_zadd(args, servers):
    """ZADD into one key, batch after batch, until it holds about args.zadd_total members."""
    out = {s: [] for s in SERVERS}
    for s in SERVERS:
        servers[s].restart()
    dead = set()
    nbatches = max(1, args.zadd_total // args.zadd_batch)
    for b in range(nbatches):
        order = SERVERS if b % 2 == 0 else SERVERS[::-1]
        for s in order:
            if s in dead:
                continue
            srv = servers[s]
            row = run_one(args, srv, zadd_growth_test(b + 1), args.zadd_pipeline, args.zadd_batch,
                          1_000_000_000)
            if not row["ok"]:
                log("  %-7s ZADD growth: n/a (%s)" % (s, row["error"]))
                dead.add(s)
                if not srv.alive():
                    srv.restart()
                continue
            try:
                row["zcard"] = simple(srv.port, "ZCARD", "bigzset")
            except (RuntimeError, OSError, ConnectionError) as e:
                row["zcard"] = None
                log("  %s ZCARD failed: %s" % (s, e))
            row["ms_per_batch"] = args.zadd_batch / row["rps"] * 1000.0
            out[s].append(row)
            log("  batch %2d %-7s zcard=%s  %8.1f ms  %6.2f CPU-us/req"
                % (b + 1, s, row["zcard"], row["ms_per_batch"], row["cpu_us_per_req"]))
    return out


# --------------------------------------------------------------------------------------------
# Summaries


def median(xs):
    return statistics.median(xs) if xs else None


def geomean(xs):
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def summarize(results, unsupported, commands, pipelines):
    summary = {}
    for p in pipelines:
        rows = []
        for t in commands:
            r = {"test": t}
            for s in SERVERS:
                runs = results[p][t][s]
                if runs:
                    r[s] = {
                        "rps": median([x["rps"] for x in runs]),
                        "cpu": median([x["cpu_us_per_req"] for x in runs]),
                        "p50": median([x["p50_ms"] for x in runs]),
                        "p99": median([x["p99_ms"] for x in runs]),
                        "rounds": [x["rps"] for x in runs],
                    }
                else:
                    r[s] = None
            if r["lattice"] and r["redis"]:
                r["tput_ratio"] = r["lattice"]["rps"] / r["redis"]["rps"]
                r["cpu_ratio"] = r["redis"]["cpu"] / r["lattice"]["cpu"]
            else:
                r["tput_ratio"] = r["cpu_ratio"] = None
            rows.append(r)
        both = [r for r in rows if r["tput_ratio"] is not None]
        summary[p] = {
            "rows": rows,
            "geo_tput": geomean([r["tput_ratio"] for r in both]),
            "geo_cpu": geomean([r["cpu_ratio"] for r in both]),
            "geo_n": len(both),
        }
    return summary


def fmt(x, spec="{:,.0f}"):
    return "n/a" if x is None else spec.format(x)


def fmt_lat(d):
    return "n/a" if d is None else "%.3f / %.3f" % (d["p50"], d["p99"])


def throughput_tables(summary, args):
    lines = []
    for p, s in summary.items():
        lines.append("### Pipeline depth %d (-P %d)" % (p, p))
        lines.append("")
        lines.append("| command | lattice req/s | redis req/s | tput lattice/redis | "
                     "lattice CPU µs/req | redis CPU µs/req | CPU redis/lattice | "
                     "lattice p50 / p99 ms | redis p50 / p99 ms |")
        lines.append("|---|--:|--:|--:|--:|--:|--:|--:|--:|")
        for r in s["rows"]:
            L, R = r["lattice"], r["redis"]
            lines.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
                r["test"].upper(),
                fmt(L and L["rps"]), fmt(R and R["rps"]), fmt(r["tput_ratio"], "{:.2f}"),
                fmt(L and L["cpu"], "{:.2f}"), fmt(R and R["cpu"], "{:.2f}"),
                fmt(r["cpu_ratio"], "{:.2f}"), fmt_lat(L), fmt_lat(R)))
        lines.append("| **geometric mean** (%d of %d commands) | | | **%s** | | | **%s** | | |" % (
            s["geo_n"], len(s["rows"]), fmt(s["geo_tput"], "{:.2f}"),
            fmt(s["geo_cpu"], "{:.2f}")))
        lines.append("")
    return lines


def rounds_table(summary):
    lines = ["| P | command | lattice req/s per round | redis req/s per round |",
             "|--:|---|---|---|"]
    for p, s in summary.items():
        for r in s["rows"]:
            cells = []
            for srv in SERVERS:
                d = r[srv]
                cells.append("n/a" if d is None else ", ".join("%.0f" % x for x in d["rounds"]))
            lines.append("| %d | %s | %s | %s |" % (p, r["test"].upper(), cells[0], cells[1]))
    return lines


def memory_table(mem, args):
    lines = ["| server | keys | load s | VmRSS before | VmRSS after | RSS bytes/key | "
             "used_memory before | used_memory after | used_memory bytes/key |",
             "|---|--:|--:|--:|--:|--:|--:|--:|--:|"]
    for s in SERVERS:
        m = mem.get(s)
        if not m:
            lines.append("| %s | n/a | | | | | | | |" % s)
            continue
        mib = lambda b: "%.1f MiB" % (b / 1048576.0)  # noqa: E731
        lines.append("| %s | %s | %.1f | %s | %s | %.1f | %s | %s | %.1f |" % (
            s, "{:,}".format(m["keys"]), m["load_s"], mib(m["rss_before"]), mib(m["rss_after"]),
            m["rss_per_key"], mib(m["used_before"]), mib(m["used_after"]), m["used_per_key"]))
    if mem.get("lattice") and mem.get("redis") and mem["lattice"]["rss_per_key"] > 0:
        lines.append("")
        lines.append("RSS per key lattice/redis: **%.2f**; used_memory per key lattice/redis: "
                     "**%.2f**" % (mem["lattice"]["rss_per_key"] / mem["redis"]["rss_per_key"],
                                   mem["lattice"]["used_per_key"] / mem["redis"]["used_per_key"]
                                   if mem["redis"]["used_per_key"] else float("nan")))
    return lines


def zadd_table(z, args):
    lines = ["| batch | lattice ZCARD after | lattice ms/batch | lattice CPU µs/req | "
             "redis ZCARD after | redis ms/batch | redis CPU µs/req |",
             "|--:|--:|--:|--:|--:|--:|--:|"]
    n = max(len(z["lattice"]), len(z["redis"]))
    for i in range(n):
        cells = []
        for s in SERVERS:
            if i < len(z[s]):
                r = z[s][i]
                cells += [fmt(r.get("zcard")), "%.1f" % r["ms_per_batch"],
                          "%.2f" % r["cpu_us_per_req"]]
            else:
                cells += ["n/a", "n/a", "n/a"]
        lines.append("| %d | %s |" % (i + 1, " | ".join(cells)))
    if n == 0:
        lines.append("| - | n/a | n/a | n/a | n/a | n/a | n/a |")
    return lines


def git_rev():
    try:
        rev = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--", "crates"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return rev + (" (+ uncommitted changes under crates/)" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def redis_version(binary):
    try:
        return subprocess.run([binary, "--version"], capture_output=True, text=True,
                              timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def draw_chart(summary, zadd, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("matplotlib is not importable: no chart (bench/run.sh installs it)")
        return False
    pipes = list(summary or {})
    has_zadd = bool(zadd and any(zadd[s] for s in SERVERS))
    nrows = len(pipes) + (1 if has_zadd else 0)
    if nrows == 0:
        return False
    fig, axes = plt.subplots(nrows, 2, figsize=(14, 4.2 * nrows), squeeze=False)
    colors = {"lattice": "#3b7dd8", "redis": "#d8493b"}
    width = 0.38
    for row, p in enumerate(pipes):
        rows = summary[p]["rows"]
        names = [r["test"].upper() for r in rows]
        xs = list(range(len(rows)))
        for col, (key, title) in enumerate([("rps", "throughput, requests/s (higher is better)"),
                                            ("cpu", "server CPU µs per request (lower is better)")]):
            ax = axes[row][col]
            for k, s in enumerate(SERVERS):
                vals = [(r[s][key] if r[s] else 0) for r in rows]
                offs = [x + (k - 0.5) * width for x in xs]
                bars = ax.bar(offs, vals, width, label=s, color=colors[s])
                for b, r in zip(bars, rows):
                    if not r[s]:
                        ax.annotate("n/a", (b.get_x() + b.get_width() / 2, 0), ha="center",
                                    va="bottom", fontsize=7, color=colors[s], rotation=90)
            ax.set_xticks(xs)
            ax.set_xticklabels(names, fontsize=8)
            geo = summary[p]["geo_tput" if key == "rps" else "geo_cpu"]
            label = ("lattice/redis" if key == "rps" else "redis/lattice")
            ax.set_title("P=%d: %s\ngeometric mean %s = %s"
                         % (p, title, label, fmt(geo, "{:.2f}")), fontsize=10)
            ax.grid(axis="y", alpha=0.3)
            ax.legend(fontsize=8)
    if has_zadd:
        row = len(pipes)
        for col, (key, title) in enumerate([("ms_per_batch", "wall ms per batch"),
                                            ("cpu_us_per_req", "server CPU µs per ZADD")]):
            ax = axes[row][col]
            top = 0.0
            for s in SERVERS:
                pts = [(r.get("zcard") or 0, r[key]) for r in zadd[s]]
                if pts:
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=s,
                            color=colors[s])
                    top = max([top] + [p[1] for p in pts])
            missing = [s for s in SERVERS if not zadd[s]]
            ax.set_xlabel("members in the key after the batch")
            ax.set_title("ZADD into one growing key: %s (lower is better)%s"
                         % (title, "".join("\n%s: n/a" % s for s in missing)), fontsize=10)
            ax.set_ylim(0, top * 1.15 or 1)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def section_replication(args):
    """Runs scripts/cluster-bench.sh and returns its result lines, or None if it failed."""
    env = dict(os.environ, BENCH_N=str(args.replication_requests))
    out = None
    # A second try when the first fails: the cluster's start-up (three processes on random
    # free ports) can lose a race with another process taking a port.
    for attempt in (1, 2):
        try:
            out = subprocess.run([os.path.join(ROOT, "scripts/cluster-bench.sh")], env=env,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 timeout=900, check=True).stdout
            break
        except subprocess.CalledProcessError as e:
            log("  replication section, attempt %d failed: %s\n%s"
                % (attempt, e, "\n".join((e.stderr or "").splitlines()[-15:])))
        except (subprocess.SubprocessError, OSError) as e:
            log("  replication section, attempt %d failed: %s" % (attempt, e))
    if out is None:
        return None
    keep = ("standalone SET", "cluster node 1 SET", "cluster SET CPU", "replicas'",
            "cluster-bench")
    return [ln for ln in out.splitlines() if ln.startswith(keep)]


# --------------------------------------------------------------------------------------------


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lattice-bin", default=os.path.join(ROOT, "target/release/lattice-server"))
    ap.add_argument("--redis-bin", default=shutil.which("redis-server") or "redis-server")
    ap.add_argument("--benchmark-bin",
                    default=shutil.which("redis-benchmark") or "redis-benchmark")
    ap.add_argument("--rounds", type=int)
    ap.add_argument("-n", "--requests", type=int)
    ap.add_argument("-c", "--clients", type=int, default=50)
    ap.add_argument("-d", "--data-size", type=int, default=64)
    ap.add_argument("-r", "--keyspace", type=int, default=100_000)
    ap.add_argument("--pipelines", default="1,16", help="comma-separated -P depths")
    ap.add_argument("--ports", default=None,
                    help="LO-HI: the servers listen only on free ports in this range")
    ap.add_argument("--commands", default=",".join(COMMANDS),
                    help="comma-separated subset of " + ",".join(COMMANDS))
    ap.add_argument("--server-core", default="0", help="core for both servers ('none': no pin)")
    ap.add_argument("--client-core", default="1",
                    help="core for redis-benchmark and this script ('none': no pin)")
    ap.add_argument("--mem-keys", type=int)
    ap.add_argument("--zadd-total", type=int)
    ap.add_argument("--zadd-batch", type=int)
    ap.add_argument("--zadd-pipeline", type=int, default=16)
    ap.add_argument("--skip-throughput", action="store_true")
    ap.add_argument("--skip-memory", action="store_true")
    ap.add_argument("--skip-zadd", action="store_true")
    ap.add_argument("--skip-replication", action="store_true")
    ap.add_argument("--quick", action="store_true",
                    help="short trial: 1 round, -n 20000, 100k keys, ZADD to 200k "
                    "(full run: 5 rounds, -n 100000, 1M keys, ZADD to 1M in 100k batches)")
    ap.add_argument("--replication-requests", type=int, default=200_000)
    ap.add_argument("--run-timeout", type=int, default=180,
                    help="seconds before one redis-benchmark run counts as failed")
    ap.add_argument("--out-dir", default=os.path.join(ROOT, "bench/results"))
    ap.add_argument("--name", default=None,
                    help="report file name without extension (default: today's date)")
    a = ap.parse_args()
    # Explicit flags win over --quick, which wins over the full-run defaults.
    # Five rounds: at P=1 one round of either server can land 15% off its median (the client,
    # alone on its core, is the bottleneck). With three rounds, each of three runs on one tree
    # had one command whose median ratio such a round carried below 0.9 (a different command
    # each time).
    full = {"rounds": 5, "requests": 100_000, "mem_keys": 1_000_000,
            "zadd_total": 1_000_000, "zadd_batch": 100_000}
    quick = {"rounds": 1, "requests": 20_000, "mem_keys": 100_000,
             "zadd_total": 200_000, "zadd_batch": 50_000}
    for k, v in (quick if a.quick else full).items():
        if getattr(a, k) is None:
            setattr(a, k, v)
    a.pipelines = [int(x) for x in a.pipelines.split(",") if x]
    if a.ports:
        global PORT_RANGE
        lo, _, hi = a.ports.partition("-")
        PORT_RANGE = (int(lo), int(hi or lo))
    a.commands = [x.strip().lower() for x in a.commands.split(",") if x.strip()]
    bad = [c for c in a.commands if c not in COMMANDS]
    if bad:
        ap.error("unknown commands: %s" % ",".join(bad))
    a.server_core = None if a.server_core == "none" else int(a.server_core)
    a.client_core = None if a.client_core == "none" else int(a.client_core)
    return a


def main():
    args = parse_args()
    for b in (args.lattice_bin, args.redis_bin, args.benchmark_bin):
        if not (os.path.exists(b) or shutil.which(b)):
            sys.exit("not found: %s (bench/run.sh builds and installs everything)" % b)
    cores = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set()
    if args.server_core is not None and args.client_core is not None and len(cores) < 2:
        log("fewer than 2 cores available: running without pinning")
        args.server_core = args.client_core = None
    if args.client_core is not None:
        os.sched_setaffinity(0, {args.client_core})
    if shutil.which("taskset") is None:
        log("taskset not found: running without pinning")
        args.server_core = args.client_core = None

    started = time.time()
    workdir = tempfile.mkdtemp(prefix="lattice-bench-")
    servers = {"lattice": Server("lattice", args.lattice_bin, args.server_core, workdir),
               "redis": Server("redis", args.redis_bin, args.server_core, workdir)}
    LIVE.extend(servers.values())
    atexit.register(stop_all)

    def on_signal(signum, _frame):
        stop_all()
        sys.exit(128 + signum)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGHUP, on_signal)

    throughput = mem = zadd = replication = None
    threads = {}
    try:
        for s in servers.values():
            s.start()
        for k, s in servers.items():
            with open("/proc/%d/status" % s.pid) as f:
                threads[k] = next((ln.split()[1] for ln in f if ln.startswith("Threads:")), "?")
        if not args.skip_throughput:
            log("== throughput and CPU per request: %d rounds, P in %s, -n %d"
                % (args.rounds, args.pipelines, args.requests))
            results, unsupported = section_throughput(args, servers)
            throughput = {"results": results, "unsupported": unsupported,
                          "summary": summarize(results, unsupported, args.commands,
                                               args.pipelines)}
        if not args.skip_memory:
            log("== memory per key: %d strings of %d bytes" % (args.mem_keys, args.data_size))
            try:
                mem = section_memory(args, servers)
            except (RuntimeError, OSError, ConnectionError, ValueError) as e:
                log("  memory section failed: %s" % e)
                mem = {}
        if not args.skip_zadd:
            log("== ZADD into one key up to about %d members" % args.zadd_total)
            zadd = section_zadd(args, servers)
    finally:
        stop_all()
        shutil.rmtree(workdir, ignore_errors=True)
    if not args.skip_replication:
        log("== SET at P=16: standalone vs one node of a 3-node cluster")
        replication = section_replication(args)

    elapsed = time.time() - started
    name = args.name or datetime.date.today().isoformat()
    os.makedirs(args.out_dir, exist_ok=True)
    md_path = os.path.join(args.out_dir, name + ".md")
    png_path = os.path.join(args.out_dir, name + ".png")
    json_path = os.path.join(args.out_dir, name + ".json")

    chart = False
    if throughput or zadd:
        chart = draw_chart(throughput and throughput["summary"], zadd, png_path)

    shares = []
    if throughput:
        for per_p in throughput["results"].values():
            for per_t in per_p.values():
                for runs in per_t.values():
                    shares += [r["foreign_share"] for r in runs if "foreign_share" in r]
    load = open("/proc/loadavg").read().split()[:3] if os.path.exists("/proc/loadavg") else []
    pin = ("servers on core %s, redis-benchmark on core %s" % (args.server_core, args.client_core)
           if args.server_core is not None else "no CPU pinning")
    md = ["# Lattice vs Redis: %s" % name, "",
          "- lattice: commit %s, `%s`, %s OS threads in the process at start (tokio sizes its "
          "worker pool from the one-core affinity)"
          % (git_rev(), os.path.relpath(args.lattice_bin, ROOT), threads.get("lattice", "?")),
          "- redis: %s, no persistence (`--save '' --appendonly no`)"
          % redis_version(args.redis_bin),
          "- machine: %s, %d cores, Linux %s; %s" % (cpu_model(), os.cpu_count() or 0,
                                                     platform.release(), pin),
          "- redis-benchmark: `-c %d -d %d -r %d -n %d`, %d round(s) alternating the servers; "
          "figures are medians over rounds" % (args.clients, args.data_size, args.keyspace,
                                               args.requests, args.rounds),
          "- server CPU: schedstat ns summed over the server's threads (utime+stime when a "
          "thread came or went during the run), divided by requests",
          "- total run time: %.0f s; load average at the end: %s" % (elapsed, " ".join(load))]
    if shares:
        md.append("- interference: other processes used a median %.0f%% (max %.0f%%) of the "
                  "server core during the throughput runs; above a few percent, throughput "
                  "figures are noisy and CPU µs/request is the steadier figure"
                  % (100 * statistics.median(shares), 100 * max(shares)))
    md.append("")
    md.append("## Throughput, server CPU per request and latency")
    md.append("")
    if throughput:
        md += throughput_tables(throughput["summary"], args)
        uns = throughput["unsupported"]
        for s in SERVERS:
            for t, err in uns[s].items():
                md.append("- %s %s: n/a — %s" % (s, t.upper(), err.replace("|", "/")))
        if any(uns[s] for s in SERVERS):
            md.append("")
        if chart:
            md += ["![throughput and CPU per request](%s)" % os.path.basename(png_path), ""]
        md += ["Per-round throughput (for the spread):", ""]
        md += rounds_table(throughput["summary"])
        md.append("")
    else:
        md += ["(skipped)", ""]
    md += ["## Memory per key: %s strings of %d bytes" % ("{:,}".format(args.mem_keys),
                                                         args.data_size), ""]
    md += memory_table(mem, args) if mem else ["(skipped or failed)"]
    md.append("")
    md += ["## ZADD into one key growing to about %s members" % "{:,}".format(args.zadd_total),
           "",
           "Batches of %s `ZADD bigzset <random score> member:<batch>:<random>` (-c %d -P %d), "
           "alternating the servers batch by batch."
           % ("{:,}".format(args.zadd_batch), args.clients, args.zadd_pipeline), ""]
    md += zadd_table(zadd, args) if zadd else ["(skipped)"]
    md.append("")
    if chart and zadd and not throughput:
        md += ["![ZADD growth](%s)" % os.path.basename(png_path), ""]
    md += ["## SET at P=16 with 3-node replication", ""]
    if replication:
        md += ["`scripts/cluster-bench.sh` (also `make cluster-bench`): the same redis-benchmark "
               "SET run (`-P 16 -c 50 -d 64 -n %d`, one key as redis-benchmark's default, then "
               "`-r 100000`) against a standalone node and against one node of a 3-node cluster "
               "replicating to the two others; all processes share this machine's cores, "
               "unpinned." % args.replication_requests, "", "```"] + replication + ["```", ""]
    else:
        md += ["(skipped or failed)", ""]
    if throughput:
        # The headline figure, one line per pipeline depth: how much CPU redis-server spends
        # per request for each µs Lattice spends (above 1: Lattice is cheaper).
        md += ["## CPU per request against redis-server", ""]
        for p, s in throughput["summary"].items():
            md.append("- P=%d: CPU redis/lattice %s (geometric mean over %d commands)"
                      % (p, fmt(s["geo_cpu"], "{:.2f}"), s["geo_n"]))
        md.append("")
    report = "\n".join(md)
    with open(md_path, "w") as f:
        f.write(report)
    with open(json_path, "w") as f:
        json.dump({"args": {k: v for k, v in vars(args).items()}, "throughput": throughput,
                   "memory": mem, "zadd": zadd, "replication": replication,
                   "elapsed_s": elapsed}, f, indent=1,
                  default=str)
    print(report)
    log("wrote %s%s and %s" % (md_path, " , " + png_path if chart else "", json_path))


if __name__ == "__main__":
    main()
