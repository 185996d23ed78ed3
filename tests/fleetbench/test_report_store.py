"""The report beside the recipe's figures, the caveats that keep a sandbox from reading as a
regression, the PNG, and kept runs compared the catalog's way."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from launcher.bench import report, store
from launcher.bench.results import Level, Run
from launcher.bench.spec import Shape, Slo
from launcher.config.recipes import open_catalog
from launcher.errors import UsageError
from launcher.model import Throughput

GLM = "glm/sglang-tp8pp2ep8-6000d"  # measured: 50000+1500 at 10 concurrent, 4341 in / 126 out tok/s


def level(c: int, out: float, good: float, ttft: float = 900.0, tpot: float = 60.0) -> Level:
    return Level(
        concurrency=c, completed=8, failed=0, request_throughput=0.1, input_throughput_tok_s=out * 30,
        output_throughput_tok_s=out, ttft_ms_p50=ttft, ttft_ms_p99=ttft * 2, tpot_ms_p50=tpot, tpot_ms_p99=tpot,
        e2e_ms_p50=5000.0, e2e_ms_p99=6000.0, goodput_req_s=good / 1500, goodput_tok_s=good, duration_s=60.0,
    )  # fmt: skip


def run(**kw: object) -> Run:
    base = Run(
        id="", deployment="glm-pp", recipe=GLM, generation=1, engine_version="0.5.23", image="lmsysorg/sglang:v",
        gpus=16, endpoint="http://198.18.0.2:30000", shape=Shape(label="50k+1.5k", input_len=50000, output_len=1500),
        slo=Slo(ttft_ms=10000, tpot_ms=100, origin="fleet default"), started="2026-12-01T15:00:00Z",
        client="aiperf 0.13.0", levels=(level(4, 60.0, 60.0), level(12, 130.0, 100.0)),
    )  # fmt: skip
    return dataclasses.replace(base, **kw)  # type: ignore[arg-type]


def test_recipe_figures_side_by_side_with_ratio() -> None:
    recipe = open_catalog().get(GLM)
    figs = report.figures(recipe, run().shape)
    assert figs and figs[0].concurrency == 10
    md = report.markdown(run(), figs)
    # the recipe's 10-concurrent figure beside the nearest level (12): 130/126 output tok/s
    assert "| 10 (measured at 12) | 4341.0 | 3900.0 | 0.90x | 126.0 | 130.0 | 1.03x |" in md
    assert "**goodput within the SLO: 100.0 output tok/s, 50.0 per 8 GPUs**" in md
    assert "SLO TTFT <= 10000 ms, TPOT <= 100 ms (fleet default)" in md


def test_no_figure_for_the_shape_says_so() -> None:
    md = report.markdown(run(shape=Shape(label="8k+1k", input_len=8000, output_len=1000)), ())
    assert "The recipe records no throughput figure for this shape." in md


def test_caveats_for_a_sandbox() -> None:
    recipe = open_catalog().get(GLM)
    got = report.caveats(recipe, image="fleet-standin:latest", gpus=2, skus=["H100"], scale=0.01)
    assert got == (
        f"image fleet-standin:latest is not the recipe's {recipe.image} (engine sglang {recipe.engine_version} not confirmed)",
        "2 GPUs, the recipe's figures are for 16 (compare per 8 GPUs)",
        "GPU H100, the recipe's figures are for RTX-6000D",
        "lengths scaled x0.01: the recipe's figures are for the full shape",
    )
    assert report.caveats(recipe, image=recipe.image, gpus=16, skus=["RTX-6000D"], scale=1.0) == ()
    md = report.markdown(run(caveats=got), ())
    assert "- not comparable with the recipe as is: 2 GPUs, the recipe's figures are for 16 (compare per 8 GPUs)" in md


def test_plot_is_a_png(tmp_path: Path) -> None:
    out = tmp_path / "r.png"
    report.plot(run(), (Throughput(input_len=50000, output_len=1500, concurrency=10, output_tok_s=126),), out)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 10000


def test_saved_runs_listed_loaded_by_prefix_and_compared(tmp_path: Path) -> None:
    a = store.save(run(), tmp_path)
    b = store.save(run(deployment="glm-tuned", gpus=8, started="2026-12-01T16:00:00Z",
                       levels=(level(16, 100.0, 72.0, ttft=800.0, tpot=66.0),)), tmp_path)  # fmt: skip
    assert a.id == "glm-pp-g1-50k+1.5k-20261201T150000"
    assert [r.id for r in store.runs(tmp_path)] == [a.id, b.id]
    assert store.load("glm-tuned", tmp_path) == b
    cmp = store.compare(store.load(a.id, tmp_path), b)
    # per 8 GPUs: A 100 tok/s on 16 GPUs = 50; B 72 on 8 = 72: +44.0%
    assert cmp.per_8gpu and cmp.goodput_pct == pytest.approx(44.0)
    assert cmp.ttft_p50_pct == pytest.approx(-11.111, abs=1e-3) and cmp.tpot_p50_pct == pytest.approx(10.0)
    assert cmp.warnings == ()


def test_unknown_or_ambiguous_run(tmp_path: Path) -> None:
    store.save(run(), tmp_path)
    store.save(run(started="2026-12-01T16:00:00Z"), tmp_path)
    with pytest.raises(UsageError, match=r"^no saved bench run 'nope' in .* \(see `fleet bench list`\)$"):
        store.load("nope", tmp_path)
    with pytest.raises(UsageError, match=r"^'glm-pp' names 2 saved runs: glm-pp-g1-50k\+1.5k-20261201T150000, "):
        store.load("glm-pp", tmp_path)
