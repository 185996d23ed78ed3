"""`fleet recipes …` and `fleet inventory …` through click's CliRunner: output and exact errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from launcher.cli import cli
from tests.config.conftest import FIXTURES, REPO

EXAMPLE = str(REPO / "inventories" / "example.yaml")


@pytest.fixture(autouse=True)
def fixture_catalog(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLEET_RECIPES_DIR", str(FIXTURES / "recipes"))


def run(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def run_json(*args: str) -> object:
    result = run(*args, "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert result.stdout.strip() == json.dumps(data, indent=2, sort_keys=True)  # stable: sorted keys
    return data


def test_list_json_in_entry_order() -> None:
    data = run_json("recipes", "list")
    assert isinstance(data, list)
    assert [r["id"] for r in data] == [
        "qwen/vllm-single-a100-tuned",
        "glm/sglang-pd-6000d",
        "qwen/vllm-single-a100",
        "deepseek/sglang-multinode-pp2-6000d",
    ]
    glm = data[1]
    assert glm["hardware"] == "8×RTX-6000D×2"
    assert glm["parallelism"] == "2P TP8 PP2 EP8 / 1D TP8 PP2 EP8"
    assert data[0]["report"] == "tuned +30.1% (50k+1.5k)"
    assert data[0]["hardware"] == "2×H100/H800"
    assert data[3]["parallelism"] == "TP8 PP2"


@pytest.mark.parametrize(
    ("flags", "ids"),
    [
        (["--family", "qwen"], ["qwen/vllm-single-a100-tuned", "qwen/vllm-single-a100"]),
        (["--gpu", "A100"], ["qwen/vllm-single-a100"]),
        (["--gpu", "H800"], ["qwen/vllm-single-a100-tuned"]),
        (["--topology", "pd"], ["glm/sglang-pd-6000d"]),
        (["--engine", "sglang", "--topology", "multinode"], ["deepseek/sglang-multinode-pp2-6000d"]),
        (["--tuned"], ["qwen/vllm-single-a100-tuned"]),
        (["--baseline"], ["qwen/vllm-single-a100"]),
    ],
)
def test_list_filters(flags: list[str], ids: list[str]) -> None:
    data = run_json("recipes", "list", *flags)
    assert isinstance(data, list)
    assert [r["id"] for r in data] == ids


def test_list_table() -> None:
    result = run("recipes", "list")
    assert result.exit_code == 0
    assert "4 of 4 recipes" in result.stdout
    assert "glm/sglang-pd-6000d" in result.stdout and "8×RTX-6000D×2" in result.stdout


def test_show() -> None:
    data = run_json("recipes", "show", "glm/sglang-pd-6000d")
    assert isinstance(data, dict)
    assert data["id"] == "glm/sglang-pd-6000d" and data["pd"]["prefill"]["replicas"] == 2
    assert data["constraints"][2]["reason"] == "the default runner has no sm120 kernels"
    assert data["constraints"][2]["source"].endswith("recipes/glm/sglang-pd-6000d.yaml:26:5")
    text = run("recipes", "show", "glm/sglang-pd-6000d").stdout
    assert "marlin [arg --moe-runner-backend marlin on RTX-6000D]: the default runner has no sm120 kernels" in text
    text = run("recipes", "show", "deepseek/sglang-multinode-pp2-6000d").stdout
    assert "kv_pool_tokens: 2833152" in text


def test_show_unknown_is_one_line_exit_2() -> None:
    result = run("recipes", "show", "qwen/vllm-single-a10")
    assert result.exit_code == 2
    assert result.stderr == "fleet: error: unknown recipe 'qwen/vllm-single-a10' (did you mean 'qwen/vllm-single-a100'?)\n"
    assert result.stdout == ""


def test_fit_pd() -> None:
    data = run_json("recipes", "fit", "glm/sglang-pd-6000d", "-i", EXAMPLE)
    assert isinstance(data, dict)
    assert data["nodes_needed"] == 6
    groups = {g["group"]: g for g in data["groups"]}
    assert groups["rtx6000d"]["fits"] is True and len(groups["rtx6000d"]["hosts"]) == 8
    assert groups["rtx6000d_rack1"]["reason"] == "4 hosts fit, 6 needed"
    assert groups["h100"]["reason"] == "no host fits"
    hosts = {h["host"]: h for h in data["hosts"]}
    assert hosts["h100-01"]["reasons"] == ["GPU H100, the recipe needs RTX-6000D"]
    assert hosts["ctl-01"]["reasons"] == [
        "no gpu_model set",
        "0 GPUs, the recipe needs 8 per node",
        "no RDMA fabric (a pd recipe needs ib or roce)",
    ]


def test_fit_single_and_mixed_skus() -> None:
    data = run_json("recipes", "fit", "qwen/vllm-single-a100-tuned", "-i", EXAMPLE)
    assert isinstance(data, dict)
    fits = [h["host"] for h in data["hosts"] if h["fits"]]
    assert fits == ["h100-01", "h100-02", "h100-03", "h100-04", "h800-01", "h800-02"]
    text = run("recipes", "fit", "qwen/vllm-single-a100-tuned", "-i", EXAMPLE).stdout
    assert "one deployment needs 1 host" in text
    assert "groups that can hold a deployment: h100, h800" in text


def test_fit_needs_several_nodes_of_one_sku(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    inv = tmp_path / "hosts.yaml"
    inv.write_text(
        "all:\n  vars: {gpu_count: 8, fabric: ib}\n  hosts:\n    a: {gpu_model: H100}\n    b: {gpu_model: H800}\n"
    )
    cat = tmp_path / "recipes" / "x"
    cat.mkdir(parents=True)
    (cat / "mn.yaml").write_text(
        (FIXTURES / "recipes" / "deepseek" / "sglang-multinode-pp2-6000d.yaml")
        .read_text()
        .replace("skus: [RTX-6000D]", "skus: [H100, H800]")
    )
    monkeypatch.setenv("FLEET_RECIPES_DIR", str(tmp_path / "recipes"))
    data = run_json("recipes", "fit", "x/mn", "-i", str(inv))
    assert isinstance(data, dict)
    assert data["groups"][0]["reason"] == "2 hosts fit but at most 1 share one SKU and fabric; 2 needed"


def test_fit_errors() -> None:
    result = run("recipes", "fit", "glm/sglang-pd-6000d", "-i", "nope.yaml")
    assert (result.exit_code, result.stderr) == (2, "fleet: error: nope.yaml: no such inventory file or directory\n")
    result = run("recipes", "fit", "glm/x", "-i", EXAMPLE)
    assert (result.exit_code, result.stderr) == (2, "fleet: error: unknown recipe 'glm/x'\n")


def test_inventory_list_json() -> None:
    data = run_json("inventory", "list", "-i", EXAMPLE, "--limit", "rtx6000d_rack2:!rtx-07")
    assert isinstance(data, dict)
    assert [h["name"] for h in data["hosts"]] == ["rtx-05", "rtx-06", "rtx-08"]
    rtx6 = data["hosts"][1]
    assert rtx6["spec"]["nccl_ifname"] == "ens2f0np0" and rtx6["spec"]["gid_index"] == 3
    assert rtx6["vars"]["ansible_host"] == "10.10.4.16"
    assert data["groups"]["rtx6000d"]["hosts"] == ["rtx-05", "rtx-06", "rtx-08"]
    assert "h100" not in data["groups"]


def test_inventory_list_table() -> None:
    result = run("inventory", "list", "-i", EXAMPLE)
    assert result.exit_code == 0
    assert "example.yaml: 19 hosts" in result.stdout
    assert "fleet@10.10.4.13" in result.stdout


def test_inventory_errors(tmp_path: Path) -> None:
    result = run("inventory", "list", "-i", EXAMPLE, "--limit", "zzz")
    assert result.exit_code == 2
    assert result.stderr == f"fleet: error: --limit: pattern 'zzz': 'zzz' matches no host or group in {EXAMPLE}\n"
    bad = tmp_path / "bad.ini"
    bad.write_text("[g]\nh1 gpu_count=eight\n")
    result = run("inventory", "list", "-i", str(bad))
    assert result.exit_code == 2
    assert result.stderr == f"fleet: error: {bad}:2:14: g/h1/gpu_count: should be an integer, got 'eight'\n"


@pytest.mark.parametrize(
    ("flags", "line"),
    [
        (["--gpu", "rtx6000d"], "--gpu: unknown value 'rtx6000d' (did you mean 'RTX-6000D'?); one of: H100, H800, "
                                "B300, A100, RTX-6000D, Ascend-910B3"),
        (["--engine", "sgl"], "--engine: unknown value 'sgl' (did you mean 'sglang'?); one of: sglang, vllm, "
                              "vllm-ascend"),
        (["--family", "glmm"], "--family: unknown value 'glmm' (did you mean 'glm'?); one of: qwen, glm, deepseek"),
        (["--topology", "xyz"], "--topology: unknown value 'xyz'; one of: single, multinode, pd"),
    ],
)  # fmt: skip
def test_list_invalid_filter_is_an_error_with_did_you_mean(flags: list[str], line: str) -> None:
    """A typo in a filter is an error naming the valid values, not an empty "0 of 4" list."""
    result = run("recipes", "list", *flags)
    assert (result.exit_code, result.stdout, result.stderr) == (2, "", f"fleet: error: {line}\n")


def test_show_pd_roles_as_yaml() -> None:
    text = run("recipes", "show", "glm/sglang-pd-6000d").stdout
    assert "{'" not in text  # no Python dict anywhere
    start = text.index("  pd:\n")
    assert text[start:].startswith(
        "  pd:\n"
        "    prefill:\n"
        "      replicas: 2\n"
        "      nodes: 2\n"
        "      parallelism:\n"
        "        tp: 8\n"
        "        pp: 2\n"
        "        dp: 1\n"
        "        ep: 8\n"
        "        attn_dp: 1\n"
        "        dcp: 1\n"
        "    decode:\n"
        "      replicas: 1\n"
    )
    assert "    transfer_backend: mooncake\n" in text


def test_fit_notes_a_fabric_other_than_the_measured_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Catalog entry 45 was measured over InfiniBand: RoCE hosts fit, with a note saying the
    figures were not measured on their fabric; IB hosts get no note."""
    monkeypatch.delenv("FLEET_RECIPES_DIR")
    inv = tmp_path / "hosts.yaml"
    inv.write_text("all:\n  vars: {gpu_count: 8, gpu_model: H100}\n  hosts:\n    a: {fabric: ib}\n    b: {fabric: roce}\n")
    data = run_json("recipes", "fit", "kimi/sglang-tp8pp2-h100", "-i", str(inv))
    assert isinstance(data, dict)
    assert [(h["host"], h["fits"], h["notes"]) for h in data["hosts"]] == [
        ("a", True, []),
        ("b", True, ["fabric roce, the catalog's figures were measured over ib"]),
    ]
    table = run("recipes", "fit", "kimi/sglang-tp8pp2-h100", "-i", str(inv)).stdout
    assert "fabric roce, the catalog's figures were measured over ib" in table
    shown = run("recipes", "show", "kimi/sglang-tp8pp2-h100").stdout
    assert "  fabric: ib (the catalog's figures were measured over it)\n" in shown


def test_show_prints_the_network_the_render_uses(monkeypatch: pytest.MonkeyPatch) -> None:
    """Catalog entry 26 runs without host networking: bridge, its listen ports published (the
    render golden deepseek__vllm-tp8-6000d has ``--publish 8000:8000``); others use the host's."""
    monkeypatch.delenv("FLEET_RECIPES_DIR")
    bridge = run("recipes", "show", "deepseek/vllm-tp8-6000d").stdout.splitlines()
    assert [line for line in bridge if line.startswith("  network:")] == [
        "  network: bridge (docker's bridge network, no host networking; each unit's listen ports published on "
        "the host, --publish 8000:8000 for the HTTP port unless the playbook sets another)"
    ]
    host = run("recipes", "show", "deepseek/vllm-pd-tp8-6000d-nvfp4").stdout.splitlines()
    assert [line for line in host if line.startswith("  network:")] == ["  network: host (--network host)"]


def test_show_prints_the_host_ram_the_mooncake_segments_need(monkeypatch: pytest.MonkeyPatch) -> None:
    """Catalog entry 43: 100gb global segment per GPU, 8 GPUs a node -- the sum preflight's
    host-memory check compares with each host's RAM."""
    monkeypatch.delenv("FLEET_RECIPES_DIR")
    shown = run("recipes", "show", "glm/sglang-pd-tp8pp2-6000d-fp8-mooncakestore").stdout.splitlines()
    assert [line for line in shown if line.startswith("  mooncake_store host RAM:")] == [
        "  mooncake_store host RAM: 800.0 GiB per node (8 GPUs x 100gb global segment); preflight fails a host "
        "with less RAM and warns above 80% of it"
    ]
    no_store = run("recipes", "show", "deepseek/vllm-tp8-6000d").stdout
    assert "host RAM" not in no_store
