"""What the watch tells: one :class:`WatchEvent` per thing it saw or did, sent to every sink --
the log (a line on stdout, or JSON with ``--json``), the ``--on-event`` command (the event as
JSON on its stdin) and the Prometheus endpoint (:mod:`launcher.watch.metrics`).

Kinds: ``recreating``, ``out-of-router``, ``recovered``, ``recreate-failed``, ``registered``,
``register-failed``, ``backoff``, ``crash-loop`` (gave up), ``failed`` (still given up),
``unreachable``, ``reachable``, ``drift``, ``not-deployed``, ``paused``, ``resumed``, ``would-recreate`` /
``would-register`` / ``would-give-up`` (``--dry-run``), ``hook-failed``, ``note``.

Contract: sinks never raise (a failing hook becomes a ``hook-failed`` line in the log); the
hook runs with a deadline and its output is not shown.
"""

from __future__ import annotations

import datetime
import json
import subprocess
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

HOOK_TIMEOUT_S = 30.0


@dataclass(frozen=True, slots=True, kw_only=True)
class WatchEvent:
    kind: str
    deployment: str
    group: str = ""
    message: str = ""
    at: float = 0.0  # epoch seconds
    data: Mapping[str, object] = field(default_factory=dict)  # kind-specific numbers (timings, attempt)

    def as_dict(self) -> dict[str, object]:
        return {"kind": self.kind, "deployment": self.deployment, "group": self.group, "message": self.message,
                "at": _iso(self.at), **self.data}  # fmt: skip

    def line(self) -> str:
        where = self.group or self.deployment
        return f"{_iso(self.at)} {where}: {self.kind}" + (f": {self.message}" if self.message else "")


def _iso(at: float) -> str:
    return datetime.datetime.fromtimestamp(at, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")[:-4] + "Z"


Sink = Callable[[WatchEvent], None]


class Log:
    """Each event as a line to ``write`` (``as_json``: one JSON object per line)."""

    def __init__(self, write: Callable[[str], None], as_json: bool) -> None:
        self.write = write
        self.as_json = as_json

    def __call__(self, event: WatchEvent) -> None:
        self.write(json.dumps(event.as_dict(), sort_keys=True) if self.as_json else event.line())


class Hook:
    """``--on-event CMD``: ``sh -c CMD`` per event of ``kinds`` (all when empty), the event as
    JSON on stdin; a failure or timeout is told to ``report`` (never raised)."""

    def __init__(self, command: str, report: Sink, kinds: Sequence[str] = (), timeout_s: float = HOOK_TIMEOUT_S) -> None:
        self.command = command
        self.report = report
        self.kinds = frozenset(kinds)
        self.timeout_s = timeout_s

    def __call__(self, event: WatchEvent) -> None:
        if self.kinds and event.kind not in self.kinds:
            return
        data = (json.dumps(event.as_dict(), sort_keys=True) + "\n").encode()
        try:
            proc = subprocess.run(("sh", "-c", self.command), input=data, capture_output=True, timeout=self.timeout_s)
        except (OSError, subprocess.TimeoutExpired) as err:
            why = f"timed out after {self.timeout_s:g}s" if isinstance(err, subprocess.TimeoutExpired) else str(err)
        else:
            if proc.returncode == 0:
                return
            last = proc.stderr.decode(errors="replace").strip().splitlines()[-1:] or [""]
            why = f"exit {proc.returncode}" + (f": {last[0]}" if last[0] else "")
        self.report(WatchEvent(kind="hook-failed", deployment=event.deployment, group=event.group, at=event.at,
                               message=f"--on-event for {event.kind}: {why}"))  # fmt: skip


class Fanout:
    """Every event to every sink, in order."""

    def __init__(self, sinks: Sequence[Sink]) -> None:
        self.sinks = tuple(sinks)

    def __call__(self, event: WatchEvent) -> None:
        for sink in self.sinks:
            sink(event)
