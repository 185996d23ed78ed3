"""The REAL vLLM (its CPU build) as native systemd units on two sandbox hosts of kind systemd
(systemd as PID 1 in their own root filesystems, vLLM and vllm-router installed there from the
real-engine image), behind the deployment's own router (vllm-router, a native unit on s1).  One
deployment for the whole module, in order: ``up`` waits out the real cold starts under systemd and
chat completions go through the router and each replica; ``status`` reads them through ``systemctl
show``; ``logs`` reads vLLM's own lines from the journal; ``up`` of generation 2 rolls the replicas
one at a time (drained through the deployment's router) while a bounded, checked load of 300+
requests (400-token streams and short answers) goes through the router -- none fails, no stream
is cut, each drain waited on the engine's own in-flight counter (at least one with requests in
flight), systemd runs a new engine process for each, ``logs`` shows that new process's journal
lines; ``down`` stops everything through systemd (vLLM's SIGTERM path,
KillMode=mixed) and leaves no unit, unit file, lock or engine process.  The module brings up its
own two-host sandbox.
"""

from __future__ import annotations

import json
import re
import time
import urllib.error
from collections import Counter
from typing import Iterator

import pytest

from launcher.rolling.router_api import RouterClient
from launcher.sandbox.client import Sandbox
from tests.real_engine.harness import PLAYBOOKS, chat, endpoints, fleet, get, leftovers, ok, status
from tests.real_engine.load import ChatLoad, truncated
from tests.sandbox.systemd_hosts import own_sandbox

pytestmark = pytest.mark.real_engine

V1 = PLAYBOOKS / "systemd-real.yaml"
V2 = PLAYBOOKS / "systemd-real-v2.yaml"
HOSTS = ("s1", "s2")
UNITS = {h: f"fleet-sb-sysreal-single{i}-r0" for i, h in enumerate(HOSTS)}
ROUTER = "fleet-sb-sysreal-router-r0"
MODEL = "ministral-3-14b"
LOAD_REQUESTS = 300
# Six threads, each a 400-token stream (the playbooks' --max-model-len is 512) then five 4-token
# answers, each checked whole: a stream is in flight on a replica most of the time (its drain
# waits on it) and the short answers bring the count past 300 within the rollout.
LOAD_THREADS, STREAM_EVERY, STREAM_TOKENS = 6, 6, 400
ROLL_TIMEOUT_S = 3000  # two cold starts one after the other; each took minutes at a load average of ~60 here


@pytest.fixture(scope="module")
def sb() -> Iterator[Sandbox]:
    yield from own_sandbox("sr", len(HOSTS), real_engine=True)


@pytest.fixture(scope="module")
def router(sb: Sandbox) -> Iterator[str]:
    """The deployment (generation 1) is up for the module; its router's URL.  Whatever a failed
    test left is taken down at the end."""
    t0 = time.monotonic()
    up = ok(fleet(sb, "up", str(V1), timeout=ROLL_TIMEOUT_S))
    print(f"systemd real deployment up (2 cold starts at once): {time.monotonic() - t0:.1f}s")
    for h in HOSTS:
        assert f"{h}/{UNITS[h]}: healthy" in up.stderr, up.stderr
    assert f"s1/{ROUTER}: healthy" in up.stderr, up.stderr
    try:
        yield f"http://{sb.host('s1').address}:8300"
    finally:
        fleet(sb, "down", str(V2), "-q", "--break-lock")


def main_pid(sb: Sandbox, host: str, unit: str) -> str:
    return sb.ssh(host, f"systemctl show -P MainPID {unit}.service").out.strip()


def unit_logs(sb: Sandbox, host: str, unit: str) -> list[str]:
    logs = ok(fleet(sb, "logs", str(V2), "--tail", "1000", timeout=120)).stdout.splitlines()
    return [line for line in logs if line.startswith(f"{host}/{unit} | ")]


def test_up_status_logs_under_systemd(sb: Sandbox, router: str) -> None:
    for h in HOSTS:
        assert sb.ssh(h, "cat /proc/1/comm").out == "systemd\n"
        cmdline = sb.ssh(h, f"tr '\\0' ' ' </proc/{main_pid(sb, h, UNITS[h])}/cmdline").out
        assert "vllm serve /srv/models/tiny" in cmdline and "--enforce-eager" in cmdline, cmdline
    # vllm-router sets its own process title
    assert sb.ssh("s1", f"tr '\\0' ' ' </proc/{main_pid(sb, 's1', ROUTER)}/cmdline").out.startswith("vllm::router ")
    bases = endpoints(sb, V1)
    for h in HOSTS:
        assert get(f"{bases[UNITS[h]]}/health")[0] == 200
        doc = chat(bases[UNITS[h]], MODEL)
        assert doc["model"] == MODEL and doc["usage"]["completion_tokens"] == 8
    assert {w.url: w.healthy for w in RouterClient(router).workers()} == {
        f"http://{sb.host(h).data_ip}:8100": True for h in HOSTS
    }
    assert chat(router, MODEL)["usage"]["completion_tokens"] == 8
    assert sorted((r["host"], r["unit"], r["state"], r["health"], r["generation"]) for r in status(sb, V1)) == sorted(
        [(h, UNITS[h], "running", "ok", 1) for h in HOSTS] + [("s1", ROUTER, "running", "ok", 1)]
    )
    for h in HOSTS:
        mine = unit_logs(sb, h, UNITS[h])
        assert any(f" {h} {UNITS[h]}[" in line and "(APIServer pid=" in line for line in mine), mine[-5:]
        assert any('"POST /v1/chat/completions HTTP/1.1" 200' in line for line in mine), mine[-5:]


def test_rolling_restart_under_load_behind_the_deployments_router(sb: Sandbox, router: str) -> None:
    before = {h: main_pid(sb, h, UNITS[h]) for h in HOSTS}
    router_pid = main_pid(sb, "s1", ROUTER)
    load = ChatLoad(router, model=MODEL, workers=LOAD_THREADS, stream_every=STREAM_EVERY, stream_tokens=STREAM_TOKENS,
                    max_seconds=ROLL_TIMEOUT_S + 600).start()  # fmt: skip
    t0 = time.monotonic()
    try:
        roll = fleet(sb, "up", str(V2), "--json", timeout=ROLL_TIMEOUT_S)
    finally:
        results = load.stop(at_least=LOAD_REQUESTS, timeout=600)
    failed = [r for r in results if not r.ok]  # a stream cut short counts (truncated)
    streams = sum(r.kind == "stream" for r in results)
    print(f"rolling restart of 2 real replicas under systemd: {time.monotonic() - t0:.1f}s, {len(results)} requests "
          f"({streams} streams), {sum(truncated(r) for r in results)} truncated, "
          f"{len(failed)} failed: {Counter(r.error[:80] for r in failed).most_common(3)}")
    assert roll.returncode == 0, roll.stderr
    assert f"draining through the deployment's router http://{sb.host('s1').address}:8300" in roll.stderr
    doc = json.loads(roll.stdout)
    assert [(g["group"], g["batch"], g["outcome"], g["generation_after"]) for g in doc["groups"]] == [
        ("sb-sysreal/single0", 1, "restarted", 2), ("sb-sysreal/single1", 2, "restarted", 2),
        ("sb-sysreal/router", 0, "skipped", 1),  # unchanged by v2: it kept serving
    ]  # fmt: skip
    # Each replica, out of the router, was stopped only once the engine's own in-flight counter
    # (vLLM /metrics running + waiting, read on its host) read 0; at least one still had requests
    # in flight when its drain began (which one the router last used is its policy's choice).
    drains = [g["drain"] for g in doc["groups"][:2]]
    print(f"drains: {drains}")
    found = [re.fullmatch(r"drained (\d+)->0 [\d.]+s", d) for d in drains]
    assert all(found) and any(int(m.group(1)) > 0 for m in found if m), drains
    assert failed == [], failed[:5]
    assert len(results) >= LOAD_REQUESTS and streams >= LOAD_REQUESTS // STREAM_EVERY, (len(results), streams)
    after = {h: main_pid(sb, h, UNITS[h]) for h in HOSTS}
    assert all(after[h] not in ("", "0", before[h]) for h in HOSTS), (before, after)
    assert main_pid(sb, "s1", ROUTER) == router_pid  # the router served throughout
    assert {w.url: w.healthy for w in RouterClient(router).workers()} == {
        f"http://{sb.host(h).data_ip}:8100": True for h in HOSTS
    }
    assert sorted((r["host"], r["unit"], r["state"], r["health"], r["generation"]) for r in status(sb, V2)) == sorted(
        [(h, UNITS[h], "running", "ok", 2) for h in HOSTS] + [("s1", ROUTER, "running", "ok", 1)]
    )
    bases = endpoints(sb, V2)
    for h in HOSTS:
        assert chat(bases[UNITS[h]], MODEL)["usage"]["completion_tokens"] == 8
    for h in HOSTS:  # the journal of the new engine process: its start and the request just sent
        new = [line for line in unit_logs(sb, h, UNITS[h]) if f" {h} {UNITS[h]}[{after[h]}]: " in line]
        assert any("(APIServer pid=" in line for line in new), new[-5:]
        assert any('"POST /v1/chat/completions HTTP/1.1" 200' in line for line in new), new[-5:]


def test_down_leaves_nothing(sb: Sandbox, router: str) -> None:
    down = ok(fleet(sb, "down", str(V2)))  # the playbook of the generation running
    for h in HOSTS:
        assert f"{h}/{UNITS[h]}: removed" in down.stderr
    assert f"s1/{ROUTER}: removed" in down.stderr
    assert leftovers(sb, HOSTS, "sb-sysreal") == []
    for h in HOSTS:
        res = sb.ssh(h, f"ls /etc/systemd/system | grep '^fleet-'; pgrep -f 'vllm[ ]serve|vllm[-]router'; "
                        f"systemctl status {UNITS[h]}.service >/dev/null; echo $?")  # fmt: skip
        assert res.out == "4\n", res.out  # no unit file, no engine or router process, no such unit
    with pytest.raises(urllib.error.URLError):
        chat(router, MODEL, timeout=10)
