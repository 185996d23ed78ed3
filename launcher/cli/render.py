"""``fleet render TARGET -i INVENTORY [--hosts PATTERN] -o DIR [--runtime RUNTIME] [--force]``:
the files each host would get, written locally as ``DIR/<host>/<absolute path>`` with their
modes.  Nothing is contacted.

TARGET is a playbook file or a recipe id (placed like ``fleet plan`` does).  ``--hosts`` places a
recipe id on those hosts; with a playbook it limits the output to them.  DIR must be empty or
absent; ``--force`` replaces the ``DIR/<host>`` folders this render writes (nothing else).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import click

from launcher.cli import cli
from launcher.cli.options import inventory_option
from launcher.config.patterns import select
from launcher.errors import FleetError, UsageError
from launcher.model import Runtime
from launcher.pipeline import deployment, is_playbook, load_inputs
from launcher.render import RenderedHost
from launcher.runtimes.registry import names as runtime_names


def _write(out: Path, host: RenderedHost) -> None:
    for f in host.files:
        path = out / host.host / f.path.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        # Created with its final mode so an env file is never briefly world-readable.
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, f.mode)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(f.content)
        os.chmod(path, f.mode)


@cli.command("render")
@click.argument("target")
@inventory_option
@click.option("--hosts", default=None, help="Host pattern: placement for a recipe id, output filter for a playbook.")
@click.option("-o", "--output", "output", required=True, help="Directory to write DIR/<host>/<path> into.")
@click.option("--runtime", type=click.Choice(runtime_names()), default=None, help="Override every unit's runtime.")
@click.option("--force", is_flag=True, help="Write into a non-empty DIR, replacing the host folders rendered.")
def render_command(target: str, inventory_path: str, hosts: str | None, output: str, runtime: Runtime | None, force: bool) -> None:
    """Write the files TARGET (a playbook file or a recipe id) would put on each host."""
    out = Path(output)
    if out.exists() and not out.is_dir():
        raise UsageError(f"fleet render: -o {output}: not a directory")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise UsageError(f"fleet render: -o {output}: directory is not empty (--force writes into it)")
    # --hosts places a recipe id, and filters a playbook's output.
    filtering = is_playbook(target)
    inputs = load_inputs(target, inventory_path, place_on=None if filtering else hosts)
    keep = {h.name for h in select(inputs.inventory, hosts, None, "--hosts")} if filtering and hosts else None
    rendered = deployment(inputs, runtime=runtime).rendered
    chosen = [h for name, h in rendered.hosts.items() if keep is None or name in keep]
    if not chosen:
        raise UsageError(f"fleet render: --hosts {hosts}: no unit of {rendered.deployment} runs there")
    for host in chosen:
        if "/" in host.host or host.host in (".", ".."):
            raise UsageError(f"fleet render: host {host.host!r}: cannot be a folder name under -o")
    try:
        for host in chosen:
            if (out / host.host).is_dir():
                shutil.rmtree(out / host.host)
            _write(out, host)
    except OSError as err:
        raise FleetError(f"fleet render: {err.filename or output}: {err.strerror}") from None
    for host in chosen:
        units = ", ".join(u.name for u in host.units)
        click.echo(f"{out / host.host}: {len(host.files)} files ({units})")
