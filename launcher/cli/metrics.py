"""``fleet metrics targets PLAYBOOK... -i INV -o FILE``: Prometheus ``file_sd`` targets for every
unit's metrics endpoint, labelled with deployment, recipe, role, rank, host, generation, group,
unit and kind (``launcher/observe``).

The generation of each unit is read from its host (the manifests, as ``fleet status`` does);
units not deployed get no target.  FILE keeps the groups of other deployments and is replaced
atomically, so a Prometheus watching it follows without a restart.  ``--limit`` reads only the
hosts it matches; the others keep the targets they have in FILE (a deployment with none of
them is left as it is).  Exit codes: 0 written, 2 bad input.
"""

from __future__ import annotations

import sys
from functools import partial
from pathlib import Path
from typing import Sequence

import click
from click.decorators import FC

from launcher.cli import cli
from launcher.cli.common import connector, limit_option, ssh_options
from launcher.deploy.publish import TargetsHook, publish
from launcher.deploy.session import Target
from launcher.observe import sdfile
from launcher.limit import limited_deployments
from launcher.pipeline import deployment, load_inputs, narrowed, target_of, unlocked_by


@cli.group("metrics")
def metrics_group() -> None:
    """Prometheus scrape targets for deployments."""


@metrics_group.command("targets")
@click.argument("playbooks", nargs=-1, required=True)
@ssh_options
@click.option("-o", "--output", "output", required=True, metavar="FILE", type=click.Path(dir_okay=False),
              help="The file_sd JSON file to write (other deployments' groups in it are kept).")  # fmt: skip
@limit_option(whole_groups=False)
def targets_command(
    playbooks: tuple[str, ...], inventory_path: str, forks: int, trust_new_hosts: bool, known_hosts: tuple[str, ...],
    output: str, limit_pattern: str | None,
) -> None:  # fmt: skip
    """Write PLAYBOOKS' scrape targets into FILE (Prometheus file_sd_configs).  A host that
    cannot be read keeps the targets it had in FILE (none are written when no host answers);
    each such host is named and the exit code is 1."""
    loaded = [(load_inputs(pb, inventory_path), pb) for pb in playbooks]  # every input checked first
    wholes = [(inputs, unlocked_by(target_of(deployment(inputs)), pb, inventory_path)) for inputs, pb in loaded]
    inventory = loaded[0][0].inventory  # the same -i for every playbook
    kept = limited_deployments(inventory, {t.deployment: t.hosts for _, t in wholes}, limit_pattern)
    # A target reads each unit of its own: a limit may take part of a group (nothing is restarted).
    targets = [(narrowed(t, inputs.inventory, limit_pattern, split_ok=True), t) for inputs, t in wholes
               if t.deployment in kept]  # fmt: skip
    for _, t in wholes:
        if t.deployment not in kept:
            click.echo(f"{t.deployment}: left as it is (--limit matches none of its hosts)", err=True)
    sdfile.check(Path(output))
    missed_any = False
    with connector(known_hosts, trust_new_hosts) as conn:
        for target, whole in targets:
            left_out = {h.name for h in whole.hosts} - {h.name for h in target.hosts}
            groups, missed = publish(Path(output), target, conn.connect, forks, left_out)
            if missed:
                missed_any = True
                click.echo(f"fleet: error: {target.deployment}: unreachable: {', '.join(missed)} (their previous "
                           f"targets in {output} are kept)", err=True)
            click.echo(f"{target.deployment}: {len(groups)} targets -> {output}", err=True)
    sys.exit(1 if missed_any else 0)


def targets_file_option(f: FC) -> FC:
    """``--targets-file FILE``: where up/down/restart/rollback keep the scrape targets."""
    return click.option("--targets-file", "targets_file", default=None, metavar="FILE", type=click.Path(dir_okay=False),
                        help="Prometheus file_sd file to rewrite after the change and each rolling batch "
                             "(default: the playbook's metrics.targets_file).")(f)  # fmt: skip


def targets_hook(path: Path | None, target: Target, known_hosts: Sequence[str], trust_new: bool,
                 forks: int) -> TargetsHook | None:  # fmt: skip
    """The command's :class:`TargetsHook` (None without a targets file): its own strictly checked
    connections, its failure on stderr."""
    if path is None:
        return None
    return TargetsHook(path, target, partial(connector, known_hosts, trust_new), forks, partial(click.echo, err=True))
