"""The deploy lock on a shared host and after a lost connection (issue 16 items 1 and 10, issue 25
item 2), on the sandbox fleet (real sshd and dockerd per host, the engine stand-in and the real
sglang-router), through the real ``fleet`` CLI.

- Another local user (``nobody``) creating ``/run/lock/fleet`` first (world-writable and sticky,
  as on Debian) no longer blocks deploys: the lock lives in ``/run/fleet``, where only root can
  create entries.
- ``fleet unlock`` never removes through a planted symlink: with ``/run/lock/fleet`` and (on a
  host whose ``/run`` others may write, sticky) ``/run/fleet`` made symlinks to a root-owned
  directory by ``nobody``, unlock refuses in one line naming the path and removes nothing.
- A ``/run/fleet`` of another user (same host) is refused in one line that says what to do.
- ``fleet unlock`` removes a deploy lock and a preflight claim left by a run of another control
  host, naming both.
- Packets to h7's SSH port are dropped (nft in h7's namespace) once h7's step of ``fleet up`` is
  done (an engine on h7 healthy, the router on h6 too: fleet is held by its step hook just before
  it releases the locks): up exits non-zero naming h7 and the
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
from tests.deploy.test_sandbox_faults import HOOK
from tests.deploy.test_sandbox_e2e import fleet, need_netns
from tests.sandbox_playbooks import standin_playbook

pytestmark = pytest.mark.sandbox

REPO = Path(__file__).resolve().parents[2]
SINGLE = REPO / "playbooks" / "sandbox" / "single.yaml"  # sb-single on h1
NOBODY = "setpriv --reuid=65534 --regid=65534 --clear-groups"
WAIT_S = 120.0
# fleet's end once h7 is dropped: its release waits for the liveness bound (the session's
# FLEET_SSH_DEAD_AFTER_S, tests/loaded.py: 60 s, after a keepalive interval of 10 s), so more.
EXIT_S = 240.0

LOST = standin_playbook("sb-lost", "qwen/sglang-tp2-h100-tuned", {"single": "h7", "router": "h6"}, start_timeout_s=60,
                        ports={"http": 31400, "router": 8400, "router_metrics": 29400})


def root_sh(sb: Sandbox, host: str, cmd: str) -> str:
    res = sb.ssh(host, cmd)
    assert res.rc == 0, res.err
    return res.out


@pytest.fixture
def shared_h1(sandbox_fleet: Sandbox) -> Iterator[Sandbox]:
    """h1 with a Debian-like /run/lock (1777), no lock roots yet; /run's mode and the victim
    directories restored after."""
    mode = root_sh(sandbox_fleet, "h1", "stat -c %a /run").strip()
    clean = "rm -rf /run/lock/fleet /run/fleet /srv/nobody /srv/victim"
    root_sh(sandbox_fleet, "h1", f"mkdir -p /run/lock && chmod 1777 /run/lock && {clean}")
    yield sandbox_fleet
    root_sh(sandbox_fleet, "h1", f"chmod {mode} /run && {clean}")


def test_another_users_run_lock_fleet_no_longer_blocks_deploys(shared_h1: Sandbox) -> None:
    sb = shared_h1
    root_sh(sb, "h1", f"{NOBODY} mkdir -m 0777 /run/lock/fleet && {NOBODY} mkdir /run/lock/fleet/sb-single")
    res = fleet(sb, "down", str(SINGLE))
    assert res.returncode == 0, res.stdout + res.stderr
    assert root_sh(sb, "h1", "stat -c '%U %a' /run/fleet /run/fleet/lock").split() == ["root", "755", "root", "755"]
    assert root_sh(sb, "h1", "ls -A /run/fleet/lock /run/lock/fleet/sb-single") == "/run/fleet/lock:\n\n/run/lock/fleet/sb-single:\n"


def test_unlock_never_removes_through_a_planted_symlink(shared_h1: Sandbox) -> None:
    sb = shared_h1
    # What the symlinks lead to: root's own directories, named like the lock (the attacker's choice).
    root_sh(sb, "h1", "mkdir -p /srv/victim/sb-single /srv/victim/lock/sb-single && touch /srv/victim/sb-single/keep "
                      "/srv/victim/lock/sb-single/keep && chmod 1777 /run")  # fmt: skip
    root_sh(sb, "h1", f"{NOBODY} ln -s /srv/victim /run/lock/fleet && {NOBODY} ln -s /srv/victim /run/fleet")
    res = fleet(sb, "unlock", str(SINGLE))
    assert (res.returncode, (res.stderr.strip().splitlines() or [""])[-1]) == (
        1, "fleet: error: h1: refusing the deploy lock: /run/fleet is a symlink; remove it as root and run again"
    ), res.stderr  # fmt: skip
    assert root_sh(sb, "h1", "ls /srv/victim/sb-single /srv/victim/lock/sb-single").split() == [
        "/srv/victim/lock/sb-single:", "keep", "/srv/victim/sb-single:", "keep"]


def test_unlock_removes_the_deploy_lock_and_the_preflight_claim_of_a_gone_control_host(sandbox_fleet: Sandbox) -> None:
    """Both left on h1 by a run of another control host (not taken over from here: its pid is
    not ours to judge); one ``fleet unlock`` removes both, and says so."""
    sb = sandbox_fleet
    gone = "ops@ctl-b pid=4242 start=1.00 time=2026-12-06T03:00:00Z id=0123456789ab"
    root_sh(sb, "h1", "mkdir -p /run/fleet/lock/sb-single /run/fleet/lock/sb-single.preflight && "
                      f"echo '{gone}' > /run/fleet/lock/sb-single/owner && "
                      f"echo '{gone}' > /run/fleet/lock/sb-single.preflight/owner")  # fmt: skip
    res = fleet(sb, "unlock", str(SINGLE))
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.splitlines()[0] == f"h1: removed lock of {gone}; preflight claim of {gone}", res.stdout
    assert root_sh(sb, "h1", "ls -A /run/fleet/lock") == ""
    again = fleet(sb, "unlock", str(SINGLE))
    assert again.stdout.splitlines()[0] == "h1: not locked", again.stdout


def test_a_lock_root_another_user_made_is_refused_saying_what_to_do(shared_h1: Sandbox) -> None:
    sb = shared_h1
    root_sh(sb, "h1", f"chmod 1777 /run && {NOBODY} mkdir -m 0755 /run/fleet")
    res = fleet(sb, "down", str(SINGLE))
    assert (res.returncode, (res.stderr.strip().splitlines() or [""])[-1]) == (1, (
        "fleet: error: h1: refusing the deploy lock: /run/fleet is owned by uid 65534, not by root or the connecting "
        "user (uid 0); remove it as root and run again"
    )), res.stderr  # fmt: skip
    assert root_sh(sb, "h1", "ls -A /run/fleet") == "", "nothing written into their directory"


def _drop_ssh(sb: Sandbox, host: str, drop: bool) -> None:
    """Packets to ``host``'s SSH port dropped (or let through again), inside its namespace."""
    h = sb.host(host)
    script = (f"add table inet fleetdrop\nadd chain inet fleetdrop in {{ type filter hook input priority 0; }}\n"
              f"add rule inet fleetdrop in tcp dport {h.port} drop\n") if drop else "delete table inet fleetdrop\n"  # fmt: skip
    proc = subprocess.run(("ip", "netns", "exec", h.netns, "nft", "-f", "-"), input=script, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_a_lock_left_by_a_lost_connection_is_reported_then_taken_over(sandbox_fleet: Sandbox, tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    sb = sandbox_fleet
    need_netns(sb)
    pb = tmp_path / "lost.yaml"
    pb.write_text(LOST)
    unlock = shlex.join(("fleet", "unlock", str(pb), "-i", sb.inventory))
    hold = tmp_path / "hold"
    hold.mkdir()
    (hold / "hook.sh").write_text(HOOK)
    with monkeypatch.context() as env:  # this fleet's environment only: held before its release on h7
        env.setenv("FLEET_STEP_HOOK", f"sh {hold / 'hook.sh'}")
        env.setenv("FAULT_STEP", "release")
        env.setenv("FAULT_HOST", "h7")
        env.setenv("FAULT_DIR", str(hold))
        up = CliProcess(["fleet", "up", str(pb), "--skip-preflight", "-i", sb.inventory, "--known-hosts",
                         sb.known_hosts], tmp_path, "up")  # fmt: skip
    dropped = False
    try:
        deadline = time.monotonic() + WAIT_S
        # Every step done (h7's engine and h6's router healthy): nothing more runs on h7 but the
        # release, which waits until h7 is dropped.
        while not (hold / "at").exists():
            assert up.proc.poll() is None, f"fleet exited {up.proc.returncode}:\n{up.stdout}\n{up.stderr}"
            assert time.monotonic() < deadline, up.stderr
            time.sleep(0.05)
        _drop_ssh(sb, "h7", True)
        dropped = True
        (hold / "go").touch()
        rc = up.proc.wait(timeout=EXIT_S)
        out = up.stdout + up.stderr
        assert rc != 0, out
        # Its release found the connection gone (the liveness bound cut it off) or could not open a session on it.
        assert "h7: the deploy lock /run/fleet/lock/sb-lost was not released (unreachable: " in out, out
        assert f"once h7 answers, clear it with: {unlock}" in out, out
        _drop_ssh(sb, "h7", False)
        dropped = False
        held = root_sh(sb, "h7", "cat /run/fleet/lock/sb-lost/owner").strip()
        assert f" pid={up.proc.pid} " in held, held

        again = fleet(sb, "up", str(pb), "--skip-preflight")
        assert again.returncode == 0, again.stdout + again.stderr
        assert f"h7: took over the deploy lock of a fleet run that is gone ({held})" in again.stderr, again.stderr
    finally:
        (hold / "go").touch()
        if dropped:
            _drop_ssh(sb, "h7", False)
        up.close()
        fleet(sb, "down", str(pb), "--break-lock")
