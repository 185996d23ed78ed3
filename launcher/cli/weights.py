"""``fleet weights stage|verify|warm``: put a deployment's model weights on exactly the hosts
that run it, at the paths its units read, prove every copy is the same, and read them into the
hosts' page caches before ``up``.

Exit codes: 0 every host has a matching copy; 1 some host failed, differs, or lacks the disk
space (each named on stderr); 2 bad input.
"""

from __future__ import annotations

import sys
from contextlib import contextmanager
from typing import Iterator, Sequence

import click

from launcher.cli import cli
from launcher.cli.common import connector as _connector, execute_log_to_stderr as _execute_log_to_stderr
from launcher.cli.common import limit_option, ssh_options as _ssh_options
from launcher.cli.history import remember
from launcher.history import started_now as history_started
from launcher.output import dumps, print_table, table
from launcher.plan import deployment_name
from launcher.recap import Recap, lines as recap_lines, recap, to_json as recap_json
from launcher.pipeline import load_inputs
from launcher.deploy.secrets import resolve
from launcher.weights.disk import gib
from launcher.weights.hub import stage_hub
from launcher.weights.stage import HostResult, Progress, Report, parse_source, source_manifests, stage, verify
from launcher.weights.wanted import deployment_needs
from launcher.weights.warm import Warmed, warm


def report_json(report: Report) -> dict[str, object]:
    return {
        "models": [{"model": m.model, "revision": m.revision, "files": len(m.files), "bytes": m.size}
                   for m in report.models],
        "hosts": [{"host": h.host, "status": h.status, "files_transferred": h.files, "bytes_transferred": h.bytes,
                   "mismatches": [{"dir": d, "file": x.path, "problem": x.problem, "detail": x.detail}
                                  for d, x in h.mismatches],
                   "received_from": dict(h.senders), "error": h.error} for h in report.hosts],
        "seconds": round(report.seconds, 3),
        "ok": report.ok,
    }  # fmt: skip


class _Bars:
    """One rich progress bar per receiving host: bytes, rate, ETA (on a terminal only)."""

    def __init__(self) -> None:
        from rich.console import Console
        from rich.progress import (BarColumn, DownloadColumn, Progress as RichProgress, TextColumn,
                                   TimeRemainingColumn, TransferSpeedColumn)  # fmt: skip

        self._p = RichProgress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(),
                               TransferSpeedColumn(), TimeRemainingColumn(), console=Console(stderr=True))  # fmt: skip
        self._tasks: dict[str, object] = {}

    def begin(self, host: str, total: int) -> None:
        self._tasks[host] = self._p.add_task(host, total=total)

    def advance(self, host: str, done: int) -> None:
        self._p.update(self._tasks[host], completed=done)  # type: ignore[arg-type]

    def end(self, host: str, ok: bool) -> None:
        if host in self._tasks:
            self._p.update(self._tasks[host], description=f"{host} {'ok' if ok else 'FAILED'}")  # type: ignore[arg-type]

    @contextmanager
    def shown(self) -> Iterator[Progress]:
        with self._p:
            yield self


@contextmanager
def _progress(as_json: bool) -> Iterator[Progress | None]:
    if as_json or not sys.stderr.isatty():
        yield None
        return
    with _Bars().shown() as bars:
        yield bars


def _print(report: Report, verb: str, as_json: bool, summary: Recap | None = None) -> None:
    """The hosts' table (or JSON, with ``summary`` under ``recap``), each host's problem on
    stderr, the one-line total, then ``summary`` (``stage``: the run summary)."""
    if as_json:
        click.echo(dumps({**report_json(report), **({"recap": recap_json(summary)} if summary is not None else {})}))
    else:
        rows = [(h.host, h.status, str(h.files), str(h.bytes), str(len(h.mismatches)),
                 ", ".join(f"{s} {n}" for s, n in h.senders), h.error) for h in report.hosts]
        print_table(table(("host", "status", "files moved", "bytes moved", "mismatches", "from", "error"), rows))
    for h in report.hosts:
        for d, x in h.mismatches if verb == "verify" else ():
            click.echo(f"fleet: weights: {h.host}: {d}/{x.line()}", err=True)
        if h.error:
            click.echo(f"fleet: weights: {h.host}: {h.error}", err=True)
    models = ", ".join(f"{m.model}@{m.revision} ({gib(m.size)})" for m in report.models)
    bad = [h.host for h in report.hosts if h.status != "ok"]
    moved = sum(h.bytes for h in report.hosts)
    click.echo(f"fleet: weights {verb}: {models}: {len(report.hosts) - len(bad)}/{len(report.hosts)} host(s) ok"
               + (f", {moved} bytes transferred in {report.seconds:.1f}s" if verb == "stage" else "")
               + (f"; failed: {', '.join(bad)}" if bad else ""), err=True)
    if summary is not None and not as_json:
        click.echo("\n".join(recap_lines(summary)))


STAGE_COLUMNS = ("staged", "unchanged", "failed", "unreachable")


def stage_outcome(h: HostResult) -> str:
    """A host's column: ``staged`` when files moved to it, ``unchanged`` when none had to."""
    return h.status if h.status != "ok" else "staged" if h.files else "unchanged"


def stage_recap(deployment: str, report: Report) -> Recap:
    """``fleet weights stage``'s run summary: per host, its copy staged (files moved to it),
    unchanged (already matching), failed or unreachable."""
    rows = [(h.host, stage_outcome(h)) for h in report.hosts]
    code = 0 if report.ok else 1
    why = ("every host has a matching copy" if report.ok
           else "some hosts have no matching copy (errors above); the others' copies are complete")  # fmt: skip
    return recap(f"{deployment}: weights stage", rows, code, what="copies", columns=STAGE_COLUMNS, explained=why)


def _staged(started: tuple[str, float], playbook: str, deployment: str, report: Report, as_json: bool) -> None:
    """Prints the stage's report with its run summary, records the run, exits with its status."""
    summary = stage_recap(deployment, report)
    _print(report, "stage", as_json, summary)
    remember(started, playbook, deployment, [h.host for h in report.hosts],
             [(h.host, "weights", stage_outcome(h)) for h in report.hosts], summary.exit_code)
    sys.exit(summary.exit_code)


@cli.group("weights")
def weights_group() -> None:
    """Stage model weights on the hosts of a deployment and verify them."""


@weights_group.command("stage")
@click.argument("playbook")
@_ssh_options
@click.option("--source", "source_text", required=True, metavar="hub|DIR|HOST:PATH",
              help="hub: each host downloads with the hub's client (needs --revision). DIR on this host or PATH "
                   "on an inventory host: holds each model at its name below the models dir (<org>/<name> for a "
                   "repo id).")
@click.option("--revision", default=None, help="hub: the revision to download (commit or tag).  Else the revision "
                                               "to record (default: the source manifest's, else a content hash).")
@click.option("--secret", "secret_flags", multiple=True, metavar="HF_TOKEN=@FILE|HF_TOKEN=env:VAR",
              help="hub: where the playbook's HF_TOKEN comes from (as for fleet up); it reaches each host as a "
                   "0600 file, never argv.")
@click.option("--full", is_flag=True, help="Hash the hosts' copies (finds same-size corruption; reads every byte).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.option("-q", "--quiet", is_flag=True, help="No progress bars.")
@limit_option(whole_groups=False)
def stage_command(playbook: str, inventory_path: str, known_hosts: tuple[str, ...], trust_new_hosts: bool,
                  forks: int, source_text: str, revision: str | None, secret_flags: tuple[str, ...], full: bool,
                  as_json: bool, quiet: bool, limit_pattern: str | None) -> None:  # fmt: skip
    """Put every model PLAYBOOK's units read (target, draft) at the path they read it from, on
    every host that runs one of them and no other.  The source is read once; hosts that have a
    file pass it on to the next (rsync over SSH, with a per-run key each host may use only to
    read that model dir).  Free space is checked on every host first; a re-run moves only what
    is missing or different, and each copy gets a manifest (fleet-weights.json) last.  Ends with
    the run summary and is recorded in fleet history."""
    started = history_started()
    inputs = load_inputs(playbook, inventory_path)
    needs = deployment_needs(inputs, limit=limit_pattern)
    if source_text == "hub":
        refs = [r for r in inputs.playbook.secrets if r.name == "HF_TOKEN"]
        token = resolve(refs, secret_flags).get("HF_TOKEN")
        with _execute_log_to_stderr(), _connector(known_hosts, trust_new_hosts) as connector, \
                _progress(as_json or quiet) as bars:  # fmt: skip
            report = stage_hub(inputs.inventory, needs, connector, revision=revision, token=token, full=full,
                               forks=forks, progress=bars)
        _staged(started, playbook, deployment_name(inputs.playbook.name), report, as_json)
    source = parse_source(source_text, inputs.inventory)
    with _execute_log_to_stderr(), _connector(known_hosts, trust_new_hosts) as connector, \
            _progress(as_json or quiet) as bars:  # fmt: skip
        report = stage(inputs.inventory, needs, source, connector, revision=revision, full=full, forks=forks,
                       progress=bars)
    _staged(started, playbook, deployment_name(inputs.playbook.name), report, as_json)


@weights_group.command("verify")
@click.argument("playbook")
@_ssh_options
@click.option("--source", "source_text", default=None, metavar="DIR|HOST:PATH",
              help="Compare with this source (default: with the copy most hosts have).")
@click.option("--full", is_flag=True, help="Hash every file on every host (in parallel), not only sizes and mtimes.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@limit_option(whole_groups=False)
def verify_command(playbook: str, inventory_path: str, known_hosts: tuple[str, ...], trust_new_hosts: bool,
                   forks: int, source_text: str | None, full: bool, as_json: bool,
                   limit_pattern: str | None) -> None:  # fmt: skip
    """Check every host's copy of PLAYBOOK's models: manifest present and the same revision
    everywhere, every file there with its size and mtime (--full: its sha256).  Names host and
    file of every mismatch; exit 1 if any."""
    inputs = load_inputs(playbook, inventory_path)
    needs = deployment_needs(inputs, limit=limit_pattern)
    source = parse_source(source_text, inputs.inventory) if source_text else None
    with _execute_log_to_stderr(), _connector(known_hosts, trust_new_hosts) as connector:
        expected = source_manifests(needs, source, connector, inputs.inventory, None, full=full) if source else None
        report = verify(inputs.inventory, needs, connector, expected=expected, full=full, forks=forks)
    _print(report, "verify", as_json)
    sys.exit(0 if report.ok else 1)


def warm_json(warmed: tuple[Warmed, ...]) -> dict[str, object]:
    return {"hosts": [{"host": w.host, "bytes": w.total, "resident_before": w.before, "resident_after": w.after,
                       "seconds": round(w.seconds, 3)} for w in warmed]}  # fmt: skip


@weights_group.command("warm")
@click.argument("playbook")
@_ssh_options
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@limit_option(whole_groups=False)
def warm_command(playbook: str, inventory_path: str, known_hosts: tuple[str, ...], trust_new_hosts: bool,
                 forks: int, as_json: bool, limit_pattern: str | None) -> None:  # fmt: skip
    """Read PLAYBOOK's staged weights into the page cache of every host that runs them (vmtouch
    -t on the host paths the units mount), so the engines' first load reads memory, not disk.
    Reports per host the bytes resident before and after.  Needs vmtouch on the hosts."""
    inputs = load_inputs(playbook, inventory_path)
    with _execute_log_to_stderr(), _connector(known_hosts, trust_new_hosts) as connector:
        warmed = warm(inputs.inventory, deployment_needs(inputs, limit=limit_pattern), connector, forks=forks)
        warm_note(warmed)
    if as_json:
        click.echo(dumps(warm_json(warmed)))
    else:
        print_table(table(("host", "size", "resident before", "resident after", "seconds"),
                          [(w.host, gib(w.total), gib(w.before), gib(w.after), f"{w.seconds:.1f}") for w in warmed]))


def warm_note(warmed: Sequence[Warmed]) -> None:
    """``fleet weights warm`` (also ``fleet up --warm``) says what it read in one line on stderr."""
    click.echo(f"fleet: weights warm: {len(warmed)} host(s), {sum(w.after - w.before for w in warmed)} bytes read "
               "into the page cache", err=True)
