"""Which inventory hosts and groups can run a recipe, and why the others cannot.

Contract: pure (no I/O).  A host fits when its SKU is one the recipe accepts, it has at least
``gpus_per_node`` GPUs with enough memory each, and — for multi-node and PD recipes — an RDMA
fabric (the fabric the figures were measured on, when the recipe names one and a host's differs,
is a note, not a reason).  A group fits when it holds enough fitting hosts of one SKU and one fabric for a whole
deployment (multinode: ``nodes``; PD: every prefill and decode instance).  The planner decides
the actual placement; this answers "where could it go?" for an operator.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Mapping

from launcher.model import GpuSku, Host, Inventory, Recipe

# Usual memory per card (GiB) when a host does not set gpu_memory_gib.  RTX-6000D: the catalog's
# own vLLM numbers imply ~84 GB cards (see shared/reference/models.md), not the 96 GB RTX PRO 6000.
SKU_MEMORY_GIB: Mapping[GpuSku, int] = {
    "H100": 80,
    "H800": 80,
    "B300": 288,
    "A100": 80,
    "RTX-6000D": 84,
    "Ascend-910B3": 64,
}


@dataclass(frozen=True, slots=True, kw_only=True)
class HostFit:
    host: str
    fits: bool
    reasons: tuple[str, ...]  # why not; empty when it fits
    notes: tuple[str, ...] = ()  # differences from where the catalog's figures were measured


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupFit:
    group: str
    fits: bool
    hosts: tuple[str, ...]  # the fitting hosts of the group, inventory order
    reason: str  # why not; "" when it fits


@dataclass(frozen=True, slots=True, kw_only=True)
class FitReport:
    recipe: str
    nodes_needed: int  # hosts one whole deployment occupies
    hosts: tuple[HostFit, ...]
    groups: tuple[GroupFit, ...]


def nodes_needed(recipe: Recipe) -> int:
    if recipe.pd is not None:
        return sum(r.replicas * r.nodes for r in (recipe.pd.prefill, recipe.pd.decode))
    return recipe.hardware.nodes


def needs_fabric(recipe: Recipe) -> bool:
    return recipe.topology != "single"


def host_reasons(recipe: Recipe, host: Host) -> tuple[str, ...]:
    hw, spec = recipe.hardware, host.spec
    reasons: list[str] = []
    if spec.gpu_model is None:
        reasons.append("no gpu_model set")
    elif spec.gpu_model not in hw.skus:
        reasons.append(f"GPU {spec.gpu_model}, the recipe needs {' or '.join(hw.skus)}")
    if spec.gpu_count < hw.gpus_per_node:
        reasons.append(f"{spec.gpu_count} GPUs, the recipe needs {hw.gpus_per_node} per node")
    if hw.min_gpu_memory_gib is not None and spec.gpu_model is not None:
        memory = spec.gpu_memory_gib or SKU_MEMORY_GIB[spec.gpu_model]
        if memory < hw.min_gpu_memory_gib:
            reasons.append(f"{memory} GiB per GPU, the recipe needs {hw.min_gpu_memory_gib}")
    if needs_fabric(recipe) and spec.fabric == "none":
        reasons.append(f"no RDMA fabric (a {recipe.topology} recipe needs ib or roce)")
    return tuple(reasons)


def host_notes(recipe: Recipe, host: Host) -> tuple[str, ...]:
    """What does not stop the host but makes the catalog's figures not carry over: an RDMA fabric
    other than the one they were measured on."""
    measured, have = recipe.hardware.fabric, host.spec.fabric
    if measured is None or have == "none" or have == measured:
        return ()
    return (f"fabric {have}, the catalog's figures were measured over {measured}",)


def fit(recipe: Recipe, inventory: Inventory) -> FitReport:
    host_fits = tuple(
        HostFit(host=h.name, fits=not (r := host_reasons(recipe, h)), reasons=r, notes=host_notes(recipe, h))
        for h in inventory.hosts
    )
    fitting = {hf.host for hf in host_fits if hf.fits}
    need = nodes_needed(recipe)
    groups: list[GroupFit] = []
    for name, group in inventory.groups.items():
        if not group.hosts:
            continue
        ok_hosts = tuple(h for h in group.hosts if h in fitting)
        kinds = Counter((inventory.host(h).spec.gpu_model, inventory.host(h).spec.fabric) for h in ok_hosts)
        best = max(kinds.values(), default=0)
        if best >= need:
            reason = ""
        elif not ok_hosts:
            reason = "no host fits"
        elif len(kinds) > 1 and len(ok_hosts) >= need:
            reason = f"{len(ok_hosts)} hosts fit but at most {best} share one SKU and fabric; {need} needed"
        else:
            reason = f"{len(ok_hosts)} host{'s' if len(ok_hosts) > 1 else ''} fit{'s' if len(ok_hosts) == 1 else ''}, {need} needed"
        groups.append(GroupFit(group=name, fits=not reason, hosts=ok_hosts, reason=reason))
    return FitReport(recipe=recipe.id, nodes_needed=need, hosts=host_fits, groups=tuple(groups))
