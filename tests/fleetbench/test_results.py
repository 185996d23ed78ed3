"""aiperf's summary export read into the report model (a real export, trimmed: a stand-in at
20 ms per token failing every 5th of 10 requests), and the report's JSON keys."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from launcher.bench.results import Run, level_from_aiperf, run_from_json, to_json
from launcher.config.benchspec import Shape, Slo
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


def test_kv_transfers_round_trip_and_are_reported() -> None:
    """A prefill/decode run's levels carry the decodes' own KV-transfer figures (fleet bench reads
    them around each level); the JSON keeps them and the markdown shows them."""
    from dataclasses import replace

    from launcher.bench.report import markdown
    from launcher.bench.results import KvTransfers

    kv = KvTransfers(done=8, failed=0, avg_ms=91.6, mib=2.0)
    r = replace(run(), levels=(replace(run().levels[0], kv=kv),))
    doc = json.loads(json.dumps(to_json(r)))
    assert doc["levels"][0]["kv_transfers"] == {"done": 8, "failed": 0, "avg_ms": 91.6, "mib": 2.0}
    assert run_from_json(doc, "x").levels[0].kv == kv
    assert "| 2 | 8 | 0 | 91.6 | 2.00 MiB |" in markdown(r, ()), markdown(r, ())
    assert "kv_transfers" not in to_json(run())["levels"][0], "no figures where the deployment has no counters"


def test_seeds_and_prefix_cache_hit_rate_round_trip_and_a_high_rate_is_flagged() -> None:
    """Issue 29 item 1: the report records the run's and each level's seed (a run can be
    repeated) and the engines' own prefix-cache hit rate per level; a high one is a warning."""
    from dataclasses import replace

    from launcher.bench.report import cache_note, markdown
    from launcher.config.benchspec import level_seed

    cold = replace(run().levels[0], seed=level_seed(1234, 0), prefix_cache_hit_rate=0.0)
    warm = replace(run().levels[0], concurrency=4, seed=level_seed(1234, 1), prefix_cache_hit_rate=0.45)
    r = replace(run(), seed=1234, levels=(cold, warm))
    doc = json.loads(json.dumps(to_json(r)))
    assert doc["seed"] == 1234 and [lv["seed"] for lv in doc["levels"]] == [1234, 1234 + 7919]
    assert [lv["prefix_cache_hit_rate"] for lv in doc["levels"]] == [0.0, 0.45]
    assert run_from_json(doc, "x") == replace(r, id="x")
    text = markdown(r, ())
    assert "Prompts: run seed 1234 (`fleet bench --seed 1234` repeats them), per level 2: 1234, 4: 9153; " \
           "prompt tokens the engines' prefix caches answered, per level 2: 0.0%, 4: 45.0%." in text, text
    assert ("**warning: at concurrency 4 the engines' prefix caches answered 45.0% of prompt tokens (over 20%): "
            "its TTFT and throughput are better than cold prompts'**") in text
    assert "at concurrency 2 the engines'" not in text
    assert (cache_note(cold), cache_note(warm)) == (", prefix cache 0.0%", ", prefix cache 45.0% (high: prompts answered from cache)")
    assert "Prompts:" not in markdown(run(), ()), "a run saved before seeds reads back without them"
    assert run_from_json({k: v for k, v in to_json(run()).items() if k != "seed"}, "x").seed is None


def test_attainment_per_level_and_the_slo_capacity() -> None:
    """Issue 29 item 2: the share of each level's requests meeting both SLOs (aiperf's good
    request count over every request sent, failed ones included) and DistServe's goodput: the
    highest load at which at least 90% of requests met them."""
    from dataclasses import replace

    from launcher.bench.report import markdown

    base = run().levels[0]
    assert base.good_requests == 8 and base.attainment == 0.8  # the export: 8 good, 2 failed
    levels = (replace(base, concurrency=1, failed=0, good_requests=8),
              replace(base, concurrency=4, completed=9, failed=1, good_requests=9),
              replace(base, concurrency=16, failed=0, good_requests=5))  # fmt: skip
    r = replace(run(), levels=levels)
    assert [lv.attainment for lv in r.levels] == [1.0, 0.9, 0.625]
    assert r.capacity == levels[1]
    doc = json.loads(json.dumps(to_json(r)))
    assert doc["slo_capacity"]["concurrency"] == 4 and doc["attainment_target"] == 0.9
    assert [lv["attainment"] for lv in doc["levels"]] == [1.0, 0.9, 0.625]
    assert run_from_json(doc, "x") == replace(r, id="x")
    text = markdown(r, ())
    assert "Requests within both SLOs (TTFT and TPOT), per level 1: 100.0%, 4: 90.0%, 16: 62.5%." in text
    assert "**SLO capacity (the highest load with >= 90% of requests within both SLOs): concurrency 4, " in text
    none = replace(r, levels=(levels[2],))
    assert none.capacity is None and to_json(none)["slo_capacity"] is None
    assert "**SLO capacity: no level had 90% of its requests within both SLOs**" in markdown(none, ())


def test_repeats_are_medians_with_their_spread_and_compare_says_inside_it() -> None:
    """Issue 29 item 3: --repeat N runs each level N times; the level's figures are the medians
    (request counts summed), min..max kept per figure, shown in the markdown and the JSON, and
    compare says when B's goodput lies inside A's spread."""
    from dataclasses import replace

    from launcher.bench import store
    from launcher.bench.report import markdown
    from launcher.bench.results import combine

    base = replace(run().levels[0], failed=0, good_requests=8)
    reps = [replace(base, goodput_tok_s=g, ttft_ms_p50=t, seed=s) for g, t, s in ((90.0, 300.0, 1), (100.0, 320.0, 2), (120.0, 310.0, 3))]
    lv = combine(reps)
    assert (lv.goodput_tok_s, lv.ttft_ms_p50, lv.completed, lv.good_requests, lv.repeats) == (100.0, 310.0, 24, 24, 3)
    assert lv.range_of("goodput_tok_s") == (90.0, 120.0) and lv.range_of("ttft_ms_p50") == (300.0, 320.0)
    assert combine(reps[:1]) == reps[0]
    a = replace(run(), levels=(lv,))
    doc = json.loads(json.dumps(to_json(a)))
    assert doc["levels"][0]["repeats"] == 3 and doc["levels"][0]["spread"]["goodput_tok_s"] == [90.0, 120.0]
    assert run_from_json(doc, "x") == replace(a, id="x")
    assert "- concurrency 2 (3 runs): output_throughput_tok_s " in markdown(a, ())
    assert "goodput_tok_s 90.0..120.0" in markdown(a, ())
    near = replace(run(), levels=(replace(base, goodput_tok_s=110.0),))
    far = replace(run(), levels=(replace(base, goodput_tok_s=130.0),))
    assert [d.inside_spread for d in store.compare(a, near).levels] == [True]
    assert [d.inside_spread for d in store.compare(a, far).levels] == [False]
    # A not repeated: A's median inside B's spread says the same
    assert [d.inside_spread for d in store.compare(near, a).levels] == [True]
    assert [d.inside_spread for d in store.compare(near, far).levels] == [None]  # neither repeated


def test_open_loop_levels_and_the_attainment_target() -> None:
    """Issue 29 item 2: open-loop levels (requests/s) are their own kind of level -- labelled,
    kept in the JSON, compared only with the same rate -- and the SLO capacity is the highest
    rate meeting the run's attainment target (``--attainment-target``, 90% by default)."""
    from dataclasses import replace

    from launcher.bench import store
    from launcher.bench.report import markdown

    base = replace(run().levels[0], concurrency=0, failed=0)
    levels = tuple(replace(base, request_rate=r, good_requests=g) for r, g in ((0.5, 8), (1.0, 7), (2.0, 6)))
    r = replace(run(), levels=levels)
    assert [lv.load for lv in levels] == ["rate 0.5 req/s", "rate 1 req/s", "rate 2 req/s"]
    assert r.capacity == levels[0]  # 100%, 87.5%, 75%: only 0.5 req/s meets 90%
    assert replace(r, attainment_target=0.75).capacity == levels[2]
    doc = json.loads(json.dumps(to_json(replace(r, attainment_target=0.75))))
    assert doc["attainment_target"] == 0.75 and doc["slo_capacity"]["request_rate"] == 2.0
    assert run_from_json(doc, "x") == replace(r, id="x", attainment_target=0.75)
    text = markdown(replace(r, attainment_target=0.75), ())
    assert "| request rate (req/s) | completed |" in text and "\n| 0.5 | 8 | 0 | 0 |" in text
    assert "**SLO capacity (the highest load with >= 75% of requests within both SLOs): rate 2 req/s, " in text
    closed = replace(run(), levels=(replace(base, concurrency=2, request_rate=None),))
    cmp = store.compare(closed, r)
    assert cmp.levels == () and cmp.warnings[0].startswith("different levels: concurrency 2 vs rate 0.5,1,2 req/s")
