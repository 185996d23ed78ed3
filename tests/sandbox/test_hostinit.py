"""Host setup inside each sandbox host's own mount namespace (``launcher/sandbox/hostinit.py``)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from launcher.sandbox import fleet
from launcher.sandbox.client import Sandbox

pytestmark = pytest.mark.sandbox
BASHRC = Path("/root/.bashrc")


def _identity(path: Path) -> tuple[int, int, bytes]:
    st = path.stat()
    return st.st_dev, st.st_ino, path.read_bytes()


def _mount_points() -> set[str]:
    return {line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()}


def test_root_bashrc_is_empty_on_the_hosts_only() -> None:
    if os.geteuid() != 0 or shutil.which("/usr/sbin/sshd") is None:
        pytest.skip("needs root and sshd")
    if not BASHRC.is_file():
        pytest.skip("this machine has no /root/.bashrc to hide")
    before = _identity(BASHRC)
    name = (os.environ.get("FLEET_SANDBOX_NAME") or f"pt{os.getpid()}")[:10] + "rc"
    st = fleet.up(name, 1, docker=False)
    sb = Sandbox(st)
    try:
        seen = sb.ssh("h1", "stat -c '%s %i' ~/.bashrc; cat ~/.bashrc")
        assert seen.rc == 0, seen.err
        assert seen.out.startswith("0 "), f"the host sees a non-empty ~/.bashrc: {seen.out!r}"
        own = Path(st.host("h1").dir) / "root-bashrc"  # the host's own file, not root's
        assert seen.out == f"0 {own.stat().st_ino}\n"
        assert _identity(BASHRC) == before
        assert str(BASHRC) not in _mount_points()
    finally:
        sb.close()
        fleet.down(name)
    assert _identity(BASHRC) == before
