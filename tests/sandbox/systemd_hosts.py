"""A test module's own sandbox of systemd hosts (``<prefix><pid>``, no docker hosts), beside the
session's; sandboxes of this prefix left by dead pytest sessions are removed first."""

from __future__ import annotations

import os
import shutil
import sys
from typing import Iterator

import pytest

from launcher.sandbox import fleet as sandbox
from launcher.sandbox import state as sandbox_state
from launcher.sandbox.client import Sandbox

TOOLS = ("ip", "nsenter", "unshare", "dockerd", "docker", "tini", "mmdebstrap", "ssh-keygen")


def skip_unless_possible() -> None:
    if not sys.platform.startswith("linux") or os.geteuid() != 0:
        pytest.skip("systemd sandbox hosts need Linux and root")
    for tool in TOOLS:
        if shutil.which(tool) is None:
            pytest.skip(f"systemd sandbox hosts need {tool} (scripts/install.sh)")


def own_sandbox(prefix: str, hosts: int, *, real_engine: bool = False) -> Iterator[Sandbox]:
    """For a module fixture: ``yield from own_sandbox("sd", 2)``; torn down after the module."""
    skip_unless_possible()
    for old in sandbox_state.names():
        if old.startswith(prefix) and old[len(prefix):].isdigit() and not os.path.exists(f"/proc/{old[len(prefix):]}"):
            sandbox.down(old)
    name = f"{prefix}{os.getpid()}"
    handle = Sandbox(sandbox.up(name, 0, docker=False, systemd_hosts=hosts, real_engine=real_engine))
    try:
        yield handle
    finally:
        handle.close()
        sandbox.down(name)
