"""The runtimes fleet knows, by the name a unit, host or playbook gives: docker and systemd.

Contract: :func:`get` returns the :class:`~launcher.runtimes.base.Runtime` of a name (a
``LookupError`` naming the known ones otherwise); :func:`runtimes` in a fixed order (the order
the survey asks them in); :func:`native` is the runtime of units without a container.
"""

from __future__ import annotations

from launcher.runtimes import docker, systemd
from launcher.runtimes.base import Runtime

_RUNTIMES: dict[str, Runtime] = {r.name: r for r in (docker.RUNTIME, systemd.RUNTIME)}


def names() -> tuple[str, ...]:
    return tuple(_RUNTIMES)


def runtimes() -> tuple[Runtime, ...]:
    return tuple(_RUNTIMES.values())


def get(name: str) -> Runtime:
    try:
        return _RUNTIMES[name]
    except KeyError:
        raise LookupError(f"unknown runtime {name!r}; known: {', '.join(_RUNTIMES)}") from None


def native() -> Runtime:
    """The runtime that runs a unit without a container."""
    return next(r for r in _RUNTIMES.values() if r.native)
