"""``fleet up`` of a two-node PP instance behind a router in regular mode, on the sandbox fleet
through the real CLI: playbooks/bench/pp2-router.yaml (Kimi TP8 PP2 on h6:h7, the real
sglang-router from the stand-in image on h1).  The router starts after the ranks, knows exactly
rank 0 by its data IP, answers a request served by rank 0, and ``down`` removes all three units."""

from __future__ import annotations

import json
import urllib.request
from typing import Any, Iterator

import pytest

from launcher.sandbox.client import Sandbox
from tests.deploy.test_sandbox_e2e import REPO, containers, fleet, need_netns, ok, post, up_json

pytestmark = pytest.mark.sandbox
SANDBOX_HOSTS = 8

PLAYBOOK = REPO / "playbooks" / "bench" / "pp2-router.yaml"
DEPLOYMENT = "bench-pp2-router"
UNITS = (
    ("h6", f"fleet-{DEPLOYMENT}-rank0-r0"),
    ("h7", f"fleet-{DEPLOYMENT}-rank0-r1"),
    ("h1", f"fleet-{DEPLOYMENT}-router-r0"),
)  # plan order: the ranks, then the router
HOSTS = ("h1", "h6", "h7")


@pytest.fixture
def sb(sandbox_fleet: Sandbox) -> Iterator[Sandbox]:
    """The sandbox; if the test fails before its own ``down``, the deployment is taken down."""
    need_netns(sandbox_fleet)
    yield sandbox_fleet
    if containers(sandbox_fleet, HOSTS, DEPLOYMENT):
        fleet(sandbox_fleet, "down", str(PLAYBOOK), "-q", "--break-lock")


def listed_workers(router: str) -> list[dict[str, Any]]:
    """The router's ``/workers``, read once.  sglang-router 0.3.2 answers ``/health`` before it has
    registered the workers its command line names (at a load of 85, session 14's ci2, the list was
    still empty when ``up`` returned while the gate read ``/health``); fleet's gate now waits on
    its ``/readiness``, so ``up`` returns with the worker listed."""
    with urllib.request.urlopen(f"{router}/workers", timeout=10) as r:
        workers: list[dict[str, Any]] = json.loads(r.read())["workers"]
    return workers


def test_pp2_behind_a_regular_router(sb: Sandbox) -> None:
    up = up_json(sb, PLAYBOOK)
    assert [(u["host"], u["unit"], u["action"], u["outcome"]) for u in up["units"]] == [
        (h, u, "start", "healthy") for h, u in UNITS
    ], up

    router = f"http://{sb.host('h1').data_ip}:8000"
    workers = listed_workers(router)
    assert [(w["url"], w["worker_type"]) for w in workers] == [(f"http://{sb.host('h6').data_ip}:30000", "regular")]
    body = {"model": "kimi", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 3}
    answer = post(f"{router}/v1/chat/completions", body)
    assert answer["choices"][0]["message"]["content"] and answer["fleet_standin"]["host"] == "h6", answer

    ok(fleet(sb, "down", str(PLAYBOOK), "-q"))
    assert containers(sb, HOSTS, DEPLOYMENT) == {}
