"""Plan rule family "mtu" (per group): every rank of a data-plane group has the same MTU."""

from __future__ import annotations

from typing import Mapping

from launcher.facts.host import HostFacts
from launcher.model import Inventory, Plan, Unit
from launcher.preflight.rules.base import Check, PlanCase, data_plane


def plan(case: PlanCase) -> list[Check]:
    return _group_checks(case.plan, case.inventory, case.facts)


def _group_checks(plan: Plan, inventory: Inventory, facts: Mapping[str, HostFacts]) -> list[Check]:
    out: list[Check] = []
    groups: dict[str, list[Unit]] = {}
    for u in plan.units:
        if data_plane(u):
            groups.setdefault(u.group, []).append(u)
    for g, units in sorted(groups.items()):
        mtus: dict[str, int] = {}
        for u in units:
            spec = inventory.host(u.host).spec
            hf = facts.get(u.host)
            iface = hf.interface(spec.nccl_ifname) if hf and spec.nccl_ifname else None
            if iface is not None:
                mtus[u.host] = iface.mtu
        if len(set(mtus.values())) > 1:
            detail = ", ".join(f"{h}={m}" for h, m in sorted(mtus.items()))
            out.append(Check(host=units[0].host, unit=g, name="mtu", status="fail",
                             message=f"MTU differs across the ranks of {g}: {detail}",
                             fix="set the same MTU on every rank's data-plane NIC"))
        elif len(mtus) > 1:
            out.append(Check(host=units[0].host, unit=g, name="mtu", status="pass",
                             message=f"MTU {next(iter(mtus.values()))} on every rank"))
    return out
