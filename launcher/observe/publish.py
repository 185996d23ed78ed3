"""Keeping a deployment's scrape targets current: read which generation of each unit runs where
(the manifests on the hosts, as ``fleet status`` does), label the plan's endpoints with it and
write them into the ``file_sd`` file.

Contract: :func:`publish` reads only (no lock, nothing written on a host) and replaces this
deployment's groups in ``path`` atomically (:mod:`.sdfile`); units not deployed have no target.
A host that cannot be read keeps the groups it had (Prometheus then shows them down, which is
what they are to it) rather than losing them.  It returns the deployment's groups as written.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from launcher.deploy.session import Connect, Target
from launcher.deploy.status import status
from launcher.model import Playbook
from launcher.observe import sdfile
from launcher.observe.targets import endpoints, target_groups


def publish(path: Path, target: Target, connect: Connect, forks: int = 8) -> list[dict[str, Any]]:
    rows = status(target, connect, forks)
    generations = {(r.host, r.unit): r.generation for r in rows}
    unread = {r.host for r in rows if r.state == "unreachable"}
    groups = target_groups(target.deployment, target.recipe, endpoints(d.unit for d in target.units), generations)
    merged = sdfile.update(path, {target.deployment}, groups, keep=lambda g: g["labels"].get("host") in unread)
    return [g for g in merged if g["labels"].get("deployment") == target.deployment]


def targets_path(playbook: Playbook, flag: str | None) -> Path | None:
    """Where this deployment's targets are kept: ``flag`` (``--targets-file``), else the
    playbook's ``metrics.targets_file`` relative to the playbook's directory, else None."""
    if flag is not None:
        return Path(flag)
    given = playbook.metrics.targets_file
    return None if given is None else Path(playbook.path).parent / Path(given).expanduser()
