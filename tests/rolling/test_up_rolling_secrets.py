"""``fleet up`` of a rolling playbook restarts the groups whose secret values changed, like a
plain ``up`` does (simulated hosts)."""

from __future__ import annotations

from launcher.deploy.orchestrate import Options, up
from launcher.rolling.roll import RollOptions, up_rolling
from tests.deploy.conftest import SimFleet
from tests.deploy.factory import pp_plan, target


def test_changed_secret_value_restarts_its_group_rolling() -> None:
    sim = SimFleet()
    up(target(pp_plan(secret=True), {"HF_TOKEN": "tok-A"}), sim.connect, Options(forks=4, timeout_s=5.0))
    options = RollOptions(only_changed=True, force=True, timeout_s=5.0, drain_timeout_s=1.0)
    same = up_rolling(target(pp_plan(secret=True), {"HF_TOKEN": "tok-A"}), sim.connect, (), options)
    assert same.errors == () and all(g.outcome != "restarted" for g in same.groups)
    assert sim["h2"].containers["fleet-demo-rank-r1"].starts == 1
    report = up_rolling(target(pp_plan(secret=True), {"HF_TOKEN": "tok-B"}), sim.connect, (), options)
    assert report.errors == ()
    assert [(g.group, g.outcome) for g in report.groups if g.outcome == "restarted"] == [("g0", "restarted")], report.groups
    assert sim["h2"].containers["fleet-demo-rank-r1"].starts == 2
    assert sim["h1"].files["/etc/fleet/demo/fleet-demo-rank-r0/secrets.env"][0] == b"HF_TOKEN=tok-B\n"
