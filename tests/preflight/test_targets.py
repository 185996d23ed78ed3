"""Which ports each rank must reach before launch, on plans made by the real planner."""

from __future__ import annotations

from launcher.model import Inventory
from launcher.model import Playbook, Recipe, RoleImages
from launcher.plan import plan
from launcher.preflight import checks as preflight
from tests.preflight import factory as f


def fleet(n: int = 6, **spec: object) -> Inventory:
    return f.inventory(*(f.host(f"h{i}", f"10.0.0.{i}", **spec) for i in range(1, n + 1)))


def targets(inv: Inventory, recipe: Recipe, pb: Playbook) -> list[tuple[str, str, str, int, list[str]]]:
    p = plan(inv, f.catalog(recipe), pb)
    return [(t.label, t.host, t.ip, t.port, [c[0] for c in t.clients]) for t in preflight.reach_targets(p, inv)]


def test_sglang_pp2_dist_init_from_rank1() -> None:
    inv = fleet()
    assert targets(inv, f.multinode(), f.playbook({"rank": "h1:h2"})) == [
        ("dist-init", "h1", "10.0.0.1", 20000, ["h2"]),
    ]


def test_two_instances_on_one_host_use_their_own_ports() -> None:
    inv = f.inventory(*(f.host(f"h{i}", f"10.0.0.{i}", gpu_count=16) for i in (1, 2)))
    got = targets(inv, f.multinode(), f.playbook({"rank": "h1:h2"}, replicas={"rank": 2}))
    assert got == [("dist-init", "h1", "10.0.0.1", 20000, ["h2"]), ("dist-init", "h1", "10.0.0.1", 20001, ["h2"])]


def test_vllm_mp_master_port_and_ray_head() -> None:
    inv = fleet()
    vllm = f.multinode(engine="vllm", engine_version="0.11.0", image="vllm/vllm-openai:v0.11.0")
    assert targets(inv, vllm, f.playbook({"rank": "h1:h2"})) == [("master-port", "h1", "10.0.0.1", 29501, ["h2"])]
    ray = f.playbook({"rank": "h1:h2"}, overrides=f.overrides(engine_args=("--distributed-executor-backend", "ray")))
    assert targets(inv, vllm, ray) == [("ray", "h1", "10.0.0.1", 6379, ["h2"])]


def test_sglang_pd_bootstrap_from_every_decode_rank() -> None:
    inv = fleet()
    got = targets(inv, f.pd(), f.playbook({"prefill": "h1:h2", "decode": "h3", "router": "h4"}))
    assert got == [
        ("bootstrap", "h1", "10.0.0.1", 8998, ["h3"]),
        ("bootstrap", "h2", "10.0.0.2", 8998, ["h3"]),
    ]


def test_pd_with_two_node_prefill_and_mooncake_store() -> None:
    inv = fleet()
    recipe = f.pd(nodes=2, mooncake_store=f.STORE)
    got = targets(inv, recipe, f.playbook({"prefill": "h1:h2", "decode": "h3:h4"}))
    assert got == [
        ("dist-init", "h3", "10.0.0.3", 20000, ["h4"]),
        ("dist-init", "h1", "10.0.0.1", 20000, ["h2"]),
        ("bootstrap", "h1", "10.0.0.1", 8998, ["h2", "h3", "h4"]),
        ("mooncake-master", "h1", "10.0.0.1", 50051, ["h2", "h3", "h4"]),
        ("mooncake-metadata", "h1", "10.0.0.1", 8080, ["h2", "h3", "h4"]),
    ]


def test_vllm_nixl_side_channel_from_decode() -> None:
    inv = fleet()
    recipe = f.pd(transfer="nixl", engine="vllm", engine_version="0.11.0", image="vllm/vllm-openai:v0.11.0",
             images=RoleImages(router="vllm/vllm-router:nightly"))
    got = targets(inv, recipe, f.playbook({"prefill": "h1:h2", "decode": "h3", "router": "h4"}))
    assert got == [
        ("nixl-side-channel", "h1", "10.0.0.1", 5600, ["h3"]),
        ("nixl-side-channel", "h2", "10.0.0.2", 5600, ["h3"]),
    ]


def test_single_node_needs_no_reachability() -> None:
    assert targets(fleet(), f.recipe(), f.playbook({"single": "h1"})) == []


def test_weights_are_checked_on_every_ray_node() -> None:
    inv = fleet()
    vllm = f.multinode(engine="vllm", engine_version="0.11.0", image="vllm/vllm-openai:v0.11.0")
    ray = f.playbook({"rank": "h1:h2"}, overrides=f.overrides(engine_args=("--distributed-executor-backend", "ray")))
    p = plan(inv, f.catalog(vllm), ray)
    paths = preflight.probe_paths(p, inv, vllm)
    assert sorted(paths) == ["h1", "h2"]
    assert paths["h1"] == paths["h2"] == ("/models/org/model", "/var/cache/fleet/huggingface/hub/models--org--model")
