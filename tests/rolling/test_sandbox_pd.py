"""PD rolling on the sandbox fleet: a 2P1D deployment (two-node instances) with its real
sglang-router 0.3.2 (as a fleet unit), behind a front router in regular mode on this machine's
loopback, rolled to a new generation by a cohort switch onto surge hosts while a load generator
runs.  Zero failed requests, and never a mixed-generation pair: every request's prefill and
decode carry the same FLEET_GENERATION in the stand-ins' JSON logs."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml

from launcher.pipeline import Inputs, load_target
from launcher.config.inventory import load_inventory
from launcher.config.playbook import load_playbook
from launcher.config.recipes import load_catalog
from launcher.deploy.session import Target
from launcher.deploy.status import status
from launcher.execute.hostkeys import KnownHosts
from launcher.execute.ssh import SshConnector
from launcher.output import Event
from launcher.rolling import cohort
from launcher.rolling.roll import RollOptions
from launcher.rolling.router_api import RouterClient
from launcher.sandbox import router as sandbox_router
from launcher.sandbox.client import Sandbox
from tests.rolling.conftest import Recorder, Router, deploy, standin_events
from tests.rolling.loadgen import LoadGen

pytestmark = pytest.mark.sandbox

HERE = Path(__file__).resolve().parent / "playbooks"
V1 = HERE / "pd.yaml"
V2 = HERE / "pd-v2.yaml"
OLD, SURGE = ("h6", "h7", "h8"), ("h1", "h2", "h3")
ENGINE_UNITS = tuple(f"fleet-sb-roll-pd-{g}-r{r}" for g in ("prefill0", "prefill1", "decode0") for r in (0, 1))


def _pd_inventory(sb: Sandbox, path: Path) -> str:
    """The sandbox inventory with the PD hosts declared as 24-GPU RTX-6000D nodes (the recipe's
    SKU; the stand-in does not care), so a 2P1D cohort of two-node instances fits on two hosts."""
    doc = yaml.safe_load(Path(sb.inventory).read_text())
    for name, hv in doc["all"]["children"]["sandbox"]["hosts"].items():
        if name in OLD + SURGE:
            hv.update(gpu_model="RTX-6000D", gpu_count=24, gpu_memory_gib=96)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return str(path)


class _Snapshots(Recorder):
    """Also keeps the old cohort's stand-in logs, taken when its first unit starts retiring
    (traffic is off it by then, so no request it served is missed; docker removes the logs)."""

    def __init__(self, sb: Sandbox) -> None:
        super().__init__()
        self.sb = sb
        self.old_logs: dict[tuple[str, str], list[dict[str, Any]]] = {}
        self._taken = threading.Event()

    def update(self, event: Event) -> None:
        super().update(event)
        if event.state == "retiring" and event.host in OLD and not self._taken.is_set():
            self._taken.set()
            for h in OLD[:2]:
                for unit in ENGINE_UNITS:
                    res = self.sb.ssh(h, f"docker logs {unit} 2>/dev/null")
                    if res.rc == 0 and res.out.strip():
                        self.old_logs[(h, unit)] = [
                            __import__("json").loads(x) for x in res.out.splitlines() if x.startswith("{")
                        ]


@pytest.fixture(scope="module")
def pd(sandbox_fleet: Sandbox, tmp_path_factory: pytest.TempPathFactory, logs_dir: Path) -> Iterator[tuple[Sandbox, str, Router]]:
    sb = sandbox_fleet
    inventory = _pd_inventory(sb, tmp_path_factory.mktemp("pd") / "inventory.yaml")
    # The playbook mounts the router venv's site-packages (built for python3.11, the image's
    # python) into the router unit.
    python = sandbox_router.ensure_venv()
    site = python.parent.parent / "lib" / "python3.11" / "site-packages"
    if not (site / "sglang_router").is_dir():
        pytest.skip(f"the PD test playbook mounts {site}, which has no sglang_router (router venv not python3.11)")
    # The two cohorts use the same unit names on different hosts: each sandbox host has its own
    # /etc/fleet, as real hosts do.
    for h in OLD + SURGE:
        res = sb.ssh(h, "mountpoint -q /etc/fleet")
        assert res.rc == 0, f"{h}: /etc/fleet is not the host's own (sandbox hostinit binds one per host)"
    front: Router | None = None
    try:
        deploy(sb, V1, inventory)
        front = Router(("--worker-urls", f"http://{sb.host('h8').data_ip}:38100"), logs_dir / "router-front.log")
        front.wait_workers(1)
        yield sb, inventory, front
    finally:
        if front is not None:
            front.stop()
        # The sandbox goes at session end: remove this deployment's containers directly.
        for h in OLD + SURGE:
            sb.ssh(h, "docker rm -f $(docker ps -aq --filter label=fleet.deployment=sb-roll-pd) >/dev/null 2>&1; true")


def _target(inventory_path: str, playbook_path: Path, hosts: tuple[str, ...]) -> Target:
    inventory = load_inventory(inventory_path)
    playbook = load_playbook(playbook_path, load_catalog(), inventory)
    if hosts != OLD:
        playbook, _ = cohort.surge_playbook(playbook, inventory, hosts)
    return cohort.cohort_target(Inputs(inventory=inventory, catalog=load_catalog(), playbook=playbook), ())


def test_pd_cohort_switch_under_load_never_mixes_generations(pd: tuple[Sandbox, str, Router]) -> None:
    sb, inventory_path, front = pd
    inventory = load_inventory(inventory_path)
    playbook = load_playbook(V2, load_catalog(), inventory)
    target = load_target(str(V2), inventory_path, None, ())
    rec = _Snapshots(sb)
    load = LoadGen(front.url, workers=10, stream_every=3, stream_tokens=300, model="glm-5.3-flash").start()
    try:
        with SshConnector(KnownHosts.for_operator((sb.known_hosts,), trust_new=False)) as c:
            report = cohort.switch(
                Inputs(inventory=inventory, catalog=load_catalog(), playbook=playbook), target, SURGE, c.connect, (RouterClient(front.url),),
                RollOptions(drain_timeout_s=30), rec, action="restart", secret_flags=(),
            )  # fmt: skip
    finally:
        results = load.stop(at_least=300)
    assert report.errors == (), report.errors
    assert {(g.group, g.outcome, g.hosts) for g in report.groups} == {
        ("sb-roll-pd/prefill0", "retired", ("h6", "h7")), ("sb-roll-pd/prefill1", "retired", ("h6", "h7")),
        ("sb-roll-pd/decode0", "retired", ("h6", "h7")), ("sb-roll-pd/router", "retired", ("h8",)),
        ("sb-roll-pd/prefill0", "restarted", ("h1", "h2")), ("sb-roll-pd/prefill1", "restarted", ("h1", "h2")),
        ("sb-roll-pd/decode0", "restarted", ("h1", "h2")), ("sb-roll-pd/router", "restarted", ("h3",)),
    }  # fmt: skip

    # The load: nothing failed; both generations served; each answer's prefill ran in its cohort.
    assert len(results) >= 300
    assert load.failures == [], load.failures[:5]
    cohort_hosts = {"1": {"h6", "h7"}, "2": {"h1", "h2"}}
    assert {r.generation for r in results} == {"1", "2"}
    for r in results:
        assert r.origin.get("prefill_host") in cohort_hosts[r.generation], r
        assert r.origin.get("decode_host") in cohort_hosts[r.generation], r

    # The stand-ins' own logs: every decoded request's prefill (same bootstrap room) carries the
    # decode's generation.  Old cohort: snapshot taken as it retired; new cohort: live.
    logs = dict(rec.old_logs)
    for h in SURGE[:2]:
        for unit in ENGINE_UNITS:
            if sb.ssh(h, f"docker inspect {unit} >/dev/null 2>&1").rc == 0:
                logs[(h, unit)] = standin_events(sb, h, unit)
    assert rec.old_logs, "no snapshot of the old cohort's logs"
    prefill_gen: dict[str, str] = {}
    decodes: list[dict[str, Any]] = []
    for (h, unit), events in logs.items():
        for e in events:
            if e.get("event") != "request_start" or "bootstrap_room" not in e:
                continue
            if e["role"] == "prefill":
                prefill_gen[str(e["bootstrap_room"])] = e["generation"]
            elif e["role"] == "decode":
                decodes.append(e)
    assert len(decodes) >= 300
    mixed = [e for e in decodes if prefill_gen.get(str(e["bootstrap_room"])) != e["generation"]]
    assert mixed == [], mixed[:5]
    assert {e["generation"] for e in decodes} == {"1", "2"}

    # Traffic is on the new cohort only; the old hosts run nothing of the deployment.
    assert [w["url"] for w in front.workers()] == [f"http://{sb.host('h3').data_ip}:38100"]
    new_target = _target(inventory_path, V2, SURGE)
    with SshConnector(KnownHosts.for_operator((sb.known_hosts,), trust_new=False)) as c:
        rows = status(new_target, c.connect)
    assert {(r.host, r.unit, r.state) for r in rows if r.health != "-"} >= {("h3", "fleet-sb-roll-pd-router-r0", "running")}
    assert all(r.state == "running" for r in rows) and all(r.health in ("ok", "-") for r in rows), rows
    for h in OLD:
        res = sb.ssh(h, "docker ps -q --filter label=fleet.deployment=sb-roll-pd")
        assert res.rc == 0 and res.out.strip() == "", (h, res.out)
