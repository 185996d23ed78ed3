"""``fleet up / status / logs / down / unlock / demo``: deploy a playbook over SSH.

Every command loads the inventory, catalog and playbook, plans and renders (pure), then talks to
the hosts through strictly checked SSH (``--known-hosts`` files are read besides
``~/.ssh/known_hosts``; ``--trust-new-hosts`` records unknown keys).  Exit codes: 0 ok, 1 a
step failed, 2 bad input, 3 partial (some groups up, some failed), 130 interrupted.
"""

from __future__ import annotations

import json
import sys
from contextlib import ExitStack
from pathlib import Path
from typing import Iterator, Mapping, Sequence

import click

from launcher.cli import cli
from launcher.cli.common import bench_gate_option, connector as _connector, limit_option, progress, progress_display
from launcher.cli.common import sandbox_log_to_stderr, ssh_options as _ssh_options
from launcher.cli.metrics import targets_file_option, targets_hook
from launcher.cli.history import remember
from launcher.cli.preflight import gate, print_gate
from launcher.cli.rolling import print_roll_report, remember_roll
from launcher.cli.weights import warm_note
from launcher.flows.up import UpRequest, UpResult, up
from launcher.history import started_now as history_started
from launcher.deploy import orchestrate
from launcher.deploy.orchestrate import Options, Report
from launcher.deploy.publish import after_change, checked_targets_path
from launcher.deploy.session import Connect, Target
from launcher.deploy.secrets import resolve, resolve_readable
from launcher.deploy.status import LogLine, UnitStatus, logs, status
from launcher.deploy.status import probe as probe_crossing
from launcher.errors import ExitCode, FleetError, UsageError
from launcher.output import LinesProgress, dumps, print_table, table
from launcher.recap import Recap, column, lines as recap_lines, recap, to_json as recap_json
from launcher.pipeline import Inputs, deployment, limit_checked, load_inputs, load_target, narrowed, target_of, unlocked_by
from launcher.preflight.run import PreflightReport
from launcher.rolling.options import bench_gate_wanted
from launcher.watch.where import where
from launcher.weights.warm import Warmed


def report_recap(report: Report, target: Target, verb: str, *, check: bool = False,
                 exit_code: int | None = None) -> Recap:  # fmt: skip
    """The run summary of an up/down report over every host of ``target`` (``exit_code``: when
    the command's differs from the report's)."""
    code = int(report.exit_code) if exit_code is None else exit_code
    title = f"{target.deployment}: {verb}" + (" --check" if check else "")
    return recap(title, [(u.host, column(u.outcome, u.action)) for u in report.units], code, check=check,
                 hosts=[h.name for h in target.hosts])  # fmt: skip


def _print_report(report: Report, as_json: bool, summary: Recap | None = None) -> None:
    """The units' table (stdout), their failures' log lines and the errors (stderr), then the
    run summary (``summary``) -- or all of it as one JSON document."""
    if as_json:
        click.echo(
            dumps(
                {
                    "units": [
                        {
                            "host": u.host, "unit": u.unit, "group": u.group, "action": u.action,
                            "outcome": u.outcome, "reason": u.reason, "generation": u.generation,
                        }
                        for u in report.units
                    ],
                    "errors": list(report.errors),
                    "diff": report.diff,
                    "crossing": report.crossing.as_json() if report.crossing else None,
                    "exit_code": int(report.exit_code) if summary is None else summary.exit_code,
                    **({"recap": recap_json(summary)} if summary is not None else {}),
                }
            )
        )  # fmt: skip
        return
    if report.diff:
        click.echo(report.diff, nl=False)
    rows = [
        (u.host, u.unit, u.action, u.outcome, "-" if u.generation is None else str(u.generation), u.reason)
        for u in report.units
    ]
    print_table(table(("host", "unit", "action", "outcome", "gen", "reason"), rows))
    for u in report.units:
        if u.detail:
            click.echo(f"--- {u.host}/{u.unit}: last log lines", err=True)
            for line in u.detail.splitlines():
                click.echo(f"    {line}", err=True)
    if report.crossing is not None and report.crossing.ok:
        click.echo(report.crossing.evidence())
    for err in report.errors:
        click.echo(f"fleet: error: {err}", err=True)
    if summary is not None:
        click.echo("\n".join(recap_lines(summary)))


@cli.command("up")
@click.argument("playbook")
@_ssh_options
@limit_option(whole_groups=True)
@click.option("--check", "-C", is_flag=True, help="Show what would change on every host that answers; touch nothing.")
@click.option("--diff", "-D", is_flag=True, help="With --check: unified diff of every file that would change.")
@click.option("--timeout", "timeout_s", type=float, default=None, help="Health deadline in seconds (overrides recipes).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.option("--quiet", "-q", is_flag=True, help="No progress output.")
@click.option("--break-lock", is_flag=True,
              help="Take the deploy lock (and the preflight gate's claim) even if another run holds it.")
@click.option("--secret", "secrets", multiple=True, metavar="NAME[=@FILE|=env:VAR]", help="Secret source override.")
@click.option("--skip-preflight", is_flag=True, help="Do not run the cheap preflight checks first.")
@click.option("--router", "router_urls", multiple=True, metavar="URL",
              help="Routers serving this deployment (rolling rollouts drain groups out of them).")
@targets_file_option
@bench_gate_option
@click.option("--warm", is_flag=True, help="After preflight, read the staged weights into every host's page cache "
                                           "(fleet weights warm) before starting anything.")
@click.option("--take-over", is_flag=True, help="The deployment on the hosts belongs to another playbook of the same "
                                                "name: make it this playbook's (its units are replaced by this plan).")
def up_command(
    playbook: str, inventory_path: str, forks: int, trust_new_hosts: bool, known_hosts: tuple[str, ...],
    limit_pattern: str | None, check: bool, diff: bool, timeout_s: float | None, as_json: bool, quiet: bool,
    break_lock: bool, secrets: tuple[str, ...], skip_preflight: bool, router_urls: tuple[str, ...],
    targets_file: str | None, bench_gate: bool | None, warm: bool, take_over: bool,
) -> None:  # fmt: skip
    """Bring PLAYBOOK's units up (idempotent: unchanged units are left alone).  The cheap
    preflight checks run first (facts, GPUs, HCAs, GIDs, reachability, weights, ports) and stop
    the deploy before anything starts when one fails; --skip-preflight opts out."""
    started = history_started()
    if diff and not check:
        raise UsageError("--diff shows what --check would change: give --check too (fleet up never deploys "
                         "and diffs in one run)")  # fmt: skip
    inputs = load_inputs(playbook, inventory_path)
    limit_checked(inputs, limit_pattern)
    if bench_gate and inputs.playbook.rollout.strategy != "rolling":
        raise UsageError("--bench-gate gates the batches of a rolling rollout: the playbook needs rollout.strategy: rolling")
    if bench_gate:
        bench_gate_wanted(inputs.playbook, bench_gate)  # a PD deployment: refused before any host is asked
    if warm and check:
        raise UsageError("--warm reads the weights into the hosts' page caches: not with --check")
    unreadable: dict[str, str] = {}
    if check:  # a secret this control host cannot read makes its units' change unknown, not a stop
        secret_values, unreadable = resolve_readable(inputs.playbook.secrets, secrets)
    else:
        secret_values = resolve(inputs.playbook.secrets, secrets)  # a missing secret stops us before any host
    options = Options(forks=forks, check=check, diff=diff, timeout_s=timeout_s, break_lock=break_lock,
                      unknown_secrets=unreadable)  # fmt: skip
    targets = None if check else checked_targets_path(inputs.playbook, targets_file)
    request = UpRequest(
        inputs=inputs, playbook_path=playbook, inventory_path=inventory_path, secrets=secret_values, options=options,
        limit=limit_pattern, preflight=not skip_preflight, warm=warm, take_over=take_over, router_urls=router_urls,
        bench_gate=bench_gate, targets=lambda t: targets_hook(targets, t, known_hosts, trust_new_hosts, forks),
    )  # fmt: skip
    events = _UpShown(inputs, playbook, started, check=check, as_json=as_json, quiet=quiet or as_json)
    with _connector(known_hosts, trust_new_hosts) as connector:  # the gate's connections are the deploy's
        result = up(request, connector, events, lambda: progress_display(quiet or as_json or check))
    sys.exit(result.exit_code)


class _UpShown:
    """``fleet up``'s output of :func:`launcher.flows.up.up`'s events."""

    def __init__(self, inputs: Inputs, playbook: str, started: tuple[str, float], *, check: bool, as_json: bool,
                 quiet: bool) -> None:  # fmt: skip
        self.inputs, self.playbook, self.started = inputs, playbook, started
        self.check, self.as_json, self.quiet = check, as_json, quiet

    def note(self, line: str) -> None:
        if not self.quiet:
            click.echo(line, err=True)

    def drain_note(self, line: str) -> None:
        click.echo(line, err=True)

    def preflight(self, report: PreflightReport) -> None:
        print_gate(report, self.inputs, check=self.check)

    def warmed(self, warmed: Sequence[Warmed]) -> None:
        warm_note(warmed)

    def deployed(self, result: UpResult) -> None:
        assert result.target is not None
        if result.rolled is not None:
            print_roll_report(result.rolled, self.as_json, verb="up")
            remember_roll(self.started, self.playbook, result.target, result.rolled)
        elif result.report is not None:
            _print_report(result.report, self.as_json,
                          report_recap(result.report, result.target, "up", check=self.check,
                                       exit_code=result.exit_code))  # fmt: skip
            if not self.check:
                remember_report(self.started, self.playbook, result.target, result.report)


@cli.command("down")
@click.argument("playbook")
@_ssh_options
@limit_option(whole_groups=True)
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.option("--quiet", "-q", is_flag=True, help="No progress output.")
@click.option("--break-lock", is_flag=True, help="Take the deploy lock even if another deploy holds it.")
@click.option("--check", "-C", is_flag=True, help="Show what would be stopped and removed on every host that "
                                                  "answers; touch nothing.")  # fmt: skip
@targets_file_option
def down_command(
    playbook: str, inventory_path: str, forks: int, trust_new_hosts: bool, known_hosts: tuple[str, ...],
    limit_pattern: str | None, as_json: bool, quiet: bool, break_lock: bool, check: bool, targets_file: str | None,
) -> None:  # fmt: skip
    """Stop and remove PLAYBOOK's units (gateway first).  Images, caches and weights stay; each
    unit's last files stay in /etc/fleet/<deployment>/<unit>/prev/ (never its secrets)."""
    started = history_started()
    inputs = load_inputs(playbook, inventory_path)
    targets = None if check else checked_targets_path(inputs.playbook, targets_file)
    dep = deployment(inputs)
    target = target_of(dep, limit_pattern)
    with ExitStack() as stack:
        connector = stack.enter_context(_connector(known_hosts, trust_new_hosts))
        report = orchestrate.down(target, connector.connect, Options(forks=forks, break_lock=break_lock, check=check),
                                  progress(stack, quiet or as_json or check))  # fmt: skip
    _print_report(report, as_json, report_recap(report, target, "down", check=check))
    if check:
        sys.exit(int(report.exit_code))
    remember_report(started, playbook, target, report)
    hook = targets_hook(targets, target_of(dep), known_hosts, trust_new_hosts, forks)
    sys.exit(after_change(hook, int(report.exit_code)))


def remember_report(started: tuple[str, float], playbook: str, target: Target, report: Report) -> None:
    """The run in the local history (``fleet history``)."""
    remember(started, playbook, target.deployment, [h.name for h in target.hosts],
             [(u.host, u.unit, u.outcome) for u in report.units], int(report.exit_code))  # fmt: skip



@cli.command("unlock")
@click.argument("playbook")
@_ssh_options
@limit_option(whole_groups=False)
def unlock_command(
    playbook: str, inventory_path: str, forks: int, trust_new_hosts: bool, known_hosts: tuple[str, ...],
    limit_pattern: str | None,
) -> None:  # fmt: skip
    """Break PLAYBOOK's deploy lock and preflight claim on every host (only when the run holding
    it is dead).  Ends with the run summary and is recorded in fleet history."""
    started = history_started()
    target = load_target(playbook, inventory_path, limit_pattern, None, split_ok=True)
    hosts = [h.name for h in target.hosts]
    try:
        with _connector(known_hosts, trust_new_hosts) as connector:
            owners = orchestrate.unlock(target, connector.connect, forks)
    except FleetError as err:  # the error is the command's last line; some hosts' locks may be gone by then
        code = int(err.exit_code)
        click.echo("\n".join(recap_lines(unlock_recap(target.deployment, {}, hosts, code))))
        remember(started, playbook, target.deployment, hosts, [(h, "lock", "unknown") for h in hosts], code)
        raise
    for host, had in sorted(owners.items()):
        click.echo(f"{host}: {unlocked_text(had)}")
    click.echo("\n".join(recap_lines(unlock_recap(target.deployment, owners, hosts, int(ExitCode.OK)))))
    remember(started, playbook, target.deployment, hosts,
             [(h, "lock", "removed" if owners[h].found else "unchanged") for h in hosts], int(ExitCode.OK))  # fmt: skip


def unlocked_text(had: orchestrate.Unlocked) -> str:
    """One host's line after ``fleet unlock``: what it removed there."""
    removed = ([f"lock of {had.lock}"] if had.lock else []) + ([f"preflight claim of {had.claim}"] if had.claim else [])
    return "removed " + "; ".join(removed) if removed else "not locked"


UNLOCK_COLUMNS = ("removed", "unchanged", "unknown")


def unlock_recap(deployment: str, owners: Mapping[str, orchestrate.Unlocked], hosts: Sequence[str],
                 exit_code: int) -> Recap:  # fmt: skip
    """``fleet unlock``'s run summary: per host, a lock or claim removed or none there (``owners``:
    what :func:`launcher.deploy.orchestrate.unlock` returned); a failed run (``owners`` empty)
    counts every host unknown, since the hosts before the failure may have lost their locks."""
    if exit_code != ExitCode.OK:
        rows = [(h, "unknown") for h in hosts]
        why = "a host refused or did not answer (error below); the others' locks may be gone: run it again"
    else:
        rows = [(h, "removed" if owners[h].found else "unchanged") for h in hosts]
        why = f"no host holds a deploy lock or preflight claim of {deployment} any more"
    return recap(f"{deployment}: unlock", rows, exit_code, what="locks", hosts=hosts, columns=UNLOCK_COLUMNS,
                 explained=why)  # fmt: skip


def _as_planned(playbook: str, inventory_path: str, limit_pattern: str | None) -> tuple[Inputs, Target]:
    """What status and logs read, as the playbook places it (a bad --limit refused here, before
    any host is contacted)."""
    inputs = load_inputs(playbook, inventory_path)
    return inputs, unlocked_by(target_of(deployment(inputs), limit_pattern, split_ok=True), playbook, inventory_path)


def _as_placed(inputs: Inputs, target: Target, playbook: str, inventory_path: str, limit_pattern: str | None,
            connect: Connect, forks: int) -> Target:  # fmt: skip
    """``target`` as the hosts show it placed: a group ``fleet watch`` placed on a spare host is
    read where it runs (:mod:`launcher.watch.where`); a spare that does not answer is a note."""
    if not any(p.spares for p in inputs.playbook.placement.values()):
        return target
    here = where(inputs, lambda i: unlocked_by(target_of(deployment(i)), playbook, inventory_path), connect, forks)
    for host, why in here.unanswered.items():
        click.echo(f"fleet: note: spare host {host} did not answer, what fleet watch may have placed there is not "
                   f"shown: {why.removeprefix(host + ': ')}", err=True)  # fmt: skip
    return narrowed(here.target, inputs.inventory, limit_pattern, split_ok=True)


def status_rows(rows: Sequence[UnitStatus]) -> Iterator[tuple[str, ...]]:
    for r in rows:
        gen = "-" if r.generation is None else str(r.generation)
        state = r.state + (f" ({r.restarts} restarts)" if r.restarts else "")
        yield (r.host, r.unit, r.role, str(r.rank), state, r.health, gen, r.drift)


@cli.command("status")
@click.argument("playbook")
@_ssh_options
@limit_option(whole_groups=False)
@click.option("--json", "as_json", is_flag=True, help="Print the status as JSON.")
@click.option("--probe", is_flag=True, help="Prefill/decode: also send a canary through the router and check on the "
                                            "decode that its KV was transferred (as `fleet up` does).")
def status_command(
    playbook: str, inventory_path: str, forks: int, trust_new_hosts: bool, known_hosts: tuple[str, ...],
    limit_pattern: str | None, as_json: bool, probe: bool,
) -> None:  # fmt: skip
    """Per unit: host, role, rank, state, health, generation and drift from the plan."""
    inputs, target = _as_planned(playbook, inventory_path, limit_pattern)
    with _connector(known_hosts, trust_new_hosts) as connector:
        target = _as_placed(inputs, target, playbook, inventory_path, limit_pattern, connector.connect, forks)
        rows = status(target, connector.connect, forks)
        canary = probe_crossing(target, connector.connect, forks) if probe else None
    keys = ("host", "unit", "role", "rank", "group", "state", "health", "generation", "drift", "restarts", "watch")
    units = [{k: getattr(r, k) for k in keys} for r in rows]
    if as_json:
        click.echo(dumps(units if canary is None else {"units": units, "crossing": canary.as_json()}))
    else:
        columns = ("host", "unit", "role", "rank", "state", "health", "gen", "drift")
        print_table(table(columns, status_rows(rows), title=f"{target.deployment} ({target.recipe})"))
        for group, why in dict.fromkeys((r.group, r.watch) for r in rows if r.watch):
            click.echo(f"fleet: group {group} failed: fleet watch gave up on it: {why}", err=True)
        if canary is not None and canary.ok:
            click.echo(canary.evidence())
    if canary is not None and not canary.ok:
        click.echo(f"fleet: error: {canary.error}", err=True)
    bad = [r for r in rows if r.state != "running" or r.health == "failing" or r.watch]
    sys.exit(int(ExitCode.FAILED if bad or (canary is not None and not canary.ok) else ExitCode.OK))


@cli.command("logs")
@click.argument("playbook")
@click.argument("unit", required=False)
@_ssh_options
@click.option("--tail", "tail_n", default=50, show_default=True, type=click.IntRange(0, None), help="Lines per unit.")
@click.option("-f", "--follow", is_flag=True, help="Keep printing new lines.")
@click.option("--json", "as_json", is_flag=True,
              help="One JSON object per line: host, unit, line (a host's error: host, error).")
@limit_option(whole_groups=False)
def logs_command(
    playbook: str, unit: str | None, inventory_path: str, forks: int, trust_new_hosts: bool,
    known_hosts: tuple[str, ...], tail_n: int, follow: bool, as_json: bool, limit_pattern: str | None,
) -> None:  # fmt: skip
    """Recent log lines of PLAYBOOK's units (or one UNIT), prefixed ``host/unit | ``."""
    inputs, target = _as_planned(playbook, inventory_path, limit_pattern)
    with _connector(known_hosts, trust_new_hosts) as connector:
        target = _as_placed(inputs, target, playbook, inventory_path, limit_pattern, connector.connect, forks)
        logs(target, connector.connect, _json_line if as_json else click.echo, unit=unit, tail=tail_n, follow=follow,
             forks=forks)  # fmt: skip


def _json_line(line: LogLine) -> None:
    record = {"host": line.host, "unit": line.unit, "line": line.text} if line.unit is not None else \
        {"host": line.host, "error": line.text}  # fmt: skip
    click.echo(json.dumps(record, sort_keys=True))


DEMO_PLAYBOOKS = ("pd-2p1d.yaml", "pp2.yaml")


def sandbox_playbooks() -> Path:
    """The sandbox playbooks: shipped in the wheel as ``launcher/sandbox/playbooks``, else the
    checkout's ``playbooks/sandbox``."""
    packaged = Path(__file__).resolve().parents[1] / "sandbox" / "playbooks"
    return packaged if packaged.is_dir() else packaged.parents[2] / "playbooks" / "sandbox"
DEMO_MIN_HOSTS = 15  # PD: 2 prefill + 1 decode instances of 2 RTX-6000D nodes each + a router
# The real engine: PP2 on the RTX-6000D hosts h9:h10, two replicas on h1, h2 behind the router on
# h5, prefill/decode on the Ethernet-only h16, h17 behind the PD router on h6.
REAL_DEMO_PLAYBOOKS = ("real-pp2.yaml", "real-router.yaml", "real-pd.yaml")
REAL_DEMO_HOSTS = 17


@cli.command("demo")
@click.option("--keep", is_flag=True, help="Leave the sandbox and deployments up afterwards.")
@click.option("-n", "n_hosts", default=None, type=click.IntRange(REAL_DEMO_HOSTS, 64),
              help=f"Sandbox hosts (default {DEMO_MIN_HOSTS}; {REAL_DEMO_HOSTS} with --real-engine).")  # fmt: skip
@click.option("--name", default="demo", show_default=True, help="Sandbox name.")
@click.option("--real-engine", is_flag=True,
              help="The REAL vLLM (CPU build): PP2 across two hosts, two replicas behind the real "
                   "router, and prefill/decode moving the KV over NIXL behind the PD router (first run "
                   "builds a ~3 GB image; each cold start ~2-6 min).")  # fmt: skip
def demo_command(keep: bool, n_hosts: int | None, name: str, real_engine: bool) -> None:
    """Bring up a sandbox fleet on this machine (root; real sshd and dockerd per host, GPUs faked),
    deploy the sandbox's 2P1D prefill/decode playbook (6 RTX-6000D hosts + the real sglang-router)
    and its 2-node PP playbook with ``fleet up``, send a real request through the router and one
    to the PP deployment, show status, and tear it all down (unless --keep).  With
    --real-engine: the real vLLM's PP2, router and PD playbooks instead, which host served each
    answer read from the engines' own counters (PD: the KV transfer the decode counted)."""
    import time

    from launcher.sandbox import fleet as sandbox

    playbooks = REAL_DEMO_PLAYBOOKS if real_engine else DEMO_PLAYBOOKS
    if n_hosts is None:
        n_hosts = REAL_DEMO_HOSTS if real_engine else DEMO_MIN_HOSTS
    elif not real_engine and n_hosts < DEMO_MIN_HOSTS:
        raise click.UsageError(f"-n: the demo needs at least {DEMO_MIN_HOSTS} hosts")
    root = sandbox_playbooks()
    shown = root if not root.is_relative_to(Path.cwd()) else root.relative_to(Path.cwd())
    timings: list[tuple[str, float]] = []
    started = time.monotonic()

    def timed(label: str, since: float) -> None:
        timings.append((label, time.monotonic() - since))

    click.echo(f"sandbox {name}: bringing up {n_hosts} hosts (network namespace, sshd, dockerd each; "
               "h9.. fake 8x RTX PRO 6000D)...", err=True)  # fmt: skip
    t = time.monotonic()
    with sandbox_log_to_stderr():  # a first real-engine run builds its image for minutes
        st = sandbox.up(name, n_hosts, mode="netns", real_engine=real_engine)
    timed("sandbox up", t)
    click.echo(f"sandbox {name}: up in {timings[-1][1]:.1f}s; inventory {st.inventory}", err=True)
    code = ExitCode.OK
    deployed: list[tuple[str, Target]] = []  # (playbook file, what it deployed)
    try:
        with _connector((st.known_hosts,), False) as connector:
            for pb in playbooks:
                inputs = load_inputs(root / pb, st.inventory)
                secret_values = resolve(inputs.playbook.secrets, ())
                click.echo(f"\n$ fleet up {shown / pb} -i {st.inventory} --known-hosts {st.known_hosts}",
                           err=True)  # fmt: skip
                t = time.monotonic()
                # As `fleet up` does: the preflight gate first, its plan made with fresh facts.
                target = target_of(deployment(inputs, gate(inputs, connector).plan), None, secret_values)
                deployed.append((pb, target))
                report = orchestrate.up(target, connector.connect, Options(), LinesProgress())
                timed(f"fleet up {target.deployment}", t)
                _print_report(report, False)
                if report.exit_code != ExitCode.OK:
                    code = report.exit_code
                    break
            if code == ExitCode.OK:
                for _, target in deployed:
                    t = time.monotonic()
                    code = _demo_ask(target, connector.connect) or code
                    timed(f"request {target.deployment}", t)
                for pb, target in deployed:
                    click.echo(f"\n$ fleet status {shown / pb} -i {st.inventory}", err=True)
                    print_table(table(("host", "unit", "role", "rank", "state", "health", "gen", "drift"),
                                      status_rows(status(target, connector.connect)),
                                      title=f"{target.deployment} ({target.recipe})"))  # fmt: skip
            if not keep:
                for pb, target in reversed(deployed):
                    click.echo(f"\n$ fleet down {shown / pb} -i {st.inventory}", err=True)
                    t = time.monotonic()
                    _print_report(orchestrate.down(target, connector.connect, Options()), False)
                    timed(f"fleet down {target.deployment}", t)
    finally:
        if keep:
            click.echo(f"\nkept: sandbox {name} (inventory {st.inventory}, known hosts {st.known_hosts}); "
                       f"try `fleet status {shown / ('real-pd.yaml' if real_engine else 'pd-2p1d.yaml')} -i {st.inventory} --known-hosts "
                       f"{st.known_hosts}{' --probe' if real_engine else ''}`, remove with `fleet sandbox down --name {name}`", err=True)  # fmt: skip
        else:
            t = time.monotonic()
            sandbox.down(name)
            timed("sandbox down", t)
            click.echo(f"\nsandbox {name} torn down", err=True)
    timed("total", started)
    click.echo("timings: " + ", ".join(f"{label} {s:.1f}s" for label, s in timings), err=True)
    sys.exit(int(code))


def _demo_ask(target: Target, connect: Connect) -> ExitCode | None:
    """One real request to the deployment; prints the answer and who served it (a real PD
    deployment: the KV transfer its decode counted for a canary, as ``status --probe``)."""
    from launcher.deploy import crossing, demo

    ep = demo.endpoint(target)
    pd = any(d.unit.role == "prefill" for d in target.units)
    what = f"the router{', PD mode' if pd else ''}" if ep.role == "router" else f"{ep.role} 0"
    click.echo(f"\n$ curl -d '{{\"messages\": [...]}}' {ep.url}/v1/chat/completions   # {ep.host}: {what}",
               err=True)  # fmt: skip
    try:
        answer = demo.ask(ep, "What is a fleet?", engines=demo.leaders(target))
    except FleetError as err:
        click.echo(f"fleet: error: {err}", err=True)
        return ExitCode.FAILED
    click.echo(f"{target.deployment} answer ({answer.seconds:.2f}s): {answer.text!r}")
    if crossing.applies(target.units):
        c = probe_crossing(target, connect)
        click.echo(f"  {c.evidence()}" if c.ok else f"fleet: error: {c.error}", err=not c.ok)
        return None if c.ok else ExitCode.FAILED
    if answer.prefill is not None:
        click.echo(f"  served by prefill {answer.prefill} and decode {answer.decode} "
                   f"(KV handed over for bootstrap room {answer.room})")  # fmt: skip
    else:
        ranks = ", ".join(answer.peers) if answer.peers else answer.served_by
        click.echo(f"  served by {answer.served_by} (ranks: {ranks})")
    return None
