"""launcher/pipeline.py: one rule for the hosts a deployment claims, and every loader (the deploy
commands' target, the PD cohort's target, a deployment for new commands) agrees on it."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from launcher.pipeline import Endpoint, claimed_hosts, deployment, load_deployment, load_inputs, load_target, target_of
from launcher.rolling.cohort import cohort_target
from tests.watch.test_spares import inputs as spare_inputs

INV = "inventories/example.yaml"
ROUTER = "playbooks/router/single-qwen-h100.yaml"  # engines on h100-01:h100-02, the router on ctl-01


def test_claimed_hosts_are_the_placement_hosts_plus_the_hosts_with_units_in_inventory_order() -> None:
    inputs = load_inputs(ROUTER, INV)
    inv, pb = inputs.inventory, inputs.playbook
    order = [h.name for h in inv.hosts]
    placed = [h.name for h in claimed_hosts(inv, pb)]
    assert placed == sorted(["h100-01", "h100-02", "ctl-01"], key=order.index)
    p = deployment(inputs).plan
    # A unit outside every placement pattern (none is today) is claimed too, in inventory order.
    moved = dataclasses.replace(p, units=(*p.units[:-1], dataclasses.replace(p.units[-1], host="h100-04")))
    assert [h.name for h in claimed_hosts(inv, pb, moved)] == sorted([*placed, "h100-04"], key=order.index)


def test_every_loader_claims_the_same_hosts() -> None:
    dep = load_deployment(ROUTER, INV)
    claimed = claimed_hosts(dep.inputs.inventory, dep.inputs.playbook, dep.plan)
    assert dep.hosts == claimed
    assert load_target(ROUTER, INV, None, None).hosts == claimed
    assert cohort_target(dep.inputs, None).hosts == claimed
    assert target_of(dep, "h100-02").hosts == tuple(h for h in claimed if h.name == "h100-02")
    assert {d.host for d in target_of(dep, "h100-02").units} == {"h100-02"}


def test_a_deployment_names_its_http_endpoints() -> None:
    dep = load_deployment(ROUTER, INV)
    assert dep.name == "qwen-router"
    assert dep.endpoints[-1] == Endpoint(host="ctl-01", unit="fleet-qwen-router-router-r0", role="router",
                                         url="http://10.10.6.11:8000")  # fmt: skip
    assert [e.url for e in dep.endpoints[:2]] == ["http://10.20.0.11:30000", "http://10.20.0.12:30000"]
    assert len(dep.endpoints) == len([u for u in dep.plan.units if u.health is not None]) == 9


def test_a_deployment_claims_its_spare_hosts(tmp_path: Path) -> None:
    # fleet watch may have placed a group there: status, down, restart and collect look there too.
    i = spare_inputs(tmp_path, spares="h8:h7")
    assert [h.name for h in claimed_hosts(i.inventory, i.playbook)] == ["h1", "h2", "h3", "h4", "h5", "h7", "h8"]
    assert [h.name for h in deployment(i).hosts] == ["h1", "h2", "h3", "h4", "h5", "h7", "h8"]
