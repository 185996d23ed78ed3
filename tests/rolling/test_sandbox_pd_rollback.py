"""PD rollback and a failed new cohort on the sandbox fleet, through ``fleet`` itself: the 2P1D
deployment of test_sandbox_pd (two-node instances, its real sglang-router 0.3.2 as a fleet unit)
behind a front router on this machine's loopback, a load generator running through the front.

1. After a cohort switch to generation 2 on the surge hosts, ``fleet rollback --surge OLD``
   brings generation 1 back from ``prev/`` on the old hosts and switches traffic to it: zero
   failed requests, every answer's prefill ran in its decode's cohort, the front router ends on
   the old cohort's router only, the rolled-back cohort runs generation 1 only.
2. A new generation whose image fails on one surge host: the switch halts before touching
   traffic, exit 1 with one-line errors naming that host, zero failed requests, the serving
   cohort's containers untouched, nothing of the deployment left running on the surge hosts.
3. A rollback whose kept generation fails on one host halts the same way."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml

from launcher.execute.hostkeys import KnownHosts
from launcher.execute.ssh import SshConnector
from launcher.pipeline import load_inputs, load_target
from launcher.rolling import cohort
from launcher.rolling.roll import RollOptions
from launcher.rolling.router_api import RouterClient
from launcher.sandbox import router as sandbox_router
from launcher.sandbox.client import Sandbox
from tests.rolling.conftest import Recorder, Router, container_id, deploy, fleet, standin_events
from tests.rolling.loadgen import LoadGen
from tests.rolling.test_sandbox_pd import OLD, SURGE, V1, V2, _pd_inventory
from tests.rolling.test_sandbox_rolling import tag_v2

pytestmark = pytest.mark.sandbox

DEPLOYMENT = "sb-roll-pd"
ROUTER_UNIT = "fleet-sb-roll-pd-router-r0"
MODEL = "glm-5.3-flash"


def _moved(src: Path, dst: Path, hosts: tuple[str, ...], image: str | None = None, generation: str | None = None) -> str:
    """``src`` with its placement on ``hosts`` (instances on the first two, the router on the
    third) -- the playbook an operator has after a cohort switch -- and optionally another image
    and generation label."""
    doc = yaml.safe_load(src.read_text())
    pair = f"{hosts[0]}:{hosts[1]}"
    doc["placement"] = {
        "prefill": {"hosts": pair, "replicas": 2},
        "decode": {"hosts": pair, "replicas": 1},
        "router": {"hosts": hosts[2]},
    }
    if image is not None:
        doc["overrides"]["image"] = image
    if generation is not None:
        doc["overrides"]["env"]["FLEET_GENERATION"] = generation
    dst.write_text(yaml.safe_dump(doc, sort_keys=False))
    return str(dst)


def _clean(sb: Sandbox) -> None:
    for h in OLD + SURGE:
        sb.ssh(h, f"docker rm -f $(docker ps -aq --filter label=fleet.deployment={DEPLOYMENT}) >/dev/null 2>&1; "
                  f"docker rmi fleet-standin:v2 >/dev/null 2>&1; rm -rf /etc/fleet/{DEPLOYMENT}; true")  # fmt: skip


def fresh_pd(sb: Sandbox, tmp: Path) -> str:
    """The PD inventory (written under ``tmp``), with no trace of an earlier run on the PD hosts;
    skips when the router venv the PD playbooks mount has no sglang_router."""
    inventory = _pd_inventory(sb, tmp / "inventory.yaml")
    python = sandbox_router.ensure_venv()
    if not (python.parent.parent / "lib" / "python3.11" / "site-packages" / "sglang_router").is_dir():
        pytest.skip("the PD test playbook mounts the router venv's python3.11 site-packages, which has no sglang_router")
    _clean(sb)
    return inventory


def _containers(sb: Sandbox, host: str) -> list[str]:
    """The deployment's containers on ``host``, running or not."""
    res = sb.ssh(host, f"docker ps -a --format '{{{{.Names}}}}' --filter label=fleet.deployment={DEPLOYMENT}")
    assert res.rc == 0, res.err
    return sorted(res.out.split())


@pytest.fixture(scope="module")
def switched(sandbox_fleet: Sandbox, tmp_path_factory: pytest.TempPathFactory, logs_dir: Path) -> Iterator[tuple[Sandbox, str, Path, Router]]:
    """Generation 1 deployed on OLD, then switched (no load) to generation 2 on SURGE: the
    state a rollback starts from (generation 1 kept in prev/ on OLD)."""
    sb = sandbox_fleet
    tmp = tmp_path_factory.mktemp("pd-rollback")
    inventory = fresh_pd(sb, tmp)
    front: Router | None = None
    try:
        # Generation 2 runs the image tagged v2 (a good build for now) on the surge hosts.
        for h in SURGE:
            tag_v2(sb, h)
        v2 = _moved(V2, tmp / "pd-v2.yaml", OLD, image="fleet-standin:v2")
        deploy(sb, V1, inventory)
        front = Router(("--worker-urls", f"http://{sb.host('h8').data_ip}:38100"), logs_dir / "router-front-rollback.log")
        front.wait_workers(1)
        with SshConnector(KnownHosts.for_operator((sb.known_hosts,), trust_new=False)) as c:
            report = cohort.switch(
                load_inputs(v2, inventory), load_target(v2, inventory, None, ()), SURGE,
                c.connect, (RouterClient(front.url),), RollOptions(drain_timeout_s=30), Recorder(),
                action="restart", secret_flags=(),
            )  # fmt: skip
        assert report.errors == (), report.errors
        assert [w["url"] for w in front.workers()] == [f"http://{sb.host('h3').data_ip}:38100"]
        yield sb, inventory, tmp, front
    finally:
        if front is not None:
            front.stop()
        _clean(sb)


def _json(proc: Any) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(proc.stdout)
    return doc


def _assert_halted_and_serving(sb: Sandbox, doc: dict[str, Any], results: list[Any], load: LoadGen,
                               before: dict[tuple[str, str], str], front: Router, *, at_least: int) -> None:
    """A halted switch: rows show the serving cohort unchanged and the new one failed (each group
    once per cohort); the serving cohort never stopped (no failed request, all on generation 1,
    same containers, still the front router's only worker); nothing left on the surge hosts."""
    assert {(g["group"].split("/")[1], g["outcome"], g["detail"]) for g in doc["groups"]} == {
        (g, outcome, who) for outcome, who in (("unchanged", "old cohort"), ("failed", "new cohort"))
        for g in ("prefill0", "prefill1", "decode0", "router")
    }  # fmt: skip
    assert len(results) >= at_least
    assert load.failures == [], load.failures[:5]
    assert {r.generation for r in results} == {"1"}
    assert {(h, u): container_id(sb, h, u) for h in OLD for u in _containers(sb, h)} == before
    assert [w["url"] for w in front.workers()] == [f"http://{sb.host('h8').data_ip}:38100"]
    for h in SURGE:
        assert _containers(sb, h) == [], h


def test_pd_rollback_switches_back_under_load_never_mixing(switched: tuple[Sandbox, str, Path, Router]) -> None:
    sb, inventory, tmp, front = switched
    serving = _moved(V2, tmp / "pd-v2-on-surge.yaml", SURGE, image="fleet-standin:v2")
    load = LoadGen(front.url, workers=10, stream_every=3, stream_tokens=300, model=MODEL).start()
    try:
        proc = fleet(sb, "rollback", serving, "--surge", ":".join(OLD), "--router", front.url, "--json",
                     inventory=inventory)  # fmt: skip
    finally:
        results = load.stop(at_least=200)
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr}"
    assert "Traceback" not in proc.stderr, proc.stderr
    doc = _json(proc)
    assert doc["errors"] == []
    assert doc["notes"][-1].startswith("deployment sb-roll-pd now serves from h6, h7, h8: "), doc["notes"]
    assert {(g["group"], g["outcome"], tuple(g["hosts"])) for g in doc["groups"]} == {
        (f"{DEPLOYMENT}/{g}", outcome, pair if g != "router" else (router,))
        for outcome, pair, router in (("retired", ("h1", "h2"), "h3"), ("rolled-back", ("h6", "h7"), "h8"))
        for g in ("prefill0", "prefill1", "decode0", "router")
    }  # fmt: skip

    # The load: nothing failed; both generations served; each answer's prefill ran in its
    # decode's cohort (the cohorts' hosts are disjoint, so no pair mixed generations).
    assert len(results) >= 200
    assert load.failures == [], load.failures[:5]
    cohort_hosts = {"2": {"h1", "h2"}, "1": {"h6", "h7"}}
    assert {r.generation for r in results} == {"1", "2"}
    for r in results:
        assert r.origin.get("prefill_host") in cohort_hosts[r.generation], r
        assert r.origin.get("decode_host") in cohort_hosts[r.generation], r

    # Traffic is on the old cohort's router only; it runs generation 1 alone, and its decodes'
    # prefills (same bootstrap room, in its own logs) are generation 1 too; the surge hosts run
    # nothing of the deployment.
    assert [w["url"] for w in front.workers()] == [f"http://{sb.host('h8').data_ip}:38100"]
    prefill_gen: dict[str, str] = {}
    decodes: list[dict[str, Any]] = []
    for h in OLD[:2]:
        for unit in _containers(sb, h):
            for e in standin_events(sb, h, unit):
                assert e.get("generation") == "1", (h, unit, e)
                if e.get("event") == "request_start" and "bootstrap_room" in e:
                    if e["role"] == "prefill":
                        prefill_gen[str(e["bootstrap_room"])] = e["generation"]
                    elif e["role"] == "decode":
                        decodes.append(e)
    assert decodes, "the rolled-back cohort served nothing"
    assert [e for e in decodes if prefill_gen.get(str(e["bootstrap_room"])) != "1"] == []
    assert len(_containers(sb, "h6")) == len(_containers(sb, "h7")) == 3 and _containers(sb, "h8") == [ROUTER_UNIT]
    for h in SURGE:
        assert _containers(sb, h) == [], h
        res = sb.ssh(h, f"ls /etc/fleet/{DEPLOYMENT}/*/manifest.json 2>/dev/null; true")
        assert res.out.strip() == "", (h, res.out)


def test_pd_failed_new_cohort_halts_and_old_cohort_keeps_serving(switched: tuple[Sandbox, str, Path, Router]) -> None:
    """After the rollback (generation 1 serving on OLD): generation 3, whose image crashes at
    start on h2 (one host of the surge cohort), rolled onto SURGE."""
    sb, inventory, tmp, front = switched
    new = _moved(V2, tmp / "pd-v3.yaml", OLD, image="fleet-standin:v2", generation="3")
    for h in SURGE:
        tag_v2(sb, h, fail="crash-at-start" if h == "h2" else None)
    before = {(h, u): container_id(sb, h, u) for h in OLD for u in _containers(sb, h)}
    assert len(before) == 7
    load = LoadGen(front.url, workers=10, stream_every=3, stream_tokens=300, model=MODEL).start()
    try:
        proc = fleet(sb, "restart", new, "--surge", ":".join(SURGE), "--router", front.url, "--json",
                     inventory=inventory)  # fmt: skip
    finally:
        results = load.stop(at_least=100)
    assert proc.returncode == 1, f"{proc.stdout}\n{proc.stderr}"
    assert "Traceback" not in proc.stderr, proc.stderr
    doc = _json(proc)
    assert doc["exit_code"] == 1
    errors: list[str] = doc["errors"]
    assert len(errors) >= 2 and all("\n" not in e for e in errors), errors
    # One line per failed group, each naming the host and the unit's last log line.
    assert all(e.startswith("new cohort on h1, h2, h3: h2: sh /etc/fleet/sb-roll-pd/fleet-sb-roll-pd-") for e in errors[:-1]), errors
    assert all("injected failure: crash-at-start" in e for e in errors[:-1]), errors
    assert errors[-1] == "rollout halted: the new cohort was removed; the serving cohort was never touched"
    _assert_halted_and_serving(sb, doc, results, load, before, front, at_least=100)
    for h in SURGE:
        res = sb.ssh(h, f"ls /etc/fleet/{DEPLOYMENT}/*/manifest.json 2>/dev/null; true")
        assert res.out.strip() == "", (h, res.out)


def test_pd_failed_rollback_halts_and_serving_cohort_keeps_serving(switched: tuple[Sandbox, str, Path, Router]) -> None:
    """After the failed switch: ``fleet rollback --surge SURGE``.  The surge hosts still keep
    generation 2 in prev/ (the failed generation 3 never served, so its teardown left prev/
    alone), but the bad build re-tagged generation 2's image on h2: bringing it back fails on h2,
    the rollback halts before touching traffic, the revived units are removed, generation 1
    keeps serving."""
    sb, inventory, tmp, front = switched
    serving = _moved(V1, tmp / "pd-v1-on-old.yaml", OLD)
    before = {(h, u): container_id(sb, h, u) for h in OLD for u in _containers(sb, h)}
    load = LoadGen(front.url, workers=10, stream_every=3, stream_tokens=300, model=MODEL).start()
    try:
        proc = fleet(sb, "rollback", serving, "--surge", ":".join(SURGE), "--router", front.url, "--json",
                     inventory=inventory)  # fmt: skip
    finally:
        results = load.stop(at_least=50)
    assert proc.returncode == 1, f"{proc.stdout}\n{proc.stderr}"
    assert "Traceback" not in proc.stderr, proc.stderr
    doc = _json(proc)
    errors: list[str] = doc["errors"]
    assert len(errors) == 2 and all("\n" not in e for e in errors), errors
    assert errors[0].startswith("previous cohort on h1, h2, h3: h2: sh /etc/fleet/sb-roll-pd/fleet-sb-roll-pd-"), errors
    assert "injected failure: crash-at-start" in errors[0], errors
    assert errors[1] == "rollback halted: the serving cohort was never touched"
    _assert_halted_and_serving(sb, doc, results, load, before, front, at_least=50)
