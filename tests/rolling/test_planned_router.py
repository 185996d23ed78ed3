"""Rolling restarts drain through the deployment's own router when no --router is given."""

from __future__ import annotations

import socket
import sys
from dataclasses import replace

import pytest

from launcher.pipeline import load_target
from launcher.rolling.routers import drain_router_urls, planned_routers
from launcher.deploy.session import Target

REPO_INV = "inventories/example.yaml"


def note(line: str) -> None:
    """As the CLI shows a drain note: one line on stderr."""
    print(line, file=sys.stderr)


def test_router_placement_is_found_at_its_ssh_address() -> None:
    target = load_target("playbooks/router/single-qwen-h100.yaml", REPO_INV, None, None)
    assert planned_routers(target) == ("http://10.10.6.11:8000",)  # ctl-01's ansible_host


def test_pd_routers_are_not_drain_routers() -> None:
    target = load_target("playbooks/pd-glm-2p1d-6000d.yaml", REPO_INV, None, None)
    assert any(d.unit.role == "router" for d in target.units)
    assert planned_routers(target) == ()


def test_given_routers_win_and_a_silent_planned_router_is_named_and_skipped(
    capsys: pytest.CaptureFixture[str],
) -> None:
    target = load_target("playbooks/router/single-qwen-h100.yaml", REPO_INV, None, None)
    assert drain_router_urls(("http://r:1",), target, note) == ("http://r:1",)
    with socket.socket() as s:  # a loopback port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    hosts = tuple(replace(h, address="127.0.0.1") if h.name == "ctl-01" else h for h in target.hosts)
    units = tuple(
        replace(d, unit=replace(d.unit, ports={**d.unit.ports, "router": port})) if d.unit.role == "router" else d
        for d in target.units
    )
    local = Target(deployment=target.deployment, recipe=target.recipe, hosts=hosts, units=units)
    assert drain_router_urls((), local, note) == ()
    err = capsys.readouterr().err
    assert err.startswith("fleet: note: the deployment's router does not answer (") and f"127.0.0.1:{port}" in err
    assert err.rstrip().endswith("groups are not drained through it")

