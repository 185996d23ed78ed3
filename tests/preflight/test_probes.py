"""The probe scripts run for real on this machine: the host probe under sh (with a stand-in
``docker`` printing what docker prints), the reachability listener and client under python3
on loopback, the listener cleanup that kills only our own listener."""

from __future__ import annotations

import hashlib
import os
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from launcher.model import ContainerSpec, Unit
from launcher.preflight import checks as preflight
from launcher.preflight.rules.base import ReachTarget

DOCKER = r"""#!/bin/sh
# stand-in docker: image inspect succeeds for img:ok/img:nodev/img:nocap, run answers per image
case "$1" in
  ps) echo fleet-x-rank0-r0; exit 0;;
  rm) exit 0;;
  image) case "$3" in img:*) exit 0;; *) echo "Error: No such image: $3" >&2; exit 1;; esac;;
  run)
    for a in "$@"; do img=$a; case "$a" in img:*) break;; esac; done
    case "$img" in
      img:ok) printf 'rdma_cm\nuverbs0\n';;
      img:nodev) echo "ls: /dev/infiniband: No such file or directory" >&2; exit 1;;
      img:nohost) echo 'docker: Error response from daemon: error gathering device information while adding custom device "/dev/infiniband": no such file or directory.' >&2
                  echo "See 'docker run --help'." >&2; exit 127;;
    esac;;
esac
"""


def _bin(tmp: Path) -> dict[str, str]:
    bindir = tmp / "bin"
    bindir.mkdir()
    docker = bindir / "docker"
    docker.write_text(DOCKER)
    docker.chmod(docker.stat().st_mode | stat.S_IXUSR)
    (bindir / "log").write_text("")
    return {"PATH": f"{bindir}:/usr/bin:/bin:/usr/sbin:/sbin", "LANG": "C"}


def _unit(name: str, image: str, devices: tuple[str, ...] = ("/dev/infiniband",)) -> Unit:
    return Unit(host="h", name=name, deployment="x", role="rank", group="x/rank0", rank=0, nnodes=2,
                container=ContainerSpec(image=image, devices=devices, cap_add=("IPC_LOCK",)))


def _weights(root: Path, files: dict[str, bytes], manifest: dict[str, str] | None = None) -> Path:
    root.mkdir(parents=True)
    for name, data in files.items():
        (root / name).write_bytes(data)
    if manifest is not None:
        (root / "fleet.sha256").write_text("".join(f"{digest}  {name}\n" for name, digest in manifest.items()))
    return root


def test_host_probe_script_end_to_end(tmp_path: Path) -> None:
    env = _bin(tmp_path)
    good = _weights(tmp_path / "good", {"a.safetensors": b"aaaa", "b.safetensors": b"bb"},
                    {"a.safetensors": hashlib.sha256(b"aaaa").hexdigest(),
                     "b.safetensors": hashlib.sha256(b"bb").hexdigest()})
    short = _weights(tmp_path / "with space", {"a.safetensors": b"aaaa", "b.safetensors": b"XX"},
                     {"a.safetensors": hashlib.sha256(b"aaaa").hexdigest(),
                      "b.safetensors": hashlib.sha256(b"bb").hexdigest(),
                      "c.safetensors": hashlib.sha256(b"c").hexdigest()})
    plain = _weights(tmp_path / "plain", {"x.bin": b"1"})
    paths = (str(good), str(short), str(plain), str(tmp_path / "absent"))
    images = (_unit("u-ok", "img:ok"), _unit("u-nodev", "img:nodev", devices=()), _unit("u-nohost", "img:nohost"),
              _unit("u-noimage", "other:1"))
    for level, short_verdict in (
        ("cheap", "1 of 3 files listed in fleet.sha256 are missing (c.safetensors)"),
        ("full", "2 of 3 files fail fleet.sha256 (b.safetensors, c.safetensors)"),
    ):
        script = preflight.host_probe_script(paths, images, level)  # type: ignore[arg-type]
        out = subprocess.run(["sh", "-c", script], capture_output=True, text=True, env=env, timeout=60).stdout
        probe = preflight.parse_host_probe(out, paths, level)  # type: ignore[arg-type]
        assert probe.running == frozenset({"fleet-x-rank0-r0"})
        assert probe.paths[str(good)] == preflight.PathProbe(exists=True, bytes=probe.paths[str(good)].bytes,
                                                              files=3, manifest="ok")
        assert (probe.paths[str(good)].bytes or 0) >= 6
        assert probe.paths[str(short)].manifest == short_verdict
        assert probe.paths[str(plain)] == preflight.PathProbe(exists=True, bytes=probe.paths[str(plain)].bytes,
                                                               files=1, manifest=None)
        assert probe.paths[str(tmp_path / "absent")] == preflight.PathProbe(exists=False)
        assert probe.images == {
            "u-ok": preflight.ImageProbe(status="visible", detail="rdma_cm uverbs0"),
            "u-nodev": preflight.ImageProbe(status="absent", detail="no /dev/infiniband in the container"),
            "u-nohost": preflight.ImageProbe(status="error", detail='error gathering device information while '
                                             'adding custom device "/dev/infiniband": no such file or directory.'),
            "u-noimage": preflight.ImageProbe(status="no-image"),
        }


def test_host_probe_lists_listening_ports() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        out = subprocess.run(["sh", "-c", preflight.host_probe_script(())], capture_output=True, text=True,
                             timeout=30).stdout
    if "ss" not in out and not any(line.strip() for line in out.split("rc=")[1:2]):
        pytest.skip("neither ss nor netstat on this machine")
    assert port in preflight.parse_host_probe(out, ()).listening


def test_image_probe_argv_carries_the_rendered_flags() -> None:
    u = Unit(host="h", name="fleet-x-rank0-r1", deployment="x", role="rank", group="x/rank0", rank=1, nnodes=2,
             container=ContainerSpec(image="lmsysorg/sglang:v0.5.23", devices=("/dev/infiniband",),
                                     cap_add=("IPC_LOCK",), ulimits=("memlock=-1",),
                                     extra_args=("--security-opt", "seccomp=unconfined")))
    script = preflight.host_probe_script((), (u,))
    assert ("docker run --rm --name fleet-preflight-fleet-x-rank0-r1 --network none --device /dev/infiniband "
            "--cap-add IPC_LOCK --ulimit memlock=-1 --security-opt seccomp=unconfined --entrypoint ls "
            "lmsysorg/sglang:v0.5.23 -1 /dev/infiniband") in script


def _target(port: int, ip: str = "127.0.0.1") -> ReachTarget:
    return ReachTarget(label="dist-init", group="x/rank0", unit="u0", host="h1", ip=ip, port=port,
                       clients=(("h2", "u1", "127.0.0.1"),))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie counts as gone (and so does one reaped between the two reads)
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _run(argv: tuple[str, ...]) -> str:
    return subprocess.run(argv, capture_output=True, text=True, timeout=30, check=True).stdout


def test_listener_client_and_cleanup_on_loopback() -> None:
    port, unused = _free_port(), _free_port()
    pid, errors = preflight.parse_listener(_run(preflight.listener_argv([_target(port), _target(80, "192.0.2.7")], life_s=20)))
    assert pid is not None and errors == {"192.0.2.7:80": "Cannot assign requested address"}
    try:
        assert _alive(pid)
        result = preflight.parse_client(_run(preflight.client_argv(
            [("127.0.0.1", "127.0.0.1", port), ("127.0.0.1", "127.0.0.1", unused)], timeout_s=2)))
        assert result == {f"127.0.0.1:{port}": None, f"127.0.0.1:{unused}": "connection refused"}
        bind = preflight.parse_client(_run(preflight.client_argv([("192.0.2.8", "127.0.0.1", port)])))
        assert bind == {f"127.0.0.1:{port}": "cannot bind source address 192.0.2.8: Cannot assign requested address"}
        again = preflight.parse_client(_run(preflight.client_argv([("127.0.0.1", "127.0.0.1", port)])))
        assert again == {f"127.0.0.1:{port}": None}, "the listener keeps accepting"
    finally:
        _run(preflight.cleanup_argv(pid))
    assert not _alive(pid), "cleanup returned while the listener ran"
    with socket.socket() as s:  # the port is free again at once (no TIME_WAIT on the listener side)
        s.bind(("127.0.0.1", port))


def test_cleanup_returns_once_a_listener_slow_to_die_is_gone() -> None:
    """A listener that does not act on SIGTERM at once (stopped here; on a loaded host, not yet
    scheduled) is still ended before cleanup returns -- SIGKILL after the grace -- so the port is
    free for what ``up`` starts next."""
    port = _free_port()
    pid, _ = preflight.parse_listener(_run(preflight.listener_argv([_target(port)], life_s=60)))
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)
    try:
        _run(preflight.cleanup_argv(pid))
        assert not _alive(pid), "cleanup returned while the listener ran"
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))
    finally:
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)


def test_listener_that_cannot_bind_anything_does_not_fork() -> None:
    pid, errors = preflight.parse_listener(_run(preflight.listener_argv([_target(80, "192.0.2.7")])))
    assert (pid, errors) == (None, {"192.0.2.7:80": "Cannot assign requested address"})


def test_listener_exits_by_itself() -> None:
    pid, _ = preflight.parse_listener(_run(preflight.listener_argv([_target(_free_port())], life_s=0.5)))
    assert pid is not None
    deadline = time.monotonic() + 5
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(pid)


def test_cleanup_leaves_other_processes_alone() -> None:
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        _run(preflight.cleanup_argv(other.pid))
        time.sleep(0.2)
        assert other.poll() is None
    finally:
        other.send_signal(signal.SIGTERM)
        other.wait(timeout=10)


def test_parsers_reject_noise() -> None:
    with pytest.raises(ValueError):
        preflight.parse_listener("python3: not found")
    with pytest.raises(ValueError):
        preflight.parse_client("")
