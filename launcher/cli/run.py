"""``fleet run -i INV PATTERN -- CMD…``: one command on every matching host (like
``ansible -m shell``), with a per-host report.

CMD given as one argument is a shell string (run by ``sh -c``); several arguments are an argv,
quoted once.  Exit status: 0 every host ok, 3 some failed or unreachable, 1 none ok, 2 bad input.
"""

from __future__ import annotations

import json
from typing import Sequence

import click

from launcher.cli import cli
from launcher.cli.common import execute_log_to_stderr, limit_option, ssh_settings
from launcher.cli.options import inventory_option
from launcher.config.inventory_sources import load_sources
from launcher.config.patterns import select
from launcher.errors import ExitCode, UnreachableError, UsageError
from launcher.execute.command import Command
from launcher.execute.fanout import (
    DEFAULT_FORKS,
    FanoutInterrupted,
    FanoutResult,
    Ok,
    Outcome,
    Unreachable,
    run_all,
)
from launcher.execute.hostkeys import KnownHosts
from launcher.execute.ssh import SshConnector, SshOptions
from launcher.execute.transport import Result, Transport
from launcher.limit import limit_hosts
from launcher.model import Host


def command_of(words: Sequence[str]) -> Command:
    """One word: a shell string; several: an argv."""
    if not words or not "".join(words).strip():
        raise UsageError("fleet run: no command given after the host pattern")
    return Command.shell(words[0]) if len(words) == 1 else Command(argv=tuple(words))


def _status(outcome: Outcome[Result]) -> tuple[str, str]:
    """(status word, detail) of one host."""
    if isinstance(outcome, Ok):
        return ("ok" if outcome.value.ok else "failed"), f"exit {outcome.value.exit_status}"
    if isinstance(outcome, Unreachable):
        err = outcome.error
        detail = err.reason if isinstance(err, UnreachableError) else str(err)
        return "unreachable", detail.removeprefix(f"{outcome.host.name}: ")
    return "failed", outcome.message.removeprefix(f"{outcome.host.name}: ")


def exit_code(result: FanoutResult[Result]) -> ExitCode:
    good = sum(1 for o in result.outcomes if _status(o)[0] == "ok")
    if good == len(result.outcomes):
        return ExitCode.OK
    return ExitCode.FAILED if good == 0 else ExitCode.PARTIAL


def _text_lines(result: FanoutResult[Result]) -> list[str]:
    lines = []
    for outcome in result.outcomes:
        name = outcome.host.name
        word, detail = _status(outcome)
        lines.append(f"{name} | {word} | {detail}")
        if isinstance(outcome, Ok):
            for stream, text in (("stdout", outcome.value.stdout_text),
                                 ("stderr", outcome.value.stderr_text)):
                lines.extend(f"{name} | {stream} | {line}" for line in text.splitlines())
    return lines


def _json_doc(result: FanoutResult[Result]) -> dict[str, object]:
    hosts = []
    for outcome in result.outcomes:
        word, detail = _status(outcome)
        entry: dict[str, object] = {"host": outcome.host.name, "status": word}
        if isinstance(outcome, Ok):
            entry.update(exit_status=outcome.value.exit_status,
                         stdout=outcome.value.stdout_text, stderr=outcome.value.stderr_text)
        else:
            entry["error"] = detail
        hosts.append(entry)
    return {"hosts": hosts}


def _summary(result: FanoutResult[Result]) -> str:
    counts = {"ok": 0, "failed": 0, "unreachable": 0}
    for outcome in result.outcomes:
        counts[_status(outcome)[0]] += 1
    return (f"fleet: {len(result.outcomes)} hosts: {counts['ok']} ok, {counts['failed']} failed, "
            f"{counts['unreachable']} unreachable")


def _report(result: FanoutResult[Result], as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(_json_doc(result), indent=2))
    else:
        for line in _text_lines(result):
            click.echo(line)
    click.echo(_summary(result), err=True)


@cli.command("run")
@inventory_option
@click.option("--forks", type=click.IntRange(min=1), default=DEFAULT_FORKS, show_default=True,
              help="Hosts worked on at the same time.")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=60.0,
              show_default=True, help="Seconds the command may run on each host.")
@click.option("--connect-timeout", type=click.FloatRange(min=0, min_open=True), default=10.0,
              show_default=True, help="Seconds for TCP connect and for the SSH banner.")
@click.option("--known-hosts", "known_hosts", multiple=True, metavar="FILE",
              help="Extra known_hosts file (repeatable); ~/.ssh/known_hosts is always read.")
@click.option("--trust-new-hosts", is_flag=True,
              help="Record the keys of hosts never seen before (changed keys are still refused).")
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON.")
@limit_option(whole_groups=False)
@click.argument("pattern")
@click.argument("words", nargs=-1, required=True, metavar="-- CMD...")
def run_command(
    inventory_path: str,
    forks: int,
    timeout: float,
    connect_timeout: float,
    known_hosts: tuple[str, ...],
    trust_new_hosts: bool,
    as_json: bool,
    limit_pattern: str | None,
    pattern: str,
    words: tuple[str, ...],
) -> None:
    """Run CMD on the hosts of PATTERN and report each host's exit, stdout and stderr."""
    command = command_of(words)
    inventory = load_sources(inventory_path)
    hosts = limit_hosts(inventory, select(inventory, pattern), limit_pattern, what=f"pattern {pattern!r}")
    known = KnownHosts.for_operator(known_hosts, trust_new=trust_new_hosts)
    options = ssh_settings(SshOptions(connect_timeout=connect_timeout, banner_timeout=connect_timeout))

    def one(host: Host, transport: Transport) -> Result:
        return transport.run(command, timeout=timeout)

    with execute_log_to_stderr(), SshConnector(known, options) as connector:
        try:
            result = run_all(hosts, one, connector=connector, forks=forks)
        except FanoutInterrupted as interrupted:
            _report(interrupted.partial, as_json)
            raise
    _report(result, as_json)
    raise click.exceptions.Exit(int(exit_code(result)))
