"""What the commands that talk to hosts share: SSH options, the connector, the execution
layer's notices on stderr and the progress display.  Loading a deployment is
:mod:`launcher.pipeline`'s.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import sys
from contextlib import ExitStack
from typing import Callable, Iterator, Sequence

import click

from launcher.cli.options import inventory_option
from launcher.config import settings
from launcher.execute.fanout import DEFAULT_FORKS
from launcher.execute.hostkeys import KnownHosts
from launcher.errors import UsageError
from launcher.execute.ssh import SshConnector, SshOptions
from launcher.output import LinesProgress, LiveProgress, Progress, QuietProgress


# `fleet up` and `fleet restart`: None follows the playbook's rollout.bench_gate.
bench_gate_option = click.option(
    "--bench-gate/--no-bench-gate", "bench_gate", default=None,
    help="Rolling rollouts: each batch must bench as well as the previous generation (default: gated when the "
         "playbook has rollout.bench_gate; --bench-gate without it uses its defaults).",
)  # fmt: skip


def limit_option(whole_groups: bool) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """``--limit PATTERN`` (see :mod:`launcher.limit`): Ansible's pattern grammar, applied before
    anything connects.  ``whole_groups``: the command restarts groups whole, so a limit that
    splits one is refused."""
    why = " (whole groups: a limit that splits one is refused)" if whole_groups else ""
    return click.option("--limit", "-l", "limit_pattern", default=None, metavar="PATTERN",
                        help=f"Only the hosts this pattern matches (group, host*, a:b, a:&b, a:!b, ~regex){why}.")


def _known_hosts_callback(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> tuple[str, ...]:
    if value:
        return value
    found = settings.lookup("known_hosts")
    return found.values if found is not None else ()


def _forks_callback(ctx: click.Context, param: click.Parameter, value: int | None) -> int:
    if value is not None:
        return value
    found = settings.lookup("forks")
    if found is None:
        return DEFAULT_FORKS
    text = found.values[0]
    if not text.isdigit() or not 1 <= int(text) <= 1024:
        raise click.BadParameter(f"{found.origin}: forks should be a number from 1 to 1024, got {text!r}", ctx, param)
    return int(text)


def ssh_options(f: Callable[..., None]) -> Callable[..., None]:
    """``-i/--inventory``, ``--known-hosts``, ``--trust-new-hosts`` and ``--forks``."""
    f = click.option("--forks", type=click.IntRange(1, 1024), default=None, callback=_forks_callback,
                     help=f"Hosts worked on at the same time (key exchanges stay capped at 8; default "
                          f"{DEFAULT_FORKS}) [env FLEET_FORKS].")(f)  # fmt: skip
    f = click.option("--trust-new-hosts", is_flag=True,
                     help="Record the keys of hosts never seen before (changed keys are still refused).")(f)
    f = click.option("--known-hosts", "known_hosts", multiple=True, metavar="FILE", callback=_known_hosts_callback,
                     help="Extra known_hosts file (repeatable), read after each host's own (its "
                          "UserKnownHostsFile, else ~/.ssh/known_hosts) and /etc/ssh/ssh_known_hosts "
                          "[env FLEET_KNOWN_HOSTS].")(f)  # fmt: skip
    return inventory_option(f)


def connector(known_hosts: Sequence[str], trust_new: bool) -> SshConnector:
    """Strict host-key checking against each host's known_hosts files (OpenSSH's, as its ssh
    settings name them) and ``known_hosts``; liveness as :func:`ssh_settings` says."""
    return SshConnector(KnownHosts.for_operator(tuple(known_hosts), trust_new=trust_new), ssh_settings())


def _seconds(key: str, default: float) -> float:
    found = settings.lookup(key)
    if found is None:
        return default
    text = found.values[0]
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not 1 <= value <= 3600:
        raise UsageError(f"{found.origin}: {key} should be a number of seconds from 1 to 3600, got {text!r}")
    return value


def ssh_settings(base: SshOptions = SshOptions()) -> SshOptions:
    """``base`` with the operator's liveness settings (``FLEET_SSH_KEEPALIVE_S`` /
    ``FLEET_SSH_DEAD_AFTER_S``, or fleet.cfg's ``ssh_keepalive_s`` / ``ssh_dead_after_s``:
    seconds, 1-3600; docs/configuration.md)."""
    return dataclasses.replace(base, keepalive_s=_seconds("ssh_keepalive_s", base.keepalive_s),
                               dead_after_s=_seconds("ssh_dead_after_s", base.dead_after_s))  # fmt: skip


class _EchoHandler(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        click.echo(f"fleet: {record.getMessage()}", err=True)


@contextlib.contextmanager
def execute_log_to_stderr(name: str = "fleet.execute") -> Iterator[None]:
    """Show the execution layer's notices (e.g. a newly trusted host key) on stderr."""
    logger = logging.getLogger(name)
    handler = _EchoHandler(logging.INFO)
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)


@contextlib.contextmanager
def sandbox_log_to_stderr() -> Iterator[None]:
    """Show the sandbox's progress lines (an image build's steps: minutes on a first run)."""
    logger = logging.getLogger("fleet.sandbox")
    level = logger.level
    logger.setLevel(logging.INFO)
    try:
        with execute_log_to_stderr("fleet.sandbox"):
            yield
    finally:
        logger.setLevel(level)


def progress(stack: ExitStack, quiet: bool) -> Progress:
    """Nothing when ``quiet``; a live display on a terminal (closed with ``stack``); else lines."""
    if quiet:
        return QuietProgress()
    if sys.stderr.isatty():
        return stack.enter_context(LiveProgress())
    return LinesProgress()


@contextlib.contextmanager
def progress_display(quiet: bool) -> Iterator[Progress]:
    """:func:`progress` as a context of its own (what a library flow opens and closes)."""
    with ExitStack() as stack:
        yield progress(stack, quiet)
