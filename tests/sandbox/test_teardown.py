"""``fleet sandbox down`` ends only the processes the sandbox started: each recorded PID is
checked against its recorded start time right before it is signalled, and what runs inside a
host is reached as a descendant of a recorded process, never as "a member of namespace X" by a
recorded number (a namespace's inode number is reused once it dies, so a stale state file can
name another's); only a namespace ``down`` holds open is swept for what escaped the trees.

The stale-state tests write a state file by hand (own ``FLEET_SANDBOX_DIR``) naming this test's
own innocent ``sleep`` processes; the last test brings up a one-host sandbox of its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import psutil
import pytest

from launcher.sandbox import dockerd, faults, fleet, image, netns, procs, state
from launcher.sandbox.client import Sandbox
from tests.sandbox_slots import assert_slot_released, guard_metrics

pytestmark = pytest.mark.sandbox


def _need_root() -> None:
    if not sys.platform.startswith("linux") or os.geteuid() != 0:
        pytest.skip("fleet sandbox down needs Linux and root")


@pytest.fixture
def sleeps() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for p in started:
        p.kill()
        p.wait()


def _sleep(sleeps: list[subprocess.Popen[bytes]], *prefix: str) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen([*prefix, "sleep", "300"])
    sleeps.append(proc)
    deadline = time.monotonic() + 60  # a hang bound
    while psutil.Process(proc.pid).name() != "sleep" and time.monotonic() < deadline:
        time.sleep(0.02)  # until `unshare` exec'ed sleep: its namespace is then the sleep's
    return proc


def _ns(pid: int, kind: str) -> int:
    return os.stat(f"/proc/{pid}/ns/{kind}").st_ino


def _write_state(root: Path, name: str, host: dict[str, object]) -> None:
    d = root / name
    (d / "h1").mkdir(parents=True)
    base = {"name": "h1", "index": 1, "dir": str(d / "h1"), "netns": None, "address": "127.0.0.1",
            "port": 22001, "ifname": "fsbeth1", "data_ip": "127.0.0.1", "kind": "docker"}  # fmt: skip
    (d / "state.json").write_text(json.dumps({"name": name, "mode": "loopback", "dir": str(d),
                                              "hosts": [{**base, **host}]}))  # fmt: skip


def _cli_down(root: Path, name: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, FLEET_SANDBOX_DIR=str(root), PYTHONPATH=os.getcwd())
    return subprocess.run((sys.executable, "-c", "from launcher.cli import main; main()", "sandbox", "down",
                           "--name", name), capture_output=True, text=True, env=env, timeout=120)  # fmt: skip


def test_a_recorded_pid_that_now_belongs_to_another_process_is_left_alone(
    tmp_path: Path, sleeps: list[subprocess.Popen[bytes]]
) -> None:
    _need_root()
    sshd_pid, dockerd_pid = _sleep(sleeps).pid, _sleep(sleeps).pid
    name = f"sbsafe{os.getpid() % 100000}"
    created = psutil.Process(sshd_pid).create_time()
    _write_state(tmp_path, name, {"sshd": {"pid": sshd_pid, "created": created - 7.0},
                                  "dockerd": {"pid": dockerd_pid, "created": created - 9.0}})  # fmt: skip
    down = _cli_down(tmp_path, name)
    assert down.returncode == 0, down.stderr
    assert down.stderr.splitlines() == [
        f"sandbox {name}: h1 sshd: PID {sshd_pid} now belongs to another process, not touched",
        f"sandbox {name}: h1 dockerd: PID {dockerd_pid} now belongs to another process, not touched",
    ]
    assert down.stdout == f"sandbox {name}: removed\n"
    assert all(p.poll() is None for p in sleeps), "down signalled a process it did not start"
    assert not (tmp_path / name).exists()


def test_a_recorded_namespace_id_is_never_a_reason_to_kill(
    tmp_path: Path, sleeps: list[subprocess.Popen[bytes]]
) -> None:
    """A stale state of the older format names, as a host's namespaces, ones that now belong to
    others: the mount namespace of an innocent process (as a reused inode would) and the net
    namespace this test runs in.  ``down`` touches neither that process nor this test's child."""
    _need_root()
    private = _sleep(sleeps, "unshare", "--mount")
    shared = _sleep(sleeps)
    assert _ns(private.pid, "mnt") != _ns(os.getpid(), "mnt")
    name = f"sbsafe{os.getpid() % 100000}"
    _write_state(tmp_path, name, {"mnt_ns": _ns(private.pid, "mnt"), "net_ns": _ns(os.getpid(), "net")})
    down = _cli_down(tmp_path, name)
    assert (down.returncode, down.stdout, down.stderr) == (0, f"sandbox {name}: removed\n", "")
    assert private.poll() is None and shared.poll() is None, "down killed by namespace membership"
    assert not (tmp_path / name).exists()


def _find(cmdline: list[str]) -> procs.ProcRef:
    # `docker run -d` may return before its process exec'ed (a hang bound: a container's start
    # on a loaded machine's sandbox host takes seconds)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        for p in psutil.process_iter(["cmdline"]):
            if p.info["cmdline"] == cmdline:
                return procs.ProcRef(pid=p.pid, created=p.create_time())
        time.sleep(0.1)
    raise AssertionError(f"no process {cmdline}")


def test_up_then_down_leaves_nothing_even_what_escaped_its_session(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a one-host sandbox of its own: a session leaves a daemonized process (its parent
    exits) and the host's docker runs a container that ignores SIGTERM; its daemon's API is
    not asked to remove it (as when the API is stuck).  Both are below a recorded process
    (hostinit.py above sshd and the tini above dockerd are child subreapers), the leftover also
    once sshd is killed (the ``sshd-kill`` fault).  A process entered into the host's
    namespaces from outside (``nsenter``, a child of this test: below no recorded process) is
    ended too, and named on down's note.  ``down`` leaves no process, namespace or mount of the
    sandbox."""
    _need_root()
    name = f"sbsafe{os.getpid() % 100000}u"
    st = fleet.up(name, 1)
    sb = Sandbox(st)
    notes: list[str] = []
    stray: subprocess.Popen[bytes] | None = None
    try:
        h = st.host("h1")
        assert h.sshd is not None and h.dockerd is not None
        marker = f"{os.getpid() % 1000}.25"
        res = sb.ssh("h1", f"setsid sh -c 'sleep {marker}' </dev/null >/dev/null 2>&1 & "
                           f"docker run -d --name sbsafe --entrypoint sleep {image.IMAGE} 600")  # fmt: skip
        assert res.rc == 0, res.err
        escaped = _find(["sleep", marker])
        container = _find(["sleep", "600"])
        assert h.sshd_init is not None and h.sshd in procs.descendants(h.sshd_init)
        assert escaped in procs.descendants(h.sshd_init)
        assert container in procs.descendants(h.dockerd)
        host_ns = {("mnt", _ns(h.sshd.pid, "mnt"))} | {("net", _ns(h.sshd.pid, "net"))}
        stray = subprocess.Popen(("nsenter", "-t", str(h.sshd_init.pid), "-m", "-u", "sleep", f"{marker}1"))
        outsider = _find(["sleep", f"{marker}1"])
        assert outsider not in procs.descendants(h.sshd_init) and outsider not in procs.descendants(h.dockerd)
        faults.sshd_signal(h, "kill")
        assert procs.wait_gone((h.sshd,), 60.0) == ()  # SIGKILLed: a hang bound
        assert escaped in procs.descendants(h.sshd_init)
    finally:
        sb.close()
        with monkeypatch.context() as m:
            m.setattr(dockerd, "remove_containers", lambda _h: None)
            assert fleet.down(name, note=notes.append)
        if stray is not None:
            try:
                stray.wait(10)
            except subprocess.TimeoutExpired:
                stray.kill()
                stray.wait()
                raise AssertionError(f"down left the process entered from outside; its notes: {notes}") from None
    assert not escaped.alive() and not container.alive() and not outsider.alive()
    assert notes == [f"sandbox {name}: h1 mnt namespace still held 1 process(es) outside the recorded trees, "
                     f"ending them: {outsider.pid} sleep (sleeping, parent {os.getpid()})"]  # fmt: skip
    assert [p.pid for p in psutil.process_iter() if _in(p.pid, host_ns)] == []
    assert netns.namespaces(name) == ()
    assert st.dir not in Path("/proc/self/mountinfo").read_text()
    assert state.load(name) is None


def _in(pid: int, namespaces: set[tuple[str, int]]) -> bool:
    try:
        return any(_ns(pid, kind) == ino for kind, ino in namespaces)
    except OSError:
        return False


def test_a_stale_state_naming_a_reused_slot_leaves_that_slots_new_owner_connected() -> None:
    """A stale state (its machine rebooted: links and routes gone, the file kept) names the netns
    slot a later sandbox now uses.  Removing the stale one -- as a test session does with the
    sandboxes of dead sessions while another session brings its own up -- leaves the live
    sandbox its root link and guard route: its hosts still answer."""
    _need_root()
    name = f"sbslot{os.getpid() % 100000}"
    st = fleet.up(name, 1, mode="netns")
    sb = Sandbox(st)
    stale = f"sbstale{os.getpid() % 10000}"
    try:
        assert st.slot is not None and st.root_ifname is not None
        (state.state_root() / stale).mkdir()
        state.save(state.SandboxState(name=stale, mode="netns", dir=str(state.state_root() / stale), slot=st.slot,
                                      ctl_netns=netns.ctl_name(stale), root_ifname=st.root_ifname,
                                      route_metric=st.route_metric))  # fmt: skip
        assert fleet.down(stale)
        assert state.load(stale) is None
        assert os.path.exists(f"/sys/class/net/{st.root_ifname}")
        assert st.route_metric in guard_metrics()
        assert sb.ssh("h1", "true").rc == 0
    finally:
        sb.close()
        fleet.down(stale)
        fleet.down(name)
    assert_slot_released(st)
