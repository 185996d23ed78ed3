"""Transfer planning: which file goes from which holder to which host next.  Pure.

The source is read once; every other copy comes from a host that already has the file.  Each
node sends one transfer at a time (its uplink) and each host receives one at a time (its downlink),
so the source's single link feeds new files into the fleet while hosts that have a file pass it
on: with files in the same order everywhere this is a pipelined chain (host k fetches file i
from host k-1 while host k-1 fetches file i+1), and staging N hosts takes about one copy's
time plus N-1 file times, not N copies.  The source sends an item only while no host holds it
or is receiving it (read once), so its link keeps feeding files the fleet does not have yet.

A transfer carries a batch of one model's files (one rsync, one SSH session per hop) up to
``chunk`` bytes: files the sender has that the receiver lacks, in order.  The chain's fill time
is one batch per hop, so :func:`chunk_bytes` sizes batches to a fraction of the whole
(``CHUNKS_PER_HOST`` per receiver): multi-GB shards still travel one per transfer, while many
small files share one session instead of paying a login, rrsync's start and two rsyncs each.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

SOURCE = ""  # the source's node name (hosts have non-empty names)


CHUNKS_PER_HOST = 4  # batches per receiver: the chain's fill ((hosts - 1) batches) stays ~1/4 of a copy

Item = tuple[str, str]  # (model, file path)


@dataclass(frozen=True, slots=True, kw_only=True)
class Transfer:
    items: tuple[Item, ...]  # one model's files, in order
    src: str  # SOURCE or a host name
    dst: str

    @property
    def model(self) -> str:
        return self.items[0][0]


def chunk_bytes(sizes: Mapping[Item, int], receivers: int) -> int:
    """The batch size that keeps the chain's fill to about 1/CHUNKS_PER_HOST of one copy."""
    return sum(sizes.values()) // max(1, CHUNKS_PER_HOST * receivers)


class Spread:
    """The schedule as a state machine: :meth:`start` the transfers it returns, report each
    with :meth:`done` (or :meth:`failed`), start what those return, until :attr:`finished`.
    ``wants`` lists, per host, the items it lacks (in order); ``holders`` the hosts that already
    hold an item (the source holds every item)."""

    def __init__(self, wants: Mapping[str, Sequence[Item]], holders: Mapping[Item, Sequence[str]] | None = None,
                 *, use_hosts: bool = True, source_host: str | None = None, sizes: Mapping[Item, int] | None = None,
                 chunk: int = 0) -> None:
        """``use_hosts=False``: every host fetches from the source (the baseline bench/ compares
        with).  ``source_host``: the host the source lives on (one uplink for both roles).
        ``chunk``: a transfer adds files while its batch is below this many bytes (``sizes``);
        0 sends one file per transfer."""
        self._wants = {h: list(items) for h, items in wants.items() if items}
        self._holders = {k: set(v) for k, v in (holders or {}).items()}
        self._use_hosts = use_hosts
        self._source_host = source_host
        self._sending: set[str] = set()
        self._receiving: set[str] = set()
        self._failed: set[str] = set()
        self._flying: dict[Item, int] = {}  # item -> transfers of it under way
        self._sizes = sizes or {}
        self._chunk = chunk

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
                    batch = self._batch(items, item, src)
                    for it in batch:
                        items.remove(it)
                        self._flying[it] = self._flying.get(it, 0) + 1
                    self._receiving.add(host)
                    self._sending.add(self._link(src))
                    out.append(Transfer(items=batch, src=src, dst=host))
                    break
        return out

    def _batch(self, items: list[Item], first: Item, src: str) -> tuple[Item, ...]:
        """``first`` and the later items of its model that ``src`` may send, up to the chunk."""
        batch, size = [first], self._sizes.get(first, 0)
        for it in items[items.index(first) + 1:]:
            if size >= self._chunk:
                break
            if it[0] == first[0] and self._sendable(it, src):
                batch.append(it)
                size += self._sizes.get(it, 0)
        return tuple(batch)

    def _sendable(self, item: Item, src: str) -> bool:
        if src != SOURCE:
            return src in self._holders.get(item, ())
        # The source is read once per item: only what no usable host holds or is receiving.
        return not self._use_hosts or not (self._flying.get(item) or self._holders.get(item, set()) - self._failed)

    def _link(self, node: str) -> str:
        return self._source_host if node == SOURCE and self._source_host else node

    def _pick(self, item: Item) -> str | None:
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
        for it in t.items:
            self._holders.setdefault(it, set()).add(t.dst)
        return self.start()

    def failed(self, t: Transfer) -> list[Transfer]:
        """The receiving host is given up (its other items too); the sender stays usable."""
        self._release(t)
        self._failed.add(t.dst)
        self._wants.pop(t.dst, None)
        return self.start()

    def _release(self, t: Transfer) -> None:
        self._sending.discard(self._link(t.src))
        for it in t.items:
            self._flying[it] -= 1
        self._receiving.discard(t.dst)
