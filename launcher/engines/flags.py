"""argv as a sequence of flag items: lookup, replace, remove.

Contract: an *item* is a flag token (``--x``, ``-x`` or ``--x=v``) plus the value tokens that
follow it up to the next flag; tokens before the first flag (the program and positional model)
form the head and are never touched.  A token is a flag when it starts with ``-`` followed by a
letter or another ``-`` (so ``-1`` and ``-0.5`` are values).
"""

from __future__ import annotations

import re

_FLAG = re.compile(r"^--?[A-Za-z-]")


def is_flag(token: str) -> bool:
    return bool(_FLAG.match(token))


def flag_name(token: str) -> str:
    """``--x=v`` -> ``--x``."""
    return token.split("=", 1)[0]


def split_items(argv: tuple[str, ...]) -> tuple[tuple[str, ...], tuple[tuple[str, ...], ...]]:
    """(head, items)."""
    head: list[str] = []
    items: list[list[str]] = []
    for tok in argv:
        if is_flag(tok):
            items.append([tok])
        elif items:
            items[-1].append(tok)
        else:
            head.append(tok)
    return tuple(head), tuple(tuple(i) for i in items)


def join_items(head: tuple[str, ...], items: tuple[tuple[str, ...], ...]) -> tuple[str, ...]:
    return head + tuple(tok for item in items for tok in item)


def values(argv: tuple[str, ...], names: tuple[str, ...]) -> tuple[tuple[str, ...], ...]:
    """The value tuples of every occurrence of any of ``names`` (``()`` for a bare switch)."""
    found = []
    for item in split_items(argv)[1]:
        name = flag_name(item[0])
        if name in names:
            inline = (item[0].split("=", 1)[1],) if "=" in item[0] else ()
            found.append(inline + item[1:])
    return tuple(found)


def value(argv: tuple[str, ...], names: tuple[str, ...]) -> str | None:
    """The last value given to any of ``names`` (argparse: the last one wins), else None."""
    found = [v for v in values(argv, names) if v]
    return found[-1][0] if found else None


def has(argv: tuple[str, ...], names: tuple[str, ...]) -> bool:
    return bool(values(argv, names))


def override(argv: tuple[str, ...], extra: tuple[str, ...]) -> tuple[str, ...]:
    """Each item of ``extra`` replaces the first item with its flag name (dropping later
    duplicates), else is appended.  ``extra`` must start with a flag (the caller checks)."""
    head, items = split_items(argv)
    result = list(items)
    for item in split_items(extra)[1]:
        name = flag_name(item[0])
        at = [i for i, old in enumerate(result) if flag_name(old[0]) == name]
        if at:
            result[at[0]] = item
            result = [old for i, old in enumerate(result) if i not in at[1:]]
        else:
            result.append(item)
    return join_items(head, tuple(result))


def remove(argv: tuple[str, ...], names: tuple[str, ...]) -> tuple[str, ...]:
    head, items = split_items(argv)
    return join_items(head, tuple(i for i in items if flag_name(i[0]) not in names))
