"""Ansible host patterns over an :class:`Inventory`.

Contract: :func:`select` understands what ``ansible PATTERN --list-hosts`` does — ``all``/``*``,
group and host names, globs, ``~regex`` (anchored at the start, as Ansible's), ``[i]``/``[i:j]``
subscripts, unions ``a:b``/``a,b``, intersections ``a:&b`` and exclusions ``a:!b`` — and returns
the same set of hosts, always in inventory order so that ranks do not depend on how a pattern is
spelled.  A part of the pattern that names nothing, or a pattern selecting no host, is an
:class:`InputError` (Ansible only warns; a typo must not shrink a deployment silently).
"""

from __future__ import annotations

import fnmatch
import re

from launcher.config.schema import did_you_mean
from launcher.errors import InputError
from launcher.model import Host, Inventory, Source

_PARTS = re.compile(r"(?:[^\s:\[\]]|\[[^\]]*\])+")
_SUBSCRIPT = re.compile(r"^(.+)\[(?:(-?[0-9]+)|([0-9]+):([0-9]*))\]$")
_GLOB_CHARS = (".", "?", "*", "[")


def split_pattern(pattern: str) -> list[str]:
    """``a:b,&c`` style text → parts; ``,`` wins over ``:`` when present (Ansible's rule)."""
    if "," in pattern:
        parts = pattern.split(",")
    else:
        parts = _PARTS.findall(pattern)
    return [p.strip() for p in parts if p.strip()]


def select(inventory: Inventory, pattern: str, source: Source | None = None, key_path: str = "") -> tuple[Host, ...]:
    """Hosts matching ``pattern``, in inventory order; errors are raised at ``source``."""
    parts = split_pattern(pattern)
    if not parts:
        raise InputError(source, "empty host pattern", key_path)
    regular = [p for p in parts if p[0] not in "&!"]
    ordered = (regular or ["all"]) + [p for p in parts if p[0] == "&"] + [p for p in parts if p[0] == "!"]
    chosen: set[str] = set()
    for part in ordered:
        names = _match_one(inventory, part.lstrip("&!"), pattern, source, key_path)
        if part[0] == "!":
            chosen -= names
        elif part[0] == "&":
            chosen &= names
        else:
            chosen |= names
    hosts = tuple(h for h in inventory.hosts if h.name in chosen)
    if not hosts:
        raise InputError(source, f"pattern {pattern!r} matches no host in {inventory.path}", key_path)
    return hosts


def _match_one(inventory: Inventory, part: str, whole: str, source: Source | None, key_path: str) -> set[str]:
    order = [h.name for h in inventory.hosts]
    subscript: tuple[int, int | None] | None = None
    m = _SUBSCRIPT.match(part) if not part.startswith("~") else None
    if m:
        part = m.group(1)
        if m.group(2) is not None:
            subscript = (int(m.group(2)), None)
        else:
            subscript = (int(m.group(3)), int(m.group(4)) if m.group(4) else -1)
    if part == "all":
        matched = list(order)
    else:
        matched = _enumerate(inventory, part, order, whole, source, key_path)
    if not matched:
        known = list(inventory.groups) + order
        raise InputError(
            source,
            f"pattern {whole!r}: {part!r} matches no host or group in {inventory.path}{did_you_mean(part, known)}",
            key_path,
        )
    if subscript is not None:
        start, end = subscript
        try:
            if end is None:
                matched = [matched[start]]
            else:
                matched = matched[start : (len(matched) if end == -1 else end + 1)]
        except IndexError:
            raise InputError(
                source, f"pattern {whole!r}: [{start}] is past the {len(matched)} hosts of {part!r}", key_path
            ) from None
    return set(matched)


def _enumerate(
    inventory: Inventory, part: str, order: list[str], whole: str, source: Source | None, key_path: str
) -> list[str]:
    try:
        rx = re.compile(part[1:] if part.startswith("~") else fnmatch.translate(part))
    except re.error as err:
        raise InputError(source, f"pattern {whole!r}: bad regular expression {part!r}: {err}", key_path) from None
    out: list[str] = []
    groups = [g for g in inventory.groups if rx.match(g)]
    for g in groups:
        out.extend(h for h in inventory.groups[g].hosts if h not in out)
    if not groups or part.startswith("~") or any(c in part for c in _GLOB_CHARS):
        out.extend(h for h in order if rx.match(h) and h not in out)
    # Subscripts index the hosts in inventory order (fleet's one order everywhere).
    position = {h: i for i, h in enumerate(order)}
    return sorted(out, key=position.__getitem__)
