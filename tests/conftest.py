"""Shared fixtures.  ``sandbox_fleet``: one sandbox fleet per test session, brought up on first
use and torn down at session end (also after failures).

Size: the largest ``SANDBOX_HOSTS`` any collected test module declares (at least 8), so one
sandbox serves the whole session -- a module that needs the RTX-6000D hosts h9..h15 says
``SANDBOX_HOSTS = 15`` and every sandbox test of the session shares those 15 hosts.

A module that sets ``SANDBOX_REAL_ENGINE = True`` (the ``real_engine`` tier) makes the session's
sandbox a real-engine one: every host's docker also holds the real vLLM image and its models dir
the generated model (``fleet sandbox up --real-engine``).

Settings (env): FLEET_SANDBOX_HOSTS (overrides the size), FLEET_SANDBOX_NAME (``pt<pid>``: concurrent pytest
sessions on one machine must not share -- and tear down -- each other's fleet; fleets of dead
sessions are removed first), FLEET_SANDBOX_DOCKER
(1; 0 = hosts without dockerd); FLEET_SSH_DEAD_AFTER_S (the SSH liveness bound of the ``fleet`` runs of a
session with sandbox or real-engine tests: :mod:`tests.loaded`'s unless set).  The fixture skips, printing why, where the sandbox cannot run
(not Linux/root, no sshd/ip/dockerd binaries).

``interrupts``: real SIGINTs to this process, taken as Python's default takes them, recorded
(:func:`sigint_taken` sends one from a worker thread and waits until the main thread has it).
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import time
from types import FrameType
from typing import Any, Iterator

import pytest

from launcher.sandbox.client import Sandbox
from tests.loaded import SSH_DEAD_AFTER_S


def pytest_collection_finish(session: pytest.Session) -> None:
    """A session that runs sandbox or real-engine tests runs ``fleet`` with the loaded machine's
    SSH liveness bound (:mod:`tests.loaded`) unless the environment sets one."""
    if any(item.get_closest_marker(m) for item in session.items for m in ("sandbox", "real_engine")):
        os.environ.setdefault("FLEET_SSH_DEAD_AFTER_S", SSH_DEAD_AFTER_S)


def _missing_prereq(docker: bool) -> str | None:
    if not sys.platform.startswith("linux") or os.geteuid() != 0:
        return "the sandbox fleet needs Linux and root"
    for tool in ("ip", "unshare", "nsenter", "ssh-keygen", "/usr/sbin/sshd") + (
        ("dockerd", "docker", "tini") if docker else ()
    ):
        if shutil.which(tool) is None:
            return f"the sandbox fleet needs {tool} (apt: openssh-server iproute2 docker.io tini)"
    return None


def _remove_orphans(fleet: Any) -> None:
    from launcher.sandbox import state

    for old in state.names():
        if old.startswith("pt") and old[2:].isdigit() and not os.path.exists(f"/proc/{old[2:]}"):
            fleet.down(old)


DEFAULT_SANDBOX_HOSTS = 8


def sandbox_size(session: pytest.Session) -> int:
    wanted = [getattr(getattr(item, "module", None), "SANDBOX_HOSTS", 0) for item in session.items]
    return int(os.environ.get("FLEET_SANDBOX_HOSTS") or max([DEFAULT_SANDBOX_HOSTS, *wanted]))


def sandbox_real_engine(session: pytest.Session) -> bool:
    return any(getattr(getattr(item, "module", None), "SANDBOX_REAL_ENGINE", False) for item in session.items)


@pytest.fixture(scope="session")
def sandbox_fleet(request: pytest.FixtureRequest) -> Iterator[Sandbox]:
    from launcher.sandbox import fleet

    n = sandbox_size(request.session)
    name = os.environ.get("FLEET_SANDBOX_NAME") or f"pt{os.getpid()}"
    docker = os.environ.get("FLEET_SANDBOX_DOCKER", "1") != "0"
    reason = _missing_prereq(docker)
    if reason:
        pytest.skip(reason)
    _remove_orphans(fleet)
    st = fleet.up(name, n, docker=docker, real_engine=docker and sandbox_real_engine(request.session))
    handle = Sandbox(st)
    try:
        yield handle
    finally:
        handle.close()
        fleet.down(name)


@pytest.fixture
def interrupts(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[float]]:
    """SIGINT raises KeyboardInterrupt in the main thread as Python's default does, and each one
    taken is recorded (so a worker can wait until the main thread has it); the fan-out's abandon
    grace is cut so that a case that abandons work does not wait it out."""
    from launcher.execute import fanout

    taken: list[float] = []

    def handler(signum: int, frame: FrameType | None) -> None:
        taken.append(time.monotonic())
        raise KeyboardInterrupt

    monkeypatch.setattr(fanout, "INTERRUPT_GRACE_S", 0.05)
    before = signal.signal(signal.SIGINT, handler)
    try:
        yield taken
    finally:
        signal.signal(signal.SIGINT, before)


def sigint_taken(interrupts: list[float]) -> None:
    """From a worker thread: a SIGINT to this process, returning once the main thread took it."""
    taken = len(interrupts)
    os.kill(os.getpid(), signal.SIGINT)
    deadline = time.monotonic() + 30
    while len(interrupts) == taken:
        assert time.monotonic() < deadline, "the interrupt was not taken"
        time.sleep(0.01)
