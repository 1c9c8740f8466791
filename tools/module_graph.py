"""The module graph of the Rust core (src/*.rs, without the Python bindings): who imports whom.

    python tools/module_graph.py            # checks: no cycle, nothing imports the facade
    python tools/module_graph.py --print    # also prints each module's imports and its depth

A module's imports are the `crate::NAME` paths in its source (`use` lines and inline paths,
including `use crate::{a, b::c}` groups). `lib.rs` (the crate root) and `python/` (bindings, above
the core) are left out. Checks:
- the graph has no cycle (no two core modules import each other, directly or through others);
- no core module imports `log` (the `CommitLog` facade): it is the top, nothing below it calls up.
Exit status 1 and a report when a check fails.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"
FACADE = "log"
_GROUP = re.compile(r"crate::\{([^}]*)\}", re.S)
_PATH = re.compile(r"crate::([a-z_][a-z0-9_]*)")
_COMMENT = re.compile(r"//[^\n]*")


def modules() -> dict[str, set[str]]:
    files = {p.stem if p.name != "mod.rs" else p.parent.name: p for p in SRC.glob("*.rs")}
    files.update({p.parent.name: p for p in SRC.glob("*/mod.rs") if p.parent.name != "python"})
    for p in SRC.glob("*/*.rs"):
        if p.parent.name != "python" and p.name != "mod.rs":
            files[f"{p.parent.name}::{p.stem}"] = p
    files.pop("lib", None)
    tops = {name.split("::")[0] for name in files}
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        text = _COMMENT.sub("", path.read_text())
        deps: set[str] = set()
        for group in _GROUP.findall(text):
            for item in group.split(","):
                head = item.strip().split("::")[0].strip()
                if head:
                    deps.add(head)
        deps.update(_PATH.findall(text))
        own = name.split("::")[0]
        graph[name] = {d for d in deps if d in tops and d != own}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    top = {n: n.split("::")[0] for n in graph}
    g = {t: set() for t in top.values()}
    for n, ds in graph.items():
        g[top[n]] |= ds - {top[n]}

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(g.get(v, ())):
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
                out.append(sorted(comp))

    sys.setrecursionlimit(10_000)
    for v in sorted(g):
        if v not in index:
            visit(v)
    return out


def depths(graph: dict[str, set[str]]) -> dict[str, int]:
    """Longest import chain below each module (0: imports no core module). Acyclic graphs only."""
    top = {n: n.split("::")[0] for n in graph}
    g = {t: set() for t in top.values()}
    for n, ds in graph.items():
        g[top[n]] |= ds - {top[n]}
    memo: dict[str, int] = {}

    def depth(v: str) -> int:
        if v not in memo:
            memo[v] = 1 + max((depth(w) for w in g[v]), default=-1)
        return memo[v]

    return {v: depth(v) for v in g}


def main() -> int:
    graph = modules()
    found = cycles(graph)
    up = sorted(n for n, ds in graph.items() if FACADE in ds)
    if "--print" in sys.argv:
        d = depths(graph) if not found else {}
        for name in sorted(graph, key=lambda n: (d.get(n.split("::")[0], 0), n)):
            level = d.get(name.split("::")[0], "?")
            print(f"{name:14} depth {level!s:>2}  imports {', '.join(sorted(graph[name])) or '-'}")
        if d:
            print(f"depth of the graph: {max(d.values())}")
    for comp in found:
        print(f"cycle: {' <-> '.join(comp)} ({len(comp)} modules import each other)")
    for name in up:
        print(f"{name} imports the facade `{FACADE}`: the facade must be the top of the core")
    return 1 if found or up else 0


if __name__ == "__main__":
    sys.exit(main())
