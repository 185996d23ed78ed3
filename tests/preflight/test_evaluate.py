"""Preflight rules on hand-built plans and facts: each failure names the host and the fix."""

from __future__ import annotations

from launcher import preflight
from launcher.facts import GidEntry, Gpu, HostFacts, IbPort, Interface
from launcher.model import (
    ContainerSpec, Hardware, Host, HostSpec, Inventory, Mount, Parallelism, Plan, Quantization,
    Recipe, Unit,
)

RECIPE = Recipe(
    id="deepseek/sglang-tp8pp2-6000d", family="deepseek", catalog_entry=33, summary="s",
    model="deepseek-ai/DeepSeek-V3.2", served_model_name=None, engine="sglang",
    engine_version="0.5.23", image="img", topology="multinode",
    hardware=Hardware(skus=("RTX-6000D",), gpus_per_node=8, nodes=2),
    parallelism=Parallelism(tp=8, pp=2), quantization=Quantization(weight_format="fp8-e4m3"),
)


def host(name: str, ip: str, gid: int, ifname: str = "ens1f0") -> Host:
    return Host(name=name, address=ip, spec=HostSpec(
        gpu_model="RTX-6000D", gpu_count=8, fabric="roce", hcas=("mlx5_0",), gid_index=gid,
        nccl_ifname=ifname, data_ip=ip, models_dir="/models"))


def facts_for(ip: str, gid_at: int, mtu: int = 9000, hca: str = "mlx5_0") -> HostFacts:
    mapped = "0000:0000:0000:0000:0000:ffff:" + "".join(f"{int(o):02x}" for o in ip.split("."))
    mapped = mapped[:34] + ":" + mapped[34:]
    return HostFacts(
        gpus=tuple(Gpu(index=i, name="NVIDIA RTX PRO 6000D", sku="RTX-6000D", memory_mib=83968,
                       driver="580.82.07") for i in range(8)),
        ib_ports=(IbPort(hca=hca, port=1, state="PORT_ACTIVE", link_layer="Ethernet", active_mtu=4096),),
        gids=(GidEntry(hca=hca, port=1, index=gid_at, gid=mapped, version="v2", ipv4=ip, netdev="ens1f0"),),
        interfaces=(Interface(name="ens1f0", mtu=mtu, up=True, ipv4=(ip,)),),
        docker_version="27.3.1", docker_runtimes=("nvidia", "runc"), dev_infiniband=("uverbs0",),
    )


def unit(h: Host, rank: int, gid: int) -> Unit:
    return Unit(
        host=h.name, name=f"fleet-ds-rank0-r{rank}", deployment="ds", role="rank", group="ds/rank0",
        rank=rank, nnodes=2, gpus=tuple(range(8)), ports={"http": 30000, "dist_init": 20000},
        argv=("python3", "-m", "sglang.launch_server", "--model-path", "/models/deepseek-ai/DeepSeek-V3.2"),
        env={"NCCL_IB_GID_INDEX": str(gid)},
        container=ContainerSpec(image="img", mounts=(Mount(host="/models", container="/models", read_only=True),)),
    )


def setup(gid_a: int = 3, gid_b: int = 5, facts_b: HostFacts | None = None) -> tuple[Plan, Inventory, dict[str, HostFacts]]:
    a, b = host("gpu-01", "10.0.11.1", gid_a), host("gpu-02", "10.0.11.2", gid_b)
    inv = Inventory(path="inv.yaml", hosts=(a, b), groups={})
    plan = Plan(deployment="ds", recipe=RECIPE.id, units=(unit(a, 0, gid_a), unit(b, 1, gid_b)))
    facts = {"gpu-01": facts_for("10.0.11.1", 3), "gpu-02": facts_b or facts_for("10.0.11.2", 5)}
    return plan, inv, facts


def fails(checks: tuple[preflight.Check, ...]) -> list[tuple[str, str, str]]:
    return [(c.host, c.name, c.message) for c in preflight.failed(checks)]


def test_all_pass_with_per_host_gid_3_and_5() -> None:
    plan, inv, facts = setup()
    checks = preflight.evaluate(plan, inv, RECIPE, facts)
    assert fails(checks) == []
    assert {c.message for c in checks if c.name == "gid mlx5_0"} == {"NCCL_IB_GID_INDEX=3", "NCCL_IB_GID_INDEX=5"}


def test_one_global_gid_index_fails_on_the_host_that_differs() -> None:
    plan, inv, facts = setup(gid_a=3, gid_b=3)
    assert fails(preflight.evaluate(plan, inv, RECIPE, facts)) == [
        ("gpu-02", "gid mlx5_0", "NCCL_IB_GID_INDEX=3 but mlx5_0's RoCE v2 IPv4 GID is at index 5"),
    ]


def test_missing_hca_fails_naming_host() -> None:
    plan, inv, facts = setup(facts_b=facts_for("10.0.11.2", 5, hca="mlx5_7"))
    assert ("gpu-02", "hca mlx5_0", "HCA mlx5_0 not found (ibv_devinfo lists mlx5_7)") in fails(
        preflight.evaluate(plan, inv, RECIPE, facts))


def test_mtu_mismatch_across_ranks() -> None:
    plan, inv, facts = setup(facts_b=facts_for("10.0.11.2", 5, mtu=1500))
    assert ("gpu-01", "mtu", "MTU differs across the ranks of ds/rank0: gpu-01=9000, gpu-02=1500") in fails(
        preflight.evaluate(plan, inv, RECIPE, facts))


def test_no_facts_is_a_failure_with_the_command_to_run() -> None:
    plan, inv, facts = setup()
    del facts["gpu-02"]
    (c,) = preflight.failed(preflight.evaluate(plan, inv, RECIPE, facts))
    assert (c.host, c.message, c.fix) == ("gpu-02", "no facts gathered", "run: fleet facts -i <inventory> --limit gpu-02")


def test_probe_port_taken_and_weights_missing() -> None:
    plan, inv, facts = setup()
    text = "### ports\n0.0.0.0:22\n0.0.0.0:30000\n[::]:8080\n### containers\n### path /models/deepseek-ai/DeepSeek-V3.2 absent\n"
    ports, names, paths = preflight.parse_probe(text)
    assert ports == frozenset({22, 30000, 8080}) and names == frozenset()
    probes = preflight.ProbeResults(
        listening_ports={"gpu-01": ports, "gpu-02": frozenset()},
        running_units={"gpu-01": names, "gpu-02": frozenset()},
        path_bytes={"gpu-01": {"/models/deepseek-ai/DeepSeek-V3.2": 1000}, "gpu-02": paths},
    )
    assert fails(preflight.evaluate(plan, inv, RECIPE, facts, probes)) == [
        ("gpu-01", "ports", "port 30000 already in use"),
        ("gpu-02", "weights", "weights missing: /models/deepseek-ai/DeepSeek-V3.2"),
    ]


def test_our_own_running_unit_does_not_count_as_a_taken_port() -> None:
    plan, inv, facts = setup()
    probes = preflight.ProbeResults(listening_ports={"gpu-01": frozenset({30000})},
                                    running_units={"gpu-01": frozenset({"fleet-ds-rank0-r0"})})
    assert fails(preflight.evaluate(plan, inv, RECIPE, facts, probes)) == []


def test_weight_paths_and_probe_argv_quote_paths() -> None:
    plan, _, _ = setup()
    assert preflight.weight_paths(plan) == {
        "gpu-01": ("/models/deepseek-ai/DeepSeek-V3.2",), "gpu-02": ("/models/deepseek-ai/DeepSeek-V3.2",)}
    argv = preflight.probe_argv(("/models/a b",))
    assert argv[:2] == ["sh", "-c"] and "'/models/a b'" in argv[2]
