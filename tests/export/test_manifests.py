"""What the exporter refuses or rewrites beyond the catalog's shapes: a regular-mode router over
instances fleet packs onto one host, values that differ between the hosts of one template, a host
address with no Kubernetes equivalent, and ``$(`` in fleet's values."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.export.k8s import run
from launcher.export.k8s.podcheck import pod_templates
from launcher.export.k8s.pods import shown_argv
from launcher.export.k8s.templates import ExportError
from launcher.pipeline import planned
from tests.export.helpers import ROOT, exported

# Never contacted: planning and exporting are pure.
INVENTORY = """all:
  vars: {gpu_model: RTX-6000D, gpu_count: 8, fabric: roce, gid_index: 3, hcas: [mlx5_0], nccl_ifname: eth0}
  hosts:
    a: {ansible_host: 198.18.0.1}
    b: {ansible_host: 198.18.0.2}
    c: {ansible_host: 198.18.0.3}
    d: {ansible_host: 198.18.0.4, hcas: [mlx5_1]}
"""


def export_in(tmp_path: Path, playbook: str) -> run.Written:
    (tmp_path / "inv.yaml").write_text(INVENTORY)
    (tmp_path / "pb.yaml").write_text(playbook)
    inputs, nodes = run.load(str(tmp_path / "pb.yaml"), inventory_path=str(tmp_path / "inv.yaml"), pools_path=None)
    return run.build(inputs, planned(inputs), nodes, "default", "pb.yaml")


def test_regular_router_over_packed_instances() -> None:
    written = exported(str(ROOT / "playbooks" / "router" / "single-qwen-h100.yaml"))
    assert run.check(written) == []
    engines = next(m.obj for m in written.export.manifests if m.file == "deployment-qwen-router.yaml")
    assert engines["spec"]["replicas"] == 8
    spec = engines["spec"]["template"]["spec"]
    assert "hostNetwork" not in spec  # 4 instances per host, one port: a network namespace each
    assert shown_argv(spec["containers"][0])[shown_argv(spec["containers"][0]).index("--port") + 1] == "30000"
    router = next(m.obj for m in written.export.manifests if m.file == "deployment-qwen-router-router.yaml")
    argv = shown_argv(router["spec"]["template"]["spec"]["containers"][0])
    assert "--worker-urls" not in argv
    assert argv[argv.index("--service-discovery") :] == (
        "--service-discovery", "--selector", "fleet.io/deployment=qwen-router", "fleet.io/role=single",
        "--service-discovery-port", "30000", "--service-discovery-namespace", "default",
    )  # fmt: skip
    assert any("side by side on one host on distinct ports" in n for n in written.notes)


def test_values_the_hosts_disagree_on_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ExportError) as err:
        export_in(tmp_path, "name: pp\nrecipe: kimi/vllm-tp8pp4-6000d\nplacement:\n  rank: {hosts: 'a:b:c:d'}\n")
    assert str(err.value) == (
        "env NCCL_IB_HCA differs between fleet-pp-rank0-r1 ('=mlx5_0:1') and fleet-pp-rank0-r3 ('=mlx5_1:1') "
        "on one pod template, and is not a value fleet can derive on the node"
    )


def test_a_host_address_with_no_equivalent_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ExportError) as err:
        export_in(tmp_path, "name: one\nrecipe: deepseek/sglang-tp4-6000d\nplacement:\n  single: {hosts: a}\n"
                            "overrides:\n  env: {PEER: 'http://198.18.0.2:9999'}\n")  # fmt: skip
    assert str(err.value) == (
        "unit fleet-one-single0-r0 env PEER: 'http://198.18.0.2:9999' names host address 198.18.0.2, which has no "
        "Kubernetes equivalent here"
    )


def test_dollar_parens_are_not_expanded_by_kubernetes(tmp_path: Path) -> None:
    written = export_in(tmp_path, "name: one\nrecipe: deepseek/sglang-tp4-6000d\nplacement:\n  single: {hosts: a}\n"
                                  "overrides:\n  env: {STAMP: '$(date)'}\n")  # fmt: skip
    (pod,) = [p for m in written.export.manifests for _, p in pod_templates(m.obj)]
    assert {"name": "STAMP", "value": "$$(date)"} in pod["spec"]["containers"][0]["env"]
    assert run.check(written) == []


def test_a_native_systemd_unit_runs_in_the_recipes_image() -> None:
    """inventories/example.yaml's a100 box runs its engine natively (runtime: systemd): in a pod it
    runs in the recipe's image, the device plugin picks the GPU (no CUDA_VISIBLE_DEVICES)."""
    written = exported(str(ROOT / "playbooks" / "single-qwen-a100.yaml"))
    assert run.check(written) == []
    (pod,) = [p for m in written.export.manifests for _, p in pod_templates(m.obj)]
    container = pod["spec"]["containers"][0]
    assert container["image"] == "lmsysorg/sglang:v0.5.23-cu130"
    assert container["resources"] == {"limits": {"nvidia.com/gpu": 1}}
    assert "CUDA_VISIBLE_DEVICES" not in {e["name"] for e in container["env"]}
    assert any("natively under systemd" in n for n in written.notes)
