"""One pipeline: inputs -> plan -> rendered files -> the hosts a deployment claims.

Every command that works on a deployment (``fleet plan/render/up/down/status/logs/restart/
rollback/preflight/collect``, the demo, the PD cohort switch, bench tools) loads it here, so they
all plan with the same facts and claim the same hosts.

- :func:`load_inputs`: inventory, catalog (opened on demand: one recipe file parsed per recipe
  used) and a playbook file, or a recipe id placed by :func:`launcher.plan.auto_playbook`.
- :func:`claimed_hosts`: THE rule for which hosts a deployment claims (locks, surveys, tears down,
  gathers facts from and collects from): every host a placement pattern of the playbook matches,
  its spare hosts (``placement.<role>.spares``), plus every host the plan puts a unit on, in
  inventory order.  Placement hosts count even when the plan leaves them empty, so units dropped
  from the plan are still found and removed there; spares count because ``fleet watch`` may have
  placed a group on one (its manifests there say so: :mod:`launcher.watch.where`).
- :func:`load_deployment` / :func:`deployment`: a :class:`Deployment` (plan, rendered files,
  desired units, claimed hosts, HTTP endpoints).  Planned with the facts cached by the last
  ``fleet facts`` / preflight unless the caller passes the plan it made with fresh facts.
- :func:`target_of` / :func:`load_target`: the deploy layer's :class:`Target`, optionally
  narrowed to a ``--limit`` pattern.

Errors are :class:`~launcher.errors.FleetError`\\ s naming the file and line (bad input) before
any host is contacted; nothing here talks to a host.
"""

from __future__ import annotations

import dataclasses
import logging
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Mapping, Sequence

from launcher import plancheck
from launcher.config.inventory_sources import InventoryRef, as_sources, load_sources
from launcher.config.patterns import select
from launcher.config.recipes import Catalog, open_catalog
from launcher.errors import PlanError
from launcher.limit import limit_hosts, refuse_split
from launcher.model import Host, Inventory, Plan, Playbook, Runtime
from launcher.plan import auto_playbook, deployment_name, plan
from launcher.facts import cache as facts_cache
from launcher.facts.host import HostFacts

_log = logging.getLogger("fleet.plan")

if TYPE_CHECKING:
    from launcher.deploy.desired import Desired
    from launcher.deploy.session import Target
    from launcher.render import RenderedPlan

# render (jinja2) and the deploy layer (paramiko) are imported by the functions that need them:
# fleet plan, which needs neither, starts without them.


@dataclass(frozen=True, slots=True, kw_only=True)
class Endpoint:
    """A unit serving HTTP: ``url`` is its base URL (``/v1/...`` and its health path hang off it)."""

    host: str
    unit: str
    role: str
    url: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Deployment:
    """A deployment as every command sees it."""

    inputs: Inputs
    plan: Plan
    rendered: RenderedPlan
    units: tuple[Desired, ...]  # what the deploy layer installs, in plan order
    hosts: tuple[Host, ...]  # :func:`claimed_hosts`
    endpoints: tuple[Endpoint, ...]  # units with an HTTP health check, plan order

    @property
    def name(self) -> str:
        return self.plan.deployment


def is_playbook(target: str | Path) -> bool:
    """A playbook file (``*.yaml``/``*.yml`` or an existing file), else a recipe id."""
    return str(target).endswith((".yaml", ".yml")) or Path(target).is_file()


@dataclass(frozen=True, slots=True, kw_only=True)
class Inputs:
    """A deployment's inputs, loaded and cross-checked."""

    inventory: Inventory
    catalog: Catalog
    playbook: Playbook


def load_inputs(target: str | Path, inventory_path: InventoryRef, *, place_on: str | None = None) -> Inputs:
    """Load the inventory, open the catalog and load ``target``: a playbook file, or a recipe id
    placed on ``place_on`` (a host pattern; None: the first hosts that fit).  ``place_on`` only
    places recipe ids; a playbook has its own placement."""
    from launcher.config.playbook import load_playbook

    inventory = load_sources(inventory_path)
    catalog = open_catalog()
    if is_playbook(target):
        playbook = load_playbook(Path(target), catalog, inventory)
    else:
        playbook = auto_playbook(catalog.get(str(target)), inventory, place_on)
    return Inputs(inventory=inventory, catalog=catalog, playbook=playbook)


def limit_checked(inputs: Inputs, limit_pattern: str | None) -> tuple[Host, ...]:
    """``--limit`` resolved against the deployment's placement hosts (see :mod:`launcher.limit`)
    and, when the cached facts can plan it, refused if it splits a group: the command's first
    error, before secrets are read or anything connects.  Returns the hosts kept."""
    hosts = claimed_hosts(inputs.inventory, inputs.playbook)
    kept = limit_hosts(inputs.inventory, hosts, limit_pattern, what=f"deployment {deployment_name(inputs.playbook.name)}")
    if limit_pattern is not None:
        try:
            early = planned(inputs)
        except PlanError:
            return kept  # e.g. gid_index: auto and nothing cached: the plan made after a gather checks it
        refuse_split(((u.group, u.host) for u in early.units), {h.name for h in kept})
    return kept


def claimed_hosts(inventory: Inventory, playbook: Playbook, the_plan: Plan | None = None) -> tuple[Host, ...]:
    """The hosts a deployment claims (see the module docstring), in inventory order.  Without
    a plan (preflight gathers facts before it can plan): the placement hosts alone."""
    names = {u.host for u in the_plan.units} if the_plan is not None else set()
    for placement in playbook.placement.values():
        names |= {h.name for h in select(inventory, placement.hosts)}
    names |= {h.name for h in spare_hosts(inventory, playbook)}
    return tuple(h for h in inventory.hosts if h.name in names)


def spare_hosts(inventory: Inventory, playbook: Playbook) -> tuple[Host, ...]:
    """Every role's spare hosts (``placement.<role>.spares``), in inventory order."""
    names = {h.name for p in playbook.placement.values() if p.spares is not None for h in select(inventory, p.spares)}
    return tuple(h for h in inventory.hosts if h.name in names)


def planned(inputs: Inputs) -> Plan:
    """The plan made with the facts cached by the last ``fleet facts`` / preflight."""
    return _warned(inputs, plan_with(inputs, facts_cache.load_facts(inputs.inventory)))


def plan_with(inputs: Inputs, facts: Mapping[str, HostFacts]) -> Plan:
    """The plan made with ``facts`` (preflight's, just gathered): the one call of the planner
    every command goes through (its warnings are logged where the plan is deployed)."""
    return plan(inputs.inventory, inputs.catalog, inputs.playbook, facts)


def _warned(inputs: Inputs, the_plan: Plan) -> Plan:
    """``the_plan``, its :func:`launcher.plancheck.warnings` logged (logger ``fleet.plan``; the
    CLI prints each once)."""
    for line in plancheck.warnings(inputs.catalog.get(the_plan.recipe), inputs.playbook, the_plan):
        _log.warning("%s", line)
    return the_plan


def deployment(inputs: Inputs, the_plan: Plan | None = None, *, runtime: Runtime | None = None) -> Deployment:
    """Plan (unless ``the_plan`` is given: e.g. made with the facts preflight just gathered) and
    render ``inputs`` (``runtime`` overrides every unit's runtime)."""
    from launcher.deploy.desired import from_rendered
    from launcher.render import render

    p = planned(inputs) if the_plan is None else _warned(inputs, the_plan)
    rendered = render(p, runtime)
    endpoints = tuple(
        Endpoint(host=u.host, unit=u.name, role=u.role, url=u.health.base)
        for u in p.units
        if u.health is not None
    )
    return Deployment(inputs=inputs, plan=p, rendered=rendered, units=from_rendered(p, rendered),
                      hosts=claimed_hosts(inputs.inventory, inputs.playbook, p), endpoints=endpoints)  # fmt: skip


def load_deployment(
    target: str | Path, inventory_path: InventoryRef, *, place_on: str | None = None, runtime: Runtime | None = None
) -> Deployment:
    """:func:`load_inputs` then :func:`deployment`: what a command reading a deployment calls."""
    return deployment(load_inputs(target, inventory_path, place_on=place_on), runtime=runtime)


def target_of(dep: Deployment, limit_pattern: str | None = None, secrets: Mapping[str, str] | None = None, *,
              split_ok: bool = False) -> Target:  # fmt: skip
    """The deploy layer's view of ``dep``, narrowed to ``limit_pattern``'s hosts (units on other
    hosts and those hosts themselves left out; see :mod:`launcher.limit`).  A limit that splits
    a restart group is refused unless ``split_ok`` (commands that only read: status, logs, top,
    unlock)."""
    from launcher.deploy.session import Target

    whole = Target(deployment=dep.plan.deployment, recipe=dep.plan.recipe, hosts=dep.hosts, units=dep.units,
                   secrets=dict(secrets or {}))  # fmt: skip
    return narrowed(whole, dep.inputs.inventory, limit_pattern, split_ok=split_ok)


def narrowed(target: Target, inventory: Inventory, limit_pattern: str | None, *, split_ok: bool = False) -> Target:
    """``target`` narrowed to ``limit_pattern``'s hosts of ``inventory`` (as :func:`target_of`)."""
    from launcher.deploy.desired import limit

    if limit_pattern is None:
        return target
    hosts = limit_hosts(inventory, target.hosts, limit_pattern, what=f"deployment {target.deployment}")
    keep = {h.name for h in hosts}
    units = tuple(d for d in target.units if d.host in keep) if split_ok else limit(target.units, keep)
    return dataclasses.replace(target, hosts=hosts, units=units)


def load_target(
    playbook_path: str | Path, inventory_path: InventoryRef, limit_pattern: str | None,
    secret_flags: Sequence[str] | None, *, split_ok: bool = False,
) -> Target:  # fmt: skip
    """Load -> plan (cached facts) -> render -> :class:`Target`.  ``secret_flags`` None: secrets
    are not resolved (status, logs, down never need their values); else ``--secret`` overrides
    (a missing secret stops here, before any host)."""
    from launcher.deploy.secrets import resolve

    inputs = load_inputs(playbook_path, inventory_path)
    secrets = resolve(inputs.playbook.secrets, secret_flags) if secret_flags is not None else {}
    return unlocked_by(target_of(deployment(inputs), limit_pattern, secrets, split_ok=split_ok), playbook_path,
                       inventory_path)  # fmt: skip


def unlocked_by(target: Target, playbook_path: str | Path, inventory_path: InventoryRef) -> Target:
    """``target`` naming the command that clears its deploy lock (shown when one is left behind)."""
    return dataclasses.replace(target, unlock_command=shlex.join(("fleet", "unlock", str(playbook_path),
                                                                  *as_sources(inventory_path).argv())))  # fmt: skip
