"""The engine version the running servers say they are (each engine's own version endpoint:
vLLM's ``/version``, SGLang's ``/server_info``), read on the leaders' hosts as ``fleet top``
reads their metrics -- what a bench report states, not the recipe's ``engine_version``.

Contract: :func:`version_of` is pure (one answer's JSON ``version`` field, or None);
:func:`read` GETs every engine leader's version paths (``Engine.version_paths``) on its host,
one command per host, and returns the distinct versions reported and, per leader that did not
say, why.  It sends no load.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Sequence

from launcher.engines import registry
from launcher.execute.fanout import Connector
from launcher.model import Host, Unit
from launcher.observe.fetch import fetch_urls
from launcher.observe.targets import Endpoint, endpoints

ENGINE_ROLES = ("single", "rank", "prefill", "decode")


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerVersion:
    versions: tuple[str, ...]  # distinct versions the leaders reported, sorted
    unread: tuple[str, ...]  # "host/unit: why" per leader that did not say

    @property
    def text(self) -> str:
        """``0.32.0`` (``0.32.0, 0.33.1`` mid-rollout); "" when no leader said."""
        return ", ".join(self.versions)


def version_of(body: str) -> str | None:
    """The ``version`` field of a JSON object; None when ``body`` is not one or has none."""
    try:
        doc = json.loads(body)
    except ValueError:
        return None
    value = doc.get("version") if isinstance(doc, dict) else None
    return value.strip() or None if isinstance(value, str) else None


def _urls(ep: Endpoint) -> tuple[str, ...]:
    paths = next((e.version_paths for e in registry.engines() if e.metrics_kind == ep.kind), ())
    return tuple(f"http://{ep.address}{p}" for p in paths)


def read(hosts: Sequence[Host], units: Sequence[Unit], connector: Connector, forks: int) -> ServerVersion:
    leaders = [ep for ep in endpoints(units) if ep.role in ENGINE_ROLES]
    by_host: dict[str, list[str]] = {}
    for ep in leaders:
        by_host.setdefault(ep.host, []).extend(_urls(ep))
    got = fetch_urls(hosts, by_host, connector, forks)
    versions: set[str] = set()
    unread: list[str] = []
    for ep in leaders:
        urls = _urls(ep)
        answers = [got.get(ep.host, {}).get(u) for u in urls]
        found = next((v for a in answers if isinstance(a, str) and (v := version_of(a))), None)
        if found is not None:
            versions.add(found)
            continue
        why = next((str(a) for a in answers if a is not None and not isinstance(a, str)), "")
        why = why or (f"no version in {', '.join(urls)}" if urls else "the engine has no version endpoint")
        unread.append(f"{ep.host}/{ep.unit}: {why}")
    return ServerVersion(versions=tuple(sorted(versions)), unread=tuple(unread))
