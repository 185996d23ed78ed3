"""An engine's or router's load from its ``/metrics`` text, in the names of :mod:`.names`.

Contract: :func:`read` parses Prometheus text format (prometheus_client's own parser) and returns
a :class:`Load`: gauges of requests summed over their label sets (engine indexes, DP ranks,
workers), KV use the largest over label sets, counters summed; ``None`` where the program has no
such metric or did not expose it.  Text that does not parse raises :class:`ValueError`.
:func:`tokens_per_s` turns two readings into a generation rate (None across a restart, when the
counter went back).
"""

from __future__ import annotations

from dataclasses import dataclass

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


def read(names: MetricNames, text: str) -> Load:
    found = samples(text)

    def total(name: str | None) -> float | None:
        values = [v for _, v in found.get(name, ())] if name else []
        return sum(values) if values else None

    kv = [v for _, v in found.get(names.kv_usage, ())] if names.kv_usage else []
    return Load(
        running=total(names.running),
        waiting=total(names.waiting),
        kv_usage=max(kv) if kv else None,
        generation_tokens=total(names.generation_tokens),
        requests=total(names.requests),
    )


def tokens_per_s(before: Load, after: Load, seconds: float) -> float | None:
    a, b = before.generation_tokens, after.generation_tokens
    if a is None or b is None or seconds <= 0 or b < a:
        return None
    return (b - a) / seconds
