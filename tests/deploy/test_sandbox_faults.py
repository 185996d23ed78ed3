"""Faults at every step of every command that changes hosts (issue 25, "Faults, every step"),
on the sandbox fleet through the real CLI: ``up``, ``down``, ``restart --rolling`` and
``unlock`` of one small deployment (an engine on h8, its router on h4), each with h8

- dropped: nft drops every packet to its SSH port (connects time out, a connection goes silent), or
- hung: its sshd and every sshd session process SIGSTOPped (TCP connects, no banner or answer comes)

at the first step (before connecting: each kind on two of the commands) and just before each
later step (``test_a_host_lost_at_each_step``: the step hook, ``FLEET_STEP_HOOK``, holds fleet
there until h8 is broken; the kinds take turns, both at every step with
``FLEET_FAULTS_EVERY_STEP=1``), ends in a non-zero exit whose last line names h8; no deploy lock
stays on h4 (the host that did answer) and one stays on h8 only where fleet printed the ``fleet
unlock`` command; nothing is half-up on h4 (``up`` started nothing there unless only the release
failed, ``restart`` stopped nothing, ``down`` removed the router only once it got that far); with
h8 back, the same command converges (exit 0, no lock anywhere).  One deployment, one sandbox;
each case costs the fault's detection (10 s connect or banner deadline before connecting, the
liveness bound, 7 s here, after) plus the re-run.  Weights staging's faults are in
tests/weights/test_sandbox_faults.py.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Iterator

import psutil
import pytest

from launcher.deploy.lock import lock_dir
from launcher.sandbox.client import Sandbox
from tests.deploy.test_sandbox_e2e import REPO, fleet, need_netns
from tests.sandbox_playbooks import standin_playbook

pytestmark = pytest.mark.sandbox

NAME = "sb-faults"
FAULTS = standin_playbook(NAME, "qwen/sglang-tp2-h100-tuned", {"single": "h8", "router": "h4"}, start_timeout_s=60,
                          ports={"http": 31610, "router": 8610, "router_metrics": 29610})
HOSTS = ("h4", "h8")


@pytest.fixture(scope="module")
def pb(sandbox_fleet: Sandbox, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    need_netns(sandbox_fleet)
    path = tmp_path_factory.mktemp("faults") / "faults.yaml"
    path.write_text(FAULTS)
    yield path
    fleet(sandbox_fleet, "down", str(path), "--break-lock")


def _sshd_tree(sb: Sandbox, h: str) -> list[psutil.Process]:
    host = sb.host(h)
    assert host.sshd is not None
    top = psutil.Process(host.sshd.pid)
    return [top, *(p for p in top.children(recursive=True) if p.name().startswith("sshd"))]


class Fault:
    """``kind`` on ``host`` while the block runs: ``drop`` (nft, in its namespace) or ``hang``."""

    def __init__(self, sb: Sandbox, host: str, kind: str) -> None:
        self.sb, self.host, self.kind = sb, host, kind
        self.stopped: list[psutil.Process] = []

    def _nft(self, script: str) -> None:
        h = self.sb.host(self.host)
        proc = subprocess.run(("ip", "netns", "exec", h.netns, "nft", "-f", "-"), input=script, capture_output=True,
                              text=True)  # fmt: skip
        assert proc.returncode == 0, proc.stderr

    def __enter__(self) -> Fault:
        if self.kind == "drop":
            port = self.sb.host(self.host).port
            self._nft("add table inet fleetfaults\nadd chain inet fleetfaults in { type filter hook input priority 0; }\n"
                      f"add rule inet fleetfaults in tcp dport {port} drop\n")
        else:
            self.stopped = _sshd_tree(self.sb, self.host)
            for p in self.stopped:
                p.suspend()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.kind == "drop":
            self._nft("delete table inet fleetfaults\n")
        for p in self.stopped:
            p.resume()


def _locked(sb: Sandbox, host: str) -> bool:
    return sb.ssh(host, f"test -e {lock_dir(NAME)}").rc == 0


def _containers(sb: Sandbox, host: str) -> list[str]:
    res = sb.ssh(host, f"docker ps --format '{{{{.Names}}}}' --filter name=fleet-{NAME}-")
    assert res.rc == 0, res.err
    return sorted(res.out.split())


def _state(sb: Sandbox, pb: Path, up: bool) -> None:
    args = ("up", str(pb), "--skip-preflight") if up else ("down", str(pb))
    r = fleet(sb, *args)
    assert r.returncode == 0, r.stdout + r.stderr


COMMANDS = {
    # command -> (deployed before it runs?, its arguments after the playbook)
    "up": (False, ("--skip-preflight",)),
    "down": (True, ()),
    "restart": (True, ("--rolling", "--force")),  # --force: its one replica may restart
    "unlock": (True, ()),
}


# Each fault kind on two commands (not all eight pairs: both kinds fail the same first step --
# the connect or the banner deadline -- and every case costs ~25-60 s of the sandbox tier).
@pytest.mark.parametrize(("command", "kind"), [("up", "hang"), ("down", "drop"), ("restart", "drop"), ("unlock", "hang")])
def test_a_host_lost_at_the_first_step(sandbox_fleet: Sandbox, pb: Path, command: str, kind: str) -> None:
    sb = sandbox_fleet
    deployed, args = COMMANDS[command]
    _state(sb, pb, deployed)
    before = {h: _containers(sb, h) for h in HOSTS}
    with Fault(sb, "h8", kind):
        r = fleet(sb, command, str(pb), *args)
        assert r.returncode != 0, r.stdout + r.stderr
        last = r.stderr.strip().splitlines()[-1]
        assert "h8" in last and "Traceback" not in r.stderr, r.stderr
        assert not _locked(sb, "h4"), f"{command}: h4's lock was left:\n{r.stderr}"
        # Nothing half-done on the host that answered.
        assert _containers(sb, "h4") == before["h4"], r.stderr
    assert not _locked(sb, "h8") or "fleet unlock" in r.stderr, r.stderr
    again = fleet(sb, command, str(pb), *args)
    assert again.returncode == 0, again.stdout + again.stderr
    assert not any(_locked(sb, h) for h in HOSTS)
    if command in ("up", "restart"):
        assert _containers(sb, "h8") == [f"fleet-{NAME}-single0-r0"] and _containers(sb, "h4") == [f"fleet-{NAME}-router-r0"]


# The step hook (launcher/stephook.py) the mid-run cases run fleet with: at the first step named
# $FAULT_STEP that works on $FAULT_HOST it says so (a file) and waits until the test has broken
# that host, so the fault lands exactly between two steps.
HOOK = """[ "$FLEET_STEP" = "$FAULT_STEP" ] || exit 0
case " $FLEET_STEP_HOSTS " in *" $FAULT_HOST "*) ;; *) exit 0 ;; esac
[ ! -e "$FAULT_DIR/at" ] || exit 0
touch "$FAULT_DIR/at"
while [ ! -e "$FAULT_DIR/go" ]; do sleep 0.05; done
"""
# A host that answers no keepalive is cut off within 2 + 5 s (defaults 10 + 15: the cases would
# each wait 25 s); 5 s stays well above what a loaded CI machine's sshd takes to answer.
QUICK = {"FLEET_SSH_KEEPALIVE_S": "2", "FLEET_SSH_DEAD_AFTER_S": "5"}
HOLD_S = 300.0  # safety bound for fleet to reach the step (and then to exit)


def faulted_at(sb: Sandbox, argv: list[str], step: str, host: str, kind: str, tmp: Path,
               more_env: dict[str, str] | None = None) -> tuple[subprocess.CompletedProcess[str], Fault]:
    """``fleet ARGV`` with ``host`` broken (``kind``) just before its step ``step``; fleet's
    result, and the fault, still in place (the caller's ``with`` undoes it)."""
    d = tmp / f"fault-{step}"
    d.mkdir()
    (d / "hook.sh").write_text(HOOK)
    env = {**os.environ, **QUICK, "FLEET_STEP_HOOK": f"sh {d / 'hook.sh'}", "FAULT_STEP": step,
           "FAULT_HOST": host, "FAULT_DIR": str(d), **(more_env or {})}  # fmt: skip
    cmd = ["fleet", *argv, "-i", sb.inventory, "--known-hosts", sb.known_hosts]
    with (d / "out").open("w") as out, (d / "err").open("w") as err:
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, text=True, env=env, cwd=REPO)
    fault = Fault(sb, host, kind)
    try:
        deadline = time.monotonic() + HOLD_S
        while not (d / "at").exists():
            assert proc.poll() is None, f"fleet ended before step {step} on {host}:\n{(d / 'err').read_text()}"
            assert time.monotonic() < deadline, (d / "err").read_text()
            time.sleep(0.05)
        fault.__enter__()
        (d / "go").touch()
        rc = proc.wait(timeout=HOLD_S)
    except BaseException:
        proc.kill()
        proc.wait()
        fault.__exit__()
        raise
    return subprocess.CompletedProcess(cmd, rc, (d / "out").read_text(), (d / "err").read_text()), fault


# The steps each command takes on h8 (launcher/stephook.py names them), in order.  The engine
# runs on h8 (start step 1), its router on h4 (step 2).  Left out: steps that send h8 nothing in
# this deployment (a fresh up holds nothing; the image is present, so pull sends nothing; record
# writes only manifests that need it) -- a fault there is first met at the next step.
STEPS = {
    "up": ("lock", "install", "start", "health", "release"),
    "down": ("lock", "hold", "remove", "release"),
    "restart": ("lock", "survey", "hold", "install", "start", "health", "release"),
    "unlock": ("unlock",),
}
EVERY = os.environ.get("FLEET_FAULTS_EVERY_STEP") == "1"
# Run only with FLEET_FAULTS_EVERY_STEP=1: steps whose fault ends the run through the same code
# as a case CI runs -- down's hold is best effort (the fault is met at remove, next), restart's
# install and start are up's (DeploySession.start).
SAME_AS_ANOTHER = {("down", "hold"), ("restart", "install"), ("restart", "start")}


def _mid_run() -> list[tuple[str, str, str]]:
    """(command, step, fault) cases: every step with one fault, the two kinds taking turns (with
    FLEET_FAULTS_EVERY_STEP=1: both kinds at every step, SAME_AS_ANOTHER too: ~2.3x the time).
    Ordered so each case mostly starts from the state the last left (up and down take turns):
    the state call then costs nothing."""
    cases = []
    for command, steps in STEPS.items():
        steps = tuple(s for s in steps if EVERY or (command, s) not in SAME_AS_ANOTHER)
        for i, step in enumerate(steps):
            kinds = ("drop", "hang") if EVERY else (("drop", "hang")[(i + len(command)) % 2],)
            cases += [(command, step, k) for k in kinds]
    ups = [c for c in cases if c[0] == "up"]
    downs = [c for c in cases if c[0] == "down"]
    paired = [c for pair in zip(ups, downs) for c in pair] + ups[len(downs):] + downs[len(ups):]
    return paired + [c for c in cases if c[0] not in ("up", "down")]


MID_RUN = _mid_run()


@pytest.mark.parametrize(("command", "step", "kind"), MID_RUN, ids=[f"{c}-{s}-{k}" for c, s, k in MID_RUN])
def test_a_host_lost_at_each_step(sandbox_fleet: Sandbox, pb: Path, tmp_path: Path, command: str, step: str,
                                  kind: str) -> None:
    """Issue 25 "Faults, every step": h8 dropped or hung between two steps of a run (the step
    hook holds fleet there): a non-zero exit whose last line names h8, no lock on h4, a lock on
    h8 only where fleet said how to clear it, nothing half-up on h4 (what ran there before, or
    -- the fault at the last step, the release -- the whole deployment), and with h8 back the
    same command converges."""
    sb = sandbox_fleet
    deployed, args = COMMANDS[command]
    _state(sb, pb, deployed)
    before = {h: _containers(sb, h) for h in HOSTS}
    r, fault = faulted_at(sb, [command, str(pb), *args], step, "h8", kind, tmp_path)
    with fault:
        out = r.stdout + r.stderr
        assert r.returncode != 0, out
        last = r.stderr.strip().splitlines()[-1]
        assert "h8" in last and "Traceback" not in r.stderr, r.stderr
        assert not _locked(sb, "h4"), f"{command}: h4's lock was left:\n{r.stderr}"
        whole = [f"fleet-{NAME}-router-r0"]
        if command == "down":  # the router goes first: gone unless h8 was lost before anything was removed
            assert _containers(sb, "h4") == (before["h4"] if step == "lock" else []), r.stderr
        else:
            assert _containers(sb, "h4") == (whole if step == "release" else before["h4"]), r.stderr
    assert not _locked(sb, "h8") or "fleet unlock" in r.stderr, r.stderr
    again = fleet(sb, command, str(pb), *args)
    assert again.returncode == 0, again.stdout + again.stderr
    assert not any(_locked(sb, h) for h in HOSTS)
    if command != "down":
        assert _containers(sb, "h8") == [f"fleet-{NAME}-single0-r0"] and _containers(sb, "h4") == whole
    else:
        assert not _containers(sb, "h8") and not _containers(sb, "h4")


def test_a_second_playbook_of_the_same_name_is_refused_then_takes_over(sandbox_fleet: Sandbox, pb: Path,
                                                                        tmp_path: Path) -> None:
    """Issue 25 item 13 through the CLI: another playbook with the same ``name:`` that would
    remove the first one's units (engine and router swapped between h4 and h8) is refused naming
    both, with nothing changed; ``--take-over`` makes the deployment its own; the first playbook
    is then refused in turn until it takes it back.  A new version in another file (the same
    units and recipe) just goes ahead."""
    sb = sandbox_fleet
    _state(sb, pb, True)
    other = tmp_path / "other.yaml"
    other.write_text(FAULTS.replace("hosts: h8", "hosts: H8").replace("hosts: h4", "hosts: h8").replace("hosts: H8", "hosts: h4"))
    before = {h: _containers(sb, h) for h in HOSTS}
    r = fleet(sb, "up", str(other), "--skip-preflight")
    assert r.returncode == 1, r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert f"deployment {NAME} here belongs to playbook {pb} (sha256:" in last and f"; {other} (sha256:" in last, last
    assert last.endswith("has the same name and would remove or replace its units: rename one, or pass --take-over to "
                         "move the deployment to this playbook"), last
    assert {h: _containers(sb, h) for h in HOSTS} == before and not any(_locked(sb, h) for h in HOSTS)
    assert fleet(sb, "up", str(other), "--skip-preflight", "--take-over").returncode == 0
    assert fleet(sb, "up", str(pb), "--skip-preflight").returncode == 1
    r = fleet(sb, "up", str(pb), "--skip-preflight", "--take-over")
    assert r.returncode == 0, r.stderr
    v2 = tmp_path / "v2.yaml"
    v2.write_text(FAULTS.replace("start_timeout_s: 60", "start_timeout_s: 61"))
    r = fleet(sb, "up", str(v2), "--skip-preflight")
    assert r.returncode == 0, r.stderr
