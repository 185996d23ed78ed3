"""The weights a deployment's units read, as ``fleet weights stage|verify|warm`` and ``fleet up
--warm`` work on them.

Contract: :func:`deployment_needs` plans ``inputs`` (through the pipeline, unless a plan is
given: e.g. made with the facts preflight just gathered) and returns its model needs; with
``limit`` (``--limit``) only the paths on its hosts (one host of a group may be staged alone).
"""

from __future__ import annotations

from dataclasses import replace

from launcher.limit import limit_hosts
from launcher.model import Plan
from launcher.pipeline import Inputs, planned
from launcher.weights.needs import ModelNeed, model_needs


def deployment_needs(inputs: Inputs, the_plan: Plan | None = None, limit: str | None = None) -> tuple[ModelNeed, ...]:
    the_plan = the_plan or planned(inputs)
    needs = model_needs(the_plan, inputs.inventory, inputs.catalog.get(inputs.playbook.recipe))
    if limit is None:
        return needs
    readers = {h for n in needs for h, _ in n.paths}
    keep = {h.name for h in limit_hosts(inputs.inventory, [h for h in inputs.inventory.hosts if h.name in readers],
                                        limit, what=f"deployment {the_plan.deployment} that read weights")}  # fmt: skip
    narrowed = (replace(n, paths=tuple((h, p) for h, p in n.paths if h in keep)) for n in needs)
    return tuple(n for n in narrowed if n.paths)
