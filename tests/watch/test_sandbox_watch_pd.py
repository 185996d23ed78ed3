"""``fleet watch`` on a prefill/decode deployment, through the real CLI: GLM 2P1D (two prefill and
one decode instance of two nodes each, stand-ins on h6:h7) behind its own real sglang-router 0.3.2
in PD mode (a fleet unit on h8, from the stand-in image), in this order:

1. a prefill and the decode deregistered from the router (``DELETE /workers/{id}``, as a stray
   operator's call or an interrupted tool leaves them): ``fleet watch --once`` registers both
   again, each as the router's command line has it -- the prefill with ``worker_type: prefill``
   and its bootstrap port, the decode as ``decode`` -- and a PD request through the router is
   answered, prefilled and decoded by the workers the router lists;
2. rank 1 of a prefill killed: the watch takes that prefill out of the router, recreates the
   group and puts it back as a prefill with its bootstrap port.

Run (root, ~2 min): ``python -m pytest -q tests/watch/test_sandbox_watch_pd.py``
"""

from __future__ import annotations

import json
import os
import urllib.request
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml

from launcher.rolling.router_api import RouterClient
from launcher.sandbox.client import Sandbox
from tests.rolling.conftest import fleet, ok

pytestmark = pytest.mark.sandbox

DEP = "sb-watch-pd"
HOSTS = ("h6", "h7", "h8")
HTTP, BOOTSTRAP, ROUTER = 31750, 9150, 38150
PLAYBOOK = f"""\
name: {DEP}
recipe: glm/sglang-pd-tp8pp2ep8-6000d
placement:
  prefill:
    hosts: h6:h7
    replicas: 2
  decode:
    hosts: h6:h7
    replicas: 1
  router:
    hosts: h8
overrides:
  image: fleet-standin:latest
  drop_docker_flags: [--gpus, --device, --ulimit]
  shm_size: 256m
  start_timeout_s: 90
  env:
    FLEET_STANDIN_TOKEN_MS: "5"
ports:
  http: {HTTP}
  dist_init: 21150
  bootstrap: {BOOTSTRAP}
  router: {ROUTER}
  router_metrics: 38199
"""


@pytest.fixture(scope="module")
def deployed(sandbox_fleet: Sandbox, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Sandbox, Path, str]]:
    sb = sandbox_fleet
    tmp = tmp_path_factory.mktemp("watch-pd")
    before = os.environ.get("FLEET_STATE_DIR")
    os.environ["FLEET_STATE_DIR"] = str(tmp / "state")  # this module's own run history
    # h6 and h7 declared 24-GPU RTX-6000D nodes (the recipe's SKU; the stand-in does not care):
    # the three two-node instances fit on them.
    doc = yaml.safe_load(Path(sb.inventory).read_text())
    for name, hv in doc["all"]["children"]["sandbox"]["hosts"].items():
        if name in HOSTS[:2]:
            hv.update(gpu_model="RTX-6000D", gpu_count=24, gpu_memory_gib=96)
    inventory = tmp / "inventory.yaml"
    inventory.write_text(yaml.safe_dump(doc, sort_keys=False))
    pb = tmp / "watch-pd.yaml"
    pb.write_text(PLAYBOOK)
    try:
        ok(fleet(sb, "up", str(pb), "--skip-preflight", "--quiet", inventory=str(inventory)))
        yield sb, pb, str(inventory)
    finally:
        fleet(sb, "down", str(pb), "--quiet", "--break-lock", inventory=str(inventory))
        if before is None:
            del os.environ["FLEET_STATE_DIR"]
        else:
            os.environ["FLEET_STATE_DIR"] = before


def router(sb: Sandbox) -> RouterClient:
    return RouterClient(f"http://{sb.host('h8').address}:{ROUTER}")


def registered(sb: Sandbox) -> dict[str, tuple[str, int | None, bool]]:
    """url -> (worker_type, bootstrap_port, healthy), as the router lists its workers."""
    with urllib.request.urlopen(router(sb).base + "/workers", timeout=10) as r:
        doc = json.loads(r.read())
    return {w["url"]: (w["worker_type"], w.get("bootstrap_port"), w["is_healthy"]) for w in doc["workers"]}


def watch_once(sb: Sandbox, pb: Path, inventory: str) -> list[dict[str, Any]]:
    proc = ok(fleet(sb, "watch", str(pb), "--once", "--json", "-q", inventory=inventory))
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


def completion(sb: Sandbox) -> dict[str, Any]:
    body = json.dumps({"model": "glm-5.3-flash", "prompt": "watch the pairs", "max_tokens": 4}).encode()
    req = urllib.request.Request(router(sb).base + "/v1/completions", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        doc: dict[str, Any] = json.loads(r.read())
    return doc


def test_workers_missing_from_the_pd_router_are_registered_as_it_was_started_with_them(
    deployed: tuple[Sandbox, Path, str],
) -> None:
    sb, pb, inventory = deployed
    before = registered(sb)
    assert sorted(t for t, _, _ in before.values()) == ["decode", "prefill", "prefill"], before
    assert all(isinstance(p, int) for t, p, _ in before.values() if t == "prefill"), before
    prefill = next(u for u, (t, _, _) in before.items() if t == "prefill")
    decode = next(u for u, (t, _, _) in before.items() if t == "decode")
    r = router(sb)
    for url in (prefill, decode):
        assert r.remove(url)
        r.wait(url, present=False, timeout_s=120)  # a bound on a failure
    assert set(registered(sb)) == set(before) - {prefill, decode}

    events = watch_once(sb, pb, inventory)
    done = sorted((e["kind"], e["message"]) for e in events if e["kind"] != "note")
    assert [k for k, _ in done] == ["registered", "registered"], events
    assert all(m.endswith(f"registered again in {r.base}") for _, m in done), done
    assert registered(sb) == {u: (t, p, True) for u, (t, p, _) in before.items()}
    answer = completion(sb)
    assert answer["usage"]["completion_tokens"] == 4, answer

    assert [e["kind"] for e in watch_once(sb, pb, inventory) if e["kind"] != "note"] == [], "nothing left to do"


def test_a_broken_prefill_is_taken_out_recreated_and_back_as_a_prefill(deployed: tuple[Sandbox, Path, str]) -> None:
    sb, pb, inventory = deployed
    before = registered(sb)
    assert sb.ssh("h7", f"docker kill fleet-{DEP}-prefill0-r1").rc == 0
    events = watch_once(sb, pb, inventory)
    told = [(e["kind"], e["group"]) for e in events if e["kind"] != "note"]
    group = f"{DEP}/prefill0"
    assert told == [("recreating", group), ("out-of-router", group), ("recovered", group)], events
    assert registered(sb) == {u: (t, p, True) for u, (t, p, _) in before.items()}
    assert completion(sb)["usage"]["completion_tokens"] == 4
