"""``fleet restart`` and ``fleet rollback``: rolling restarts and rollbacks (see docs/rolling.md).

Exit codes: 0 every batch healthy; 1 a batch failed (the rollout halted, the failed groups were
put back on their previous generation where possible, later batches untouched); 2 bad input
or a refused rollout (one replica without --force, PD without --surge, a group fleet watch placed on a
spare host ...); 130 interrupted.
"""

from __future__ import annotations

import sys
from contextlib import ExitStack
from functools import partial

import click

from launcher.cli import cli
from launcher.cli.common import bench_gate_option, connector as _connector, limit_option, progress
from launcher.cli.common import ssh_options as _ssh_options
from launcher.cli.metrics import targets_file_option, targets_hook
from launcher.config.patterns import select
from launcher.deploy.publish import after_change, checked_targets_path
from launcher.deploy.session import Target
from launcher.cli.history import remember
from launcher.deploy.secrets import resolve, resolve_readable
from launcher.history import started_now as history_started
from launcher.errors import UsageError
from launcher.limit import limit_hosts
from launcher.output import dumps, print_table, table
from launcher.recap import Recap, column, lines as recap_lines, recap, to_json as recap_json
from launcher.pipeline import Inputs, deployment, limit_checked, load_inputs, target_of, unlocked_by
from launcher.rolling.options import rolling_options, with_bench_gate
from launcher.rolling.roll import Action, RollReport, roll
from launcher.rolling.routers import clients, drain_router_urls
from launcher.watch.where import refuse_moved, where


def roll_recap(report: RollReport, *, check: bool = False, verb: str | None = None) -> Recap:
    """The run summary of a rollout: restart groups per host (a group on two hosts counts on
    each)."""
    rows = [(h, column(g.outcome)) for g in report.groups for h in g.hosts]
    title = f"{report.deployment}: {verb or report.action}" + (" --check" if check else "")
    return recap(title, rows, int(report.exit_code), check=check, what="groups")


def print_roll_report(report: RollReport, as_json: bool, *, check: bool = False, verb: str | None = None) -> None:
    """The groups' table (stdout), notes, failures' log lines and errors (stderr), then the run
    summary -- or all of it as one JSON document."""
    summary = roll_recap(report, check=check, verb=verb)
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
                    "crossing": report.crossing.as_json() if report.crossing is not None else None,
                    "exit_code": int(report.exit_code),
                    "recap": recap_json(summary),
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
    click.echo("\n".join(recap_lines(summary)))


def remember_roll(started: tuple[str, float], playbook: str, target: Target, report: RollReport) -> None:
    """The rollout in the local history (``fleet history``): one outcome per group and host."""
    remember(started, playbook, target.deployment, [h.name for h in target.hosts],
             [(h, g.group, g.outcome) for g in report.groups for h in g.hosts], int(report.exit_code))  # fmt: skip


def _common(f: click.decorators.FC) -> click.decorators.FC:
    for opt in reversed(
        (
            click.option("--max-unavailable", "max_unavailable", default=None, metavar="N|N%",
                         help="Groups out of service at once (default: the playbook's rollout, else 1)."),
            click.option("--role", default=None, help="Only groups of this role (not for PD)."),
            limit_option(whole_groups=True),
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
            click.option("--check", "-C", is_flag=True, help="Show the batches and what each group would become, read "
                                                            "from every host that answers; touch nothing."),
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
    check: bool, secrets: tuple[str, ...], targets_file: str | None, bench_gate: bool | None = None,
) -> None:  # fmt: skip
    started = history_started()
    inputs = load_inputs(playbook_path, inventory_path)
    limit_checked(inputs, limit_pattern)
    inventory, playbook = inputs.inventory, inputs.playbook
    rolls = rolling or playbook.rollout.strategy == "rolling"
    if bench_gate and not rolls:
        raise UsageError("--bench-gate gates the batches of a rolling restart: give --rolling "
                         "(or rollout.strategy: rolling in the playbook)")  # fmt: skip
    # --check reads no secret value: a rollout's decisions do not depend on them.
    values = resolve_readable(playbook.secrets, secrets)[0] if check else resolve(playbook.secrets, secrets)

    def planned(i: Inputs) -> Target:
        return unlocked_by(target_of(deployment(i), None, values), playbook_path, inventory_path)

    target = planned(inputs)
    if any(p.spares for p in playbook.placement.values()):  # a group the watch placed on a spare refuses
        with _connector(known_hosts, trust_new_hosts) as connector:
            refuse_moved(where(inputs, planned, connector.connect, forks), action, playbook_path)
    limit = None
    if limit_pattern is not None:
        limit = frozenset(h.name for h in limit_hosts(inventory, target.hosts, limit_pattern,
                                                      what=f"deployment {target.deployment}"))  # fmt: skip
    path = None if check else checked_targets_path(playbook, targets_file)
    hook = targets_hook(path, target, known_hosts, trust_new_hosts, forks)
    options = rolling_options(
        playbook, rolling=rolling or action == "rollback", max_unavailable=max_unavailable,
        drain_timeout_s=drain_timeout_s, role=role, limit=limit, force=force, forks=forks,
        timeout_s=timeout_s, break_lock=break_lock, after_batch=hook,
    )  # fmt: skip
    if action == "restart" and rolls and not check:
        options = with_bench_gate(options, playbook, target, bench_gate)
    if check:
        from launcher.rolling.check import check_roll

        surge = tuple(h.name for h in select(inventory, surge_pattern)) if surge_pattern else ()
        with _connector(known_hosts, trust_new_hosts) as connector:
            report = check_roll(target, connector.connect, options, action=action, surge=surge)
        print_roll_report(report, as_json, check=True)
        sys.exit(int(report.exit_code))
    with ExitStack() as stack:
        connector = stack.enter_context(_connector(known_hosts, trust_new_hosts))
        shown = progress(stack, quiet or as_json)
        if surge_pattern is not None or any(d.unit.role in ("prefill", "decode") for d in target.units):
            from launcher.rolling import cohort

            surge = tuple(h.name for h in select(inventory, surge_pattern)) if surge_pattern else ()
            report = cohort.switch(
                inputs, target, surge, connector.connect, clients(router_urls), options, shown,
                action=action, secret_flags=secrets,
            )  # fmt: skip
        else:
            routers = clients(drain_router_urls(router_urls, target, partial(click.echo, err=True)))
            report = roll(target, connector.connect, routers, options, shown, action=action)
    print_roll_report(report, as_json)
    remember_roll(started, playbook_path, target, report)
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
