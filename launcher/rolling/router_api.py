"""The sglang-router (0.3.x, "SGLang Model Gateway") worker-management API, and engine in-flight
counters for draining.

Router endpoints (checked against the real 0.3.2 binary in the sandbox tests):
- ``GET /workers`` -> ``{"workers": [{"id", "url", "worker_type", "is_healthy", "load", ...}], ...}``
- ``POST /workers`` with ``{"url", "worker_type": "regular"|"prefill"|"decode", "bootstrap_port"}``
  -> 202, queued: the worker appears in ``GET /workers`` once the router has probed it.
- ``DELETE /workers/{id}`` -> 202, queued.  Requests already proxied to the worker keep
  streaming; the router's own per-worker load counter is dropped with the worker, so draining
  reads the engine's counters instead.

Engine counters (:func:`inflight`): SGLang ``GET /get_load`` (``num_reqs`` + ``num_waiting_reqs``
per DP rank), else ``GET /metrics`` (``sglang:num_running_reqs`` + ``sglang:num_queue_reqs``,
vLLM ``vllm:num_requests_running`` + ``vllm:num_requests_waiting``).  None when the engine
exposes neither: the caller then relies on the engine's SIGTERM drain.

Contract: HTTP goes through a :class:`launcher.hosthttp.Http` (direct from the control node, or ``curl`` run on a
host over its SSH transport); a router answering an unexpected status raises
:class:`RouterError` with the status and the start of the body.
"""

from __future__ import annotations

import json
import time
import urllib.parse
from dataclasses import dataclass
from typing import Any, Callable, Literal, Mapping, Sequence

from launcher.errors import FleetError
from launcher.hosthttp import DirectHttp, Http
from launcher.observe.load import samples
from launcher.engines import registry, router
from launcher.model import Unit
from launcher.observe.targets import endpoints

WorkerType = Literal["regular", "prefill", "decode"]
POLL_S = 0.2
GET_TRIES = 3


class RouterError(FleetError):
    """A router refused or failed a worker-management call; ``answered``: False when no
    answer came in time (the call may still have been queued)."""

    def __init__(self, message: str, *, answered: bool = True) -> None:
        super().__init__(message)
        self.answered = answered


@dataclass(frozen=True, slots=True, kw_only=True)
class Worker:
    id: str
    url: str
    worker_type: str
    healthy: bool
    load: int


def _same(a: str, b: str) -> bool:
    return a.rstrip("/") == b.rstrip("/")


class RouterClient:
    """One router's worker management."""

    def __init__(self, base_url: str, http: Http | None = None, timeout: float = 10.0) -> None:
        self.base = base_url.rstrip("/")
        self.http: Http = http or DirectHttp()
        self.timeout = timeout

    def __repr__(self) -> str:
        return f"RouterClient({self.base!r})"

    def _call(self, method: str, path: str, body: object | None = None, ok: tuple[int, ...] = (200,)) -> Any:
        # A GET that timed out is asked again: a router busy proxying (seen at load ~70) answers
        # a later one, and one slow answer must not abort a rollout half-way.  A refusal is
        # final; a POST/DELETE is not repeated here (it may have been queued): add and remove
        # look at the worker list first.
        tries = GET_TRIES if method == "GET" else 1
        for attempt in range(1, tries + 1):
            status, text = self.http.request(method, self.base + path, body, self.timeout)
            if status or "timed out" not in text:
                break
        if status not in ok:
            what = f"HTTP {status}" if status else "no answer" + (f" in {attempt} tries" if attempt > 1 else "")
            detail = " ".join(text.split())[:200]
            raise RouterError(f"router {self.base}: {method} {path}: {what}" + (f": {detail}" if detail else ""),
                              answered=bool(status))  # fmt: skip
        try:
            return json.loads(text) if text.strip() else None
        except ValueError:
            return text

    def workers(self) -> tuple[Worker, ...]:
        doc = self._call("GET", "/workers")
        items = doc.get("workers", []) if isinstance(doc, dict) else []
        return tuple(
            Worker(
                # vllm-router 0.1.17 (the same /workers API) lists no id: it deletes by URL.
                id=str(w.get("id") or w.get("url", "")), url=str(w.get("url", "")),
                worker_type=str(w.get("worker_type", "regular")),
                healthy=bool(w.get("is_healthy", False)), load=int(w.get("load") or 0),
            )
            for w in items
            if isinstance(w, dict)
        )  # fmt: skip

    def find(self, url: str) -> Worker | None:
        return next((w for w in self.workers() if _same(w.url, url)), None)

    def add(self, url: str, worker_type: WorkerType = "regular", bootstrap_port: int | None = None) -> None:
        body: dict[str, object] = {"url": url, "worker_type": worker_type}
        if bootstrap_port is not None:
            body["bootstrap_port"] = bootstrap_port
        try:
            self._call("POST", "/workers", body, ok=(200, 201, 202))
        except RouterError as err:
            # No answer in time: the router may have taken it.  Sent again only while the worker
            # is not listed; a second POST that fails is fine if the worker is listed by then
            # (vllm-router 0.1.17 answers 400 "already exists" to a URL it has; sglang-router
            # 0.3.2 202 with the same worker id: both measured).
            if err.answered:
                raise
            if self.find(url) is not None:
                return
            try:
                self._call("POST", "/workers", body, ok=(200, 201, 202))
            except RouterError:
                if self.find(url) is None:
                    raise

    def remove(self, url: str) -> bool:
        """Deregisters ``url``; False if it was not registered."""
        w = self.find(url)
        if w is None:
            return False
        path = "/workers/" + urllib.parse.quote(w.id, safe="")
        try:
            self._call("DELETE", path, ok=(200, 202, 204, 404))
        except RouterError as err:
            # No answer in time: sent again only while the worker is still listed (a repeated
            # DELETE is answered 404 by sglang-router 0.3.2, 200 by vllm-router 0.1.17: measured).
            if err.answered:
                raise
            if self.find(url) is not None:
                self._call("DELETE", path, ok=(200, 202, 204, 404))
        return True

    def wait(
        self,
        url: str,
        *,
        present: bool,
        timeout_s: float,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        """Until ``url`` is registered and healthy (``present``) or gone (not ``present``)."""
        deadline = clock() + timeout_s
        while True:
            w = self.find(url)
            if (w is not None and w.healthy) if present else w is None:
                return
            if clock() >= deadline:
                state = "absent" if w is None else ("unhealthy" if not w.healthy else "still registered")
                want = "registered and healthy" if present else "deregistered"
                raise RouterError(f"router {self.base}: {url} not {want} after {timeout_s:.0f}s ({state})")
            sleep(POLL_S)


# ---------------------------------------------------------------------------------------------
# in-flight counters


def _gauges() -> tuple[str, ...]:
    """Every registered engine's running and queued request gauges (its newest names)."""
    newest = [e.metric_names[-1][1] for e in registry.engines() if e.metric_names]
    return tuple(n for names in newest for n in (names.running, names.waiting) if n)


def parse_get_load(text: str) -> int | None:
    """SGLang ``/get_load``: a list (one entry per DP rank) or one object with ``num_reqs`` and
    ``num_waiting_reqs``."""
    try:
        doc: Any = json.loads(text)
    except ValueError:
        return None
    items = doc if isinstance(doc, list) else [doc]
    total, seen = 0, False
    for item in items:
        if not isinstance(item, dict):
            continue
        for key in ("num_reqs", "num_waiting_reqs"):
            value = item.get(key)
            if isinstance(value, (int, float)):
                total += int(value)
                seen = True
    return total if seen else None


def parse_metrics(text: str, names: Sequence[str] | None = None) -> int | None:
    """Prometheus text: the sum of the samples of the gauges ``names`` (default: the running and
    queued request gauges of SGLang or vLLM); None when none of them is there."""
    try:
        found = samples(text)
    except ValueError:
        return None
    values = [v for name in (_gauges() if names is None else names) for _, v in found.get(name, ())]
    return int(sum(values)) if values else None


def inflight(http: Http, base_url: str, timeout: float = 5.0) -> int | None:
    """Requests running or queued in the engine at ``base_url``; None when it has no counter."""
    base = base_url.rstrip("/")
    status, text = http.request("GET", base + "/get_load", None, timeout)
    if status == 200:
        n = parse_get_load(text)
        if n is not None:
            return n
    return metrics_inflight(http, base + "/metrics", timeout=timeout)


def metrics_inflight(http: Http, metrics_url: str, names: Sequence[str] | None = None,
                     timeout: float = 5.0) -> int | None:  # fmt: skip
    """The sum of the gauges ``names`` (:func:`parse_metrics`'s default: an engine's running and
    queued requests; a PD router's stage gauges: its program's ``pd_inflight``) at
    ``metrics_url``; None when it has none of them or does not answer."""
    status, text = http.request("GET", metrics_url, None, timeout)
    return parse_metrics(text, names) if status == 200 else None


def unit_inflight(http: Http, unit: Unit) -> Callable[[], int | None] | None:
    """What reads ``unit``'s requests in flight: an engine's own counters at its HTTP base
    (:func:`inflight`), a router's PD stage gauges (its program's ``pd_inflight``) at its
    metrics URL (:func:`metrics_inflight`); None for a unit that serves no HTTP or a router
    without such gauges."""
    if unit.health is None:
        return None
    if unit.role != "router":
        base = unit.health.base
        return lambda: inflight(http, base)
    program, metrics = router.of_argv(unit.argv), endpoints([unit])
    if program is None or not program.pd_inflight or not metrics:
        return None
    url, names = metrics[0].url, program.pd_inflight
    return lambda: metrics_inflight(http, url, names)


@dataclass(frozen=True, slots=True, kw_only=True)
class Drained:
    how: Literal["drained", "no-counter", "timeout"]
    first: int = 0  # requests in flight at the first read (after the settle): what the drain waited out
    left: int = 0  # requests still in flight at the deadline
    waited_s: float = 0.0

    def text(self) -> str:
        """As reports show it: in flight at the first read -> 0, so a drain that waited out
        requests is told from one that found the engine idle."""
        if self.how == "timeout":
            return f"timeout ({self.left} left)"
        if self.how == "drained":
            return f"drained {self.first}->0 {self.waited_s:.1f}s"
        return f"{self.how} {self.waited_s:.1f}s"


def drain(
    probes: Mapping[str, Callable[[], int | None]],
    timeout_s: float,
    *,
    together: bool = False,
    settle_s: float = 0.5,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[str, Drained]:
    """Per key, waits until its probe reports 0 in flight, or ``timeout_s``, and records what its
    first read saw.  Waits ``settle_s`` first: requests the router had already picked a worker
    for may still be arriving there.  Probes run one after another on the calling thread, in
    the order given.  ``together``: the keys are the stages of one pipeline that requests move
    through (a PD cohort: its router, prefills, decodes), so a key read at 0 may get one later;
    they are drained only by one round that reads 0 on every key with a counter, not each by its
    own first 0 (a decode read before its request left the prefill was stopped with it coming).
    A probe's first None: no counter there (``no-counter``); a None after a count: that read
    failed (a busy router on a loaded host; seen in the real PD tier), read again until the
    deadline as if still in flight, its last count then what is ``left``."""
    start = clock()
    sleep(settle_s)
    pending = dict(probes)
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    out: dict[str, Drained] = {}
    while pending:
        reads: dict[str, int | None] = {}  # None: a counter that did not answer this round
        for key, probe in list(pending.items()):
            n = probe()
            if n is None and key not in first:  # no counter at all
                out[key] = Drained(how="no-counter", waited_s=clock() - start)
                del pending[key]
                continue
            if n is not None:
                first.setdefault(key, n)
                last[key] = n
            reads[key] = n
        waited = clock() - start
        late = waited >= timeout_s
        # Together, a key at 0 waits for a round in which every key answered 0, unless late.
        quiet = not together or late or all(n is not None and n <= 0 for n in reads.values())
        for key, n in reads.items():
            if n is not None and n <= 0 and quiet:
                out[key] = Drained(how="drained", first=first[key], waited_s=waited)
            elif late:
                out[key] = Drained(how="timeout", first=first[key], left=last[key], waited_s=waited)
            else:
                continue
            del pending[key]
        if pending:
            sleep(POLL_S)
    return out
