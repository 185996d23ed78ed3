"""Catalog entry 43 (glm/sglang-pd-tp8pp2-6000d-fp8-mooncakestore) on the sandbox fleet through the
real CLI: playbooks/sandbox/pd-mooncakestore.yaml -- GLM 2P1D, TP8 PP2 per role on h9..h14,
Mooncake transfer, HiCache offload to a Mooncake store whose master runs on h15 beside the real
sglang-router.

- ``up``: the master first, then the engine ranks, then the router.  Every rank SGLang makes a
  store client mounts its segment at the master before it is healthy (the stand-in honours
  SGLang's start contract): the four prefill ranks, each from its own data IP with the planned
  MOONCAKE_* values -- not the decode ranks, whose cache SGLang forces to a chunk cache.  A chat
  completion goes router -> prefill -> decode; a second ``up`` changes nothing; ``status`` shows
  every unit running; ``down`` leaves no container.
- The master's RPC port filtered on h15 (its /metrics still answers, so fleet sees it healthy):
  fleet's preflight refuses it, naming every engine rank, and starts nothing; past preflight
  (``--skip-preflight``) the prefill ranks cannot mount, exit with SGLang's one line, and ``up``
  fails with one line per prefill group naming a unit on its host; no prefill rank and no router
  is left; whole, healthy groups stay until ``down`` (the master, and the decode of the same step).

Run: ``FLEET_SANDBOX_NAME=<unique> python -m pytest -q tests/deploy/test_sandbox_mooncake_store.py``
(root; about 40 s with the sandbox's own bring-up and teardown).
"""

from __future__ import annotations

import re
import subprocess
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest

from launcher.errors import ExitCode
from launcher.sandbox.client import Sandbox
from tests.deploy.test_sandbox_e2e import PLAYBOOKS, containers, fleet, need_netns, ok, post, status, up_json

pytestmark = pytest.mark.sandbox
SANDBOX_HOSTS = 15

PLAYBOOK = PLAYBOOKS / "pd-mooncakestore.yaml"
DEPLOYMENT = "sb-pd-mc"
HOSTS = ("h9", "h10", "h11", "h12", "h13", "h14", "h15")
RANKS = (("h13", "decode0", 0), ("h14", "decode0", 1), ("h9", "prefill0", 0), ("h10", "prefill0", 1),
         ("h11", "prefill1", 0), ("h12", "prefill1", 1))  # fmt: skip
# The store clients: SGLang forces a PD decode's cache to a chunk cache, so HiCache -- and with it
# the store client -- exists on the prefill ranks only (the recipe enables neither the decode's
# radix cache nor its KV offload).
CLIENTS = tuple(r for r in RANKS if r[1].startswith("prefill"))
MASTER_RPC, MASTER_METRICS, ROUTER = 50051, 9003, 8000
NFT_TABLE = "fleetmctest"  # a table of this test's own: faults.clear and other tests never touch it


def units(deployment: str) -> list[tuple[str, str]]:
    """(host, unit) in plan order: the master, the engine ranks by group, the router."""
    return [
        ("h15", f"fleet-{deployment}-mooncake-master-r0"),
        *((h, f"fleet-{deployment}-{g}-r{r}") for h, g, r in RANKS),
        ("h15", f"fleet-{deployment}-router-r0"),
    ]


def store_clients(sb: Sandbox) -> tuple[int, list[dict[str, str]]]:
    """``master_active_clients`` and each recorded client's labels, from the master's /metrics."""
    with urllib.request.urlopen(f"http://{sb.host('h15').data_ip}:{MASTER_METRICS}/metrics", timeout=10) as r:
        text = r.read().decode()
    found = re.search(r"^master_active_clients (\d+)$", text, re.M)
    assert found, text
    rows = [dict(re.findall(r'(\w+)="([^"]*)"', line)) for line in text.splitlines()
            if line.startswith("mooncake_standin_store_client{")]  # fmt: skip
    return int(found.group(1)), rows


def nft(sb: Sandbox, host: str, script: str) -> None:
    ns = sb.host(host).netns
    assert ns, "netns sandbox"
    proc = subprocess.run(("ip", "netns", "exec", ns, "nft", "-f", "-"), input=script, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


@pytest.fixture
def sb(sandbox_fleet: Sandbox) -> Iterator[Sandbox]:
    need_netns(sandbox_fleet)
    yield sandbox_fleet


def test_store_clients_mount_then_serve(sb: Sandbox) -> None:
    try:
        up = up_json(sb, PLAYBOOK)
        assert [(u["host"], u["unit"], u["action"], u["outcome"]) for u in up["units"]] == [
            (h, u, "start", "healthy") for h, u in units(DEPLOYMENT)
        ], up

        count, rows = store_clients(sb)
        assert count == len(CLIENTS), rows
        assert sorted((r["host"], r["role"], r["rank"], r["client"], r["peer"], r["segment"]) for r in rows) == sorted(
            (h, g.rstrip("0123456789"), str(r), sb.host(h).data_ip, sb.host(h).data_ip, "1600gb") for h, g, r in CLIENTS
        ), "every prefill rank mounted its segment at the master, from its own data IP; no decode rank did"

        body = {"model": "glm-5.3-flash", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 3}
        answer = post(f"http://{sb.host('h15').data_ip}:{ROUTER}/v1/chat/completions", body)
        origin = answer["fleet_standin"]
        assert answer["choices"][0]["message"]["content"] and answer["usage"]["completion_tokens"] == 3, answer
        assert origin["decode_host"] == "h13" and origin["prefill_host"] in ("h9", "h11"), origin

        again = up_json(sb, PLAYBOOK)
        assert {(u["unit"], u["outcome"]) for u in again["units"]} == {(u, "unchanged") for _, u in units(DEPLOYMENT)}
        assert store_clients(sb)[0] == len(CLIENTS), "a second up restarts nothing: the clients stay mounted"

        rows = status(sb, PLAYBOOK)
        assert sorted((r["host"], r["unit"], r["state"], r["drift"]) for r in rows) == sorted(
            (h, u, "running", "none") for h, u in units(DEPLOYMENT)
        ), rows

        ok(fleet(sb, "down", str(PLAYBOOK), "-q"))
        assert containers(sb, HOSTS, DEPLOYMENT) == {}
    finally:
        if containers(sb, HOSTS, DEPLOYMENT):
            fleet(sb, "down", str(PLAYBOOK), "-q", "--break-lock")


@contextmanager
def rpc_port_filtered(sb: Sandbox) -> Iterator[None]:
    """h15 drops packets to the master's RPC port (a firewall): the master still runs and its
    /metrics -- fleet's health check of it -- still answers."""
    nft(sb, "h15", f"table inet {NFT_TABLE} {{\n chain input {{\n  type filter hook input priority 0;\n"
                   f"  tcp dport {MASTER_RPC} drop;\n }}\n}}\n")  # fmt: skip
    try:
        yield
    finally:
        nft(sb, "h15", f"delete table inet {NFT_TABLE}\n")


def blocked_playbook(tmp_path: Path, deployment: str) -> Path:
    pb = tmp_path / f"{deployment}.yaml"
    pb.write_text(PLAYBOOK.read_text().replace(f"name: {DEPLOYMENT}\n", f"name: {deployment}\n", 1))
    return pb


def test_preflight_refuses_a_filtered_master_port(sb: Sandbox, tmp_path: Path) -> None:
    """Fleet's own gate sees the filtered port before anything starts."""
    deployment = "sb-pd-mc-gated"
    pb = blocked_playbook(tmp_path, deployment)
    try:
        with rpc_port_filtered(sb):
            proc = fleet(sb, "up", str(pb))
        assert proc.returncode != 0 and proc.stderr.splitlines()[-1].startswith(
            "fleet: preflight failed: nothing was started"
        ), proc.stderr
        failed = [line for line in proc.stderr.splitlines() if line.startswith("fleet: preflight: fail: ")]
        engines = {u for h, u in units(deployment) if h != "h15"}
        assert {line.split()[3].split("/", 1)[1].rstrip(":") for line in failed} == engines, proc.stderr
        ip = sb.host("h15").data_ip
        assert all(f"cannot reach mooncake-master {ip}:{MASTER_RPC}" in line for line in failed), proc.stderr
        assert containers(sb, HOSTS, deployment) == {}, "nothing was started, the master neither"
    finally:
        if containers(sb, HOSTS, deployment):
            fleet(sb, "down", str(pb), "-q", "--break-lock")


def test_ranks_that_cannot_mount_fail_up_with_one_line_each(sb: Sandbox, tmp_path: Path) -> None:
    """Past the gate (skipped here; a firewall may also change after it): every prefill group fails
    on its ranks' SGLang line, one error line per group naming its host and unit; no prefill rank
    and no router (a later step) is left; whole healthy groups -- the master, the decode -- stay
    until down."""
    deployment = "sb-pd-mc-blocked"
    pb = blocked_playbook(tmp_path, deployment)
    try:
        with rpc_port_filtered(sb):
            proc = fleet(sb, "up", str(pb), "--skip-preflight")
            assert proc.returncode == ExitCode.PARTIAL, proc.stderr
            errors = [line for line in proc.stderr.splitlines() if line.startswith("fleet: error: ")]
            named = [re.match(rf"fleet: error: (h\d+): .*? (fleet-{deployment}-(\w+?)-r\d) ", line) for line in errors]
            assert all(named) and len(errors) == 2, proc.stderr
            hits = [m.groups() for m in named if m]
            assert all((h, u) in units(deployment) for h, u, _ in hits), "each line names a unit on its own host"
            assert sorted(g for _, _, g in hits) == ["prefill0", "prefill1"], "one line per failed group"
            # Each group's ranks show why: SGLang's line, from the run that died.
            cause = f"FATAL: Failed to setup Mooncake store, error code: -900 (master {sb.host('h15').data_ip}:{MASTER_RPC}: timed out)"
            blocks = dict(_log_blocks(proc.stderr))
            for group in ("prefill0", "prefill1"):
                assert any(cause in text for unit, text in blocks.items() if f"-{group}-r" in unit), (group, proc.stderr)

            left = containers(sb, HOSTS, deployment)
            assert sorted(left) == sorted([
                ("h15", f"fleet-{deployment}-mooncake-master-r0"),
                ("h13", f"fleet-{deployment}-decode0-r0"), ("h14", f"fleet-{deployment}-decode0-r1"),
            ]), left  # fmt: skip
            assert store_clients(sb) == (0, []), "no rank ever mounted"
        ok(fleet(sb, "down", str(pb), "-q"))
        assert containers(sb, HOSTS, deployment) == {}
    finally:
        if containers(sb, HOSTS, deployment):
            fleet(sb, "down", str(pb), "-q", "--break-lock")


def _log_blocks(stderr: str) -> Iterator[tuple[str, str]]:
    """``--- host/unit: last log lines`` blocks of ``up``'s report: (host/unit, the lines)."""
    unit, lines = "", []
    for line in stderr.splitlines():
        if line.startswith("--- ") or not line.startswith("    "):
            if unit:
                yield unit, "\n".join(lines)
            unit, lines = (line[4:].split(":", 1)[0], []) if line.startswith("--- ") else ("", [])
        else:
            lines.append(line.strip())
    if unit:
        yield unit, "\n".join(lines)
