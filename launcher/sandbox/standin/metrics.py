"""The engines' Prometheus ``/metrics`` as the stand-in serves them: the names, types and label
names SGLang 0.5.x (``--enable-metrics``; ``sglang/srt/metrics/collector.py``) and vLLM
(verified on vLLM 0.32.0's ``vllm/v1/metrics/loggers.py``) expose for what ``fleet top`` and the
dashboard read: running and waiting requests, KV-cache use, token and request counters, TTFT,
inter-token and end-to-end latency histograms, and the per-request time per output token (vLLM's;
SGLang's from 0.5.23, ``srt/observability/metrics_collector.py``).

The numbers follow the stand-in's real load: a request is *waiting* until one of the engine's
``max_running`` slots (SGLang ``--max-running-requests``, vLLM ``--max-num-seqs``) frees, then
*running* until its last token; the KV use is the prompt and generated tokens the running
requests hold over a pool of FLEET_STANDIN_KV_TOKENS (65536) tokens.

Stdlib only (it runs on the image's bare python3.11), like :mod:`standin.server`.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from typing import Iterator

# The engines' own default buckets (seconds).
_TTFT = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0)
_ITL = (0.002, 0.004, 0.006, 0.008, 0.01, 0.015, 0.02, 0.025, 0.03, 0.035, 0.04, 0.06, 0.08, 0.1, 0.2, 0.4, 1.0)
# vLLM 0.32's inter-token family (v1/metrics/buckets.py), also its per-request TPOT histogram's.
_TPOT = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)
# SGLang 0.5.23's default inter-token buckets (--bucket-inter-token-latency), which its
# per-request TPOT histogram reuses.
_SGLANG_TPOT = (0.002, 0.004, 0.006, 0.008, 0.01, 0.015, 0.02, 0.025, 0.03, 0.035, 0.04, 0.06, 0.08, 0.1, 0.2, 0.4,
                0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0)  # fmt: skip
_E2E = (0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 40.0, 60.0, 120.0, 240.0)
# vLLM's NixlConnector (kv_connector/v1/nixl/stats.py, 0.32.0): transfer time and bytes per transfer.
_NIXL_TIME = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 5.0)
_NIXL_BYTES = tuple(float(2 ** (10 + i)) for i in range(1, 25, 2))


class _Histogram:
    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * len(bounds)
        self.total = 0
        self.sum = 0.0

    def observe(self, value: float) -> None:
        for i, bound in enumerate(self.bounds):
            if value <= bound:
                self.counts[i] += 1
        self.total += 1
        self.sum += value

    def lines(self, name: str, labels: str) -> list[str]:
        sep = "," if labels else ""
        out = [f'{name}_bucket{{{labels}{sep}le="{b}"}} {c}' for b, c in zip(self.bounds, self.counts)]
        out += [f'{name}_bucket{{{labels}{sep}le="+Inf"}} {self.total}',
                f"{name}_sum{{{labels}}} {self.sum}", f"{name}_count{{{labels}}} {self.total}"]  # fmt: skip
        return out


class Request:
    """One admitted request's timing: :meth:`token` per generated token."""

    def __init__(self, stats: Stats, prompt_tokens: int) -> None:
        self.stats = stats
        self.started = time.monotonic()
        self.first: float | None = None
        self.last: float | None = None
        self.tokens = 0
        self.held = prompt_tokens

    def token(self) -> None:
        now = time.monotonic()
        with self.stats.lock:
            if self.last is None:
                self.first = now
                self.stats.ttft.observe(now - self.started)
            else:
                self.stats.itl.observe(now - self.last)
            self.last = now
            self.tokens += 1
            self.held += 1
            self.stats.kv_tokens += 1
            self.stats.generation_tokens += 1


class Stats:
    """Load and latency of one engine, rendered in that engine's metric names."""

    def __init__(self, engine: str, model: str, max_running: int, kv_pool_tokens: int, kv_transfers: bool = False) -> None:
        self.engine = engine
        # vLLM with a NixlConnector: its decode counts the KV transfers it pulled (fleet's PD
        # canary reads them).  The stand-in moves no KV cache: its bytes stay 0.
        self.kv_transfers = kv_transfers
        self.xfer_time, self.xfer_bytes, self.xfer_failed = _Histogram(_NIXL_TIME), _Histogram(_NIXL_BYTES), 0
        self.model = model
        self.lock = threading.Lock()
        self.slots = threading.BoundedSemaphore(max_running)
        self.kv_pool = max(1, kv_pool_tokens)
        self.running = 0
        self.waiting = 0
        self.kv_tokens = 0
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.requests = 0
        self.ttft, self.itl, self.e2e = _Histogram(_TTFT), _Histogram(_ITL), _Histogram(_E2E)
        self.tpot = _Histogram(_SGLANG_TPOT if engine == "sglang" else _TPOT)

    @contextmanager
    def admitted(self, prompt_tokens: int) -> Iterator[Request]:
        """Waits for a running slot (counted as waiting meanwhile), then runs the request."""
        req = Request(self, prompt_tokens)  # TTFT and end-to-end count from arrival, queueing included
        with self.lock:
            self.waiting += 1
        self.slots.acquire()
        with self.lock:
            self.waiting -= 1
            self.running += 1
            self.kv_tokens += prompt_tokens
            self.prompt_tokens += prompt_tokens
        try:
            yield req
        finally:
            with self.lock:
                self.running -= 1
                self.kv_tokens -= req.held
                self.requests += 1
                self.e2e.observe(time.monotonic() - req.started)
                if req.first is not None and req.last is not None and req.tokens > 1:
                    self.tpot.observe((req.last - req.first) / (req.tokens - 1))  # as both engines', per request
            self.slots.release()

    def transferred(self, seconds: float | None) -> None:
        """One KV transfer done (``seconds``) or failed (None)."""
        with self.lock:
            if seconds is None:
                self.xfer_failed += 1
            else:
                self.xfer_time.observe(seconds)
                self.xfer_bytes.observe(0.0)

    def render(self) -> bytes:
        with self.lock:
            lines = self._sglang() if self.engine == "sglang" else self._vllm()
        return ("\n".join(lines) + "\n").encode()

    def _sglang(self) -> list[str]:
        model = f'model_name="{self.model}"'
        sched = f'{model},engine_type="unified",tp_rank="0",pp_rank="0"'
        out = _metric("sglang:num_running_reqs", "gauge", sched, self.running)
        out += _metric("sglang:num_queue_reqs", "gauge", sched, self.waiting)
        out += _metric("sglang:token_usage", "gauge", sched, self.kv_tokens / self.kv_pool)
        out += _metric("sglang:max_total_num_tokens", "gauge", sched, self.kv_pool)
        out += _metric("sglang:prompt_tokens_total", "counter", model, self.prompt_tokens)
        out += _metric("sglang:generation_tokens_total", "counter", model, self.generation_tokens)
        out += _metric("sglang:num_requests_total", "counter", model, self.requests)
        out += _metric("sglang:cached_tokens_total", "counter", model, 0)  # no prefix cache: no hit
        out += _histogram("sglang:time_to_first_token_seconds", model, self.ttft)
        out += _histogram("sglang:inter_token_latency_seconds", model, self.itl)
        # 0.5.23 also labels TPOT (and TTFT, e2e) with is_streaming; the stand-in keeps 0.5's
        # model_name only on every histogram: fleet's queries sum it away
        out += _histogram("sglang:request_time_per_output_token_seconds", model, self.tpot)
        out += _histogram("sglang:e2e_request_latency_seconds", model, self.e2e)
        return out

    def _vllm(self) -> list[str]:
        labels = f'model_name="{self.model}",engine="0"'
        out = _metric("vllm:num_requests_running", "gauge", labels, self.running)
        out += _metric("vllm:num_requests_waiting", "gauge", labels, self.waiting)
        out += _metric("vllm:kv_cache_usage_perc", "gauge", labels, self.kv_tokens / self.kv_pool)
        out += _metric("vllm:prompt_tokens_total", "counter", labels, self.prompt_tokens)
        out += _metric("vllm:generation_tokens_total", "counter", labels, self.generation_tokens)
        # no prefix cache: every prompt token looked up, none found
        out += _metric("vllm:prefix_cache_queries_total", "counter", labels, self.prompt_tokens)
        out += _metric("vllm:prefix_cache_hits_total", "counter", labels, 0)
        out += _metric("vllm:request_success_total", "counter", f'{labels},finished_reason="length"', self.requests)
        out += _histogram("vllm:time_to_first_token_seconds", labels, self.ttft)
        out += _histogram("vllm:inter_token_latency_seconds", labels, self.itl)
        out += _histogram("vllm:request_time_per_output_token_seconds", labels, self.tpot)
        out += _histogram("vllm:e2e_request_latency_seconds", labels, self.e2e)
        if self.kv_transfers:
            out += _histogram("vllm:nixl_xfer_time_seconds", labels, self.xfer_time)
            out += _histogram("vllm:nixl_bytes_transferred", labels, self.xfer_bytes)
            out += _metric("vllm:nixl_num_failed_transfers_total", "counter", labels, self.xfer_failed)
        return out


def _metric(name: str, kind: str, labels: str, value: float) -> list[str]:
    return [f"# TYPE {name} {kind}", f"{name}{{{labels}}} {value}"]


def _histogram(name: str, labels: str, h: _Histogram) -> list[str]:
    return [f"# TYPE {name} histogram", *h.lines(name, labels)]
