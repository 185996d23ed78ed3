"""vLLM's Mooncake store client config: vLLM 0.30 and 0.33 load it only from the JSON file named
by MOONCAKE_CONFIG_PATH (no MOONCAKE_* env), so every vLLM engine unit gets its own file in its
unit directory, mounted read-only at the same path, with per-GPU sizes (each worker contributes
its own global segment).  SGLang keeps its env."""

from __future__ import annotations

import json

from launcher.engines import mooncake
from launcher.model import MooncakeStore, Parallelism, Plan, Unit
from launcher.plan import plan
from tests.plan import factory as f
from tests.plan.test_catalog import auto_plan
from tests.plan.test_placement import ROCE, hosts

SRC = f.REC
ENTRY_32 = "deepseek/vllm-pd-tp8-6000d-nvfp4"
DEPLOYMENT = "deepseek-vllm-pd-tp8-6000d-nvfp4"
ENTRY_32_CONFIG = """{
  "device_name": "mlx5_0,mlx5_1",
  "global_segment_size": "100gb",
  "local_buffer_size": "4gb",
  "master_server_address": "10.10.4.11:50051",
  "metadata_server": "P2PHANDSHAKE",
  "mode": "embedded",
  "protocol": "rdma"
}
"""


def engines(p: Plan) -> list[Unit]:
    return [u for u in p.units if u.role in ("single", "rank", "prefill", "decode")]


def config_name(p: Plan, u: Unit) -> str:
    return f"{p.deployment}/{u.name}/mooncake-store.json"


def vllm(**kw: object) -> f.Recipe:
    # vLLM's release image does not carry mooncake_master (launcher/engines/images.py).
    return f.recipe(engine="vllm", engine_version="0.30.0", image="vllm/vllm-openai:v0.30.0",
                    images=f.RoleImages(mooncake_master="mooncake-master:0.3.13.post1"), **kw)


def test_entry_32_units_point_at_their_own_config_file() -> None:
    p = auto_plan(ENTRY_32)
    units = engines(p)
    assert sorted(u.name for u in units) == [
        f"fleet-{DEPLOYMENT}-decode0-r0", f"fleet-{DEPLOYMENT}-prefill0-r0", f"fleet-{DEPLOYMENT}-prefill1-r0",
    ]  # fmt: skip
    for u in units:
        path = f"/etc/fleet/{config_name(p, u)}"
        assert u.env["MOONCAKE_CONFIG_PATH"] == path
        assert p.files[config_name(p, u)] == ENTRY_32_CONFIG
        assert u.container is not None
        assert [(m.host, m.container, m.read_only) for m in u.container.mounts if m.host == path] == [
            (path, path, True)
        ]
        # The client's own address: vLLM takes VLLM_HOST_IP (no MOONCAKE_REQUESTER_LOCAL_HOSTNAME set).
        assert u.env["VLLM_HOST_IP"] == u.env["VLLM_NIXL_SIDE_CHANNEL_HOST"]


def test_entry_32_renders_no_mooncake_env_vllm_ignores() -> None:
    for u in engines(auto_plan(ENTRY_32)):
        assert sorted(k for k in u.env if k.startswith("MOONCAKE_")) == ["MOONCAKE_CONFIG_PATH"]
        # The transfer engine's C++ core reads these itself.
        assert sorted(k for k in u.env if k.startswith("MC_")) == ["MC_GID_INDEX", "MC_IB_TC"]


def test_sizes_stay_per_gpu_in_forms_vllm_parses() -> None:
    store = MooncakeStore(global_segment_size="1tb", local_buffer_size="512mb")
    doc = json.loads(mooncake.vllm_store_config(store, "10.0.0.1:50051", "tcp", "", SRC))
    assert doc == {
        "device_name": "",
        "global_segment_size": "1024gb",
        "local_buffer_size": str(512 * 1024 * 1024),
        "master_server_address": "10.0.0.1:50051",
        "metadata_server": "P2PHANDSHAKE",
        "mode": "embedded",
        "protocol": "tcp",
    }


def test_tp8_pp2_vllm_ranks_each_configure_the_per_gpu_size() -> None:
    """Unlike SGLang's env (the instance total), vLLM's file holds one worker's share."""
    r = vllm(
        topology="multinode", hardware=f.Hardware(skus=("H100",), gpus_per_node=8, nodes=2),
        parallelism=Parallelism(tp=8, pp=2), mooncake_store=f.STORE,
    )  # fmt: skip
    p = plan(f.inventory(*hosts(2, **ROCE)), f.catalog(r), f.playbook({"rank": "h1:h2"}))
    units = engines(p)
    assert len(units) == 2
    for u in units:
        doc = json.loads(p.files[config_name(p, u)])
        assert (doc["global_segment_size"], doc["local_buffer_size"]) == ("100gb", "4gb")
        assert doc["master_server_address"] == "10.0.0.1:50051"


def test_host_without_fabric_gets_tcp_and_no_devices() -> None:
    r = vllm(mooncake_store=f.STORE)
    p = plan(f.inventory(f.host("h1", "10.0.0.1", fabric="none")), f.catalog(r), f.playbook({"single": "h1"}))
    (u,) = engines(p)
    doc = json.loads(p.files[config_name(p, u)])
    assert (doc["protocol"], doc["device_name"]) == ("tcp", "")


def test_native_units_read_the_file_at_the_same_path() -> None:
    r = vllm(mooncake_store=f.STORE)
    p = plan(f.inventory(*hosts(1, **ROCE)), f.catalog(r), f.playbook({"single": "h1"}, runtime="systemd"))
    (u,) = engines(p)
    assert u.container is None
    assert u.env["MOONCAKE_CONFIG_PATH"] == f"/etc/fleet/{config_name(p, u)}"
    assert config_name(p, u) in p.files


def test_ray_nodes_get_the_file_too() -> None:
    """Under Ray the store workers run in the Ray node containers and inherit their env."""
    r = vllm(
        topology="multinode", hardware=f.Hardware(skus=("H100",), gpus_per_node=8, nodes=2),
        parallelism=Parallelism(tp=8, pp=2), mooncake_store=f.STORE,
        engine_args=("--distributed-executor-backend", "ray"),
    )  # fmt: skip
    p = plan(f.inventory(*hosts(2, **ROCE)), f.catalog(r), f.playbook({"rank": "h1:h2"}))
    ray = [u for u in engines(p) if u.argv[:2] == ("ray", "start")]
    assert len(ray) == 2
    for u in ray:
        assert u.env["MOONCAKE_CONFIG_PATH"] == f"/etc/fleet/{config_name(p, u)}"
        assert config_name(p, u) in p.files


def test_playbook_config_path_wins() -> None:
    r = vllm(mooncake_store=f.STORE)
    pb = f.playbook({"single": "h1"}, overrides=f.overrides(env={"MOONCAKE_CONFIG_PATH": "/opt/mc.json"}))
    (u,) = engines(plan(f.inventory(*hosts(1, **ROCE)), f.catalog(r), pb))
    assert u.env["MOONCAKE_CONFIG_PATH"] == "/opt/mc.json"


def test_sglang_keeps_its_env_and_gets_no_file() -> None:
    r = f.pd(mooncake_store=f.STORE)
    p = plan(f.inventory(*hosts(3, **ROCE)), f.catalog(r), f.playbook({"prefill": "h1:h2", "decode": "h3"}))
    assert p.files == {}
    for u in engines(p):
        assert "MOONCAKE_CONFIG_PATH" not in u.env
        assert (u.env["MOONCAKE_MASTER"], u.env["MOONCAKE_GLOBAL_SEGMENT_SIZE"]) == ("10.0.0.1:50051", "800gb")
        assert u.env["MOONCAKE_PROTOCOL"] == "rdma" and u.env["MOONCAKE_DEVICE"] == "mlx5_0,mlx5_1"
