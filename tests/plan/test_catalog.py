"""Every catalog recipe auto-placed on inventories/example.yaml plans, and every engine, router
and Mooncake argv in those plans passes the real parsers' snapshots (launcher.engines.argcheck).

Missing catalog, inventory or snapshots make these tests FAIL: they are the proof the planner's
argv are accepted by the engines the recipes pin.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import pytest

from launcher.config.inventory import load_inventory
from launcher.config.recipes import Catalog, load_catalog
from launcher.engines.argcheck import UnknownCommand, check_argv, known_versions, split_command
from launcher.model import Inventory, Plan
from launcher.plan import auto_playbook, plan

ROOT = Path(__file__).resolve().parents[2]
CATALOG_SIZE = 55  # 54 seed entries; entry 47 names SGLang and vLLM: one recipe of each
# Programs without a parser snapshot, and why that is acceptable.
UNCHECKED = {
    "openresty": "the gateway: nginx flags, not an engine",
    "ray": "Ray node of the vLLM Ray executor",
}


@lru_cache(maxsize=1)
def inputs() -> tuple[Catalog, Inventory]:
    return load_catalog(ROOT / "recipes"), load_inventory(ROOT / "inventories" / "example.yaml")


def recipe_ids() -> list[str]:
    try:
        return list(inputs()[0].recipes)
    except Exception as err:  # reported by test_catalog_is_complete, which then fails
        return [f"<catalog failed to load: {err}>"]


def auto_plan(recipe_id: str) -> Plan:
    catalog, inventory = inputs()
    return plan(inventory, catalog, auto_playbook(catalog.get(recipe_id), inventory))


def test_catalog_is_complete() -> None:
    catalog, _ = inputs()
    assert len(catalog.recipes) == CATALOG_SIZE


@pytest.mark.parametrize("recipe_id", recipe_ids())
def test_recipe_plans_and_argv_pass_the_parsers(recipe_id: str) -> None:
    p = auto_plan(recipe_id)
    recipe = inputs()[0].get(recipe_id)
    assert p.units
    problems = []
    for u in p.units:
        try:
            engine, args = split_command(u.argv)
        except UnknownCommand:
            assert u.argv[0] in UNCHECKED, f"{u.name}: unknown program {u.argv[0]}"
            continue
        if engine in ("sglang", "vllm"):
            engine, version = recipe.engine, recipe.engine_version
        else:
            version = known_versions(engine)[-1]
        problems += [f"{u.name}: {p}" for p in check_argv(engine, version, args)]
    assert problems == []
