#!/usr/bin/env python3
"""Fails when two source files of one crate depend on each other, directly
or around a longer loop (ARCHITECTURE.md: no module imports its importers).

A file depends on another when it names it: `use crate::a::…`,
`crate::a::f()`, `super::…` (the parent, or a sibling through it), or, for a
parent, `use child::…` / `child::f()`. Test items (`#[cfg(test)]`, each
up to its closing brace: code after a test module is still read),
comments and string literals are left out; an inline module (`mod x {
… }`) counts as its file, so it names its file's items by `crate::`
paths, not `super::`. Hand-written (no crate
does this for Rust sources); run by .ci/run.
"""
import os
import re
import sys


def crates(root):
    out = {}
    for d, dirs, files in os.walk(root):
        dirs[:] = [x for x in dirs if x not in ("target", "fuzz", "tests", ".git")]
        if "/src" not in d + "/":
            continue
        for f in files:
            if f.endswith(".rs"):
                p = os.path.join(d, f)
                out.setdefault(p[: p.index("/src/") + 5], []).append(p)
    return out


def module(src, path):
    rel = path[len(src):-3]
    if rel.endswith("/mod"):
        rel = rel[:-4]
    return "" if rel in ("lib", "main") or rel.startswith("bin/") else rel.replace("/", "::")


LITERALS = re.compile(
    r'r(#*)"(?:.|\n)*?"\1'  # raw strings
    r'|b?"(?:\\.|[^"\\])*"'  # strings
    r"|b?'(?:\\.|[^'\\])'"  # characters (not lifetimes)
    r"|//[^\n]*"  # comments
)
TEST_ITEM = re.compile(r"#\[cfg\((?:all\()?test\b[^\]]*\]")


def without_test_items(text):
    """`text` without its `#[cfg(test)]` items: a `mod x;` line, or an
    item up to its matching closing brace. Code after a test module
    stays (it is code the crate builds)."""
    out, at = [], 0
    for m in TEST_ITEM.finditer(text):
        if m.start() < at:
            continue
        out.append(text[at:m.start()])
        i = m.end()
        semi, brace = text.find(";", i), text.find("{", i)
        if brace < 0 or 0 <= semi < brace:
            at = semi + 1 if semi >= 0 else len(text)
            continue
        depth, j = 0, brace
        while j < len(text):
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            j += 1
            if depth == 0:
                break
        at = j
    out.append(text[at:])
    return "".join(out)


def code(path):
    text = open(path, encoding="utf-8").read()
    # Literals and comments first: a brace or a path in a string is not code.
    text = LITERALS.sub(lambda m: "" if m.group(0).startswith("/") else '""', text)
    return without_test_items(text)


def deps(mod, text, mods):
    out = set()
    for q in re.findall(r"crate::([a-z_]+(?:::[a-z_]+)*)", text):
        parts = q.split("::")
        for i in range(len(parts), 0, -1):
            c = "::".join(parts[:i])
            if c in mods:
                out.add(c)
                break
    parent = "::".join(mod.split("::")[:-1])
    for q in re.findall(r"super::([a-z_]+(?:::[a-z_]+)*|\*|\{)", text):
        target = parent
        if q not in ("*", "{"):
            parts = q.split("::")
            for i in range(len(parts), 0, -1):
                c = "::".join(([parent] if parent else []) + parts[:i])
                if c in mods:
                    target = c
                    break
        out.add(target)
    for q in re.findall(r"\b([a-z_]+)::", text):
        c = f"{mod}::{q}" if mod else q
        if c in mods:
            out.add(c)
    out.discard(mod)
    return {d for d in out if d in mods}


def cycles(graph):
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, found = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in graph:
        if v not in index:
            visit(v)
    return found


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "."
    bad = 0
    for src, files in sorted(crates(root).items()):
        by_mod = {}
        for p in files:
            m = module(src, p)
            if not (src + "bin/") in p:
                by_mod[m] = p
        graph = {m: deps(m, code(p), by_mod) for m, p in by_mod.items()}
        for comp in cycles(graph):
            bad += 1
            names = [by_mod[m][len(root.rstrip("/")) + 1:] for m in comp]
            print(f"import cycle: {' <-> '.join(names)}")
    print(f"import-cycles: {bad} cycle(s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
