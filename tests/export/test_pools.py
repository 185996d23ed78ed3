"""``fleet export k8s RECIPE --pools FILE``: node pools instead of an inventory.  The pools'
stand-in hosts are planned by the same planner; their nodes are picked by the pools' labels;
``auto`` GID index / NIC are derived on the node; no stand-in address reaches a manifest."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from launcher.cli import cli
from launcher.errors import InputError
from launcher.export.k8s import run
from launcher.export.k8s.podcheck import pod_templates
from launcher.export.k8s.pools import load_pools
from launcher.pipeline import planned
from tests.export.helpers import ROOT
from tests.plan.test_catalog import recipe_ids

POOLS = str(ROOT / "pools" / "example.yaml")


def export(target: str, pools: str = POOLS) -> run.Written:
    inputs, nodes = run.load(target, inventory_path=None, pools_path=pools)
    return run.build(inputs, planned(inputs), nodes, "default", target)


@pytest.mark.parametrize("recipe_id", ["glm/sglang-pd-tp8pp2ep8-6000d", "kimi/vllm-tp8pp4-6000d", "qwen/sglang-tp2-h100",
                                       "deepseek/vllm-pd-tp8-6000d-nvfp4"])  # fmt: skip
def test_pool_exports_validate_and_carry_no_standin_address(recipe_id: str) -> None:
    written = export(recipe_id)
    assert run.check(written) == []
    text = "".join(written.files.values())
    assert not re.search(r"198\.1[89]\.", text)
    assert "nodes.sh" not in written.files  # pools are labelled by their owner


def test_auto_gid_and_nic_are_derived_on_the_node() -> None:
    written = export("kimi/vllm-tp8pp4-6000d")
    (lws,) = [m.obj for m in written.export.manifests if m.obj["kind"] == "LeaderWorkerSet"]
    for _, pod in pod_templates(lws):
        spec = pod["spec"]
        assert spec["nodeSelector"] == {"fleet.io/pool": "rtx6000d"}
        assert spec["initContainers"][0]["command"][3:] == [
            "/run/fleet/net.env", "mlx5_0,mlx5_1", "GLOO_SOCKET_IFNAME", "NCCL_IB_GID_INDEX", "NCCL_SOCKET_IFNAME",
        ]  # fmt: skip
        env = {e["name"] for e in spec["containers"][0]["env"]}
        assert not env & {"GLOO_SOCKET_IFNAME", "NCCL_IB_GID_INDEX", "NCCL_SOCKET_IFNAME"}
        assert spec["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": 8, "rdma/hca": 1}
        assert {"name": "models", "persistentVolumeClaim": {"claimName": "models", "readOnly": True}} in spec["volumes"]


def test_a_fixed_pool_keeps_literal_env_and_its_selector() -> None:
    written = export("kimi/sglang-tp8pp2-h100")
    (lws,) = [m.obj for m in written.export.manifests if m.obj["kind"] == "LeaderWorkerSet"]
    for _, pod in pod_templates(lws):
        spec = pod["spec"]
        assert "initContainers" not in spec
        assert spec["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
        env = {e["name"]: e.get("value") for e in spec["containers"][0]["env"]}
        assert env["NCCL_SOCKET_IFNAME"] == "=ens10f0"
        assert spec["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": 8, "rdma/ib": 1}


def test_too_small_pools_are_refused_like_an_inventory(tmp_path: Path) -> None:
    pools = tmp_path / "p.yaml"
    pools.write_text("pools:\n  - {name: small, nodes: 1, gpu_model: RTX-6000D, gpu_count: 8, fabric: roce, gid_index: 3, nccl_ifname: eth0}\n")
    r = CliRunner().invoke(cli, ["export", "k8s", "kimi/vllm-tp8pp4-6000d", "--pools", str(pools), "-o", str(tmp_path / "o")])
    assert r.exit_code == 2
    assert "recipe kimi/vllm-tp8pp4-6000d needs" in r.output and "fitting host(s)" in r.output


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("pools: []\n", "p.yaml:1:1: pools: no pools"),
        ("pools:\n  - {name: a, nodes: 1, gpu_model: H100, gpu_count: 8, colour: red}\n",
         "p.yaml:2:56: pools/0: unknown key 'colour'"),
        ("pools:\n  - {name: a, nodes: 1, gpu_model: H100, gpu_count: 8}\n  - {name: a, nodes: 1, gpu_model: H100, gpu_count: 8}\n",
         "p.yaml:3:5: pools/1/name: pool 'a' is named twice"),
        ("pools:\n  - {name: A_1, nodes: 1, gpu_model: H100, gpu_count: 8}\n",
         "p.yaml:2:5: pools/0/name: pool name 'A_1': lowercase letters, digits and '-' (at most 42)"),
        ("pools:\n  - {name: a, nodes: 0, gpu_model: H100, gpu_count: 8}\n", "p.yaml:2:5: pools/0: nodes and gpu_count must be at least 1"),
        ("pools:\n  - {name: a, nodes: 1, gpu_model: H100, gpu_count: 8, node_selector: {k: 'a b'}}\n",
         "p.yaml:2:5: pools/0/node_selector: node_selector k: 'a b' is not a label value"),
    ],
)
def test_pool_file_errors_name_the_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, message: str) -> None:
    monkeypatch.chdir(tmp_path)
    Path("p.yaml").write_text(text)
    with pytest.raises(InputError) as err:
        load_pools("p.yaml")
    assert str(err.value) == message


def _fits_the_example_pools(recipe_id: str) -> bool:
    from tests.plan.test_catalog import inputs

    return bool({"H100", "RTX-6000D"} & set(inputs()[0].get(recipe_id).hardware.skus))


@pytest.mark.parametrize("recipe_id", [r for r in recipe_ids() if _fits_the_example_pools(r)])
def test_every_recipe_that_fits_the_example_pools_exports_on_them(recipe_id: str) -> None:
    written = export(recipe_id)
    assert run.check(written) == []
    assert not re.search(r"198\.1[89]\.", "".join(written.files.values()))


def test_playbook_kubernetes_keys_and_flags(tmp_path: Path) -> None:
    """The RDMA resource, models PVC and namespace: the flag, else the playbook's ``kubernetes:``,
    else the pool's; a playbook on pools places roles by pool name."""
    playbook = tmp_path / "pb.yaml"
    playbook.write_text(
        "name: kimi\nrecipe: kimi/sglang-tp8pp2-h100\nplacement:\n  rank: {hosts: h100}\n"
        "kubernetes: {namespace: llm, rdma_resource: rdma/roce, models_pvc: weights}\n"
    )
    written, problems = run.export_target(str(playbook), inventory_path=None, pools_path=POOLS)
    assert problems == []
    (lws,) = [m.obj for m in written.export.manifests if m.obj["kind"] == "LeaderWorkerSet"]
    spec = lws["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]
    assert lws["metadata"]["namespace"] == "llm"
    assert spec["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": 8, "rdma/roce": 1}
    assert {"name": "models", "persistentVolumeClaim": {"claimName": "weights", "readOnly": True}} in spec["volumes"]
    written, _ = run.export_target(str(playbook), inventory_path=None, pools_path=POOLS, namespace="prod",
                                   rdma_resource="rdma/x")  # fmt: skip
    (lws,) = [m.obj for m in written.export.manifests if m.obj["kind"] == "LeaderWorkerSet"]
    assert lws["metadata"]["namespace"] == "prod"
    assert lws["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]["containers"][0]["resources"]["limits"]["rdma/x"] == 1
