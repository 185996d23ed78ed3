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
from typing import Sequence

import click
from click.decorators import FC

from launcher.cli import cli
from launcher.cli.common import connector, ssh_options
from launcher.deploy.session import Target
from launcher.errors import ExitCode, FleetError
from launcher.model import Playbook
from launcher.observe import sdfile
from launcher.observe.publish import publish, targets_path
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
    sdfile.check(Path(output))
    with connector(known_hosts, trust_new_hosts) as conn:
        for target in targets:
            groups = publish(Path(output), target, conn.connect, forks)
            click.echo(f"{target.deployment}: {len(groups)} targets -> {output}", err=True)


def targets_file_option(f: FC) -> FC:
    """``--targets-file FILE``: where up/down/restart/rollback keep the scrape targets."""
    return click.option("--targets-file", "targets_file", default=None, metavar="FILE", type=click.Path(dir_okay=False),
                        help="Prometheus file_sd file to rewrite after the change and each rolling batch "
                             "(default: the playbook's metrics.targets_file).")(f)  # fmt: skip


class TargetsHook:
    """Rewrites a deployment's targets in FILE when called: after ``up``/``down`` and after each
    rolling batch, so Prometheus follows the rollout.  Each call reads the hosts over its own SSH
    connections (the command's own stay with it).  A failure is reported on stderr, not raised:
    it must not stop a rollout; :meth:`exit_code` then turns a success into exit 1."""

    def __init__(self, path: Path, target: Target, known_hosts: Sequence[str], trust_new: bool, forks: int) -> None:
        self.path, self.target, self.known_hosts, self.trust_new, self.forks = path, target, known_hosts, trust_new, forks
        self.failed = False

    def __call__(self) -> None:
        try:
            with connector(self.known_hosts, self.trust_new) as conn:
                publish(self.path, self.target, conn.connect, self.forks)
        except FleetError as err:
            self.failed = True
            click.echo(f"fleet: error: scrape targets {self.path} not updated: {err}", err=True)

    def exit_code(self, code: int) -> int:
        return int(ExitCode.FAILED) if self.failed and code == ExitCode.OK else code


def after_change(hook: TargetsHook | None, code: int) -> int:
    """Rewrites the scrape targets (when asked) after a change; the command's exit code."""
    if hook is None:
        return code
    hook()
    return hook.exit_code(code)


def checked_targets_path(playbook: Playbook, flag: str | None) -> Path | None:
    """Where the playbook or ``--targets-file`` asks for targets to be kept (None: nowhere); a
    FILE that is not a targets file stops the command here, before any host is touched."""
    path = targets_path(playbook, flag)
    if path is not None:
        sdfile.check(path)
    return path
