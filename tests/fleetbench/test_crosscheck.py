"""The real-engine tier's cross-check tooling (tests/real_engine/crosscheck.py), its pure parts:
the engines' record summed and differenced, ``vllm bench serve``'s argv (no warm-up, no
ready-check request) and result, and the check failing on each kind of disagreement."""

from __future__ import annotations

import dataclasses

from tests.real_engine.crosscheck import ClientRun, EngineView, check, engine_view, from_vllm_bench, vllm_bench_argv


def _metrics(ttft: tuple[float, int], tpot: tuple[float, int], tokens: int, engine: str = "0",
             queue_prefill: tuple[float, float, int] = (0.0, 0.0, 0)) -> str:  # fmt: skip
    labels = f'engine="{engine}",model_name="m"'
    queue, prefill, finished = queue_prefill
    return "\n".join([
        "# TYPE vllm:request_queue_time_seconds histogram",
        f"vllm:request_queue_time_seconds_count{{{labels}}} {finished}",
        f"vllm:request_queue_time_seconds_sum{{{labels}}} {queue}",
        "# TYPE vllm:request_prefill_time_seconds histogram",
        f"vllm:request_prefill_time_seconds_count{{{labels}}} {finished}",
        f"vllm:request_prefill_time_seconds_sum{{{labels}}} {prefill}",
        "# HELP vllm:time_to_first_token_seconds x", "# TYPE vllm:time_to_first_token_seconds histogram",
        f'vllm:time_to_first_token_seconds_bucket{{{labels},le="+Inf"}} {ttft[1]}',
        f"vllm:time_to_first_token_seconds_count{{{labels}}} {ttft[1]}",
        f"vllm:time_to_first_token_seconds_sum{{{labels}}} {ttft[0]}",
        "# HELP vllm:request_time_per_output_token_seconds x",
        "# TYPE vllm:request_time_per_output_token_seconds histogram",
        f'vllm:request_time_per_output_token_seconds_bucket{{{labels},le="+Inf"}} {tpot[1]}',
        f"vllm:request_time_per_output_token_seconds_count{{{labels}}} {tpot[1]}",
        f"vllm:request_time_per_output_token_seconds_sum{{{labels}}} {tpot[0]}",
        "# HELP vllm:generation_tokens_total x", "# TYPE vllm:generation_tokens_total counter",
        f"vllm:generation_tokens_total{{{labels}}} {tokens}", "",
    ])  # fmt: skip


def test_the_engines_record_is_summed_over_replicas_and_differenced_over_a_run() -> None:
    before = engine_view([_metrics((0.1, 2), (0.02, 2), 256, queue_prefill=(0.01, 0.05, 2)), _metrics((0.0, 0), (0.0, 0), 0)])
    after = engine_view([_metrics((0.5, 6), (0.06, 6), 768, queue_prefill=(0.03, 0.25, 6)),
                         _metrics((0.4, 2), (0.04, 2), 256, queue_prefill=(0.0, 0.1, 2))])  # fmt: skip
    run = after.since(before)
    assert (run.ttft_count, run.tpot_count, run.tokens, run.prefill_count) == (6, 6, 768, 6)
    assert (round(run.mean_ttft_ms or 0, 6), round(run.mean_tpot_ms or 0, 6)) == (133.333333, 13.333333)
    assert round(run.mean_core_first_token_ms or 0, 6) == 53.333333  # (0.02 + 0.3) s over 6
    assert EngineView(ttft_sum_s=0, ttft_count=0, tpot_sum_s=0, tpot_count=0, tokens=0).mean_tpot_ms is None


def test_vllm_bench_sends_only_the_runs_requests() -> None:
    argv = vllm_bench_argv(base_url="http://198.18.0.2:8100", model="m", tokenizer="/models/tiny", input_len=32,
                           output_len=128, concurrency=2, requests=8, seed=7, result_dir="/tmp/x", result_file="r.json")  # fmt: skip
    pairs = dict(zip(argv, argv[1:]))
    assert argv[:3] == ("vllm", "bench", "serve") and "--ignore-eos" in argv
    assert {k: pairs[k] for k in ("--num-warmups", "--ready-check-timeout-sec", "--random-range-ratio",
                                  "--max-concurrency", "--num-prompts", "--random-output-len")} == {
        "--num-warmups": "0", "--ready-check-timeout-sec": "0", "--random-range-ratio": "0",
        "--max-concurrency": "2", "--num-prompts": "8", "--random-output-len": "128"}  # fmt: skip


AGREE = ClientRun(client="c", completed=8, output_tokens=1024, mean_ttft_ms=30.0, median_ttft_ms=25.0,
                  mean_tpot_ms=10.5, median_tpot_ms=9.0, output_tok_s=100.0)  # fmt: skip
# TTFT 25 ms at the API server, TPOT 10 ms, the core's first token 20 ms after the request reached it
ENGINE = EngineView(ttft_sum_s=0.2, ttft_count=8, tpot_sum_s=0.08, tpot_count=8, tokens=1024, queue_sum_s=0.04,
                    prefill_sum_s=0.12, prefill_count=8)  # fmt: skip


def test_the_check_holds_when_client_and_engine_agree() -> None:
    assert check(AGREE, ENGINE, requests=8, output_len=128) == []


def test_the_check_fails_on_each_disagreement() -> None:
    warmed = dataclasses.replace(ENGINE, ttft_count=9, tpot_count=9, tokens=1152, tpot_sum_s=0.09)
    assert check(AGREE, warmed, 8, 128) == [
        "requests: client 8, engine TTFT/TPOT counts 9/9, sent 8",
        "output tokens: client 1024, engine 1152, asked 1024",
    ]
    assert check(dataclasses.replace(AGREE, mean_tpot_ms=11.2), ENGINE, 8, 128) == [
        "mean TPOT: client 11.20 ms, engine 10.00 ms (tolerance 10%)"
    ]
    assert check(dataclasses.replace(AGREE, mean_ttft_ms=20.0), ENGINE, 8, 128) == [
        "mean TTFT: client 20.00 ms below the engine's 25.00 ms"
    ]


def test_vllm_bench_result_read() -> None:
    doc = {"completed": 8, "total_output_tokens": 1024, "mean_ttft_ms": 27.3, "median_ttft_ms": 22.2,
           "mean_tpot_ms": 10.05, "median_tpot_ms": 7.79, "output_throughput": 196.0}  # fmt: skip
    assert from_vllm_bench(doc) == ClientRun(client="vllm bench serve", completed=8, output_tokens=1024,
                                             mean_ttft_ms=27.3, median_ttft_ms=22.2, mean_tpot_ms=10.05,
                                             median_tpot_ms=7.79, output_tok_s=196.0)  # fmt: skip


def test_a_client_tpot_below_the_engines_passes_only_as_far_as_its_late_first_chunk_explains() -> None:
    """128 tokens: a client TPOT 2 ms below the engine's 10 ms is a decode window 254 ms shorter;
    12.7 ms a token are within the tolerance, the rest must be the first chunk's lateness (the
    client's TTFT less the core's 20 ms)."""
    low = dataclasses.replace(AGREE, mean_tpot_ms=8.0)
    assert check(low, ENGINE, 8, 128) == [
        "mean TPOT: client 8.00 ms, engine 10.00 ms (tolerance 10%; a decode window 254 ms shorter, the first chunk 10 ms late)"
    ]
    assert check(dataclasses.replace(low, mean_ttft_ms=147.0), ENGINE, 8, 128) == []  # 127 ms late: 254 explained
    assert check(dataclasses.replace(low, mean_ttft_ms=146.0), ENGINE, 8, 128) != []
    unknown = dataclasses.replace(ENGINE, prefill_count=0)
    assert check(low, unknown, 8, 128) == [
        "mean TPOT: client 8.00 ms, engine 10.00 ms (tolerance 10%; a decode window 254 ms shorter, the first chunk not known late)"
    ]
