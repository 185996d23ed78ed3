from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from launcher.config.recipes import check_coverage, load_catalog, parse_seed
from launcher.errors import InputError
from tests.config.conftest import FIXTURES, REPO

# shared/ sits beside the checkout, for developers and CI alike
SEED = REPO.parent / "shared" / "seeds" / "000_02e00e1b93470d41.txt"


@pytest.fixture
def tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the fixture catalog at ./recipes, so messages show recipes/<family>/<variant>.yaml."""
    shutil.copytree(FIXTURES / "recipes", tmp_path / "recipes")
    monkeypatch.chdir(tmp_path)
    return tmp_path / "recipes"


def _edit(tree: Path, rel: str, old: str, new: str) -> None:
    p = tree / rel
    text = p.read_text()
    assert old in text, (rel, old)
    p.write_text(text.replace(old, new, 1))


def _error(root: Path) -> str:
    with pytest.raises(InputError) as err:
        load_catalog(root)
    return str(err.value)


def test_loads_in_entry_order(tree: Path) -> None:
    cat = load_catalog(tree)
    assert list(cat.recipes) == [
        "qwen/vllm-single-a100-tuned",
        "glm/sglang-pd-6000d",
        "qwen/vllm-single-a100",
        "deepseek/sglang-multinode-pp2-6000d",
    ]
    r = cat.get("glm/sglang-pd-6000d")
    assert (r.id, r.family, r.catalog_entry) == ("glm/sglang-pd-6000d", "glm", 2)
    assert r.pd is not None and r.pd.prefill.replicas == 2
    assert r.constraints[2].when_sku == ("RTX-6000D",)
    assert str(r.constraints[0].source) == "recipes/glm/sglang-pd-6000d.yaml:17:5"
    assert str(r.source) == "recipes/glm/sglang-pd-6000d.yaml:1:1"
    assert dict(cat.get("qwen/vllm-single-a100").env) == {"VLLM_USE_V1": "1"}


def test_default_root_from_env(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLEET_RECIPES_DIR", str(tree))
    assert len(load_catalog().recipes) == 4


def test_get_unknown_suggests(tree: Path) -> None:
    with pytest.raises(InputError) as err:
        load_catalog(tree).get("qwen/vllm-single-a10")
    assert str(err.value) == "unknown recipe 'qwen/vllm-single-a10' (did you mean 'qwen/vllm-single-a100'?)"


Q = "qwen/vllm-single-a100.yaml"
G = "glm/sglang-pd-6000d.yaml"
D = "deepseek/sglang-multinode-pp2-6000d.yaml"
T = "qwen/vllm-single-a100-tuned.yaml"


@pytest.mark.parametrize(
    ("rel", "old", "new", "message"),
    [
        (Q, "parallelism: {tp: 1}", "parallelism:\n  tp: eight",
         "recipes/qwen/vllm-single-a100.yaml:11:7: parallelism/tp: should be an integer, got 'eight'"),
        (Q, "parallelism: {tp: 1}", "parallelism: {tpp: 1}",
         "recipes/qwen/vllm-single-a100.yaml:10:15: parallelism: unknown key 'tpp' (did you mean 'tp'?)"),
        (Q, "engine: vllm", "engine: vlm",
         "recipes/qwen/vllm-single-a100.yaml:5:9: engine: should be one of 'sglang', 'vllm', 'vllm-ascend', got 'vlm'"),
        (Q, 'VLLM_USE_V1: "1"', "VLLM_USE_V1: 1",
         "recipes/qwen/vllm-single-a100.yaml:14:16: env/VLLM_USE_V1: should be a string, got 1"),
        (Q, "catalog_entry: 3", "id: x\ncatalog_entry: 3",
         "recipes/qwen/vllm-single-a100.yaml:1:1: 'id' comes from the path recipes/<family>/<variant>.yaml; remove it"),
        (Q, "catalog_entry: 3", "family: qwen\ncatalog_entry: 3",
         "recipes/qwen/vllm-single-a100.yaml:1:1: 'family' comes from the path recipes/<family>/<variant>.yaml; remove it"),
        (Q, "model: Qwen/Qwen3-8B\n", "",
         "recipes/qwen/vllm-single-a100.yaml:1:1: missing required key 'model'"),
        (Q, "catalog_entry: 3", "catalog_entry: 1",
         "recipes/qwen/vllm-single-a100.yaml:1:16: catalog_entry: entry 1 is already taken by qwen/vllm-single-a100-tuned"),
        (T, "baseline: qwen/vllm-single-a100", "baseline: qwen/vllm-single-a10",
         "recipes/qwen/vllm-single-a100-tuned.yaml:16:13: report/baseline: unknown recipe 'qwen/vllm-single-a10' "
         "(did you mean 'qwen/vllm-single-a100'?)"),
        (T, "baseline: qwen/vllm-single-a100", "baseline: qwen/vllm-single-a100-tuned",
         "recipes/qwen/vllm-single-a100-tuned.yaml:16:13: report/baseline: a recipe cannot be its own baseline"),
        (T, "parallelism: {tp: 2}", "parallelism: {tp: 4}",
         "recipes/qwen/vllm-single-a100-tuned.yaml:12:14: parallelism: tp*pp*dp = 4*1*1 = 4 GPUs, but the hardware "
         "has 2 per node x 1 node = 2"),
        (D, "parallelism: {tp: 8, pp: 2}", "parallelism: {tp: 8}",
         "recipes/deepseek/sglang-multinode-pp2-6000d.yaml:10:14: parallelism: tp*pp*dp = 8*1*1 = 8 GPUs, but the "
         "hardware has 8 per node x 2 nodes = 16"),
        (D, "nodes: 2}", "nodes: 1}",
         "recipes/deepseek/sglang-multinode-pp2-6000d.yaml:9:56: hardware/nodes: topology 'multinode' needs "
         "nodes >= 2, got 1 (use topology 'single')"),
        (Q, "gpus_per_node: 1}", "gpus_per_node: 1, nodes: 2}",
         "recipes/qwen/vllm-single-a100.yaml:9:51: hardware/nodes: topology 'single' runs on one node, got nodes 2 "
         "(use topology 'multinode')"),
        (G, "decode: {replicas: 1, nodes: 2, parallelism: {tp: 8, pp: 2, ep: 8}}",
         "decode: {replicas: 1, nodes: 1, parallelism: {tp: 8, pp: 2, ep: 8}}",
         "recipes/glm/sglang-pd-6000d.yaml:15:48: pd/decode/parallelism: tp*pp*dp = 8*2*1 = 16 GPUs, but the "
         "hardware has 8 per node x 1 node = 8"),
        (G, "topology: pd", "topology: multinode",
         "recipes/glm/sglang-pd-6000d.yaml:13:3: pd: a 'pd' block needs topology 'pd', not 'multinode'"),
        (D, "topology: multinode", "topology: multinode\nnetwork: bridge",
         "recipes/deepseek/sglang-multinode-pp2-6000d.yaml:9:10: network: network 'bridge' is for single-node "
         "recipes: a multinode recipe's ranks and transfers need the host network"),
        (D, "topology: multinode", "topology: pd",
         "recipes/deepseek/sglang-multinode-pp2-6000d.yaml:1:1: topology 'pd' needs a 'pd' block "
         "(prefill, decode, transfer_backend)"),
        (G, "    flag: --disable-cuda-graph\n", "",
         "recipes/glm/sglang-pd-6000d.yaml:22:5: constraints/1: constraint 'no-cuda-graph-off': kind 'arg-absent' "
         "needs 'flag'"),
        (G, "flag: --moe-runner-backend", "flag: moe-runner-backend",
         "recipes/glm/sglang-pd-6000d.yaml:26:5: constraints/2: constraint 'marlin': flag should start with '-', "
         "got 'moe-runner-backend'"),
        (G, "field: pd.prefill.parallelism.ep", "field: pd.prefill.parallelism.epp",
         "recipes/glm/sglang-pd-6000d.yaml:17:5: constraints/0: constraint 'ep-required': "
         "'pd.prefill.parallelism.epp' is not a recipe field"),
        (G, "field: pd.prefill.parallelism.ep", "field: pd.transfer_backend",
         "recipes/glm/sglang-pd-6000d.yaml:17:5: constraints/0: constraint 'ep-required': kind 'min' compares "
         "integers; 'pd.transfer_backend' with value 8 is not one"),
        (G, "    value: 8\n", "",
         "recipes/glm/sglang-pd-6000d.yaml:17:5: constraints/0: constraint 'ep-required': kind 'min' needs 'value'"),
        (D, 'value: "4"', "value: 4",
         "recipes/deepseek/sglang-multinode-pp2-6000d.yaml:15:5: constraints/0: constraint 'nccl-qps': "
         "an env value should be a string, got 4"),
        (D, "kind: env, name: NCCL_IB_QPS_PER_CONNECTION", "kind: env, flag: --x, name: NCCL_IB_QPS_PER_CONNECTION",
         "recipes/deepseek/sglang-multinode-pp2-6000d.yaml:15:5: constraints/0: constraint 'nccl-qps': "
         "kind 'env' does not use 'flag'"),
        (G, "skus: [RTX-6000D]", "skus: [RTX6000D]",
         "recipes/glm/sglang-pd-6000d.yaml:9:19: hardware/skus/0: should be one of 'H100', 'H800', 'B300', 'A100', "
         "'RTX-6000D', 'Ascend-910B3', got 'RTX6000D'"),
        (Q, 'VLLM_USE_V1: "1"', 'VLLM_USE_V1: "1"\n  DOCKER_CONFIG: /tmp/evil',
         "recipes/qwen/vllm-single-a100.yaml:15:3: env/DOCKER_CONFIG: env name 'DOCKER_CONFIG': would reconfigure "
         "the host, not the engine: the docker client's own settings (DOCKER_HOST picks the daemon, DOCKER_CONFIG "
         "its credentials, DOCKER_CERT_PATH/TLS_VERIFY its TLS)"),
        (Q, 'VLLM_USE_V1: "1"', 'VLLM_USE_V1: "1\\0"',
         "recipes/qwen/vllm-single-a100.yaml:14:16: env/VLLM_USE_V1: contains a NUL character, which no command "
         "line or env file can carry"),
    ],
)
def test_errors(tree: Path, rel: str, old: str, new: str, message: str) -> None:
    _edit(tree, rel, old, new)
    assert _error(tree) == message


def test_bad_variant_name(tree: Path) -> None:
    (tree / Q).rename(tree / "qwen" / "Vllm_A100.yaml")
    assert _error(tree) == (
        "recipes/qwen/Vllm_A100.yaml:1:1: file name 'Vllm_A100' should be lower-case letters, digits, '.', '_' or '-'"
    )


def test_coverage_of_the_fixture_seed(tree: Path) -> None:
    seed = FIXTURES / "seed.txt"
    assert [(e.number, e.family, e.shape) for e in parse_seed(seed)] == [
        (1, "qwen", "单节点"),
        (2, "glm", "Prefill / Decode 分离"),
        (3, "qwen", "单节点"),
        (4, "deepseek", "多节点 LWS"),
    ]
    assert check_coverage(load_catalog(tree), seed) == ()
    _edit(tree, D, "catalog_entry: 4", "catalog_entry: 7")
    _edit(tree, G, "catalog_entry: 2", "catalog_entry: 3")
    _edit(tree, Q, "catalog_entry: 3", "catalog_entry: 2")
    _edit(tree, Q, "topology: single", "topology: multinode")
    _edit(tree, Q, "gpus_per_node: 1}", "gpus_per_node: 1, nodes: 2}")
    _edit(tree, Q, "parallelism: {tp: 1}", "parallelism: {tp: 1, pp: 2}")
    assert check_coverage(load_catalog(tree), seed) == (
        "deepseek/sglang-multinode-pp2-6000d: catalog_entry 7 is not in the seed (1..4)",
        "entry 2 (glm · Prefill / Decode 分离): recipe qwen/vllm-single-a100 is family 'qwen'",
        "entry 2 (glm · Prefill / Decode 分离): recipe qwen/vllm-single-a100 has topology 'multinode', expected 'pd'",
        "entry 3 (qwen · 单节点): recipe glm/sglang-pd-6000d is family 'glm'",
        "entry 3 (qwen · 单节点): recipe glm/sglang-pd-6000d has topology 'pd', expected 'single'",
        "entry 4 (deepseek · 多节点 LWS): no recipe",
    )


def test_the_seed_has_54_entries() -> None:
    if not SEED.exists():
        pytest.skip(f"catalog seed not present at {SEED}")
    entries = parse_seed(SEED)
    assert len(entries) == 54
    assert entries[0].family == "glm" and entries[0].hardware == "4 × B300"
    assert entries[53].family == "qwen" and entries[53].shape == "单节点"


def test_the_repository_catalog() -> None:
    """The real catalog loads with every check, and covers the seed once it is complete."""
    root = REPO / "recipes"
    if not any(root.glob("*/*.yaml")):
        pytest.skip("recipes/ holds no recipe yet")
    catalog = load_catalog(root)
    assert catalog.recipes
    if SEED.exists():
        assert check_coverage(catalog, SEED) == ()


def test_an_entry_naming_two_engines_has_one_recipe_of_each(tree: Path, tmp_path: Path) -> None:
    """Issue 16 item 15: entry 47 names SGLang and vLLM on B300; each gets its recipe."""
    twin = tree / "qwen" / "sglang-single-a100.yaml"
    twin.write_text((tree / Q).read_text().replace("engine: vllm", "engine: sglang"))
    seed = tmp_path / "seed.txt"
    seed.write_text((FIXTURES / "seed.txt").read_text())
    assert check_coverage(load_catalog(tree), seed) == (
        "entry 3 (qwen · 单节点): 2 recipes: qwen/sglang-single-a100, qwen/vllm-single-a100 (several only for "
        "the engines the entry names, one each)",
    )
    seed.write_text(seed.read_text().replace("Baseline.", "Baseline, with SGLang or vLLM."))
    assert check_coverage(load_catalog(tree), seed) == ()
