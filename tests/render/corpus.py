"""Every plan the repo ships: each catalog recipe auto-placed on inventories/example.yaml and each
playbook under playbooks/ (sandbox playbooks on the sandbox hosts), built exactly as the plan
goldens build them.  Missing planner code is an import error here, so these tests fail, never
skip."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from launcher.config.playbook import load_playbook
from launcher.model import Plan
from launcher.plan import plan
from tests.plan.test_catalog import ROOT, auto_plan, inputs, recipe_ids
from tests.plan.test_golden import playbook_paths, sandbox_inventory


def plan_ids() -> list[str]:
    ids = [r.replace("/", "__") for r in recipe_ids()]
    ids += ["__".join(p.relative_to(ROOT).with_suffix("").parts) for p in playbook_paths()]
    return ids


@lru_cache(maxsize=None)
def plan_for(plan_id: str) -> Plan:
    """One shipped plan by id (recipe ``family__variant`` or ``playbooks__...`` path)."""
    if not plan_id.startswith("playbooks__"):
        return auto_plan(plan_id.replace("__", "/"))
    catalog, example = inputs()
    path = ROOT.joinpath(*plan_id.split("__")).with_suffix(".yaml")
    inventory = sandbox_inventory() if path.parent.name in ("sandbox", "bench") else example
    return plan(inventory, catalog, load_playbook(Path(path), catalog, inventory))
