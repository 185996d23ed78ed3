"""Unified diffs of what ``up`` would write, secrets kept out.

Contract: secret values never appear in the output.  A secrets file (``secrets.env``) is never
diffed: per secret name it shows one line, ``<host>:<path>: secret NAME: changed`` (or
``unchanged`` / ``added`` / ``removed``), so neither version's value shows, however it is quoted
or split over lines.  Every other file is diffed with every known secret value masked in both
versions.  No output for unchanged files.
"""

from __future__ import annotations

import difflib
import shlex
from typing import Sequence

from launcher.output import mask
from launcher.quoting import env_name_problem


def file_diff(
    host: str, path: str, old: bytes | None, new: bytes | None, secrets: Sequence[str], *, secrets_file: bool = False
) -> str:
    """The unified diff of one file (``old``/``new`` None: absent), '' when equal; for a
    ``secrets_file``, which secrets changed instead (see :func:`secrets_diff`)."""
    if old == new:
        return ""
    if secrets_file:
        return secrets_diff(host, path, old, new)
    before, after = (_text(x, secrets) for x in (old, new))
    lines = difflib.unified_diff(
        before.splitlines(keepends=True),
        after.splitlines(keepends=True),
        fromfile=f"{host}:{path}" if old is not None else "/dev/null",
        tofile=f"{host}:{path}" if new is not None else "/dev/null",
    )
    return "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines)


def secrets_diff(host: str, path: str, old: bytes | None, new: bytes | None) -> str:
    """One line per secret name of either version: changed / unchanged / added / removed.  A
    current file that is not an env file fleet wrote (hand-edited, cut short) counts as holding
    other values for every name."""
    before, after = _values(old), _values(new)
    names = sorted(set(before or {}) | set(after or {}))
    out = []
    for name in names:
        if before is None:
            state = "changed" if old is not None else "added"
        elif name not in before:
            state = "added"
        elif after is None or name not in after:
            state = "removed"
        else:
            state = "unchanged" if before[name] == after[name] else "changed"
        out.append(f"{host}:{path}: secret {name}: {state}\n")
    return "".join(out)


def _values(data: bytes | None) -> dict[str, str] | None:
    """NAME -> value of an env file as :func:`launcher.quoting.env_file` writes it; None when
    absent or not such a file."""
    if data is None:
        return None
    try:
        tokens = shlex.split(data.decode("utf-8"), comments=False, posix=True)
    except (UnicodeDecodeError, ValueError):
        return None
    values = {}
    for token in tokens:
        name, sep, value = token.partition("=")
        if not sep or env_name_problem(name) is not None:
            return None
        values[name] = value
    return values


def _text(data: bytes | None, secrets: Sequence[str]) -> str:
    return "" if data is None else mask(data.decode("utf-8", "replace"), secrets)
