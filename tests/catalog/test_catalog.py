"""The recipe catalog (recipes/) against the catalog seed: coverage, facts, reports, constraints.

Needs the loader (launcher.config.recipes.load_catalog); without it every test here fails.
Run: python -m pytest tests/catalog -q
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

SEED_ENV = "FLEET_CATALOG_SEED"
SEED_DEFAULT = Path("/work/shared/seeds/000_02e00e1b93470d41.txt")

# The seed, transcribed: entry -> (family, topology, GPU SKUs, GPUs per node, nodes).
# PD entries state only the SKU (None = not stated).
SEED: dict[int, tuple[str, str, tuple[str, ...], int | None, int | None]] = {
    1: ('glm', 'single', ('B300',), 4, 1),
    2: ('deepseek', 'single', ('H100',), 8, 1),
    3: ('laguna', 'single', ('H100',), 8, 1),
    4: ('deepseek', 'single', ('H100',), 8, 1),
    5: ('kimi', 'single', ('B300',), 8, 1),
    6: ('mistral', 'single', ('H100',), 2, 1),
    7: ('deepseek', 'single', ('H100',), 8, 1),
    8: ('gemma', 'single', ('H100',), 2, 1),
    9: ('gpt', 'single', ('H100',), 8, 1),
    10: ('google', 'single', ('H100',), 4, 1),
    11: ('qwen', 'single', ('H100',), 2, 1),
    12: ('nemotron', 'single', ('H100',), 8, 1),
    13: ('nex', 'single', ('H100',), 8, 1),
    14: ('ling', 'single', ('H100',), 8, 1),
    15: ('ling', 'single', ('H100',), 8, 1),
    16: ('glm', 'single', ('B300',), 8, 1),
    17: ('qwen', 'single', ('H100',), 8, 1),
    18: ('qwen', 'single', ('H100',), 8, 1),
    19: ('gpt', 'single', ('H100',), 1, 1),
    20: ('glm', 'single', ('H100',), 8, 1),
    21: ('mistral', 'single', ('H100',), 1, 1),
    22: ('deepseek', 'single', ('RTX-6000D',), 4, 1),
    23: ('deepseek', 'single', ('RTX-6000D',), 8, 1),
    24: ('deepseek', 'single', ('H100',), 8, 1),
    25: ('deepseek', 'single', ('RTX-6000D',), 4, 1),
    26: ('deepseek', 'single', ('RTX-6000D',), 8, 1),
    27: ('deepseek', 'single', ('H100',), 8, 1),
    28: ('deepseek', 'single', ('RTX-6000D',), 4, 1),
    29: ('deepseek', 'single', ('RTX-6000D',), 8, 1),
    30: ('deepseek', 'single', ('RTX-6000D',), 4, 1),
    31: ('deepseek', 'single', ('RTX-6000D',), 8, 1),
    32: ('deepseek', 'pd', ('RTX-6000D',), None, None),
    33: ('deepseek', 'multinode', ('RTX-6000D',), 8, 2),
    34: ('deepseek', 'multinode', ('RTX-6000D',), 8, 2),
    35: ('deepseek', 'single', ('H100',), 8, 1),
    36: ('glm', 'multinode', ('RTX-6000D',), 8, 2),
    37: ('glm', 'single', ('B300',), 8, 1),
    38: ('glm', 'multinode', ('RTX-6000D',), 8, 2),
    39: ('glm', 'pd', ('RTX-6000D',), None, None),
    40: ('glm', 'pd', ('RTX-6000D',), None, None),
    41: ('glm', 'multinode', ('RTX-6000D',), 8, 2),
    42: ('glm', 'pd', ('RTX-6000D',), None, None),
    43: ('glm', 'pd', ('RTX-6000D',), None, None),
    44: ('google', 'single', ('H100',), 4, 1),
    45: ('kimi', 'multinode', ('H100', 'H800'), 8, 2),
    46: ('kimi', 'multinode', ('RTX-6000D',), 8, 4),
    47: ('kimi', 'single', ('B300',), 8, 1),
    48: ('kimi', 'multinode', ('RTX-6000D',), 8, 4),
    49: ('mistral', 'single', ('H100',), 1, 1),
    50: ('mistral', 'single', ('H100',), 2, 1),
    51: ('nemotron', 'single', ('H100',), 1, 1),
    52: ('qwen', 'single', ('Ascend-910B3',), 1, 1),
    53: ('qwen', 'single', ('A100',), 1, 1),
    54: ('qwen', 'single', ('H100', 'H800'), 2, 1),
}


def _load() -> Any:
    try:
        from launcher.config.recipes import load_catalog
    except ImportError as err:  # the loader is a hard requirement: fail, never skip
        pytest.fail(f"recipe loader missing: {err}")
    return load_catalog()


@pytest.fixture(scope="module")
def catalog() -> Any:
    return _load()


@pytest.fixture(scope="module")
def by_entry(catalog: Any) -> dict[int, Any]:
    first: dict[int, Any] = {}
    for r in catalog.recipes.values():
        first.setdefault(r.catalog_entry, r)  # entry 47's SGLang recipe; its vLLM one is checked by id
    return first


def _args(recipe: Any) -> tuple[str, ...]:
    return tuple(recipe.engine_args)


def _has_flag(args: tuple[str, ...], flag: str, value: object = None) -> bool:
    """``flag`` present (as ``--flag value`` or ``--flag=value``), with ``value`` when given."""
    for i, tok in enumerate(args):
        if tok == flag:
            if value is None or (i + 1 < len(args) and args[i + 1] == str(value)):
                return True
        elif tok.startswith(flag + "="):
            if value is None or tok[len(flag) + 1 :] == str(value):
                return True
    return False


def _constraint(recipe: Any, **want: object) -> Any:
    for c in recipe.constraints:
        if all(getattr(c, k) == v for k, v in want.items()):
            return c
    raise AssertionError(f"{recipe.id}: no constraint with {want}; has {[c.id for c in recipe.constraints]}")


# ------------------------------------------------------------------------------ coverage


def test_one_recipe_per_seed_entry_in_order(catalog: Any) -> None:
    recipes = list(catalog.recipes.values())
    assert len(recipes) == 55
    assert [r.catalog_entry for r in recipes] == sorted([*range(1, 55), 47])
    # Entry 47 names SGLang and vLLM on one B300 node: one recipe of each (issue 16 item 15).
    assert [(r.id, r.engine) for r in recipes if r.catalog_entry == 47] == [
        ("kimi/sglang-tp8-b300", "sglang"), ("kimi/vllm-tp8-b300", "vllm"),
    ]  # fmt: skip


@pytest.mark.parametrize("entry", sorted(SEED))
def test_recipe_matches_seed_shape(by_entry: dict[int, Any], entry: int) -> None:
    family, topology, skus, gpus, nodes = SEED[entry]
    r = by_entry[entry]
    assert r.id.startswith(f"{family}/") and r.family == family
    assert r.topology == topology
    assert set(r.hardware.skus) == set(skus)
    if gpus is not None:
        assert r.hardware.gpus_per_node == gpus
    if nodes is not None:
        assert r.hardware.nodes == nodes
    if topology == "pd":
        assert r.pd is not None
        assert (r.pd.prefill.replicas, r.pd.decode.replicas) == (2, 1)  # the seed's default 2P1D
    assert r.summary and r.notes and r.served_model_name


def test_loader_coverage_check_against_the_seed_file(catalog: Any) -> None:
    seed = Path(os.environ.get(SEED_ENV, str(SEED_DEFAULT)))
    if not seed.is_file():
        pytest.skip(f"seed file {seed} not present (set {SEED_ENV}); the transcribed table still checks coverage")
    from launcher.config.recipes import check_coverage

    assert check_coverage(catalog, seed) == ()


def test_transcribed_table_matches_the_seed_file() -> None:
    seed = Path(os.environ.get(SEED_ENV, str(SEED_DEFAULT)))
    if not seed.is_file():
        pytest.skip(f"seed file {seed} not present (set {SEED_ENV})")
    from launcher.config.recipes import parse_seed

    entries = parse_seed(seed)
    assert [(e.number, e.family) for e in entries] == [(n, SEED[n][0]) for n in sorted(SEED)]


# ------------------------------------------------------------------------------ engines and images


def test_engine_versions_follow_the_seed(by_entry: dict[int, Any]) -> None:
    for n, r in by_entry.items():
        if r.engine == "sglang":
            assert r.engine_version == "0.5.23", r.id
        elif r.engine == "vllm-ascend":
            assert (r.engine_version, r.image) == ("0.23.0", "quay.io/ascend/vllm-ascend:v0.23.0"), r.id
        else:
            # the seed pins v0.30.0 for entries 30-31 and the harbor PD image (32)
            assert r.engine_version == ("0.30.0" if n in (30, 31, 32) else "0.33.0"), r.id
    assert by_entry[30].image == by_entry[31].image == "vllm/vllm-openai:v0.30.0"
    assert by_entry[32].image.endswith("/vllm-openai:v0.30.0-pd-fix2")
    assert by_entry[52].engine == "vllm-ascend"


def test_every_recipe_keeps_root_cache_on_the_host_and_weights_read_only(catalog: Any) -> None:
    for r in catalog.recipes.values():
        mounts = {(m.host, m.container, m.read_only) for m in r.mounts}
        assert ("{cache_dir}/root-cache", "/root/.cache", False) in mounts, r.id
        assert ("{models_dir}", "/models", True) in mounts, r.id


@pytest.mark.parametrize("entry", sorted(SEED))
def test_engine_args_pass_the_engines_parser_snapshot(by_entry: dict[int, Any], entry: int) -> None:
    from launcher.engines import argcheck

    r = by_entry[entry]
    try:
        versions = argcheck.known_versions(r.engine)
    except Exception as err:  # noqa: BLE001 - report any snapshot-lookup failure as the skip reason
        pytest.skip(f"no {r.engine} option snapshots: {err}")
    if r.engine_version not in versions:
        pytest.skip(f"no option snapshot for {r.engine} {r.engine_version} (have {versions})")
    model = ("--model-path", "/models/m") if r.engine == "sglang" else ("/models/m",)
    assert argcheck.check_argv(r.engine, r.engine_version, (*model, *_args(r))) == ()


# ------------------------------------------------------------------------------ reports


def test_tuned_reports_name_a_matching_baseline_or_explain(catalog: Any) -> None:
    tuned = [r for r in catalog.recipes.values() if r.report and r.report.kind == "tuned"]
    assert len(tuned) == 21  # seed entries 1-21 are the "Tuned by LLM AutoTune" ones
    for r in tuned:
        rep = r.report
        assert rep.tuner == "LLM AutoTune" and rep.gains, r.id
        assert rep.workload in ("50k+1.5k", "8k+1k"), r.id
        if rep.baseline is None:
            assert "report.baseline is null" in r.notes, r.id
            continue
        base = catalog.get(rep.baseline)
        assert base.report is not None and base.report.kind == "baseline", (r.id, base.id)
        assert (base.family, base.engine) == (r.family, r.engine), (r.id, base.id)
        assert set(base.hardware.skus) & set(r.hardware.skus), (r.id, base.id)


def test_seed_named_baselines_are_paired(by_entry: dict[int, Any]) -> None:
    def baseline_entry(n: int) -> int | None:
        b = by_entry[n].report.baseline
        return None if b is None else next(e for e, r in by_entry.items() if r.id == b)

    # the three deepseek H100 baselines (24, 27, 35) serve the three tuned H100 entries (2, 4, 7)
    assert sorted(baseline_entry(n) or 0 for n in (2, 4, 7)) == [24, 27, 35]
    assert baseline_entry(4) == 27 and by_entry[27].model == by_entry[4].model  # same 0731 checkpoint
    assert baseline_entry(1) == baseline_entry(16) == 37  # the GLM B300 baseline
    assert (baseline_entry(10), baseline_entry(6), baseline_entry(21), baseline_entry(12)) == (44, 50, 49, 51)


@pytest.mark.parametrize(
    ("entry", "version", "gains"),
    [
        (1, "v1.0.4", {("50k+1.5k", 195.3, "normalized-throughput-8gpu-within-slo"),
                       ("8k+1k", 30.6, "normalized-throughput-8gpu-within-slo")}),
        (2, "v1.0.0", {("tuning-benchmark", 89.0, "tuning-benchmark")}),
        (4, "v1.0.0", {("50k+1.5k", 58.0, "normalized-throughput-within-slo"),
                       ("8k+1k", 23.4, "normalized-throughput-within-slo")}),
        (5, "v1.0.5", {("50k+1.5k", 57.6, "normalized-throughput-within-slo"),
                       ("8k+1k", 21.4, "normalized-throughput-within-slo")}),
        (7, "v1.0.2", {("tuning-benchmark", 51.0, "tuning-benchmark")}),
        (17, "v1.1.0", {("50k+1.5k", 4.3, "normalized-throughput-within-slo"),
                        ("8k+1k", 10.0, "normalized-throughput-within-slo")}),
        (21, "v1.0.0", {("50k+1.5k", 1.4, "normalized-throughput-within-slo"),
                        ("8k+1k", 5.3, "normalized-throughput-within-slo")}),
    ],
)
def test_tuned_gains_as_the_seed_states(
    by_entry: dict[int, Any], entry: int, version: str, gains: set[tuple[str, float, str]]
) -> None:
    rep = by_entry[entry].report
    assert rep.catalog_version == version
    assert {(g.workload, g.percent, g.metric) for g in rep.gains} == gains


# ------------------------------------------------------------------------------ measured facts


@pytest.mark.parametrize(
    ("entry", "facts"),
    [
        (22, {"weights_gib_per_card": 38.57, "kv_pool_tokens": 4_002_048}),
        (23, {"kv_pool_tokens": 6_524_672}),
        (25, {"weights_gib_per_card": 39.42, "kv_free_gib_per_card": 33.07, "kv_pool_tokens": 3_447_225,
              "max_request_len": 1_048_576}),
        (28, {"weights_gib_per_card": 40.94, "ready_seconds_cold": 390, "kv_pool_tokens": None}),  # "~3.6M": not invented
        (29, {"kv_pool_tokens": 6_274_304, "ready_seconds_cold": 420}),
        (31, {"kv_pool_tokens": 5_222_157, "ready_seconds_cold": 600}),
        (33, {"kv_pool_tokens": 2_833_152}),
        (38, {"kv_pool_tokens": 1_180_288, "max_req_input_len": 1_048_570}),
        (46, {"weights_gib_per_card": 47.81, "kv_pool_tokens": 1_237_195}),
    ],
)
def test_measured_facts_as_the_seed_states(by_entry: dict[int, Any], entry: int, facts: dict[str, object]) -> None:
    m = by_entry[entry].measured
    assert {k: getattr(m, k) for k in facts} == facts
    assert by_entry[entry].report is not None and by_entry[entry].report.kind == "measured"


def test_glm_long_request_and_throughput_rows(by_entry: dict[int, Any]) -> None:
    m = by_entry[38].measured
    assert (m.long_request.tokens, m.long_request.seconds) == (1_000_000, 428)
    rows = {(t.input_len, t.output_len): (t.concurrency, t.input_tok_s, t.output_tok_s) for t in m.throughput}
    assert rows == {(50_000, 1_500): (10, 4341, 126), (80_000, 600): (10, 6722, 47.6)}
    # The comparison's other side: entry 38 names the vLLM variant's (entry 41's) 17 concurrent
    # requests, without its tok/s -- recorded where it belongs, with nothing invented.
    rows41 = {(t.input_len, t.output_len): (t.concurrency, t.input_tok_s, t.output_tok_s)
              for t in by_entry[41].measured.throughput}
    assert rows41 == {(50_000, 1_500): (17, None, None), (80_000, 600): (17, None, None)}


def test_fabric_where_the_seed_names_one(by_entry: dict[int, Any]) -> None:
    """'over RoCE' / 'over IB' in the seed becomes hardware.fabric; no other entry names one."""
    named = {n: r.hardware.fabric for n, r in by_entry.items() if r.hardware.fabric is not None}
    assert named == {33: "roce", 34: "roce", 36: "roce", 38: "roce", 39: "roce", 40: "roce", 41: "roce",
                     45: "ib", 46: "roce", 48: "roce"}
    seed = Path(os.environ.get(SEED_ENV, str(SEED_DEFAULT)))
    if seed.is_file():  # the table above, read again from the seed's own words
        from launcher.config.recipes import parse_seed

        said = {e.number: "roce" if "over RoCE" in e.text else "ib" for e in parse_seed(seed)
                if "over RoCE" in e.text or "over IB" in e.text}
        assert said == named


def test_vllm_kv_suggestion_stays_off(by_entry: dict[int, Any]) -> None:
    r = by_entry[25]
    assert r.kv_cache_memory is None and "40.08" in r.notes


def test_start_timeouts_derive_from_cold_ready_times(catalog: Any) -> None:
    for r in catalog.recipes.values():
        ready = r.measured.ready_seconds_cold
        assert r.start_timeout_s == (3 * ready if ready is not None else 1800), r.id


def test_measured_reports_carry_measurements(catalog: Any) -> None:
    empty = type(next(iter(catalog.recipes.values())).measured)()
    for r in catalog.recipes.values():
        if r.report is not None and r.report.kind == "measured":
            assert r.measured != empty, r.id


def test_no_measurements_where_the_seed_states_none(by_entry: dict[int, Any]) -> None:
    measured = {22, 23, 25, 28, 29, 31, 33, 38, 41, 46}
    empty = type(by_entry[1].measured)()
    for n, r in by_entry.items():
        if n not in measured:
            assert r.measured == empty, r.id


# ------------------------------------------------------------------------------ PD, offload, speculative


def test_deepseek_pd_production_values(by_entry: dict[int, Any]) -> None:
    r = by_entry[32]
    assert (r.pd.transfer_backend, r.pd.prefill.parallelism.tp, r.pd.decode.parallelism.tp) == ("nixl", 8, 8)
    assert (r.mooncake_store.global_segment_size, r.mooncake_store.local_buffer_size) == ("100gb", "4gb")
    assert (r.shm_size, r.gpu_memory_utilization) == ("850g", 0.85)
    assert r.gateway is not None and r.gateway.route == r.served_model_name == "deepseek-v4-flash"
    assert r.hardware.skus == ("RTX-6000D",)


def test_glm_pd_variants(by_entry: dict[int, Any]) -> None:
    for n in (39, 40, 42, 43):
        r = by_entry[n]
        for role in (r.pd.prefill, r.pd.decode):
            assert (role.nodes, role.parallelism.tp, role.parallelism.pp) == (2, 8, 2), r.id
            assert role.parallelism.ep == (8 if n in (39, 40) else 1), r.id
    assert by_entry[40].hicache is not None and by_entry[40].hicache.size_gb == 100
    assert by_entry[42].pd.transfer_backend == by_entry[43].pd.transfer_backend == "mooncake"
    store = by_entry[43].mooncake_store
    assert (store.global_segment_size, store.local_buffer_size) == ("100gb", "4gb")


def test_speculative_settings(by_entry: dict[int, Any]) -> None:
    assert by_entry[1].speculative.algorithm == "EAGLE" and by_entry[1].hicache is not None
    assert by_entry[4].speculative.algorithm == "DSPARK" and by_entry[4].model.endswith("-0731")
    k = by_entry[5]
    assert (k.speculative.algorithm, k.speculative.draft_model, k.speculative.draft_beside_target) == (
        "DSPARK", "RadixArk/Kimi-K3-DSpark", True)
    assert (k.parallelism.tp, k.parallelism.dcp, k.kv_cache_dtype) == (8, 8, "fp8_e4m3") and k.hicache is not None
    assert "HiCache under DCP" in k.notes  # the upstream conflict is recorded with the decision
    g = by_entry[9]
    assert (g.speculative.algorithm, g.speculative.draft_model) == ("EAGLE3", "lmsys/EAGLE3-gpt-oss-120b-bf16")
    assert (g.parallelism.tp, g.parallelism.dp) == (2, 4)


def test_multinode_parallelism_maps_tp8_per_node(catalog: Any) -> None:
    for r in catalog.recipes.values():
        if r.topology == "multinode":
            p = r.parallelism
            assert (p.tp, p.pp) == (8, r.hardware.nodes), r.id
            assert p.tp * p.pp * p.dp == r.hardware.gpus_per_node * r.hardware.nodes, r.id


# ------------------------------------------------------------------------------ constraints


def test_sm120_moe_runner_rules(by_entry: dict[int, Any]) -> None:
    for n in (28, 29, 38, 39, 40, 46):  # SGLang NVFP4 / MXFP4 MoE builds on RTX-6000D
        c = _constraint(by_entry[n], kind="arg", flag="--moe-runner-backend", value="marlin")
        assert c.when_sku == ("RTX-6000D",) and c.reason
    for n in (28, 29):
        _constraint(by_entry[n], kind="arg-absent", flag="--moe-runner-backend", value="flashinfer_cutlass")
    for bad in ("flashinfer_mxfp4", "triton_kernel"):
        _constraint(by_entry[46], kind="arg-absent", flag="--moe-runner-backend", value=bad)
    _constraint(by_entry[48], kind="arg", flag="--moe-backend", value="marlin", when_sku=("RTX-6000D",))


def test_vllm_030_on_rtx6000d_turns_flashinfer_autotune_off(catalog: Any) -> None:
    hits = [r for r in catalog.recipes.values()
            if r.engine == "vllm" and r.engine_version == "0.30.0" and "RTX-6000D" in r.hardware.skus]
    assert sorted(r.catalog_entry for r in hits) == [30, 31, 32]
    for r in hits:
        _constraint(r, kind="arg", flag="--no-enable-flashinfer-autotune")


def test_glm_nvfp4_needs_ep_on_rtx6000d(by_entry: dict[int, Any]) -> None:
    _constraint(by_entry[38], kind="min", field="parallelism.ep", value=8)
    for n in (39, 40):
        for role in ("prefill", "decode"):
            _constraint(by_entry[n], kind="min", field=f"pd.{role}.parallelism.ep", value=8)


def test_dspark_recipes_pin_pp1_and_no_pd(catalog: Any) -> None:
    dspark = [r for r in catalog.recipes.values() if r.speculative and r.speculative.algorithm == "DSPARK"]
    assert sorted(r.catalog_entry for r in dspark) == [4, 5]
    for r in dspark:
        _constraint(r, kind="equals", field="parallelism.pp", value=1)
        _constraint(r, kind="equals", field="topology", value="single")


def test_every_recipe_satisfies_its_own_constraints(catalog: Any) -> None:
    from launcher.config.recipes import field_value

    for r in catalog.recipes.values():
        args = _args(r)
        for c in r.constraints:
            if c.kind == "arg":
                assert _has_flag(args, c.flag, c.value), (r.id, c.id)
            elif c.kind == "arg-absent":
                assert not _has_flag(args, c.flag, c.value), (r.id, c.id)
            elif c.kind == "env":
                assert r.env.get(c.name) == c.value, (r.id, c.id)
            elif c.kind == "min":
                assert field_value(r, c.field) >= c.value, (r.id, c.id)
            else:
                assert field_value(r, c.field) == c.value, (r.id, c.id)


def test_glm_rtx6000d_model_builds_as_resolved(by_entry: dict[int, Any]) -> None:
    """Issue 30 item 3: 37-41 carry the NVFP4 build the seed names; 36, 42, 43 (no EP named) stay on
    the FP8 build, because SGLang needs EP8 for NVFP4 and would then launch 38's/39's/40's shape --
    and their notes say so and how to switch."""
    builds = {n: (by_entry[n].model, by_entry[n].quantization.weight_format) for n in range(36, 44)}
    nvfp4, fp8 = ("nvidia/GLM-5.3-Flash-NVFP4", "nvfp4"), ("zai-org/GLM-5.3-Flash", "fp8-e4m3")
    assert builds == {36: fp8, 37: nvfp4, 38: nvfp4, 39: nvfp4, 40: nvfp4, 41: nvfp4, 42: fp8, 43: fp8}
    for n in (36, 42, 43):
        notes = " ".join(by_entry[n].notes.split())
        assert "resolved against the reference" in notes and "To switch it to the NVFP4 build" in notes, n
