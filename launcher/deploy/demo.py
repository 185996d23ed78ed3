"""What ``fleet demo`` asks a deployment once it is up: one real request to its serving endpoint
(the router of a PD deployment, rank 0 of the others), sent from the control node as a user
would, and who served it -- as the sandbox's engine stand-ins report it in every answer, or, for
a real engine, as the engines' own counters say (the leader whose completed-request counter in
``/metrics`` went up; its group's ranks are the plan's).

Contract: no printing (the CLI prints); an endpoint that does not answer is a one-line
:class:`FleetError`.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

from launcher.deploy.session import Target
from launcher.errors import FleetError


@dataclass(frozen=True, slots=True, kw_only=True)
class Endpoint:
    host: str
    unit: str
    role: str
    url: str  # scheme://address:port


@dataclass(frozen=True, slots=True, kw_only=True)
class Answer:
    endpoint: Endpoint
    text: str
    served_by: str  # host that produced the text (PD: the decode)
    prefill: str | None = None  # PD: the prefill host that computed the prompt's KV
    decode: str | None = None
    room: str | None = None  # PD: the bootstrap room the router assigned
    peers: tuple[str, ...] = ()  # multi-node: the ranks of the instance that answered
    seconds: float = 0.0


def endpoint(target: Target) -> Endpoint:
    """The router if the deployment has one, else the first unit with a health check (rank 0)."""
    checked = [d for d in target.units if d.unit.health is not None]
    if not checked:
        raise FleetError(f"{target.deployment}: no unit serves HTTP")
    chosen = next((d for d in checked if d.unit.role == "router"), checked[0])
    assert chosen.unit.health is not None
    base = chosen.unit.health.base
    return Endpoint(host=chosen.host, unit=chosen.name, role=chosen.unit.role, url=base)


_SERVED = ("vllm:request_success_total", "sglang:num_requests_total")  # completed requests


def leaders(target: Target) -> dict[str, tuple[str, tuple[str, ...]]]:
    """Per engine leader (rank 0 with a health check): host -> (base URL, its group's hosts)."""
    out = {}
    for d in target.units:
        if d.unit.health is not None and d.unit.role != "router" and d.unit.rank == 0:
            group = tuple(x.host for x in sorted(target.units, key=lambda x: x.unit.rank) if x.unit.group == d.unit.group)
            out[d.host] = (d.unit.health.base, group)
    return out


def served_count(base: str, timeout: float = 10.0) -> float | None:
    """The engine's completed-request counter (Prometheus text of ``/metrics``), None without one."""
    try:
        with urllib.request.urlopen(f"{base}/metrics", timeout=timeout) as r:
            text = r.read().decode(errors="replace")
    except (OSError, ValueError):
        return None
    total, seen = 0.0, False
    for line in text.splitlines():
        if line.split("{", 1)[0].split(" ", 1)[0] in _SERVED:
            try:
                total += float(line.rsplit(" ", 1)[-1])
            except ValueError:
                continue
            seen = True
    return total if seen else None


def _call(url: str, body: dict[str, Any] | None, timeout: float) -> dict[str, Any]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            doc: dict[str, Any] = json.loads(r.read())
            return doc
    except urllib.error.HTTPError as err:
        raise FleetError(f"{url}: HTTP {err.code}: {err.read()[:200].decode(errors='replace')}") from None
    except (OSError, ValueError) as err:
        raise FleetError(f"{url}: {err}") from None


def ask(
    ep: Endpoint, question: str, max_tokens: int = 12, timeout: float = 60.0,
    engines: dict[str, tuple[str, tuple[str, ...]]] | None = None,
) -> Answer:
    """An OpenAI chat completion through the endpoint; the stand-ins say who served it, else the
    counters of ``engines`` (:func:`leaders`) do."""
    engines = engines or {}
    before = {h: served_count(url, timeout) for h, (url, _) in engines.items()}
    t0 = time.monotonic()
    body = {"messages": [{"role": "user", "content": question}], "max_tokens": max_tokens}
    doc = _call(f"{ep.url}/v1/chat/completions", body, timeout)
    seconds = time.monotonic() - t0
    try:
        text = str(doc["choices"][0]["message"]["content"])
    except (KeyError, IndexError, TypeError):
        raise FleetError(f"{ep.url}/v1/chat/completions: unexpected answer {str(doc)[:200]}") from None
    origin: dict[str, Any] = doc.get("fleet_standin") or {}
    peers: tuple[str, ...] = ()
    if origin:
        served_by = str(origin.get("host", "?"))
        if ep.role != "router":
            info = _call(f"{ep.url}/server_info", None, timeout)
            peers = tuple(str(p.get("host", "?")) for p in info.get("peers") or ())
    else:
        after = {h: served_count(url, timeout) for h, (url, _) in engines.items()}
        grew = [h for h, n in after.items() if n is not None and (b := before[h]) is not None and n > b]
        served_by = grew[0] if len(grew) == 1 else "?"
        peers = engines[served_by][1] if served_by in engines else ()
    room = origin.get("bootstrap_room")
    return Answer(
        endpoint=ep, text=text, served_by=served_by, prefill=origin.get("prefill_host"),
        decode=origin.get("decode_host"), room=None if room is None else str(room), peers=peers,
        seconds=seconds,
    )  # fmt: skip
