"""The engines' own prefix-cache hit rate during a bench level, read from their ``/metrics`` on
their own hosts (as ``fleet top`` reads them) before and after the level.

Contract: :func:`engine_endpoints` is pure: the endpoints whose prompts the engines process (a
prefill/decode deployment's prefills -- they run the prompts -- else every engine leader).
:func:`read` sums their :class:`~launcher.observe.load.PrefixCache` counters; None when one
cannot be read or its engine has no such counters (then the report shows no rate).  A level
whose hit rate is above :data:`HIGH` is flagged: its prompts were (partly) answered from cache,
so its TTFT and throughput look better than cold prompts would.
"""

from __future__ import annotations

from typing import Sequence

from launcher.execute.fanout import Connector
from launcher.model import Host, Unit
from launcher.observe.fetch import fetch
from launcher.observe.load import PrefixCache, prefix_cache
from launcher.observe.names import names_for
from launcher.observe.targets import Endpoint, endpoints

HIGH = 0.2  # a share of prompt tokens found in cache above which a level is flagged
_PROMPT_ROLES = ("single", "rank", "prefill")


def engine_endpoints(units: Sequence[Unit]) -> tuple[Endpoint, ...]:
    eps = [ep for ep in endpoints(units) if ep.role in _PROMPT_ROLES]
    prefills = [ep for ep in eps if ep.role == "prefill"]
    return tuple(prefills or eps)


def read(hosts: Sequence[Host], eps: Sequence[Endpoint], connector: Connector, forks: int) -> PrefixCache | None:
    texts = fetch(hosts, eps, connector, forks)
    total = PrefixCache(queries=0.0, hits=0.0)
    for ep in eps:
        text = texts.get((ep.host, ep.unit))
        if not isinstance(text, str):
            return None
        try:
            found = prefix_cache(names_for(ep.kind), text)
        except ValueError:  # not Prometheus text
            return None
        if found is None:
            return None
        total = total + found
    return total


def flagged(rate: float | None) -> bool:
    return rate is not None and rate > HIGH
