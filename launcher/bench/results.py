"""The report model: one concurrency level as the catalog reports it, one run (a shape swept over
concurrency levels against one deployment), and the client's export read into it.

Contract: pure.  :func:`level_from_aiperf` reads aiperf's ``profile_export_aiperf.json``;
``completed`` counts successful requests and ``failed`` the ones aiperf recorded as errors, so a
failed request is never dropped from the count.  ``to_json``/``run_from_json`` round-trip.
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass, replace
from typing import Any, Mapping, Sequence

from launcher.config.benchspec import ATTAINMENT_TARGET, Shape, Slo
from launcher.errors import FleetError

# The per-level keys of the JSON report (issue 15), in this order.
LEVEL_KEYS = (
    "concurrency", "completed", "failed", "request_throughput", "input_throughput_tok_s",
    "output_throughput_tok_s", "ttft_ms_p50", "ttft_ms_p99", "tpot_ms_p50", "tpot_ms_p99", "e2e_ms_p50",
    "e2e_ms_p99", "goodput_req_s", "goodput_tok_s", "duration_s",
)  # fmt: skip


@dataclass(frozen=True, slots=True, kw_only=True)
class Level:
    """One concurrency level.  Latencies are None when no request completed.  Goodput: the
    requests/s meeting every SLO limit (the client's own count) and their output tok/s."""

    concurrency: int
    completed: int
    failed: int
    request_throughput: float
    input_throughput_tok_s: float
    output_throughput_tok_s: float
    ttft_ms_p50: float | None
    ttft_ms_p99: float | None
    tpot_ms_p50: float | None
    tpot_ms_p99: float | None
    e2e_ms_p50: float | None
    e2e_ms_p99: float | None
    goodput_req_s: float
    goodput_tok_s: float
    duration_s: float
    # Prefill/decode: the KV transfers the decodes' own counters recorded during the level (see
    # launcher/deploy/crossing.py); None where the deployment has no such counters.
    kv: KvTransfers | None = None
    seed: int | None = None  # the client's --random-seed for this level (None: a run saved before seeds)
    # Share of prompt tokens the engines' own prefix caches answered during the level (their
    # counters, read before and after); None where they could not be read.
    prefix_cache_hit_rate: float | None = None
    good_requests: int | None = None  # requests within both SLOs (aiperf's count; None: a run saved before)
    # With --repeat N: the level was run N times; its figures are the medians (counts summed) and
    # ``spread`` holds (min, max) over the repeats of each of SPREAD_KEYS.
    repeats: int = 1
    spread: tuple[tuple[str, float, float], ...] = ()
    # Requests the client itself cancelled in flight (the level's duration and grace ran out):
    # neither completed nor failed by the engine; 0 in a run saved before they were counted.
    cancelled: int = 0
    # Open loop: the requests/s offered (Poisson arrivals; ``concurrency`` 0, no cap); None:
    # closed loop at ``concurrency``.
    request_rate: float | None = None

    @property
    def load(self) -> str:
        """``concurrency 4`` or ``rate 2 req/s``: how the level loaded the endpoint."""
        return load_label(self.concurrency, self.request_rate)

    @property
    def key(self) -> tuple[str, float]:
        """What identifies a level across runs (two runs compare at equal keys)."""
        return ("rate", self.request_rate) if self.request_rate is not None else ("concurrency", float(self.concurrency))

    @property
    def offered(self) -> float:
        """The level's load as a number (higher is more load): its rate or its concurrency."""
        return self.request_rate if self.request_rate is not None else float(self.concurrency)

    def range_of(self, key: str) -> tuple[float, float] | None:
        return next(((lo, hi) for k, lo, hi in self.spread if k == key), None)

    @property
    def attainment(self) -> float | None:
        """Share of the level's requests (failed and cancelled ones included) meeting both SLOs."""
        sent = self.completed + self.failed + self.cancelled
        return None if self.good_requests is None or sent == 0 else self.good_requests / sent


def load_label(concurrency: int, rate: float | None) -> str:
    return f"rate {rate:g} req/s" if rate is not None else f"concurrency {concurrency}"


# The figures whose spread over repeats is kept.
SPREAD_KEYS = ("output_throughput_tok_s", "goodput_tok_s", "ttft_ms_p50", "ttft_ms_p99", "tpot_ms_p50", "tpot_ms_p99")


def combine(runs: Sequence[Level]) -> Level:
    """N repeats of one level as one: each figure the median over the repeats (None where a
    repeat had none), the request counts summed, the spread (min, max) of SPREAD_KEYS kept."""
    first = runs[0]
    if len(runs) == 1:
        return first

    def med(key: str) -> float | None:
        values = [v for v in (getattr(lv, key) for lv in runs) if v is not None]
        return statistics.median(values) if len(values) == len(runs) else None

    medians: dict[str, Any] = {k: med(k) for k in LEVEL_KEYS if k not in ("concurrency", "completed", "failed")}
    spread = tuple((k, min(vs), max(vs)) for k in SPREAD_KEYS
                   if len(vs := [v for v in (getattr(lv, k) for lv in runs) if v is not None]) == len(runs))  # fmt: skip
    goods = [lv.good_requests for lv in runs]
    return replace(
        first, **medians, completed=sum(lv.completed for lv in runs), failed=sum(lv.failed for lv in runs),
        cancelled=sum(lv.cancelled for lv in runs),
        good_requests=None if None in goods else sum(g for g in goods if g is not None), repeats=len(runs),
        spread=spread, prefix_cache_hit_rate=med("prefix_cache_hit_rate"),
    )  # fmt: skip


@dataclass(frozen=True, slots=True, kw_only=True)
class KvTransfers:
    done: int  # transfers completed
    failed: int
    avg_ms: float | None  # mean transfer time
    mib: float  # KV moved


@dataclass(frozen=True, slots=True, kw_only=True)
class Run:
    """One shape swept over concurrency levels against one deployment's endpoint."""

    id: str  # the store's name for it ("" until saved)
    deployment: str
    recipe: str
    generation: int | None
    engine_version: str
    image: str
    gpus: int  # GPUs the plan gives the deployment's engines
    endpoint: str
    shape: Shape
    slo: Slo
    started: str  # UTC, ISO 8601
    client: str  # "aiperf 0.13.0"
    levels: tuple[Level, ...]
    caveats: tuple[str, ...] = ()  # why the recipe's figures are not directly comparable
    seed: int | None = None  # the run's seed: each level's is derived from it (bench.spec.level_seed)
    attainment_target: float = ATTAINMENT_TARGET  # the share of requests within the SLO a level must reach

    @property
    def capacity(self) -> Level | None:
        """DistServe-style goodput: the highest-load level at which at least ``attainment_target``
        of the requests met both SLOs (None: no level did, or attainment unknown)."""
        ok = [lv for lv in self.levels if lv.attainment is not None and lv.attainment >= self.attainment_target]
        return max(ok, key=lambda lv: lv.offered, default=None)

    @property
    def goodput_tok_s(self) -> float:
        """The best goodput (output tok/s within the SLO) across the sweep."""
        return max((lv.goodput_tok_s for lv in self.levels), default=0.0)

    @property
    def goodput_per_8gpu_tok_s(self) -> float | None:
        """The catalog's headline metric: the best goodput normalised to 8 GPUs."""
        return self.per_8gpu(self.goodput_tok_s)

    def per_8gpu(self, tok_s: float) -> float | None:
        """A throughput of this deployment as the catalog states it: per 8 of the plan's GPUs."""
        return tok_s * 8 / self.gpus if self.gpus else None

    @property
    def best(self) -> Level | None:
        return max(self.levels, key=lambda lv: lv.goodput_tok_s, default=None)


def _stat(doc: Mapping[str, Any], metric: str, stat: str) -> float | None:
    value = (doc.get(metric) or {}).get(stat)
    return None if value is None else float(value)


# aiperf 0.13.0 leaves the requests it cancelled when the level's duration and grace ran out
# out of its export altogether (no count, no error): only its log's phase summary says so
# ("Phase profiling (profiling) complete | completed=2, cancelled=2, errors=0"); the client
# reads that line into the export under this key (see client.run_level).
CANCELLED_KEY = "fleet_cancelled_request_count"
_PHASE_DONE = re.compile(r"Phase profiling \(profiling\) complete \|[^|]*\bcancelled=(\d+)")


def cancelled_in_log(text: str) -> int | None:
    """The profiling phase's cancelled requests from aiperf's log; None without that line."""
    found = _PHASE_DONE.findall(text)
    return int(found[-1]) if found else None


def level_from_aiperf(doc: Mapping[str, Any], concurrency: int) -> Level:
    """One level from aiperf's summary export.  aiperf's ``inter_token_latency`` is TPOT as vLLM
    defines it ((latency - TTFT) / (output tokens - 1), per request).  ``failed``: its errors
    (a request past its own time limit among them); ``cancelled``: what its log said it cancelled
    in flight at the level's end (:data:`CANCELLED_KEY`), in no other count."""
    if "request_count" not in doc and "error_request_count" not in doc:
        raise FleetError(f"aiperf's export has no request counts (keys: {', '.join(sorted(doc)[:8])} ...)")
    completed = int(_stat(doc, "request_count", "avg") or 0)
    cancelled = int(doc.get(CANCELLED_KEY) or 0)
    good_req_s = _stat(doc, "goodput", "avg") or 0.0
    mean_out = _stat(doc, "output_sequence_length", "avg") or 0.0
    return Level(
        concurrency=concurrency,
        completed=completed,
        failed=int(_stat(doc, "error_request_count", "avg") or 0),
        cancelled=cancelled,
        request_throughput=_stat(doc, "request_throughput", "avg") or 0.0,
        input_throughput_tok_s=_stat(doc, "input_token_throughput", "avg") or 0.0,
        output_throughput_tok_s=_stat(doc, "output_token_throughput", "avg") or 0.0,
        ttft_ms_p50=_stat(doc, "time_to_first_token", "p50"),
        ttft_ms_p99=_stat(doc, "time_to_first_token", "p99"),
        tpot_ms_p50=_stat(doc, "inter_token_latency", "p50"),
        tpot_ms_p99=_stat(doc, "inter_token_latency", "p99"),
        e2e_ms_p50=_stat(doc, "request_latency", "p50"),
        e2e_ms_p99=_stat(doc, "request_latency", "p99"),
        goodput_req_s=good_req_s,
        # Fixed-length requests (ignore_eos): the good requests' output tokens per second.
        goodput_tok_s=good_req_s * mean_out,
        duration_s=_stat(doc, "benchmark_duration", "avg") or 0.0,
        good_requests=None if (good := _stat(doc, "good_request_count", "avg")) is None else int(good),
    )


def to_json(run: Run) -> dict[str, Any]:
    """The report's JSON: issue 15's top-level keys, then the levels and the run's context."""
    return {
        "id": run.id,
        "goodput_tok_s": run.goodput_tok_s,
        "goodput_per_8gpu_tok_s": run.goodput_per_8gpu_tok_s,
        "slo": {"ttft_ms": run.slo.ttft_ms, "tpot_ms": run.slo.tpot_ms, "origin": run.slo.origin},
        "shape": {"label": run.shape.label, "input_len": run.shape.input_len, "output_len": run.shape.output_len},
        "deployment": run.deployment,
        "recipe": run.recipe,
        "generation": run.generation,
        "engine_version": run.engine_version,
        "image": run.image,
        "gpus": run.gpus,
        "endpoint": run.endpoint,
        "started": run.started,
        "client": run.client,
        "caveats": list(run.caveats),
        "seed": run.seed,
        "attainment_target": run.attainment_target,
        "slo_capacity": _capacity_json(run),
        "levels": [{**{k: getattr(lv, k) for k in LEVEL_KEYS}, "seed": lv.seed,
                    "prefix_cache_hit_rate": lv.prefix_cache_hit_rate, "good_requests": lv.good_requests,
                    "attainment": lv.attainment, "repeats": lv.repeats, "cancelled": lv.cancelled,
                    "request_rate": lv.request_rate,
                    "output_tok_s_per_8gpu": run.per_8gpu(lv.output_throughput_tok_s),
                    "goodput_tok_s_per_8gpu": run.per_8gpu(lv.goodput_tok_s),
                    "spread": {k: [lo, hi] for k, lo, hi in lv.spread}, **_kv_json(lv.kv)} for lv in run.levels],
    }


def _capacity_json(run: Run) -> dict[str, Any] | None:
    lv = run.capacity
    if lv is None:
        return None
    per8 = lv.output_throughput_tok_s * 8 / run.gpus if run.gpus else None
    return {"concurrency": lv.concurrency, "request_rate": lv.request_rate, "attainment": lv.attainment, "output_tok_s": lv.output_throughput_tok_s,
            "output_tok_s_per_8gpu": per8}  # fmt: skip


def _kv_json(kv: KvTransfers | None) -> dict[str, Any]:
    if kv is None:
        return {}
    return {"kv_transfers": {"done": kv.done, "failed": kv.failed, "avg_ms": kv.avg_ms, "mib": kv.mib}}


def _kv(doc: Mapping[str, Any] | None) -> KvTransfers | None:
    if doc is None:
        return None
    avg = doc["avg_ms"]
    return KvTransfers(done=int(doc["done"]), failed=int(doc["failed"]), avg_ms=None if avg is None else float(avg),
                       mib=float(doc["mib"]))  # fmt: skip


def run_from_json(doc: Mapping[str, Any], run_id: str) -> Run:
    """A saved run back (``run_id``: its name in the store)."""
    try:
        slo, shape = doc["slo"], doc["shape"]
        return Run(
            id=run_id, deployment=str(doc["deployment"]), recipe=str(doc["recipe"]),
            generation=doc["generation"], engine_version=str(doc["engine_version"]), image=str(doc["image"]),
            gpus=int(doc["gpus"]), endpoint=str(doc["endpoint"]),
            shape=Shape(label=shape["label"], input_len=int(shape["input_len"]), output_len=int(shape["output_len"])),
            slo=Slo(ttft_ms=float(slo["ttft_ms"]), tpot_ms=float(slo["tpot_ms"]), origin=str(slo["origin"])),
            started=str(doc["started"]), client=str(doc["client"]),
            levels=tuple(Level(**{k: lv[k] for k in LEVEL_KEYS}, kv=_kv(lv.get("kv_transfers")), seed=lv.get("seed"),
                               prefix_cache_hit_rate=lv.get("prefix_cache_hit_rate"), good_requests=lv.get("good_requests"),
                               repeats=int(lv.get("repeats", 1)), cancelled=int(lv.get("cancelled", 0)),
                               request_rate=lv.get("request_rate"),
                               spread=tuple((k, float(v[0]), float(v[1])) for k, v in (lv.get("spread") or {}).items()))
                         for lv in doc["levels"]),
            caveats=tuple(doc.get("caveats") or ()), seed=doc.get("seed"),
            attainment_target=float(doc.get("attainment_target", ATTAINMENT_TARGET)),
        )  # fmt: skip
    except (KeyError, TypeError, ValueError) as err:
        raise FleetError(f"saved bench run {run_id}: not a fleet bench report ({type(err).__name__}: {err})") from None
