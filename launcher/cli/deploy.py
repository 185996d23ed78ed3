"""``fleet up / status / logs / down / unlock / demo``: deploy a playbook over SSH.

Every command loads the inventory, catalog and playbook, plans and renders (pure), then talks to
the hosts through strictly checked SSH (``--known-hosts`` files are read besides
``~/.ssh/known_hosts``; ``--trust-new-hosts`` records unknown keys).  Exit codes: 0 ok, 1 a
step failed, 2 bad input, 3 partial (some groups up, some failed), 130 interrupted.
"""

from __future__ import annotations

import sys
from contextlib import ExitStack
from pathlib import Path
from typing import Callable, Iterator, Sequence

import click

from launcher.cli import cli
from launcher.config.inventory import load_inventory
from launcher.config.patterns import select
from launcher.config.recipes import load_catalog
from launcher.deploy import orchestrate
from launcher.deploy.desired import Desired, from_rendered, limit
from launcher.deploy.orchestrate import Options, Report, Target
from launcher.deploy.secrets import resolve
from launcher.deploy.status import UnitStatus, logs, status
from launcher.errors import ExitCode
from launcher.execute.hostkeys import KnownHosts
from launcher.execute.ssh import SshConnector
from launcher.execute.transport import Transport
from launcher.model import Host, Inventory, Playbook
from launcher.output import LinesProgress, LiveProgress, Progress, QuietProgress, dumps, print_table, table
from launcher.plan import plan
from launcher.render import render


def load_target(
    playbook_path: str, inventory_path: str, limit_pattern: str | None, secret_flags: Sequence[str] | None
) -> Target:
    """Load → plan → render → the deploy layer's view.  ``secret_flags`` None: secrets are not
    resolved (status, logs, down never need their values)."""
    from launcher.config.playbook import load_playbook

    inventory = load_inventory(inventory_path)
    catalog = load_catalog()
    playbook = load_playbook(Path(playbook_path), catalog, inventory)
    the_plan = plan(inventory, catalog, playbook)
    units = from_rendered(the_plan, render(the_plan))
    hosts = _claimed_hosts(playbook, inventory, units)
    if limit_pattern is not None:
        chosen = {h.name for h in select(inventory, limit_pattern)}
        units = limit(units, chosen)
        hosts = tuple(h for h in hosts if h.name in chosen)
    secrets = resolve(playbook.secrets, secret_flags) if secret_flags is not None else {}
    return Target(deployment=the_plan.deployment, recipe=the_plan.recipe, hosts=hosts, units=units, secrets=secrets)


def _claimed_hosts(playbook: Playbook, inventory: Inventory, units: Sequence[Desired]) -> tuple[Host, ...]:
    """Every host a placement pattern of the playbook matches: where units of this deployment
    may run now or ran before (so units dropped from the plan are found and removed)."""
    names = {d.host for d in units}
    for placement in playbook.placement.values():
        names |= {h.name for h in select(inventory, placement.hosts)}
    return tuple(h for h in inventory.hosts if h.name in names)


def _connector(known_hosts: Sequence[str], trust_new: bool) -> SshConnector:
    return SshConnector(KnownHosts.for_operator(tuple(known_hosts), trust_new=trust_new))


def _progress(stack: ExitStack, quiet: bool) -> Progress:
    if quiet:
        return QuietProgress()
    if sys.stderr.isatty():
        return stack.enter_context(LiveProgress())
    return LinesProgress()


def _ssh_options(f: Callable[..., None]) -> Callable[..., None]:
    f = click.option("--known-hosts", "known_hosts", multiple=True, help="Extra known_hosts file (repeatable).")(f)
    f = click.option("--trust-new-hosts", is_flag=True, help="Accept and record unknown host keys.")(f)
    f = click.option("--forks", default=8, show_default=True, type=click.IntRange(1, 256), help="Hosts at a time.")(f)
    f = click.option("-i", "--inventory", "inventory_path", required=True, help="Inventory file (YAML or INI).")(f)
    return f


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
def up_command(
    playbook: str, inventory_path: str, forks: int, trust_new_hosts: bool, known_hosts: tuple[str, ...],
    limit_pattern: str | None, check: bool, diff: bool, timeout_s: float | None, as_json: bool, quiet: bool,
    break_lock: bool, secrets: tuple[str, ...],
) -> None:  # fmt: skip
    """Bring PLAYBOOK's units up (idempotent: unchanged units are left alone)."""
    target = load_target(playbook, inventory_path, limit_pattern, secrets)
    options = Options(forks=forks, check=check, diff=diff, timeout_s=timeout_s, break_lock=break_lock)
    with ExitStack() as stack:
        connector = stack.enter_context(_connector(known_hosts, trust_new_hosts))
        progress = _progress(stack, quiet or as_json or check)
        report = orchestrate.up(target, connector.connect, options, progress)
    _print_report(report, as_json)
    sys.exit(int(report.exit_code))


@cli.command("down")
@click.argument("playbook")
@_ssh_options
@click.option("--limit", "limit_pattern", default=None, help="Only hosts matching this pattern (whole groups).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.option("--quiet", "-q", is_flag=True, help="No progress output.")
@click.option("--break-lock", is_flag=True, help="Take the deploy lock even if another deploy holds it.")
def down_command(
    playbook: str, inventory_path: str, forks: int, trust_new_hosts: bool, known_hosts: tuple[str, ...],
    limit_pattern: str | None, as_json: bool, quiet: bool, break_lock: bool,
) -> None:  # fmt: skip
    """Stop and remove PLAYBOOK's units (gateway first).  Images, caches and weights stay; each
    unit's last files stay in /etc/fleet/<deployment>/<unit>/prev/ (never its secrets)."""
    target = load_target(playbook, inventory_path, limit_pattern, None)
    with ExitStack() as stack:
        connector = stack.enter_context(_connector(known_hosts, trust_new_hosts))
        progress = _progress(stack, quiet or as_json)
        report = orchestrate.down(target, connector.connect, Options(forks=forks, break_lock=break_lock), progress)
    _print_report(report, as_json)
    sys.exit(int(report.exit_code))


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


DEMO_PLAYBOOKS = ("single.yaml", "pp2.yaml")


@cli.command("demo")
@click.option("--keep", is_flag=True, help="Leave the sandbox and deployments up afterwards.")
@click.option("-n", "n_hosts", default=8, show_default=True, type=click.IntRange(7, 64), help="Sandbox hosts.")
def demo_command(keep: bool, n_hosts: int) -> None:
    """Bring up a sandbox fleet on this machine (root), deploy the sandbox playbooks on it with
    ``fleet up``, send a real request to each deployment, show status, tear it all down."""
    from launcher.sandbox import fleet as sandbox

    root = Path(__file__).resolve().parents[2] / "playbooks" / "sandbox"
    click.echo(f"sandbox: bringing up {n_hosts} hosts (sshd + dockerd each)...", err=True)
    st = sandbox.up("demo", n_hosts)
    code = ExitCode.OK
    deployed: list[Target] = []
    try:
        with _connector((st.known_hosts,), False) as connector:
            for name in DEMO_PLAYBOOKS:
                target = load_target(str(root / name), st.inventory, None, ())
                deployed.append(target)
                click.echo(f"\n$ fleet up playbooks/sandbox/{name} -i {st.inventory}", err=True)
                report = orchestrate.up(target, connector.connect, Options(), LinesProgress())
                _print_report(report, False)
                if report.exit_code != ExitCode.OK:
                    code = report.exit_code
                    break
                _ask(target, connector.connect)
                print_table(table(("host", "unit", "role", "rank", "state", "health", "gen", "drift"),
                                  status_rows(status(target, connector.connect))))  # fmt: skip
            if not keep:
                for target in reversed(deployed):
                    click.echo(f"\n$ fleet down {target.deployment}", err=True)
                    _print_report(orchestrate.down(target, connector.connect, Options()), False)
    finally:
        if keep:
            click.echo(f"\nkept: inventory {st.inventory}, known hosts {st.known_hosts}", err=True)
        else:
            sandbox.down("demo")
            click.echo("\nsandbox torn down", err=True)
    sys.exit(int(code))


def _ask(target: Target, connect: Callable[[Host], Transport]) -> None:
    """POST /generate to the deployment's first serving unit, from its own host."""
    import json

    serving = next(d for d in target.units if d.unit.health is not None)
    assert serving.unit.health is not None
    base = serving.unit.health.url.rsplit("/", 1)[0]
    body = json.dumps({"text": "What is a fleet?", "sampling_params": {"max_new_tokens": 8}})
    host = next(h for h in target.hosts if h.name == serving.host)
    transport = connect(host)
    res = transport.run(("curl", "-fsS", "-m", "30", "-H", "Content-Type: application/json", "-d", body,
                         f"{base}/generate"), timeout=60)  # fmt: skip
    if not res.ok:
        click.echo(f"request to {base}/generate failed: {res.stderr_text.strip()}", err=True)
        return
    answer = json.loads(res.stdout_text)
    served = answer.get("fleet_standin", {})
    click.echo(f"answer from {served.get('host', '?')} ({served.get('role', '?')}): {answer.get('text', '')!r}")
