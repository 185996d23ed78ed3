"""Unified diffs of what ``up`` would write, secrets masked.

Contract: secret values never appear in the output: every known secret value is masked in both
versions, and files that hold only secrets (``secrets.env``) have every value masked, so a diff
shows which names changed but never a value.  No output for unchanged files.
"""

from __future__ import annotations

import difflib
from typing import Sequence

from launcher.output import mask, mask_env_values


def file_diff(
    host: str, path: str, old: bytes | None, new: bytes | None, secrets: Sequence[str], *, env_values: bool = False
) -> str:
    """The unified diff of one file (``old``/``new`` None: absent), '' when equal."""
    if old == new:
        return ""
    before, after = (_text(x, secrets, env_values) for x in (old, new))
    if before == after and old is not None and new is not None:
        return f"--- {host}:{path}\n+++ {host}:{path}\n(secret values changed)\n"
    lines = difflib.unified_diff(
        before.splitlines(keepends=True),
        after.splitlines(keepends=True),
        fromfile=f"{host}:{path}" if old is not None else "/dev/null",
        tofile=f"{host}:{path}" if new is not None else "/dev/null",
    )
    return "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines)


def _text(data: bytes | None, secrets: Sequence[str], env_values: bool) -> str:
    if data is None:
        return ""
    text = mask(data.decode("utf-8", "replace"), secrets)
    return mask_env_values(text) if env_values else text
