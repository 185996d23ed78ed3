"""``fleet inventory list -i INVENTORY [--limit PATTERN] [--json]``: the inventory as fleet
resolves it (hosts in inventory order, their groups, merged vars and fleet's typed host view)."""

from __future__ import annotations

import click

from launcher.cli import cli
from launcher.cli.options import inventory_option
from launcher.cli.recipes import show_table
from launcher.config.inventory_sources import load_sources
from launcher.config.patterns import select
from launcher.model import Host
from launcher.output import dumps
from launcher.plan import to_jsonable


def host_data(h: Host) -> dict[str, object]:
    data = to_jsonable(h)
    assert isinstance(data, dict)
    data["source"] = str(h.source)
    return data


@cli.group("inventory")
def inventory() -> None:
    """Ansible inventories as fleet reads them."""


@inventory.command("list")
@inventory_option
@click.option("--limit", default=None, help="Ansible host pattern: only these hosts.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (sorted keys).")
def list_command(inventory_path: str, limit: str | None, as_json: bool) -> None:
    """Resolved hosts, groups and vars."""
    inv = load_sources(inventory_path)
    hosts = select(inv, limit, None, "--limit") if limit is not None else inv.hosts
    names = {h.name for h in hosts}
    # As `ansible-inventory --list`: a group with neither hosts nor children (an empty
    # `ungrouped`) is not shown.
    shown = [g for g in inv.groups.values() if (names & set(g.hosts) if limit is not None else g.hosts or g.children)]
    members = {g.name: [h for h in g.hosts if h in names] for g in shown}
    if as_json:
        groups = {
            g.name: {"hosts": members[g.name], "children": list(g.children), "vars": to_jsonable(g.vars)} for g in shown
        }
        click.echo(dumps({"path": inv.path, "hosts": [host_data(h) for h in hosts], "groups": groups}))
        return
    rows = []
    for h in hosts:
        s = h.spec
        gpus = f"{s.gpu_count}×{s.gpu_model}" if s.gpu_model else "-"
        gid = "-" if s.gid_index is None else str(s.gid_index)
        target = f"{h.user + '@' if h.user else ''}{h.address}{':' + str(h.port) if h.port != 22 else ''}"
        rows.append((h.name, target, gpus, s.fabric, gid, s.nccl_ifname or "-", s.runtime, ",".join(h.groups)))
    show_table(
        ("host", "ssh", "gpus", "fabric", "gid", "ifname", "runtime", "groups"),
        rows,
        title=f"{inv.path}: {len(hosts)} hosts",
    )
    show_table(
        ("group", "hosts", "children", "vars"),
        [
            (g.name, str(len(members[g.name])), ",".join(g.children), ", ".join(f"{k}={v}" for k, v in sorted(g.vars.items())))
            for g in shown
        ],
    )
