"""Rolling restarts on the sandbox fleet: four single-node replicas behind the real
sglang-router 0.3.2, a load generator sending short requests and long streams through it the
whole time.  Zero failed or truncated requests; every replica ends on the new generation; a
failure in the third replica's new generation halts the rollout with that replica back on the
old generation and the fourth never touched; rollback returns every replica."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator

import pytest

from launcher.pipeline import load_target
from launcher.deploy.status import status
from launcher.execute.hostkeys import KnownHosts
from launcher.execute.ssh import SshConnector
from launcher.rolling.roll import RollOptions, roll
from launcher.rolling.router_api import RouterClient
from launcher.sandbox.client import Sandbox
from tests.rolling.conftest import (
    PLAYBOOKS,
    Recorder,
    Router,
    container_id,
    deploy,
    fleet,
    standin_events,
)
from tests.rolling.loadgen import LoadGen

pytestmark = pytest.mark.sandbox

V1 = PLAYBOOKS / "rolling-single.yaml"
V2 = PLAYBOOKS / "rolling-single-v2.yaml"
HOSTS = ("h1", "h2", "h3", "h4")
GROUPS = tuple(f"sb-roll/single{i}" for i in range(4))
UNITS = {h: f"fleet-sb-roll-single{i}-r0" for i, h in enumerate(HOSTS)}
PORT = 31000
STREAM_TOKENS = 300  # x 5 ms per token: 1.5 s streams, in flight when their replica leaves


def tag_v2(sb: Sandbox, host: str, fail: str | None = None) -> None:
    """The new generation's image on ``host``: the stand-in itself, or (``fail``) one whose
    environment makes it fail (FLEET_STANDIN_FAIL), as a bad build on one host would."""
    if fail is None:
        cmd = "docker tag fleet-standin:latest fleet-standin:v2"
    else:
        cmd = (
            "docker rm -f mk-v2 >/dev/null 2>&1; docker create --name mk-v2 fleet-standin:latest >/dev/null && "
            f"docker commit --change 'ENV FLEET_STANDIN_FAIL={fail}' mk-v2 fleet-standin:v2 >/dev/null && "
            "docker rm mk-v2 >/dev/null"
        )
    res = sb.ssh(host, cmd)
    assert res.rc == 0, res.err


@pytest.fixture(scope="module")
def replicas(sandbox_fleet: Sandbox, logs_dir: Path) -> Iterator[tuple[Sandbox, Router]]:
    sb = sandbox_fleet
    for h in HOSTS:
        tag_v2(sb, h)
    deploy(sb, V1)
    urls = [f"http://{sb.host(h).data_ip}:{PORT}" for h in HOSTS]
    r = Router(("--worker-urls", *urls), logs_dir / "router-single.log")
    try:
        r.wait_workers(4)
        yield sb, r
    finally:
        r.stop()
        # The sandbox goes at session end: remove this deployment's containers directly.
        for h in HOSTS:
            sb.ssh(h, "docker rm -f $(docker ps -aq --filter label=fleet.deployment=sb-roll) >/dev/null 2>&1; "
                      "docker rmi fleet-standin:v2 >/dev/null 2>&1; rm -rf /etc/fleet/sb-roll; true")  # fmt: skip


def _status(sb: Sandbox) -> dict[str, tuple[str, str, int | None]]:
    target = load_target(str(V1), sb.inventory, None, None)
    with SshConnector(KnownHosts.for_operator((sb.known_hosts,), trust_new=False)) as c:
        rows = status(target, c.connect)
    return {r.host: (r.state, r.health, r.generation) for r in rows}


def _registered(r: Router) -> dict[str, bool]:
    return {w["url"]: bool(w["is_healthy"]) for w in r.workers()}


def test_rolling_restart_under_load(replicas: tuple[Sandbox, Router]) -> None:
    sb, r = replicas
    load = LoadGen(r.url, workers=24, stream_every=4, stream_tokens=STREAM_TOKENS).start()
    rec = Recorder()
    try:
        target = load_target(str(V2), sb.inventory, None, ())
        with SshConnector(KnownHosts.for_operator((sb.known_hosts,), trust_new=False)) as c:
            report = roll(target, c.connect, (RouterClient(r.url),), RollOptions(max_unavailable=1, drain_timeout_s=30), rec)
    finally:
        results = load.stop(at_least=1000)
    assert report.errors == (), report.errors
    assert report.batches == tuple((g,) for g in GROUPS)
    assert [(g.group, g.outcome, g.generation_before, g.generation_after) for g in report.groups] == [
        (g, "restarted", 1, 2) for g in GROUPS
    ]
    # The load: enough requests, none failed or truncated, long streams in flight at take-out.
    assert len(results) >= 1000
    assert load.failures == [], load.failures[:5]
    in_flight = {}
    for h, group in zip(HOSTS, GROUPS):
        out = rec.first(group, "out of router")
        in_flight[h] = [
            x for x in results if x.kind == "stream" and x.host == h and x.generation == "1" and x.started < out < x.ended
        ]
    assert sum(len(v) for v in in_flight.values()) >= 1, "no stream was in flight when its replica left the router"
    assert all(x.ok and x.tokens == STREAM_TOKENS for v in in_flight.values() for x in v)
    # Every replica is on the new generation: manifests (status), the stand-ins' own logs, router.
    assert _status(sb) == {h: ("running", "ok", 2) for h in HOSTS}
    for h in HOSTS:
        events = standin_events(sb, h, UNITS[h])
        assert events and {e.get("generation") for e in events} == {"2"}
    assert _registered(r) == {f"http://{sb.host(h).data_ip}:{PORT}": True for h in HOSTS}
    # Requests after the rollout are served by generation 2 only.
    late = [x for x in results if x.started > rec.first(GROUPS[-1], "back in router") + 1]
    assert {x.generation for x in late} <= {"2"}


def _json(proc: Any) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(proc.stdout)
    return doc


def test_rollback_then_failed_batch_halts_and_restores(replicas: tuple[Sandbox, Router]) -> None:
    sb, r = replicas
    load = LoadGen(r.url, workers=12, stream_every=3, stream_tokens=STREAM_TOKENS).start()
    try:
        # Rollback: every replica back on generation 1, rolling, through the CLI.
        back = fleet(sb, "rollback", str(V2), "--router", r.url, "--max-unavailable", "2", "--json")
        assert back.returncode == 0, back.stderr
        doc = _json(back)
        assert [(g["group"], g["batch"], g["outcome"], g["generation_after"]) for g in doc["groups"]] == [
            (g, 1 + i // 2, "rolled-back", 1) for i, g in enumerate(GROUPS)
        ]
        assert _status(sb) == {h: ("running", "ok", 1) for h in HOSTS}

        # The third replica's new generation fails at start.
        tag_v2(sb, "h3", fail="crash-at-start")
        fourth = container_id(sb, "h4", UNITS["h4"])
        proc = fleet(sb, "restart", str(V2), "--rolling", "--max-unavailable", "1", "--router", r.url, "--json")
        assert proc.returncode == 1, proc.stderr
        doc = _json(proc)
    finally:
        results = load.stop(at_least=300)
        tag_v2(sb, "h3")
    assert [(g["group"], g["batch"], g["outcome"], g["generation_after"]) for g in doc["groups"]] == [
        (GROUPS[0], 1, "restarted", 2),
        (GROUPS[1], 2, "restarted", 2),
        (GROUPS[2], 3, "restored", 1),
        (GROUPS[3], 4, "not-reached", 1),
    ]
    assert doc["errors"][-1] == "rollout halted at batch 3/4: later batches not touched"
    assert doc["errors"][0].startswith(f"batch 3: group {GROUPS[2]}: h3: sh /etc/fleet/sb-roll/{UNITS['h3']}/run.sh: ")
    assert "injected failure: crash-at-start" in proc.stderr or "crash-at-start" in doc["errors"][0]
    # h3 is back on the old generation and healthy, h4 was never touched, all four serve.
    assert _status(sb) == {"h1": ("running", "ok", 2), "h2": ("running", "ok", 2),
                           "h3": ("running", "ok", 1), "h4": ("running", "ok", 1)}  # fmt: skip
    assert {e.get("generation") for e in standin_events(sb, "h3", UNITS["h3"])} == {"1"}
    assert container_id(sb, "h4", UNITS["h4"]) == fourth
    assert _registered(r) == {f"http://{sb.host(h).data_ip}:{PORT}": True for h in HOSTS}
    assert len(results) >= 300
    assert load.failures == [], load.failures[:5]


def test_fleet_up_with_rolling_rollout_restarts_only_what_changed(replicas: tuple[Sandbox, Router]) -> None:
    """After the halted rollout (h1, h2 on generation 2; h3, h4 on 1): `fleet up` of the v2
    playbook, whose rollout is rolling, restarts h3 and h4 only, one at a time, under load."""
    from launcher.rolling.roll import up_rolling

    sb, r = replicas
    load = LoadGen(r.url, workers=12, stream_every=3, stream_tokens=STREAM_TOKENS).start()
    try:
        target = load_target(str(V2), sb.inventory, None, ())
        with SshConnector(KnownHosts.for_operator((sb.known_hosts,), trust_new=False)) as c:
            report = up_rolling(target, c.connect, (RouterClient(r.url),), RollOptions(max_unavailable=1, drain_timeout_s=30))
    finally:
        results = load.stop(at_least=100)
    assert report.errors == (), report.errors
    assert [(g.group, g.batch, g.outcome, g.generation_after) for g in report.groups] == [
        (GROUPS[0], 1, "unchanged", 2), (GROUPS[1], 2, "unchanged", 2),
        (GROUPS[2], 3, "restarted", 2), (GROUPS[3], 4, "restarted", 2),
    ]  # fmt: skip
    assert _status(sb) == {h: ("running", "ok", 2) for h in HOSTS}
    assert load.failures == [], load.failures[:5]
    assert len(results) >= 100
