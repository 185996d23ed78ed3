"""``fleet plan TARGET -i INVENTORY [--hosts PATTERN] [--json]``: who runs what, where.

TARGET is a playbook file, or a recipe id placed by :func:`launcher.plan.auto_playbook` on the
first hosts that fit it (or on ``--hosts``).  The table shows one row per unit; ``--json`` prints
the whole plan (sorted keys).  Nothing is contacted: planning is pure.
"""

from __future__ import annotations

import click

from launcher.cli import cli
from launcher.errors import UsageError
from launcher.model import Plan
from launcher.output import dumps, print_table, table
from launcher.pipeline import is_playbook, load_inputs, planned
from launcher.plan import to_jsonable


def _ranges(numbers: tuple[int, ...]) -> str:
    """(0, 1, 2, 3, 6) -> "0-3,6"."""
    runs: list[list[int]] = []
    for n in numbers:
        if runs and runs[-1][-1] == n - 1:
            runs[-1].append(n)
        else:
            runs.append([n])
    return ",".join(f"{r[0]}-{r[-1]}" if len(r) > 1 else str(r[0]) for r in runs) or "-"


def rows(p: Plan) -> list[tuple[str, ...]]:
    """host, unit, role, rank, GPUs, ports, image: one row per unit, in plan order.  Unit names
    lose their common ``fleet-<deployment>-`` prefix (the title names the deployment)."""
    prefix = f"fleet-{p.deployment}-"
    out: list[tuple[str, ...]] = []
    for u in p.units:
        ports = " ".join(str(v) for _, v in sorted(u.ports.items()))
        image = u.container.image if u.container else "(native)"
        out.append(
            (u.host, u.name.removeprefix(prefix), u.role, f"{u.rank}/{u.nnodes}", _ranges(u.gpus), ports or "-", image)
        )
    return out


@cli.command("plan")
@click.argument("target")
@click.option("-i", "--inventory", "inventory_path", required=True, help="Inventory file (YAML or INI).")
@click.option("--hosts", default=None, help="Host pattern to place a recipe id on.")
@click.option("--json", "as_json", is_flag=True, help="Print the full plan as JSON.")
def plan_command(target: str, inventory_path: str, hosts: str | None, as_json: bool) -> None:
    """Show the units TARGET (a playbook file or a recipe id) would run, host by host."""
    if hosts is not None and is_playbook(target):
        raise UsageError("fleet plan: --hosts places a recipe id; a playbook has its own placement")
    result = planned(load_inputs(target, inventory_path, place_on=hosts))
    if as_json:
        data = to_jsonable(result)
        assert isinstance(data, dict)
        click.echo(dumps(data))
        return
    title = f"{result.deployment} ({result.recipe}): {len(result.units)} units"
    print_table(table(("host", "unit", "role", "rank", "gpus", "ports", "image"), rows(result), title=title))
