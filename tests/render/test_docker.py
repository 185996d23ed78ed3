"""Every rendered ``docker run`` line is accepted by the real docker CLI and daemon.

Tier 1 (client only): both clients on the machine parse every line against a stub endpoint that
answers only ``/_ping`` (the client asks the server's OS before it validates ``--device``; with
no endpoint at all every ``--device`` line fails with "unknown server OS") and refuses
``containers/create`` with a marker.  A line the client accepts reaches that marker (exit 125);
a bad flag or value fails earlier with another message (also exit 125), so stderr decides.

Tier 2 (daemon): a private dockerd (own data-root, exec-root and socket, no bridge, no iptables,
in a private mount namespace) creates each container from the exact production line (``run``
becomes ``create --pull never``: images are imported locally, nothing is ever pulled), and
``docker inspect`` must show the intended HostConfig.  The daemon is killed by PID at the end.
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import shutil
import signal
import socketserver
import subprocess
import tarfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest

from launcher.model import Unit
from launcher.render import render
from launcher.runtimes.container import docker_run_args
from tests.render import factory
from tests.render.corpus import plan_for, plan_ids

CLIENTS = [c for c in ("/usr/local/bin/docker", "/usr/bin/docker") if os.path.exists(c)]
DOCKER = CLIENTS[0] if CLIENTS else "docker"
NO_DAEMON = "Cannot connect to the Docker daemon"
CREATE_REACHED = "fleet-render-test: create reached"


@dataclass(frozen=True)
class Line:
    plan_id: str
    unit: Unit
    detached: bool
    render_hash: str
    args: tuple[str, ...]


FACTORY = {"factory-full": factory.full_plan, "factory-multinode": factory.multinode_plan}
PLAN_IDS = [*plan_ids(), *FACTORY]


@functools.lru_cache(maxsize=None)
def lines(plan_id: str) -> tuple[Line, ...]:
    """Every docker line of one plan, for both runtimes."""
    plan = FACTORY[plan_id]() if plan_id in FACTORY else plan_for(plan_id)
    found = []
    for runtime in ("docker", "systemd"):
        for host in render(plan, runtime).hosts.values():
            units = {u.name: u for u in plan.units if u.host == host.host}
            for ru in host.units:
                unit = units[ru.name]
                if unit.container is None:
                    continue
                detached = runtime == "docker"
                args = docker_run_args(unit, detached=detached, render_hash=ru.render_hash)
                # The rendered files hold exactly these args (checked here, so a test of
                # docker_run_args is a test of what lands on the host).
                text = "".join(f.content for f in host.files if f.path in ru.files)
                assert args[-1] in text and ru.render_hash in text
                found.append(Line(plan_id, unit, detached, ru.render_hash, args))
    return tuple(found)


def test_clients_exist() -> None:
    assert CLIENTS


class _PingOnly(http.server.BaseHTTPRequestHandler):
    """Just enough of the Engine API for the client to finish parsing a ``run`` line."""

    def _answer(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Api-Version", "1.41")
        self.send_header("Ostype", "linux")
        self.send_header("Content-Type", "application/json" if status != 200 else "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_HEAD(self) -> None:
        self._answer(200 if self.path.endswith("/_ping") else 404, b"OK")

    def do_GET(self) -> None:
        self._answer(200 if self.path.endswith("/_ping") else 404, b"OK")

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self._answer(400, json.dumps({"message": CREATE_REACHED}).encode())

    def log_message(self, format: str, *args: object) -> None:
        pass


class _UnixHTTPServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True

    def get_request(self):  # type: ignore[no-untyped-def]
        conn, _ = super().get_request()
        return conn, ("local", 0)  # BaseHTTPRequestHandler wants a (host, port) client address


@pytest.fixture(scope="module")
def ping_only(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    sock = str(tmp_path_factory.mktemp("ping") / "docker.sock")
    server = _UnixHTTPServer(sock, _PingOnly)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"unix://{sock}"
    finally:
        server.shutdown()
        server.server_close()


def _client(client: str, host: str, args: tuple[str, ...]) -> subprocess.CompletedProcess[str]:
    env = {"DOCKER_HOST": host, "PATH": "/usr/bin:/bin", "HOME": "/nonexistent"}
    return subprocess.run([client, *args], env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("plan_id", PLAN_IDS)
@pytest.mark.parametrize("client", CLIENTS)
def test_client_accepts_every_line(client: str, plan_id: str, ping_only: str) -> None:
    rejected = []
    for line in {ln.args: ln for ln in lines(plan_id)}.values():
        r = _client(client, ping_only, line.args)
        if r.returncode != 125 or CREATE_REACHED not in r.stderr:
            rejected.append(f"{line.plan_id} {line.unit.name}: rc={r.returncode} {r.stderr.strip()[:300]}")
    assert rejected == []


@pytest.mark.parametrize("client", CLIENTS)
def test_client_rejects_bad_lines(client: str, ping_only: str) -> None:
    """The tier-1 check can fail: malformed values are refused before the create request."""
    for bad in (("--shm-size", "32q"), ("--ulimit", "memlock=abc"), ("--device", "a:b:c:d"), ("--bogus-flag",)):
        r = _client(client, ping_only, ("run", *bad, "img"))
        assert r.returncode == 125 and CREATE_REACHED not in r.stderr, (bad, r.stderr)


def test_client_accepts_without_daemon_when_no_device() -> None:
    """The plain no-daemon check (exit 125 + "Cannot connect") holds for lines without --device."""
    args = docker_run_args(factory.unit(container=factory.container(devices=())), detached=True, render_hash="H")
    assert "--gpus" in args and "--ulimit" in args and "--device" not in args
    r = _client(DOCKER, "unix:///nonexistent/docker.sock", args)
    assert r.returncode == 125 and NO_DAEMON in r.stderr, r.stderr


# --------------------------------------------------------------------------------------------
# tier 2: a private dockerd


@dataclass(frozen=True)
class Daemon:
    sock: str
    root: Path

    def docker(self, *args: str, env: dict[str, str] | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        full_env = {"PATH": "/usr/bin:/bin", "HOME": str(self.root), "DOCKER_HOST": f"unix://{self.sock}", **(env or {})}
        r = subprocess.run([DOCKER, *args], env=full_env, capture_output=True, text=True, timeout=120)
        if check and r.returncode != 0:
            raise AssertionError(f"docker {' '.join(args[:3])}...: rc={r.returncode} {r.stderr.strip()}")
        return r


def _busybox_tar(path: Path) -> None:
    with tarfile.open(path, "w") as tar:
        tar.add("/bin/busybox", arcname="bin/busybox")
        for applet in ("sh", "true", "sleep"):
            info = tarfile.TarInfo(f"bin/{applet}")
            info.type = tarfile.SYMTYPE
            info.linkname = "busybox"
            tar.addfile(info)


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    if shutil.which("dockerd") is None:
        pytest.fail("dockerd is not installed (apt-get install -y docker.io)")
    t = tmp_path_factory.mktemp("dk")
    sock = str(t / "docker.sock")
    log = open(t / "dockerd.log", "wb")
    # A private mount namespace: whatever dockerd mounts (overlay, netns) dies with it.
    proc = subprocess.Popen(
        [
            "unshare", "--mount", "--propagation", "private", "--",
            "dockerd", "--iptables=false", "--ip-forward=false", "--ip-masq=false", "--bridge=none",
            "--storage-driver=overlay2", f"--data-root={t / 'data'}", f"--exec-root={t / 'exec'}",
            f"--pidfile={t / 'dockerd.pid'}", f"--host=unix://{sock}", "--log-level=warn",
            "--containerd-namespace=fleet-render-test", "--containerd-plugins-namespace=fleet-render-test-p",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    d = Daemon(sock=sock, root=t)
    try:
        for _ in range(600):
            if proc.poll() is not None:
                pytest.fail(f"dockerd exited {proc.returncode}: {(t / 'dockerd.log').read_text()[-2000:]}")
            if os.path.exists(sock) and d.docker("version", check=False).returncode == 0:
                break
            time.sleep(0.1)
        else:
            pytest.fail(f"dockerd not ready: {(t / 'dockerd.log').read_text()[-2000:]}")
        _busybox_tar(t / "rootfs.tar")
        d.docker("import", str(t / "rootfs.tar"), "fleet-render-test:busybox")
        yield d
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        _unmount_under(t)


def _unmount_under(root: Path) -> None:
    with open("/proc/self/mounts") as f:
        points = [line.split()[1] for line in f]
    for point in sorted((p for p in points if p.startswith(str(root))), reverse=True):
        subprocess.run(["umount", "-l", point], check=False)


def _size(text: str) -> int:
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    return int(text[:-1]) * units[text[-1].lower()] if text[-1].lower() in units else int(text)


def _check_inspect(line: Line, info: dict[str, object]) -> None:
    unit, c = line.unit, line.unit.container
    assert c is not None
    hc = info["HostConfig"]
    cfg = info["Config"]
    assert isinstance(hc, dict) and isinstance(cfg, dict)
    assert info["Name"] == f"/{unit.name}"
    assert cfg["Image"] == c.image
    assert hc["NetworkMode"] == ("host" if c.network_host else "default")
    assert hc["IpcMode"] == ("host" if c.ipc_host else "private")
    if c.shm_size:
        assert hc["ShmSize"] == _size(c.shm_size)
    if c.gpus:
        assert hc["DeviceRequests"] == [
            {"Driver": "", "Count": 0, "DeviceIDs": [str(g) for g in c.gpus], "Capabilities": [["gpu"]], "Options": {}}
        ]
    else:
        assert not hc["DeviceRequests"]
    assert [(d["PathOnHost"], d["PathInContainer"], d["CgroupPermissions"]) for d in hc["Devices"] or []] == [
        (dev, dev, "rwm") for dev in c.devices
    ]
    assert sorted(hc["CapAdd"] or []) == sorted(cap if cap.startswith("CAP_") else f"CAP_{cap}" for cap in c.cap_add)
    want_ulimits = {u.split("=")[0]: u.split("=")[1] for u in c.ulimits}
    got_ulimits = {u["Name"]: u for u in hc["Ulimits"] or []}
    for name, spec in want_ulimits.items():
        soft, _, hard = spec.partition(":")
        assert (got_ulimits[name]["Soft"], got_ulimits[name]["Hard"]) == (int(soft), int(hard or soft))
    assert sorted(hc["Binds"] or []) == sorted(f"{m.host}:{m.container}" + (":ro" if m.read_only else "") for m in c.mounts)
    if line.detached:
        assert hc["RestartPolicy"]["Name"] == c.restart_policy.split(":")[0] and not hc["AutoRemove"]
    else:
        assert hc["RestartPolicy"]["Name"] in ("", "no") and hc["AutoRemove"] is True
    assert cfg["StopTimeout"] == 120
    labels = cfg["Labels"]
    assert isinstance(labels, dict)
    assert labels["fleet.render-hash"] == line.render_hash
    assert labels["fleet.unit"] == unit.name and labels["fleet.deployment"] == unit.deployment
    assert {k: labels[k] for k in c.labels if not k.startswith("fleet.")} == {k: v for k, v in c.labels.items() if not k.startswith("fleet.")}
    env = set(cfg["Env"] or [])
    expected_env = {f"{k}={v}" for k, v in unit.env.items()} | {f"{s.name}=secret-{s.name}" for s in unit.secrets}
    assert expected_env <= env
    if unit.argv:
        assert cfg["Entrypoint"] == [unit.argv[0]]
        assert (cfg["Cmd"] or []) == list(unit.argv[1:])


@pytest.mark.parametrize("plan_id", PLAN_IDS)
def test_daemon_creates_every_line_as_planned(plan_id: str, daemon: Daemon) -> None:
    failures = []
    for image in sorted({ln.unit.container.image for ln in lines(plan_id) if ln.unit.container}):
        # Every image the plan names is the local busybox image: nothing is ever pulled.
        daemon.docker("tag", "fleet-render-test:busybox", image)
    for detached in (True, False):  # one runtime at a time: both use the same container names
        created: dict[str, Line] = {}
        for line in (ln for ln in lines(plan_id) if ln.detached == detached):
            args = list(line.args)
            assert args[0] == "run"
            args = ["create", "--pull", "never", *[a for i, a in enumerate(args[1:]) if not (i == 0 and a == "-d")]]
            # As run.sh / systemd would: the values live in the client's environment, never in argv.
            env = {**line.unit.env, **{s.name: f"secret-{s.name}" for s in line.unit.secrets}}
            r = daemon.docker(*args, env=env, check=False)
            if r.returncode != 0:
                failures.append(f"{line.plan_id} {line.unit.name}: {r.stderr.strip()}")
            else:
                created[line.unit.name] = line
        if not created:
            continue
        try:
            for info in json.loads(daemon.docker("inspect", "--type", "container", *created).stdout):
                line = created[info["Name"].lstrip("/")]
                try:
                    _check_inspect(line, info)
                except AssertionError as err:
                    failures.append(f"{line.plan_id} {line.unit.name}: {err}")
        finally:
            daemon.docker("rm", "-f", *created, check=False)
    assert failures == [], "\n".join(failures[:10])


@pytest.mark.parametrize("client", CLIENTS)
def test_client_accepts_stop_and_rm(client: str) -> None:
    """The other docker commands the rendered files run (run.sh, ExecStartPre=, ExecStop=)."""
    for args in (("stop", "-t", "120", "fleet-demo-single-r0"), ("rm", "-f", "fleet-demo-single-r0")):
        r = _client(client, "unix:///nonexistent/docker.sock", args)
        assert r.returncode != 0 and NO_DAEMON in r.stderr, (args, r.stderr)
    bad = _client(client, "unix:///nonexistent/docker.sock", ("stop", "-t", "soon", "x"))
    assert NO_DAEMON not in bad.stderr
