"""The preflight rules, one family per module, and the order they run in.

Contract: a host rule takes a :class:`~launcher.preflight.rules.base.HostCase` (one host with its
planned units), a plan rule and a probe rule a :class:`~launcher.preflight.rules.base.PlanCase`
(probe rules only once the probes ran), a unit rule a ``PlanCase`` and one unit; each returns its
:class:`~launcher.preflight.rules.base.Check` verdicts (none when it does not apply) and never
does I/O.  :func:`launcher.preflight.checks.evaluate` runs :data:`HOST` for each host in
inventory order, then :data:`PLAN`, then :data:`PROBE` (:data:`UNIT` for each planned unit in
its place).  A new rule: its module here, its place in these tuples, its test.
"""

from __future__ import annotations

from typing import Callable

from launcher.preflight.rules import (
    access, accelerators, clock, containers, disks, fabric, gid, groups, images, memory, ports, probes, reach, weights,
)  # fmt: skip
from launcher.preflight.rules.base import Check, HostCase, PlanCase

HostRule = Callable[[HostCase], list[Check]]
PlanRule = Callable[[PlanCase], list[Check]]

HOST: tuple[HostRule, ...] = (
    access.host, accelerators.host, containers.host, fabric.host, disks.host, fabric.measured, memory.host, gid.host,
)  # fmt: skip
PLAN: tuple[PlanRule, ...] = (groups.plan,)
UNIT = (ports.unit, weights.unit, images.unit)


def each_unit(case: PlanCase) -> list[Check]:
    """:data:`UNIT` for every planned unit, in plan order."""
    return [c for u in case.plan.units for rule in UNIT for c in rule(case, u)]


PROBE: tuple[PlanRule, ...] = (probes.failed, each_unit, images.programs, reach.probe, weights.consistency, clock.probe)
