"""The modules of launcher/ import each other without a cycle.

Every ``import``/``from ... import`` of a ``launcher`` module counts, at module level or inside a
function (a lazy import only hides a cycle from the interpreter, not from a reader), and
``TYPE_CHECKING`` imports too.  ``from launcher.a import b`` is an edge to ``launcher.a.b`` when
that is a module, else to ``launcher.a``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import launcher

ROOT = Path(launcher.__file__).parent


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def graph() -> dict[str, set[str]]:
    modules = _modules()
    edges: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            for t in targets:
                if t in modules and t != name:
                    edges[name].add(t)
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
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

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_the_checker_finds_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_graph_sees_lazy_and_relative_imports() -> None:
    edges = graph()
    assert "launcher.pipeline" in edges["launcher.cli.deploy"]
    assert "launcher.preflight.facts" in edges["launcher.plan"]


def test_launcher_has_no_import_cycle() -> None:
    assert cycles(graph()) == []
