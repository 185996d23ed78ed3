"""A router placed in front of single / multinode instances (regular mode): its unit, argv, URLs,
start order, ports, the gateway behind it, the engines it refuses, and the parsers' verdict on
every router argv the repo's playbooks plan."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from launcher.config.playbook import load_playbook
from launcher.engines import router
from launcher.engines.argcheck import check_argv, known_versions, split_command
from launcher.errors import PlanError
from launcher.model import Gateway, Parallelism, Playbook, Recipe, Role, RoleImages, Source, Unit
from launcher.plan import plan
from tests.plan import factory as f
from tests.plan.test_catalog import ROOT, inputs
from tests.plan.test_golden import playbook_paths, sandbox_inventory

ROCE = dict(fabric="roce", hcas=("mlx5_0", "mlx5_1"), gid_index=3)
ROUTER_LINE = Source(path="playbooks/x.yaml", line=9, col=5)
TP4 = dict(hardware=f.Hardware(skus=("H100",), gpus_per_node=4), parallelism=Parallelism(tp=4))
# vLLM's image does not carry vllm-router (launcher/engines/images.py): the router has its own.
VLLM = dict(engine="vllm", engine_version="0.33.0", image="vllm/vllm-openai:v0.33.0",
            images=RoleImages(router="vllm/vllm-router:nightly"))


def fleet(n: int, **spec: object) -> tuple[f.Host, ...]:
    """Hosts whose data IPs (192.168.0.x) differ from their SSH addresses (10.0.0.x)."""
    return tuple(f.host(f"h{i}", f"10.0.0.{i}", data_ip=f"192.168.0.{i}", **spec) for i in range(1, n + 1))


def ctl() -> f.Host:
    return f.host("ctl", "10.0.1.1", gpu_model=None, gpu_count=0, data_ip="192.168.1.1")


def routed(placement: dict[Role, str], replicas: dict[str, int] | None = None, **kw: object) -> Playbook:
    """A playbook whose router placement sits on its own line (the one refusals must name)."""
    pb = f.playbook(placement, replicas, **kw)
    router = dataclasses.replace(pb.placement["router"], source=ROUTER_LINE)
    return dataclasses.replace(pb, placement={**pb.placement, "router": router})


def router_of(units: tuple[Unit, ...]) -> Unit:
    (r,) = [u for u in units if u.role == "router"]
    return r


def refusal(r: Recipe, pb: Playbook, *hosts: f.Host) -> str:
    with pytest.raises(PlanError) as err:
        plan(f.inventory(*hosts), f.catalog(r), pb)
    return str(err.value)


def test_sglang_replicas_behind_a_router_on_data_ips() -> None:
    p = plan(f.inventory(*fleet(2), ctl()), f.catalog(f.recipe(**TP4)), routed({"single": "h1:h2", "router": "ctl"}, {"single": 4}))
    assert [u.name for u in p.units] == [
        "fleet-x-single0-r0", "fleet-x-single1-r0", "fleet-x-single2-r0", "fleet-x-single3-r0", "fleet-x-router-r0",
    ]
    r = router_of(p.units)
    assert r.argv == (
        "python3", "-m", "sglang_router.launch_router", "--worker-urls",
        "http://192.168.0.1:30000", "http://192.168.0.2:30000", "http://192.168.0.1:30001", "http://192.168.0.2:30001",
        "--host", "0.0.0.0", "--port", "8000", "--prometheus-port", "29000",
    )  # fmt: skip
    assert (r.host, r.group, r.start_order, r.gpus) == ("ctl", "x/router", 2, ())
    assert r.ports == {"router": 8000, "router_metrics": 29000}
    assert r.health is not None and r.health.url == "http://192.168.1.1:8000/health" and r.health.timeout_s == 300
    assert r.wants == ("fleet-x-single0-r0", "fleet-x-single1-r0", "fleet-x-single2-r0", "fleet-x-single3-r0")
    assert r.container is not None and r.container.image == "lmsysorg/sglang:v0.5.23" and r.container.gpus == ()
    assert all(u.start_order == 1 for u in p.units if u.role == "single")


def test_multinode_router_points_at_rank_zero_only() -> None:
    inv = f.inventory(*fleet(4, **ROCE), ctl())
    p = plan(inv, f.catalog(f.multinode()), routed({"rank": "h1:h2:h3:h4", "router": "ctl"}))
    r = router_of(p.units)
    assert r.argv[3:6] == ("--worker-urls", "http://192.168.0.1:30000", "http://192.168.0.3:30000")
    assert r.argv[6] == "--host"
    assert r.wants == ("fleet-x-rank0-r0", "fleet-x-rank1-r0")
    assert p.units[-1] is r, "the router starts after every rank"


def test_vllm_replicas_behind_vllm_router() -> None:
    r16 = fleet(1, gpu_count=16)
    p = plan(f.inventory(*r16, ctl()), f.catalog(f.recipe(**VLLM)), routed({"single": "h1", "router": "ctl"}, {"single": 2}))
    assert router_of(p.units).argv == (
        "vllm-router", "--worker-urls", "http://192.168.0.1:8000", "http://192.168.0.1:8001", "--host", "0.0.0.0",
        "--port", "8000", "--prometheus-host", "0.0.0.0", "--prometheus-port", "29000",
    )


def test_planned_vllm_router_argv_passes_the_router_parser() -> None:
    r16 = fleet(1, gpu_count=16)
    p = plan(f.inventory(*r16, ctl()), f.catalog(f.recipe(**VLLM)), routed({"single": "h1", "router": "ctl"}, {"single": 2}))
    engine, args = split_command(router_of(p.units).argv)
    assert (engine, check_argv(engine, "0.1.17", args)) == ("vllm-router", ())


def test_vllm_pd_router_with_mooncake_names_each_bootstrap_port() -> None:
    """vllm-router queries http://<prefill host>:<port>/query, port 8998 unless --prefill gives one."""
    argv = router.vllm_pd_argv(
        ("http://10.0.0.1:8000", "http://10.0.0.1:8001"), ("http://10.0.0.2:8000",), 8100, 29100, "mooncake", (8998, 8999)
    )
    assert argv == (
        "vllm-router", "--vllm-pd-disaggregation", "--kv-connector", "mooncake",
        "--prefill", "http://10.0.0.1:8000", "8998", "--prefill", "http://10.0.0.1:8001", "8999",
        "--decode", "http://10.0.0.2:8000", "--host", "0.0.0.0", "--port", "8100",
        "--prometheus-host", "0.0.0.0", "--prometheus-port", "29100",
    )  # fmt: skip
    assert check_argv("vllm-router", "0.1.17", argv[1:]) == ()
    with pytest.raises(ValueError) as err:
        router.vllm_pd_argv(("http://10.0.0.1:8000",), ("http://10.0.0.2:8000",), 8100, 29100, "mooncake")
    assert str(err.value) == "vllm-router with mooncake needs one bootstrap port per prefill"


def test_vllm_ray_instance_router_wants_the_serve_unit() -> None:
    r = f.multinode(**VLLM)
    ov = f.overrides(engine_args=("--distributed-executor-backend", "ray"))
    p = plan(f.inventory(*fleet(2, **ROCE), ctl()), f.catalog(r), routed({"rank": "h1:h2", "router": "ctl"}, overrides=ov))
    router = router_of(p.units)
    assert router.wants == ("fleet-x-rank0-r0",) and router.argv[1:3] == ("--worker-urls", "http://192.168.0.1:8000")


def test_router_ports_from_the_playbook() -> None:
    pb = routed({"single": "h1", "router": "h1"}, ports={"router": 8100, "router_metrics": 29100})
    r = router_of(plan(f.inventory(*fleet(1)), f.catalog(f.recipe()), pb).units)
    assert r.ports == {"router": 8100, "router_metrics": 29100}
    assert r.argv[-4:] == ("--port", "8100", "--prometheus-port", "29100")


def test_gateway_sends_traffic_to_the_router() -> None:
    rec = f.recipe(gateway=Gateway(route="model-route"))
    p = plan(f.inventory(*fleet(2), ctl()), f.catalog(rec), routed({"single": "h1:h2", "router": "ctl"}))
    gw = next(u for u in p.units if u.role == "gateway")
    assert (gw.host, gw.start_order, gw.wants) == ("ctl", 3, ("fleet-x-router-r0",))
    conf = p.files["gateway/x.conf"]
    assert "    server 192.168.1.1:8000;\n}" in conf and ":30000;" not in conf


def test_no_router_placement_no_router() -> None:
    p = plan(f.inventory(*fleet(2)), f.catalog(f.recipe()), f.playbook({"single": "all"}))
    assert [u.role for u in p.units] == ["single", "single"]


def test_vllm_router_on_an_engine_host_moves_off_8000() -> None:
    # Issue 16 item 17: 8000 is vLLM's HTTP port and the router's default; this failed to plan.
    p = plan(f.inventory(*fleet(1)), f.catalog(f.recipe(**VLLM)), routed({"single": "h1", "router": "h1"}))
    r = router_of(p.units)
    assert (r.host, r.ports) == ("h1", {"router": 8100, "router_metrics": 29000})
    assert [u.ports for u in p.units if u.role == "single"] == [{"http": 8000}]
    # An explicit port is the operator's: kept, and a collision is still refused.
    pb = routed({"single": "h1", "router": "h1"}, ports={"router": 8000})
    assert refusal(f.recipe(**VLLM), pb, *fleet(1)) == (
        "playbooks/x.yaml:1:1: ports: port 8000 on host h1 is used by both fleet-x-single0-r0 (http) and "
        "fleet-x-router-r0 (router)"
    )


def test_router_metrics_port_collision() -> None:
    pb = routed({"single": "h1", "router": "h1"}, ports={"router_metrics": 30000})
    assert refusal(f.recipe(), pb, *fleet(1)) == (
        "playbooks/x.yaml:1:1: ports: port 30000 on host h1 is used by both fleet-x-single0-r0 (http) and "
        "fleet-x-router-r0 (router_metrics)"
    )


def test_ascend_router_is_refused_at_the_router_line() -> None:
    npu = f.host("a", "10.0.0.1", gpu_model="Ascend-910B3")
    r = f.recipe(
        engine="vllm-ascend", engine_version="0.33.0", image="quay.io/ascend/vllm-ascend:v0.33.0",
        hardware=f.Hardware(skus=("Ascend-910B3",), gpus_per_node=8),
    )  # fmt: skip
    assert refusal(r, routed({"single": "a", "router": "ctl"}), npu, ctl()) == (
        "playbooks/x.yaml:9:5: placement/router: a router in front of vllm-ascend instances is not supported: "
        "fleet knows the router flags of sglang and vllm engines only; remove the router placement"
    )


def test_planned_sglang_router_argv_passes_the_router_parser() -> None:
    p = plan(f.inventory(*fleet(2), ctl()), f.catalog(f.recipe(**TP4)), routed({"single": "h1:h2", "router": "ctl"}, {"single": 4}))
    engine, args = split_command(router_of(p.units).argv)
    assert (engine, check_argv(engine, "0.3.2", args)) == ("sglang-router", ())


@pytest.mark.parametrize("path", playbook_paths(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_playbook_router_argv_passes_the_router_parser(path: Path) -> None:
    """PD and regular routers alike, sglang-router and vllm-router, at their newest snapshot."""
    catalog, example = inputs()
    inventory = sandbox_inventory() if path.parent.name in ("sandbox", "bench") else example
    p = plan(inventory, catalog, load_playbook(path, catalog, inventory))
    for u in p.units:
        if u.role == "router":
            engine, args = split_command(u.argv)
            assert check_argv(engine, known_versions(engine)[-1], args) == (), u.name


def test_the_example_playbooks_place_a_regular_router() -> None:
    catalog, example = inputs()
    path = ROOT / "playbooks" / "router" / "single-qwen-h100.yaml"
    r = router_of(plan(example, catalog, load_playbook(path, catalog, example)).units)
    assert r.host == "ctl-01" and "--pd-disaggregation" not in r.argv
    assert r.argv.count("--worker-urls") == 1 and len(r.wants) == 8
