"""Putting a unit's previous generation back from ``<unit dir>/prev/`` (kept there by the deploy
layer's install step), as a swap: the generation being replaced moves into ``prev/``, so a
second rollback goes forward again.

Contract: builders are pure; :func:`read_prev` and :func:`swap` do one round trip each.  The
secrets file is never kept in ``prev/``; the unit's current ``secrets.env`` stays in place.
Start commands are the runtime's, as render built them (``Runtime.commands``).
"""

from __future__ import annotations

from typing import Sequence

from launcher import hostscripts
from launcher.deploy.desired import Desired
from launcher.deploy.manifest import MANIFEST, Manifest, parse
from launcher.remote import check, sh
from launcher.errors import FleetError
from launcher.execute.transport import Transport
from launcher.output import Event, Progress
from launcher.render import SECRETS_FILE
from launcher.runtimes import registry as runtimes

PREV = "prev"
NEXT = "next"

_READ_PREV = 'if [ -f "$1/prev/manifest.json" ]; then cat "$1/prev/manifest.json"; fi; true'

_SWAP = hostscripts.text("swap-prev.sh")


def kept(files: Sequence[str]) -> list[str]:
    """The files a generation keeps in prev/: all but its secrets file and manifest."""
    return [f for f in files if not f.endswith("/" + SECRETS_FILE) and not f.endswith("/" + MANIFEST)]


def swap_argv(unit_dir: str, current: Sequence[str], previous: Sequence[str]) -> tuple[str, ...]:
    """Makes ``previous`` (kept in prev/) current and moves ``current`` into prev/."""
    cur, old = kept(current), kept(previous)
    return sh(_SWAP, unit_dir, str(len(cur)), *cur, *old)


def read_prev(t: Transport, unit_dir: str) -> Manifest | None:
    out = check(t, sh(_READ_PREV, unit_dir), label=f"cat {unit_dir}/prev/manifest.json")
    return parse(out) if out.strip() else None


def swap(t: Transport, unit_dir: str, current: Sequence[str], previous: Manifest) -> None:
    check(t, swap_argv(unit_dir, current, previous.files), label=f"restore {unit_dir}/prev")


def swap_in_prev(t: Transport, host: str, unit_dir: str, current: Sequence[str]) -> Manifest:
    """The generation kept in ``unit_dir``/prev/ made current (``current``: the files it
    replaces); returns its manifest.  Raises a one-line :class:`FleetError` if none is kept."""
    prev = read_prev(t, unit_dir)
    if prev is None:
        raise FleetError(f"{host}: {unit_dir}/prev: no previous generation kept")
    swap(t, unit_dir, current, prev)
    return prev


def start_argvs(m: Manifest, unit_dir: str) -> tuple[tuple[str, ...], ...]:
    """How render starts the generation ``m`` describes (its files are in ``unit_dir``)."""
    return runtimes.get(m.runtime).commands(m.unit, unit_dir).start


def start_kept(t: Transport, d: Desired, m: Manifest, progress: Progress, secrets: Sequence[str] = ()) -> None:
    """Starts ``d`` on the generation ``m`` its files now hold (swapped back from prev/)."""
    progress.update(Event(host=d.host, unit=d.name, state="restoring", detail=f"generation {m.generation}"))
    for argv in start_argvs(m, d.dir):
        check(t, argv, secrets=secrets)
