"""What the commands that talk to hosts share: SSH options, the connector, and the inputs of a
playbook command loaded once (inventory, catalog, playbook).

Contract: :func:`load_inputs` raises :class:`~launcher.errors.InputError` naming the file and
line of the first bad input; nothing has touched a host by then.  The catalog is opened on
demand (:func:`~launcher.config.recipes.open_catalog`): a command deploying one recipe parses
one recipe file.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import click

from launcher.config.inventory import load_inventory
from launcher.config.recipes import Catalog, open_catalog
from launcher.execute.fanout import DEFAULT_FORKS
from launcher.execute.hostkeys import KnownHosts
from launcher.execute.ssh import SshConnector
from launcher.model import Inventory, Playbook


@dataclass(frozen=True, slots=True, kw_only=True)
class Inputs:
    """A playbook command's inputs, loaded and cross-checked."""

    inventory: Inventory
    catalog: Catalog
    playbook: Playbook


def load_inputs(playbook_path: str | Path, inventory_path: str | Path) -> Inputs:
    from launcher.config.playbook import load_playbook

    inventory = load_inventory(inventory_path)
    catalog = open_catalog()
    return Inputs(inventory=inventory, catalog=catalog, playbook=load_playbook(Path(playbook_path), catalog, inventory))


def ssh_options(f: Callable[..., None]) -> Callable[..., None]:
    """``-i/--inventory``, ``--known-hosts``, ``--trust-new-hosts`` and ``--forks``."""
    f = click.option("--forks", type=click.IntRange(1, 1024), default=DEFAULT_FORKS, show_default=True,
                     help="Hosts worked on at the same time (key exchanges stay capped at 8).")(f)  # fmt: skip
    f = click.option("--trust-new-hosts", is_flag=True,
                     help="Record the keys of hosts never seen before (changed keys are still refused).")(f)
    f = click.option("--known-hosts", "known_hosts", multiple=True, metavar="FILE",
                     help="Extra known_hosts file (repeatable); ~/.ssh/known_hosts is always read.")(f)
    f = click.option("-i", "--inventory", "inventory_path", required=True, metavar="INV",
                     help="Ansible inventory (YAML or INI).")(f)
    return f


def connector(known_hosts: Sequence[str], trust_new: bool) -> SshConnector:
    """Strict host-key checking against ``known_hosts`` files and ``~/.ssh/known_hosts``."""
    return SshConnector(KnownHosts.for_operator(tuple(known_hosts), trust_new=trust_new))
