"""The recipe catalog: ``recipes/<family>/<variant>.yaml`` → :class:`Catalog`.

Contract: :func:`load_catalog` decodes every recipe strictly (see :mod:`launcher.config.schema`)
and checks what one file cannot check alone: ``catalog_entry`` unique per engine (an entry
naming SGLang and vLLM has one recipe of each), ``report.baseline``
naming a recipe, parallelism fitting the hardware, topology consistency and well-formed
constraints.  Every problem is an :class:`InputError` at the line it concerns.
"""

from __future__ import annotations

import dataclasses
import os
import re
import threading
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Iterator, Mapping

from launcher.config.schema import decode_as, did_you_mean, field_hints
from launcher.config.settings import lookup
from launcher.config.unitinputs import check_unit_inputs
from launcher.config.yamlpos import Map, Scalar, describe, find, parse_yaml, read_text
from launcher.engines import registry
from launcher.errors import InputError
from launcher.model import Constraint, Parallelism, Recipe, Source

ENV_DIR = "FLEET_RECIPES_DIR"
_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]*$")
SHAPE_TOPOLOGY = {"单节点": "single", "多节点 LWS": "multinode", "Prefill / Decode 分离": "pd"}


@dataclass(frozen=True, slots=True, kw_only=True)
class Catalog:
    """All recipes by id, in ``catalog_entry`` order."""

    root: str
    recipes: Mapping[str, Recipe]

    def get(self, recipe_id: str) -> Recipe:
        try:
            return self.recipes[recipe_id]
        except KeyError:
            hint = did_you_mean(recipe_id, self.recipes)
            raise InputError(None, f"unknown recipe {recipe_id!r}{hint}") from None


def default_root() -> Path:
    """$FLEET_RECIPES_DIR, else the catalog shipped as package data (``launcher/catalog`` in an
    installed wheel: pyproject maps the checkout's ``recipes/`` there), else the checkout's
    top-level ``recipes/``."""
    env = os.environ.get(ENV_DIR)
    if env:
        return Path(env)
    packaged = Path(__file__).resolve().parents[1] / "catalog"
    return packaged if packaged.is_dir() else packaged.parents[1] / "recipes"


def layers() -> tuple[Path, ...]:
    """The operator's recipe directories, layered over the catalog in this order (a recipe id
    in a later one replaces the same id before it): ``fleet --recipes DIR`` (which the CLI puts
    in ``FLEET_RECIPES``), else ``FLEET_RECIPES``, else the fleet config file's ``recipes``."""
    found = lookup("recipes")
    if found is None:
        return ()
    for d in found.values:
        if not Path(d).is_dir():
            raise InputError(None, f"{d}: recipe directory not found (from {found.origin})")
    return tuple(Path(d) for d in found.values)


def recipe_paths(root: Path | None = None) -> dict[str, Path]:
    """Recipe id -> file: ``root`` alone when given, else the catalog (:func:`default_root`)
    with the operator's :func:`layers` over it.  Nothing is parsed."""
    roots = (root,) if root is not None else (default_root(), *layers())
    paths: dict[str, Path] = {}
    for base in roots:
        if not base.is_dir():
            raise InputError(None, f"{base}: recipe directory not found")
        for family_dir in sorted(p for p in base.iterdir() if p.is_dir() and not p.name.startswith(".")):
            for path in sorted(family_dir.glob("*.yaml")):
                paths[f"{family_dir.name}/{path.stem}"] = path
    return paths


def load_catalog(root: Path | None = None) -> Catalog:
    """Load and cross-check every recipe under ``root`` (default: the catalog with the
    operator's layers over it, see :func:`recipe_paths`)."""
    base = root if root is not None else default_root()
    loaded = [load_recipe(path, path.parent.name) for path in recipe_paths(root).values()]
    by_entry: dict[tuple[int, str], Recipe] = {}
    for recipe, node in loaded:
        other = by_entry.get((recipe.catalog_entry, recipe.engine))
        if other is not None:
            raise InputError(
                _at(node, "catalog_entry"),
                f"entry {recipe.catalog_entry} is already taken by {other.id}",
                "catalog_entry",
            )
        by_entry[(recipe.catalog_entry, recipe.engine)] = recipe
    ids = {r.id for r, _ in loaded}
    for recipe, node in loaded:
        baseline = recipe.report.baseline if recipe.report else None
        if baseline is not None and baseline not in ids:
            raise InputError(
                _at(node, "report/baseline"),
                f"unknown recipe {baseline!r}{did_you_mean(baseline, ids)}",
                "report/baseline",
            )
        if baseline == recipe.id:
            raise InputError(_at(node, "report/baseline"), "a recipe cannot be its own baseline", "report/baseline")
    ordered = sorted((r for r, _ in loaded), key=lambda r: (r.catalog_entry, r.engine))
    return Catalog(root=str(base), recipes=MappingProxyType({r.id: r for r in ordered}))


class _OnDemand(Mapping[str, Recipe]):
    """Recipes by id, each file decoded and checked on first lookup.  Iterating loads them all
    (in ``catalog_entry`` order, as :class:`Catalog` promises)."""

    def __init__(self, paths: Mapping[str, Path]) -> None:
        self._paths = paths
        self._loaded: dict[str, Recipe] = {}
        self._lock = threading.Lock()

    def __getitem__(self, recipe_id: str) -> Recipe:
        path = self._paths[recipe_id]  # KeyError for an unknown id, as a Mapping should
        with self._lock:
            if recipe_id not in self._loaded:
                self._loaded[recipe_id] = load_recipe(path, path.parent.name)[0]
            return self._loaded[recipe_id]

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._paths, key=lambda rid: (self[rid].catalog_entry, self[rid].engine)))

    def __len__(self) -> int:
        return len(self._paths)


def open_catalog(root: Path | None = None) -> Catalog:
    """The catalog for deploying: each recipe file is decoded and checked (as in
    :func:`load_catalog`) only when looked up, so a command that uses one recipe parses one
    file.  The cross-recipe checks (unique ``catalog_entry``, ``report.baseline``) are
    :func:`load_catalog`'s, run by ``fleet recipes`` and the test suite."""
    base = root if root is not None else default_root()
    return Catalog(root=str(base), recipes=_OnDemand(recipe_paths(root)))


def load_recipe(path: Path, family: str) -> tuple[Recipe, Map]:
    """Decode and check one recipe file; ``id`` and ``family`` come from its path."""
    shown = _shown(path)
    variant = path.stem
    for part, what in ((family, "family directory"), (variant, "file name")):
        if not _NAME.match(part):
            raise InputError(
                Source(path=shown, line=1, col=1),
                f"{what} {part!r} should be lower-case letters, digits, '.', '_' or '-'",
            )
    text = read_text(path)
    node = parse_yaml(text, shown)
    if node is None:
        raise InputError(Source(path=shown, line=1, col=1), "file is empty")
    if not isinstance(node, Map):
        raise InputError(node.source, f"the top level should be a mapping, got {describe(node)}")
    for key in ("id", "family"):
        knode = node.key_node(key)
        if knode is not None:
            raise InputError(
                knode.source, f"{key!r} comes from the path recipes/<family>/<variant>.yaml; remove it"
            )
    check_unit_inputs(node, ("env",))
    _check_engine(node)
    recipe = decode_as(node, Recipe, given={"id": f"{family}/{variant}", "family": family})
    check_recipe(recipe, node)
    return recipe, node


def _check_engine(node: Map) -> None:
    """``engine`` names a registered engine (the decoder sees only a string)."""
    found = find(node, "engine")
    if found is None:
        return  # the decoder reports the missing key
    if not (isinstance(found, Scalar) and isinstance(found.value, str) and found.value in registry.names()):
        known = ", ".join(repr(n) for n in registry.names())
        raise InputError(found.source, f"should be one of {known}, got {describe(found)}", "engine")


def _shown(path: Path) -> str:
    """Paths in messages: relative to the working directory when below it, else absolute."""
    absolute = path.resolve()
    try:
        return str(absolute.relative_to(Path.cwd()))
    except ValueError:
        return str(absolute)


def _at(node: Map, path: str) -> Source:
    """The position of ``path`` in the recipe, else of the nearest parent that is written."""
    parts = path.split("/")
    while parts:
        found = find(node, "/".join(parts))
        if found is not None:
            return found.source
        parts.pop()
    return node.source


def check_recipe(recipe: Recipe, node: Map) -> None:
    """Cross-field rules of one recipe (see module docstring)."""
    hw = recipe.hardware
    for name in ("gpus_per_node", "nodes"):
        if getattr(hw, name) < 1:
            raise InputError(_at(node, f"hardware/{name}"), "should be at least 1", f"hardware/{name}")
    if recipe.topology == "pd":
        if recipe.pd is None:
            raise InputError(node.source, "topology 'pd' needs a 'pd' block (prefill, decode, transfer_backend)")
        for role in ("prefill", "decode"):
            spec = getattr(recipe.pd, role)
            where = f"pd/{role}"
            if spec.replicas < 1 or spec.nodes < 1:
                raise InputError(_at(node, where), "replicas and nodes should be at least 1", where)
            _check_fit(spec.parallelism, hw.gpus_per_node, spec.nodes, node, f"{where}/parallelism")
    else:
        if recipe.pd is not None:
            raise InputError(
                _at(node, "pd"), f"a 'pd' block needs topology 'pd', not {recipe.topology!r}", "pd"
            )
        if recipe.topology == "single" and hw.nodes != 1:
            raise InputError(
                _at(node, "hardware/nodes"),
                f"topology 'single' runs on one node, got nodes {hw.nodes} (use topology 'multinode')",
                "hardware/nodes",
            )
        if recipe.topology == "multinode" and hw.nodes < 2:
            raise InputError(
                _at(node, "hardware/nodes"),
                f"topology 'multinode' needs nodes >= 2, got {hw.nodes} (use topology 'single')",
                "hardware/nodes",
            )
        _check_fit(recipe.parallelism, hw.gpus_per_node, hw.nodes, node, "parallelism")
    if recipe.network == "bridge" and recipe.topology != "single":
        raise InputError(
            _at(node, "network"),
            f"network 'bridge' is for single-node recipes: a {recipe.topology} recipe's ranks and transfers need "
            "the host network",
            "network",
        )
    for i, constraint in enumerate(recipe.constraints):
        _check_constraint(constraint, f"constraints/{i}")


def _check_fit(par: Parallelism, gpus_per_node: int, nodes: int, node: Map, where: str) -> None:
    for name in ("tp", "pp", "dp", "ep", "attn_dp", "dcp"):
        if getattr(par, name) < 1:
            raise InputError(_at(node, f"{where}/{name}"), "should be at least 1", f"{where}/{name}")
    have = gpus_per_node * nodes
    if par.gpus != have:
        raise InputError(
            _at(node, where),
            f"tp*pp*dp = {par.tp}*{par.pp}*{par.dp} = {par.gpus} GPUs, but the hardware has "
            f"{gpus_per_node} per node x {nodes} node{'s' if nodes > 1 else ''} = {have}",
            where,
        )


def _check_constraint(c: Constraint, where: str) -> None:
    def bad(message: str) -> InputError:
        return InputError(c.source, f"constraint {c.id!r}: {message}", where)

    needs: dict[str, tuple[str, ...]] = {
        "arg": ("flag",),
        "arg-absent": ("flag",),
        "env": ("name", "value"),
        "min": ("field", "value"),
        "equals": ("field", "value"),
    }
    required = needs[c.kind]
    for name in required:
        if getattr(c, name) is None:
            raise bad(f"kind {c.kind!r} needs {name!r}")
    for name in ("flag", "name", "field"):
        if name not in required and getattr(c, name) is not None:
            raise bad(f"kind {c.kind!r} does not use {name!r}")
    if c.flag is not None and not c.flag.startswith("-"):
        raise bad(f"flag should start with '-', got {c.flag!r}")
    if c.kind == "env" and not isinstance(c.value, str):
        raise bad(f"an env value should be a string, got {c.value!r}")
    if c.field is not None:
        leaf = field_type(c.field)
        if leaf is None:
            raise bad(f"{c.field!r} is not a recipe field")
        if c.kind == "min" and (not isinstance(c.value, int) or leaf is not int):
            raise bad(f"kind 'min' compares integers; {c.field!r} with value {c.value!r} is not one")


def field_type(dotted: str) -> Any:
    """The type of a dotted recipe field (``parallelism.ep``, ``pd.prefill.replicas``), or None."""
    tp: Any = Recipe
    for part in dotted.split("."):
        tp = _strip_optional(tp)
        if not (dataclasses.is_dataclass(tp) and isinstance(tp, type)):
            return None
        hints = field_hints(tp)
        if part not in hints or part == "source":
            return None
        tp = hints[part]
    return _strip_optional(tp)


def _strip_optional(tp: Any) -> Any:
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    if typing.get_origin(tp) in (typing.Union, types.UnionType) and len(args) == 1:
        return args[0]
    return tp


def field_value(recipe: Recipe, dotted: str) -> object:
    """The value of a dotted recipe field; None where an optional block is absent."""
    cur: object = recipe
    for part in dotted.split("."):
        if cur is None:
            return None
        cur = getattr(cur, part)
    return cur


# ---------------------------------------------------------------------------------------------
# Coverage against the catalog seed
# ---------------------------------------------------------------------------------------------

_ENTRY = re.compile(r"^([a-z][a-z0-9-]*) · (.+)$")


@dataclass(frozen=True, slots=True, kw_only=True)
class SeedEntry:
    number: int  # 1-based
    family: str
    shape: str  # 单节点 / 多节点 LWS / Prefill / Decode 分离
    hardware: str  # the line after the header, e.g. "8 × H100"
    text: str  # the description line


def parse_seed(seed_path: Path) -> tuple[SeedEntry, ...]:
    """Entries of the catalog seed: after a title line, each starts with ``<family> · <shape>``."""
    lines = read_text(seed_path).splitlines()[1:]
    entries: list[SeedEntry] = []
    for i, line in enumerate(lines):
        m = _ENTRY.match(line.strip())
        if m:
            hw = lines[i + 1].strip() if i + 1 < len(lines) else ""
            text = lines[i + 2].strip() if i + 2 < len(lines) else ""
            entries.append(
                SeedEntry(number=len(entries) + 1, family=m.group(1), shape=m.group(2), hardware=hw, text=text)
            )
    return tuple(entries)


def _names_engine(entry: SeedEntry, engine: str) -> bool:
    return registry.get(engine).label.lower() in entry.text.lower()


def check_coverage(catalog: Catalog, seed_path: Path) -> tuple[str, ...]:
    """Problems with how the catalog covers the seed: every entry one recipe of the entry's
    family and topology (one per engine where the entry names several, as entry 47 names SGLang
    and vLLM); no recipe pointing past the seed.  Empty = complete."""
    entries = parse_seed(seed_path)
    problems: list[str] = []
    by_entry: dict[int, list[Recipe]] = {}
    for recipe in catalog.recipes.values():
        by_entry.setdefault(recipe.catalog_entry, []).append(recipe)
        if not 1 <= recipe.catalog_entry <= len(entries):
            problems.append(
                f"{recipe.id}: catalog_entry {recipe.catalog_entry} is not in the seed (1..{len(entries)})"
            )
    for entry in entries:
        found = by_entry.get(entry.number, [])
        label = f"entry {entry.number} ({entry.family} · {entry.shape})"
        if not found:
            problems.append(f"{label}: no recipe")
            continue
        engines = [r.engine for r in found]
        if len(found) > 1 and (len(set(engines)) < len(engines) or not all(_names_engine(entry, e) for e in engines)):
            problems.append(
                f"{label}: {len(found)} recipes: {', '.join(r.id for r in found)} (several only for the engines "
                "the entry names, one each)"
            )
        for recipe in found:
            if recipe.family != entry.family:
                problems.append(f"{label}: recipe {recipe.id} is family {recipe.family!r}")
            topology = SHAPE_TOPOLOGY.get(entry.shape)
            if topology is not None and recipe.topology != topology:
                problems.append(f"{label}: recipe {recipe.id} has topology {recipe.topology!r}, expected {topology!r}")
    return tuple(problems)

