"""Playbook overrides that reshape a recipe for a smaller machine (the sandbox's real engine):
the served model, the parallel sizes and the nodes x GPUs they are placed on -- and the stop
grace the vLLM shutdown wait must fit in."""

from __future__ import annotations

import pytest

from launcher.errors import PlanError
from launcher.model import Engine, Parallelism, Recipe
from launcher.plan import plan
from tests.plan import factory as f

H = (f.host("h1", "10.0.0.1"), f.host("h2", "10.0.0.2"))


def _vllm(**kw: object) -> Recipe:
    return f.multinode(engine="vllm", engine_version="0.33.0", image="vllm/vllm-openai:v0.33.0", **kw)


def test_pp2_reshaped_to_one_gpu_per_node() -> None:
    ov = f.overrides(model="/models/tiny", parallelism=Parallelism(tp=1, pp=2), nodes=2, gpus_per_node=1)
    p = plan(f.inventory(*H), f.catalog(_vllm()), f.playbook({"rank": "h1:h2"}, overrides=ov))
    assert [(u.host, u.gpus) for u in p.units] == [("h1", (0,)), ("h2", (0,))]
    argv = p.units[0].argv
    assert argv[:3] == ("vllm", "serve", "/models/tiny")
    assert "--pipeline-parallel-size" in argv and argv[argv.index("--tensor-parallel-size") + 1] == "1"
    assert p.units[1].argv[-1] == "--headless"
    # Cross-node: the ranks still get their host's NCCL/Gloo interface (the rendezvous needs it).
    assert p.units[1].env["GLOO_SOCKET_IFNAME"] == "eth1"


def test_reshape_must_fill_the_shape() -> None:
    ov = f.overrides(parallelism=Parallelism(tp=1, pp=2), nodes=2, gpus_per_node=2)
    with pytest.raises(PlanError) as err:
        plan(f.inventory(*H), f.catalog(_vllm()), f.playbook({"rank": "h1:h2"}, overrides=ov))
    assert str(err.value) == (
        "playbooks/x.yaml:12:7: overrides/parallelism: tp*pp*dp = 1*2*1 = 2 GPUs, but the shape is 2 node(s) x "
        "2 GPUs (overrides nodes, gpus_per_node)"
    )


@pytest.mark.parametrize(("wait", "ok"), [(110, True), (111, False)])
def test_vllm_shutdown_wait_must_fit_fleets_stop_grace(wait: int, ok: bool) -> None:
    engine: Engine = "vllm"
    r = f.recipe(engine=engine, engine_version="0.33.0", parallelism=Parallelism(tp=8))
    pb = f.playbook({"single": "h1"}, overrides=f.overrides(engine_args=("--shutdown-timeout", str(wait))))
    if ok:
        assert "--shutdown-timeout" in plan(f.inventory(*H), f.catalog(r), pb).units[0].argv
        return
    with pytest.raises(PlanError) as err:
        plan(f.inventory(*H), f.catalog(r), pb)
    assert str(err.value) == (
        "playbooks/x.yaml:12:7: overrides/engine_args: --shutdown-timeout 111: vLLM would wait that long for "
        "requests in flight on SIGTERM, but fleet's stop grace is 120s (SIGKILL after); use at most 110"
    )
