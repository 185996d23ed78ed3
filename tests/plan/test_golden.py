"""Golden plans: one JSON per catalog recipe (auto-placed on inventories/example.yaml) and per
playbook under playbooks/.  ``UPDATE_GOLDEN=1 pytest tests/plan`` rewrites them; review the diff.

A playbook is planned against ``inventories/<its directory>.yaml`` when that exists (e.g.
playbooks/sandbox/*.yaml -> inventories/sandbox.yaml), else against inventories/example.yaml.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from launcher.config.inventory import load_inventory
from launcher.model import Plan
from launcher.plan import plan, to_jsonable
from tests.plan.test_catalog import ROOT, auto_plan, inputs, recipe_ids

GOLDEN = ROOT / "tests" / "golden" / "plan"


def render(p: Plan) -> str:
    return json.dumps(to_jsonable(p), indent=2, sort_keys=True) + "\n"


def compare(name: str, text: str) -> None:
    path = GOLDEN / f"{name}.json"
    if os.environ.get("UPDATE_GOLDEN") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert path.is_file(), f"{path} missing: run UPDATE_GOLDEN=1 python -m pytest tests/plan"
    assert path.read_text() == text, f"{path} differs (UPDATE_GOLDEN=1 rewrites it)"


def playbook_paths() -> list[Path]:
    return sorted((ROOT / "playbooks").rglob("*.yaml"))


@pytest.mark.parametrize("recipe_id", recipe_ids())
def test_recipe_golden(recipe_id: str) -> None:
    compare(recipe_id.replace("/", "__"), render(auto_plan(recipe_id)))


@pytest.mark.parametrize("path", playbook_paths(), ids=lambda p: str(p.relative_to(ROOT)))
def test_playbook_golden(path: Path) -> None:
    from launcher.config.playbook import load_playbook

    catalog, example = inputs()
    own = ROOT / "inventories" / f"{path.parent.name}.yaml"
    inventory = load_inventory(own) if own.is_file() else example
    rel = path.relative_to(ROOT).with_suffix("")
    compare("__".join(rel.parts), render(plan(inventory, catalog, load_playbook(path, catalog, inventory))))


def test_no_stale_goldens() -> None:
    expected = {r.replace("/", "__") for r in recipe_ids()}
    expected |= {"__".join(p.relative_to(ROOT).with_suffix("").parts) for p in playbook_paths()}
    stale = sorted(p.stem for p in GOLDEN.glob("*.json") if p.stem not in expected)
    assert stale == []
