"""Helpers for the rolling sandbox tests: the real sglang-router on this machine's loopback (its
own free ports), fleet's CLI in a subprocess, stand-in logs over SSH."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

from launcher.output import Event
from launcher.sandbox import router
from launcher.sandbox.client import Sandbox

REPO = Path(__file__).resolve().parents[2]
PLAYBOOKS = REPO / "playbooks" / "sandbox"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def fleet(sb: Sandbox, *args: str, inventory: str | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    cmd = ["fleet", *args, "-i", inventory or sb.inventory, "--known-hosts", sb.known_hosts]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=REPO, env=dict(os.environ))


def deploy(sb: Sandbox, playbook: Path, inventory: str | None = None) -> None:
    """``fleet up``'s library call (no preflight: the PD test's inventory declares GPUs the
    sandbox's fake hardware does not report)."""
    from launcher.pipeline import load_target
    from launcher.deploy import orchestrate
    from launcher.execute.hostkeys import KnownHosts
    from launcher.execute.ssh import SshConnector

    target = load_target(str(playbook), inventory or sb.inventory, None, ())
    with SshConnector(KnownHosts.for_operator((sb.known_hosts,), trust_new=False)) as c:
        report = orchestrate.up(target, c.connect, orchestrate.Options())
    assert report.errors == (), report.errors


def ok(proc: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert proc.returncode == 0, f"rc={proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


def http(url: str, body: Any = None, method: str | None = None, timeout: float = 10.0) -> tuple[int, Any]:
    import urllib.error
    import urllib.request

    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            raw = r.read()
            return r.status, json.loads(raw) if raw.strip() else None
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode(errors="replace")
    except OSError as err:
        return 0, str(err)


def wait_for(what: str, check: Any, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


class Router:
    """A real sglang-router process on 127.0.0.1 (this test owns it: stopped by its PID)."""

    def __init__(self, args: tuple[str, ...], log: Path) -> None:
        self.port = free_port()
        self.metrics = free_port()
        full = ("--host", "127.0.0.1", "--port", str(self.port), "--prometheus-port", str(self.metrics), *args)
        self.log = log
        self.proc = router.start(None, full, log)
        self.url = f"http://127.0.0.1:{self.port}"

    def wait_workers(self, n: int, timeout: float = 60.0) -> list[dict[str, Any]]:
        def ready() -> list[dict[str, Any]] | None:
            code, doc = http(self.url + "/workers")
            if code != 200 or not isinstance(doc, dict):
                return None
            workers: list[dict[str, Any]] = doc.get("workers", [])
            healthy = [w for w in workers if w.get("is_healthy")]
            return workers if len(healthy) >= n else None

        found: list[dict[str, Any]] = wait_for(f"{n} healthy workers behind {self.url} (log {self.log})", ready, timeout)
        return found

    def workers(self) -> list[dict[str, Any]]:
        code, doc = http(self.url + "/workers")
        assert code == 200, doc
        found: list[dict[str, Any]] = doc["workers"]
        return found

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


class Recorder:
    """A Progress that timestamps every event (when a group left / rejoined its router)."""

    def __init__(self) -> None:
        self.events: list[tuple[float, Event]] = []
        self.lines: list[str] = []
        self._lock = threading.Lock()

    def update(self, event: Event) -> None:
        with self._lock:
            self.events.append((time.time(), event))

    def note(self, line: str) -> None:
        with self._lock:
            self.lines.append(line)

    def first(self, unit: str, state: str) -> float:
        return next(t for t, e in self.events if e.unit == unit and e.state == state)


def standin_events(sb: Sandbox, host: str, container: str) -> list[dict[str, Any]]:
    res = sb.ssh(host, f"docker logs {container}")
    assert res.rc == 0, res.err
    return [json.loads(line) for line in res.out.splitlines() if line.startswith("{")]


def container_id(sb: Sandbox, host: str, container: str) -> str:
    res = sb.ssh(host, f"docker inspect -f '{{{{.Id}}}} {{{{.State.StartedAt}}}}' {container}")
    assert res.rc == 0, res.err
    return res.out.strip()


@pytest.fixture(scope="module")
def logs_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    yield Path(os.environ.get("FLEET_ROLLING_LOGS") or tmp_path_factory.mktemp("rolling"))


def router_variant(tmp: Path, deployment: str, ports: dict[str, int], tag: str, env: dict[str, str] | None = None) -> str:
    """``rolling-router.yaml`` (replicas on h1..h4 behind the deployment's own router on h5) as
    deployment ``deployment`` on ``ports``, with extra engine ``env``; written as ``tmp/<tag>.yaml``."""
    import yaml

    doc = yaml.safe_load((PLAYBOOKS / "rolling-router.yaml").read_text())
    doc["name"] = deployment
    doc["ports"] = ports
    doc["overrides"]["env"].update(env or {})
    path = tmp / f"{tag}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return str(path)


def unit_rows(sb: Sandbox, playbook: str) -> dict[str, tuple[str, str, int | None]]:
    """``fleet status``'s library call: host -> (state, health, generation) of its unit."""
    from launcher.pipeline import load_target
    from launcher.deploy.status import status
    from launcher.execute.hostkeys import KnownHosts
    from launcher.execute.ssh import SshConnector

    target = load_target(playbook, sb.inventory, None, None)
    with SshConnector(KnownHosts.for_operator((sb.known_hosts,), trust_new=False)) as c:
        return {r.host: (r.state, r.health, r.generation) for r in status(target, c.connect)}
