"""What the shell completion script (``fleet completion``) completes: recipe ids and playbook
files where a command takes a target, host names and groups of the ``-i`` inventory (or its
default, docs/configuration.md) where it takes a host pattern.  :func:`completers` attaches
these to every command's parameters by name, so the command modules need not know about
completion.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

import click
from click.shell_completion import CompletionItem

Completer = Callable[[click.Context, click.Parameter, str], list[CompletionItem]]


def _files(incomplete: str) -> list[CompletionItem]:
    """Directories (to go on into) and ``*.yaml``/``*.yml`` files starting with ``incomplete``."""
    head, tail = os.path.split(incomplete)
    try:
        entries = sorted(Path(head or ".").iterdir(), key=lambda p: p.name)
    except OSError:
        return []
    out = []
    for p in entries:
        if not p.name.startswith(tail) or (p.name.startswith(".") and not tail.startswith(".")):
            continue
        shown = os.path.join(head, p.name)
        if p.is_dir():
            out.append(CompletionItem(shown + "/"))
        elif p.suffix in (".yaml", ".yml"):
            out.append(CompletionItem(shown))
    return out


def _recipe_ids(incomplete: str) -> list[CompletionItem]:
    from launcher.config.recipes import recipe_paths
    from launcher.errors import FleetError

    try:
        ids = recipe_paths()
    except FleetError:
        return []
    return [CompletionItem(rid) for rid in ids if rid.startswith(incomplete)]


def playbooks(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    return _files(incomplete)


def recipes(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    return _recipe_ids(incomplete)


def targets(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    """A playbook file or a recipe id."""
    return _files(incomplete) + _recipe_ids(incomplete)


def hosts(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    """Host names and groups of the inventory the command line (or its default) names; the
    part after the last ``:`` of a pattern (``gpu:!gpu-0``) is what is completed."""
    from launcher.config.inventory_sources import InventorySources, load_sources
    from launcher.config.settings import lookup
    from launcher.errors import FleetError

    ref = ctx.params.get("inventory_path")
    try:
        if not isinstance(ref, InventorySources):
            found = lookup("inventory")
            if found is None:
                return []
            ref = InventorySources(sources=found.values)
        inv = load_sources(InventorySources(sources=ref.sources))  # no vault password: names only
    except FleetError:
        return []
    cut = incomplete.rfind(":") + 1
    prefix, word = incomplete[:cut], incomplete[cut:]
    sign = word[:1] if word[:1] in "!&" else ""
    names = [*(g for g in inv.groups if g not in ("all", "ungrouped")), *(h.name for h in inv.hosts)]
    return [CompletionItem(prefix + sign + n) for n in names if n.startswith(word[len(sign):])]


# Parameter name (as the commands declare it) -> its completer.
BY_NAME: dict[str, Completer] = {
    "target": targets, "playbook": playbooks, "playbooks": playbooks, "recipe_id": recipes,
    "pattern": hosts, "limit": hosts, "limit_pattern": hosts, "hosts": hosts,
}  # fmt: skip


def completers(cmd: click.Command) -> None:
    """Attach :data:`BY_NAME`'s completers to ``cmd``'s parameters that have none of their own."""
    for param in cmd.params:
        fn = BY_NAME.get(param.name or "")
        # click keeps a parameter's shell_complete= function here; set after the decorators ran.
        if fn is not None and getattr(param, "_custom_shell_complete", None) is None:
            param._custom_shell_complete = fn
