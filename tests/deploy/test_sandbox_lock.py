"""The deploy lock on a shared host and after a lost connection (issue 16 items 1 and 10), on the
sandbox fleet (real sshd and dockerd per host, the engine stand-in and the real sglang-router),
through the real ``fleet`` CLI.

- Another local user (``nobody``, on a host whose ``/run/lock`` is world-writable and sticky, as
  on Debian) creates ``/run/lock/fleet`` first -- as a directory of theirs, or as a symlink to
  one: fleet refuses with one line naming the host and the path, exit 1, and writes nothing into
  it or through it.
- Packets to h7's SSH port are dropped (nft in h7's namespace) once h7's step of ``fleet up`` is
  done (an engine on h7 healthy; the router on h6 starting): up exits non-zero naming h7 and the
  exact ``fleet unlock`` command, and h7's lock stays.  With h7 reachable again the next ``fleet
  up`` sees the holder is gone (same control host, its process ended) and takes the lock over,
  saying so.
"""

from __future__ import annotations

import shlex
import subprocess
import time
from pathlib import Path
from typing import Iterator

import pytest

from launcher.sandbox.client import Sandbox
from tests.cli_process import CliProcess
from tests.deploy.test_sandbox_e2e import fleet, need_netns
from tests.sandbox_playbooks import standin_playbook

pytestmark = pytest.mark.sandbox

REPO = Path(__file__).resolve().parents[2]
SINGLE = REPO / "playbooks" / "sandbox" / "single.yaml"  # sb-single on h1
NOBODY = "setpriv --reuid=65534 --regid=65534 --clear-groups"
WAIT_S = 120.0

LOST = standin_playbook("sb-lost", "qwen/sglang-tp2-h100-tuned", {"single": "h7", "router": "h6"}, start_timeout_s=60,
                        ports={"http": 31400, "router": 8400, "router_metrics": 29400})


def root_sh(sb: Sandbox, host: str, cmd: str) -> str:
    res = sb.ssh(host, cmd)
    assert res.rc == 0, res.err
    return res.out


@pytest.fixture
def shared_h1(sandbox_fleet: Sandbox) -> Iterator[Sandbox]:
    """h1 with a Debian-like /run/lock (1777) and no fleet lock root yet; cleaned up after."""
    root_sh(sandbox_fleet, "h1", "mkdir -p /run/lock && chmod 1777 /run/lock && rm -rf /run/lock/fleet /srv/nobody")
    yield sandbox_fleet
    root_sh(sandbox_fleet, "h1", "rm -rf /run/lock/fleet /srv/nobody")


def test_a_lock_root_another_user_made_is_refused(shared_h1: Sandbox) -> None:
    sb = shared_h1
    root_sh(sb, "h1", f"{NOBODY} mkdir -m 0777 /run/lock/fleet")
    res = fleet(sb, "down", str(SINGLE))
    assert (res.returncode, res.stderr.strip().splitlines()[-1]) == (1, (
        "fleet: error: h1: refusing the deploy lock: /run/lock/fleet is owned by uid 65534, not by the connecting "
        "user (uid 0); remove it as root and run again"
    )), res.stderr  # fmt: skip
    assert root_sh(sb, "h1", "ls -A /run/lock/fleet") == "", "nothing written into their directory"


def test_a_lock_root_that_is_a_symlink_is_refused(shared_h1: Sandbox) -> None:
    sb = shared_h1
    root_sh(sb, "h1", f"mkdir -m 0755 /srv/nobody && chown 65534:65534 /srv/nobody && "
                      f"{NOBODY} ln -s /srv/nobody /run/lock/fleet")  # fmt: skip
    res = fleet(sb, "down", str(SINGLE))
    assert (res.returncode, res.stderr.strip().splitlines()[-1]) == (
        1, "fleet: error: h1: refusing the deploy lock: /run/lock/fleet is a symlink; remove it as root and run again"
    ), res.stderr  # fmt: skip
    assert root_sh(sb, "h1", "ls -A /srv/nobody") == "", "nothing written through the link"


def _drop_ssh(sb: Sandbox, host: str, drop: bool) -> None:
    """Packets to ``host``'s SSH port dropped (or let through again), inside its namespace."""
    h = sb.host(host)
    script = (f"add table inet fleetdrop\nadd chain inet fleetdrop in {{ type filter hook input priority 0; }}\n"
              f"add rule inet fleetdrop in tcp dport {h.port} drop\n") if drop else "delete table inet fleetdrop\n"  # fmt: skip
    proc = subprocess.run(("ip", "netns", "exec", h.netns, "nft", "-f", "-"), input=script, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_a_lock_left_by_a_lost_connection_is_reported_then_taken_over(sandbox_fleet: Sandbox, tmp_path: Path) -> None:
    sb = sandbox_fleet
    need_netns(sb)
    pb = tmp_path / "lost.yaml"
    pb.write_text(LOST)
    unlock = shlex.join(("fleet", "unlock", str(pb), "-i", sb.inventory))
    up = CliProcess(["fleet", "up", str(pb), "--skip-preflight", "-i", sb.inventory, "--known-hosts", sb.known_hosts],
                    tmp_path, "up")  # fmt: skip
    dropped = False
    try:
        deadline = time.monotonic() + WAIT_S
        # h7's engine is healthy and h6's router step began: nothing more runs on h7 but the release.
        while not any(line.startswith("h6/") and line.endswith(": installing") for line in up.stderr.splitlines()):
            assert up.proc.poll() is None, f"fleet exited {up.proc.returncode}:\n{up.stdout}\n{up.stderr}"
            assert time.monotonic() < deadline, up.stderr
            time.sleep(0.05)
        _drop_ssh(sb, "h7", True)
        dropped = True
        rc = up.proc.wait(timeout=WAIT_S)
        out = up.stdout + up.stderr
        assert rc != 0, out
        assert (f"h7: the deploy lock /run/lock/fleet/sb-lost was not released (unreachable: cannot open a session for "
                in out), out  # fmt: skip
        assert f"once h7 answers, clear it with: {unlock}" in out, out
        _drop_ssh(sb, "h7", False)
        dropped = False
        held = root_sh(sb, "h7", "cat /run/lock/fleet/sb-lost/owner").strip()
        assert f" pid={up.proc.pid} " in held, held

        again = fleet(sb, "up", str(pb), "--skip-preflight")
        assert again.returncode == 0, again.stdout + again.stderr
        assert f"h7: took over the deploy lock of a fleet run that is gone ({held})" in again.stderr, again.stderr
    finally:
        if dropped:
            _drop_ssh(sb, "h7", False)
        up.close()
        fleet(sb, "down", str(pb), "--break-lock")
