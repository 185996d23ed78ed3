"""``fleet restart`` and ``fleet rollback``: rolling restarts and rollbacks (see docs/rolling.md).

Exit codes: 0 every batch healthy; 1 a batch failed (the rollout halted, the failed groups were
put back on their previous generation where possible, later batches untouched); 2 bad input
or a refused rollout (one replica without --force, PD without --surge ...); 130 interrupted.
"""

from __future__ import annotations

import sys
from contextlib import ExitStack
from dataclasses import replace
from typing import Sequence

import click

from launcher.cli import cli
from launcher.cli.common import bench_gate_option, connector as _connector, progress, ssh_options as _ssh_options
from launcher.cli.metrics import TargetsHook, after_change, checked_targets_path, targets_file_option
from launcher.config.patterns import select
from launcher.deploy.session import Connect, Target
from launcher.deploy.secrets import resolve
from launcher.errors import UsageError
from launcher.model import Playbook
from launcher.output import Progress, dumps, print_table, table
from launcher.pipeline import deployment, load_inputs, target_of, unlocked_by
from launcher.rolling.roll import Action, RollOptions, RollReport, roll, up_rolling
from launcher.rolling.router_api import RouterClient, RouterError


def rolling_options(
    playbook: Playbook,
    *,
    rolling: bool,
    max_unavailable: str | None,
    drain_timeout_s: float | None,
    **kw: object,
) -> RollOptions:
    """Flags over the playbook's ``rollout``; without --rolling and a rolling rollout, one batch."""
    ro = playbook.rollout
    if rolling or ro.strategy == "rolling":
        budget: str | int = max_unavailable if max_unavailable is not None else ro.max_unavailable
        return RollOptions(
            max_unavailable=budget,
            drain_timeout_s=drain_timeout_s if drain_timeout_s is not None else float(ro.drain_timeout_s),
            **kw,  # type: ignore[arg-type]
        )
    if max_unavailable is not None:
        raise UsageError("--max-unavailable needs --rolling (or rollout: {strategy: rolling} in the playbook)")
    kw = dict(kw, force=True)
    return RollOptions(
        max_unavailable="100%",
        drain_timeout_s=drain_timeout_s if drain_timeout_s is not None else float(ro.drain_timeout_s),
        **kw,  # type: ignore[arg-type]
    )


def bench_gate_wanted(playbook: Playbook, flag: bool | None) -> bool:
    """``--bench-gate`` / ``--no-bench-gate``, else the playbook's ``rollout.bench_gate``.  A PD
    deployment rolls by cohort switch, which is not gated (docs/bench.md): refused."""
    if not (playbook.rollout.bench_gate is not None if flag is None else flag):
        return False
    if "prefill" in playbook.placement:
        raise UsageError(f"--bench-gate: PD deployment {playbook.name} rolls by cohort switch, which is not "
                         "bench-gated (docs/bench.md)")  # fmt: skip
    return True


def with_bench_gate(options: RollOptions, playbook: Playbook, target: Target, flag: bool | None) -> RollOptions:
    """``options`` with the rollout's bench gate when :func:`bench_gate_wanted` (the caller has
    checked that the rollout is rolling)."""
    if not bench_gate_wanted(playbook, flag):
        return options
    from launcher.bench.gate import gate_for

    return replace(options, gate=gate_for(playbook, target.deployment, target.secrets))


def print_roll_report(report: RollReport, as_json: bool) -> None:
    if as_json:
        click.echo(
            dumps(
                {
                    "deployment": report.deployment,
                    "action": report.action,
                    "batches": [list(b) for b in report.batches],
                    "groups": [
                        {
                            "group": g.group, "batch": g.batch, "outcome": g.outcome, "hosts": list(g.hosts),
                            "generation_before": g.generation_before, "generation_after": g.generation_after,
                            "drain": g.drain, "detail": g.detail,
                        }
                        for g in report.groups
                    ],
                    "notes": list(report.notes),
                    "errors": list(report.errors),
                    "exit_code": int(report.exit_code),
                }
            )
        )  # fmt: skip
        return
    rows = [
        (
            str(g.batch) if g.batch else "-", g.group, ",".join(g.hosts), g.outcome,
            "-" if g.generation_before is None else str(g.generation_before),
            "-" if g.generation_after is None else str(g.generation_after), g.drain, g.detail,
        )
        for g in report.groups
    ]  # fmt: skip
    print_table(table(("batch", "group", "hosts", "outcome", "gen before", "gen after", "drain", "detail"), rows,
                      title=f"{report.deployment}: {report.action}"))  # fmt: skip
    for note in report.notes:
        click.echo(f"fleet: note: {note}", err=True)
    for group, detail in report.details.items():
        click.echo(f"--- {group}: last log lines", err=True)
        for line in detail.splitlines():
            click.echo(f"    {line}", err=True)
    for err in report.errors:
        click.echo(f"fleet: error: {err}", err=True)


def _routers(urls: Sequence[str]) -> tuple[RouterClient, ...]:
    return tuple(RouterClient(u) for u in urls)


def planned_routers(target: Target) -> tuple[str, ...]:
    """The deployment's own router (a ``router`` placement in front of single/multinode
    replicas), reached at its host's SSH address: what a rolling restart drains through when no
    ``--router`` is given.  PD routers are not: their workers are prefill/decode pairs, which
    roll by cohort behind a front router."""
    if any(d.unit.role in ("prefill", "decode") for d in target.units):
        return ()
    hosts = {h.name: h for h in target.hosts}
    return tuple(
        f"http://{hosts[d.host].address}:{d.unit.ports['router']}"
        for d in target.units
        if d.unit.role == "router" and d.host in hosts and "router" in d.unit.ports
    )


def drain_router_urls(given: Sequence[str], target: Target) -> tuple[str, ...]:
    """``--router`` as given, else the deployment's own routers that answer (one that does not
    -- not deployed yet, or down -- is named and left out: groups then restart undrained)."""
    if given:
        return tuple(given)
    answering = []
    for url in planned_routers(target):
        try:
            RouterClient(url).workers()
        except RouterError as err:
            click.echo(f"fleet: note: the deployment's router does not answer ({err}); groups are not "
                       "drained through it", err=True)  # fmt: skip
            continue
        click.echo(f"fleet: note: draining through the deployment's router {url} (--router overrides)", err=True)
        answering.append(url)
    return tuple(answering)


def _common(f: click.decorators.FC) -> click.decorators.FC:
    for opt in reversed(
        (
            click.option("--max-unavailable", "max_unavailable", default=None, metavar="N|N%",
                         help="Groups out of service at once (default: the playbook's rollout, else 1)."),
            click.option("--role", default=None, help="Only groups of this role (not for PD)."),
            click.option("--limit", "limit_pattern", default=None, help="Only groups on hosts matching this pattern (whole groups)."),
            click.option("--force", is_flag=True, help="Allow restarting a single replica / all replicas at once."),
            click.option("--drain-timeout", "drain_timeout_s", type=float, default=None,
                         help="Seconds to wait for in-flight requests (default: the playbook's rollout)."),
            click.option("--router", "router_urls", multiple=True, metavar="URL",
                         help="A router (sglang-router 0.3 /workers API) serving this deployment (repeatable); "
                              "PD: the front router whose workers are the cohorts' routers."),
            click.option("--surge", "surge_pattern", default=None, help="PD: spare hosts for the new cohort."),
            click.option("--timeout", "timeout_s", type=float, default=None, help="Health deadline in seconds."),
            click.option("--json", "as_json", is_flag=True, help="Print the result as JSON."),
            click.option("--quiet", "-q", is_flag=True, help="No progress output."),
            click.option("--break-lock", is_flag=True, help="Take the deploy lock even if another deploy holds it."),
            click.option("--secret", "secrets", multiple=True, metavar="NAME[=@FILE|=env:VAR]", help="Secret source override."),
        )
    ):  # fmt: skip
        f = opt(f)
    return targets_file_option(f)


def _run(
    action: Action, playbook_path: str, inventory_path: str, forks: int, trust_new_hosts: bool,
    known_hosts: tuple[str, ...], rolling: bool, max_unavailable: str | None, role: str | None,
    limit_pattern: str | None, force: bool, drain_timeout_s: float | None, router_urls: tuple[str, ...],
    surge_pattern: str | None, timeout_s: float | None, as_json: bool, quiet: bool, break_lock: bool,
    secrets: tuple[str, ...], targets_file: str | None, bench_gate: bool | None = None,
) -> None:  # fmt: skip
    inputs = load_inputs(playbook_path, inventory_path)
    inventory, playbook = inputs.inventory, inputs.playbook
    rolls = rolling or playbook.rollout.strategy == "rolling"
    if bench_gate and not rolls:
        raise UsageError("--bench-gate gates the batches of a rolling restart: give --rolling "
                         "(or rollout.strategy: rolling in the playbook)")  # fmt: skip
    limit = frozenset(h.name for h in select(inventory, limit_pattern)) if limit_pattern else None
    target = unlocked_by(target_of(deployment(inputs), None, resolve(playbook.secrets, secrets)), playbook_path,
                         inventory_path)  # fmt: skip
    path = checked_targets_path(playbook, targets_file)
    hook = None if path is None else TargetsHook(path, target, known_hosts, trust_new_hosts, forks)
    options = rolling_options(
        playbook, rolling=rolling or action == "rollback", max_unavailable=max_unavailable,
        drain_timeout_s=drain_timeout_s, role=role, limit=limit, force=force, forks=forks,
        timeout_s=timeout_s, break_lock=break_lock, after_batch=hook,
    )  # fmt: skip
    if action == "restart" and rolls:
        options = with_bench_gate(options, playbook, target, bench_gate)
    with ExitStack() as stack:
        connector = stack.enter_context(_connector(known_hosts, trust_new_hosts))
        shown = progress(stack, quiet or as_json)
        if surge_pattern is not None or any(d.unit.role in ("prefill", "decode") for d in target.units):
            from launcher.rolling import cohort

            surge = tuple(h.name for h in select(inventory, surge_pattern)) if surge_pattern else ()
            report = cohort.switch(
                inputs, target, surge, connector.connect, _routers(router_urls), options, shown,
                action=action, secret_flags=secrets,
            )  # fmt: skip
        else:
            routers = _routers(drain_router_urls(router_urls, target))
            report = roll(target, connector.connect, routers, options, shown, action=action)
    print_roll_report(report, as_json)
    sys.exit(after_change(hook, int(report.exit_code)))


@cli.command("restart")
@click.argument("playbook")
@_ssh_options
@click.option("--rolling", is_flag=True, help="Restart group by group (default: the playbook's rollout).")
@bench_gate_option
@_common
def restart_command(playbook: str, inventory_path: str, rolling: bool, **kw: object) -> None:
    """Restart PLAYBOOK's engine groups: with --rolling, at most --max-unavailable groups at a
    time, each taken out of its routers and drained first, health-gated (and bench-gated, see
    --bench-gate) and put back; a failed batch is put back on its previous generation and the
    rollout halts."""
    _run("restart", playbook, inventory_path, rolling=rolling, **kw)  # type: ignore[arg-type]


@cli.command("rollback")
@click.argument("playbook")
@_ssh_options
@_common
def rollback_command(playbook: str, inventory_path: str, **kw: object) -> None:
    """Return every group of PLAYBOOK to the generation kept in prev/ on its hosts, rolling
    (the generation replaced moves into prev/: rolling back twice goes forward again)."""
    _run("rollback", playbook, inventory_path, rolling=True, **kw)  # type: ignore[arg-type]


def run_rolling_up(
    playbook: Playbook,
    target: Target,
    connect: Connect,
    progress: Progress,
    *,
    forks: int,
    timeout_s: float | None,
    break_lock: bool,
    as_json: bool,
    router_urls: Sequence[str] = (),
    targets: TargetsHook | None = None,
    bench_gate: bool | None = None,
) -> int:
    """``fleet up`` of a rolling playbook (see :func:`launcher.rolling.roll.up_rolling`): prints
    the rollout report and returns the exit code.  ``targets``: rewritten after each batch and
    at the end.  ``bench_gate``: ``--bench-gate`` / ``--no-bench-gate`` (see :func:`with_bench_gate`)."""
    options = rolling_options(
        playbook, rolling=True, max_unavailable=None, drain_timeout_s=None, forks=forks, timeout_s=timeout_s,
        break_lock=break_lock, after_batch=targets,
    )  # fmt: skip
    options = with_bench_gate(options, playbook, target, bench_gate)
    report = up_rolling(target, connect, _routers(drain_router_urls(router_urls, target)), options, progress)
    print_roll_report(report, as_json)
    return after_change(targets, int(report.exit_code))
