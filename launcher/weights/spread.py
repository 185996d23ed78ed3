"""Transfer planning: which files go from which holder to which host next.  Pure.

The source is read once; every other copy comes from a host that already has the file.  Hosts
swap what they have, rarest first (as BitTorrent does): a host ready to receive takes, from a
node free to send, a batch of the files it lacks that the fewest hosts hold or are getting, and
the source sends only files no usable host holds or is getting.  So the source's link keeps
feeding new files into the fleet while every host's link passes on what it got, and each file
reaches N hosts in about log2(N) hops behind the source, not N-1 as in a chain.

A transfer carries a batch of one model's files (one rsync, one SSH session per hop) up to
``chunk`` bytes.  A batch's time on the link is what the last file pays per hop, so
:func:`chunk_bytes` sizes batches to a fraction of the whole per hop (``CHUNKS_PER_HOP``):
multi-GB shards still travel one per transfer, while many small files share one session instead
of paying a login, rsync's start and a remote session each.  Each node sends and each host
receives up to ``slots`` batches at once (``SLOTS``: two), so the next transfer's start-up --
the exec, both rsyncs, the session on the sender -- overlaps the current one's bytes instead of
leaving the link idle in between; the link's bandwidth is shared, not doubled.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Literal, Mapping, Sequence

SOURCE = ""  # the source's node name (hosts have non-empty names)

CHUNKS_PER_HOP = 6  # batches per hop of the spread: the last batch's log2(N) hops stay ~1/6 of a copy each
SLOTS = 2  # transfers a node sends, and a host receives, at once

Item = tuple[str, str]  # (model, file path)


@dataclass(frozen=True, slots=True, kw_only=True)
class Transfer:
    items: tuple[Item, ...]  # one model's files
    src: str  # SOURCE or a host name
    dst: str

    @property
    def model(self) -> str:
        return self.items[0][0]


def chunk_bytes(sizes: Mapping[Item, int], receivers: int) -> int:
    """The batch size: 1/CHUNKS_PER_HOP of the bytes to move for each of the ~log2(receivers + 1)
    hops a file takes to reach every receiver (the source is a node too)."""
    hops = math.ceil(math.log2(max(2, receivers + 1)))
    return sum(sizes.values()) // (CHUNKS_PER_HOP * hops)


Blame = Literal["receiver", "sender", "either"]
STRIKES = 2  # failed links with distinct peers that retire a sender or give up a receiver


class Spread:
    """The schedule as a state machine: :meth:`start` the transfers it returns, report each
    with :meth:`done` (or :meth:`failed`), start what those return, until :attr:`finished`.
    ``wants`` lists, per host, the items it lacks (in order: ties in rarity go in this order);
    ``holders`` the hosts that already hold an item (the source holds every item).

    A failure is blamed on the side the executor can tell (``receiver``: the receiving host
    itself failed; ``sender``: the sending node did) or on the link (``either``).  A link that
    failed is not used again; a sender whose links to :data:`STRIKES` distinct receivers failed
    is retired (never picked again), a receiver whose links from that many distinct senders
    failed is given up.  The failed batch goes back to the receiver's wants and comes from
    another holder, or from the source when no usable holder has it or is getting it.  A
    receiver that can no longer get some item from anyone is given up (:attr:`given_up`)."""

    def __init__(self, wants: Mapping[str, Sequence[Item]], holders: Mapping[Item, Sequence[str]] | None = None,
                 *, use_hosts: bool = True, source_host: str | None = None, sizes: Mapping[Item, int] | None = None,
                 chunk: int = 0, slots: int = SLOTS) -> None:
        """``use_hosts=False``: every host fetches from the source (the baseline bench/ compares
        with).  ``source_host``: the host the source lives on (one uplink for both roles).
        ``chunk``: a transfer adds files while its batch is below this many bytes (``sizes``);
        0 sends one file per transfer.  ``slots``: transfers per link at once."""
        self._wants = {h: list(items) for h, items in wants.items() if items}
        self._holders = {k: set(v) for k, v in (holders or {}).items()}
        self._use_hosts = use_hosts
        self._source_host = source_host
        self._sizes = sizes or {}
        self._chunk = chunk
        self._slots = slots
        self._sending: Counter[str] = Counter()  # link -> transfers it sends
        self._receiving: Counter[str] = Counter()  # host -> transfers it receives
        self._failed: set[str] = set()  # receivers given up
        self._retired: set[str] = set()  # senders never picked again (SOURCE included)
        self._bad: set[tuple[str, str]] = set()  # (sender, receiver) links that failed
        self._flying: dict[Item, Counter[str]] = {}  # item -> receiver -> transfers of it under way
        self.given_up: dict[str, str] = {}  # receiver -> why the schedule gave it up

    @property
    def finished(self) -> bool:
        return not +self._receiving and not any(self._wants.values())

    def start(self) -> list[Transfer]:
        """Every transfer that can start now: free receivers in turn, the one lacking most first
        (a laggard catches up from whoever is free), one transfer each per pass, each taking its
        rarest files.  With nothing under way, a host that still lacks items gets them from
        no one: it is given up."""
        out: list[Transfer] = []
        ready = [h for h, items in self._wants.items() if items and self._receiving[h] < self._slots]
        while ready:
            ready.sort(key=lambda h: -len(self._wants[h]))  # stable: ties in the wants' order
            # A host that finds nothing now finds nothing later in this call: starting transfers
            # only takes senders' slots and makes items less rare.
            ready = [h for h in ready if self._take(h, out)]
            ready = [h for h in ready if self._wants[h] and self._receiving[h] < self._slots]
        if not out and not +self._receiving:
            for h, items in list(self._wants.items()):
                if items:
                    self._give_up(h, f"no reachable node can send it {items[0][1]}")
        return out

    def _count(self, item: Item) -> int:
        return len(self._holders.get(item, ())) + sum(self._flying.get(item, Counter()).values())

    def _take(self, host: str, out: list[Transfer]) -> bool:
        """Appends ``host``'s next transfer to ``out``: its rarest lacked item that a free node
        may send, with the rest of the batch from that same node; False when no free node has
        anything for it."""
        items = self._wants[host]
        rank = sorted(items, key=self._count) if self._use_hosts else items
        for item in rank:
            src = self._sender(item, host)
            if src is not None:
                batch = self._batch(rank, item, src, host)
                for it in batch:
                    items.remove(it)
                    self._flying.setdefault(it, Counter())[host] += 1
                self._receiving[host] += 1
                self._sending[self._link(src)] += 1
                out.append(Transfer(items=batch, src=src, dst=host))
                return True
        return False

    def _usable(self, node: str, dst: str) -> bool:
        return node not in self._retired and (node, dst) not in self._bad

    def _sender(self, item: Item, dst: str) -> str | None:
        """A free node that may send ``item`` to ``dst``: the least busy usable holder (by name on
        ties), else the source (:meth:`_from_source`)."""
        if self._use_hosts:
            free = [h for h in sorted(self._holders.get(item, ()))
                    if self._usable(h, dst) and self._sending[self._link(h)] < self._slots]  # fmt: skip
            if free:
                return min(free, key=lambda h: self._sending[self._link(h)])
        if self._from_source(item, dst) and self._sending[self._link(SOURCE)] < self._slots:
            return SOURCE
        return None

    def _from_source(self, item: Item, dst: str) -> bool:
        """The source may send ``item`` to ``dst``: its link is usable and no holder ``dst`` may
        use has the item or is getting it (the source is read once)."""
        if not self._usable(SOURCE, dst):
            return False
        if not self._use_hosts:
            return True
        if any(self._usable(h, dst) for h in self._holders.get(item, ())):
            return False
        return not any(n and self._usable(h, dst) for h, n in self._flying.get(item, Counter()).items())

    def _batch(self, rank: list[Item], first: Item, src: str, dst: str) -> tuple[Item, ...]:
        """``first`` and the next items in ``rank`` of its model that ``src`` may send, up to the chunk."""
        batch, size = [first], self._sizes.get(first, 0)
        for it in rank[rank.index(first) + 1:]:
            if size >= self._chunk:
                break
            if it[0] == first[0] and self._sendable(it, src, dst):
                batch.append(it)
                size += self._sizes.get(it, 0)
        return tuple(batch)

    def _sendable(self, item: Item, src: str, dst: str) -> bool:
        if src != SOURCE:
            return src in self._holders.get(item, ())
        return self._from_source(item, dst)

    def _link(self, node: str) -> str:
        return self._source_host if node == SOURCE and self._source_host else node

    def done(self, t: Transfer) -> list[Transfer]:
        self._release(t)
        if t.dst not in self._failed:
            for it in t.items:
                self._holders.setdefault(it, set()).add(t.dst)
        return self.start()

    def failed(self, t: Transfer, blame: Blame = "receiver", why: str = "") -> list[Transfer]:
        """``t`` failed (``why``: the error, for :attr:`given_up`); see the class doc for the blame."""
        self._release(t)
        if t.dst not in self._failed:
            self._wants.setdefault(t.dst, []).extend(t.items)
        if blame == "receiver":
            self._give_up(t.dst, why)
        elif blame == "sender":
            self._retire(t.src)
        else:
            self._bad.add((t.src, t.dst))
            if sum(1 for s, d in self._bad if s == t.src) >= STRIKES:
                self._retire(t.src)
            if sum(1 for s, d in self._bad if d == t.dst) >= STRIKES:
                self._give_up(t.dst, why)
        return self.start()

    def _give_up(self, host: str, why: str) -> None:
        """``host`` gets nothing more (its other items too) and never sends again."""
        if host in self._failed:
            return
        self._failed.add(host)
        self.given_up[host] = why
        self._wants.pop(host, None)
        self._retire(host)

    def _retire(self, node: str) -> None:
        self._retired.add(node)
        for holders in self._holders.values():
            holders.discard(node)

    def _release(self, t: Transfer) -> None:
        self._sending[self._link(t.src)] -= 1
        for it in t.items:
            self._flying[it][t.dst] -= 1
        self._receiving[t.dst] -= 1
