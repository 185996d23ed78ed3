"""``fleet watch PLAYBOOK... -i INV``: keep deployments alive (docs/watch.md).

Runs until SIGINT/SIGTERM (exit 130 / 143; an action under way is finished or rolled back
first), or one survey with ``--once``.  ``--install`` writes the systemd service that runs the
same command on this control host instead.  Exit codes: 0 (``--once``; ``--install``), 1 a
host or lock refused at start (another watch, an unknown host key), 2 bad input.
"""

from __future__ import annotations

import getpass
import os
import shutil
import socket
import sys
import threading
import time
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path

import click

from launcher.cli import cli
from launcher.cli.common import connector as _connector, limit_option, progress, ssh_options
from launcher.cli.metrics import targets_file_option
from launcher.deploy.publish import checked_targets_path
from launcher.rolling.routers import planned_routers
from launcher.config.inventory_sources import InventorySources
from launcher.deploy.owner import owner_of
from launcher.deploy.secrets import resolve
from launcher.deploy.session import Target
from launcher.errors import FleetError, UsageError
from launcher.deploy.desired import limit
from launcher.limit import limited_deployments
from launcher.pipeline import Inputs, claimed_hosts, deployment, load_inputs, narrowed, spare_hosts, target_of, unlocked_by
from launcher.watch.decide import Policy
from launcher.watch.events import Fanout, Hook, Log, Sink, WatchEvent
from launcher.watch.homes import homes
from launcher.watch.spares import Spares
from launcher.watch.install import unit_name, unit_text
from launcher.watch.loop import Options, Watch, Watched


def _absolute_secret(flag: str) -> str:
    name, sep, source = flag.partition("=")
    return f"{name}=@{Path(source[1:]).resolve()}" if sep and source.startswith("@") else flag


@cli.command("watch")
@click.argument("playbooks", nargs=-1, required=True)
@ssh_options
@click.option("--interval", "interval_s", type=click.FloatRange(0.5, None), default=10.0, show_default=True,
              help="Seconds between surveys.")
@click.option("--once", is_flag=True, help="One survey (and its actions), then exit.")
@click.option("--dry-run", is_flag=True, help="Say what would be done; do nothing.")
@click.option("--apply-drift", is_flag=True, help="Recreate groups whose units drifted from the playbook (default: report).")
@click.option("--on-event", "on_event", default=None, metavar="CMD",
              help="Run `sh -c CMD` per event, the event as JSON on its stdin.")
@click.option("--metrics-port", type=click.IntRange(1, 65535), default=None, help="Serve Prometheus metrics on this port.")
@click.option("--metrics-address", default="127.0.0.1", show_default=True, help="Address of the metrics endpoint.")
@click.option("--backoff", "backoff_s", type=click.FloatRange(0, None), default=10.0, show_default=True,
              help="Seconds before the second recreation of a group; doubles each time.")
@click.option("--backoff-cap", "backoff_cap_s", type=click.FloatRange(0, None), default=300.0, show_default=True,
              help="Longest backoff.")
@click.option("--crash-limit", type=click.IntRange(1, None), default=5, show_default=True,
              help="Recreations within --crash-window after which the group is marked failed.")
@click.option("--crash-window", "crash_window_s", type=click.FloatRange(1, None), default=900.0, show_default=True,
              help="Seconds.")
@click.option("--probe-failures", type=click.IntRange(1, None), default=3, show_default=True,
              help="Failed health checks in a row before a running rank counts as broken.")
@click.option("--spare-after", type=click.IntRange(1, None), default=3, show_default=True,
              help="Surveys in a row a host must stay unreachable before its group is placed on a spare host "
                   "(placement.<role>.spares).")
@click.option("--survey-timeout", "survey_timeout_s", type=click.FloatRange(1, None), default=30.0, show_default=True,
              help="Seconds a host's survey may take before it counts as unreachable (hung).")
@click.option("--router", "router_urls", multiple=True, metavar="URL",
              help="A router serving the deployments (default: each deployment's own router).")
@click.option("--secret", "secrets", multiple=True, metavar="NAME[=@FILE|=env:VAR]", help="Secret source override.")
@click.option("--json", "as_json", is_flag=True, help="Events as JSON lines.")
@click.option("--quiet", "-q", is_flag=True, help="No progress lines of the actions.")
@click.option("--break-lock", is_flag=True, help="Take over another watch's claim on the deployments.")
@targets_file_option
@limit_option(whole_groups=True)
@click.option("--install", is_flag=True, help="Write a systemd service running this watch instead (see -o).")
@click.option("-o", "--output", "output", default=None, metavar="FILE",
              help="--install: where (default /etc/systemd/system/fleet-watch-DEPLOYMENTS.service).")
def watch_command(
    playbooks: tuple[str, ...], inventory_path: InventorySources, forks: int, trust_new_hosts: bool, known_hosts: tuple[str, ...],
    interval_s: float, once: bool, dry_run: bool, apply_drift: bool, on_event: str | None, metrics_port: int | None,
    metrics_address: str, backoff_s: float, backoff_cap_s: float, crash_limit: int, crash_window_s: float,
    probe_failures: int, spare_after: int, survey_timeout_s: float, router_urls: tuple[str, ...], secrets: tuple[str, ...], as_json: bool, quiet: bool,
    break_lock: bool, targets_file: str | None, limit_pattern: str | None, install: bool, output: str | None,
) -> None:  # fmt: skip
    """Keep PLAYBOOKS' deployments alive: every --interval, survey their hosts and recreate a
    group with a dead or unhealthy rank (out of its routers, every rank stopped, started
    together, health-gated, back in), register healthy workers missing from their routers,
    restart dead routers; report unreachable hosts and drift.  Backs off per group and gives up
    on a crash loop (the group shows failed in fleet status)."""
    loaded = [(pb, load_inputs(pb, inventory_path)) for pb in playbooks]  # every input checked first
    names = [inputs.playbook.name for _, inputs in loaded]
    if len(set(names)) != len(names):
        raise UsageError(f"deployment {next(n for n in names if names.count(n) > 1)} is given twice")
    kept = _limited(loaded, limit_pattern)  # refused here, before the service is written or a host asked
    if install:  # secrets are resolved by the service when it runs (give them as NAME=@FILE)
        if trust_new_hosts:
            raise UsageError("--install: a service must not trust new host keys; record them first (fleet facts)")
        _install(playbooks, inventory_path, known_hosts, names, output)
        return
    loaded = [(pb, inputs) for pb, inputs in loaded if inputs.playbook.name in kept]
    watched = []
    for pb, inputs in loaded:
        values = resolve(inputs.playbook.secrets, secrets)
        keep = kept[inputs.playbook.name]

        def planned_target(inputs: Inputs, pb: str = pb, values: dict[str, str] = values,
                           keep: frozenset[str] | None = keep) -> Target:  # fmt: skip
            target = within(target_of(deployment(inputs), None, values), keep)
            target = unlocked_by(target, pb, inventory_path)
            # Acts only where the deployment is this playbook's (a same-named one's is refused, as up refuses it).
            return replace(target, owner=owner_of(pb))

        target = planned_target(inputs)
        watched.append(Watched(target=target, routers=homes(target, tuple(router_urls) or planned_routers(target)),
                               spares=Spares.of(inputs, planned_target)))  # fmt: skip
    policy = Policy(backoff_base_s=backoff_s, backoff_cap_s=backoff_cap_s, crash_limit=crash_limit,
                    crash_window_s=crash_window_s, probe_failures=probe_failures, apply_drift=apply_drift,
                    spare_after=spare_after)  # fmt: skip
    log = Log(click.echo, as_json)
    sinks: list[Sink] = [log]
    metrics = None
    if metrics_port is not None:
        from launcher.watch.metrics import Metrics

        metrics = Metrics()
        try:
            metrics.serve(metrics_port, metrics_address)
        except OSError as err:
            raise UsageError(f"--metrics-port {metrics_port}: {err.strerror or err}") from None
        sinks.append(metrics)
        _publish(loaded, targets_file, metrics_port, metrics_address)
    if not dry_run:
        sinks.append(_History({inputs.playbook.name: pb for pb, inputs in loaded}, log))
    if on_event is not None:
        sinks.append(Hook(on_event, log))
    emit = Fanout(sinks)
    options = Options(interval_s=interval_s, forks=forks, dry_run=dry_run, policy=policy, break_lock=break_lock,
                      survey_timeout_s=survey_timeout_s)  # fmt: skip
    with ExitStack() as stack:
        conn = stack.enter_context(_connector(known_hosts, trust_new_hosts))
        shown = progress(stack, quiet)
        watch = Watch(watched, conn.connect, options, emit, progress=shown,
                      on_survey=metrics.surveyed if metrics is not None else None)  # fmt: skip
        stack.callback(watch.release)
        watch.claim()
        for w in watched:
            what = "dry run: nothing is changed" if dry_run else "watching"
            emit(WatchEvent(kind="note", deployment=w.target.deployment, at=watch.clock(),
                            message=f"{what} {len(w.target.units)} units every {interval_s:g}s"
                                    + (f"; routers {', '.join(h.url for h in w.routers)}" if w.routers else "")))  # fmt: skip
        watch.run(threading.Event(), once=once)


def _limited(loaded: list[tuple[str, Inputs]], pattern: str | None) -> dict[str, frozenset[str] | None]:
    """Deployment -> the hosts the watch acts on (:func:`_kept`), for each deployment ``--limit``
    keeps a host of (all without one); the others are left out with a note.  A limit that
    matches none of any deployment's hosts, or splits a group, is refused."""
    if pattern is None:
        return {inputs.playbook.name: None for _, inputs in loaded}
    hosts_of = {inputs.playbook.name: claimed_hosts(inputs.inventory, inputs.playbook) for _, inputs in loaded}
    names = limited_deployments(loaded[0][1].inventory, hosts_of, pattern)
    for _, inputs in loaded:
        if inputs.playbook.name not in names:
            click.echo(f"fleet: watch: {inputs.playbook.name}: not watched (--limit matches none of its hosts)", err=True)
    return {inputs.playbook.name: _kept(inputs, pattern) for _, inputs in loaded if inputs.playbook.name in names}


def _kept(inputs: Inputs, pattern: str) -> frozenset[str]:
    """The hosts the watch acts on under ``--limit``: the limited ones, with the deployment's
    spare hosts, so that a group the watch places on a spare stays watched.  A limit that
    splits a group is refused (the watch recreates groups whole)."""
    whole = target_of(deployment(inputs))
    kept = narrowed(whole, inputs.inventory, pattern)  # the "splits group" / "matches none" errors
    return frozenset(h.name for h in (*kept.hosts, *spare_hosts(inputs.inventory, inputs.playbook)))


def within(target: Target, keep: frozenset[str] | None) -> Target:
    """``target`` narrowed to the hosts ``keep`` names (None: whole); as ``--limit`` narrows."""
    if keep is None:
        return target
    return replace(target, hosts=tuple(h for h in target.hosts if h.name in keep), units=limit(target.units, keep))


class _History:
    """Each action of the watch as a run in the local record ``fleet history`` reads
    (:mod:`launcher.history`): the group's hosts, its outcome, how long the action took."""

    OUTCOMES = {"recovered": "recreated", "recreate-failed": "failed", "registered": "registered",
                "register-failed": "failed", "crash-loop": "gave-up", "placed": "placed", "place-failed": "failed"}  # fmt: skip

    def __init__(self, playbooks: dict[str, str], report: Sink) -> None:
        self.playbooks = playbooks  # deployment -> playbook as given
        self.report = report

    def __call__(self, event: WatchEvent) -> None:
        outcome = self.OUTCOMES.get(event.kind)
        if outcome is None:
            return
        from launcher import history

        given = event.data.get("hosts", ())
        hosts = [str(h) for h in given] if isinstance(given, (list, tuple)) else []
        took = event.data.get("took_s", 0.0)
        took_s = float(took) if isinstance(took, (int, float)) else 0.0
        pb = self.playbooks[event.deployment]
        run = history.Run(
            started=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(event.at - took_s)), command=("fleet", *sys.argv[1:]),
            user=getpass.getuser(), deployment=event.deployment, playbook=pb, playbook_sha256=history.digest(pb),
            hosts=tuple(hosts), outcomes=history.of([(h, event.group, outcome) for h in hosts]), duration_s=took_s,
            exit_code=0 if outcome in ("recreated", "registered") else 1,
        )  # fmt: skip
        try:
            history.record(run)
        except (OSError, FleetError) as err:
            self.report(WatchEvent(kind="note", deployment=event.deployment, group=event.group, at=event.at,
                                   message=f"not recorded in the run history: {err}"))  # fmt: skip


def _publish(loaded: list[tuple[str, Inputs]], flag: str | None, port: int, address: str) -> None:
    """The watch's endpoint into each deployment's scrape targets file (``--targets-file``, else
    the playbook's ``metrics.targets_file``), beside the deployment's own targets."""
    from launcher.observe import sdfile
    from launcher.observe.targets import WATCH_KIND, watch_group

    here = socket.gethostname()
    shown = here if address in ("0.0.0.0", "::", "") else address
    for _, inputs in loaded:
        path = checked_targets_path(inputs.playbook, flag)
        if path is not None:
            group = watch_group(inputs.playbook.name, inputs.playbook.recipe, here, f"{shown}:{port}")
            sdfile.update(path, {inputs.playbook.name}, [group], keep=lambda g: g["labels"].get("kind") != WATCH_KIND)


def _install(playbooks: tuple[str, ...], inventory: InventorySources, known_hosts: tuple[str, ...], names: list[str],
             output: str | None) -> None:  # fmt: skip
    """Writes the service: this command line, absolute, without --install/-o/--trust-new-hosts."""
    fleet = shutil.which("fleet") or str(Path(sys.argv[0]).resolve())
    argv = [str(Path(fleet).resolve()), "watch", *(str(Path(p).resolve()) for p in playbooks)]
    for source in inventory.sources:  # a host list 'h1,h2,' stays as given
        argv += ["-i", str(Path(source).resolve()) if os.path.exists(source) else source]
    if inventory.vault_password_file is not None:
        argv += ["--vault-password-file", str(Path(inventory.vault_password_file).resolve())]
    for kh in known_hosts:
        argv += ["--known-hosts", str(Path(kh).resolve())]
    ctx = click.get_current_context()
    skip = {"playbooks", "inventory_path", "known_hosts", "trust_new_hosts", "install", "output"}
    for param in ctx.command.params:
        if param.name in skip or param.name not in ctx.params or not isinstance(param, click.Option):
            continue
        value = ctx.params[param.name or ""]
        if ctx.get_parameter_source(param.name or "") != click.core.ParameterSource.COMMANDLINE:
            continue
        flag = param.opts[-1] if param.opts[-1].startswith("--") else param.opts[0]
        if param.is_flag:
            argv.append(flag) if value else None
        elif param.multiple:
            for v in value:
                argv += [flag, _absolute_secret(v) if param.name == "secrets" else str(v)]
        else:
            argv += [flag, f"{value:g}" if isinstance(value, float) else str(value)]
    path = Path(output) if output else Path("/etc/systemd/system") / unit_name(names)
    user = getpass.getuser()
    text = unit_text(argv, user=user, deployments=names, home=os.path.expanduser("~" + user))
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    except OSError as err:
        raise UsageError(f"{path}: {err.strerror or err}") from None
    click.echo(f"wrote {path}")
    click.echo(f"enable and start it: systemctl daemon-reload && systemctl enable --now {path.name}")
    click.echo(f"its events: journalctl -u {path.name} -f")
