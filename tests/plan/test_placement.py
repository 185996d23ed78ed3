"""Placement, rank argv, PD wiring, overrides and container flags."""

from __future__ import annotations

import json

from launcher.engines import flags
from launcher.plan import auto_playbook, plan
from launcher.model import Gateway, HiCache, Parallelism, SecretRef, Unit
from tests.plan import factory as f

ROCE = dict(fabric="roce", hcas=("mlx5_0", "mlx5_1"), gid_index=3)


def hosts(n: int, **spec: object) -> tuple[f.Host, ...]:
    return tuple(f.host(f"h{i}", f"10.0.0.{i}", **spec) for i in range(1, n + 1))


def by_name(units: tuple[Unit, ...]) -> dict[str, Unit]:
    return {u.name: u for u in units}


def test_sglang_multinode_ranks_differ_only_in_node_rank() -> None:
    p = plan(f.inventory(*hosts(2, **ROCE)), f.catalog(f.multinode()), f.playbook({"rank": "all"}))
    r0, r1 = p.units
    assert (r0.name, r1.name) == ("fleet-x-rank0-r0", "fleet-x-rank0-r1")
    assert (r0.group, r1.group) == ("x/rank0", "x/rank0")
    assert flags.remove(r0.argv, ("--node-rank",)) == flags.remove(r1.argv, ("--node-rank",))
    assert flags.value(r1.argv, ("--node-rank",)) == "1"
    for u in (r0, r1):
        assert flags.value(u.argv, ("--dist-init-addr",)) == "10.0.0.1:20000"
        assert flags.value(u.argv, ("--nnodes",)) == "2"
        assert flags.value(u.argv, ("--host",)) == "0.0.0.0"
        assert u.container is not None
        assert u.container.devices == ("/dev/infiniband",) and u.container.cap_add == ("IPC_LOCK",)
        assert u.container.ulimits == ("memlock=-1",) and u.container.gpus == tuple(range(8))
    assert r0.health is not None and r0.health.url == "http://10.0.0.1:30000/health"
    assert r0.health.timeout_s == 900 and r1.health is None
    assert r0.ports == {"http": 30000, "dist_init": 20000} and r1.ports == {}


def test_vllm_multinode_mp_headless_on_workers() -> None:
    r = f.multinode(engine="vllm", engine_version="0.33.0", image="vllm/vllm-openai:v0.33.0")
    r0, r1 = plan(f.inventory(*hosts(2, **ROCE)), f.catalog(r), f.playbook({"rank": "all"})).units
    assert r0.argv[:3] == ("vllm", "serve", "org/model")
    assert flags.value(r0.argv, ("--master-addr",)) == "10.0.0.1" and not flags.has(r0.argv, ("--headless",))
    assert flags.has(r1.argv, ("--headless",))
    assert flags.remove(r0.argv, ("--node-rank", "--headless")) == flags.remove(r1.argv, ("--node-rank", "--headless"))
    assert r1.env["VLLM_HOST_IP"] == "10.0.0.2"


def test_vllm_ray_form_from_override() -> None:
    r = f.multinode(engine="vllm", engine_version="0.33.0", image="vllm/vllm-openai:v0.33.0")
    pb = f.playbook({"rank": "all"}, overrides=f.overrides(engine_args=("--distributed-executor-backend", "ray")))
    units = by_name(plan(f.inventory(*hosts(2, **ROCE)), f.catalog(r), pb).units)
    assert units["fleet-x-rank0-ray-r0"].argv == (
        "ray", "start", "--head", "--port", "6379", "--node-ip-address", "10.0.0.1", "--block",
    )
    assert units["fleet-x-rank0-ray-r1"].argv[:4] == ("ray", "start", "--address", "10.0.0.1:6379")
    serve = units["fleet-x-rank0-r0"]
    assert not flags.has(serve.argv, ("--nnodes",)) and flags.value(serve.argv, ("--distributed-executor-backend",)) == "ray"
    assert serve.wants == ("fleet-x-rank0-ray-r0", "fleet-x-rank0-ray-r1")


def test_single_replicas_share_a_host_with_disjoint_gpus_and_ports() -> None:
    r = f.recipe(hardware=f.Hardware(skus=("H100",), gpus_per_node=4), parallelism=Parallelism(tp=4))
    p = plan(f.inventory(*hosts(1)), f.catalog(r), f.playbook({"single": "h1"}, {"single": 2}))
    a, b = p.units
    assert (a.gpus, b.gpus) == ((0, 1, 2, 3), (4, 5, 6, 7))
    assert (a.ports["http"], b.ports["http"]) == (30000, 30001)
    assert not flags.has(a.argv, ("--base-gpu-id",))


def test_single_one_instance_per_matched_host() -> None:
    p = plan(f.inventory(*hosts(3)), f.catalog(f.recipe()), f.playbook({"single": "all"}))
    assert [(u.host, u.name) for u in p.units] == [
        ("h1", "fleet-x-single0-r0"), ("h2", "fleet-x-single1-r0"), ("h3", "fleet-x-single2-r0"),
    ]
    assert all("NCCL_SOCKET_IFNAME" not in u.env for u in p.units)
    assert all(u.container is not None and u.container.devices == () for u in p.units)


def test_sglang_pd_wiring() -> None:
    r = f.pd(mooncake_store=f.STORE, hicache=HiCache(storage_backend="mooncake"))
    p = plan(f.inventory(*hosts(3, **ROCE)), f.catalog(r), f.playbook({"prefill": "h1:h2", "decode": "h3"}))
    units = by_name(p.units)
    assert [u.name for u in p.units] == [
        "fleet-x-mooncake-master-r0", "fleet-x-decode0-r0", "fleet-x-prefill0-r0", "fleet-x-prefill1-r0",
        "fleet-x-router-r0",
    ]
    master = units["fleet-x-mooncake-master-r0"]
    assert master.host == "h1" and master.start_order == 0
    pre = units["fleet-x-prefill0-r0"]
    assert flags.value(pre.argv, ("--disaggregation-mode",)) == "prefill"
    assert flags.value(pre.argv, ("--disaggregation-bootstrap-port",)) == "8998"
    assert flags.value(pre.argv, ("--disaggregation-ib-device",)) == "mlx5_0,mlx5_1"
    assert flags.value(units["fleet-x-decode0-r0"].argv, ("--disaggregation-bootstrap-port",)) == "8998"
    assert pre.env["MOONCAKE_PROTOCOL"] == "rdma" and pre.env["MOONCAKE_MASTER"] == "10.0.0.1:50051"
    assert pre.env["MOONCAKE_GLOBAL_SEGMENT_SIZE"] == "800gb" and pre.env["MOONCAKE_LOCAL_BUFFER_SIZE"] == "32gb"
    assert pre.env["MC_GID_INDEX"] == "3" and pre.wants == ("fleet-x-mooncake-master-r0",)
    router = units["fleet-x-router-r0"]
    assert router.host == "h3" and router.start_order == 2
    assert router.argv == (
        "python3", "-m", "sglang_router.launch_router", "--pd-disaggregation",
        "--prefill", "http://10.0.0.1:30000", "8998", "--prefill", "http://10.0.0.2:30000", "8998",
        "--decode", "http://10.0.0.3:30000", "--host", "0.0.0.0", "--port", "8000", "--prometheus-port", "29000",
    )
    assert router.wants == ("fleet-x-prefill0-r0", "fleet-x-prefill1-r0", "fleet-x-decode0-r0")


def test_vllm_pd_nixl_env_and_proxy() -> None:
    r = f.pd(transfer="nixl", engine="vllm", engine_version="0.33.0", image="vllm/vllm-openai:v0.33.0",
             images=f.RoleImages(router="vllm/vllm-router:nightly"))
    pb = f.playbook({"prefill": "h1", "decode": "h2", "router": "h2"}, {"prefill": 2}, ports={"router": 8100})
    r16 = hosts(2, **ROCE, gpu_count=16)
    units = by_name(plan(f.inventory(*r16), f.catalog(r), pb).units)
    p0, p1 = units["fleet-x-prefill0-r0"], units["fleet-x-prefill1-r0"]
    assert (p0.host, p1.host) == ("h1", "h1") and (p0.gpus, p1.gpus) == (tuple(range(8)), tuple(range(8, 16)))
    assert (p0.env["VLLM_NIXL_SIDE_CHANNEL_PORT"], p1.env["VLLM_NIXL_SIDE_CHANNEL_PORT"]) == ("5600", "5608")
    assert p0.env["VLLM_NIXL_SIDE_CHANNEL_HOST"] == "10.0.0.1" and p0.env["UCX_NET_DEVICES"] == "mlx5_0:1,mlx5_1:1"
    kv = json.loads(flags.value(p0.argv, ("--kv-transfer-config",)) or "")
    assert kv == {"kv_connector": "NixlConnector", "kv_role": "kv_producer"}
    assert units["fleet-x-router-r0"].argv == (
        "vllm-router", "--vllm-pd-disaggregation", "--kv-connector", "nixl", "--prefill", "http://10.0.0.1:8000",
        "--prefill", "http://10.0.0.1:8001", "--decode", "http://10.0.0.2:8000", "--host", "0.0.0.0", "--port", "8100",
        "--prometheus-host", "0.0.0.0", "--prometheus-port", "29000",
    )


def test_overrides_replace_append_remove_env_image_and_drop() -> None:
    r = f.recipe(engine_args=("--moe-runner-backend", "triton", "--trust-remote-code"), env={"A": "1"})
    ov = f.overrides(
        engine_args=("--moe-runner-backend", "marlin", "--enable-cache-report"),
        remove_args=("--trust-remote-code",),
        env={"A": "2", "B": "3"},
        image="my/sglang:dev",
        docker_args=("--ulimit", "memlock=1048576:1048576"),
        drop_docker_flags=("--gpus", "--device", "--ulimit"),
        start_timeout_s=4000,
    )
    secret = SecretRef(name="HF_TOKEN", from_env="HF_TOKEN")
    (u,) = plan(f.inventory(*hosts(1)), f.catalog(r), f.playbook({"single": "h1"}, overrides=ov, secrets=(secret,))).units
    assert u.argv[-3:] == ("--moe-runner-backend", "marlin", "--enable-cache-report")
    assert flags.values(u.argv, ("--moe-runner-backend",)) == (("marlin",),)
    assert flags.has(u.argv, ("--enable-cache-report",)) and not flags.has(u.argv, ("--trust-remote-code",))
    assert u.env["A"] == "2" and u.env["B"] == "3"
    assert u.container is not None and u.container.image == "my/sglang:dev"
    assert u.container.gpus == () and u.container.devices == () and u.container.ulimits == ()
    assert u.container.extra_args == ("--ulimit", "memlock=1048576:1048576")
    assert u.gpus == tuple(range(8))
    assert u.health is not None and u.health.timeout_s == 4000
    assert u.secrets == (secret,) and "HF_TOKEN" not in u.env


def test_gateway_routes_model_to_instances() -> None:
    r = f.recipe(gateway=Gateway(route="model-route"))
    p = plan(f.inventory(*hosts(2)), f.catalog(r), f.playbook({"single": "all"}))
    gw = by_name(p.units)["fleet-x-gateway-r0"]
    assert gw.start_order == 3 and gw.wants == ("fleet-x-single0-r0", "fleet-x-single1-r0")
    conf = p.files["gateway/x.conf"]
    assert "server 10.0.0.1:30000;" in conf and "server 10.0.0.2:30000;" in conf
    assert 'model ~= "model-route"' in conf and "listen 9080;" in conf
    assert gw.container is not None and gw.container.mounts[0].host == "/etc/fleet/gateway/x.conf"


def test_auto_playbook_picks_first_fitting_hosts_and_free_router_port() -> None:
    inv = f.inventory(
        f.host("a100", "10.0.0.9", gpu_model="A100"),
        *hosts(3, **ROCE),
    )
    pb = auto_playbook(f.pd(engine="vllm", engine_version="0.33.0"), inv)
    assert {r: p.hosts for r, p in pb.placement.items()} == {"prefill": "h1:h2", "decode": "h3"}
    assert pb.ports == {"router": 8100}
    single = auto_playbook(f.recipe(), inv)
    assert single.placement["single"].hosts == "h1"
