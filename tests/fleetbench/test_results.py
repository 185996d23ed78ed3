"""aiperf's summary export read into the report model (a real export, trimmed: a stand-in at
20 ms per token failing every 5th of 10 requests), and the report's JSON keys."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from launcher.bench.results import Run, level_from_aiperf, run_from_json, to_json
from launcher.bench.spec import Shape, Slo
from launcher.errors import FleetError

EXPORT = json.loads((Path(__file__).parent / "aiperf_export.json").read_text())


def test_level_counts_failures_and_goodput() -> None:
    lv = level_from_aiperf(EXPORT, 2)
    assert (lv.concurrency, lv.completed, lv.failed) == (2, 8, 2)
    assert lv.tpot_ms_p50 == pytest.approx(19.977, abs=0.01)
    assert lv.ttft_ms_p50 == pytest.approx(28.96, abs=0.01)
    # goodput tok/s: the good requests' rate times their (fixed) output length
    assert lv.goodput_tok_s == pytest.approx(1.5388 * 64, rel=1e-3)
    assert lv.output_throughput_tok_s == pytest.approx(98.48, abs=0.01)


def test_an_export_without_counts_is_refused() -> None:
    with pytest.raises(FleetError, match="^aiperf's export has no request counts"):
        level_from_aiperf({"aiperf_version": "0.13.0"}, 1)


def run(gpus: int = 2) -> Run:
    return Run(
        id="", deployment="sb", recipe="qwen/x", generation=3, engine_version="0.5.23", image="img", gpus=gpus,
        endpoint="http://198.18.0.5:8000", shape=Shape(label="512+64", input_len=512, output_len=64),
        slo=Slo(ttft_ms=100, tpot_ms=25, origin="--slo"), started="2026-12-01T15:00:00Z", client="aiperf 0.13.0",
        levels=(level_from_aiperf(EXPORT, 2),),
    )  # fmt: skip


def test_json_has_the_issue_keys_and_round_trips() -> None:
    doc = to_json(run())
    for key in ("goodput_tok_s", "goodput_per_8gpu_tok_s", "slo", "shape", "deployment", "recipe", "generation", "engine_version"):
        assert key in doc
    for key in ("concurrency", "completed", "failed", "request_throughput", "input_throughput_tok_s",
                "output_throughput_tok_s", "ttft_ms_p50", "ttft_ms_p99", "tpot_ms_p50", "tpot_ms_p99", "e2e_ms_p50"):  # fmt: skip
        assert key in doc["levels"][0]
    assert doc["goodput_per_8gpu_tok_s"] == pytest.approx(doc["goodput_tok_s"] * 4)
    assert run_from_json(json.loads(json.dumps(doc)), "x") == run().__class__(**{**_fields(run()), "id": "x"})


def _fields(r: Run) -> dict[str, object]:
    return {f: getattr(r, f) for f in r.__dataclass_fields__}


def test_not_a_report() -> None:
    with pytest.raises(FleetError, match=r"^saved bench run x: not a fleet bench report \(KeyError"):
        run_from_json({"deployment": "sb"}, "x")
