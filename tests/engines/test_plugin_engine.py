"""A third engine is one module: tests/engines/tiny_engine.py, registered here, plans and renders
through the same planner and renderer as the built-in engines, with nothing in ``launcher/``
naming it.  (tests/deploy/test_sandbox_plugin_engine.py deploys it on the sandbox.)"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from launcher.config.inventory import load_inventory
from launcher.config.recipes import load_catalog
from launcher.engines import registry, router
from launcher.errors import InputError, PlanError
from launcher.model import Parallelism
from launcher.plan import auto_playbook, plan
from launcher.render import render
from tests.engines import tiny_engine
from tests.plan import factory as f

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
RECIPES = HERE / "recipes"


@pytest.fixture
def tiny() -> Iterator[None]:
    registry.register(tiny_engine.ENGINE)
    try:
        yield
    finally:
        registry.unregister(tiny_engine.NAME)


def test_an_unregistered_engine_is_refused_at_its_line() -> None:
    with pytest.raises(InputError) as err:
        load_catalog(RECIPES).get("tiny/single")
    assert str(err.value).endswith(
        "recipes/tiny/single.yaml:6:9: engine: should be one of 'sglang', 'vllm', 'vllm-ascend', got 'tiny'"
    )


def test_a_registered_engine_plans_and_renders(tiny: None) -> None:
    recipe = load_catalog(RECIPES).get("tiny/single")
    inventory = load_inventory(ROOT / "inventories" / "example.yaml")
    p = plan(inventory, load_catalog(RECIPES), auto_playbook(recipe, inventory))
    (unit,) = p.units
    assert unit.argv == (
        "python3", "-m", "sglang.launch_server", "--model-path", "Qwen/Qwen3.8-27B", "--served-model-name", "tiny", "--host", "0.0.0.0",
        "--port", str(tiny_engine.PORT), "--tp-size", "1", "--max-running-requests", "8",
    )  # fmt: skip
    assert unit.ports == {"http": tiny_engine.PORT}
    assert unit.health is not None and unit.health.url == f"http://{unit.env['TINY_HOST_IP']}:{tiny_engine.PORT}/health"
    assert unit.container is not None and unit.container.gpus == (0,) and unit.container.image == "tiny:0.1.0"
    host = render(p).hosts[unit.host]
    (start,) = host.units[0].start
    (script,) = [f.content for f in host.files if f.path == start[1]]
    assert " --entrypoint python3 tiny:0.1.0 -m sglang.launch_server --model-path Qwen/Qwen3.8-27B " in script
    assert " -e TINY_HOST_IP " in script
    assert f"--port {tiny_engine.PORT} --tp-size 1 --max-running-requests 8" in script


def test_registering_a_taken_name_is_refused() -> None:
    with pytest.raises(ValueError, match="engine 'sglang' is already registered"):
        registry.register(registry.get("sglang"))


class _Routed(tiny_engine.Tiny):
    """The tiny engine with a router program of its own and its own health path."""

    name = "tiny-routed"
    health_path = "/ready"

    def router_argv(self, workers: tuple[str, ...], port: int, metrics_port: int) -> tuple[str, ...]:
        return ("tiny-router", "--upstreams", ",".join(workers), "--listen", str(port))


def test_a_plugin_engines_router_is_planned_with_its_programs_health_path() -> None:
    """The planner asks the engine and the router program for their health paths; a router
    program nobody registered is refused at the recipe's engine line."""
    registry.register(_Routed())
    recipe = f.recipe(engine="tiny-routed", engine_version="0.1.0", image="tiny:0.1.0",
                      hardware=f.Hardware(skus=("H100",), gpus_per_node=1), parallelism=Parallelism(tp=1))  # fmt: skip
    inventory = f.inventory(f.host("h1", "10.0.0.1", data_ip="192.168.0.1"),
                            f.host("ctl", "10.0.1.1", gpu_model=None, gpu_count=0, data_ip="192.168.1.1"))  # fmt: skip
    playbook = f.playbook({"single": "h1", "router": "ctl"})
    try:
        with pytest.raises(PlanError) as err:
            plan(inventory, f.catalog(recipe), playbook)
        assert str(err.value) == (
            "recipes/fam/v.yaml:1:1: engine: the router of tiny-routed instances runs tiny-router, a program no "
            "router plug-in describes (launcher.engines.router.register adds one)"
        )
        router.register(router.Program(name="tiny-router", entry=("tiny-router",), health_path="/alive"))
        try:
            p = plan(inventory, f.catalog(recipe), playbook)
        finally:
            router.unregister("tiny-router")
    finally:
        registry.unregister("tiny-routed")
    assert {u.role: u.health.url for u in p.units if u.health} == {
        "single": "http://192.168.0.1:31000/ready", "router": "http://192.168.1.1:8000/alive",
    }
