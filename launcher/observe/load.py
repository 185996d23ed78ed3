"""An engine's or router's load from its ``/metrics`` text, in the names of :mod:`.names`.

Contract: :func:`read` parses Prometheus text format (prometheus_client's own parser) of one
endpoint, or of several endpoints of one instance or of a router's workers, and returns a
:class:`Load`: gauges of requests summed over the engine cores that hold distinct requests and
counted once per core (:func:`requests_gauge`), KV use the largest over label sets, counters
summed; ``None`` where the program has no such metric or did not expose it.  Text that does not
parse raises :class:`ValueError`.
:func:`tokens_per_s` turns two readings into a generation rate (None across a restart, when the
counter went back).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

from prometheus_client.parser import text_string_to_metric_families

from launcher.observe.names import MetricNames


@dataclass(frozen=True, slots=True, kw_only=True)
class Load:
    running: float | None = None
    waiting: float | None = None
    kv_usage: float | None = None  # 0..1
    generation_tokens: float | None = None  # counter
    requests: float | None = None  # counter


def samples(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Every sample by its exposed name (``x_total``, ``x_bucket`` ...), with its labels."""
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, []).append((dict(s.labels), float(s.value)))
    return out


# The labels that tell apart the ranks of ONE engine core: SGLang's schedulers label their
# gauges with tp_rank / pp_rank / moe_ep_rank (observability/metrics_collector.py in 0.5.23).
# Every rank of a core that reports (attention-TP rank 0 of each DP group, each PP stage, and
# with --enable-metrics-for-all-schedulers every TP rank too) holds the same requests: they
# count once.  dp_rank (SGLang) and engine (vLLM's DP engine index) tell cores apart: summed.
RANK_LABELS: frozenset[str] = frozenset({"tp_rank", "pp_rank", "moe_ep_rank"})
_INSTANCE = "__fleet_instance__"  # added by read_instances: no exposition label starts with "__"


def requests_gauge(series: Iterable[tuple[Mapping[str, str], float]]) -> float | None:
    """A request gauge (running, waiting) over its series: the largest per core (label set less
    :data:`RANK_LABELS`), summed over cores; None without a series."""
    per_core: dict[tuple[tuple[str, str], ...], float] = {}
    for labels, value in series:
        core = tuple(sorted((k, v) for k, v in labels.items() if k not in RANK_LABELS))
        per_core[core] = max(value, per_core.get(core, value))
    return sum(per_core.values()) if per_core else None


def read(names: MetricNames, text: str) -> Load:
    """One endpoint's load."""
    return read_instances(names, ((text,),))


def read_instances(names: MetricNames, instances: Iterable[Sequence[str]]) -> Load:
    """The load of several instances, each given as the /metrics texts of its endpoints (every
    node of a DP-attention instance serves its own): the instances' loads added up, e.g. the
    workers behind a router.  Within an instance the ranks of one core count once
    (:func:`requests_gauge`); across instances equal label sets are different cores."""
    found: dict[str, list[tuple[dict[str, str], float]]] = {}
    for i, texts in enumerate(instances):
        for text in texts:
            for name, series in samples(text).items():
                found.setdefault(name, []).extend(({**labels, _INSTANCE: str(i)}, v) for labels, v in series)

    def total(name: str | None) -> float | None:
        values = [v for _, v in found.get(name, ())] if name else []
        return sum(values) if values else None

    kv = [v for _, v in found.get(names.kv_usage, ())] if names.kv_usage else []
    return Load(
        running=requests_gauge(found.get(names.running, ())) if names.running else None,
        waiting=requests_gauge(found.get(names.waiting, ())) if names.waiting else None,
        kv_usage=max(kv) if kv else None,
        generation_tokens=total(names.generation_tokens),
        requests=total(names.requests),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class Transfers:
    """An engine's KV-transfer counters (:attr:`MetricNames.kv_transfers` and siblings)."""

    done: float  # transfers completed
    seconds: float  # their summed duration
    failed: float
    bytes: float

    def since(self, before: Transfers) -> Transfers:
        return Transfers(done=self.done - before.done, seconds=self.seconds - before.seconds,
                         failed=self.failed - before.failed, bytes=self.bytes - before.bytes)  # fmt: skip

    @property
    def avg_ms(self) -> float | None:
        return 1000 * self.seconds / self.done if self.done > 0 else None


def transfers(names: MetricNames, text: str) -> Transfers | None:
    """The KV-transfer counters summed over label sets; None where the program has none.  A
    histogram or counter not exposed yet (no transfer so far) reads 0."""
    if names.kv_transfers is None:
        return None
    found = samples(text)

    def total(name: str | None) -> float:
        return sum(v for _, v in found.get(name, ())) if name else 0.0

    bytes_sum = f"{names.kv_transfer_bytes}_sum" if names.kv_transfer_bytes else None
    return Transfers(done=total(f"{names.kv_transfers}_count"), seconds=total(f"{names.kv_transfers}_sum"),
                     failed=total(names.kv_transfer_failures), bytes=total(bytes_sum))  # fmt: skip


def tokens_per_s(before: Load, after: Load, seconds: float) -> float | None:
    a, b = before.generation_tokens, after.generation_tokens
    if a is None or b is None or seconds <= 0 or b < a:
        return None
    return (b - a) / seconds


@dataclass(frozen=True, slots=True, kw_only=True)
class PrefixCache:
    """An engine's prefix-cache counters (:attr:`MetricNames.prefix_cache_queries`/``_hits``):
    prompt tokens looked up and found."""

    queries: float
    hits: float

    def since(self, before: PrefixCache) -> PrefixCache:
        return PrefixCache(queries=self.queries - before.queries, hits=self.hits - before.hits)

    def __add__(self, other: PrefixCache) -> PrefixCache:
        return PrefixCache(queries=self.queries + other.queries, hits=self.hits + other.hits)

    @property
    def hit_rate(self) -> float | None:
        return self.hits / self.queries if self.queries > 0 else None


def prefix_cache(names: MetricNames, text: str) -> PrefixCache | None:
    """The prefix-cache counters summed over label sets; None where the program has none.  A
    counter not exposed yet (no request so far) reads 0."""
    if names.prefix_cache_queries is None or names.prefix_cache_hits is None:
        return None
    found = samples(text)
    return PrefixCache(queries=sum(v for _, v in found.get(names.prefix_cache_queries, ())),
                       hits=sum(v for _, v in found.get(names.prefix_cache_hits, ())))  # fmt: skip
