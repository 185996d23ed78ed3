"""Where a deployment lives now (launcher/watch/where.py): the commands that act on it read a
group fleet watch placed on a spare where it runs, as the hosts' manifests say (the watch's rule),
keep every claimed host, name a spare that did not answer, and restart/rollback refuse a moved
group in one line naming it, the spare and what to do."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from launcher.deploy.manifest import Manifest, dumps
from launcher.deploy.session import Target
from launcher.deploy.survey import deployment_dir
from launcher.errors import FleetError, UnreachableError, UsageError
from launcher.model import Host
from launcher.pipeline import Inputs, deployment, target_of
from launcher.watch.spares import Spares
from launcher.watch.where import Where, located, refuse_moved, where
from tests.deploy.conftest import SimFleet
from tests.deploy.simhost import SimHost
from tests.watch.test_spares import RECIPE, inputs

R1 = "fleet-sb-watch-rank0-r1"  # rank 1 of the group on h1:h2


def _spares(i: Inputs) -> tuple[Target, Spares]:
    def planned(x: Inputs) -> Target:
        return target_of(deployment(x))

    spares = Spares.of(i, planned)
    assert spares is not None
    return planned(i), spares


def m(unit: str, host: str, at: str) -> Manifest:
    return Manifest(deployment="sb-watch", unit=unit, host=host, group="sb-watch/rank0", role="rank", rank=1,
                    runtime="docker", render_hash="x", recipe=RECIPE, image="i", generation=1, deployed_by="op",
                    deployed_at=at, files=())  # fmt: skip


def test_nothing_on_the_spares_is_the_playbook_s_placement(tmp_path: Path) -> None:
    target, spares = _spares(inputs(tmp_path))
    here = located(target, spares, {h.name: {} for h in target.hosts}, {})
    assert here == Where(target=target) and here.moved() == ()


def test_a_group_on_a_spare_is_read_where_it_runs_and_every_claimed_host_stays(tmp_path: Path) -> None:
    target, spares = _spares(inputs(tmp_path))
    found = {"h8": {R1: m(R1, "h8", "2026-12-02T10:00:00Z")}, "h1": {}, "h7": {}}
    here = located(target, spares, found, {"h2": "h2: unreachable: timed out"})
    assert here.subst == {"h2": "h8"} and here.unanswered == {}
    assert [(d.name, d.host) for d in here.target.units if d.unit.group == "sb-watch/rank0"] == [
        ("fleet-sb-watch-rank0-r0", "h1"), (R1, "h8")]
    assert {(d.name, d.host) for d in here.target.units} - {(d.name, d.host) for d in target.units} == {(R1, "h8")}
    assert here.target.hosts == target.hosts, "the lost host stays claimed: a stale copy there is still found"
    assert here.moved() == (("sb-watch/rank0", "h8", "h2"),)


def test_a_newer_copy_on_the_planned_host_wins_and_a_spare_that_is_away_is_named(tmp_path: Path) -> None:
    target, spares = _spares(inputs(tmp_path))
    found = {"h8": {R1: m(R1, "h8", "2026-12-02T10:00:00Z")}, "h2": {R1: m(R1, "h2", "2026-12-02T11:00:00Z")}}
    here = located(target, spares, found, {"h7": "h7: unreachable: no route to host", "h3": "h3: unreachable"})
    assert here.target is target and here.subst == {}
    assert here.unanswered == {"h7": "h7: unreachable: no route to host"}, "only spares are named"


def test_units_on_spares_that_no_longer_plan_are_one_line(tmp_path: Path) -> None:
    target, spares = _spares(inputs(tmp_path))

    def refuses(subst: object) -> Target:
        raise FleetError("h8: 8 GPUs needed, 0 found")

    with pytest.raises(FleetError) as err:
        located(target, replace(spares, replan=refuses), {"h8": {R1: m(R1, "h8", "2026-12-02T10:00:00Z")}}, {})
    assert str(err.value) == ("deployment sb-watch: the units fleet watch placed on spares (h2 -> h8) do not plan: "
                              "h8: 8 GPUs needed, 0 found")  # fmt: skip


def test_restart_refuses_a_group_on_a_spare_naming_it_the_spare_and_what_to_do(tmp_path: Path) -> None:
    target, spares = _spares(inputs(tmp_path))
    refuse_moved(Where(target=target), "restart", "w.yaml")  # nothing moved: goes ahead
    here = located(target, spares, {"h8": {R1: m(R1, "h8", "2026-12-02T10:00:00Z")}}, {})
    with pytest.raises(UsageError) as err:
        refuse_moved(here, "restart", "w.yaml")
    assert str(err.value) == ("group sb-watch/rank0 runs on spare host h8, where fleet watch placed it for h2: fleet "
                              "restart acts on the playbook's placement only; put it back with `fleet down w.yaml` "
                              "then `fleet up w.yaml`")  # fmt: skip


def test_the_hosts_manifests_are_read_and_hosts_that_do_not_answer_hold_nothing(tmp_path: Path) -> None:
    i = inputs(tmp_path)
    sim = SimFleet()
    copy = m(R1, "h8", "2026-12-02T10:00:00Z")
    sim["h8"].files[f"{deployment_dir('sb-watch')}/{R1}/manifest.json"] = (dumps(copy).encode(), 0o644)
    asked: list[str] = []

    def connect(host: Host) -> SimHost:
        asked.append(host.name)
        if host.name in ("h2", "h7"):
            raise UnreachableError(host.name, "timed out")
        return sim.connect(host)

    here = where(i, lambda x: target_of(deployment(x)), connect)
    assert sorted(asked) == ["h1", "h2", "h3", "h4", "h5", "h7", "h8"], "the planned hosts and the spares"
    assert here.subst == {"h2": "h8"} and here.unanswered == {"h7": "h7: unreachable: timed out"}
    assert here.moved() == (("sb-watch/rank0", "h8", "h2"),)
    plain = inputs(tmp_path)
    plain = replace(plain, playbook=replace(plain.playbook, placement={
        r: replace(p, spares=None) for r, p in plain.playbook.placement.items()}))  # fmt: skip
    asked.clear()
    assert where(plain, lambda x: target_of(deployment(x)), connect).subst == {} and asked == [], \
        "no spares: no host is asked"  # fmt: skip
