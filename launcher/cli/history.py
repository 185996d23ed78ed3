"""``fleet history``: the runs that changed hosts, from the local record
(:mod:`launcher.history`); :func:`remember` is how ``up``/``down``/``restart``/``rollback``,
``unlock`` and ``weights stage`` add theirs."""

from __future__ import annotations

import getpass
import sys
import time
from dataclasses import asdict
from typing import Sequence

import click

from launcher import history
from launcher.cli import cli
from launcher.output import dumps, print_listing


def remember(started: tuple[str, float], playbook: str, deployment: str, hosts: Sequence[str],
             outcomes: Sequence[tuple[str, str, str]], exit_code: int) -> None:  # fmt: skip
    """Records one run that changed hosts (``started``: :func:`launcher.history.started_now`)."""
    when, clock = started
    history.record(history.Run(
        started=when, command=("fleet", *sys.argv[1:]), user=getpass.getuser(), deployment=deployment,
        playbook=str(playbook), playbook_sha256=history.digest(playbook), hosts=tuple(hosts),
        outcomes=history.of(outcomes), duration_s=round(time.monotonic() - clock, 3), exit_code=exit_code,
    ))  # fmt: skip


@cli.command("history")
@click.option("-n", "--last", "last", type=click.IntRange(1, None), default=20, show_default=True,
              help="How many runs (the newest).")
@click.option("--deployment", default=None, metavar="NAME", help="Only runs of this deployment.")
@click.option("--json", "as_json", is_flag=True, help="Print the records as JSON.")
def history_command(last: int, deployment: str | None, as_json: bool) -> None:
    """The runs that changed hosts (up, down, restart, rollback, unlock, weights stage, the
    watch's actions; not --check), newest last:
    when, who, the command, deployment, playbook digest, hosts, outcomes, duration and exit
    status.  Read from ~/.local/state/fleet/history.jsonl ($XDG_STATE_HOME, FLEET_STATE_DIR)."""
    runs = [r for r in history.read() if deployment is None or r.deployment == deployment][-last:]
    if as_json:
        click.echo(dumps([asdict(r) for r in runs]))
        return
    rows = [
        (r.started, r.deployment, " ".join(r.command), f"{len(r.hosts)}",
         ", ".join(f"{k} {v}" for k, v in history.counts(r).items()) or "-", f"{r.duration_s:.1f}s",
         str(r.exit_code), (r.playbook_sha256 or "-")[:12])
        for r in runs
    ]  # fmt: skip
    if not rows:
        click.echo(f"fleet: history: no runs recorded in {history.path()}", err=True)
        return
    print_listing(("started", "deployment", "command", "hosts", "outcomes", "took", "exit", "playbook sha256"), rows)
