"""The REAL vLLM (its CPU build) as a native systemd unit on a sandbox host of kind systemd
(systemd as PID 1 in its own root filesystem, vLLM installed there from the real-engine image):
``up`` waits out the real cold start under systemd, a chat completion goes through the planned
endpoint, ``status`` reads it through ``systemctl show``, ``logs`` reads vLLM's own lines from the
journal, ``down`` stops it through systemd (vLLM's SIGTERM path, KillMode=mixed) and leaves no
unit, unit file, lock or engine process.  The module brings up its own one-host sandbox.
"""

from __future__ import annotations

from typing import Iterator

import pytest

from launcher.sandbox.client import Sandbox
from tests.real_engine.harness import PLAYBOOKS, chat, endpoints, fleet, get, leftovers, ok, status
from tests.sandbox.systemd_hosts import own_sandbox

pytestmark = pytest.mark.real_engine

PLAYBOOK = PLAYBOOKS / "systemd-real.yaml"
UNIT = "fleet-sb-sysreal-single0-r0"
MODEL = "ministral-3-14b"


@pytest.fixture(scope="module")
def sb() -> Iterator[Sandbox]:
    yield from own_sandbox("sr", 1, real_engine=True)


def test_real_vllm_under_systemd_up_status_logs_down(sb: Sandbox) -> None:
    up = ok(fleet(sb, "up", str(PLAYBOOK)))
    assert f"s1/{UNIT}: healthy" in up.stderr
    assert sb.ssh("s1", "cat /proc/1/comm").out == "systemd\n"
    main = sb.ssh("s1", f"systemctl show -P MainPID {UNIT}.service").out.strip()
    assert "vllm serve /srv/models/tiny" in sb.ssh("s1", f"tr '\\0' ' ' </proc/{main}/cmdline").out
    base = endpoints(sb, PLAYBOOK)[UNIT]
    assert get(f"{base}/health")[0] == 200
    doc = chat(base, MODEL)
    assert doc["model"] == MODEL and doc["usage"]["completion_tokens"] == 8
    assert [(r["host"], r["unit"], r["state"], r["health"]) for r in status(sb, PLAYBOOK)] == [
        ("s1", UNIT, "running", "ok")
    ]
    logs = ok(fleet(sb, "logs", str(PLAYBOOK), "--tail", "400")).stdout.splitlines()
    mine = [line for line in logs if line.startswith(f"s1/{UNIT} | ")]
    assert any(f" s1 {UNIT}[" in line and "(APIServer pid=" in line for line in mine), mine[-5:]
    assert any('"POST /v1/chat/completions HTTP/1.1" 200' in line for line in mine), mine[-5:]

    down = ok(fleet(sb, "down", str(PLAYBOOK)))
    assert f"s1/{UNIT}: removed" in down.stderr
    assert leftovers(sb, ("s1",), "sb-sysreal") == []
    res = sb.ssh("s1", f"ls /etc/systemd/system | grep '^fleet-'; pgrep -f 'vllm[ ]serve'; systemctl status {UNIT}.service >/dev/null; echo $?")
    assert res.out == "4\n", res.out  # no unit file, no engine process, no such unit
