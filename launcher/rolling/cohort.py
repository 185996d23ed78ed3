"""PD rolling by cohort switch (placeholder, filled in below)."""

from __future__ import annotations

from typing import Sequence

from launcher.deploy.orchestrate import Connect, Target
from launcher.errors import UsageError
from launcher.model import Inventory, Playbook
from launcher.output import Progress
from launcher.rolling.roll import Action, RollOptions, RollReport
from launcher.rolling.router_api import RouterClient


def switch(
    playbook: Playbook,
    inventory: Inventory,
    target: Target,
    surge: Sequence[str],
    connect: Connect,
    fronts: Sequence[RouterClient],
    options: RollOptions,
    progress: Progress,
    *,
    action: Action,
    secret_flags: Sequence[str],
) -> RollReport:
    raise UsageError("not yet")
