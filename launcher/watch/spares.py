"""Spare hosts (``placement.<role>.spares``): where the watch places a group whose host stays
unreachable, planned by the planner ``fleet up`` uses.

The planner takes a role's hosts in inventory order, so a playbook with the lost host merely
replaced would shift every later group onto other hosts.  :func:`moved` plans on a view of the
inventory where each spare stands in the place of the host it replaces (and the lost host is
gone): every other group keeps its hosts and ranks, the moved group keeps its name and rank
order, and the spare must hold its ranks by the same rules as any host (facts, GPUs, fabric).

Stateless: where a group lives now is read from the hosts.  A unit of the deployment found on a
spare (its manifest) and not newer on its planned host means the group was placed there:
:func:`placed` turns what the spares hold into the host substitution the target is planned with.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable, Mapping

from launcher.config.patterns import select
from launcher.deploy.manifest import Manifest
from launcher.deploy.session import Target
from launcher.model import Host
from launcher.pipeline import Inputs

Subst = Mapping[str, str]  # lost host -> the spare standing in for it


def moved(inputs: Inputs, subst: Subst) -> Inputs:
    """``inputs`` with each host of ``subst`` replaced by its spare, in the placement and in the
    inventory order the planner follows."""
    if not subst:
        return inputs
    inv = inputs.inventory
    by_name = {h.name: h for h in inv.hosts}
    spares = set(subst.values())
    order = tuple(by_name[subst.get(h.name, h.name)] for h in inv.hosts if h.name not in spares)
    placement = {role: replace(p, hosts=":".join(subst.get(h.name, h.name) for h in select(inv, p.hosts)))
                 for role, p in inputs.playbook.placement.items()}  # fmt: skip
    return replace(inputs, inventory=replace(inv, hosts=order), playbook=replace(inputs.playbook, placement=placement))


def placed(planned: Mapping[str, str], spares: Mapping[str, Mapping[str, Manifest]],
           home: Mapping[str, Mapping[str, Manifest] | None]) -> dict[str, str]:  # fmt: skip
    """The substitution the hosts show.  ``planned``: unit -> its host in the playbook's plan;
    ``spares``: spare host -> this deployment's manifests there; ``home``: planned host -> its
    manifests (None: it did not answer).  A unit on a spare counts unless its planned host holds
    a newer deployment of it (the operator's ``fleet up`` after the host came back)."""
    out: dict[str, str] = {}
    for spare, manifests in sorted(spares.items()):
        for name, m in sorted(manifests.items()):
            host = planned.get(name)
            if host is None or host in out:
                continue
            there = home.get(host)
            mine = None if there is None else there.get(name)
            if mine is None or mine.deployed_at < m.deployed_at:
                out[host] = spare
    return out


@dataclass(frozen=True, slots=True, kw_only=True)
class Spares:
    """A deployment's spare hosts and its plan with some of them standing in."""

    by_role: Mapping[str, tuple[Host, ...]]  # role -> its spare hosts, inventory order
    replan: Callable[[Subst], Target]  # the target planned with that substitution (as `up` plans)
    plans: dict[tuple[tuple[str, str], ...], Target] = field(default_factory=dict, compare=False)

    @classmethod
    def of(cls, inputs: Inputs, target: Callable[[Inputs], Target]) -> Spares | None:
        """None when the playbook names no spares; ``target``: how the caller plans inputs."""
        placement = inputs.playbook.placement
        by_role: dict[str, tuple[Host, ...]] = {
            role: tuple(select(inputs.inventory, p.spares)) for role, p in placement.items() if p.spares is not None
        }
        if not by_role:
            return None
        return cls(by_role=by_role, replan=lambda subst: target(moved(inputs, subst)))

    @property
    def hosts(self) -> tuple[Host, ...]:
        return tuple({h.name: h for hs in self.by_role.values() for h in hs}.values())

    def target(self, subst: Subst) -> Target:
        """The target with ``subst`` (planned once per substitution); raises the planner's
        :class:`~launcher.errors.FleetError` when the spares cannot hold what stands on them."""
        key = tuple(sorted(subst.items()))
        if key not in self.plans:
            self.plans[key] = self.replan(subst)
        return self.plans[key]
