"""Reading the units' ``/metrics`` from their own hosts over SSH: one command per host per read.

Why over SSH and not from the control host: fleet already reaches every host over SSH (it
deploys that way), while the data network the engines listen on is often not routed to the
control host on a real cluster (an RDMA fabric, a private VLAN).  On its host a unit's endpoint
is always reachable, as the health checks that run there show.

Contract: :func:`fetch_argv` is pure: an ``sh -c`` script taking the URLs as positional
parameters (no value is spliced into shell text) that GETs each with curl, wget or python3
(whichever the host has, like the health probes) within ``timeout_s`` and prints, per URL, a
header line, the body and a status line.  :func:`parse` reads that back into body or error per
URL.  :func:`fetch` runs it on every host at once (bounded fan-out).
"""

from __future__ import annotations

from typing import Mapping, Sequence

from launcher import hostscripts
from launcher.remote import sh
from launcher.errors import FleetError, HostKeyError
from launcher.execute.fanout import Connector, Ok, Unreachable, run_all
from launcher.execute.transport import Transport
from launcher.model import Host
from launcher.observe.targets import Endpoint

_HEAD, _TAIL = "@@fleet-metrics ", "@@fleet-metrics-status "
_SCRIPT = hostscripts.text("fetch-metrics.sh")
TIMEOUT_S = 3


def fetch_argv(urls: Sequence[str], timeout_s: int = TIMEOUT_S) -> tuple[str, ...]:
    return sh(_SCRIPT, _HEAD, _TAIL, str(timeout_s), *urls)


def parse(out: str) -> dict[str, str | FleetError]:
    """URL -> metrics text, or the error that GET ended with (its last line)."""
    found: dict[str, str | FleetError] = {}
    url: str | None = None
    body: list[str] = []
    for line in out.splitlines():
        if line.startswith(_HEAD):
            url, body = line[len(_HEAD) :], []
        elif line.startswith(_TAIL) and url is not None:
            text = "\n".join(body).strip("\n")
            if line[len(_TAIL) :] == "0":
                found[url] = text + "\n"
            else:
                lines = text.splitlines()
                found[url] = FleetError(lines[-1] if lines else f"GET {url} failed")
            url = None
        elif url is not None:
            body.append(line)
    return found


def fetch(
    hosts: Sequence[Host], eps: Sequence[Endpoint], connector: Connector, forks: int
) -> dict[tuple[str, str], str | FleetError]:
    """(host, unit) -> metrics text or error; an unreachable host's units get its error.  An
    unknown or changed host key refuses the whole read, as every fleet command does."""
    by_host: dict[str, list[str]] = {}
    for ep in eps:
        by_host.setdefault(ep.host, []).append(ep.url)
    got = fetch_urls(hosts, by_host, connector, forks)
    return {(ep.host, ep.unit): got[ep.host][ep.url] for ep in eps}


def fetch_urls(
    hosts: Sequence[Host], urls: Mapping[str, Sequence[str]], connector: Connector, forks: int
) -> dict[str, dict[str, str | FleetError]]:
    """host name -> URL -> body or error, each URL of ``urls[host]`` GET on that host (one
    command per host, all hosts at once); an unreachable host's URLs get its error.  An unknown
    or changed host key refuses the whole read."""
    scope = [h for h in hosts if h.name in urls]
    result = run_all(scope, lambda h, t: _host(t, urls[h.name]), connector=connector, forks=forks)
    out: dict[str, dict[str, str | FleetError]] = {}
    for outcome in result.outcomes:
        name = outcome.host.name
        if isinstance(outcome, Unreachable) and isinstance(outcome.error, HostKeyError):
            raise outcome.error
        mine: dict[str, str | FleetError] = {}
        for url in urls[name]:
            if isinstance(outcome, Ok):
                mine[url] = outcome.value.get(url) or FleetError(f"{name}: GET {url}: no answer")
            elif isinstance(outcome, Unreachable):
                mine[url] = outcome.error
            else:
                mine[url] = FleetError(f"{name}: {outcome.message}")
        out[name] = mine
    return out


def _host(t: Transport, urls: Sequence[str]) -> Mapping[str, str | FleetError]:
    result = t.run(fetch_argv(urls), timeout=TIMEOUT_S * len(urls) + 10)
    return parse(result.stdout_text)
