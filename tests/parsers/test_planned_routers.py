"""Tier 2 (marker `parsers`): every vllm-router argv fleet plans goes through the real vllm-router
0.1.17 parser (and its launcher's bootstrap-port reading), and argcheck agrees with it.

The argvs: each catalog recipe auto-placed on inventories/example.yaml (the vLLM PD recipes),
each repo playbook, a regular-mode router in front of vLLM replicas, and the PD builder with
Mooncake bootstrap ports (no recipe plans that shape yet).  Needs the vllm-router-0.1.17 parser
venv (tools/parser_venvs.sh); skips, saying so, when it is absent.
"""

from __future__ import annotations

import pytest

from launcher.config.playbook import load_playbook
from launcher.engines import router
from launcher.engines.argcheck import check_argv, split_command
from launcher.model import Plan
from launcher.plan import plan
from tests.plan import factory as f
from tests.plan.test_catalog import auto_plan, inputs, recipe_ids
from tests.plan.test_golden import playbook_paths, sandbox_inventory
from tests.plan.test_router import VLLM, ctl, fleet, routed

from .real import real_results, venv_absent

pytestmark = pytest.mark.parsers

TARGET = ("vllm-router", "0.1.17")


def _vllm_routers(p: Plan) -> list[tuple[str, tuple[str, ...]]]:
    out = []
    for u in p.units:
        if u.role == "router" and u.argv[0] == "vllm-router":
            engine, args = split_command(u.argv)
            assert engine == "vllm-router"
            out.append((u.name, args))
    return out


def _planned() -> list[tuple[str, tuple[str, ...]]]:
    catalog, example = inputs()
    found = [r for rid in recipe_ids() for r in _vllm_routers(auto_plan(rid))]
    for path in playbook_paths():
        inventory = sandbox_inventory() if path.parent.name in ("sandbox", "bench") else example
        found += _vllm_routers(plan(inventory, catalog, load_playbook(path, catalog, inventory)))
    regular = plan(
        f.inventory(*fleet(1, gpu_count=16), ctl()),
        f.catalog(f.recipe(**VLLM)),
        routed({"single": "h1", "router": "ctl"}, {"single": 2}),
    )
    found += _vllm_routers(regular)
    mooncake = router.vllm_pd_argv(
        ("http://10.0.0.1:8000", "http://10.0.0.1:8001"), ("http://10.0.0.2:8000",), 8100, 29100,
        "mooncake", (8998, 8999),
    )
    found.append(("builder: mooncake PD", mooncake[1:]))
    return found


def test_planned_vllm_router_argvs_pass_the_real_parser() -> None:
    reason = venv_absent(*TARGET)
    if reason:
        pytest.skip(reason)
    planned = _planned()
    names = {name for name, _ in planned}
    # Both modes are covered: the catalog's vLLM PD recipe and the regular-mode placement.
    assert {"fleet-deepseek-vllm-pd-tp8-6000d-nvfp4-router-r0", "fleet-x-router-r0"} <= names
    assert any("--worker-urls" in args for _, args in planned)
    assert any("--vllm-pd-disaggregation" in args for _, args in planned)
    results = real_results(*TARGET, [args for _, args in planned])
    got = [(name, ok, msg, check_argv(*TARGET, args)) for (name, args), (ok, msg) in zip(planned, results)]
    assert [g for g in got if g[1:] != (True, "", ())] == []


def test_the_real_parser_rejects_the_old_shapes() -> None:
    """What fleet would have got wrong, as the real launcher says it (guards the test above
    against a parse that accepts everything)."""
    reason = venv_absent(*TARGET)
    if reason:
        pytest.skip(reason)
    bad = [
        ("--pd-disaggregation", "--prefill", "http://a:8000", "8998"),  # sglang-router's spelling
        ("--vllm-pd-disaggregation", "--prefill", "http://a:8000", "bootstrap"),
        ("--vllm-pd-disaggregation", "--decode", "http://b:8000", "8998"),
    ]
    messages = [
        "unrecognized arguments: --pd-disaggregation",
        "ValueError: Invalid bootstrap port: bootstrap. Must be a number or 'none'",
        "unrecognized arguments: 8998",
    ]
    assert real_results(*TARGET, bad) == [(False, m) for m in messages]
    assert [check_argv(*TARGET, argv) for argv in bad] == [(m,) for m in messages]
