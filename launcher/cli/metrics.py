"""``fleet metrics targets PLAYBOOK... -i INV -o FILE``: Prometheus ``file_sd`` targets for every
unit's metrics endpoint, labelled with deployment, recipe, role, rank, host, generation, group,
unit and kind (``launcher/observe``).

The generation of each unit is read from its host (the manifests, as ``fleet status`` does);
units not deployed get no target.  FILE keeps the groups of other deployments and is replaced
atomically, so a Prometheus watching it follows without a restart.  Exit codes: 0 written, 2 bad
input.
"""

from __future__ import annotations

from pathlib import Path

import click

from launcher.cli import cli
from launcher.cli.common import connector, ssh_options
from launcher.observe.publish import publish
from launcher.pipeline import load_target


@cli.group("metrics")
def metrics_group() -> None:
    """Prometheus scrape targets for deployments."""


@metrics_group.command("targets")
@click.argument("playbooks", nargs=-1, required=True)
@ssh_options
@click.option("-o", "--output", "output", required=True, metavar="FILE", type=click.Path(dir_okay=False),
              help="The file_sd JSON file to write (other deployments' groups in it are kept).")  # fmt: skip
def targets_command(
    playbooks: tuple[str, ...], inventory_path: str, forks: int, trust_new_hosts: bool, known_hosts: tuple[str, ...],
    output: str,
) -> None:  # fmt: skip
    """Write PLAYBOOKS' scrape targets into FILE (Prometheus file_sd_configs)."""
    targets = [load_target(pb, inventory_path, None, None) for pb in playbooks]  # every input checked first
    with connector(known_hosts, trust_new_hosts) as conn:
        for target in targets:
            groups = publish(Path(output), target, conn.connect, forks)
            click.echo(f"{target.deployment}: {len(groups)} targets -> {output}", err=True)
