"""``fleet plan TARGET -i INVENTORY [--hosts PATTERN] [--json]``: who runs what, where.

TARGET is a playbook file, or a recipe id placed by :func:`launcher.plan.auto_playbook` on the
first hosts that fit it (or on ``--hosts``).  The table shows one row per unit; ``--json`` prints
the whole plan (sorted keys).  Nothing is contacted: planning is pure.
"""

from __future__ import annotations

import click

from launcher.cli import cli
from launcher.cli.options import inventory_option
from launcher.errors import UsageError
from launcher.model import Plan
from launcher.output import dumps, print_listing
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
        ports = " ".join(f"{k}={v}" for k, v in sorted(u.ports.items(), key=lambda kv: kv[1]))
        image = u.container.image if u.container else "(native)"
        out.append(
            (u.host, u.name.removeprefix(prefix), u.role, f"{u.rank}/{u.nnodes}", _ranges(u.gpus), ports or "-", image)
        )
    return out


# The per-host network env worth a column: what the network layer derives per host.
_NETWORK_COLUMNS = (
    ("data ip", ("SGLANG_HOST_IP", "VLLM_HOST_IP", "MOONCAKE_LOCAL_HOSTNAME")),
    ("nic", ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME")),
    ("gid", ("NCCL_IB_GID_INDEX", "MC_GID_INDEX")),
    ("hcas", ("NCCL_IB_HCA", "MOONCAKE_DEVICE", "UCX_NET_DEVICES")),
)


def network_rows(p: Plan) -> tuple[tuple[str, ...], list[tuple[str, ...]]]:
    """Per host (plan order), the network values fleet derived for it: data IP, NIC, RoCE GID
    index, HCAs -- only the columns some host has (a host without a value shows ``-``)."""
    per_host: dict[str, dict[str, str]] = {}
    for u in p.units:
        values = per_host.setdefault(u.host, {})
        for label, names in _NETWORK_COLUMNS:
            value = next((u.env[n] for n in names if n in u.env), None)
            if value is not None and label not in values:
                values[label] = value.lstrip("=")  # NCCL's exact-match prefix
    labels = tuple(label for label, _ in _NETWORK_COLUMNS if any(label in v for v in per_host.values()))
    return ("host", *labels), [(h, *(v.get(label, "-") for label in labels)) for h, v in per_host.items() if v]


@cli.command("plan")
@click.argument("target")
@inventory_option
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
    print_listing(("host", "unit", "role", "rank", "gpus", "ports", "image"), rows(result), title=title)
    columns, net = network_rows(result)
    if len(columns) > 1:
        click.echo()
        print_listing(columns, net, title="per-host network (planned env)")
