"""Which model directories each host of a deployment needs, and where.  Pure, from the plan.

A model is needed on exactly the hosts that run an engine unit reading it (target, and draft
when the recipe has one), at the host path its units read: the path the engine is given, mapped
back through the unit's mounts, or -- for a repo id -- fleet's staging convention
``{models_dir}/<repo id>`` (what preflight looks for).  The source holds each model at its
relative name: the path below the host's ``models_dir`` (``<org>/<name>`` for a repo id), else
the directory's base name.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass

from launcher.errors import UsageError
from launcher.model import Inventory, Plan, Recipe
from launcher.preflight.checks import weight_needs


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelNeed:
    model: str  # as the units name it (repo id or path)
    what: str  # "weights" / "draft weights"
    rel: str  # its directory below the source root
    paths: tuple[tuple[str, str], ...]  # (host, host path) in inventory order


def source_rel(path: str, models_dir: str) -> str:
    root = models_dir.rstrip("/") + "/"
    return path[len(root):].strip("/") if path.startswith(root) else posixpath.basename(path.rstrip("/"))


def model_needs(plan: Plan, inventory: Inventory, recipe: Recipe) -> tuple[ModelNeed, ...]:
    """Every model the plan's engine units read, with its host paths; target first."""
    found: dict[str, tuple[str, str, dict[str, str]]] = {}
    order = {h.name: i for i, h in enumerate(inventory.hosts)}
    for u in plan.units:
        host = inventory.host(u.host)
        for need in weight_needs(u, host, recipe):
            path = need.local or need.staged
            if path is None:
                raise UsageError(f"{u.host}/{u.name}: {need.what} {need.value!r} is neither a path its mounts "
                                 "reach nor a repo id: nothing to stage")
            rel = source_rel(path, host.spec.models_dir)
            what, _, hosts = found.setdefault(need.value, (need.what, rel, {}))
            if hosts.setdefault(u.host, path) != path:
                raise UsageError(f"{u.host}: units read {need.value} from both {hosts[u.host]} and {path}")
    return tuple(ModelNeed(model=m, what=what, rel=rel,
                           paths=tuple(sorted(hosts.items(), key=lambda kv: order[kv[0]])))
                 for m, (what, rel, hosts) in sorted(found.items(), key=lambda kv: kv[1][0] != "weights"))
