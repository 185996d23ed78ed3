"""The routers a rollout drains groups through: ``--router`` as given, else the deployment's own.

Contract: :func:`planned_routers` is pure; :func:`drain_router_urls` asks each planned router
once (``GET /workers``) and hands ``note`` one line per router: used, or left out because it
does not answer.
"""

from __future__ import annotations

from typing import Callable, Sequence

from launcher.deploy.session import Target
from launcher.rolling.router_api import RouterClient, RouterError


def clients(urls: Sequence[str]) -> tuple[RouterClient, ...]:
    return tuple(RouterClient(u) for u in urls)


def planned_routers(target: Target) -> tuple[str, ...]:
    """The deployment's own router (a ``router`` placement in front of single/multinode
    replicas), reached at its host's SSH address: what a rolling restart drains through when no
    ``--router`` is given.  PD routers are not: their workers are prefill/decode pairs, which
    roll by cohort behind a front router."""
    if any(d.unit.role in ("prefill", "decode") for d in target.units):
        return ()
    hosts = {h.name: h for h in target.hosts}
    return tuple(
        f"http://{hosts[d.host].address}:{d.unit.ports['router']}"
        for d in target.units
        if d.unit.role == "router" and d.host in hosts and "router" in d.unit.ports
    )


def drain_router_urls(given: Sequence[str], target: Target, note: Callable[[str], None]) -> tuple[str, ...]:
    """``--router`` as given, else the deployment's own routers that answer (one that does not
    -- not deployed yet, or down -- is named and left out: groups then restart undrained)."""
    if given:
        return tuple(given)
    answering = []
    for url in planned_routers(target):
        try:
            RouterClient(url).workers()
        except RouterError as err:
            note(f"fleet: note: the deployment's router does not answer ({err}); groups are not drained through it")
            continue
        note(f"fleet: note: draining through the deployment's router {url} (--router overrides)")
        answering.append(url)
    return tuple(answering)
