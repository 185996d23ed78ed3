"""Transfer planning: which file goes from which holder to which host next.  Pure.

The source is read once; every other copy comes from a host that already has the file.  Each
node sends one file at a time (its uplink) and each host receives one at a time (its downlink),
so the source's single link feeds new files into the fleet while hosts that have a file pass it
on: with files in the same order everywhere this is a pipelined chain (host k fetches file i
from host k-1 while host k-1 fetches file i+1), and staging N hosts takes about one copy's
time plus N-1 file times, not N copies.  The source sends an item only while no host holds it
or is receiving it (read once), so its link keeps feeding files the fleet does not have yet.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

SOURCE = ""  # the source's node name (hosts have non-empty names)


@dataclass(frozen=True, slots=True, kw_only=True)
class Transfer:
    item: tuple[str, str]  # (model, file path)
    src: str  # SOURCE or a host name
    dst: str


class Spread:
    """The schedule as a state machine: :meth:`start` the transfers it returns, report each
    with :meth:`done` (or :meth:`failed`), start what those return, until :attr:`finished`.
    ``wants`` lists, per host, the items it lacks (in order); ``holders`` the hosts that already
    hold an item (the source holds every item)."""

    def __init__(self, wants: Mapping[str, Sequence[tuple[str, str]]],
                 holders: Mapping[tuple[str, str], Sequence[str]] | None = None,
                 *, use_hosts: bool = True, source_host: str | None = None) -> None:
        """``use_hosts=False``: every host fetches from the source (the baseline bench/ compares
        with).  ``source_host``: the host the source lives on (one uplink for both roles)."""
        self._wants = {h: list(items) for h, items in wants.items() if items}
        self._holders = {k: set(v) for k, v in (holders or {}).items()}
        self._use_hosts = use_hosts
        self._source_host = source_host
        self._sending: set[str] = set()
        self._receiving: set[str] = set()
        self._failed: set[str] = set()
        self._flying: dict[tuple[str, str], int] = {}  # item -> transfers of it under way

    @property
    def finished(self) -> bool:
        return not self._receiving and not any(self._wants.values())

    def start(self) -> list[Transfer]:
        out: list[Transfer] = []
        for host, items in self._wants.items():
            if host in self._receiving or not items:
                continue
            for item in items:
                src = self._pick(item)
                if src is not None:
                    items.remove(item)
                    self._receiving.add(host)
                    self._sending.add(self._link(src))
                    self._flying[item] = self._flying.get(item, 0) + 1
                    out.append(Transfer(item=item, src=src, dst=host))
                    break
        return out

    def _link(self, node: str) -> str:
        return self._source_host if node == SOURCE and self._source_host else node

    def _pick(self, item: tuple[str, str]) -> str | None:
        if self._use_hosts:
            held = [h for h in sorted(self._holders.get(item, ())) if h not in self._failed]
            for h in held:
                if self._link(h) not in self._sending:
                    return h
            if held or self._flying.get(item):
                return None  # the fleet has it (or soon will): the source is read once per item
        return SOURCE if self._link(SOURCE) not in self._sending else None

    def done(self, t: Transfer) -> list[Transfer]:
        self._release(t)
        self._holders.setdefault(t.item, set()).add(t.dst)
        return self.start()

    def failed(self, t: Transfer) -> list[Transfer]:
        """The receiving host is given up (its other items too); the sender stays usable."""
        self._release(t)
        self._failed.add(t.dst)
        self._wants.pop(t.dst, None)
        return self.start()

    def _release(self, t: Transfer) -> None:
        self._sending.discard(self._link(t.src))
        self._flying[t.item] -= 1
        self._receiving.discard(t.dst)
