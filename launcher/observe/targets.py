"""Scrape targets from a plan (pure): every unit's metrics endpoint and its labels, and the
Prometheus ``file_sd`` target groups for them.

Contract: :func:`endpoints` lists, in plan order, one :class:`Endpoint` per unit that serves
metrics: an engine instance's rank 0 on its HTTP port (vLLM always, SGLang with
``--enable-metrics``, which fleet renders), a router on its ``router_metrics`` port
(sglang-router's and vllm-router's Prometheus listener) and the Mooncake master on its
``mooncake_metrics`` port, each at the host's data IP (what the health checks and routers use).
Non-zero ranks of an instance serve no HTTP and the gateway no metrics: they have none.
:func:`scrape_endpoints` adds the non-zero ranks whose own /metrics holds requests rank 0's does
not (SGLang's other nodes under attention DP, ``Engine.node_metrics``): what Prometheus and
``fleet top`` read.  A router's endpoint names the engine endpoints it fronts (``workers``, from
the URLs of its argv), whose load is the router's.
:func:`target_groups` labels each deployed endpoint with deployment, recipe, role, rank, host,
generation, group, unit and kind; an endpoint whose unit is not deployed (no generation) is left
out, so a ``down`` empties the deployment's targets.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping
from urllib.parse import urlsplit

from launcher.engines import registry
from launcher.engines.context import HTTP
from launcher.model import Unit
from launcher.observe.names import Kind, kind_of

METRICS_PATH = "/metrics"
# The label names fleet puts on every target (dashboards and `fleet top` rely on these).
LABELS: tuple[str, ...] = ("deployment", "recipe", "role", "rank", "host", "generation", "group", "unit", "kind")
# The port a kind serves /metrics on; an engine's is its HTTP port.
_PORT_OF: Mapping[Kind, str] = {
    "sglang-router": "router_metrics", "vllm-router": "router_metrics", "mooncake-master": "mooncake_metrics",
}  # fmt: skip


@dataclass(frozen=True, slots=True, kw_only=True)
class Endpoint:
    host: str  # inventory name
    unit: str
    role: str
    rank: int
    group: str
    kind: Kind
    address: str  # "<data ip>:<port>" (IPv6 in brackets)
    workers: tuple[str, ...] = ()  # a router's: the addresses of the engine leaders it routes to

    @property
    def url(self) -> str:
        return f"http://{self.address}{METRICS_PATH}"


def endpoints(units: Iterable[Unit]) -> tuple[Endpoint, ...]:
    out = []
    for u in units:
        kind = kind_of(u.argv)
        port = u.ports.get(_PORT_OF.get(kind, HTTP)) if kind is not None else None
        if kind is None or port is None or u.health is None:
            continue  # only a unit that serves HTTP has a health check: rank 0 of an instance
        ip = urlsplit(u.health.url).hostname
        assert ip is not None, u.health.url  # the planner writes http://<data ip>:<port>/...
        workers = _workers(u.argv) if kind in _PORT_OF else ()
        out.append(Endpoint(host=u.host, unit=u.name, role=u.role, rank=u.rank, group=u.group, kind=kind,
                            address=_address(ip, port), workers=workers))  # fmt: skip
    return tuple(out)


def scrape_endpoints(units: Iterable[Unit]) -> tuple[Endpoint, ...]:
    """:func:`endpoints` and, in plan order among them, the non-zero ranks that serve metrics of
    their own (``Engine.node_metrics``)."""
    units = tuple(units)
    leaders = {(e.host, e.unit): e for e in endpoints(units)}
    out = []
    for u in units:
        if (u.host, u.name) in leaders:
            out.append(leaders[(u.host, u.name)])
            continue
        engine = registry.of_argv(u.argv)
        at = engine.node_metrics(u.argv, u.env) if engine is not None and u.rank > 0 else None
        if engine is not None and at is not None:
            out.append(Endpoint(host=u.host, unit=u.name, role=u.role, rank=u.rank, group=u.group,
                                kind=engine.metrics_kind, address=_address(*at)))  # fmt: skip
    return tuple(out)


def _workers(argv: tuple[str, ...]) -> tuple[str, ...]:
    """The host:port of every URL in a router's argv (``--worker-urls``, ``--prefill``,
    ``--decode`` values: the planner writes each leader's http://<data ip>:<port>)."""
    out = []
    for token in argv:
        if token.startswith(("http://", "https://")):
            try:
                parts = urlsplit(token)
                if parts.hostname is not None and parts.port is not None:
                    out.append(_address(parts.hostname, parts.port))
            except ValueError:  # not a URL after all: no worker
                continue
    return tuple(out)


def _address(ip: str | None, port: int | None) -> str:
    return f"[{ip}]:{port}" if ip is not None and ":" in ip else f"{ip}:{port}"


def labels(ep: Endpoint, deployment: str, recipe: str, generation: int) -> dict[str, str]:
    values = {
        "deployment": deployment, "recipe": recipe, "role": ep.role, "rank": str(ep.rank), "host": ep.host,
        "generation": str(generation), "group": ep.group, "unit": ep.unit, "kind": ep.kind,
    }  # fmt: skip
    return {k: values[k] for k in LABELS}


def target_groups(
    deployment: str, recipe: str, eps: Iterable[Endpoint], generations: Mapping[tuple[str, str], int | None]
) -> list[dict[str, Any]]:
    """``file_sd`` target groups, one per deployed endpoint; ``generations`` by (host, unit)."""
    out: list[dict[str, Any]] = []
    for ep in eps:
        gen = generations.get((ep.host, ep.unit))
        if gen is not None:
            out.append({"targets": [ep.address], "labels": labels(ep, deployment, recipe, gen)})
    return out


WATCH_KIND = "fleet-watch"


def watch_group(deployment: str, recipe: str, host: str, address: str) -> dict[str, Any]:
    """The target group of ``fleet watch``'s own endpoint (``address``: host:port) for one
    deployment it watches, on control host ``host``."""
    return {"targets": [address], "labels": {"deployment": deployment, "recipe": recipe, "role": "watch", "host": host,
                                             "unit": "fleet-watch", "kind": WATCH_KIND}}  # fmt: skip
