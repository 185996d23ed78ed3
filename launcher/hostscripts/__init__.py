"""The scripts fleet runs on hosts, kept as files beside this module and loaded as package
resources: ``*.sh`` run as ``sh -c <text> <name> ARGS...``, ``*.py`` as ``python3 -c <text> ARGS...``
(standard library only).  Every value reaches them as an argument, never spliced into their text.
Each file's header says who runs it and its arguments; tests/unit/test_hostscripts.py checks them
with ``sh -n`` (and shellcheck where installed) and compiles the Python ones.
"""

from __future__ import annotations

import functools
from importlib import resources


@functools.cache
def text(name: str) -> str:
    """The script ``name`` (e.g. ``"wait.sh"``) as sent to the host."""
    return resources.files(__name__).joinpath(name).read_text(encoding="utf-8")
