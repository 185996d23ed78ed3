"""Per-host network env: IB vs RoCE vs none, per-host GID, facts, Ascend."""

from __future__ import annotations

import pytest

from launcher import network
from launcher.errors import PlanError
from launcher.plan import plan
from launcher.facts.host import GidEntry, HostFacts
from tests.plan import factory as f


def test_ib_env_has_no_gid_index_and_exact_match_names() -> None:
    h = f.host("a", "10.0.0.1", fabric="ib", hcas=("mlx5_0", "mlx5_1"), ib_sl=1)
    gid = network.gid_index(h, None)
    assert gid is None
    assert network.nccl_env(h, gid) == {
        "NCCL_SOCKET_IFNAME": "=eth1",
        "GLOO_SOCKET_IFNAME": "eth1",
        "NCCL_IB_HCA": "=mlx5_0:1,mlx5_1:1",
        "NCCL_IB_SL": "1",
    }


def test_roce_env_uses_each_hosts_own_gid_index() -> None:
    a = f.host("a", "10.0.0.1", fabric="roce", hcas=("mlx5_0",), gid_index=3, ib_tc=106)
    b = f.host("b", "10.0.0.2", fabric="roce", hcas=("mlx5_0",), gid_index=5)
    assert network.nccl_env(a, network.gid_index(a, None)) == {
        "NCCL_SOCKET_IFNAME": "=eth1",
        "GLOO_SOCKET_IFNAME": "eth1",
        "NCCL_IB_HCA": "=mlx5_0:1",
        "NCCL_IB_GID_INDEX": "3",
        "NCCL_IB_TC": "106",
    }
    assert network.nccl_env(b, network.gid_index(b, None))["NCCL_IB_GID_INDEX"] == "5"
    assert network.mooncake_env(b, 5, "rdma") == {
        "MOONCAKE_PROTOCOL": "rdma",
        "MOONCAKE_LOCAL_HOSTNAME": "10.0.0.2",
        "MOONCAKE_DEVICE": "mlx5_0",
        "MC_GID_INDEX": "5",
    }
    assert network.ucx_env(b, 5) == {"UCX_NET_DEVICES": "mlx5_0:1", "UCX_IB_GID_INDEX": "5"}


def test_no_fabric_disables_ib_and_forces_tcp() -> None:
    h = f.host("a", "10.0.0.1", fabric="none")
    assert network.nccl_env(h, None) == {
        "NCCL_SOCKET_IFNAME": "=eth1",
        "GLOO_SOCKET_IFNAME": "eth1",
        "NCCL_IB_DISABLE": "1",
    }
    assert network.mooncake_protocol(h) == "tcp"
    assert network.ucx_env(h, None) == {"UCX_NET_DEVICES": "eth1", "UCX_TLS": "tcp"}


def _gids(*entries: tuple[str, int, str]) -> HostFacts:
    return HostFacts(
        gids=tuple(
            GidEntry(hca=hca, port=1, index=i, gid="::", version=v, ipv4="10.1.0.1" if v == "v2" else None, netdev="e")
            for hca, i, v in entries
        )
    )


def test_auto_gid_index_resolves_from_facts() -> None:
    h = f.host("a", "10.0.0.1", fabric="roce", hcas=("mlx5_0", "mlx5_1"), gid_index="auto")
    facts = {"a": _gids(("mlx5_0", 0, "v1"), ("mlx5_0", 3, "v2"), ("mlx5_1", 3, "v2"))}
    assert network.gid_index(h, facts) == 3


def test_auto_gid_index_refuses_disagreeing_hcas() -> None:
    h = f.host("a", "10.0.0.1", fabric="roce", hcas=("mlx5_0", "mlx5_1"), gid_index="auto")
    facts = {"a": _gids(("mlx5_0", 3, "v2"), ("mlx5_1", 5, "v2"))}
    with pytest.raises(PlanError) as err:
        network.gid_index(h, facts)
    assert str(err.value) == (
        "inv.yaml:3:5: a/gid_index: HCAs have different RoCE v2 GID indices (mlx5_0=3, mlx5_1=5): "
        "set gid_index or hcas"
    )


def test_auto_gid_without_facts_says_run_fleet_facts() -> None:
    h = f.host("a", "10.0.0.1", fabric="roce", hcas=("mlx5_0",), gid_index="auto")
    with pytest.raises(PlanError) as err:
        network.gid_index(h, None)
    assert str(err.value) == "inv.yaml:3:5: a/gid_index: gid_index is auto but no facts were gathered: run `fleet facts`"


def test_a_plan_names_every_auto_gid_host_without_facts_and_the_command() -> None:
    a = f.host("a", "10.0.0.1", fabric="roce", hcas=("mlx5_0",), gid_index="auto")
    b = f.host("b", "10.0.0.2", fabric="roce", hcas=("mlx5_0",), gid_index="auto")
    with pytest.raises(PlanError) as err:
        plan(f.inventory(a, b), f.catalog(f.multinode()), f.playbook({"rank": "all"}))
    assert str(err.value) == (
        "inv.yaml:3:5: gid_index is auto on a, b but no facts are cached for them: "
        "run `fleet facts -i inv.yaml --limit a,b`"
    )
    # One node, no RDMA traffic: no GID index needed, so no facts either.
    single = plan(f.inventory(a), f.catalog(f.recipe()), f.playbook({"single": "a"}))
    assert all("NCCL_IB_GID_INDEX" not in u.env for u in single.units)


def test_multinode_ranks_get_their_own_host_env() -> None:
    a = f.host("a", "10.0.0.1", fabric="roce", hcas=("mlx5_0",), gid_index=3)
    b = f.host("b", "10.0.0.2", fabric="roce", hcas=("mlx5_0",), gid_index=5, nccl_ifname="eth2")
    r = f.multinode()
    p = plan(f.inventory(a, b), f.catalog(r), f.playbook({"rank": "all"}))
    env = {u.host: u.env for u in p.units}
    assert env["a"]["NCCL_IB_GID_INDEX"] == "3" and env["b"]["NCCL_IB_GID_INDEX"] == "5"
    assert env["a"]["GLOO_SOCKET_IFNAME"] == "eth1" and env["b"]["GLOO_SOCKET_IFNAME"] == "eth2"
    assert env["a"]["SGLANG_HOST_IP"] == "10.0.0.1" and env["b"]["SGLANG_HOST_IP"] == "10.0.0.2"


def test_ascend_units_get_hccl_env_and_davinci_devices() -> None:
    a = f.host("a", "10.0.0.1", gpu_model="Ascend-910B3", fabric="roce", hcas=(), gid_index=3)
    b = f.host("b", "10.0.0.2", gpu_model="Ascend-910B3", fabric="roce", hcas=(), gid_index=3)
    r = f.multinode(
        engine="vllm-ascend", engine_version="0.33.0", image="quay.io/ascend/vllm-ascend:v0.33.0",
        hardware=f.Hardware(skus=("Ascend-910B3",), gpus_per_node=2, nodes=2),
        parallelism=f.Parallelism(tp=2, pp=2),
    )
    p = plan(f.inventory(a, b), f.catalog(r), f.playbook({"rank": "all"}))
    u = p.units[1]
    assert u.host == "b"
    assert {k: u.env[k] for k in ("HCCL_IF_IP", "HCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "ASCEND_RT_VISIBLE_DEVICES")} == {
        "HCCL_IF_IP": "10.0.0.2",
        "HCCL_SOCKET_IFNAME": "eth1",
        "GLOO_SOCKET_IFNAME": "eth1",
        "ASCEND_RT_VISIBLE_DEVICES": "0,1",
    }
    assert "NCCL_SOCKET_IFNAME" not in u.env
    assert u.container is not None and u.container.gpus == ()
    assert u.container.devices == (
        "/dev/davinci0", "/dev/davinci1", "/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc", "/dev/infiniband",
    )
    assert any(m.host == "/etc/hccn.conf" for m in u.container.mounts)
