"""The modules of launcher/ import each other without a cycle; its packages (and top-level
modules) neither, and each imports only its own layer or those below (docs/design.md, "Layers").

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
    assert "launcher.facts.host" in edges["launcher.plan"]


def test_launcher_has_no_import_cycle() -> None:
    assert cycles(graph()) == []


# docs/design.md, "Layers": lowest first; a package may import its own layer and those below.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("model", "errors", "output", "quoting", "hostscripts", "history", "recap", "addresses", "stephook"),
    ("execute", "remote", "hosthttp"),
    ("engines", "runtimes", "facts", "observe"),
    ("config", "limit", "network", "constraints", "plancheck"),
    ("plan", "render"),
    ("pipeline", "deploy", "weights", "sandbox"),
    ("preflight", "rolling", "watch", "export", "bench"),
    ("flows",),
    ("cli",),
)
# Package edges known and not yet undone (the test fails once an edge is gone, so its entry goes
# with it).
KNOWN: set[tuple[str, str]] = set()


def package_of(module: str) -> str:
    """``launcher.deploy.session`` -> ``launcher.deploy``; a top-level module is its own."""
    return ".".join(module.split(".")[:2])


def package_graph(edges: dict[str, set[str]]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for a, targets in edges.items():
        pa = package_of(a)
        out.setdefault(pa, set())
        for b in targets:
            if package_of(b) != pa:
                out[pa].add(package_of(b))
    return out


def test_package_graph_names_packages() -> None:
    assert "launcher.facts" in package_graph(graph())["launcher.plan"]


def test_launcher_packages_have_no_import_loop() -> None:
    packages = package_graph(graph())
    for a, b in KNOWN:
        assert b in packages[a], f"{a} no longer imports {b}: drop it from KNOWN"
        packages[a].discard(b)
    assert cycles(packages) == []


def test_every_package_imports_its_layer_or_below() -> None:
    layer = {f"launcher.{name}": i for i, names in enumerate(LAYERS) for name in names}
    packages = package_graph(graph())
    assert sorted(set(packages) - set(layer) - {"launcher"}) == [], "a package without a layer: add it to LAYERS"
    upward = sorted(f"{a} -> {b}" for a, targets in packages.items() if a in layer
                    for b in targets if layer[b] > layer[a] and (a, b) not in KNOWN)  # fmt: skip
    assert upward == []
