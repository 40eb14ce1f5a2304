#!/usr/bin/env python3
"""Hot keys under a Zipf load (issue 18, must-show 3): a partitioned cluster (--nodes, RF
--rf) holding --keys keys is read with Zipf(--zipf) skew and --write-ratio SETs by
lattice-loadgen, once with hot-key tuning off (`hotkey-threshold 0`) and once on (--threshold
accesses per second). Each run has two phases of --seconds: phase A makes ranks 0.. hot,
phase B (key offset keys/2) makes other keys hot, so the first ones cool.

Printed per run and phase: throughput, read p50/p99/p99.9/max, errors. Sampled every 0.5 s
from every node's INFO hotkeys: the replication factor of the three hottest keys of each
phase (owners plus nodes holding a copy, as their owners report it; a key no owner lists
among its ten hottest has no copies left: its factor is RF) and the copies held over the
whole cluster. Writes a PNG plot and a JSON file of the samples to --out (default
bench/results/hotkeys.*). Servers run on 127.0.0.1 with free ports and are stopped at the end.
"""

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROCS = []

# The RESP client and free_port of the crash test (no client library needed here).
_spec = importlib.util.spec_from_file_location("crash_test", os.path.join(ROOT, "scripts", "crash-test.py"))
crash_test = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(crash_test)
free_port, Conn = crash_test.free_port, crash_test.Conn


def start(binary, work, n, rf):
    ports = [free_port() for _ in range(n)]
    cports = [free_port() for _ in range(n)]
    seeds = ",".join("127.0.0.1:%d" % p for p in cports)
    for i in range(n):
        log = open(os.path.join(work, "node%d.log" % (i + 1)), "wb")
        PROCS.append(subprocess.Popen(
            [binary, "--port", str(ports[i]), "--bind", "127.0.0.1", "--cluster-port", str(cports[i]),
             "--node-id", str(i + 1), "--seeds", seeds, "--replication-factor", str(rf),
             "--threads", "1", "--dir", os.path.join(work, "d%d" % (i + 1))],
            stdout=log, stderr=log))
    deadline = time.time() + 30
    for p in ports:
        while True:
            try:
                if b"cluster_state:ok" in Conn(p).call("CLUSTER", "INFO"):
                    break
            except OSError:
                pass
            if time.time() > deadline:
                sys.exit("the cluster did not come up (logs in %s)" % work)
            time.sleep(0.1)
    return ports


def stop_all():
    for p in PROCS:
        p.kill()
        p.wait()
    PROCS.clear()


def parse_hotkeys(text):
    """{key: (served, replicas)} and copies held, from one node's INFO hotkeys."""
    keys, held = {}, 0
    for line in text.decode(errors="replace").splitlines():
        if line.startswith("hotkey_copies_held:"):
            held = int(line.split(":", 1)[1])
        elif line.startswith("hotkey") and ":key=" in line:
            fields = dict(f.split("=", 1) for f in line.split(":", 1)[1].split(","))
            keys[fields["key"]] = (fields.get("served"), int(fields.get("replicas", 0)))
    return keys, held


def sampler(ports, watched, rf, samples, stop, t0):
    conns = [Conn(p) for p in ports]
    while not stop.is_set():
        now = time.time() - t0
        rfs = {k: rf for k in watched}
        held_total = 0
        for c in conns:
            try:
                keys, held = parse_hotkeys(c.call("INFO", "hotkeys"))
            except OSError:
                continue
            held_total += held
            for k in watched:
                served, replicas = keys.get(k, (None, 0))
                if served == "owner":
                    rfs[k] = max(rfs[k], replicas)
        samples.append({"t": round(now, 2), "rf": rfs, "copies_held": held_total})
        stop.wait(0.5)


def loadgen(binary, ports, args, label, offset, seconds):
    cmd = [binary, "--ports", ",".join(map(str, ports)), "--keys", str(args.keys),
           "--zipf", str(args.zipf), "--write-ratio", str(args.write_ratio),
           "--threads", str(args.threads), "--seconds", str(seconds),
           "--key-offset", str(offset), "--label", label]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    summary = [l for l in out.splitlines() if " summary " in l][-1]
    return dict(f.split("=", 1) for f in summary.split()[2:])


def run(binary_dir, args, threshold, label):
    work = tempfile.mkdtemp(prefix="lattice-hotkeys-")
    try:
        ports = start(os.path.join(binary_dir, "lattice-server"), work, args.nodes, args.rf)
        for p in ports:
            Conn(p).call("CONFIG", "SET", "hotkey-threshold", threshold)
        gen = os.path.join(binary_dir, "lattice-loadgen")
        subprocess.run([gen, "--ports", ",".join(map(str, ports)), "--keys", str(args.keys),
                        "--load", "--threads", "4", "--label", label], check=True)
        half = args.keys // 2
        watched = ["key:%012d" % r for r in (0, 1, 2)] + ["key:%012d" % (half + r) for r in (0, 1, 2)]
        samples, stop = [], threading.Event()
        t0 = time.time()
        th = threading.Thread(target=sampler, args=(ports, watched, args.rf, samples, stop, t0))
        th.start()
        a = loadgen(gen, ports, args, label + "-A", 0, args.seconds)
        b = loadgen(gen, ports, args, label + "-B", half, args.seconds)
        time.sleep(args.cool)
        stop.set()
        th.join()
        rss = []
        for proc in PROCS:
            with open("/proc/%d/status" % proc.pid) as f:
                rss += [int(l.split()[1]) // 1024 for l in f if l.startswith("VmRSS:")]
        return {"threshold": threshold, "phase_a": a, "phase_b": b, "samples": samples,
                "watched": watched, "rss_mb": rss}
    finally:
        stop_all()
        shutil.rmtree(work, ignore_errors=True)


def plot(results, path, rf, nodes):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    on = results["on"]
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(9, 7), sharex=True)
    for i, k in enumerate(on["watched"]):
        ts = [s["t"] for s in on["samples"]]
        ax1.step(ts, [s["rf"][k] for s in on["samples"]], where="post",
                 label=("phase A rank %d" if i < 3 else "phase B rank %d") % (i % 3),
                 linestyle="-" if i < 3 else "--")
    ax1.set_ylabel("replication factor")
    ax1.set_ylim(rf - 0.5, nodes + 0.5)
    ax1.set_title("Hottest keys' replication factor (tuning on, threshold %s/s)" % on["threshold"])
    ax1.legend(loc="upper right", fontsize=8)
    for name, style in (("off", ":"), ("on", "-")):
        r = results[name]
        ax2.plot([s["t"] for s in r["samples"]], [s["copies_held"] for s in r["samples"]],
                 style, label="copies held, tuning %s" % name)
    ax2.set_xlabel("seconds since phase A started (phase B starts at %.0f s)" % results["seconds"])
    ax2.set_ylabel("copies held (all nodes)")
    ax2.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin-dir", default=os.path.join(ROOT, "target", "release"))
    ap.add_argument("--nodes", type=int, default=5)
    ap.add_argument("--rf", type=int, default=3)
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--zipf", type=float, default=0.99)
    ap.add_argument("--write-ratio", type=float, default=0.1)
    ap.add_argument("--threads", type=int, default=10)
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--cool", type=float, default=10, help="seconds sampled after phase B")
    ap.add_argument("--threshold", type=int, default=5000)
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "hotkeys"))
    args = ap.parse_args()
    results = {"seconds": args.seconds, "args": vars(args),
               "load_average": os.getloadavg()}
    results["off"] = run(args.bin_dir, args, 0, "off")
    results["on"] = run(args.bin_dir, args, args.threshold, "on")
    results["load_average_after"] = os.getloadavg()
    for name in ("off", "on"):
        r = results[name]
        for ph in ("phase_a", "phase_b"):
            s = r[ph]
            print("tuning %-3s %s: %s ops/s, read p50 %s us, p99 %s us, p99.9 %s us, max %s us, errors %s"
                  % (name, ph, s["ops_per_s"], s["read_p50_us"], s["read_p99_us"],
                     s["read_p999_us"], s["read_max_us"], s["errors"]))
        peak = {k: max(x["rf"][k] for x in r["samples"]) for k in r["watched"]}
        last = r["samples"][-1]["rf"] if r["samples"] else {}
        print("tuning %-3s peak RF of watched keys: %s; at the end: %s; RSS MB per node: %s"
              % (name, peak, last, r["rss_mb"]))
    with open(args.out + ".json", "w") as f:
        json.dump(results, f, indent=1)
    plot(results, args.out + ".png", args.rf, args.nodes)
    print("wrote %s.json and %s.png (load average before %s, after %s)"
          % (args.out, args.out, results["load_average"], results["load_average_after"]))
    errors = sum(int(results[n][p]["errors"]) for n in ("off", "on") for p in ("phase_a", "phase_b"))
    sys.exit(1 if errors else 0)


if __name__ == "__main__":
    try:
        main()
    finally:
        stop_all()
