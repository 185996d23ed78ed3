"""Two-node pipeline parallel with the REAL vLLM across two sandbox hosts (h9 rank 0, h10 rank 1;
own network namespaces, own dockerd each): the command shape fleet renders for the catalog's
multi-node vLLM recipes (``--nnodes 2 --node-rank N --master-addr --headless``).

- the ranks rendezvous over the data interface: each container carries its host's
  GLOO_SOCKET_IFNAME / VLLM_HOST_IP from the inventory, and the group answers a chat completion;
- rank 1's container killed: ``fleet status`` reports the group unhealthy;
- a wrong interface name in the inventory: preflight refuses it (``fleet up`` starts nothing);
  with ``--skip-preflight`` the real engine's own failure -- the rank's log line ``Unable to find
  address for: ens9`` -- reaches fleet's error, and the group is torn down.

The healthy deployment is shared by the first two tests (one cold start, ~2 min).
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml

from launcher.sandbox.client import Sandbox
from tests.real_engine.harness import (
    PLAYBOOKS, REPO, UP_TIMEOUT_S, chat, containers, endpoints, fleet, ok, status, up_json,
)

pytestmark = pytest.mark.real_engine
SANDBOX_HOSTS = 10
SANDBOX_REAL_ENGINE = True

PLAYBOOK = PLAYBOOKS / "real-pp2.yaml"
DEPLOYMENT = "sb-real-pp2"
RANKS = (("h9", "fleet-sb-real-pp2-rank0-r0"), ("h10", "fleet-sb-real-pp2-rank0-r1"))
HOSTS = ("h9", "h10")


def container_env(sb: Sandbox, host: str, name: str) -> dict[str, str]:
    res = sb.ssh(host, f"docker inspect -f '{{{{json .Config.Env}}}}' {name}")
    assert res.rc == 0, res.err
    return dict(kv.split("=", 1) for kv in json.loads(res.out))


@pytest.fixture(scope="module")
def pp2(sandbox_fleet: Sandbox) -> Iterator[dict[str, Any]]:
    sb = sandbox_fleet
    if sb.state.mode != "netns":
        pytest.skip("two-node PP needs a netns sandbox (one data IP per host)")
    t0 = time.monotonic()
    doc = up_json(sb, PLAYBOOK)
    doc["seconds"] = time.monotonic() - t0
    yield doc
    fleet(sb, "down", str(PLAYBOOK), "-q", "--break-lock")


def test_pp2_rendezvous_over_the_data_interface(sandbox_fleet: Sandbox, pp2: dict[str, Any]) -> None:
    sb = sandbox_fleet
    print(f"real PP2 up: {pp2['seconds']:.1f}s")
    assert [(u["host"], u["unit"], u["outcome"]) for u in pp2["units"]] == [(h, u, "healthy") for h, u in RANKS], pp2
    for host, unit in RANKS:
        env = container_env(sb, host, unit)
        spec = sb.host(host)
        assert (env["GLOO_SOCKET_IFNAME"], env["VLLM_HOST_IP"]) == (spec.ifname, spec.data_ip), env
    base = endpoints(sb, PLAYBOOK)[RANKS[0][1]]
    answer = chat(base, "deepseek-v3.2", "two nodes one answer", max_tokens=6)
    assert answer["usage"]["completion_tokens"] == 6, answer
    # Rank 1 joined rank 0's process group over the data network and holds pipeline stage 1.
    logs = sb.ssh("h10", f"docker logs {RANKS[1][1]} 2>&1").out
    assert f"world_size=2 rank=1 local_rank=0 distributed_init_method=tcp://{sb.host('h9').data_ip}:" in logs, logs[-2000:]
    assert "PP rank 1" in logs, logs[-2000:]


def test_rank1_killed_group_unhealthy(sandbox_fleet: Sandbox, pp2: dict[str, Any]) -> None:
    sb = sandbox_fleet
    assert {(r["unit"], r["state"]) for r in status(sb, PLAYBOOK)} == {(u, "running") for _, u in RANKS}
    pid = sb.ssh("h10", f"docker inspect -f '{{{{.State.Pid}}}}' {RANKS[1][1]}").out.strip()
    assert pid.isdigit() and pid != "0", pid
    assert sb.ssh("h10", f"kill -9 {pid}").rc == 0
    deadline = time.monotonic() + 180
    while True:
        rows = {r["unit"]: r for r in status(sb, PLAYBOOK)}
        unhealthy = [u for u, r in rows.items() if r["state"] != "running" or r["health"] not in ("ok", "-")]
        if unhealthy:
            break
        assert time.monotonic() < deadline, f"fleet status still reports the group healthy: {rows}"
        time.sleep(2)
    print(f"status after rank 1 was killed: {[(u, r['state'], r['health']) for u, r in rows.items()]}")


def _wrong_ifname_inventory(sb: Sandbox, tmp_path: Path) -> Path:
    doc = yaml.safe_load(Path(sb.inventory).read_text())
    doc["all"]["children"]["sandbox"]["hosts"]["h10"]["nccl_ifname"] = "ens9"
    path = tmp_path / "inventory-ens9.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def test_wrong_interface_preflight_then_engine_error(sandbox_fleet: Sandbox, pp2: dict[str, Any], tmp_path: Path) -> None:
    sb = sandbox_fleet
    ok(fleet(sb, "down", str(PLAYBOOK), "-q", "--break-lock"))
    inv = _wrong_ifname_inventory(sb, tmp_path)

    def up(*extra: str) -> subprocess.CompletedProcess[str]:
        cmd = ["fleet", "up", str(PLAYBOOK), "-i", str(inv), "--known-hosts", sb.known_hosts, *extra]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=UP_TIMEOUT_S, cwd=REPO)

    refused = up()
    assert refused.returncode != 0
    assert "ens9" in refused.stderr and "h10" in refused.stderr, refused.stderr
    assert containers(sb, HOSTS, DEPLOYMENT) == [], "preflight refused before anything started"

    failed = up("--skip-preflight")
    assert failed.returncode != 0, failed.stdout
    assert "Unable to find address for: ens9" in failed.stderr, failed.stderr
    assert containers(sb, HOSTS, DEPLOYMENT) == [], "the failed group is torn down"
