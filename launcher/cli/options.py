"""``-i`` (with ``--vault-password-file``) for every command that reads an inventory, without
loading the SSH layer: the command line, else the environment, else the fleet config file
(:mod:`launcher.config.settings`)."""

from __future__ import annotations

from typing import Callable

import click

from launcher.config import settings
from launcher.config.inventory_sources import InventorySources

_VAULT = "fleet.vault_password_file"


def _vault_callback(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    # Eager: stored before -i's callback reads it, whatever the order on the command line.
    ctx.meta[_VAULT] = value


def _inventory_callback(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> InventorySources:
    """The command line's ``-i`` values, else ``FLEET_INVENTORY``, else the config file's."""
    sources = value
    if not sources:
        found = settings.lookup("inventory")
        if found is None:
            raise click.UsageError("missing option '-i' / '--inventory' (or set FLEET_INVENTORY, or "
                                   "'inventory =' in fleet.cfg)", ctx)  # fmt: skip
        sources = found.values
    vault = ctx.meta.get(_VAULT)
    if vault is None:
        found = settings.lookup("vault_password_file")
        vault = found.values[0] if found is not None else None
    return InventorySources(sources=tuple(sources), vault_password_file=vault)


def inventory_option(f: Callable[..., None]) -> Callable[..., None]:
    """``-i/--inventory`` (repeatable; its value: :class:`InventorySources`) and
    ``--vault-password-file``; both default from the environment, then the config file."""
    f = click.option("--vault-password-file", metavar="FILE", is_eager=True, expose_value=False,
                     callback=_vault_callback,
                     help="Decrypt the inventory's !vault values fleet reads with this password file (an "
                          "executable one is run) [env FLEET_VAULT_PASSWORD_FILE].")(f)  # fmt: skip
    return click.option("-i", "--inventory", "inventory_path", multiple=True, metavar="INV",
                        callback=_inventory_callback,
                        help="Ansible inventory: a YAML or INI file, a directory, an executable inventory "
                             "script or a host list 'h1,h2,' (repeatable) [env FLEET_INVENTORY].")(f)  # fmt: skip
