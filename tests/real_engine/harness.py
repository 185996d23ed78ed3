"""Helpers of the real-engine tier: the fleet CLI in a subprocess against the session's
real-engine sandbox, OpenAI requests from the control node (sandbox addresses only), and what is
left on the hosts."""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from launcher.sandbox.client import Sandbox

REPO = Path(__file__).resolve().parents[2]
PLAYBOOKS = REPO / "playbooks" / "sandbox"
UP_TIMEOUT_S = 1500  # a hang bound: a cold start is ~90-130 s alone; several engines starting at once share 2 cores (the playbooks' start_timeout_s up to 1200)




def fleet_env(**extra: str) -> dict[str, str]:
    """The environment of a ``fleet`` run against this tier's hosts: this process's (which
    carries the loaded machine's liveness bound, :mod:`tests.loaded`) and ``extra``."""
    return {**os.environ, **extra}


def fleet(sb: Sandbox, *args: str, timeout: float = UP_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    cmd = ["fleet", *args, "-i", sb.inventory, "--known-hosts", sb.known_hosts]
    return subprocess.run(cmd, capture_output=True, text=True, env=fleet_env(), timeout=timeout, cwd=REPO)


def require_netns(sb: Sandbox, what: str) -> None:
    """Skips (saying why) where the sandbox gives its hosts no data IPs of their own."""
    if sb.state.mode != "netns":
        pytest.skip(f"{what} needs a netns sandbox (one data IP per host)")


def up_on(sb: Sandbox, playbook: Path, inventory: Path | str, *extra: str) -> subprocess.CompletedProcess[str]:
    """``fleet up`` with another inventory than the session's (a fault in its host vars)."""
    cmd = ["fleet", "up", str(playbook), "-i", str(inventory), "--known-hosts", sb.known_hosts, *extra]
    return subprocess.run(cmd, capture_output=True, text=True, env=fleet_env(), timeout=UP_TIMEOUT_S, cwd=REPO)


def misnamed_nic_inventory(sb: Sandbox, host: str, tmp_path: Path, ifname: str = "ens9") -> Path:
    """The session's inventory with ``host``'s data NIC (``nccl_ifname``) named ``ifname``."""
    doc = yaml.safe_load(Path(sb.inventory).read_text())
    doc["all"]["children"]["sandbox"]["hosts"][host]["nccl_ifname"] = ifname
    path = tmp_path / f"inventory-{ifname}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def ok(proc: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert proc.returncode == 0, f"rc={proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


def up_json(sb: Sandbox, playbook: Path, *extra: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(ok(fleet(sb, "up", str(playbook), "--json", *extra)).stdout)
    return doc


def status(sb: Sandbox, playbook: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = json.loads(fleet(sb, "status", str(playbook), "--json", timeout=120).stdout)
    return rows


def endpoints(sb: Sandbox, playbook: Path) -> dict[str, str]:
    """unit -> base URL of its health check, as fleet plans and records it (``fleet plan --json``)."""
    doc = json.loads(ok(subprocess.run(["fleet", "plan", str(playbook), "-i", sb.inventory, "--json"],
                                       capture_output=True, text=True, cwd=REPO, timeout=60)).stdout)  # fmt: skip
    return {u["name"]: u["health"]["url"].rsplit("/", 1)[0] for u in doc["units"] if u.get("health")}


def get(url: str, timeout: float = 10.0) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def wait_healthy(base: str, timeout: float = 30.0) -> None:
    """Until ``base``/health answers 200 (a stand-in started by a test)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if get(f"{base}/health", timeout=2)[0] == 200:
                return
        except OSError:
            pass
        assert time.monotonic() < deadline, f"{base} did not start"
        time.sleep(0.1)


def chat(base: str, model: str, content: str = "hello fleet", max_tokens: int = 8, timeout: float = 60.0) -> dict[str, Any]:
    body = {"model": model, "messages": [{"role": "user", "content": content}], "max_tokens": max_tokens,
            "ignore_eos": True}  # fmt: skip
    req = urllib.request.Request(f"{base}/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})  # fmt: skip
    with urllib.request.urlopen(req, timeout=timeout) as r:
        doc: dict[str, Any] = json.loads(r.read())
    return doc


def containers(sb: Sandbox, hosts: tuple[str, ...], deployment: str) -> list[str]:
    """host/name of every container (running or not) of ``deployment`` on ``hosts``."""
    out = []
    for h in hosts:
        res = sb.ssh(h, f"docker ps -a --filter label=fleet.deployment={deployment} --format '{{{{.Names}}}}'")
        assert res.rc == 0, res.err
        out += [f"{h}/{n}" for n in res.out.split()]
    return out


def leftovers(sb: Sandbox, hosts: tuple[str, ...], deployment: str) -> list[str]:
    """Unit files (but each unit's prev/, kept for rollback) and deploy locks of ``deployment``."""
    out = []
    for h in hosts:
        res = sb.ssh(h, f"find /etc/fleet/{deployment} -type f 2>/dev/null | grep -v /prev/; "
                        f"ls -d /run/fleet/lock/{deployment} 2>/dev/null; true")  # fmt: skip
        out += [f"{h}:{line}" for line in res.out.split()]
    return out
