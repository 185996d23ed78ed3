"""The report model: one concurrency level as the catalog reports it, one run (a shape swept over
concurrency levels against one deployment), and the client's export read into it.

Contract: pure.  :func:`level_from_aiperf` reads aiperf's ``profile_export_aiperf.json``;
``completed`` counts successful requests and ``failed`` the ones aiperf recorded as errors, so a
failed request is never dropped from the count.  ``to_json``/``run_from_json`` round-trip.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from launcher.bench.spec import Shape, Slo
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

    @property
    def goodput_tok_s(self) -> float:
        """The best goodput (output tok/s within the SLO) across the sweep."""
        return max((lv.goodput_tok_s for lv in self.levels), default=0.0)

    @property
    def goodput_per_8gpu_tok_s(self) -> float | None:
        """The catalog's headline metric: the best goodput normalised to 8 GPUs."""
        return self.goodput_tok_s * 8 / self.gpus if self.gpus else None

    @property
    def best(self) -> Level | None:
        return max(self.levels, key=lambda lv: lv.goodput_tok_s, default=None)


def _stat(doc: Mapping[str, Any], metric: str, stat: str) -> float | None:
    value = (doc.get(metric) or {}).get(stat)
    return None if value is None else float(value)


def level_from_aiperf(doc: Mapping[str, Any], concurrency: int) -> Level:
    """One level from aiperf's summary export.  aiperf's ``inter_token_latency`` is TPOT as vLLM
    defines it ((latency - TTFT) / (output tokens - 1), per request)."""
    if "request_count" not in doc and "error_request_count" not in doc:
        raise FleetError(f"aiperf's export has no request counts (keys: {', '.join(sorted(doc)[:8])} ...)")
    completed = int(_stat(doc, "request_count", "avg") or 0)
    good_req_s = _stat(doc, "goodput", "avg") or 0.0
    mean_out = _stat(doc, "output_sequence_length", "avg") or 0.0
    return Level(
        concurrency=concurrency,
        completed=completed,
        failed=int(_stat(doc, "error_request_count", "avg") or 0),
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
        "levels": [{k: getattr(lv, k) for k in LEVEL_KEYS} for lv in run.levels],
    }


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
            levels=tuple(Level(**{k: lv[k] for k in LEVEL_KEYS}) for lv in doc["levels"]),
            caveats=tuple(doc.get("caveats") or ()),
        )  # fmt: skip
    except (KeyError, TypeError, ValueError) as err:
        raise FleetError(f"saved bench run {run_id}: not a fleet bench report ({type(err).__name__}: {err})") from None
