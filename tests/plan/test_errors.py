"""Exact one-line messages for every PlanError kind."""

from __future__ import annotations

import pytest

from launcher.errors import PlanError
from launcher.model import Parallelism, Playbook, Recipe
from launcher.plan import plan
from tests.plan import factory as f

H = (f.host("h1", "10.0.0.1"), f.host("h2", "10.0.0.2"), f.host("h3", "10.0.0.3"))


def message(r: Recipe, pb: Playbook, *hosts: f.Host) -> str:
    with pytest.raises(PlanError) as err:
        plan(f.inventory(*(hosts or H)), f.catalog(r), pb)
    return str(err.value)


def test_bad_fit_host_too_small() -> None:
    small = f.host("h1", "10.0.0.1", gpu_count=4)
    assert message(f.recipe(), f.playbook({"single": "h1"}), small) == (
        "playbooks/x.yaml:5:3: placement/single: host h1 has 4 free GPUs, an instance needs 8"
    )


def test_bad_fit_override_changes_parallelism() -> None:
    pb = f.playbook({"single": "h1"}, overrides=f.overrides(engine_args=("--tp-size", "4")))
    assert message(f.recipe(), pb) == (
        "playbooks/x.yaml:12:7: overrides/engine_args: tp*pp*dp = 4*1*1 = 4 GPUs, but single0 is placed on "
        "1 x 8 = 8"
    )


def test_bad_fit_too_many_replicas() -> None:
    r = f.recipe(hardware=f.Hardware(skus=("H100",), gpus_per_node=4), parallelism=Parallelism(tp=4))
    assert message(r, f.playbook({"single": "h1"}, {"single": 3})) == (
        "playbooks/x.yaml:5:3: placement/single: 3 replicas of 4 GPUs do not fit on the 1 matched host(s): only 2 do"
    )


def test_port_collision() -> None:
    r = f.pd()
    pb = f.playbook({"prefill": "h1:h2", "decode": "h3", "router": "h3"}, ports={"router": 30000})
    assert message(r, pb) == (
        "playbooks/x.yaml:1:1: ports: port 30000 on host h3 is used by both fleet-x-decode0-r0 (http) and "
        "fleet-x-router-r0 (router)"
    )


def test_missing_rank_multinode() -> None:
    assert message(f.multinode(), f.playbook({"rank": "all"})) == (
        "playbooks/x.yaml:5:3: placement/rank: 3 host(s) matched, not a multiple of 2 nodes per instance: "
        "rank 1 of rank1 is missing"
    )


def test_missing_rank_pd() -> None:
    pb = f.playbook({"prefill": "h1", "decode": "h3"})
    assert message(f.pd(), pb) == (
        "playbooks/x.yaml:5:3: placement/prefill: rank 0 of prefill1 has no host: 1 matched host(s), none with "
        "8 free GPUs left for it"
    )


MARLIN = f.constraint(
    id="sm120-marlin", kind="arg", flag="--moe-runner-backend", value="marlin",
    reason="the default MoE runner has no sm120 kernels", when_sku=("RTX-6000D",),
)


def _6000d() -> tuple[f.Host, ...]:
    return (f.host("h1", "10.0.0.1", gpu_model="RTX-6000D"),)


def test_constraint_refuses_override() -> None:
    r = f.recipe(
        hardware=f.Hardware(skus=("RTX-6000D",), gpus_per_node=8), engine_args=("--moe-runner-backend", "marlin"),
        constraints=(MARLIN,),
    )
    pb = f.playbook({"single": "h1"}, overrides=f.overrides(engine_args=("--moe-runner-backend", "flashinfer_cutlass")))
    assert message(r, pb, *_6000d()) == (
        "playbooks/x.yaml:12:7: overrides/engine_args: refused by constraint sm120-marlin: "
        "the default MoE runner has no sm120 kernels"
    )
    removed = f.playbook({"single": "h1"}, overrides=f.overrides(remove_args=("--moe-runner-backend",)))
    assert message(r, removed, *_6000d()).startswith(
        "playbooks/x.yaml:12:7: overrides/remove_args: refused by constraint sm120-marlin:"
    )


def test_constraint_only_on_its_sku() -> None:
    r = f.recipe(hardware=f.Hardware(skus=("H100",), gpus_per_node=8), constraints=(MARLIN,))
    assert plan(f.inventory(*H), f.catalog(r), f.playbook({"single": "h1"})).units


def test_constraint_env_and_min_kinds() -> None:
    ep = f.constraint(id="ep-needed", kind="min", field="parallelism.ep", value=8, reason="plain TP cannot load it")
    r = f.recipe(parallelism=Parallelism(tp=8, ep=8), constraints=(ep,))
    pb = f.playbook({"single": "h1"}, overrides=f.overrides(engine_args=("--ep-size", "1")))
    assert message(r, pb) == (
        "playbooks/x.yaml:12:7: overrides/engine_args: refused by constraint ep-needed: plain TP cannot load it"
    )
    env = f.constraint(id="fp4-off", kind="env", name="SGLANG_DSV4_FP4_EXPERTS", value="0", reason="fp8 cells")
    r2 = f.recipe(env={"SGLANG_DSV4_FP4_EXPERTS": "0"}, constraints=(env,))
    pb2 = f.playbook({"single": "h1"}, overrides=f.overrides(env={"SGLANG_DSV4_FP4_EXPERTS": "1"}))
    assert message(r2, pb2) == "playbooks/x.yaml:12:7: overrides/env: refused by constraint fp4-off: fp8 cells"


def test_recipe_breaking_its_own_constraint_points_at_the_constraint() -> None:
    r = f.recipe(hardware=f.Hardware(skus=("RTX-6000D",), gpus_per_node=8), constraints=(MARLIN,))
    assert message(r, f.playbook({"single": "h1"}), *_6000d()) == (
        "recipes/fam/v.yaml:30:3: constraints: recipe fam/v breaks its own constraint sm120-marlin: "
        "the default MoE runner has no sm120 kernels"
    )


def test_missing_gid_index() -> None:
    hosts = (
        f.host("h1", "10.0.0.1", fabric="roce", hcas=("mlx5_0",), gid_index=3),
        f.host("h2", "10.0.0.2", fabric="roce", hcas=("mlx5_0",)),
    )
    assert message(f.multinode(), f.playbook({"rank": "all"}), *hosts) == (
        "inv.yaml:3:5: h2/gid_index: RoCE host has no GID index: set gid_index (a number, or auto)"
    )


def test_wrong_sku() -> None:
    hosts = (f.host("h1", "10.0.0.1", gpu_model="H800"),)
    assert message(f.recipe(), f.playbook({"single": "h1"}), *hosts) == (
        "playbooks/x.yaml:5:3: placement/single: host h1 has H800 GPUs; recipe fam/v runs on H100"
    )
    both = f.recipe(hardware=f.Hardware(skus=("H100", "H800"), gpus_per_node=8))
    assert plan(f.inventory(*hosts), f.catalog(both), f.playbook({"single": "h1"})).units


def test_missing_ifname_on_multinode() -> None:
    hosts = (f.host("h1", "10.0.0.1"), f.host("h2", "10.0.0.2", nccl_ifname=None))
    assert message(f.multinode(), f.playbook({"rank": "all"}), *hosts) == (
        "inv.yaml:3:5: h2/nccl_ifname: multi-node and PD units need nccl_ifname (the data NIC)"
    )


def test_planner_owned_flag_override_refused() -> None:
    pb = f.playbook({"rank": "h1:h2"}, overrides=f.overrides(engine_args=("--node-rank", "1")))
    assert message(f.multinode(), pb) == (
        "playbooks/x.yaml:12:7: overrides/engine_args: --node-rank is set by the planner for each rank"
    )


def test_unknown_role_and_port_name() -> None:
    assert message(f.recipe(), f.playbook({"rank": "h1"})) == (
        "playbooks/x.yaml:5:3: placement/rank: role 'rank' does not fit a single recipe; expected single, "
        "router, mooncake-master, gateway"
    )
    assert message(f.recipe(), f.playbook({"single": "h1"}, ports={"htp": 1})).startswith(
        "playbooks/x.yaml:1:1: ports/htp: unknown port name 'htp'; expected one of bootstrap, dist_init,"
    )


def test_undroppable_docker_flag() -> None:
    pb = f.playbook({"single": "h1"}, overrides=f.overrides(drop_docker_flags=("--privileged",)))
    assert message(f.recipe(), pb) == (
        "playbooks/x.yaml:12:7: overrides/drop_docker_flags: cannot drop '--privileged'; droppable: --cap-add, "
        "--device, --gpus, --ipc, --network, --restart, --shm-size, --ulimit"
    )
