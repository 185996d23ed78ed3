"""Which playbook owns a deployment on a host (issue 25 item 13).  Pure.

Two playbooks with the same ``name:`` are one deployment to the hosts: the second one's ``up``
would remove the first one's units it does not plan, or replace them with another recipe's.
Every unit manifest ``up`` writes records its owner, ``"<absolute playbook path>
sha256:<16 hex of its text>"``.  The same owner is the same path (the playbook edited in place)
or the same text (the same playbook moved or checked out elsewhere).  Another playbook whose
plan keeps every unit the owner placed on a host, with the same recipe, is a new version of the
deployment (``v2.yaml`` after ``v1.yaml``; a rollout's variant files): it goes ahead and becomes
the owner.  One that would remove a unit another playbook placed there, or run another recipe
under its name, is refused on that host naming both playbooks, before anything changes, unless
told to take it over (``--take-over``).  Manifests without an owner (an older fleet) are adopted.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Collection, Iterable

from launcher.deploy.manifest import Manifest
from launcher.errors import FleetError


class OwnerConflict(FleetError):
    """The deployment on a host belongs to another playbook."""


def owner_of(playbook_path: str | Path) -> str:
    """The owner string of a playbook file ("" when ``playbook_path`` is not a file: a recipe id)."""
    path = Path(playbook_path)
    if not path.is_file():
        return ""
    return f"{os.path.abspath(path)} sha256:{hashlib.sha256(path.read_bytes()).hexdigest()[:16]}"


def same_owner(a: str, b: str) -> bool:
    path_a, _, digest_a = a.rpartition(" ")
    path_b, _, digest_b = b.rpartition(" ")
    return path_a == path_b or digest_a == digest_b


def conflict(host: str, deployment: str, ours: str, recipe: str, planned: Collection[str],
             recorded: Iterable[Manifest]) -> OwnerConflict | None:
    """The refusal for ``host`` (None: none) when a unit another playbook placed there
    (``recorded``: this deployment's manifests on it) is not in this plan (``planned``: unit
    names on the host) or runs another recipe than ``recipe``."""
    if not ours:
        return None
    theirs = sorted({m.playbook for m in recorded if m.playbook and not same_owner(m.playbook, ours)
                     and (m.unit not in planned or m.recipe != recipe)})  # fmt: skip
    if not theirs:
        return None
    other_path, _, other_digest = theirs[0].rpartition(" ")
    path, _, digest = ours.rpartition(" ")
    return OwnerConflict(f"{host}: deployment {deployment} here belongs to playbook {other_path} ({other_digest}); "
                         f"{path} ({digest}) has the same name and would remove or replace its units: rename one, "
                         "or pass --take-over to move the deployment to this playbook")
