"""The ``file_sd`` targets file on the control host: one JSON list of target groups that several
deployments may share.

Contract: :func:`update` replaces the groups of the given deployments (the ``deployment`` label)
and keeps every other group, under an exclusive ``flock`` on ``<file>.lock`` (two fleet runs
updating one file do not lose each other's groups), and writes the result atomically (a
temporary file in the same directory, fsync, rename), so Prometheus, which re-reads the file on
every change, never sees a partial list.  A file that is not a JSON list of target groups is an
:class:`~launcher.errors.InputError` naming it; nothing is written then.
"""

from __future__ import annotations

import fcntl
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Callable, Collection, Sequence

from launcher.errors import InputError
from launcher.model import Source


def update(
    path: Path, deployments: Collection[str], groups: Sequence[dict[str, Any]],
    keep: Callable[[dict[str, Any]], bool] = lambda g: False,
) -> list[dict[str, Any]]:  # fmt: skip
    """Writes ``groups`` in place of ``deployments``' groups (but those ``keep`` says to keep);
    returns the whole new list."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        kept = [g for g in _read(path) if g.get("labels", {}).get("deployment") not in deployments or keep(g)]
        merged = sorted([*kept, *groups], key=_order)
        _write(path, json.dumps(merged, indent=2, sort_keys=True) + "\n")
    return merged


def check(path: Path) -> None:
    """Raises :class:`InputError` now if ``path`` exists and is not a targets file (so a command
    that updates it later finds out before it touches a host)."""
    _read(path)


def _order(group: dict[str, Any]) -> tuple[str, ...]:
    lab = group.get("labels", {})
    return (str(lab.get("deployment", "")), str(lab.get("group", "")), str(lab.get("rank", "")), str(lab.get("unit", "")))


def _read(path: Path) -> list[dict[str, Any]]:
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    where = Source(path=str(path), line=1, col=1)
    try:
        doc = json.loads(text) if text.strip() else []
    except ValueError as err:
        raise InputError(where, f"not a Prometheus file_sd targets file (JSON: {err})") from None
    if not isinstance(doc, list) or not all(isinstance(g, dict) and isinstance(g.get("targets"), list) for g in doc):
        raise InputError(where, "not a Prometheus file_sd targets file (a JSON list of {targets, labels} groups)")
    return doc


def _write(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)  # Prometheus may run as its own user; targets hold no secrets
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
