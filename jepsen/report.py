"""Per-run and per-suite reports: an index.html, PNG plots, results.json beside history.jsonl."""

import html
import json
import os

try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:  # the runner still checks; the report says the plots are missing
    plt = None

COLORS = {"partition": "#f4a261", "kill": "#e76f51", "pause": "#8ab17d", "clock": "#8d99ae",
          "combined": "#b5838d"}
WRITE_F = {"incrby", "decrby", "sadd", "srem", "set", "hset", "hincrby", "lpush"}


def shade(ax, events):
    seen = set()
    for e in events:
        kind = e["nemesis"].split("-")[0] if "+" not in e["nemesis"] else "combined"
        label = e["nemesis"] if e["nemesis"] not in seen else None
        seen.add(e["nemesis"])
        ax.axvspan(e["start"], e["heal"], color=COLORS.get(kind, "#cccccc"), alpha=0.3,
                   label=label)
        if e.get("converged_ms"):
            ax.axvspan(e["heal"], e["heal"] + e["converged_ms"] / 1000.0, facecolor="none",
                       edgecolor="#aaaaaa", hatch="//", linewidth=0, alpha=0.6,
                       label="heal until converged" if "conv" not in seen else None)
            seen.add("conv")
        ax.text(e["start"], 1.0, " " + e["nemesis"], transform=ax.get_xaxis_transform(),
                fontsize=7, va="top", rotation=90)


def pairs(ops):
    open_ = {}
    out = []
    for rec in ops:
        if rec["type"] == "invoke":
            open_[rec["process"]] = rec
        else:
            inv = open_.pop(rec["process"], None)
            if inv:
                out.append((inv, rec))
    return out


def plots(d, ops, results):
    if plt is None:
        return []
    events = results["meta"]["events"]
    ps = pairs(ops)
    files = []
    # Latency over time.
    fig, ax = plt.subplots(figsize=(11, 4.5))
    styles = {("write", "ok"): ("#1d4ed8", "."), ("read", "ok"): ("#16a34a", "."),
              ("write", "fail"): ("#d62828", "x"), ("read", "fail"): ("#7f1d1d", "x"),
              ("write", "info"): ("#d62828", "v"), ("read", "info"): ("#111111", "^")}
    for typ in ("ok", "fail", "info"):
        for kind in ("write", "read"):
            color, marker = styles[(kind, typ)]
            pts = [(i["time"], (c2["time"] - i["time"]) * 1000) for i, c2 in ps
                   if c2["type"] == typ and ((i["f"] in WRITE_F) == (kind == "write"))]
            if pts:
                ax.scatter([p[0] for p in pts], [p[1] for p in pts], s=3 if typ == "ok" else 14,
                           marker=marker, color=color, alpha=0.4 if typ == "ok" else 0.9,
                           label="%s %s (%d)" % (kind, typ, len(pts)))
    shade(ax, events)
    ax.set_yscale("log")
    ax.set_xlabel("time since start (s)")
    ax.set_ylabel("latency (ms, log)")
    ax.set_title("Request latency; shaded: fault windows (start to heal); hatched: heal until "
                 "converged")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    fig.savefig(os.path.join(d, "latency.png"), dpi=110)
    plt.close(fig)
    files.append("latency.png")
    # Throughput per second by outcome.
    fig, ax = plt.subplots(figsize=(11, 4))
    end = int(max((c["time"] for _, c in ps), default=0)) + 1
    for typ, color in (("ok", "#1d3557"), ("fail", "#d62828"), ("info", "#e9c46a")):
        bins = [0] * end
        for _, c in ps:
            if c["type"] == typ:
                bins[min(int(c["time"]), end - 1)] += 1
        ax.plot(range(end), bins, color=color, label=typ, drawstyle="steps-post")
    shade(ax, events)
    ax.set_xlabel("time since start (s)")
    ax.set_ylabel("completed requests / s")
    ax.set_title("Throughput by outcome; shaded: fault windows; hatched: heal until converged")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    fig.savefig(os.path.join(d, "throughput.png"), dpi=110)
    plt.close(fig)
    files.append("throughput.png")
    # Convergence after each heal.
    conv = results["meta"]["convergence"]
    if conv:
        fig, ax = plt.subplots(figsize=(8, 3.5))
        labels = ["%d: %s" % (c["step"] + 1, c["nemesis"]) for c in conv]
        vals = [c["ms"] if c["ms"] is not None else 0 for c in conv]
        bars = ax.barh(labels, vals, color=["#2a9d8f" if c["ms"] is not None else "#d62828"
                                            for c in conv])
        for b, c in zip(bars, conv):
            ax.text(b.get_width(), b.get_y() + b.get_height() / 2,
                    " %s" % ("%.0f ms" % c["ms"] if c["ms"] is not None else "no convergence"),
                    va="center", fontsize=8)
        ax.invert_yaxis()
        ax.set_xlabel("ms from heal until every node holds every marker written before it")
        ax.set_title("Convergence after each heal")
        fig.tight_layout()
        fig.savefig(os.path.join(d, "convergence.png"), dpi=110)
        plt.close(fig)
        files.append("convergence.png")
    return files


def write_run(d, ops, results):
    files = plots(d, ops, results)
    m = results["meta"]
    e = html.escape
    rows = []
    for name, r in results["checkers"].items():
        errs = "".join("<li>%s</li>" % e(x) for x in r.get("errors", []))
        rows.append("<tr><td>%s</td><td class=%s>%s</td><td>%s%s</td></tr>" % (
            e(name), "ok" if r["valid"] else "bad", "valid" if r["valid"] else "INVALID",
            e(r.get("summary", "")), "<ul>%s</ul>" % errs if errs else ""))
    ev = "".join("<tr><td>%d</td><td>%s</td><td>%.2f</td><td>%.2f</td><td>%s</td><td>%s</td>"
                 "</tr>" % (x["step"] + 1, e(x["nemesis"]), x["start"], x["heal"],
                            "%.0f ms" % x["converged_ms"] if x["converged_ms"] is not None
                            else "none in 40 s",
                            e("; ".join(json.dumps({k: v for k, v in f.items() if k != "drops"})
                                        for f in x["faults"])))
                 for x in m["events"])
    page = """<!doctype html><html><head><meta charset=utf-8><title>%s</title><style>
body{font-family:sans-serif;max-width:1200px;margin:1em auto} td,th{border:1px solid #ccc;
padding:3px 6px;vertical-align:top;font-size:13px} table{border-collapse:collapse}
.ok{color:#2a7} .bad{color:#c22;font-weight:bold} code{background:#eee}</style></head><body>
<h1>%s: %s</h1><p>seed <b>%d</b>, %d nodes, nemesis <code>%s</code>%s, %d history records,
%s. Final state agreed after %s ms.</p><p>Replay: <code>%s</code></p>
<h2>Checkers</h2><table><tr><th>checker</th><th>result</th><th>what was checked</th></tr>%s
</table><p>Operations: %s. <i>at_risk</i>: acknowledged by a node incarnation later killed -9
(no durability yet: treated as indeterminate).</p>
<h2>Fault windows</h2><table><tr><th>step</th><th>nemesis</th><th>start s</th><th>heal s</th>
<th>convergence</th><th>faults</th></tr>%s</table><p>Clock checks (TIME vs. runner): %s</p>
<h2>Plots</h2>%s
<h2>Files</h2><ul><li><a href=history.jsonl>history.jsonl</a> (one record per invoke/ok/fail/info)
</li><li><a href=results.json>results.json</a></li><li>n*/server.log: each node's log</li></ul>
</body></html>""" % (
        e(os.path.basename(d)), "VALID" if results["valid"] else "INVALID", e(os.path.basename(d)),
        m["seed"], m["nodes"], e(m["nemesis"]),
        (", planted fault <b>%s</b>" % e(m["plant"])) if m["plant"] else "", m["ops"],
        e(m["binary"]), results.get("final_convergence_ms"), e(m["replay"]), "".join(rows),
        e(json.dumps(results["stats"])), ev, e(json.dumps(m["clock_checks"])),
        "".join("<p><img src=%s style='max-width:100%%'></p>" % f for f in files) or
        "<p>matplotlib missing: no plots</p>")
    with open(os.path.join(d, "index.html"), "w") as f:
        f.write(page)


def pct(xs, p):
    if not xs:
        return None
    xs = sorted(xs)
    k = min(len(xs) - 1, max(0, int(round(p / 100 * len(xs) + 0.5)) - 1))
    return xs[k]


def write_suite(out, name, rows):
    conv = []
    for r in rows:
        if "results" in r:
            conv += [c for c in r["results"]["meta"]["convergence"]]
    ms = [c["ms"] for c in conv if c["ms"] is not None]
    missing = sum(c["ms"] is None for c in conv)
    lines = ["suite %s: %d runs" % (name, len(rows))]
    trs = []
    for r in rows:
        if "error" in r:
            lines.append("  ERROR %s: %s" % (r["args"].get("seed"), r["error"]))
            trs.append("<tr><td colspan=6 class=bad>run error: %s</td></tr>" % html.escape(
                r["error"]))
            continue
        res = r["results"]
        m = res["meta"]
        bad = [k for k, v in res["checkers"].items() if not v["valid"]]
        lines.append("  %-7s %-50s seed %-10d %5.0f s  %s" % (
            "valid" if res["valid"] else "INVALID", r["dir"], m["seed"], r["wall_s"],
            ("invalid: " + ", ".join(bad)) if bad else ""))
        trs.append("<tr><td><a href='%s/index.html'>%s</a></td><td>%d</td><td>%d</td><td class=%s>"
                   "%s</td><td>%s</td><td>%.0f</td></tr>" % (
                       html.escape(r["dir"]), html.escape(r["dir"]), m["seed"], m["nodes"],
                       "ok" if res["valid"] else "bad", "valid" if res["valid"] else "INVALID",
                       html.escape(", ".join(bad)), r["wall_s"]))
    stat = ("convergence after %d heals: p50 %s ms, p99 %s ms, max %s ms%s" % (
        len(conv), pct(ms, 50), pct(ms, 99), max(ms) if ms else None,
        ", %d did not converge within 40 s" % missing if missing else "")) if conv else \
        "no heals"
    lines.append(stat)
    by_kind = {}
    for c in conv:
        by_kind.setdefault(c["nemesis"], []).append(c["ms"])
    kind_rows = []
    for k in sorted(by_kind):
        xs = [x for x in by_kind[k] if x is not None]
        line = "  %-40s %3d heals  p50 %8s  p99 %8s  max %8s  not converged %d" % (
            k, len(by_kind[k]), pct(xs, 50), pct(xs, 99), max(xs) if xs else None,
            len(by_kind[k]) - len(xs))
        lines.append(line)
        kind_rows.append("<tr><td>%s</td><td>%d</td><td>%s</td><td>%s</td><td>%s</td><td>%d</td>"
                         "</tr>" % (html.escape(k), len(by_kind[k]), pct(xs, 50), pct(xs, 99),
                                    max(xs) if xs else None, len(by_kind[k]) - len(xs)))
    kinds_html = ("<h2>Convergence by nemesis (ms)</h2><table><tr><th>nemesis</th><th>heals</th>"
                  "<th>p50</th><th>p99</th><th>max</th><th>not within 40 s</th></tr>%s</table>"
                  % "".join(kind_rows)) if kind_rows else ""
    if plt is not None and ms:
        fig, ax = plt.subplots(figsize=(8, 3.5))
        ax.hist(ms, bins=30, color="#2a9d8f")
        ax.set_xlabel("ms from heal until every node holds every marker")
        ax.set_ylabel("heals")
        ax.set_title("Convergence after heals, %d heals over %d runs" % (len(ms), len(rows)))
        fig.tight_layout()
        fig.savefig(os.path.join(out, "convergence.png"), dpi=110)
        plt.close(fig)
    page = """<!doctype html><html><head><meta charset=utf-8><title>%s</title><style>
body{font-family:sans-serif;max-width:1100px;margin:1em auto} td,th{border:1px solid #ccc;
padding:3px 6px} table{border-collapse:collapse} .ok{color:#2a7} .bad{color:#c22}</style>
</head><body><h1>suite %s</h1><p>%s</p><table><tr><th>run</th><th>seed</th><th>nodes</th>
<th>result</th><th>invalid checkers</th><th>wall s</th></tr>%s</table>%s%s</body></html>""" % (
        name, name, html.escape(stat), "".join(trs), kinds_html,
        "<p><img src=convergence.png></p>" if ms else "")
    with open(os.path.join(out, "index.html"), "w") as f:
        f.write(page)
    with open(os.path.join(out, "summary.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    return "\n".join(lines)
