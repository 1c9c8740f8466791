"""The module graph of the Rust core (src/, without the Python bindings): who imports whom.

    python tools/module_graph.py            # checks: no cycle, nothing imports the facade
    python tools/module_graph.py --print    # also prints each module's imports and its depth

The nodes are the core's modules, files and folders alike: `log`, `storage::record`, `tier`
(tier/mod.rs), `tier::remote::fetch`. A module's imports are the `crate::...` paths in its source
(`use` lines and inline paths, including `use crate::{a, b::c}` groups), each resolved to the
deepest module it names; a name a folder's mod.rs re-exports (`pub(crate) use
self::shipper::start_shipper;`) resolves to the module that defines it (to each one, when `#[cfg]`
picks between two). `lib.rs` (the crate root), `python/` and `jvm/` (bindings, above the core)
are left out.
Checks:
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
_PATH = re.compile(r"\b(crate|super|self)((?:::[A-Za-z_][A-Za-z0-9_]*)+)")
_GROUP_REL = re.compile(r"\b(super|self)::\{([^}]*)\}", re.S)
# A `#[cfg(test)] mod tests { ... }` block to the end of the file (its `super::*` is the file).
_TESTS = re.compile(r"#\[cfg\(test\)\]\s*mod\s+\w+\s*\{.*", re.S)
_REEXPORT = re.compile(
    r"pub(?:\([a-z]+\))?\s+use\s+(?!crate::|super::)(?:self::)?([a-z_][a-z0-9_]*)::"
    r"(\{[^}]*\}|[A-Za-z_]\w*(?:\s+as\s+\w+)?)"
)
_COMMENT = re.compile(r"//[^\n]*")


def _name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "mod":
        parts.pop()
    return "::".join(parts)


def _sources() -> dict[str, list[Path]]:
    out: dict[str, list[Path]] = {}
    for p in sorted(SRC.rglob("*.rs")):
        rel = p.relative_to(SRC)
        if rel.parts[0] in ("python", "jvm") or rel == Path("lib.rs"):
            continue
        out.setdefault(_name(p), []).append(p)
    return out


def _reexports(files: dict[str, list[Path]]) -> dict[str, dict[str, set[str]]]:
    """For each folder module, the names its mod.rs re-exports, each with its defining module."""
    out: dict[str, dict[str, set[str]]] = {}
    for name, paths in files.items():
        for p in paths:
            if p.name != "mod.rs" or _name(p) != name:
                continue
            for child, items in _REEXPORT.findall(_COMMENT.sub("", p.read_text())):
                for item in items.strip("{}").split(","):
                    item = item.strip().split(" as ")[-1].strip()
                    if item:
                        out.setdefault(name, {}).setdefault(item, set()).add(f"{name}::{child}")
    return out


def modules() -> dict[str, set[str]]:
    files = _sources()
    reexports = _reexports(files)

    def resolve(segments: list[str]) -> set[str]:
        for n in range(len(segments), 0, -1):
            name = "::".join(segments[:n])
            if name in files:
                if n < len(segments) and segments[n] in reexports.get(name, {}):
                    return reexports[name][segments[n]]
                return {name}
        return set()

    def base(name: str, head: str) -> list[str]:
        """The module path `head` (crate, super, self) stands for in module `name`."""
        own = name.split("::")
        return {"crate": [], "self": own, "super": own[:-1]}[head]

    graph: dict[str, set[str]] = {}
    for name, paths in files.items():
        deps: set[str] = set()
        for p in paths:
            # A folder's re-exports are not its own imports: a name imported through them
            # resolves to the child that defines it.
            text = _REEXPORT.sub("", _TESTS.sub("", _COMMENT.sub("", p.read_text())))
            for group in _GROUP.findall(text):
                for item in group.split(","):
                    segs = [s.strip() for s in item.split(" as ")[0].split("::") if s.strip()]
                    deps |= resolve(segs)
            for head, group in _GROUP_REL.findall(text):
                for item in group.split(","):
                    segs = [s.strip() for s in item.split(" as ")[0].split("::") if s.strip()]
                    if segs and segs[0] != "self":
                        deps |= resolve(base(name, head) + segs)
            for head, path in _PATH.findall(text):
                deps |= resolve(base(name, head) + path.strip(":").split("::"))
        graph[name] = {d for d in deps if d != name and d in files}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
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
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def depths(graph: dict[str, set[str]]) -> dict[str, int]:
    """Longest import chain below each module (0: imports no core module). Acyclic graphs only."""
    memo: dict[str, int] = {}

    def depth(v: str) -> int:
        if v not in memo:
            memo[v] = 1 + max((depth(w) for w in graph[v]), default=-1)
        return memo[v]

    return {v: depth(v) for v in graph}


def main() -> int:
    graph = modules()
    found = cycles(graph)
    up = sorted(n for n, ds in graph.items() if FACADE in ds)
    if "--print" in sys.argv:
        d = depths(graph) if not found else {}
        for name in sorted(graph, key=lambda n: (d.get(n, 0), n)):
            level = d.get(name, "?")
            print(f"{name:24} depth {level!s:>2}  imports {', '.join(sorted(graph[name])) or '-'}")
        if d:
            print(f"depth of the graph: {max(d.values())}")
    for comp in found:
        print(f"cycle: {' <-> '.join(comp)} ({len(comp)} modules import each other)")
    for name in up:
        print(f"{name} imports the facade `{FACADE}`: the facade must be the top of the core")
    return 1 if found or up else 0


if __name__ == "__main__":
    sys.exit(main())
