"""The watch's Prometheus endpoint (launcher/watch/metrics.py) without hosts: every metric as its
events and surveys set it; and its entry in the scrape targets file, which the watch writes
beside the deployment's targets and which ``up``/``down``/``metrics targets`` (all three rewrite
the file through :func:`launcher.deploy.publish.publish`) keep."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest

from launcher.cli.watch import _publish
from launcher.deploy import publish as pub
from launcher.deploy.status import UnitStatus
from launcher.pipeline import load_inputs, load_target
from launcher.sandbox.inventory import preview
from launcher.watch.events import WatchEvent
from launcher.watch.metrics import STATES, Metrics
from tests.plan.test_catalog import ROOT

DEP = "dep"


def sample(m: Metrics, name: str, **labels: str) -> float | None:
    return m.registry.get_sample_value(name, {"deployment": DEP, **labels})


def test_a_survey_sets_every_state_and_the_last_survey_time() -> None:
    m = Metrics()
    assert sample(m, "fleet_watch_last_survey_timestamp_seconds") is None, "no survey yet: no sample"
    m.surveyed(DEP, {"healthy": 2, "recreate": 1}, 1_700_000_000.5)
    assert sample(m, "fleet_watch_last_survey_timestamp_seconds") == 1_700_000_000.5
    assert {s: sample(m, "fleet_watch_groups", state=s) for s in STATES} == {
        s: {"healthy": 2.0, "recreate": 1.0}.get(s, 0.0) for s in STATES}  # fmt: skip
    m.surveyed(DEP, {"healthy": 3}, 1_700_000_010.0)
    assert sample(m, "fleet_watch_last_survey_timestamp_seconds") == 1_700_000_010.0
    assert sample(m, "fleet_watch_groups", state="recreate") == 0.0, "a state gone from the survey is 0, not stale"


def test_paused_is_1_from_paused_to_resumed_and_other_events_leave_it() -> None:
    m = Metrics()
    assert sample(m, "fleet_watch_paused") is None
    m(WatchEvent(kind="paused", deployment=DEP, message="the deploy lock is held by op"))
    assert sample(m, "fleet_watch_paused") == 1.0
    m(WatchEvent(kind="recreating", deployment=DEP, group=f"{DEP}/g0"))
    assert sample(m, "fleet_watch_paused") == 1.0
    m(WatchEvent(kind="resumed", deployment=DEP))
    assert sample(m, "fleet_watch_paused") == 0.0
    assert m.registry.get_sample_value("fleet_watch_paused", {"deployment": "other"}) is None, "per deployment"


def test_recreations_count_by_outcome_and_only_recoveries_time_the_recovery() -> None:
    m = Metrics()
    g = f"{DEP}/g0"
    m(WatchEvent(kind="recreate-failed", deployment=DEP, group=g, data={"time_to_recover_s": 99.0}))
    m(WatchEvent(kind="recovered", deployment=DEP, group=g, data={"time_to_recover_s": 12.5}))
    assert sample(m, "fleet_watch_recreations_total", group=g, outcome="failed") == 1.0
    assert sample(m, "fleet_watch_recreations_total", group=g, outcome="recovered") == 1.0
    assert sample(m, "fleet_watch_time_to_recover_seconds_count") == 1.0
    assert sample(m, "fleet_watch_time_to_recover_seconds_sum") == 12.5


# -- the targets file

PB = ROOT / "playbooks" / "sandbox" / "rolling-router.yaml"


def kinds(path: Path) -> list[tuple[str, str]]:
    """(deployment, kind) per target group in the file."""
    groups: list[dict[str, Any]] = json.loads(path.read_text())
    return sorted((g["labels"]["deployment"], g["labels"]["kind"]) for g in groups)


def test_the_watchs_target_stays_when_up_down_and_metrics_targets_rewrite_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    inv = tmp_path / "inventory.yaml"
    inv.write_text(preview(15))
    target = load_target(PB, inv, None, None)
    path = tmp_path / "fleet.json"

    def rows(generation: int | None) -> tuple[UnitStatus, ...]:
        """Every unit running at ``generation``; None: nothing deployed (after down)."""
        return tuple(
            UnitStatus(host=d.host, unit=d.name, role=d.unit.role, rank=d.unit.rank, group=d.unit.group,
                       state="running" if generation else "missing", health="ok" if generation else "none",
                       generation=generation, drift="none")
            for d in target.units
        )  # fmt: skip

    monkeypatch.setattr(pub, "status", lambda t, c, f: rows(1))
    pub.publish(path, target, lambda h: None)  # type: ignore[arg-type, return-value]  # fleet up
    engine = kinds(path)
    assert engine and all(d == target.deployment and k != "fleet-watch" for d, k in engine)
    # The watch adds its endpoint beside them (twice: a restarted watch replaces its own entry).
    loaded = [(str(PB), load_inputs(PB, inv))]
    _publish(loaded, str(path), 9464, "0.0.0.0")
    _publish(loaded, str(path), 9465, "0.0.0.0")
    watch = [g for g in json.loads(path.read_text()) if g["labels"]["kind"] == "fleet-watch"]
    assert watch == [{"targets": [f"{socket.gethostname()}:9465"], "labels": {
        "deployment": target.deployment, "recipe": target.recipe, "role": "watch", "host": socket.gethostname(),
        "unit": "fleet-watch", "kind": "fleet-watch"}}]  # fmt: skip
    assert kinds(path) == sorted([*engine, (target.deployment, "fleet-watch")])
    # fleet up again / fleet metrics targets (the same rewrite): the watch's entry stays.
    monkeypatch.setattr(pub, "status", lambda t, c, f: rows(2))
    pub.publish(path, target, lambda h: None)  # type: ignore[arg-type, return-value]
    assert kinds(path) == sorted([*engine, (target.deployment, "fleet-watch")])
    assert [g for g in json.loads(path.read_text()) if g["labels"]["kind"] == "fleet-watch"] == watch
    # fleet down: the deployment's targets go, the watch's stays (it still runs and is scraped).
    monkeypatch.setattr(pub, "status", lambda t, c, f: rows(None))
    groups, missed = pub.publish(path, target, lambda h: None)  # type: ignore[arg-type, return-value]
    assert (groups, missed) == (watch, ())
    assert kinds(path) == [(target.deployment, "fleet-watch")]
