#!/usr/bin/env python3
"""Reports import cycles between the module files of one Rust crate.

A module (one file: `lib.rs`, `a.rs`, `a/mod.rs`, `a/b.rs`) depends on another when its
non-test code names it: `use crate::a::b::X`, `crate::a::f()`, `super::g`, `self::c::h`, or a
`use` of a child module by its bare name. Each path is resolved to the longest module prefix
that exists; naming oneself is no edge, declaring a child (`mod c;`) is none either, and a
private child module (below the crate root) counts as part of its parent (`module_graph`). Test code
is left out: `#[cfg(test)]` items (inline blocks and the files they declare). Comments and
string literals are stripped first, so a doc link is no dependency.

Every strongly connected component of more than one module is a cycle: the script prints each
with one concrete loop through it and exits 1; with none it prints the module count and exits 0.

    scripts/import-cycles.py crates/node/src
    scripts/import-cycles.py --self-test
"""

import os
import re
import sys
import tempfile

PATH_RE = re.compile(r"\b(crate|super|self)((?:\s*::\s*[A-Za-z_][A-Za-z0-9_]*)+)")
MOD_DECL_RE = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+([A-Za-z_][A-Za-z0-9_]*)\s*;")
PRIVATE_MOD_RE = re.compile(r"^\s*mod\s+([A-Za-z_][A-Za-z0-9_]*)\s*;")
CFG_TEST_RE = re.compile(r"#\[cfg\(test\)\]")


def strip_comments_and_strings(text):
    """Blanks comments, string and char literals, keeping line structure."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if text.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif text.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    if text[i] == "\n":
                        out.append("\n")
                    i += 1
        elif c == "r" and re.match(r'r#*"', text[i:i + 8]) and (i == 0 or not text[i - 1].isalnum() and text[i - 1] != "_"):
            m = re.match(r'r(#*)"', text[i:])
            end = '"' + m.group(1)
            j = text.find(end, i + len(m.group(0)))
            j = n if j < 0 else j + len(end)
            out.append('""' + "\n" * text.count("\n", i, j))
            i = j
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append('""' + "\n" * text.count("\n", i, j))
            i = j + 1
        elif c == "'" and re.match(r"'(\\.|\\u\{[0-9a-fA-F]+\}|[^\\'])'", text[i:i + 12]):
            m = re.match(r"'(\\.|\\u\{[0-9a-fA-F]+\}|[^\\'])'", text[i:i + 12])
            out.append("' '")
            i += len(m.group(0))
        else:
            out.append(c)
            i += 1
    return "".join(out)


def drop_test_items(code):
    """Removes every item marked `#[cfg(test)]`; returns the code and the test child modules."""
    test_children = set()
    out = []
    i = 0
    while True:
        m = CFG_TEST_RE.search(code, i)
        if not m:
            out.append(code[i:])
            break
        out.append(code[i:m.start()])
        j = m.end()
        # The item: up to a `;` at depth 0 or the end of its first `{...}` block.
        depth = 0
        k = j
        while k < len(code):
            ch = code[k]
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
                if depth == 0:
                    k += 1
                    break
            elif ch == ";" and depth == 0:
                k += 1
                break
            k += 1
        item = code[j:k]
        decl = MOD_DECL_RE.match(item.strip().split("\n")[-1]) if item.strip().endswith(";") else None
        if decl:
            test_children.add(decl.group(1))
        out.append("\n" * item.count("\n"))
        i = k
    return "".join(out), test_children


def module_files(src):
    """Maps module path tuples (() for the crate root) to files, skipping test-only files."""
    mods = {}
    for root, _, files in os.walk(src):
        for f in files:
            if not f.endswith(".rs"):
                continue
            full = os.path.join(root, f)
            rel = os.path.relpath(full, src)[:-3].split(os.sep)
            if rel == ["lib"] or rel == ["main"]:
                path = ()
            elif rel[-1] == "mod":
                path = tuple(rel[:-1])
            else:
                path = tuple(rel)
            mods[path] = full
    return mods


def expand_use_tree(tree):
    """`a::{b, c::{d, e}}` -> [[a, b], [a, c, d], [a, c, e]] (aliases and globs dropped)."""
    tree = re.sub(r"\s+as\s+\w+", "", tree)
    tree = re.sub(r"\s+", "", tree)

    def parse(s, prefix):
        paths = []
        depth, start = 0, 0
        parts = []
        for idx, ch in enumerate(s):
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
            elif ch == "," and depth == 0:
                parts.append(s[start:idx])
                start = idx + 1
        parts.append(s[start:])
        for p in parts:
            if not p:
                continue
            brace = p.find("{")
            if brace >= 0:
                head = [x for x in p[:brace].split("::") if x]
                paths.extend(parse(p[brace + 1:p.rfind("}")], prefix + head))
            else:
                paths.append(prefix + [x for x in p.split("::") if x and x != "*"])
        return paths

    return parse(tree, [])


def absolute(segments, here, is_dir_module, children):
    """Resolves a path's segments (first `crate`/`super`/`self`/child) from module `here`."""
    if not segments:
        return None
    first = segments[0]
    if first == "crate":
        return list(segments[1:])
    if first in ("self", "super"):
        base = list(here)
        rest = segments
        while rest and rest[0] in ("self", "super"):
            if rest[0] == "super":
                if not base:
                    return None
                base.pop()
            rest = rest[1:]
        return base + list(rest)
    if first in children:
        return list(here) + list(segments)
    return None


def resolve(abs_path, mods):
    for cut in range(len(abs_path), -1, -1):
        if tuple(abs_path[:cut]) in mods:
            return tuple(abs_path[:cut])
    return None


def module_graph(src):
    """The dependency graph between modules, with every private child module (`mod c;`
    without `pub`) folded into its parent: only the parent's subtree can name it, so it is a
    part of the parent (typically more `impl` blocks of the parent's types), and a path into
    it is a path into the parent."""
    mods = module_files(src)
    test_mods = set()
    private = set()
    graph = {}
    codes = {}
    for path, file in mods.items():
        with open(file, encoding="utf-8") as fh:
            code = strip_comments_and_strings(fh.read())
        code, test_children = drop_test_items(code)
        for c in test_children:
            test_mods.add(path + (c,))
        for line in code.split("\n"):
            m = PRIVATE_MOD_RE.match(line)
            if m:
                private.add(path + (m.group(1),))
        codes[path] = code
    # A module below a test-only module is test-only too.
    live = {p: f for p, f in mods.items() if not any(p[:len(t)] == t for t in test_mods)}

    def owner(path):
        # The crate root is only the crate's table of contents: its private modules stay
        # modules of their own.
        while path in private and len(path) > 1:
            path = path[:-1]
        return path

    for path in live:
        graph.setdefault(owner(path), set())
    for path in live:
        code = codes[path]
        children = {m.group(1) for line in code.split("\n") for m in [MOD_DECL_RE.match(line)] if m}
        edges = graph[owner(path)]
        uses = re.findall(r"\buse\s+([^;]+);", code)
        seg_lists = []
        for u in uses:
            seg_lists.extend(expand_use_tree(u))
        for m in PATH_RE.finditer(code):
            seg_lists.append([m.group(1)] + [s.strip() for s in m.group(2).split("::") if s.strip()])
        for child in children:
            for m in re.finditer(r"(?<![\w:])" + child + r"((?:\s*::\s*[A-Za-z_][A-Za-z0-9_]*)+)", code):
                seg_lists.append([child] + [s.strip() for s in m.group(1).split("::") if s.strip()])
        for segs in seg_lists:
            a = absolute(segs, path, False, children)
            if a is None:
                continue
            target = resolve(a, live)
            if target is not None and owner(target) != owner(path):
                edges.add(owner(target))
    return graph, {p: f for p, f in live.items() if p in graph}


def strongly_connected(graph):
    index, low, on_stack, stack, comps = {}, {}, set(), [], []
    counter = [0]

    def visit(v):
        # Iterative Tarjan: recursion would overflow on large crates.
        work = [(v, iter(sorted(graph[v])))]
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        while work:
            node, it = work[-1]
            advanced = False
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    advanced = True
                    break
                if w in on_stack:
                    low[node] = min(low[node], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == node:
                        break
                comps.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return comps


def one_loop(graph, comp):
    """A shortest loop from the component's first module back to itself."""
    members = set(comp)
    start = comp[0]
    prev = {start: None}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v]):
                if w == start:
                    path = [v]
                    while prev[path[-1]] is not None:
                        path.append(prev[path[-1]])
                    return list(reversed(path)) + [start]
                if w in members and w not in prev:
                    prev[w] = v
                    nxt.append(w)
        frontier = nxt
    return [start]


def name(path, files):
    return os.path.relpath(files[path])


def report(src):
    graph, files = module_graph(src)
    cycles = [c for c in strongly_connected(graph) if len(c) > 1]
    if not cycles:
        print(f"{src}: no import cycles among {len(graph)} modules")
        return 0
    for comp in sorted(cycles, key=len, reverse=True):
        print(f"{src}: import cycle of {len(comp)} files:")
        for m in comp:
            print(f"  {name(m, files)}")
        print("  for example: " + " -> ".join(name(m, files) for m in one_loop(graph, comp)))
    return 1


def self_test():
    def tree(files):
        d = tempfile.mkdtemp(prefix="import-cycles-")
        for rel, text in files.items():
            full = os.path.join(d, rel)
            os.makedirs(os.path.dirname(full), exist_ok=True)
            with open(full, "w", encoding="utf-8") as fh:
                fh.write(text)
        return d

    base = {
        "lib.rs": "pub mod a;\npub mod b;\npub mod c;\npub const F: fn() = a::f;\n",
        "a.rs": "use crate::b::{x, y::Z};\npub fn f() {}\n",
        "b/mod.rs": "pub mod y;\npub fn x() {}\n",
        "b/y.rs": "pub struct Z;\n/// Not a dependency: [`crate::a::f`].\nconst S: &str = \"crate::a::f\";\n"
                  "#[cfg(test)]\nmod tests {\n    use crate::a::f;\n}\n",
        "c.rs": "pub fn g() { crate::a::f() }\n#[cfg(test)]\nmod t;\n",
        "c/t.rs": "use crate::c::g;\n",
    }
    clean = graph_cycles(tree(base))
    assert clean == [], f"clean tree reported cycles: {clean}"
    planted = dict(base)
    planted["b/y.rs"] = "pub struct Z;\npub fn back() { super::super::a::f() }\n"
    found = graph_cycles(tree(planted))
    assert found == [[("a",), ("b",), ("b", "y")]] or found == [[("a",), ("b", "y")]], found
    grouped = dict(base)
    grouped["b/mod.rs"] = "pub mod y;\nuse crate::{c::{g}, a as q};\npub fn x() {}\n"
    found = graph_cycles(tree(grouped))
    assert found == [[("a",), ("b",), ("c",)]], found
    child_path = dict(base)
    child_path["a.rs"] = "pub fn f() { crate::g() }\n"
    child_path["lib.rs"] = base["lib.rs"] + "pub fn g() {}\n"
    found = graph_cycles(tree(child_path))
    assert found == [[(), ("a",)]], found
    # A private child adding methods to its parent's type is part of the parent: a path from
    # it to a module that uses the parent is a cycle.
    split_impl = dict(base)
    split_impl["a.rs"] = "mod more;\npub struct T;\npub fn f() {}\n"
    split_impl["a/more.rs"] = "impl super::T { pub fn g(&self) { crate::c::g() } }\n"
    found = graph_cycles(tree(split_impl))
    assert found == [[("a",), ("c",)]], found
    print("import-cycles self-test: ok (clean tree passes, planted cycles found)")
    return 0


def graph_cycles(src):
    graph, _ = module_graph(src)
    return [c for c in strongly_connected(graph) if len(c) > 1]


if __name__ == "__main__":
    if sys.argv[1:] == ["--self-test"]:
        sys.exit(self_test())
    if len(sys.argv) != 2:
        print(__doc__.strip(), file=sys.stderr)
        sys.exit(2)
    sys.exit(report(sys.argv[1]))
