"""``fleet up / status / logs / down / unlock / demo``: deploy a playbook over SSH.

Every command loads the inventory, catalog and playbook, plans and renders (pure), then talks to
the hosts through strictly checked SSH (``--known-hosts`` files are read besides
``~/.ssh/known_hosts``; ``--trust-new-hosts`` records unknown keys).  Exit codes: 0 ok, 1 a
step failed, 2 bad input, 3 partial (some groups up, some failed), 130 interrupted.
"""

from __future__ import annotations

import shlex
import sys
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path
from typing import Iterator, Sequence

import click

from launcher.cli import cli
from launcher.cli.common import bench_gate_option, connector as _connector, progress, ssh_options as _ssh_options
from launcher.cli.metrics import TargetsHook, after_change, checked_targets_path, targets_file_option
from launcher.cli.preflight import gate
from launcher.deploy import orchestrate
from launcher.deploy.orchestrate import Options, Report
from launcher.deploy.session import Target
from launcher.deploy.secrets import resolve
from launcher.deploy.status import UnitStatus, logs, status
from launcher.errors import ExitCode, FleetError, UsageError
from launcher.output import LinesProgress, dumps, print_table, table
from launcher.pipeline import deployment, load_inputs, load_target, target_of, unlocked_by


def _print_report(report: Report, as_json: bool) -> None:
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
                    "exit_code": int(report.exit_code),
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
    for err in report.errors:
        click.echo(f"fleet: error: {err}", err=True)


@cli.command("up")
@click.argument("playbook")
@_ssh_options
@click.option("--limit", "limit_pattern", default=None, help="Only hosts matching this pattern (whole groups).")
@click.option("--check", is_flag=True, help="Show what would change; touch nothing.")
@click.option("--diff", is_flag=True, help="With --check: unified diff of every file that would change.")
@click.option("--timeout", "timeout_s", type=float, default=None, help="Health deadline in seconds (overrides recipes).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.option("--quiet", "-q", is_flag=True, help="No progress output.")
@click.option("--break-lock", is_flag=True, help="Take the deploy lock even if another deploy holds it.")
@click.option("--secret", "secrets", multiple=True, metavar="NAME[=@FILE|=env:VAR]", help="Secret source override.")
@click.option("--skip-preflight", is_flag=True, help="Do not run the cheap preflight checks first.")
@click.option("--router", "router_urls", multiple=True, metavar="URL",
              help="Routers serving this deployment (rolling rollouts drain groups out of them).")
@targets_file_option
@bench_gate_option
@click.option("--warm", is_flag=True, help="After preflight, read the staged weights into every host's page cache "
                                           "(fleet weights warm) before starting anything.")
def up_command(
    playbook: str, inventory_path: str, forks: int, trust_new_hosts: bool, known_hosts: tuple[str, ...],
    limit_pattern: str | None, check: bool, diff: bool, timeout_s: float | None, as_json: bool, quiet: bool,
    break_lock: bool, secrets: tuple[str, ...], skip_preflight: bool, router_urls: tuple[str, ...],
    targets_file: str | None, bench_gate: bool | None, warm: bool,
) -> None:  # fmt: skip
    """Bring PLAYBOOK's units up (idempotent: unchanged units are left alone).  The cheap
    preflight checks run first (facts, GPUs, HCAs, GIDs, reachability, weights, ports) and stop
    the deploy before anything starts when one fails; --skip-preflight opts out."""
    inputs = load_inputs(playbook, inventory_path)
    if bench_gate and inputs.playbook.rollout.strategy != "rolling":
        raise UsageError("--bench-gate gates the batches of a rolling rollout: the playbook needs rollout.strategy: rolling")
    if bench_gate:
        from launcher.cli.rolling import bench_gate_wanted

        bench_gate_wanted(inputs.playbook, bench_gate)  # a PD deployment: refused before any host is asked
    if warm and (check or limit_pattern):
        raise UsageError("--warm reads the weights on every host of the deployment: not with --check or --limit")
    secret_values = resolve(inputs.playbook.secrets, secrets)  # a missing secret stops us before any host
    rolling = not check and inputs.playbook.rollout.strategy == "rolling"
    options = Options(forks=forks, check=check, diff=diff, timeout_s=timeout_s, break_lock=break_lock)
    targets = None if check else checked_targets_path(inputs.playbook, targets_file)
    with ExitStack() as stack:
        # One connection per host for the preflight gate and the deploy.
        connector = stack.enter_context(_connector(known_hosts, trust_new_hosts))
        the_plan = None
        if not skip_preflight:
            # Planned with the facts the gate just gathered (gid_index: auto resolves there).
            the_plan = gate(inputs, connector, forks=forks, quiet=quiet or as_json).plan
        if warm:
            from launcher.cli.weights import warm_hosts

            warm_hosts(inputs, connector, forks, the_plan)
        dep = deployment(inputs, the_plan)
        target = unlocked_by(target_of(dep, limit_pattern, secret_values), playbook, inventory_path)
        # The targets cover the whole deployment, whatever --limit touched.
        hook = None if targets is None else TargetsHook(targets, target_of(dep), known_hosts, trust_new_hosts, forks)
        shown = progress(stack, quiet or as_json or check)
        if rolling:
            # rollout: rolling — changed groups restart in batches, drained out of their routers.
            from launcher.cli.rolling import run_rolling_up

            code = run_rolling_up(inputs.playbook, target, connector.connect, shown, forks=forks,
                                  timeout_s=timeout_s, break_lock=break_lock, as_json=as_json,
                                  router_urls=router_urls, targets=hook, bench_gate=bench_gate)  # fmt: skip
            sys.exit(code)
        report = orchestrate.up(target, connector.connect, options, shown)
    _print_report(report, as_json)
    sys.exit(after_change(hook, int(report.exit_code)))


@cli.command("down")
@click.argument("playbook")
@_ssh_options
@click.option("--limit", "limit_pattern", default=None, help="Only hosts matching this pattern (whole groups).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.option("--quiet", "-q", is_flag=True, help="No progress output.")
@click.option("--break-lock", is_flag=True, help="Take the deploy lock even if another deploy holds it.")
@targets_file_option
def down_command(
    playbook: str, inventory_path: str, forks: int, trust_new_hosts: bool, known_hosts: tuple[str, ...],
    limit_pattern: str | None, as_json: bool, quiet: bool, break_lock: bool, targets_file: str | None,
) -> None:  # fmt: skip
    """Stop and remove PLAYBOOK's units (gateway first).  Images, caches and weights stay; each
    unit's last files stay in /etc/fleet/<deployment>/<unit>/prev/ (never its secrets)."""
    inputs = load_inputs(playbook, inventory_path)
    targets = checked_targets_path(inputs.playbook, targets_file)
    dep = deployment(inputs)
    target = target_of(dep, limit_pattern)
    with ExitStack() as stack:
        connector = stack.enter_context(_connector(known_hosts, trust_new_hosts))
        report = orchestrate.down(target, connector.connect, Options(forks=forks, break_lock=break_lock),
                                  progress(stack, quiet or as_json))  # fmt: skip
    _print_report(report, as_json)
    hook = None if targets is None else TargetsHook(targets, target_of(dep), known_hosts, trust_new_hosts, forks)
    sys.exit(after_change(hook, int(report.exit_code)))



@cli.command("unlock")
@click.argument("playbook")
@_ssh_options
def unlock_command(
    playbook: str, inventory_path: str, forks: int, trust_new_hosts: bool, known_hosts: tuple[str, ...]
) -> None:
    """Break PLAYBOOK's deploy lock on every host (only when the deploy holding it is dead)."""
    target = load_target(playbook, inventory_path, None, None)
    with _connector(known_hosts, trust_new_hosts) as connector:
        owners = orchestrate.unlock(target, connector.connect, forks)
    for host, owner in sorted(owners.items()):
        click.echo(f"{host}: {'removed lock of ' + owner if owner else 'not locked'}")


def status_rows(rows: Sequence[UnitStatus]) -> Iterator[tuple[str, ...]]:
    for r in rows:
        gen = "-" if r.generation is None else str(r.generation)
        state = r.state + (f" ({r.restarts} restarts)" if r.restarts else "")
        yield (r.host, r.unit, r.role, str(r.rank), state, r.health, gen, r.drift)


@cli.command("status")
@click.argument("playbook")
@_ssh_options
@click.option("--limit", "limit_pattern", default=None, help="Only hosts matching this pattern.")
@click.option("--json", "as_json", is_flag=True, help="Print the status as JSON.")
def status_command(
    playbook: str, inventory_path: str, forks: int, trust_new_hosts: bool, known_hosts: tuple[str, ...],
    limit_pattern: str | None, as_json: bool,
) -> None:  # fmt: skip
    """Per unit: host, role, rank, state, health, generation and drift from the plan."""
    target = load_target(playbook, inventory_path, limit_pattern, None)
    with _connector(known_hosts, trust_new_hosts) as connector:
        rows = status(target, connector.connect, forks)
    if as_json:
        keys = ("host", "unit", "role", "rank", "group", "state", "health", "generation", "drift", "restarts")
        click.echo(dumps([{k: getattr(r, k) for k in keys} for r in rows]))
    else:
        columns = ("host", "unit", "role", "rank", "state", "health", "gen", "drift")
        print_table(table(columns, status_rows(rows), title=f"{target.deployment} ({target.recipe})"))
    bad = [r for r in rows if r.state != "running" or r.health == "failing"]
    sys.exit(int(ExitCode.FAILED if bad else ExitCode.OK))


@cli.command("logs")
@click.argument("playbook")
@click.argument("unit", required=False)
@_ssh_options
@click.option("--tail", "tail_n", default=50, show_default=True, type=click.IntRange(0, None), help="Lines per unit.")
@click.option("-f", "--follow", is_flag=True, help="Keep printing new lines.")
def logs_command(
    playbook: str, unit: str | None, inventory_path: str, forks: int, trust_new_hosts: bool,
    known_hosts: tuple[str, ...], tail_n: int, follow: bool,
) -> None:  # fmt: skip
    """Recent log lines of PLAYBOOK's units (or one UNIT), prefixed ``host/unit | ``."""
    target = load_target(playbook, inventory_path, None, None)
    with _connector(known_hosts, trust_new_hosts) as connector:
        logs(target, connector.connect, click.echo, unit=unit, tail=tail_n, follow=follow, forks=forks)


DEMO_PLAYBOOKS = ("pd-2p1d.yaml", "pp2.yaml")


def sandbox_playbooks() -> Path:
    """The sandbox playbooks: shipped in the wheel as ``launcher/sandbox/playbooks``, else the
    checkout's ``playbooks/sandbox``."""
    packaged = Path(__file__).resolve().parents[1] / "sandbox" / "playbooks"
    return packaged if packaged.is_dir() else packaged.parents[2] / "playbooks" / "sandbox"
DEMO_MIN_HOSTS = 15  # PD: 2 prefill + 1 decode instances of 2 RTX-6000D nodes each + a router
# The real engine: PP2 on the RTX-6000D hosts h9:h10, two replicas on h1, h2 behind the router on h5.
REAL_DEMO_PLAYBOOKS = ("real-pp2.yaml", "real-router.yaml")
REAL_DEMO_HOSTS = 10


@cli.command("demo")
@click.option("--keep", is_flag=True, help="Leave the sandbox and deployments up afterwards.")
@click.option("-n", "n_hosts", default=None, type=click.IntRange(REAL_DEMO_HOSTS, 64),
              help=f"Sandbox hosts (default {DEMO_MIN_HOSTS}; {REAL_DEMO_HOSTS} with --real-engine).")  # fmt: skip
@click.option("--name", default="demo", show_default=True, help="Sandbox name.")
@click.option("--real-engine", is_flag=True,
              help="The REAL vLLM (CPU build): PP2 across two hosts and two replicas behind the real "
                   "router (first run builds a ~3 GB image; each cold start ~2 min).")  # fmt: skip
def demo_command(keep: bool, n_hosts: int | None, name: str, real_engine: bool) -> None:
    """Bring up a sandbox fleet on this machine (root; real sshd and dockerd per host, GPUs faked),
    deploy the sandbox's 2P1D prefill/decode playbook (6 RTX-6000D hosts + the real sglang-router)
    and its 2-node PP playbook with ``fleet up``, send a real request through the router and one
    to the PP deployment, show status, and tear it all down (unless --keep).  With
    --real-engine: the real vLLM's PP2 and router playbooks instead, which host served each
    answer read from the engines' own counters."""
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
    st = sandbox.up(name, n_hosts, mode="netns", real_engine=real_engine)
    timed("sandbox up", t)
    click.echo(f"sandbox {name}: up in {timings[-1][1]:.1f}s; inventory {st.inventory}", err=True)
    code = ExitCode.OK
    deployed: list[Target] = []
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
                deployed.append(target)
                report = orchestrate.up(target, connector.connect, Options(), LinesProgress())
                timed(f"fleet up {target.deployment}", t)
                _print_report(report, False)
                if report.exit_code != ExitCode.OK:
                    code = report.exit_code
                    break
            if code == ExitCode.OK:
                for target in deployed:
                    t = time.monotonic()
                    code = _demo_ask(target) or code
                    timed(f"request {target.deployment}", t)
                for target in deployed:
                    click.echo(f"\n$ fleet status {shown / _playbook_of(target)} -i {st.inventory}", err=True)
                    print_table(table(("host", "unit", "role", "rank", "state", "health", "gen", "drift"),
                                      status_rows(status(target, connector.connect)),
                                      title=f"{target.deployment} ({target.recipe})"))  # fmt: skip
            if not keep:
                for target in reversed(deployed):
                    click.echo(f"\n$ fleet down {shown / _playbook_of(target)} -i {st.inventory}", err=True)
                    t = time.monotonic()
                    _print_report(orchestrate.down(target, connector.connect, Options()), False)
                    timed(f"fleet down {target.deployment}", t)
    finally:
        if keep:
            click.echo(f"\nkept: sandbox {name} (inventory {st.inventory}, known hosts {st.known_hosts}); "
                       f"try `fleet status {shown / 'pd-2p1d.yaml'} -i {st.inventory} --known-hosts "
                       f"{st.known_hosts}`, remove with `fleet sandbox down --name {name}`", err=True)  # fmt: skip
        else:
            t = time.monotonic()
            sandbox.down(name)
            timed("sandbox down", t)
            click.echo(f"\nsandbox {name} torn down", err=True)
    timed("total", started)
    click.echo("timings: " + ", ".join(f"{label} {s:.1f}s" for label, s in timings), err=True)
    sys.exit(int(code))


def _playbook_of(target: Target) -> str:
    return {"sb-pd": "pd-2p1d.yaml", "sb-pp2": "pp2.yaml", "sb-real-pp2": "real-pp2.yaml",
            "sb-real-router": "real-router.yaml"}.get(target.deployment, target.deployment)  # fmt: skip


def _demo_ask(target: Target) -> ExitCode | None:
    """One real request to the deployment; prints the answer and who served it."""
    from launcher.deploy import demo

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
    if answer.prefill is not None:
        click.echo(f"  served by prefill {answer.prefill} and decode {answer.decode} "
                   f"(KV handed over for bootstrap room {answer.room})")  # fmt: skip
    else:
        ranks = ", ".join(answer.peers) if answer.peers else answer.served_by
        click.echo(f"  served by {answer.served_by} (ranks: {ranks})")
    return None
