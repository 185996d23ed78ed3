"""fleet's ``runtime: systemd`` path under a real systemd: two sandbox hosts of kind systemd (s1,
s2: systemd as PID 1 of a container with its own root filesystem, sshd as one of its services),
the stand-in as a native engine.  ``fleet up`` (health-gated) -> ``status`` -> ``logs`` from the
real journal -> a rolling restart behind the real sglang-router under load -> a unit that crashes
at start, reported by its own journal line -> ``down`` leaves no unit, unit file or lock ->
``fleet sandbox down`` leaves no container, namespace, process or cgroup.

The module brings up its own small sandbox (``sd<pid>``, no docker hosts) beside the session's.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Iterator

import pytest
import yaml

from launcher.sandbox import fleet as sandbox
from launcher.sandbox import procs
from launcher.sandbox import state as sandbox_state
from launcher.sandbox.client import Sandbox
from tests.cli_process import CliProcess
from tests.rolling.conftest import PLAYBOOKS, Router, fleet, http, ok, unit_rows, wait_for
from tests.rolling.loadgen import LoadGen
from tests.sandbox.systemd_hosts import own_sandbox, skip_unless_possible

pytestmark = pytest.mark.sandbox

V1 = PLAYBOOKS / "systemd-roll.yaml"
V2 = PLAYBOOKS / "systemd-roll-v2.yaml"
HOSTS = ("s1", "s2")
UNITS = {h: f"fleet-sb-sysd-single{i}-r0" for i, h in enumerate(HOSTS)}
PORT = 30000
STREAM_TOKENS = 300  # x 5 ms per token: 1.5 s streams, in flight when their replica leaves


@pytest.fixture(scope="module")
def sb() -> Iterator[Sandbox]:
    yield from own_sandbox("sd", len(HOSTS))


def pid1(sb: Sandbox, host: str) -> str:
    res = sb.ssh(host, "cat /proc/1/comm; systemctl is-system-running")
    return res.out


def main_pid(sb: Sandbox, host: str) -> str:
    return sb.ssh(host, f"systemctl show -P MainPID {UNITS[host]}.service").out.strip()


def test_hosts_run_systemd_as_pid1_in_their_own_root(sb: Sandbox) -> None:
    for h in HOSTS:
        assert pid1(sb, h) == "systemd\nrunning\n"
        assert sb.ssh(h, "hostname").out.strip() == h
    # Its own root filesystem: a file made in the host's /tmp is not in this machine's /tmp.
    marker = f"fleet-systemd-host-{os.getpid()}"
    assert sb.ssh("s1", f"touch /tmp/{marker} && test -e /tmp/{marker}").rc == 0
    assert not Path(f"/tmp/{marker}").exists()


def test_up_status_logs_from_the_real_journal(sb: Sandbox) -> None:
    up = ok(fleet(sb, "up", str(V1)))
    for h in HOSTS:
        assert f"{h}/{UNITS[h]}: healthy" in up.stderr
        assert sb.ssh(h, f"systemctl is-active {UNITS[h]}.service").out.strip() == "active"
        assert sb.ssh(h, f"test -f /etc/systemd/system/{UNITS[h]}.service").rc == 0
    assert unit_rows(sb, str(V1)) == {h: ("running", "ok", 1) for h in HOSTS}
    status = ok(fleet(sb, "status", str(V1)))
    assert [line.split()[:7] for line in status.stdout.splitlines()[2:]] == [
        [h, UNITS[h], "single", "0", "running", "ok", "1"] for h in HOSTS
    ]
    logs = ok(fleet(sb, "logs", str(V1), "--tail", "200"))
    for h in HOSTS:
        mine = [line for line in logs.stdout.splitlines() if line.startswith(f"{h}/{UNITS[h]} | ")]
        # journalctl's short-iso lines: systemd's own start line and the engine's, by its
        # SyslogIdentifier, with the stand-in's generation-1 readiness event.
        assert any(f" {h} systemd[1]: Started {UNITS[h]}.service" in line for line in mine), mine
        assert any(f" {h} {UNITS[h]}[" in line and '"event": "ready", "generation": "1"' in line for line in mine), mine


def test_logs_follow_reads_each_new_journal_entry_once(sb: Sandbox, tmp_path: Path) -> None:
    """``fleet logs -f`` polls the journal by cursor (``--after-cursor``): three requests to s1
    show up as exactly three new request lines, none repeated by later polls."""
    cli = CliProcess(["fleet", "logs", str(V1), "-i", sb.inventory, "--known-hosts", sb.known_hosts,
                      "--tail", "1", "-f"], tmp_path, "follow")  # fmt: skip

    def served() -> list[str]:
        return [line for line in cli.stdout.splitlines() if line.startswith(f"s1/{UNITS['s1']} | ") and '"event": "request",' in line]

    try:
        wait_for("the first followed lines", lambda: cli.stdout.strip(), timeout=60)
        before = len(served())
        for i in range(3):
            code, _ = http(f"http://{sb.host('s1').data_ip}:{PORT}/generate", {"text": f"follow {i}"})
            assert code == 200
        wait_for("three request lines", lambda: len(served()) >= before + 3, timeout=60)
        time.sleep(3)  # several more polls: nothing is shown twice
        assert len(served()) == before + 3, cli.stdout
        assert len(set(served())) == len(served())
    finally:
        cli.close()


def test_rolling_restart_behind_the_router_keeps_serving(sb: Sandbox, tmp_path: Path) -> None:
    before = {h: main_pid(sb, h) for h in HOSTS}
    urls = [f"http://{sb.host(h).data_ip}:{PORT}" for h in HOSTS]
    router = Router(("--worker-urls", *urls, "--policy", "round_robin"), tmp_path / "router.log")
    try:
        router.wait_workers(2)
        load = LoadGen(router.url, workers=8, stream_every=4, stream_tokens=STREAM_TOKENS).start()
        try:
            roll = fleet(sb, "up", str(V2), "--router", router.url, "--json")
        finally:
            results = load.stop(at_least=max(300, len(load.results) + 100))  # and 100 once both are back
    finally:
        router.stop()
    assert roll.returncode == 0, roll.stderr
    doc = yaml.safe_load(roll.stdout)
    assert [(g["group"], g["batch"], g["outcome"], g["generation_after"]) for g in doc["groups"]] == [
        ("sb-sysd/single0", 1, "restarted", 2), ("sb-sysd/single1", 2, "restarted", 2),
    ]  # fmt: skip
    assert len(results) >= 300 and load.failures == [], load.failures[:5]
    served = {(x.host, x.generation) for x in results}
    assert {("s1", "1"), ("s2", "1"), ("s1", "2"), ("s2", "2")} <= served, served
    assert unit_rows(sb, str(V2)) == {h: ("running", "ok", 2) for h in HOSTS}
    after = {h: main_pid(sb, h) for h in HOSTS}
    assert all(after[h] not in ("", "0", before[h]) for h in HOSTS), (before, after)


def test_a_unit_that_crashes_at_start_is_reported_by_its_journal_line(sb: Sandbox, tmp_path: Path) -> None:
    doc = yaml.safe_load(V1.read_text())
    doc["name"] = "sb-sysdcrash"
    doc["placement"]["single"]["hosts"] = "s1"
    doc["ports"] = {"http": 30100}
    doc["overrides"]["env"]["FLEET_STANDIN_FAIL"] = "crash-at-start"
    pb = tmp_path / "crash.yaml"
    pb.write_text(yaml.safe_dump(doc, sort_keys=False))
    unit = "fleet-sb-sysdcrash-single0-r0"
    try:
        proc = fleet(sb, "up", str(pb), "--skip-preflight")
        assert proc.returncode == 1, proc.stderr
        error = [line for line in proc.stderr.splitlines() if line.startswith("fleet: error: ")]
        # The engine's own journal line (its SyslogIdentifier), not systemd's closing lines.
        assert len(error) == 1 and f"{unit} restarting while its group was starting (exit 1): " in error[0], error
        assert f" s1 {unit}[" in error[0] and error[0].endswith("]: FATAL: injected failure: crash-at-start"), error
    finally:
        ok(fleet(sb, "down", str(pb), "-q"))


def test_down_leaves_no_unit_file_or_lock(sb: Sandbox) -> None:
    down = ok(fleet(sb, "down", str(V2)))
    for h in HOSTS:
        assert f"{h}/{UNITS[h]}: removed" in down.stderr
        res = sb.ssh(h, f"systemctl list-units --all --no-legend --plain 'fleet-*'; ls /etc/systemd/system | grep '^fleet-'; "
                        "find /run/fleet/lock -type f; find /etc/fleet -type f -not -path '*/prev/*'; pgrep -f 'sglang[.]launch_server'; true")  # fmt: skip
        assert res.out == "", res.out
        assert sb.ssh(h, f"systemctl status {UNITS[h]}.service").rc == 4  # no such unit


def test_sandbox_down_removes_the_systemd_hosts(sb: Sandbox) -> None:
    st = sb.state
    hosts = [h for h in st.hosts if h.kind == "systemd"]
    assert len(hosts) == len(HOSTS) and all(h.dockerd and h.dockerd.alive() for h in hosts)
    info = sandbox.status(st.name)
    assert [(h["name"], h["kind"], h["sshd"], h["dockerd"]) for h in info["hosts"]] == [
        (h, "systemd", True, True) for h in HOSTS
    ]
    members = members_of(hosts)
    assert len(members) > len(hosts), "the systemd hosts' processes live in their network namespaces"
    assert sandbox.down(st.name)
    assert_gone(st.name, hosts, members)


def members_of(hosts: list[sandbox_state.HostState]) -> list[procs.ProcRef]:
    """The processes in the hosts' network namespaces, by PID and start time (after teardown a
    namespace's inode number may be reused by a new namespace of another sandbox).  Observed
    only: teardown itself never looks at namespace membership."""
    inodes = {os.stat(f"/run/netns/{h.netns}").st_ino for h in hosts if h.netns}
    refs = []
    for pid in (int(p) for p in os.listdir("/proc") if p.isdigit()):
        if _in_netns(pid, inodes):
            try:
                refs.append(procs.ref(pid))
            except ProcessLookupError:
                continue
    return refs


def assert_gone(name: str, hosts: list[sandbox_state.HostState], members: list[procs.ProcRef]) -> None:
    assert [r for r in members if r.alive()] == []
    assert not any(h.dockerd and h.dockerd.alive() for h in hosts)
    assert [n for n in os.listdir("/run/netns") if n.startswith(f"fsb-{name}-")] == []
    assert not (sandbox_state.state_root() / name).exists()
    assert [str(p) for p in Path("/sys/fs/cgroup").glob(f"*/fleet-sandbox/{name}-*")] == []


def test_a_crash_half_way_through_up_is_cleaned_by_the_next_down(monkeypatch: pytest.MonkeyPatch) -> None:
    """up dies after s1's runner dockerd started and before its container (its own cleanup
    never runs, as when the process is killed): the state file already names what exists, so
    the next ``down`` removes the runner, the namespaces and the state."""
    skip_unless_possible()
    from launcher.sandbox import systemd_host

    class Crash(BaseException):
        pass

    def crash(*_: object) -> None:
        raise Crash

    name = f"sc{os.getpid()}"
    with monkeypatch.context() as m:
        m.setattr(systemd_host, "_run_container", crash)
        m.setattr(sandbox, "down", lambda _name: False)  # the crashed process cleans nothing
        with pytest.raises(Crash):
            sandbox.up(name, 0, docker=False, systemd_hosts=1)
    st = sandbox_state.load(name)
    assert st is not None
    hosts = [h for h in st.hosts if h.kind == "systemd"]
    assert len(hosts) == 1 and hosts[0].dockerd is not None and hosts[0].dockerd.alive()
    members = members_of(hosts)
    assert sandbox.down(name)
    assert_gone(name, hosts, members)


def _in_netns(pid: int, inodes: set[int]) -> bool:
    try:
        return os.stat(f"/proc/{pid}/ns/net").st_ino in inodes
    except OSError:
        return False
