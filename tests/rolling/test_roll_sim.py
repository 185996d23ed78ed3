"""Rolling restarts and rollbacks on simulated hosts: a batch's groups are stopped, started and
gated together when they go back to their previous generation, not one after another (real
engines load for minutes: one load time per batch, not one per group)."""

from __future__ import annotations

from launcher.deploy.orchestrate import Options, up
from launcher.model import Plan
from launcher.rolling.roll import RollOptions, roll
from tests.deploy.conftest import SimFleet
from tests.deploy.factory import target, unit

OPTIONS = RollOptions(max_unavailable=2, force=True, timeout_s=5.0, drain_timeout_s=1.0)


def _replicas(*args: str) -> Plan:
    return Plan(deployment="demo", recipe="fam/single", units=(
        unit("h1", "fleet-demo-a", "a", args=args), unit("h2", "fleet-demo-b", "b", args=args),
    ))  # fmt: skip


def _fleet() -> SimFleet:
    sim = SimFleet()
    for h, u in (("h1", "fleet-demo-a"), ("h2", "fleet-demo-b")):
        sim[h].health_urls = {f"http://{h}:30000/health": u}
    report = up(target(_replicas()), sim.connect, Options(forks=4, timeout_s=5.0))
    assert report.errors == ()
    return sim


def _phases(events: list[tuple[str, str, str]]) -> list[tuple[str, frozenset[str]]]:
    """Runs of the same kind (stop / start / health wait) with the units in them, in order."""
    out: list[tuple[str, frozenset[str]]] = []
    for kind, _, name in events:
        if out and out[-1][0] == kind:
            out[-1] = (kind, out[-1][1] | {name})
        else:
            out.append((kind, frozenset({name})))
    return out


def test_a_failed_batch_goes_back_to_its_previous_generation_together() -> None:
    sim = _fleet()
    for h in ("h1", "h2"):
        sim[h].fail_args.add("--bad")
    sim.events.clear()
    report = roll(target(_replicas("--bad")), sim.connect, (), OPTIONS)
    assert [(g.group, g.outcome, g.generation_after) for g in report.groups] == [("a", "restored", 1), ("b", "restored", 1)]
    both = frozenset({"fleet-demo-a", "fleet-demo-b"})
    assert _phases(sim.events) == [
        ("stop", both), ("start", both), ("wait", both),  # the new generation, which dies at start
        ("stop", both),  # the deploy layer's teardown, then the revert's stop on every host
        ("start", both), ("wait", both),  # the previous generation, gated together
    ], sim.events
    assert all(sim[h].containers[u].state == "running" for h, u in (("h1", "fleet-demo-a"), ("h2", "fleet-demo-b")))


def test_a_rollback_batch_stops_every_rank_before_any_previous_generation_starts() -> None:
    sim = _fleet()
    assert roll(target(_replicas("--v2")), sim.connect, (), OPTIONS).errors == ()
    sim.events.clear()
    report = roll(target(_replicas("--v2")), sim.connect, (), OPTIONS, action="rollback")
    assert [(g.group, g.outcome, g.generation_after) for g in report.groups] == [("a", "rolled-back", 1), ("b", "rolled-back", 1)]
    both = frozenset({"fleet-demo-a", "fleet-demo-b"})
    assert _phases(sim.events) == [("stop", both), ("start", both), ("wait", both)], sim.events
