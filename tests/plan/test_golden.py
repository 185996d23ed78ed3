"""Golden plans: one JSON per catalog recipe (auto-placed on inventories/example.yaml) and per
playbook under playbooks/.  ``UPDATE_GOLDEN=1 pytest tests/plan`` rewrites them; review the diff.

A playbook is planned against inventories/example.yaml, except playbooks/{sandbox,bench}/*.yaml: the
sandbox writes its inventory at ``fleet sandbox up``, so the harness plans them on the inventory
a 17-host sandbox would write (h1..h17 with their fake-hardware profiles and the sandbox's SKU
groups, addresses 198.18.0.11..27 -- never contacted; h16, h17 are real-pd.yaml's Ethernet-only hosts).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from launcher.model import Inventory, Plan
from launcher.plan import plan, to_jsonable
from tests.plan.test_catalog import ROOT, auto_plan, inputs, recipe_ids

GOLDEN = ROOT / "tests" / "golden" / "plan"
PREVIEW_HOSTS = 17  # not SANDBOX_HOSTS: that name sizes a session's sandbox (tests/conftest.py)


def render(p: Plan) -> str:
    return json.dumps(to_jsonable(p), indent=2, sort_keys=True) + "\n"


def compare(name: str, text: str) -> None:
    path = GOLDEN / f"{name}.json"
    if os.environ.get("UPDATE_GOLDEN") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert path.is_file(), f"{path} missing: run UPDATE_GOLDEN=1 python -m pytest tests/plan"
    assert path.read_text() == text, f"{path} differs (UPDATE_GOLDEN=1 rewrites it)"


def sandbox_inventory() -> Inventory:
    """The inventory a 17-host ``fleet sandbox up --systemd-hosts 2`` writes (slot 0), loaded like
    any other."""
    import tempfile

    from launcher.config.inventory import load_inventory
    from launcher.sandbox.inventory import preview

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "sandbox.yaml"
        path.write_text(preview(PREVIEW_HOSTS, systemd_hosts=2))
        return load_inventory(path)


def playbook_paths() -> list[Path]:
    # Dotfiles are scratch copies other tests write; they are not playbooks of the repo.
    return sorted(p for p in (ROOT / "playbooks").rglob("*.yaml") if not p.name.startswith("."))


@pytest.mark.parametrize("recipe_id", recipe_ids())
def test_recipe_golden(recipe_id: str) -> None:
    compare(recipe_id.replace("/", "__"), render(auto_plan(recipe_id)))


@pytest.mark.parametrize("path", playbook_paths(), ids=lambda p: str(p.relative_to(ROOT)))
def test_playbook_golden(path: Path) -> None:
    from launcher.config.playbook import load_playbook

    catalog, example = inputs()
    inventory = sandbox_inventory() if path.parent.name in ("sandbox", "bench") else example
    rel = path.relative_to(ROOT).with_suffix("")
    compare("__".join(rel.parts), render(plan(inventory, catalog, load_playbook(path, catalog, inventory))))


def test_no_stale_goldens() -> None:
    expected = {r.replace("/", "__") for r in recipe_ids()}
    expected |= {"__".join(p.relative_to(ROOT).with_suffix("").parts) for p in playbook_paths()}
    stale = sorted(p.stem for p in GOLDEN.glob("*.json") if p.stem not in expected)
    assert stale == []
