"""run_all over real sshds: per-host outcomes, dead and hung hosts, bounded concurrency, Ctrl-C."""

from __future__ import annotations

import os
import signal
import threading
from dataclasses import replace
from pathlib import Path

import pytest

from launcher.errors import InputError, HostKeyError, RemoteError, UnreachableError
from launcher.execute.fanout import (
    Failed,
    FanoutInterrupted,
    Ok,
    Unreachable,
    run_all,
)
from launcher.execute.hostkeys import KnownHosts
from launcher.execute.ssh import SshConnector
from launcher.execute.transport import Transport
from launcher.model import Host

from .sshd import TEST_OPTIONS, Sshd, SshdFactory


def _whoami(host: Host, t: Transport) -> str:
    return t.run(["sh", "-c", "echo $FLEET_TEST_HOST"], timeout=20, check=True).stdout_text.strip()


def test_every_host_reports_in_input_order(connector: SshConnector, fleet: tuple[Sshd, ...]) -> None:
    hosts = [s.host() for s in reversed(fleet)]
    result = run_all(hosts, _whoami, connector=connector, forks=2)
    assert [(type(o), o.host.name) for o in result.outcomes] == [(Ok, h.name) for h in hosts]
    assert result.values() == {"h4": "h4", "h3": "h3", "h2": "h2", "h1": "h1"}
    assert result.all_ok


def test_failures_do_not_lose_successes(connector: SshConnector, fleet: tuple[Sshd, ...]) -> None:
    def fn(host: Host, t: Transport) -> str:
        if host.name == "h2":
            t.run(["false"], timeout=10, check=True)
        if host.name == "h3":
            raise ValueError("bug in fn")
        return _whoami(host, t)

    result = run_all([s.host() for s in fleet], fn, connector=connector)
    assert result.values() == {"h1": "h1", "h4": "h4"}
    failed = {o.host.name: o for o in result.failed}
    assert isinstance(failed["h2"].error, RemoteError)
    assert failed["h2"].message == "h2: false: exit 1"
    assert failed["h3"].message == "h3: internal error: ValueError: bug in fn"
    assert not result.all_ok


def test_dead_and_hung_hosts_are_unreachable_while_others_finish(
    sshd_factory: SshdFactory, fleet: tuple[Sshd, ...], known_hosts_file: Path
) -> None:
    dead = sshd_factory.start("dead")
    hung = sshd_factory.start("hung")
    with known_hosts_file.open("a") as f:
        f.write(f"{dead.known_line}\n{hung.known_line}\n")
    dead.proc.kill()
    dead.proc.wait()
    os.kill(hung.proc.pid, signal.SIGSTOP)  # TCP still connects; the banner never comes
    known = KnownHosts((known_hosts_file,), record_to=known_hosts_file.parent / "r")
    try:
        # The hung host is named by a short banner bound; the live ones get the loaded machine's
        # (TEST_OPTIONS): their sshd's banner waits for CPU at CI's load.
        with SshConnector(known, replace(TEST_OPTIONS, banner_timeout=HUNG_BANNER_S)) as short, \
                SshConnector(known, TEST_OPTIONS) as live:  # fmt: skip
            hosts = [dead.host(), hung.host(), *(s.host() for s in fleet)]
            result = run_all(hosts, _whoami, connector=_ByHost({"dead", "hung"}, short, live), forks=8)
    finally:
        os.kill(hung.proc.pid, signal.SIGCONT)
    assert result.values() == {s.name: s.name for s in fleet}
    reasons = {o.host.name: o.reason for o in result.unreachable}
    assert reasons == {
        "dead": f"dead: unreachable: connection refused by 127.0.0.1:{dead.port}",
        "hung": f"hung: unreachable: no SSH banner from [127.0.0.1]:{hung.port} within {HUNG_BANNER_S:g}s",
    }


HUNG_BANNER_S = 3.0


class _ByHost:
    """One fan-out over two real connectors: the named hosts' through ``these``, the rest through
    ``others`` (each connector's bounds are its own)."""

    def __init__(self, names: set[str], these: SshConnector, others: SshConnector) -> None:
        self.names, self.these, self.others = names, these, others

    def connect(self, host: Host) -> Transport:
        return (self.these if host.name in self.names else self.others).connect(host)

    def close(self) -> None:
        self.these.close()
        self.others.close()


def test_host_key_refusal_is_per_host(connector: SshConnector, fleet: tuple[Sshd, ...],
                                      sshd_factory: SshdFactory) -> None:
    stranger = sshd_factory.start("stranger")
    result = run_all([fleet[0].host(), stranger.host()], _whoami, connector=connector)
    assert result.values() == {"h1": "h1"}
    (bad,) = result.unreachable
    assert isinstance(bad.error, HostKeyError)
    assert bad.reason.startswith("stranger: host key unknown: ")


def test_forks_bound_concurrency(connector: SshConnector, fleet: tuple[Sshd, ...]) -> None:
    """Six host entries (aliases over the four servers), forks=3.  The barrier proves three run
    at once (it only opens for three); the counter proves never more than three."""
    hosts = [fleet[i % len(fleet)].host(name=f"n{i}") for i in range(6)]
    barrier = threading.Barrier(3, timeout=30)
    lock = threading.Lock()
    running = 0
    peak = 0

    def fn(host: Host, t: Transport) -> int:
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
        try:
            barrier.wait()
            return t.run(["sh", "-c", "echo $$"], timeout=20, check=True).exit_status
        finally:
            with lock:
                running -= 1

    result = run_all(hosts, fn, connector=connector, forks=3)
    assert result.all_ok, [getattr(o, "message", "") for o in result.failed]
    assert peak == 3


def test_ctrl_c_keeps_finished_hosts_and_aborts_the_rest(
    connector: SshConnector, fleet: tuple[Sshd, ...]
) -> None:
    first_done = threading.Event()

    def fn(host: Host, t: Transport) -> str:
        if host.name == "h1":
            try:
                return _whoami(host, t)
            finally:
                first_done.set()
        if host.name == "h2":
            first_done.wait(30)
            os.kill(os.getpid(), signal.SIGINT)  # the operator's Ctrl-C, delivered to the main thread
        t.run(["sleep", "60"], timeout=120)
        return "not reached"

    with pytest.raises(FanoutInterrupted) as info:
        run_all([s.host() for s in fleet], fn, connector=connector, forks=4)
    partial = info.value.partial
    assert [(o.host.name, getattr(o, "value", None)) for o in partial.outcomes] == [("h1", "h1")]
    # Connections are closed: nothing more can start on this connector.
    with pytest.raises(UnreachableError, match="connections were closed"):
        connector.connect(fleet[0].host())


def test_no_hosts_and_bad_forks(connector: SshConnector) -> None:
    assert run_all([], _whoami, connector=connector).outcomes == ()
    with pytest.raises(ValueError, match="forks must be >= 1, got 0"):
        run_all([], _whoami, connector=connector, forks=0)


def test_bad_connect_settings_stop_everything_before_any_host(
    connector: SshConnector, fleet: tuple[Sshd, ...]
) -> None:
    """Bad input (issue #26 item 10): one error before any host is contacted, not a failure on
    that host beside the others' results."""
    bad = replace(fleet[0].host(), ssh_common_args="-o ProxyCommand='nc %h %p'")
    ran: list[str] = []
    with pytest.raises(InputError) as caught:
        run_all([bad, fleet[1].host()], lambda h, t: ran.append(h.name), connector=connector)
    assert str(caught.value) == "<none>:0:0: h1/ansible_ssh_common_args: ProxyCommand is not supported; use ProxyJump"
    assert ran == []
