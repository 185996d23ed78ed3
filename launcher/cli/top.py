"""``fleet top PLAYBOOK -i INV``: per unit state, health, generation and the load its own metrics
report (requests running / waiting, generated tokens/s, KV-cache use), refreshed every
``--interval`` seconds until Ctrl-C (exit 0; not on a terminal, each reading is appended);
``--once`` prints one reading (``--json`` for scripts).

Metrics are read on each unit's host over SSH (``launcher/observe/fetch.py``): the control host
need not reach the data network.  Tokens/s is the generation counter's change between two
readings, so ``--once`` reads twice, ``--interval`` apart.  Exit codes: 0, 2 bad input.
"""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Iterator, Sequence

import click

from launcher.cli import cli
from launcher.cli.common import connector, limit_option, ssh_options
from launcher.deploy.session import Target
from launcher.execute.ssh import SshConnector
from launcher.deploy.status import status
from launcher.errors import UsageError
from launcher.engines import registry
from launcher.observe.targets import Endpoint, scrape_endpoints
from launcher.deploy.top import Row, Sample, rows, sample
from launcher.output import dumps, print_table, table
from launcher.pipeline import load_deployment, target_of

if TYPE_CHECKING:
    from rich.table import Table

COLUMNS = ("host", "unit", "role", "rank", "state", "health", "gen", "running", "waiting", "tok/s", "kv", "note")


@cli.command("top")
@click.argument("playbook")
@ssh_options
@click.option("--interval", type=click.FloatRange(0.2, 3600), default=2.0, show_default=True,
              help="Seconds between readings.")  # fmt: skip
@click.option("--once", is_flag=True, help="Print one reading and exit.")
@click.option("--json", "as_json", is_flag=True, help="With --once: the rows as JSON.")
@limit_option(whole_groups=False)
def top_command(
    playbook: str, inventory_path: str, forks: int, trust_new_hosts: bool, known_hosts: tuple[str, ...],
    interval: float, once: bool, as_json: bool, limit_pattern: str | None,
) -> None:  # fmt: skip
    """Live load of PLAYBOOK's units from their own metrics."""
    if as_json and not once:
        raise UsageError("fleet top: --json prints one reading: use it with --once")
    dep = load_deployment(playbook, inventory_path)
    target = target_of(dep, limit_pattern, split_ok=True)
    recipe = dep.inputs.catalog.get(dep.plan.recipe)
    versions: dict[str, str | None] = {registry.get(recipe.engine).metrics_kind: recipe.engine_version}
    eps = scrape_endpoints([u for u in dep.plan.units if u.host in {h.name for h in target.hosts}])
    with connector(known_hosts, trust_new_hosts) as conn:
        reader = _Reader(target, eps, versions, conn, forks)
        if once:
            first = reader.read()
            time.sleep(interval)
            found = reader.rows(reader.read(), first)
            if as_json:
                click.echo(dumps([r.as_dict() for r in found]))
            else:
                print_table(table(COLUMNS, _cells(found), title=f"{target.deployment} ({target.recipe})"))
            return
        try:
            _live(reader, interval, f"{target.deployment} ({target.recipe})")
        except KeyboardInterrupt:
            return  # Ctrl-C is how one leaves a live view: not an interrupted command


class _Reader:
    """One deployment's readings: metrics from the hosts, rows joined with ``fleet status``."""

    def __init__(self, target: Target, eps: Sequence[Endpoint], versions: dict[str, str | None],
                 connector: SshConnector, forks: int) -> None:  # fmt: skip
        self.target, self.eps, self.versions, self.connector, self.forks = target, eps, versions, connector, forks

    def read(self) -> Sample:
        return sample(self.target.hosts, self.eps, self.versions, self.connector, self.forks)

    def rows(self, now: Sample, before: Sample | None) -> tuple[Row, ...]:
        return rows(status(self.target, self.connector.connect, self.forks), self.eps, now, before)


def _live(reader: _Reader, interval: float, title: str) -> None:
    """A terminal gets one table redrawn in place; anything else (a pipe, ``tee``, a log) gets
    every reading appended as it is made -- rich's live view writes nothing there until it
    stops, so a log of ``fleet top`` would stay empty until Ctrl-C."""
    from rich.console import Console
    from rich.live import Live

    def readings() -> Iterator[Table]:
        before = None
        while True:
            now = reader.read()
            yield table(COLUMNS, _cells(reader.rows(now, before)), title=title)
            before = now
            time.sleep(interval)

    if not sys.stdout.isatty():
        for frame in readings():
            print_table(frame)
            sys.stdout.flush()
    with Live(table(COLUMNS, (), title=title), auto_refresh=False, console=Console()) as live:
        for frame in readings():
            live.update(frame, refresh=True)


def _num(value: float | None, fmt: str = "{:.0f}") -> str:
    return "-" if value is None else fmt.format(value)


def _cells(found: Sequence[Row]) -> list[tuple[str, ...]]:
    return [
        (r.host, r.unit, r.role, str(r.rank), r.state, r.health, _num(r.generation), _num(r.running), _num(r.waiting),
         _num(r.tokens_per_s, "{:.1f}"), _num(None if r.kv_usage is None else r.kv_usage * 100, "{:.1f}%"), r.error)
        for r in found
    ]  # fmt: skip
