"""What the commands that talk to hosts share: SSH options, the connector, the execution
layer's notices on stderr and the progress display.  Loading a deployment is
:mod:`launcher.pipeline`'s.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from contextlib import ExitStack
from typing import Callable, Iterator, Sequence

import click

from launcher.execute.fanout import DEFAULT_FORKS
from launcher.execute.hostkeys import KnownHosts
from launcher.execute.ssh import SshConnector
from launcher.output import LinesProgress, LiveProgress, Progress, QuietProgress


# `fleet up` and `fleet restart`: None follows the playbook's rollout.bench_gate.
bench_gate_option = click.option(
    "--bench-gate/--no-bench-gate", "bench_gate", default=None,
    help="Rolling rollouts: each batch must bench as well as the previous generation (default: gated when the "
         "playbook has rollout.bench_gate; --bench-gate without it uses its defaults).",
)  # fmt: skip


def ssh_options(f: Callable[..., None]) -> Callable[..., None]:
    """``-i/--inventory``, ``--known-hosts``, ``--trust-new-hosts`` and ``--forks``."""
    f = click.option("--forks", type=click.IntRange(1, 1024), default=DEFAULT_FORKS, show_default=True,
                     help="Hosts worked on at the same time (key exchanges stay capped at 8).")(f)  # fmt: skip
    f = click.option("--trust-new-hosts", is_flag=True,
                     help="Record the keys of hosts never seen before (changed keys are still refused).")(f)
    f = click.option("--known-hosts", "known_hosts", multiple=True, metavar="FILE",
                     help="Extra known_hosts file (repeatable), read after each host's own (its "
                          "UserKnownHostsFile, else ~/.ssh/known_hosts) and /etc/ssh/ssh_known_hosts.")(f)
    f = click.option("-i", "--inventory", "inventory_path", required=True, metavar="INV",
                     help="Ansible inventory (YAML or INI).")(f)
    return f


def connector(known_hosts: Sequence[str], trust_new: bool) -> SshConnector:
    """Strict host-key checking against each host's known_hosts files (OpenSSH's, as its ssh
    settings name them) and ``known_hosts``."""
    return SshConnector(KnownHosts.for_operator(tuple(known_hosts), trust_new=trust_new))


class _EchoHandler(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        click.echo(f"fleet: {record.getMessage()}", err=True)


@contextlib.contextmanager
def execute_log_to_stderr() -> Iterator[None]:
    """Show the execution layer's notices (e.g. a newly trusted host key) on stderr."""
    logger = logging.getLogger("fleet.execute")
    handler = _EchoHandler(logging.INFO)
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)


def progress(stack: ExitStack, quiet: bool) -> Progress:
    """Nothing when ``quiet``; a live display on a terminal (closed with ``stack``); else lines."""
    if quiet:
        return QuietProgress()
    if sys.stderr.isatty():
        return stack.enter_context(LiveProgress())
    return LinesProgress()
