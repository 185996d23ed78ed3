"""A prefill/decode deployment is healthy only when a request crosses it.

Every rank answering /health proves nothing about the KV transfer: a decode that cannot reach
its prefill's NIXL side channel, or whose UCX has no usable interface, still answers /health,
and depending on the engine's failure policy the request either fails or is recomputed on the
decode (the KV never moved).  So after every rank is up, ``fleet up`` (and ``fleet status
--probe``) sends one canary completion through the deployment's router and checks, on the
decode side, that the KV was transferred: the engine's own transfer counters in its
``/metrics`` (:attr:`launcher.observe.names.MetricNames.kv_transfers`: vLLM's NixlConnector
``vllm:nixl_xfer_time_seconds`` count and ``vllm:nixl_num_failed_transfers``; the decode pulls
the KV, so the decode counts it).  It applies where the decode engine has such counters (vLLM);
SGLang's PD has none fleet reads, so its deployments are not checked here.

Contract: :func:`applies` is pure; :func:`cross` runs over open connections (the canary from the
router's own host, the counters read on each decode's host: data-plane addresses only the hosts
reach) and never raises for what the deployment does -- it returns a :class:`Crossing` whose
``error`` is one line naming the router, prefill and decode hosts and the engine's own error
line from their logs (the first ERROR line or exception logged during the canary).
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field, replace
from typing import Callable, Mapping, Sequence

from launcher.deploy.desired import Desired
from launcher.remote import STEP_TIMEOUT_S
from launcher.engines import registry
from launcher.execute.transport import Transport
from launcher.observe import fetch
from launcher.observe.load import Transfers, transfers
from launcher.observe.names import kind_of, names_for
from launcher.hosthttp import HostHttp
from launcher.runtimes import registry as runtimes

CANARY_PROMPT = "fleet canary: a request that must cross from prefill to decode"
CANARY_TOKENS = 4
CANARY_TIMEOUT_S = 300  # one short completion, but a loaded 2-core sandbox took 26 s for one
SETTLE_S = 10.0  # the decode's counters follow its engine loop's stats by a step
_LOG_LINES = 400
# vLLM's log level field ("(EngineCore pid=9) ERROR 12-02 06:01:02 [file.py:12] ...") or a
# Python exception's closing line.
_ERROR = re.compile(r"\bERROR\b|^(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception): ")
_HANDSHAKE = re.compile(r"handshake", re.IGNORECASE)  # vLLM: "NIXL transfer failure: handshake_setup_failed"


@dataclass(frozen=True, slots=True, kw_only=True)
class Crossing:
    router: str  # host
    prefill: tuple[str, ...]  # hosts
    decode: tuple[str, ...]  # hosts
    moved: Mapping[str, Transfers] = field(default_factory=dict)  # decode host -> during the canary
    seconds: float = 0.0  # the canary's round trip through the router
    error: str = ""  # one line; "" when the KV crossed
    first: str = ""  # the first canary's error when it failed to set up the transfer and was sent again

    @property
    def ok(self) -> bool:
        return not self.error

    def evidence(self) -> str:
        """One line: which decode pulled how much from which prefill, in the engine's figures."""
        parts = []
        for host, t in self.moved.items():
            if t.done > 0:
                avg = f", avg {t.avg_ms:.1f} ms" if t.avg_ms is not None else ""
                parts.append(f"decode {host} pulled the KV from prefill {'/'.join(self.prefill)}: "
                             f"{t.done:g} transfer(s){avg}, {t.bytes:g} bytes, {t.failed:g} failed")  # fmt: skip
        again = f" (sent twice; the first: {self.first})" if self.first else ""
        return (f"PD canary through the router on {self.router} ({self.seconds:.1f}s): " + ("; ".join(parts) or "no transfer")
                + again)

    def as_json(self) -> dict[str, object]:
        return {
            "router": self.router, "prefill": list(self.prefill), "decode": list(self.decode), "ok": self.ok,
            "seconds": round(self.seconds, 3), "error": self.error, "first": self.first,
            "transfers": {h: {"done": t.done, "avg_ms": t.avg_ms, "bytes": t.bytes, "failed": t.failed}
                          for h, t in self.moved.items()},
        }  # fmt: skip


@dataclass(frozen=True, slots=True, kw_only=True)
class _Roles:
    router: Desired
    prefill: tuple[Desired, ...]  # serving ranks (health-checked)
    decode: tuple[Desired, ...]


def _roles(units: Sequence[Desired]) -> _Roles | None:
    def serving(role: str) -> tuple[Desired, ...]:
        return tuple(d for d in units if d.unit.role == role and d.unit.health is not None)

    routers, prefill, decode = serving("router"), serving("prefill"), serving("decode")
    if len(routers) != 1 or not prefill or not decode:
        return None
    return _Roles(router=routers[0], prefill=prefill, decode=decode)


def applies(units: Sequence[Desired]) -> bool:
    """A PD deployment (one router, prefill and decode instances, all in ``units``) whose decode
    engine exposes KV-transfer counters."""
    roles = _roles(units)
    if roles is None:
        return False
    kind = kind_of(roles.decode[0].unit.argv)
    return kind is not None and names_for(kind).kv_transfers is not None


def _base(d: Desired) -> str:
    assert d.unit.health is not None
    return d.unit.health.base


def _read(t: Transport, d: Desired) -> Transfers | None:
    url = _base(d) + "/metrics"
    text = fetch.parse(t.run(fetch.fetch_argv([url]), timeout=fetch.TIMEOUT_S + 10).stdout_text).get(url)
    kind = kind_of(d.unit.argv)
    if not isinstance(text, str) or kind is None:
        return None
    try:
        return transfers(names_for(kind), text)
    except ValueError:
        return None


def decode_transfers(transports: Mapping[str, Transport], units: Sequence[Desired]) -> Transfers | None:
    """The KV-transfer counters of every decode of the deployment, summed (``fleet bench``
    reads them around each level); None when a decode serves none."""
    roles = _roles(units)
    assert roles is not None, "decode_transfers() on a deployment applies() refused"
    read = [_read(transports[d.host], d) for d in roles.decode]
    if any(t is None for t in read):
        return None
    return Transfers(done=sum(t.done for t in read if t), seconds=sum(t.seconds for t in read if t),
                     failed=sum(t.failed for t in read if t), bytes=sum(t.bytes for t in read if t))  # fmt: skip


def _log_position(t: Transport, d: Desired) -> str | None:
    rt = runtimes.get(d.unit.runtime)
    lines = rt.parse_log(t.run(rt.logs_argv(d.name, 1), timeout=STEP_TIMEOUT_S).stdout_text)
    return next((p for p, _ in reversed(lines) if p), None)


def _error_line(t: Transport, d: Desired, since: str | None) -> str:
    """The first ERROR line or exception the unit logged after ``since`` (its last line before
    the canary), without the logger's prefix up to the level."""
    rt = runtimes.get(d.unit.runtime)
    out = t.run(rt.logs_argv(d.name, _LOG_LINES, since=since), timeout=STEP_TIMEOUT_S).stdout_text
    for pos, text in rt.parse_log(out):
        if since is not None and pos == since:
            continue  # docker's --since is inclusive
        if _ERROR.search(text.strip()):
            return text.strip()
    return ""


def cross(
    transports: Mapping[str, Transport], units: Sequence[Desired], *, timeout_s: float = CANARY_TIMEOUT_S,
    sleep: Callable[[float], None] = time.sleep,
) -> Crossing:
    """Sends the canary through the router and checks the decodes' transfer counters (see the
    module docstring).  ``transports``: open connections to every host of ``units``.  A canary
    that failed because the decode could not set up the transfer with its prefill (the engine's
    error line names a handshake) is sent once more: vLLM's decode sets up the NIXL handshake
    on the first request to a prefill, with a fixed 5 s receive timeout (0.32's
    ``NixlConnectorWorker._nixl_handshake``), which a busy prefill host misses (session 15's CI
    at load ~90), and the next request handshakes again.  Twice failed: the second's error,
    and ``first`` holds the first's."""
    result = _cross_once(transports, units, timeout_s=timeout_s, sleep=sleep)
    if result.ok or not _HANDSHAKE.search(result.error):
        return result
    again = _cross_once(transports, units, timeout_s=timeout_s, sleep=sleep)
    return replace(again, first=result.error)


def _cross_once(
    transports: Mapping[str, Transport], units: Sequence[Desired], *, timeout_s: float,
    sleep: Callable[[float], None],
) -> Crossing:
    roles = _roles(units)
    assert roles is not None, "cross() on a deployment applies() refused"
    router_host = roles.router.host
    result = Crossing(router=router_host, prefill=tuple(d.host for d in roles.prefill),
                      decode=tuple(d.host for d in roles.decode))  # fmt: skip
    engines = (*roles.decode, *roles.prefill)
    positions = {d.name: _log_position(transports[d.host], d) for d in engines}
    before = {d.host: _read(transports[d.host], d) for d in roles.decode}
    missing = [h for h, t in before.items() if t is None]
    if missing:
        return _failed(result, f"decode {', '.join(missing)} serves no KV-transfer counters at /metrics")
    engine = registry.of_argv(roles.decode[0].unit.argv)
    assert engine is not None, "applies() saw an engine"
    body = {"model": engine.served_model(roles.decode[0].unit.argv), "prompt": CANARY_PROMPT,
            "max_tokens": CANARY_TOKENS, "temperature": 0}  # fmt: skip
    t0 = time.monotonic()
    status, text = HostHttp(transports[router_host]).request("POST", _base(roles.router) + "/v1/completions", body,
                                                             timeout=timeout_s)  # fmt: skip
    result = replace(result, seconds=time.monotonic() - t0)
    problem = "" if status == 200 else f"the router answered {status or 'nothing'}: {_snippet(text)}"
    deadline = time.monotonic() + SETTLE_S
    while True:
        after = {d.host: _read(transports[d.host], d) for d in roles.decode}
        moved = {h: a.since(b) for h, a in after.items() for b in (before[h],) if a is not None and b is not None}
        result = replace(result, moved=moved)
        if problem or any(t.done > 0 for t in moved.values()) or time.monotonic() >= deadline:
            break
        sleep(1.0)
    if not problem and not any(t.done > 0 for t in moved.values()):
        failed = sum(t.failed for t in moved.values())
        problem = "the decode's KV-transfer counter did not move" + (f" ({failed:g} failed)" if failed else "")
    if not problem:
        return result
    lines = [(d.host, line) for d in engines if (line := _error_line(transports[d.host], d, positions[d.name]))]
    engine_line = f"; {lines[0][0]}: {lines[0][1]}" if lines else ""
    return _failed(result, problem + engine_line)


def _failed(c: Crossing, why: str) -> Crossing:
    pair = f"prefill {', '.join(c.prefill)} -> decode {', '.join(c.decode)}"
    return replace(c, error=f"PD canary through the router on {c.router} ({pair}): no KV transfer: {why}")


def _snippet(text: str) -> str:
    try:
        doc = json.loads(text)
    except ValueError:
        doc = None
    if isinstance(doc, dict):
        err = doc.get("error")
        msg = err.get("message") if isinstance(err, dict) else err
        if msg:
            return str(msg)[:300]
    return " ".join(text.split())[:300] or "no body"
