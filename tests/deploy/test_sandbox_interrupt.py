"""Ctrl-C on the sandbox fleet (real sshd and dockerd per host, the engine stand-in), through the
real ``fleet`` CLI in a subprocess that gets SIGINT, as an operator's terminal sends it.

- ``fleet up`` interrupted in its health gate (the stand-ins delay readiness by 600 s) and in its
  preflight gate (the hosts' nvidia-smi hangs): exit 130 with ``fleet: interrupted`` last on
  stderr, the process (and anything it started) gone well before the hung work would have
  ended (``EXIT_S``; every hang here lasts ``HANG_S``), no container of the
  deployment left on any host, the deploy lock released (a new ``fleet up`` goes through), and
  no fleet SSH session left open on the hosts.
- ``fleet up`` interrupted while its preflight probes reachability (h7's connect probe hangs):
  besides the above, the listener on rank 0's dist-init port is gone (it follows the SSH
  connection that started it).
- ``fleet up`` interrupted while both hosts hang in the lock+survey round trip (docker image
  inspect hangs): the same promises -- fleet does not wait out the hung command, and the locks
  it took are released.
- ``fleet up`` interrupted while one host's ``docker run`` is still under way (its docker shim
  holds it until fleet, past the grace it gives a running command, ``fanout.INTERRUPT_GRACE_S``,
  has begun its teardown): the same promises, and that host's container, started after the
  interrupt, is stopped before fleet exits.
- ``fleet logs -f``: both units' lines arrive prefixed ``host/unit | ``, a line logged after the
  follow began shows up (also with ``--tail 0``, which shows only new lines), and Ctrl-C ends it
  (exit 130) leaving no ``docker logs`` on the hosts.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Callable, Iterator

import pytest

from launcher.sandbox.client import Sandbox
from tests.cli_process import CliProcess, local_conns, peers

pytestmark = pytest.mark.sandbox

REPO = Path(__file__).resolve().parents[2]
PP2 = REPO / "playbooks" / "sandbox" / "pp2.yaml"
DEPLOYMENT = "sb-pp2"
HOSTS = ("h6", "h7")
LISTENER = "fleet-preflight-listener"  # in the preflight's reachability listener's argv
UNITS = {"h6": "fleet-sb-pp2-rank0-r0", "h7": "fleet-sb-pp2-rank0-r1"}
# Safety timeout: Ctrl-C must end fleet within this.  It bounds the clean-up (new connections,
# containers removed, locks released: seconds when quiet, tens of seconds at CI's load ~99 on two
# cores), and stays far below HANG_S, so a fleet that waited out a hung command still fails.
EXIT_S = 90.0
HANG_S = 600  # how long the hung commands (and the delayed readiness) of these cases last; they are ended after
WAIT_S = 120.0  # safety timeout for a state the test waits for


def playbook(tmp_path: Path, delay_s: int) -> Path:
    """pp2.yaml with the stand-ins' readiness delayed by ``delay_s`` (same name: same deployment),
    and a start deadline past that delay (the health gate then lasts until the interrupt)."""
    extra = f'  env:\n    FLEET_STANDIN_START_DELAY: "{delay_s}"\n'
    dest = tmp_path / f"delay{delay_s}" / PP2.name
    dest.parent.mkdir(exist_ok=True)
    text = PP2.read_text()
    if delay_s:
        assert "  start_timeout_s: 90\n" in text
        text = text.replace("  start_timeout_s: 90\n", f"  start_timeout_s: {2 * delay_s}\n")
    dest.write_text(text.replace("overrides:\n", "overrides:\n" + extra, 1))
    return dest


def argv(sb: Sandbox, *args: str) -> list[str]:
    return ["fleet", *args, "-i", sb.inventory, "--known-hosts", sb.known_hosts]


def run(sb: Sandbox, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv(sb, *args), capture_output=True, text=True, timeout=120, cwd=REPO)


class Fleet(CliProcess):
    """``fleet ARGS`` against the sandbox, in its own process group."""

    def __init__(self, sb: Sandbox, tmp_path: Path, *args: str, name: str = "fleet") -> None:
        super().__init__(argv(sb, *args), tmp_path, name)

    def interrupt(self, sig: signal.Signals = signal.SIGINT, meanwhile: Callable[[], None] | None = None) -> int:
        """SIGINT, as Ctrl-C sends it (or ``sig``); the exit status (fails if fleet outlives
        ``EXIT_S`` after it, and after ``meanwhile``, when given, has returned)."""
        self.sigint(sig)
        if meanwhile is not None:
            meanwhile()
        try:
            rc = self.proc.wait(timeout=EXIT_S)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"fleet still running {EXIT_S:g}s after SIGINT:\n{self.stderr}") from None
        assert self.group_gone(), "something fleet started (in its process group) outlived it"
        return rc


def wait_for(what: str, cond: Callable[[], bool], fleet: Fleet | None = None, timeout: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if fleet is not None and fleet.proc.poll() is not None:
            raise AssertionError(f"fleet exited {fleet.proc.returncode} while waiting for {what}:\n{fleet.stdout}\n{fleet.stderr}")
        assert time.monotonic() < deadline, f"no {what} within {timeout:g}s"
        time.sleep(0.2)


def containers(sb: Sandbox, host: str) -> list[str]:
    res = sb.ssh(host, f"docker ps -aq --filter label=fleet.deployment={DEPLOYMENT}")
    assert res.rc == 0, res.err
    return res.out.split()


def locked(sb: Sandbox, host: str) -> bool:
    return sb.ssh(host, f"test -e /run/fleet/lock/{DEPLOYMENT}").rc == 0


def processes(sb: Sandbox, host: str) -> list[str]:
    """Command lines of every process on ``host``."""
    res = sb.ssh(host, "ps -eo args=")
    assert res.rc == 0, res.err
    return [line.strip() for line in res.out.splitlines()]


def pids(sb: Sandbox, host: str, mark: str) -> list[str]:
    """PIDs on ``host`` whose command line holds ``mark`` (processes this module's runs started)."""
    res = sb.ssh(host, f"pgrep -f -- '[{mark[0]}]{mark[1:]}'")  # [x]: not this shell's own argv
    return res.out.split()


def no_trace_left(sb: Sandbox, conns: set[tuple[str, str]]) -> None:
    """Nothing of the deployment runs, no lock is held, and no host still has one of fleet's
    connections ``conns`` (the kernel closes them when fleet exits; sshd takes moments)."""
    for h in HOSTS:
        assert containers(sb, h) == [], f"{h}: containers of {DEPLOYMENT} left after Ctrl-C"
        assert not locked(sb, h), f"{h}: deploy lock left after Ctrl-C"
        wait_for(f"{h}: fleet's ssh connections closed", lambda: not peers(sb, h) & conns)


def fleet_ssh(sb: Sandbox, fleet: Fleet) -> set[tuple[str, str]]:
    """fleet's connections; each host has one of them open (so they are what is checked)."""
    conns = local_conns(fleet.proc.pid)
    for h in HOSTS:
        assert peers(sb, h) & conns, f"{h}: no connection of fleet ({conns}) seen"
    return conns


def up_again(sb: Sandbox, tmp_path: Path) -> None:
    """A new ``fleet up`` of the deployment is not refused by a leftover lock and comes up."""
    proc = run(sb, "up", str(playbook(tmp_path, 0)), "--skip-preflight", "-q", "--json")
    assert "locked by" not in proc.stderr, proc.stderr
    assert proc.returncode == 0, f"rc={proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    assert {u["outcome"] for u in json.loads(proc.stdout)["units"]} == {"healthy"}


@pytest.fixture
def sb(sandbox_fleet: Sandbox, tmp_path: Path) -> Iterator[Sandbox]:
    """The sandbox with no ``sb-pp2`` on it, before and after the test."""
    if sandbox_fleet.state.mode != "netns":
        pytest.skip("multi-host deployments need a netns sandbox (loopback hosts share one IP and its ports)")
    down = ("down", str(playbook(tmp_path, 0)), "-q", "--break-lock")
    if any(containers(sandbox_fleet, h) or locked(sandbox_fleet, h) for h in HOSTS):
        run(sandbox_fleet, *down)
    yield sandbox_fleet
    if any(containers(sandbox_fleet, h) or locked(sandbox_fleet, h) for h in HOSTS):
        run(sandbox_fleet, *down)


@pytest.mark.parametrize(
    ("sig", "rc_want", "last_line"),
    [
        (signal.SIGINT, 130, "fleet: interrupted\n"),
        (signal.SIGTERM, 143, "fleet: terminated by SIGTERM\n"),
        (signal.SIGHUP, 129, ""),  # the terminal is gone: nothing more is written to it
    ],
)
def test_ctrl_c_in_health_gate_leaves_nothing_half_up(
    sb: Sandbox, tmp_path: Path, sig: signal.Signals, rc_want: int, last_line: str
) -> None:
    """Ctrl-C; also SIGTERM (a job runner cancelling fleet) and SIGHUP (the operator's SSH
    session to the control host dropped), which clean up the same way."""
    fleet = Fleet(sb, tmp_path, "up", str(playbook(tmp_path, HANG_S)), "--skip-preflight")
    try:
        # Both ranks started; their stand-ins stay unready for HANG_S: fleet is in its health gate.
        wait_for("containers on both hosts", lambda: all(containers(sb, h) for h in HOSTS), fleet)
        assert all(locked(sb, h) for h in HOSTS), "the deploy holds its lock while it waits"
        conns = fleet_ssh(sb, fleet)
        rc = fleet.interrupt(sig)
    finally:
        fleet.close()
    assert rc == rc_want, fleet.stderr
    assert "Traceback" not in fleet.stderr, fleet.stderr
    if last_line:  # (after SIGHUP stderr goes nowhere: a traceback would show as exit status 1)
        assert fleet.stderr.endswith(last_line), fleet.stderr
    no_trace_left(sb, conns)
    up_again(sb, tmp_path)


def test_ctrl_c_in_preflight_gate_starts_nothing(sb: Sandbox, tmp_path: Path) -> None:
    # Each host's fake nvidia-smi (read by the preflight's fact gathering) first says it was
    # called, then hangs: fleet is deterministically inside its preflight gate.
    marker = "fleet-int-preflight"
    wrappers = {h: Path(sb.host(h).dir) / "fakehw" / "bin" / "nvidia-smi" for h in HOSTS}
    originals = {h: w.read_text() for h, w in wrappers.items()}
    for h, w in wrappers.items():
        hang = f"touch /run/{marker}; python3 -c 'import time; time.sleep({HANG_S})' {marker}\n"
        w.write_text(originals[h].replace("#!/bin/sh\n", "#!/bin/sh\n" + hang, 1))
    try:
        fleet = Fleet(sb, tmp_path, "up", str(playbook(tmp_path, 0)))
        try:
            wait_for("preflight on both hosts", lambda: all(sb.ssh(h, f"test -e /run/{marker}").rc == 0 for h in HOSTS), fleet)
            conns = fleet_ssh(sb, fleet)
            rc = fleet.interrupt()
        finally:
            fleet.close()
    finally:
        for h, w in wrappers.items():
            w.write_text(originals[h])
            sb.ssh(h, f"rm -f /run/{marker}")
    assert rc == 130, fleet.stderr
    assert fleet.stderr.endswith("fleet: interrupted\n"), fleet.stderr
    no_trace_left(sb, conns)
    # The hung read-only probe itself outlives fleet (SSH without a tty cannot signal it); it
    # would end by itself, but this test ends it now.
    for h in HOSTS:
        for pid in pids(sb, h, marker):
            sb.ssh(h, f"kill {pid}")
    up_again(sb, tmp_path)


def test_ctrl_c_in_preflight_reachability_leaves_no_listener(sb: Sandbox, tmp_path: Path) -> None:
    # The preflight listens on rank 0's dist-init port (h6) and h7 connects to it.  h7's python3
    # (shadowed for the preflight's connect probe only) first says it was called, then hangs:
    # fleet is deterministically between starting the listener and stopping it.
    marker = "fleet-int-reach"
    shim = Path(sb.host("h7").dir) / "fakehw" / "bin" / "python3"
    shim.write_text(
        '#!/bin/sh\ncase "$*" in *fleet-preflight-client*) touch /run/%s; '
        "exec /usr/bin/python3 -c 'import time; time.sleep(%d)' %s;; esac\n"
        'exec /usr/bin/python3 "$@"\n' % (marker, HANG_S, marker)
    )
    shim.chmod(0o755)
    try:
        fleet = Fleet(sb, tmp_path, "up", str(playbook(tmp_path, 0)))
        try:
            wait_for("the reachability probe", lambda: sb.ssh("h7", f"test -e /run/{marker}").rc == 0, fleet)
            assert pids(sb, "h6", LISTENER), "h6 listens for the probe"
            rc = fleet.interrupt()
        finally:
            fleet.close()
    finally:
        shim.unlink()
        for pid in pids(sb, "h7", marker):  # the hung probe (it would end by itself)
            sb.ssh("h7", f"kill {pid}")
        sb.ssh("h7", f"rm -f /run/{marker}")
    assert rc == 130, fleet.stderr
    assert fleet.stderr.endswith("fleet: interrupted\n"), fleet.stderr
    try:
        wait_for("end of the preflight listener on rank 0's dist-init port", lambda: not pids(sb, "h6", LISTENER), timeout=EXIT_S)
    finally:
        for pid in pids(sb, "h6", LISTENER):  # so later tests can start rank 0 on that port
            sb.ssh("h6", f"kill {pid}")
    up_again(sb, tmp_path)


def test_ctrl_c_while_a_host_hangs_in_the_survey_is_prompt_and_unlocks(sb: Sandbox, tmp_path: Path) -> None:
    # Each host's docker hangs on `image inspect`, which the survey runs right after taking the
    # lock (same round trip): fleet holds both locks and waits on both hosts.
    marker = "fleet-int-survey"
    docker = shutil.which("docker")
    assert docker is not None
    shims = {h: Path(sb.host(h).dir) / "fakehw" / "bin" / "docker" for h in HOSTS}
    for shim in shims.values():
        shim.write_text(
            '#!/bin/sh\ncase "$1 $2" in "image inspect") touch /run/%s; '
            "python3 -c 'import time; time.sleep(%d)' %s;; esac\nexec %s \"$@\"\n" % (marker, HANG_S, marker, docker)
        )
        shim.chmod(0o755)
    try:
        fleet = Fleet(sb, tmp_path, "up", str(playbook(tmp_path, 0)), "--skip-preflight")
        try:
            wait_for("the survey on both hosts", lambda: all(sb.ssh(h, f"test -e /run/{marker}").rc == 0 for h in HOSTS), fleet)
            assert all(locked(sb, h) for h in HOSTS), "the lock is taken before the survey"
            conns = fleet_ssh(sb, fleet)
            rc = fleet.interrupt()
        finally:
            fleet.close()
    finally:
        for h, shim in shims.items():
            shim.unlink()
            for pid in pids(sb, h, marker):
                sb.ssh(h, f"kill {pid}")
            sb.ssh(h, f"rm -f /run/{marker}")
    assert rc == 130, fleet.stderr
    assert fleet.stderr.endswith("fleet: interrupted\n"), fleet.stderr
    no_trace_left(sb, conns)
    up_again(sb, tmp_path)


def test_ctrl_c_while_a_host_is_still_starting_its_unit_leaves_nothing_up(
    sb: Sandbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    # h7's `docker run` is held by its docker shim (which waits for a go file first) until fleet,
    # interrupted, has stopped waiting for it after its short grace (INTERRUPT_GRACE_S) and begun
    # its teardown (the step hook says so); only then does the run go ahead.  Its teardown must
    # come after that start on the host, not beside it: no container may come up once fleet has
    # exited.  (Held by events, not a fixed sleep: at CI's load the interrupt could land after a
    # fixed hold had ended.)
    began, go, ended = "fleet-int-start", "fleet-int-start-go", "fleet-int-started"
    docker = shutil.which("docker")
    assert docker is not None
    shim = Path(sb.host("h7").dir) / "fakehw" / "bin" / "docker"
    shim.write_text(
        '#!/bin/sh\n[ "$1" = run ] || exec %s "$@"\n'
        "touch /run/%s\n"
        "python3 -c 'import os, sys, time\nwhile not os.path.exists(sys.argv[1]): time.sleep(0.05)' /run/%s %s || exit 1\n"
        '%s "$@"; rc=$?; touch /run/%s; exit $rc\n' % (docker, began, go, began, docker, ended)
    )
    shim.chmod(0o755)
    hook = tmp_path / "teardown-hook.sh"
    teardown = tmp_path / "teardown"
    hook.write_text(f'[ "$FLEET_STEP" != teardown ] || touch {teardown}\n')

    def release_the_start() -> None:
        wait_for("fleet's teardown after the interrupt", teardown.exists, fleet)
        assert sb.ssh("h7", f"test -e /run/{ended}").rc != 0, "h7's docker run ended before the teardown"
        res = sb.ssh("h7", f"touch /run/{go}")
        assert res.rc == 0, res.err

    try:
        with monkeypatch.context() as env:  # this fleet's environment only
            env.setenv("FLEET_STEP_HOOK", f"sh {hook}")
            fleet = Fleet(sb, tmp_path, "up", str(playbook(tmp_path, 0)), "--skip-preflight")
        try:
            wait_for("h7's docker run", lambda: sb.ssh("h7", f"test -e /run/{began}").rc == 0, fleet)
            conns = fleet_ssh(sb, fleet)
            rc = fleet.interrupt(meanwhile=release_the_start)
        finally:
            fleet.close()
        wait_for("h7's docker run to end", lambda: sb.ssh("h7", f"test -e /run/{ended}").rc == 0)
    finally:
        shim.unlink()
        for pid in pids(sb, "h7", began):  # a held start (a failure above): it then exits without running
            sb.ssh("h7", f"kill {pid}")
        sb.ssh("h7", f"rm -f /run/{began} /run/{go} /run/{ended}")
    assert rc == 130, fleet.stderr
    assert fleet.stderr.endswith("fleet: interrupted\n"), fleet.stderr
    no_trace_left(sb, conns)
    up_again(sb, tmp_path)


def generate(sb: Sandbox, rid: str) -> None:
    """A request to rank 0 (h6), which the stand-in logs with its ``rid``."""
    body = json.dumps({"text": "hello", "rid": rid, "sampling_params": {"max_new_tokens": 2}}).encode()
    req = urllib.request.Request(f"http://{sb.host('h6').data_ip}:30000/generate", data=body,
                                 headers={"Content-Type": "application/json"})  # fmt: skip
    with urllib.request.urlopen(req, timeout=30) as r:
        assert json.loads(r.read())["text"]


def test_logs_follow_shows_new_lines_and_stops_on_ctrl_c(sb: Sandbox, tmp_path: Path) -> None:
    up_again(sb, tmp_path)
    pb = str(playbook(tmp_path, 0))
    follow = Fleet(sb, tmp_path, "logs", pb, "-f", "--tail", "3")
    new_only = Fleet(sb, tmp_path, "logs", pb, "-f", "--tail", "0", name="new-only")
    tag = f"int-{os.getpid()}-{time.monotonic_ns()}"
    rank0 = f"h6/{UNITS['h6']} | "
    prefixes = {f"{h}/{u} | " for h, u in UNITS.items()}

    def served(fleet: Fleet, rid: str) -> bool:
        return any(line.startswith(rank0) and rid in line and '"request"' in line for line in fleet.stdout.splitlines())

    sent = 0

    def new_only_shows_one() -> bool:
        # --tail 0 shows nothing old, so when it began following is not visible: requests go on
        # until one shows up there.
        nonlocal sent
        sent += 1
        generate(sb, f"{tag}-{sent}")
        time.sleep(0.5)
        return any(served(new_only, f"{tag}-{i}") for i in range(1, sent + 1))

    try:
        wait_for("lines of both units", lambda: all(any(line.startswith(p) for line in follow.stdout.splitlines()) for p in prefixes), follow)
        assert tag not in follow.stdout
        generate(sb, f"{tag}-0")
        wait_for("the new request's log line", lambda: served(follow, f"{tag}-0"), follow)
        wait_for("a new line with --tail 0", new_only_shows_one, new_only)
        rcs = (follow.interrupt(), new_only.interrupt())
    finally:
        follow.close()
        new_only.close()
    for fleet in (follow, new_only):
        assert rcs == (130, 130), fleet.stderr
        assert fleet.stderr.endswith("fleet: interrupted\n"), fleet.stderr
    lines = follow.stdout.splitlines()
    assert lines and all(any(line.startswith(p) for p in prefixes) for line in lines), lines[:5]
    assert sum(f"{tag}-0" in line and '"request"' in line for line in lines) == 1, "the new line shows once"
    assert all(tag in line for line in new_only.stdout.splitlines()), "--tail 0 shows only new lines"
    for h in HOSTS:
        wait_for(f"{h}: no docker logs left", lambda: not any(p.startswith("docker logs") for p in processes(sb, h)))
