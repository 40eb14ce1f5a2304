#!/usr/bin/env python3
"""Saving and restarting, against lattice-server and redis-server side by side.

Redis's Tcl suite tags the tests that save and reload `needs:save` (and most of them also
`needs:debug`, for DEBUG RELOAD); in external mode they run against a server someone else
started, so they cannot restart it, and scripts/compat.sh leaves them out. This script is the
harness that owns the servers: each case starts a fresh server on an empty directory, saves the
way the case says, stops it (kill -9 unless the case stops it itself) and starts it again on the
same directory, then checks what Redis documents for that sequence:

  save-types      SAVE with a value of every type (and a TTL) survives a restart
                  (unit/other "SAVE - make sure there are all the types as values" and
                  "EXPIRES after a reload", with a restart for DEBUG RELOAD)
  bgsave          BGSAVE, wait for it (INFO rdb_bgsave_in_progress), LASTSAVE moves, the value
                  survives a restart (unit/other "BGSAVE")
  no-aof-loss     appendonly no: a write after the last SAVE is gone after kill -9, the ones
                  before it are there
  shutdown-save   SHUTDOWN SAVE with appendonly no: every write survives
  shutdown-nosave SHUTDOWN NOSAVE with appendonly no: writes after the last SAVE are gone
  aof-on          CONFIG SET appendonly yes at run time (the rewrite finishes), a later write,
                  kill -9, restart with appendonly yes: both writes there
  fsync-always    CONFIG SET appendfsync always, a write, kill -9 at once: the write is there

  scripts/save-test.py [--servers lattice,redis]

Prints one line per case and server and a count per server; exits 1 if Lattice fails a case.
Servers run on 127.0.0.1 with free ports and are killed at the end.
"""

import argparse
import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LATTICE = os.environ.get("LATTICE_BIN", os.path.join(ROOT, "target", "release", "lattice-server"))

_spec = importlib.util.spec_from_file_location("crash_test", os.path.join(ROOT, "scripts", "crash-test.py"))
crash_test = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(crash_test)
Conn, free_port = crash_test.Conn, crash_test.free_port
PROCS = []


class Server:
    """One server kind on one directory; `start` and `kill` may be called again and again."""

    def __init__(self, kind, work, name):
        self.kind, self.dir = kind, os.path.join(work, "%s-%s" % (kind, name))
        os.makedirs(self.dir)
        self.log = open(self.dir + ".log", "ab")
        self.proc = None
        self.port = None

    def start(self, appendonly, appendfsync="everysec"):
        self.port = free_port()
        if self.kind == "lattice":
            cfg = self.dir + ".toml"
            with open(cfg, "w") as f:
                f.write('appendonly = "%s"\nappendfsync = "%s"\n' % (appendonly, appendfsync))
            cmd = [LATTICE, "--bind", "127.0.0.1", "--port", str(self.port), "--dir", self.dir,
                   "--config", cfg]
        else:
            cmd = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--dir", self.dir,
                   "--appendonly", appendonly, "--appendfsync", appendfsync, "--save", ""]
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=self.log)
        PROCS.append(self.proc)
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                c = Conn(self.port)
                if c.call("PING") == b"+PONG":
                    return c
                c.sock.close()
            except (OSError, ConnectionError):
                pass
            if self.proc.poll() is not None:
                raise RuntimeError("%s exited at start (see %s.log)" % (self.kind, self.dir))
            time.sleep(0.02)
        raise RuntimeError("%s did not start" % self.kind)

    def kill(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def wait_exit(self, c, *shutdown):
        """Sends SHUTDOWN with its arguments and waits for the process to end."""
        try:
            c.call(*shutdown)
        except (OSError, ConnectionError):
            pass  # the server closes the connection instead of answering
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            raise RuntimeError("%s did not stop after %s" % (self.kind, " ".join(shutdown)))


def info(c, section):
    text = c.call("INFO", section).decode()
    return dict(line.split(":", 1) for line in text.splitlines() if ":" in line)


def wait_info(c, section, field, value, timeout_s=60):
    deadline = time.time() + timeout_s
    while info(c, section).get(field) != value:
        if time.time() > deadline:
            raise RuntimeError("INFO %s never had %s:%s" % (section, field, value))
        time.sleep(0.05)


def expect(cond, what):
    if not cond:
        raise AssertionError(what)


def case_save_types(s):
    c = s.start("no")
    c.call("SET", "str", "value")
    c.call("RPUSH", "list", "a", "b", "c")
    c.call("SADD", "set", "x", "y")
    c.call("ZADD", "zset", "10", "a", "20", "b", "30", "c")
    c.call("HSET", "hash", "f", "v", "g", "w")
    c.call("SET", "ttl", "10")
    c.call("EXPIRE", "ttl", "1000")
    expect(c.call("SAVE") == b"+OK", "SAVE answered OK")
    s.kill()
    c = s.start("no")
    expect(c.call("GET", "str") == b"value", "string")
    expect(c.call("LRANGE", "list", "0", "-1") == [b"a", b"b", b"c"], "list")
    expect(sorted(c.call("SMEMBERS", "set")) == [b"x", b"y"], "set")
    expect(c.call("ZRANGE", "zset", "0", "-1", "WITHSCORES") == [b"a", b"10", b"b", b"20", b"c", b"30"], "zset")
    expect(c.call("HGETALL", "hash") == [b"f", b"v", b"g", b"w"], "hash")
    ttl = int(c.call("TTL", "ttl")[1:])
    expect(900 < ttl <= 1000, "TTL %d after the restart" % ttl)


def case_bgsave(s):
    c = s.start("no")
    before = int(c.call("LASTSAVE")[1:])
    time.sleep(1.1)  # LASTSAVE has a resolution of seconds
    c.call("SET", "x", "10")
    r = c.call("BGSAVE")
    expect(r.startswith(b"+Background saving started"), "BGSAVE answered %r" % r)
    wait_info(c, "persistence", "rdb_bgsave_in_progress", "0")
    expect(info(c, "persistence")["rdb_last_bgsave_status"] == "ok", "rdb_last_bgsave_status ok")
    after = int(c.call("LASTSAVE")[1:])
    expect(after > before, "LASTSAVE %d after BGSAVE, %d before" % (after, before))
    s.kill()
    c = s.start("no")
    expect(c.call("GET", "x") == b"10", "x after the restart")


def write_after_save(s, stop):
    """appendonly no: a key saved, one written after the SAVE, `stop(conn)`, restart: only
    the saved one is there."""
    c = s.start("no")
    c.call("SET", "saved", "1")
    expect(c.call("SAVE") == b"+OK", "SAVE answered OK")
    c.call("SET", "unsaved", "1")
    stop(c)
    c = s.start("no")
    expect(c.call("GET", "saved") == b"1", "the saved key is there")
    expect(c.call("GET", "unsaved") is None, "the key written after SAVE is gone")


def case_no_aof_loss(s):
    write_after_save(s, lambda c: s.kill())


def case_shutdown_save(s):
    c = s.start("no")
    c.call("SET", "k", "v")
    s.wait_exit(c, "SHUTDOWN", "SAVE")
    c = s.start("no")
    expect(c.call("GET", "k") == b"v", "the key is there")


def case_shutdown_nosave(s):
    write_after_save(s, lambda c: s.wait_exit(c, "SHUTDOWN", "NOSAVE"))


def case_aof_on(s):
    c = s.start("no")
    c.call("SET", "before", "1")
    expect(c.call("CONFIG", "SET", "appendonly", "yes") == b"+OK", "CONFIG SET appendonly yes")
    wait_info(c, "persistence", "aof_rewrite_in_progress", "0")
    wait_info(c, "persistence", "aof_rewrite_scheduled", "0")
    c.call("SET", "after", "1")
    time.sleep(1.5)  # everysec: the write is synced within a second
    s.kill()
    c = s.start("yes")
    expect(c.call("GET", "before") == b"1", "the key written before appendonly yes")
    expect(c.call("GET", "after") == b"1", "the key written after appendonly yes")


def case_fsync_always(s):
    c = s.start("yes", "everysec")
    expect(c.call("CONFIG", "SET", "appendfsync", "always") == b"+OK", "CONFIG SET appendfsync always")
    expect(c.call("CONFIG", "GET", "appendfsync") == [b"appendfsync", b"always"], "CONFIG GET")
    c.call("SET", "k", "v")
    s.kill()
    c = s.start("yes")
    expect(c.call("GET", "k") == b"v", "the acknowledged write is there")


CASES = [
    ("save-types", case_save_types),
    ("bgsave", case_bgsave),
    ("no-aof-loss", case_no_aof_loss),
    ("shutdown-save", case_shutdown_save),
    ("shutdown-nosave", case_shutdown_nosave),
    ("aof-on", case_aof_on),
    ("fsync-always", case_fsync_always),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--servers", default="lattice,redis")
    args = ap.parse_args()
    servers = [s for s in args.servers.split(",") if s]
    if "redis" in servers and shutil.which("redis-server") is None:
        print("no redis-server: Redis's column is left out")
        servers.remove("redis")
    work = tempfile.mkdtemp(prefix="lattice-save-")
    passed = {k: 0 for k in servers}
    try:
        for name, case in CASES:
            for kind in servers:
                s = Server(kind, work, name)
                try:
                    case(s)
                    passed[kind] += 1
                    print("%-16s %-8s ok" % (name, kind))
                except (AssertionError, RuntimeError, OSError, ConnectionError, ValueError) as e:
                    print("%-16s %-8s FAILED: %s" % (name, kind, e))
                finally:
                    if s.proc is not None:
                        s.kill()
    finally:
        for p in PROCS:
            if p.poll() is None:
                p.kill()
                p.wait()
        shutil.rmtree(work, ignore_errors=True)
    for kind in servers:
        print("save-test: %s %d of %d cases ok" % (kind, passed[kind], len(CASES)))
    sys.exit(0 if passed.get("lattice", len(CASES)) == len(CASES) else 1)


if __name__ == "__main__":
    main()
