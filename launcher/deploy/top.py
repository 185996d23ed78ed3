"""``fleet top``'s rows: per unit, what ``status`` knows (state, health, generation) and what
its own metrics say (requests running and waiting, tokens/s, KV-cache use).

Contract: :func:`sample` reads every endpoint's metrics once (over SSH, :mod:`launcher.observe.fetch`) with the
time it was read; :func:`rows` is pure: it joins status rows, endpoints and two samples (the
rate of generated tokens is the counter's change between them).  A unit without metrics (a
non-zero rank that serves none, the gateway) shows ``None`` for the load; a failed read shows the error.

A router's requests running and waiting are its workers' own gauges added up (every endpoint of
each instance it routes to, :func:`launcher.observe.load.read_instances`), not a router gauge:
sglang-router 0.3.2 and vllm-router 0.1.17 export their per-worker in-flight gauges under some
``--policy`` values only (``launcher/observe/names.py``), the engines count under all of them.
``None`` unless every worker instance was read (a ``--limit`` leaving a worker's host out, a
failed read): a partial sum would understate the load without saying so.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, replace
from typing import Any, Mapping, Sequence

from launcher.execute.fanout import Connector
from launcher.deploy.status import UnitStatus
from launcher.errors import FleetError
from launcher.model import Host
from launcher.observe.fetch import fetch
from launcher.observe.load import Load, read, read_instances, tokens_per_s
from launcher.observe.names import names_for
from launcher.observe.targets import Endpoint

Key = tuple[str, str]  # (host, unit)


@dataclass(frozen=True, slots=True, kw_only=True)
class Sample:
    at: float  # time.monotonic() when read
    loads: Mapping[Key, Load | str]  # a load, or why it could not be read


@dataclass(frozen=True, slots=True, kw_only=True)
class Row:
    host: str
    unit: str
    role: str
    rank: int
    group: str
    state: str
    health: str
    generation: int | None
    kind: str | None
    running: float | None = None
    waiting: float | None = None
    tokens_per_s: float | None = None
    kv_usage: float | None = None
    requests: float | None = None
    error: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def sample(
    hosts: Sequence[Host], eps: Sequence[Endpoint], versions: Mapping[str, str | None], connector: Connector, forks: int
) -> Sample:
    """``versions``: the program version per endpoint kind, for :func:`names_for`."""
    texts = fetch(hosts, eps, connector, forks)
    at = time.monotonic()
    loads: dict[Key, Load | str] = {}
    for ep in eps:
        got = texts[(ep.host, ep.unit)]
        if isinstance(got, FleetError):
            loads[(ep.host, ep.unit)] = str(got)
            continue
        try:
            loads[(ep.host, ep.unit)] = read(names_for(ep.kind, versions.get(ep.kind)), got)
        except ValueError as err:
            loads[(ep.host, ep.unit)] = f"{ep.url}: not Prometheus text: {err}"
    for ep in eps:
        own = loads[(ep.host, ep.unit)]
        if ep.workers and isinstance(own, Load):
            running, waiting = _workers_load(ep, eps, texts, versions)
            loads[(ep.host, ep.unit)] = replace(own, running=running, waiting=waiting)
    return Sample(at=at, loads=loads)


def _workers_load(
    router: Endpoint, eps: Sequence[Endpoint], texts: Mapping[Key, str | FleetError], versions: Mapping[str, str | None]
) -> tuple[float | None, float | None]:
    """(running, waiting) over every endpoint of the instances ``router`` routes to; (None,
    None) unless all of them were read and are of one kind."""
    leaders = {ep.address: ep for ep in eps if ep.rank == 0 and not ep.workers}
    if not all(w in leaders for w in router.workers):
        return None, None
    groups = {leaders[w].group for w in router.workers}
    members = [ep for ep in eps if ep.group in groups and not ep.workers]
    kinds = {ep.kind for ep in members}
    got = [texts.get((ep.host, ep.unit)) for ep in members]
    if len(kinds) != 1 or not all(isinstance(t, str) for t in got):
        return None, None
    by_group: dict[str, list[str]] = {}
    for ep, text in zip(members, got):
        by_group.setdefault(ep.group, []).append(str(text))
    kind = kinds.pop()
    try:
        load = read_instances(names_for(kind, versions.get(kind)), by_group.values())
    except ValueError:  # the worker's own row says why
        return None, None
    return load.running, load.waiting


def rows(statuses: Sequence[UnitStatus], eps: Sequence[Endpoint], now: Sample, before: Sample | None) -> tuple[Row, ...]:
    kinds = {(ep.host, ep.unit): ep.kind for ep in eps}
    out = []
    for st in statuses:
        key = (st.host, st.unit)
        base = Row(
            host=st.host, unit=st.unit, role=st.role, rank=st.rank, group=st.group, state=st.state,
            health=st.health, generation=st.generation, kind=kinds.get(key),
        )  # fmt: skip
        load = now.loads.get(key)
        if isinstance(load, str):
            out.append(replace(base, error=load))
        elif load is not None:
            prev = before.loads.get(key) if before is not None else None
            rate = tokens_per_s(prev, load, now.at - before.at) if isinstance(prev, Load) and before else None
            out.append(replace(base, running=load.running, waiting=load.waiting, tokens_per_s=rate,
                             kv_usage=load.kv_usage, requests=load.requests))  # fmt: skip
        else:
            out.append(base)
    return tuple(out)

