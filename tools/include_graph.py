#!/usr/bin/env python3
"""Prints the include graph of csrc/ by unit and fails (exit 1) on a cycle.

A unit is a header with its .cpp (csrc/live/session/session.h and .cpp are one unit): a cycle
between units is a cycle even when no single file includes itself, because the two halves of a
unit are read together.
"""
import re
import sys
from pathlib import Path

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def units(csrc: Path) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for f in sorted(csrc.rglob("*")):
        if f.suffix not in (".h", ".cpp", ".in"):
            continue
        rel = f.relative_to(csrc).as_posix()
        unit = rel.rsplit(".", 2 if rel.endswith(".cpp.in") else 1)[0]
        deps = graph.setdefault(unit, set())
        for inc in INCLUDE.findall(f.read_text(encoding="utf-8")):
            if (csrc / inc).exists():
                target = inc.rsplit(".", 1)[0]
                if target != unit:
                    deps.add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one unit (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(u: str) -> None:
        index[u] = low[u] = len(index)
        stack.append(u)
        on_stack.add(u)
        for v in sorted(graph.get(u, ())):
            if v not in index:
                visit(v)
                low[u] = min(low[u], low[v])
            elif v in on_stack:
                low[u] = min(low[u], index[v])
        if low[u] == index[u]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == u:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for u in sorted(graph):
        if u not in index:
            visit(u)
    return found


def main() -> int:
    csrc = Path(__file__).resolve().parent.parent / "csrc"
    graph = units(csrc)
    quiet = "--quiet" in sys.argv
    if not quiet:
        for u in sorted(graph):
            print(f"{u} -> {', '.join(sorted(graph[u])) or '-'}")
    found = cycles(graph)
    for component in found:
        print("include cycle among: " + ", ".join(component), file=sys.stderr)
    if found:
        return 1
    print(f"include graph of csrc/: {len(graph)} units, no cycle")
    return 0


if __name__ == "__main__":
    sys.exit(main())
