"""Shared fixtures.  ``sandbox_fleet``: one sandbox fleet per test session, brought up on first
use and torn down at session end (also after failures).

Settings (env): FLEET_SANDBOX_HOSTS (8), FLEET_SANDBOX_NAME (``pt<pid>``: concurrent pytest
sessions on one machine must not share -- and tear down -- each other's fleet; fleets of dead
sessions are removed first), FLEET_SANDBOX_DOCKER
(1; 0 = hosts without dockerd).  The fixture skips, printing why, where the sandbox cannot run
(not Linux/root, no sshd/ip/dockerd binaries).
"""

from __future__ import annotations

import os
import shutil
import sys
from typing import Any, Iterator

import pytest

from launcher.sandbox.client import Sandbox


def _missing_prereq(docker: bool) -> str | None:
    if not sys.platform.startswith("linux") or os.geteuid() != 0:
        return "the sandbox fleet needs Linux and root"
    for tool in ("ip", "unshare", "nsenter", "ssh-keygen", "/usr/sbin/sshd") + (
        ("dockerd", "docker") if docker else ()
    ):
        if shutil.which(tool) is None:
            return f"the sandbox fleet needs {tool} (apt: openssh-server iproute2 docker.io)"
    return None


def _remove_orphans(fleet: Any) -> None:
    from launcher.sandbox import state

    for old in state.names():
        if old.startswith("pt") and old[2:].isdigit() and not os.path.exists(f"/proc/{old[2:]}"):
            fleet.down(old)


@pytest.fixture(scope="session")
def sandbox_fleet() -> Iterator[Sandbox]:
    from launcher.sandbox import fleet

    n = int(os.environ.get("FLEET_SANDBOX_HOSTS", "8"))
    name = os.environ.get("FLEET_SANDBOX_NAME") or f"pt{os.getpid()}"
    docker = os.environ.get("FLEET_SANDBOX_DOCKER", "1") != "0"
    reason = _missing_prereq(docker)
    if reason:
        pytest.skip(reason)
    _remove_orphans(fleet)
    st = fleet.up(name, n, docker=docker)
    handle = Sandbox(st)
    try:
        yield handle
    finally:
        handle.close()
        fleet.down(name)
