"""What the operator sees: redaction, progress (rich live / plain lines / quiet), tables, JSON.

Contract: every string that may carry a secret goes through :func:`mask` before it is shown or
logged; progress sinks are thread-safe (fan-out threads report concurrently); nothing here
decides exit codes.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Callable, Iterable, Mapping, Protocol, Sequence

if TYPE_CHECKING:  # rich is imported where a table is drawn: most commands' hot paths never do
    from rich.console import Console
    from rich.table import Table

MASK = "***"


def mask(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every secret value replaced by ``***`` (longest first, so a secret that
    contains another is masked whole)."""
    for value in sorted({s for s in secrets if s}, key=len, reverse=True):
        text = text.replace(value, MASK)
    return text


@dataclass(frozen=True, slots=True, kw_only=True)
class Event:
    """One step of one unit on one host, e.g. ``h1 fleet-x-single-r0 starting``."""

    host: str
    unit: str
    state: str
    detail: str = ""


class Progress(Protocol):
    """Where orchestration reports steps.  Implementations must be thread-safe."""

    def update(self, event: Event) -> None: ...

    def note(self, line: str) -> None: ...


class QuietProgress:
    """``--quiet``/``--json``: nothing while working; the caller prints the result."""

    def update(self, event: Event) -> None:
        pass

    def note(self, line: str) -> None:
        pass


TICKS = frozenset({"waiting"})  # states reported again and again while nothing changes


class LinesProgress:
    """One line per event (``host/unit: state detail``) on a stream: for logs and non-TTYs.  A
    unit's repeated tick (:data:`TICKS`: the health gate's ``waiting 12s`` every few seconds
    through a cold start of minutes) is written at most every ``repeat_s`` seconds, so a log shows
    the wait is alive without a line per unit per poll; every other event is written."""

    def __init__(self, stream: IO[str] | None = None, *, repeat_s: float = 30.0,
                 clock: Callable[[], float] = time.monotonic) -> None:  # fmt: skip
        self._stream = stream if stream is not None else sys.stderr
        self._lock = threading.Lock()
        self._repeat_s, self._clock = repeat_s, clock
        self._last: dict[tuple[str, str], tuple[str, float]] = {}  # (host, unit) -> (state, when written)

    def update(self, event: Event) -> None:
        key, now = (event.host, event.unit), self._clock()
        with self._lock:
            state, when = self._last.get(key, ("", 0.0))
            if event.state in TICKS and state == event.state and now - when < self._repeat_s:
                return
            self._last[key] = (event.state, now)
        detail = f" {event.detail}" if event.detail else ""
        self._write(f"{event.host}/{event.unit}: {event.state}{detail}")

    def note(self, line: str) -> None:
        self._write(line)

    def _write(self, line: str) -> None:
        with self._lock:
            self._stream.write(line + "\n")
            self._stream.flush()


class LiveProgress:
    """A rich live table, one row per host/unit, redrawn as events arrive.  Use as a context
    manager around the work so the table is finalised (and the cursor restored) on Ctrl-C."""

    def __init__(self, console: Console | None = None) -> None:
        from rich.console import Console
        from rich.live import Live

        self._console = console if console is not None else Console(stderr=True)
        self._rows: dict[tuple[str, str], Event] = {}
        self._lock = threading.Lock()
        self._live = Live(self._table(), console=self._console, refresh_per_second=4, transient=False)

    def __enter__(self) -> LiveProgress:
        self._live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            self._live.update(self._table())
        self._live.__exit__(None, None, None)

    def update(self, event: Event) -> None:
        with self._lock:
            self._rows[(event.host, event.unit)] = event
            self._live.update(self._table())

    def note(self, line: str) -> None:
        with self._lock:
            self._live.console.print(line, markup=False, highlight=False)

    def _table(self) -> Table:
        from rich.table import Table

        table = Table(box=None, pad_edge=False)
        for col in ("host", "unit", "state", "detail"):
            table.add_column(col)
        for ev in self._rows.values():
            table.add_row(ev.host, ev.unit, _styled(ev.state), ev.detail)
        return table


_STYLES = {
    "healthy": "green",
    "running": "green",
    "unchanged": "dim",
    "failed": "bold red",
    "unreachable": "bold red",
    "exited": "red",
    "missing": "yellow",
    "stopped": "yellow",
}


def _styled(state: str) -> str:
    style = _STYLES.get(state)
    return f"[{style}]{state}[/{style}]" if style else state


def table(columns: Sequence[str], rows: Iterable[Sequence[str]], *, title: str | None = None) -> Table:
    """A plain rich table (no markup interpretation of cell text)."""
    from rich.table import Table

    t = Table(title=title, box=None, pad_edge=False)
    for col in columns:
        t.add_column(col)
    for row in rows:
        t.add_row(*(_escape(c) for c in row))
    return t


def _escape(text: str) -> str:
    return text.replace("[", r"\[")


def print_table(t: Table, stream: IO[str] | None = None) -> None:
    """On a terminal, fit its width; elsewhere (pipes, logs) never truncate a cell."""
    from rich.console import Console

    out = stream if stream is not None else sys.stdout
    Console(file=out, soft_wrap=True, width=None if out.isatty() else 400).print(t)


def print_listing(columns: Sequence[str], rows: Sequence[Sequence[str]], *, title: str | None = None,
                  console: Console | None = None) -> None:  # fmt: skip
    """Rows as a table when it fits the console's width; else (an 80-column terminal, a long id)
    one entry per row: the first cell (an id, a host) alone on its line, never broken, then the
    other cells as ``column value`` pairs, indented and wrapped at spaces."""
    import textwrap

    from rich.console import Console

    if console is None:
        console = Console(file=sys.stdout, soft_wrap=True, width=None if sys.stdout.isatty() else 400)
    widths = [max([len(c), *(len(r[i]) for r in rows)]) for i, c in enumerate(columns)]
    if sum(widths) + 2 * (len(columns) - 1) <= console.width:
        console.print(table(columns, rows, title=title))
        return
    lines = [title] if title else []
    for r in rows:
        lines.append(r[0])
        # A no-break space keeps each column's name with its value's first word (restored after).
        rest = "  ".join(f"{c}\xa0{v}".replace(" ", "\xa0", c.count(" ") + 1) for c, v in zip(columns[1:], r[1:]) if v)
        lines += [line.replace("\xa0", " ") for line in textwrap.wrap(
            rest, width=max(console.width, 40), initial_indent="    ", subsequent_indent="    ",
            break_long_words=False, break_on_hyphens=False)]  # fmt: skip
    for line in lines:
        console.print(line, markup=False, highlight=False, soft_wrap=True)


def dumps(value: Mapping[str, object] | Sequence[object]) -> str:
    """Machine-readable output: stable key order, one document."""
    return json.dumps(value, indent=2, sort_keys=True)
