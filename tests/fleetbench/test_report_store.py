"""The report beside the recipe's figures, the caveats that keep a sandbox from reading as a
regression, the PNG, and kept runs compared the catalog's way."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from launcher.bench import report, store
from launcher.bench.results import Level, Run
from launcher.bench.version import ServerVersion
from launcher.config.benchspec import Shape, Slo
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
    served = ServerVersion(versions=(f"{recipe.engine_version} (fleet stand-in)",), unread=())
    got = report.caveats(recipe, image="fleet-standin:latest", gpus=2, skus=["H100"], scale=0.01, served=served)
    assert got == (
        f"image fleet-standin:latest is not the recipe's {recipe.image}",
        "2 GPUs, the recipe's figures are for 16 (compare per 8 GPUs)",
        "GPU H100, the recipe's figures are for RTX-6000D",
        "lengths scaled x0.01: the recipe's figures are for the full shape (not shown beside these)",
    )
    assert report.caveats(recipe, image=recipe.image, gpus=16, skus=["RTX-6000D"], scale=1.0, served=served) == ()
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
    # different sweeps and GPU counts are said (issue 29 item 3); no common level to compare
    assert cmp.warnings == ("different levels: concurrency 4,12 vs concurrency 16 (the best levels below may be different loads; "
                            "compare the common levels)", "different GPU counts: 16 vs 8")  # fmt: skip
    assert cmp.levels == ()


def test_compare_goes_level_by_level(tmp_path: Path) -> None:
    """Issue 29 item 3: the common concurrencies compared one by one, not each run's best."""
    a = run(gpus=8, levels=(level(4, 100.0, 40.0, ttft=500.0, tpot=50.0), level(16, 100.0, 80.0, ttft=900.0, tpot=60.0)))
    b = run(gpus=8, levels=(level(4, 100.0, 44.0, ttft=450.0, tpot=50.0), level(8, 100.0, 90.0, ttft=700.0, tpot=55.0)))
    cmp = store.compare(a, b)
    assert [(d.concurrency, round(d.goodput_pct or 0, 1), round(d.ttft_p50_pct or 0, 1)) for d in cmp.levels] == [(4, 10.0, -10.0)]
    assert cmp.warnings[0].startswith("different levels: concurrency 4,16 vs concurrency 4,8")


@pytest.mark.parametrize(
    ("other", "warning"),
    [
        ({"shape": Shape(label="8k+1k", input_len=8000, output_len=1000)}, "different shapes: 50k+1.5k vs 8k+1k"),
        ({"slo": Slo(ttft_ms=2000, tpot_ms=50, origin="--slo")},
         "different SLOs: ttft=10000,tpot=100 vs ttft=2000,tpot=50"),
        # the origin is where the SLO came from, not what it is: the same limits compare
        ({"slo": Slo(ttft_ms=10000, tpot_ms=100, origin="--slo")}, None),
    ],
)  # fmt: skip
def test_compare_says_different_shapes_and_slos(other: dict[str, object], warning: str | None) -> None:
    """Issue 29 item 3: runs that swept the same levels on the same GPUs but at another shape or
    under another SLO are not like for like (the CLI refuses them unless --force)."""
    cmp = store.compare(run(), run(**other))
    assert cmp.warnings == ((warning,) if warning else ())


def test_unknown_or_ambiguous_run(tmp_path: Path) -> None:
    store.save(run(), tmp_path)
    store.save(run(started="2026-12-01T16:00:00Z"), tmp_path)
    with pytest.raises(UsageError, match=r"^no saved bench run 'nope' in .* \(see `fleet bench list`\)$"):
        store.load("nope", tmp_path)
    with pytest.raises(UsageError, match=r"^'glm-pp' names 2 saved runs: glm-pp-g1-50k\+1.5k-20261201T150000, "):
        store.load("glm-pp", tmp_path)


def test_chart_is_tok_s_per_gpu_against_tok_s_per_user_with_the_capacity_marked(tmp_path: Path) -> None:
    """Issue 29 item 5: one point per level -- output tok/s per GPU (y) against tok/s per user
    (1000 / TPOT p50, x) -- the SLO capacity level marked, attainment per level beside it."""
    fast = dataclasses.replace(level(4, 60.0, 60.0, tpot=20.0), good_requests=8)  # 50 tok/s/user, 100% within
    slow = dataclasses.replace(level(12, 130.0, 100.0, tpot=80.0), good_requests=4)  # 12.5 tok/s/user, 50%
    r = run(levels=(fast, slow))
    pts = report.chart_points(r)
    assert [(p.label, p.per_user, p.per_gpu, p.attainment, p.capacity) for p in pts] == [
        ("c=4", 50.0, 60.0 / 16, 1.0, True), ("c=12", 12.5, 130.0 / 16, 0.5, False),
    ]
    untimed = dataclasses.replace(slow, tpot_ms_p50=None)  # nothing decoded: no point
    assert [p.label for p in report.chart_points(run(levels=(fast, untimed)))] == ["c=4"]
    out = tmp_path / "chart.png"
    report.plot(r, (Throughput(input_len=50000, output_len=1500, concurrency=10, output_tok_s=126),), out, recipe_gpus=16)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 10000
