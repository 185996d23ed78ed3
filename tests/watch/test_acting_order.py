"""The order a watch tick acts on its groups (launcher/watch/loop.py ``acting_order``): the plan's
-- a router after the engine groups its start gate waits for -- except that a regular-mode
sglang-router (ready once one worker is healthy, measured) goes first while an engine group is
healthy, so it serves through that group during the broken ones' cold starts."""

from __future__ import annotations

from dataclasses import replace

import pytest

from launcher.deploy.watchstate import History
from launcher.engines.router import SGLANG_ROUTER, VLLM_ROUTER
from launcher.model import Plan
from launcher.deploy.desired import groups
from launcher.watch.decide import Decision
from launcher.watch.loop import acting_order
from tests.deploy.factory import target, unit

PD = ("--pd-disaggregation", "--prefill", "http://h1:30000", "--decode", "http://h2:30000")


def decisions(router_argv: tuple[str, ...], kinds: dict[str, str]) -> list[str]:
    """The groups in acting order of replicas r0 (h1), r1 (h2) and a router (h3) decided so."""
    router = unit("h3", "fleet-demo-router", "router", role="router", order=2)
    plan = Plan(deployment="demo", recipe="fam/replicas", units=(
        unit("h1", "fleet-demo-r0", "r0"), unit("h2", "fleet-demo-r1", "r1"), replace(router, argv=router_argv)))  # fmt: skip
    made = [(Decision(group=g, kind=kinds[g], reason="x"), units, History())  # type: ignore[arg-type]
            for g, units in groups(target(plan).units).items()]  # fmt: skip
    return [d.group for d, _, _ in acting_order(made)]


SGL = (*SGLANG_ROUTER, "--worker-urls", "http://h1:30000", "http://h2:30000")


def test_a_dead_sglang_router_goes_first_while_a_replica_is_healthy() -> None:
    assert decisions(SGL, {"r0": "recreate", "r1": "healthy", "router": "recreate"}) == ["router", "r0", "r1"]


@pytest.mark.parametrize("router_argv, kinds", [
    (SGL, {"r0": "recreate", "r1": "recreate", "router": "recreate"}),  # no worker could make it ready
    ((*SGLANG_ROUTER, *PD), {"r0": "recreate", "r1": "healthy", "router": "recreate"}),  # PD: not measured
    ((*VLLM_ROUTER, "--worker-urls", "http://h1:30000"), {"r0": "recreate", "r1": "healthy", "router": "recreate"}),
])  # fmt: skip
def test_otherwise_the_router_acts_after_the_engine_groups(router_argv: tuple[str, ...], kinds: dict[str, str]) -> None:
    assert decisions(router_argv, kinds) == ["r0", "r1", "router"]
