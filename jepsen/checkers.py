"""Checkers over a recorded history and the final state, one per rule of docs/SEMANTICS.md.

Vocabulary:
- an operation is ok (acknowledged), fail (an error reply: it did not happen) or info
  (timeout or dropped connection: it may or may not have happened);
- at risk: an ok write acknowledged by a node incarnation that the nemesis later killed with
  SIGKILL. Nodes have no durability yet and restart with an empty data directory, so such a
  write survives only if it reached another replica before the kill; the checkers treat it like
  an indeterminate (info) write: it may be present or absent, but never duplicated or changed.
Every other acknowledged write must be visible in the final state as its rule says.
"""

import json

MAX_ERRORS = 20
WHERE = "on every node"  # where the final state the checkers read came from


def pair(history):
    """Invoke/complete pairs; each client has at most one request in flight."""
    open_ = {}
    ops = []
    for rec in history:
        if rec["type"] == "invoke":
            op = dict(rec, invoke=rec["time"], complete=None, type=None)
            open_[rec["process"]] = op
            ops.append(op)
        else:
            op = open_.pop(rec["process"], None)
            if op is None:
                continue
            op["type"] = rec["type"]
            op["complete"] = rec["time"]
            op["inc"] = rec.get("inc", op.get("inc"))
            if "result" in rec:
                op["result"] = rec["result"]
    for op in ops:
        if op["type"] is None:  # never completed (client stopped mid-request)
            op["type"] = "info"
    return ops


class Result:
    def __init__(self, name):
        self.name = name
        self.errors = []
        self.count = 0
        self.stats = {}

    def error(self, msg):
        self.count += 1
        if len(self.errors) < MAX_ERRORS:
            self.errors.append(msg)

    def out(self, summary):
        return {"valid": self.count == 0, "summary": summary if self.count == 0 else
                "%d violation(s); %s" % (self.count, summary), "errors": self.errors,
                "stats": self.stats}


def fmt_op(op):
    where = "node %s" % op["node"]
    if op.get("inc", 1) != 1:
        where += " (incarnation %s)" % op["inc"]
    return "%s %s %s by client %d on %s, %.3f-%.3f s, %s" % (
        op["f"].upper(), op["key"], op["value"] if op["value"] is not None else "",
        op["process"], where, op["invoke"], op["complete"] or -1, op["type"])


def check_all(run, states, converged):
    ops = pair(run.history.ops)
    killed = {(k["node"], k["inc"]) for k in run.kills}
    for op in ops:
        op["at_risk"] = op["type"] == "ok" and (op["node"], op.get("inc")) in killed
    rescued = rescue_replicated(ops, {(k["node"], k["inc"]): k["time"] for k in run.kills})
    sure = lambda op: op["type"] == "ok" and not op["at_risk"]  # noqa: E731
    maybe = lambda op: op["type"] == "info" or op["at_risk"]  # noqa: E731
    first_id = next((i for i in sorted(states) if "__error__" not in states[i]), None)
    first = states[first_id] if first_id is not None else {}
    global WHERE
    WHERE = "on every node" if converged else "on node %s (the nodes disagree)" % first_id
    by_key = {}
    for op in ops:
        by_key.setdefault(op["key"], []).append(op)

    res = {}
    res["convergence"] = check_convergence(states, converged)
    res["counter"] = check_counters(run, first, by_key, sure, maybe)
    res["set"] = check_sets(run, first, by_key, sure)
    res["register"] = check_registers(run, first, by_key, sure)
    res["list"] = check_lists(run, first, by_key, sure)
    if "set" in run.workloads or "list" in run.workloads:
        res["monotonic"] = check_monotonic(ops)
    res["heals"] = check_heals(run.convergence)
    res = {k: v for k, v in res.items() if v is not None}
    stats = {"ops": len(ops), "ok": sum(o["type"] == "ok" for o in ops),
             "fail": sum(o["type"] == "fail" for o in ops),
             "info": sum(o["type"] == "info" for o in ops),
             "at_risk": sum(o["at_risk"] for o in ops),
             "at_risk_seen_elsewhere_before_kill": rescued}
    return {"valid": all(r["valid"] for r in res.values()), "checkers": res, "stats": stats}


def written_value(op):
    if op["f"] in ("sadd", "lpush", "set"):
        return op["value"]
    if op["f"] == "hset":
        return op["value"][1]
    return None


def read_values(op):
    res = op.get("result")
    if isinstance(res, list):
        return res
    if isinstance(res, dict):
        return list(res.values())
    if isinstance(res, str):
        return [res]
    return []


def rescue_replicated(ops, kill_time):
    """An at-risk write whose unique value was returned, before the kill, by a read on a node
    incarnation that was never killed had reached a replica that kept it: it is held to the
    full promise again.
    Counter deltas carry no identity and stay at risk."""
    pending = {}
    for op in ops:
        v = written_value(op) if op["at_risk"] else None
        if v is not None:
            pending[v] = op
    if not pending:
        return 0
    keys = set(pending)
    n = 0
    for rd in ops:
        if rd["type"] != "ok" or rd["f"] not in ("get", "smembers", "lrange", "hgetall"):
            continue
        hit = keys.intersection(read_values(rd))
        for v in hit:
            w = pending[v]
            if ((rd["node"], rd.get("inc")) not in kill_time and
                    rd["complete"] < kill_time[(w["node"], w.get("inc"))] and w["at_risk"]):
                w["at_risk"] = False
                n += 1
        keys -= {v for v in hit if not pending[v]["at_risk"]}
    return n


def short(v, n=80):
    s = repr(v)
    return s if len(s) <= n else s[:n] + "...(%d chars)" % len(s)


def check_convergence(states, converged):
    r = Result("convergence")
    nodes = sorted(states)
    for i in nodes:
        if "__error__" in states[i]:
            r.error("node %d could not be read after the final heal: %s" %
                    (i, states[i]["__error__"]))
    good = [i for i in nodes if "__error__" not in states[i]]
    keys = sorted(set().union(*(states[i].keys() for i in good))) if good else []
    differing = 0
    for key in keys:
        vals = {i: states[i].get(key) for i in good}
        if len({json.dumps(v, sort_keys=True) for v in vals.values()}) > 1:
            differing += 1
            if len(r.errors) < MAX_ERRORS:
                r.error("%s differs after the final heal: %s" % (
                    key, "; ".join("node %d: %s" % (i, short(v, 60)) for i, v in vals.items())))
            else:
                r.count += 1
    r.stats = {"keys": len(keys), "differing": differing, "nodes": len(nodes)}
    return r.out("%d keys identical on all %d nodes" % (len(keys), len(nodes)) if converged
                 else "%d of %d keys differ" % (differing, len(keys)))


def subset_sums(values, cap=20000):
    sums = {0}
    for v in values:
        sums |= {s + v for s in sums}
        if len(sums) > cap:
            return None
    return sums


def counter_delta(op):
    if op["f"] == "incrby":
        return op["value"]
    if op["f"] == "decrby":
        return -op["value"]
    return op["value"][1]  # hincrby


def check_counter_cell(r, label, final, ops, sure, maybe):
    """final must equal the acknowledged deltas plus a subset of the indeterminate ones."""
    writes = [o for o in ops if o["f"] in ("incrby", "decrby", "hincrby")]
    if not writes:
        return
    got = 0 if final is None else int(final)
    acked = sum(counter_delta(o) for o in writes if sure(o))
    unsure = [counter_delta(o) for o in writes if maybe(o)]
    r.stats["cells"] = r.stats.get("cells", 0) + 1
    r.stats["acknowledged"] = r.stats.get("acknowledged", 0) + sum(sure(o) for o in writes)
    r.stats["indeterminate"] = r.stats.get("indeterminate", 0) + len(unsure)
    sums = subset_sums(unsure)
    extra = got - acked
    if sums is None:
        ok = sum(v for v in unsure if v < 0) <= extra <= sum(v for v in unsure if v > 0)
    else:
        ok = extra in sums
    if not ok:
        r.error("%s reads %d %s, but its %d acknowledged increments sum to %d and "
                "its %d indeterminate ones can add only %s: %s" % (
                    label, got, WHERE, sum(sure(o) for o in writes), acked, len(unsure),
                    "[%d, %d]" % (sum(v for v in unsure if v < 0), sum(v for v in unsure if v > 0))
                    if unsure else "nothing",
                    "acknowledged increments worth %d are missing" % -extra if extra < 0 else
                    "%d more than they allow (an increment counted twice, or a lost decrement)"
                    % extra))


def check_counters(run, state, by_key, sure, maybe):
    if "counter" not in run.workloads and "hash" not in run.workloads:
        return None
    r = Result("counter")
    for key, ops in sorted(by_key.items()):
        if key.startswith("counter:"):
            check_counter_cell(r, key, state.get(key), ops, sure, maybe)
        elif key.startswith("hash:"):
            fields = {o["value"][0] for o in ops if o["f"] == "hincrby"}
            h = state.get(key) or {}
            for fld in sorted(fields):
                cell = [o for o in ops if o["f"] == "hincrby" and o["value"][0] == fld]
                check_counter_cell(r, "%s field %s" % (key, fld), h.get(fld), cell, sure, maybe)
    return r.out("%d counters (INCRBY/DECRBY keys and HINCRBY fields) equal their acknowledged "
                 "sums" % r.stats.get("cells", 0))


def check_sets(run, state, by_key, sure):
    if "set" not in run.workloads:
        return None
    r = Result("set")
    n_add = n_rem = 0
    for key, ops in sorted(by_key.items()):
        if not key.startswith("set:"):
            continue
        final = set(state.get(key) or [])
        adds = {o["value"]: o for o in ops if o["f"] == "sadd"}
        rems = {}
        for o in ops:
            if o["f"] == "srem":
                rems.setdefault(o["value"], []).append(o)
        n_add += len(adds)
        for x in sorted(final):
            a = adds.get(x)
            if a is None:
                r.error("%s holds %r, which no SADD ever wrote" % (key, x))
            elif a["type"] == "fail":
                r.error("%s holds %r although its SADD failed: %s" % (key, x, fmt_op(a)))
        for x, a in adds.items():
            if x in final or not sure(a):
                continue
            tried = [o for o in rems.get(x, []) if o["type"] in ("ok", "info")]
            if not tried:
                r.error("%s lost %r: its SADD was acknowledged (%s) and no SREM of it was ever "
                        "sent" % (key, x, fmt_op(a)))
        for x, rs in rems.items():
            for o in rs:
                if sure(o) and o.get("result") == 1:
                    n_rem += 1
                    if x in final:
                        r.error("%s still holds %r after an SREM that saw and removed it was "
                                "acknowledged (%s); it had one SADD only" % (key, x, fmt_op(o)))
    r.stats = {"adds": n_add, "observed_removes": n_rem}
    return r.out("%d SADDs: every acknowledged add present unless an SREM followed; %d "
                 "acknowledged removals stayed removed" % (n_add, n_rem))


def register_cells(by_key):
    """(label, key, field or None, ops writing it, ops reading it)"""
    for key, ops in sorted(by_key.items()):
        if key.startswith("register:"):
            yield key, key, None, [o for o in ops if o["f"] == "set"], \
                [o for o in ops if o["f"] == "get"]
        elif key.startswith("hash:"):
            fields = sorted({o["value"][0] for o in ops if o["f"] == "hset"})
            reads = [o for o in ops if o["f"] == "hgetall"]
            for fld in fields:
                yield "%s field %s" % (key, fld), key, fld, \
                    [o for o in ops if o["f"] == "hset" and o["value"][0] == fld], reads


def check_registers(run, state, by_key, sure):
    if "register" not in run.workloads and "hash" not in run.workloads:
        return None
    r = Result("register")
    cells = 0
    for label, key, fld, writes, reads in register_cells(by_key):
        cells += 1
        val = lambda o: o["value"] if fld is None else o["value"][1]  # noqa: E731
        if fld is None:
            final = state.get(key)
            seen = lambda rd: rd.get("result")  # noqa: E731
        else:
            final = (state.get(key) or {}).get(fld)
            seen = lambda rd: (rd.get("result") or {}).get(fld)  # noqa: E731
        if final is None:
            lost = [w for w in writes if sure(w)]
            if lost:
                r.error("%s is missing although %d writes were acknowledged, e.g. %s" %
                        (label, len(lost), fmt_op(lost[-1])))
            continue
        w = next((o for o in writes if val(o) == final), None)
        if w is None:
            r.error("%s ends at %r, which no write ever wrote" % (label, final))
            continue
        if w["type"] == "fail":
            r.error("%s ends at %r although that write failed: %s" % (label, final, fmt_op(w)))
            continue
        # Moments after which a node had seen the final value: the write's own node once it
        # acknowledged it, and any node where a read returned it. A write acknowledged by that
        # node (same incarnation) invoked after such a moment has a higher stamp and must win.
        marks = []
        if w["type"] == "ok":
            marks.append((w["node"], w["inc"], w["complete"], "its own acknowledgement"))
        for rd in reads:
            if rd["type"] == "ok" and seen(rd) == final:
                marks.append((rd["node"], rd["inc"], rd["complete"],
                              "a read on that node at %.3f s" % rd["complete"]))
        beaten = None
        for (node, inc, t, why) in marks:
            for w2 in writes:
                if (w2 is not w and sure(w2) and w2["node"] == node and w2["inc"] == inc
                        and w2["invoke"] > t):
                    if beaten is None or w2["invoke"] < beaten[0]["invoke"]:
                        beaten = (w2, why)
                    break
        if beaten:
            w2, why = beaten
            r.error("%s ends at %r (%s), but node %d had seen that value (%s) before it "
                    "acknowledged the newer write %r (%s): the newer write lost" % (
                        label, final, fmt_op(w), w2["node"], why, val(w2), fmt_op(w2)))
    r.stats = {"cells": cells}
    return r.out("%d registers (SET keys and HSET fields) end at a write no acknowledged later "
                 "write superseded" % cells)


def check_lists(run, state, by_key, sure):
    if "list" not in run.workloads:
        return None
    r = Result("list")
    n = 0
    for key, ops in sorted(by_key.items()):
        if not key.startswith("list:"):
            continue
        final = state.get(key) or []
        pushes = {o["value"]: o for o in ops if o["f"] == "lpush"}
        n += len(pushes)
        pos = {}
        for k, x in enumerate(final):
            if x in pos:
                r.error("%s holds %r twice (positions %d and %d)" % (key, x, pos[x], k))
            pos[x] = k
            if x not in pushes:
                r.error("%s holds %r, which no LPUSH ever wrote" % (key, x))
            elif pushes[x]["type"] == "fail":
                r.error("%s holds %r although its LPUSH failed" % (key, x))
        for x, o in pushes.items():
            if sure(o) and x not in pos:
                r.error("%s lost %r: its LPUSH was acknowledged (%s)" % (key, x, fmt_op(o)))
        # One client's successive pushes on one node incarnation: the later lands in front.
        last = {}
        for o in sorted(pushes.values(), key=lambda o: o["invoke"]):
            c = (o["process"], o["node"], o.get("inc"))
            p = last.get(c)
            if (p and sure(p) and sure(o) and p["value"] in pos and o["value"] in pos
                    and pos[o["value"]] > pos[p["value"]]):
                r.error("%s: %r was pushed after %r by the same client on the same node, yet "
                        "stands behind it" % (key, o["value"], p["value"]))
            last[c] = o
    r.stats = {"pushes": n}
    return r.out("%d LPUSHes: every acknowledged push present once, each client's pushes in "
                 "order" % n)


def check_monotonic(ops):
    """A client that stays on one node (incarnation) never sees a set or list lose an element
    it saw before, unless an SREM of that element was sent before the later read ended."""
    r = Result("monotonic")
    reads = {}
    srem_inv = {}
    for o in ops:
        if o["f"] == "srem":
            srem_inv.setdefault((o["key"], o["value"]), []).append(o["invoke"])
    for o in ops:
        if o["type"] == "ok" and o["f"] in ("smembers", "lrange"):
            reads.setdefault((o["process"], o["node"], o.get("inc"), o["key"]), []).append(o)
    checked = 0
    for (proc, node, inc, key), rs in sorted(reads.items(), key=lambda kv: str(kv[0])):
        prev = None
        for rd in sorted(rs, key=lambda o: o["invoke"]):
            cur = set(rd.get("result") or [])
            checked += 1
            if prev is not None:
                gone = [x for x in prev[1] - cur
                        if not any(t < rd["complete"] for t in srem_inv.get((key, x), []))]
                if gone:
                    r.error("client %d on node %d read %s at %.3f s with %d elements, then at "
                            "%.3f s %d of them were gone (e.g. %r) with no removal sent" % (
                                proc, node, key, prev[0]["complete"], len(prev[1]),
                                rd["complete"], len(gone), sorted(gone)[0]))
            prev = (rd, cur)
    r.stats = {"reads": checked}
    return r.out("%d set/list reads: no client saw an element disappear from its node" % checked)


def check_heals(conv):
    """After each heal, every node holds the markers written on every reachable node just
    before it, within 40 s (the runner's bound)."""
    r = Result("heals")
    for c in conv:
        if c["ms"] is None:
            r.error("after heal %d (%s) the nodes did not all hold the pre-heal markers within "
                    "40 s" % (c["step"] + 1, c["nemesis"]))
    ms = [c["ms"] for c in conv if c["ms"] is not None]
    return r.out("%d heals, each converged within 40 s (max %s ms)" % (
        len(conv), max(ms) if ms else "-"))
