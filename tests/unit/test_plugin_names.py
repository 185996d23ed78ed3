"""No engine name is written in launcher/ outside launcher/engines/, and no runtime name is
compared outside launcher/runtimes/: every engine- or runtime-specific choice is the engine's or
runtime's object (launcher/engines/base.py, launcher/runtimes/base.py), so a new one is one module.

An engine name counts wherever it is a string constant in code (a comparison, a dict key, a
default); docstrings do not count.  A runtime name counts where it is compared (``==``, ``!=``,
``in``): "docker" also names the container engine's program, which the facts, preflight's probe
containers and the docs of a flag may spell out.  launcher/sandbox/ is outside both rules: it
builds and impersonates the engines' own programs and the hosts' daemons; it does not choose
between them.  The set of runtimes is the registry's alone: no ``Literal`` lists their names
(``model.Runtime`` is a registered name the loaders check), and no host script compares them
outside a runtime's own scripts (``hostscripts/<runtime>-*.sh``, ``wait-<runtime>.sh``).
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import launcher
from launcher.engines import mooncake, router
from launcher.engines import registry as engines
from launcher.engines.argcheck import known_versions, load_snapshot
from launcher.runtimes import registry as runtimes

ROOT = Path(launcher.__file__).parent


def _trees(owners: tuple[str, ...]) -> list[tuple[str, ast.Module]]:
    out = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT)
        if rel.parts[0] not in owners:
            out.append((f"launcher/{rel}", _parsed(path)))
    return out


@functools.cache
def _parsed(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), str(path))


def written(names: frozenset[str], owners: tuple[str, ...]) -> list[str]:
    """``path:line: name`` for every string constant in ``names`` outside the ``owners`` packages."""
    found = []
    for rel, tree in _trees(owners):
        docs = {
            id(n.body[0].value)
            for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)
        }  # fmt: skip
        for n in ast.walk(tree):
            if isinstance(n, ast.Constant) and n.value in names and id(n) not in docs:
                found.append(f"{rel}:{n.lineno}: {n.value}")
    return found


def compared(names: frozenset[str], owners: tuple[str, ...]) -> list[str]:
    """``path:line: name`` for every comparison with a constant in ``names`` (a tuple or list of
    constants included) outside the ``owners`` packages."""
    found = []
    for rel, tree in _trees(owners):
        for n in ast.walk(tree):
            if isinstance(n, ast.Compare):
                for side in (n.left, *n.comparators):
                    items = side.elts if isinstance(side, (ast.Tuple, ast.List, ast.Set)) else [side]
                    for item in items:
                        if isinstance(item, ast.Constant) and item.value in names:
                            found.append(f"{rel}:{n.lineno}: {item.value}")
    return found


def test_the_checkers_see_a_name() -> None:
    assert written(frozenset({"router_metrics"}), ("engines", "sandbox"))  # plan.py writes it
    assert compared(frozenset({"prefill"}), ("engines", "sandbox"))  # plan.py compares roles


def test_no_engine_name_outside_engines() -> None:
    assert written(frozenset(engines.names()), ("engines", "sandbox")) == []


def test_no_runtime_name_compared_outside_runtimes() -> None:
    assert compared(frozenset(runtimes.names()), ("runtimes", "sandbox")) == []


def literals(names: frozenset[str], owners: tuple[str, ...]) -> list[str]:
    """``path:line: name`` for every ``Literal[...]`` that lists a name in ``names`` outside the
    ``owners`` packages."""
    found = []
    for rel, tree in _trees(owners):
        for n in ast.walk(tree):
            if isinstance(n, ast.Subscript) and getattr(n.value, "id", getattr(n.value, "attr", None)) == "Literal":
                found += [f"{rel}:{n.lineno}: {c.value}" for c in ast.walk(n.slice)
                          if isinstance(c, ast.Constant) and c.value in names]  # fmt: skip
    return found


def script_comparisons(names: frozenset[str]) -> list[str]:
    """``script:line: name`` for every shell comparison with (``= name``, ``!= name``) or case
    pattern of (``name)``) a name in ``names``, in the host scripts that are not a runtime's own."""
    words = "|".join(map(re.escape, sorted(names)))
    pattern = re.compile(rf"""!?=\s*["']?({words})["']?(?=[\s;\]]|$)|^\s*["']?({words})["']?\)""")
    found = []
    for path in sorted((ROOT / "hostscripts").glob("*.sh")):
        if any(path.name.startswith(f"{n}-") or path.name == f"wait-{n}.sh" for n in names):
            continue
        for i, line in enumerate(path.read_text().splitlines(), 1):
            found += [f"hostscripts/{path.name}:{i}: {m.group(1) or m.group(2)}" for m in pattern.finditer(line)]
    return found


def test_the_script_and_literal_checkers_see_a_name() -> None:
    assert literals(frozenset({"roce"}), ("engines", "sandbox"))  # model.Fabric
    assert script_comparisons(frozenset({"curl"}))  # wait.sh: case $tool in curl) ...


def test_no_runtime_name_in_a_literal_or_compared_in_a_host_script() -> None:
    assert literals(frozenset(runtimes.names()), ("runtimes", "sandbox")) == []
    assert script_comparisons(frozenset(runtimes.names())) == []


# What fleet knows of a router program (its flags, its name, its PD worker API, its service
# discovery) is its launcher/engines/router.Program's; the watch and the k8s export ask it.
ROUTER_USERS = ("watch", "export")


def _others(*users: str) -> tuple[str, ...]:
    """Every package and top-level module of launcher/ but ``users``: :func:`written`'s owners,
    to look in ``users`` only."""
    return tuple(sorted({p.name for p in ROOT.iterdir() if p.is_dir() or p.suffix == ".py"} - set(users)))


def snapshot_flags(programs: tuple[str, ...]) -> frozenset[str]:
    """Every flag of every recorded version of ``programs`` (their option snapshots,
    launcher/engines/options/)."""
    return frozenset(flag for name in programs for version in known_versions(name)
                     for flag in load_snapshot(name, version).by_string)  # fmt: skip


def router_flags() -> frozenset[str]:
    return snapshot_flags(tuple(p.name for p in router.programs()))


def mentioned(words: tuple[str, ...], owners: tuple[str, ...]) -> list[str]:
    """``path:line: word`` for every string constant outside docstrings (f-string parts included)
    that contains one of ``words``, outside the ``owners`` packages."""
    found = []
    for rel, tree in _trees(owners):
        docs = _docstrings(tree)
        for n in ast.walk(tree):
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs:
                found += [f"{rel}:{n.lineno}: {w}" for w in words if w in n.value]
    return found


def _docstrings(tree: ast.Module) -> set[int]:
    return {
        id(n.body[0].value)
        for n in ast.walk(tree)
        if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)
    }  # fmt: skip


def program_names_used(owners: tuple[str, ...]) -> list[str]:
    """``path:line: name`` for every use (import, name, attribute) of a name of
    launcher/engines/router.py that is one program's (its entry or argv builders: the names
    that start with a registered program's first word), outside the ``owners`` packages."""
    prefixes = tuple(p.name.split("-")[0].lower() for p in router.programs())
    own = {n for n in vars(router) if n.lower().startswith(prefixes)}
    found = []
    for rel, tree in _trees(owners):
        for n in ast.walk(tree):
            name = n.id if isinstance(n, ast.Name) else n.attr if isinstance(n, ast.Attribute) else n.name if isinstance(n, ast.alias) else None
            if name in own:
                found.append(f"{rel}:{getattr(n, 'lineno', 0)}: {name}")
    return found


def test_the_router_checkers_see_router_knowledge() -> None:
    assert {"--prefill", "--decode", "--worker-urls", "--service-discovery", "--selector"} <= router_flags()
    engines_only = _others("engines")
    assert written(router_flags(), engines_only)  # router.py builds the command lines
    assert mentioned(tuple(p.name for p in router.programs()), ("sandbox",))  # observe/names.py's kinds
    assert program_names_used(_others("plan.py", "engines"))  # the engines' router_argv


def test_no_router_program_knowledge_in_the_watch_or_the_export() -> None:
    others = _others(*ROUTER_USERS)
    words = tuple(sorted({p.name for p in router.programs()} | {w for p in router.programs() for w in p.entry[-1:]}
                         | {p.bootstrap_annotation for p in router.programs()}))  # fmt: skip
    assert written(router_flags(), others) == []
    assert mentioned(words, others) == []
    assert program_names_used(others) == []


def test_no_engine_flag_in_the_watch_or_the_export() -> None:
    """The k8s export reads an engine's rank and RDMA-device flags from the engine
    (``Engine.rank_flags``, ``Engine.ib_device_flags``)."""
    engine_flags = snapshot_flags(engines.names())
    assert {"--node-rank", "--disaggregation-ib-device"} <= engine_flags
    assert written(engine_flags, _others("engines"))  # the engines write their own
    assert written(engine_flags, _others(*ROUTER_USERS)) == []


def test_no_health_path_written_in_the_planner() -> None:
    """The health paths are the engines', the router programs', the gateway's and the Mooncake
    master's (launcher/engines/); the planner asks them."""
    paths = frozenset({e.health_path for e in engines.engines()} | {p.health_path for p in router.programs()}
                      | {p.ready_path for p in router.programs() if p.ready_path is not None}
                      | {router.GATEWAY_HEALTH_PATH, mooncake.MASTER_HEALTH_PATH})  # fmt: skip
    assert mentioned(tuple(sorted(paths)), _others("plan.py")) == []


def test_health_paths_are_one_segment() -> None:
    """Readers take a unit's base URL as its health URL without the last segment."""
    paths = [e.health_path for e in engines.engines()] + [p.health_path for p in router.programs()]
    paths += [p.ready_path for p in router.programs() if p.ready_path is not None]
    assert all(re.fullmatch(r"/[^/]+", p) for p in [*paths, router.GATEWAY_HEALTH_PATH, mooncake.MASTER_HEALTH_PATH])
