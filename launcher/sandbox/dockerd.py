"""One dockerd (with its own containerd) per sandbox host, inside the host's namespaces.

The daemon runs under ``tini -s`` (:data:`procs.REAPER`: containerd's shims daemonize, and stay
below it instead of going to the machine's init; tini forwards SIGTERM to dockerd and reaps
them, which dockerd would not) via ``nsenter`` into the host sshd's network, mount and UTS namespaces, with
``/run`` (the host's private bind of ``<hostdir>/run``) as exec-root and socket dir: on the host
plain ``docker`` finds it; from the root namespace it is ``<hostdir>/run/docker.sock``.  A
``--network host`` container therefore lives in that host's network.  Data-roots are seeded from
the image template before start (hardlinks; bolt ``*.db`` files copied, since bolt locks them).
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import socket
import subprocess
import urllib.parse
from pathlib import Path
from typing import Any

from launcher.errors import FleetError
from launcher.sandbox import procs
from launcher.sandbox.state import HostState

READY_TIMEOUT_S = 60.0


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        s.connect(self._path)
        self.sock = s


def api(sock: str, method: str, path: str, timeout: float = 30.0) -> tuple[int, Any]:
    """One Docker Engine API call over the unix socket: (status, decoded JSON body or None)."""
    conn = _UnixConnection(sock, timeout)
    try:
        conn.request(method, path)
        resp = conn.getresponse()
        body = resp.read()
    finally:
        conn.close()
    try:
        return resp.status, json.loads(body) if body else None
    except ValueError:
        return resp.status, body.decode(errors="replace")


def seed(template: Path, data_root: Path) -> None:
    """Fills an empty data-root from the template: hardlinks for layers, private bolt DBs."""
    if data_root.exists():
        shutil.rmtree(data_root)
    proc = subprocess.run(("cp", "-al", str(template), str(data_root)), capture_output=True, text=True)
    if proc.returncode != 0:  # another filesystem: hardlinks impossible
        shutil.rmtree(data_root, ignore_errors=True)
        subprocess.run(("cp", "-a", str(template), str(data_root)), check=True)
        return
    for db in template.rglob("*.db"):
        target = data_root / db.relative_to(template)
        target.unlink()
        shutil.copy2(db, target)


def argv(data_root: str, cgroup_parent: str) -> tuple[str, ...]:
    return (
        "dockerd",
        "--iptables=false",
        "--ip-forward=false",
        "--ip-masq=false",
        "--bridge=none",
        "--storage-driver=overlay2",
        f"--data-root={data_root}",
        "--exec-root=/run/docker",
        "--pidfile=/run/docker.pid",
        "--host=unix:///run/docker.sock",
        f"--cgroup-parent={cgroup_parent}",
        "--log-level=warn",
    )


def cgroup_parent(sandbox: str, host: str) -> str:
    return f"/fleet-sandbox/{sandbox}-{host}"


def start(sandbox: str, host: HostState) -> procs.ProcRef:
    assert host.sshd is not None
    cmd = (
        "nsenter", "-t", str(host.sshd.pid), "-m", "-u", *(("-n",) if host.netns else ()), *procs.REAPER,
        *argv(f"{host.dir}/docker", cgroup_parent(sandbox, host.name)),
    )  # fmt: skip
    with open(Path(host.dir) / "dockerd.log", "ab") as log:
        proc = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    return procs.ref(proc.pid)


def wait_ready(host: HostState, deadline: float) -> None:
    """Polls ``/_ping`` and the daemon PID (a daemon that failed would otherwise be waited out)."""
    daemon = host.dockerd
    assert daemon is not None
    procs.poll_until(
        lambda: api(host.docker_socket, "GET", "/_ping", timeout=2.0)[0] == 200, deadline,
        died=lambda: None if daemon.alive() else f"{host.name}: dockerd exited: {_log_tail(host)}",
        late=lambda: f"{host.name}: dockerd not ready: {_log_tail(host)}",
    )  # fmt: skip


def tag(host: HostState, source: str, target: str) -> None:
    repo, _, tg = target.rpartition(":") if ":" in target.rsplit("/", 1)[-1] else (target, "", "latest")
    query = urllib.parse.urlencode({"repo": repo, "tag": tg})
    status, body = api(host.docker_socket, "POST", f"/images/{source}/tag?{query}")
    if status != 201:
        raise FleetError(f"{host.name}: docker tag {source} {target}: {body}")


def remove_containers(host: HostState) -> None:
    """``docker rm -f`` of every container (best effort: the daemon may already be gone)."""
    if not os.path.exists(host.docker_socket):
        return
    try:
        status, listed = api(host.docker_socket, "GET", "/containers/json?all=1", timeout=20.0)
    except OSError:
        return
    if status != 200:
        return
    for c in listed:
        try:
            api(host.docker_socket, "DELETE", f"/containers/{c['Id']}?force=1&v=1", timeout=20.0)
        except OSError:
            continue  # one slow removal (a loaded machine) is no reason to leave the others running


def remove_cgroups(sandbox: str, host: str) -> None:
    """Removes the (empty) per-daemon cgroup dirs containers left in every v1 hierarchy."""
    rel = cgroup_parent(sandbox, host).lstrip("/")
    for hierarchy in Path("/sys/fs/cgroup").iterdir():
        top = hierarchy / rel
        if not top.is_dir():
            continue
        # Bottom-up, and a dir that vanishes mid-walk (a concurrent ``down`` of the same stale
        # sandbox, the kernel reaping a container's group) is no error.
        for d, _, _ in os.walk(top, topdown=False):
            _rmdir(Path(d))
        _rmdir(top.parent)  # /fleet-sandbox, once no sandbox host uses it


def _rmdir(d: Path) -> None:
    try:
        d.rmdir()
    except OSError:
        pass


def _log_tail(host: HostState) -> str:
    try:
        lines = (Path(host.dir) / "dockerd.log").read_text(errors="replace").strip().splitlines()
    except OSError:
        return "no log"
    return lines[-1][-300:] if lines else "no output"
