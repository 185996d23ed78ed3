"""``--limit PATTERN``: one rule for narrowing any command that touches hosts, applied before
anything connects.

- :func:`limit_hosts`: the pattern is resolved on the whole inventory, with the grammar and
  the "matches no host (did you mean ...)" errors of placements; a pattern that matches hosts,
  but none of the ones the command would touch, is an error naming those.
- :func:`limited_deployments`: for commands given several playbooks (``metrics targets``,
  ``watch``): the deployments the pattern keeps a host of; the error when it keeps none of
  any is the one above, naming them all.
- :func:`refuse_split`: a command that restarts groups whole (up, down, restart, rollback,
  preflight's rank-to-rank checks) refuses a limit that takes some ranks of a group and leaves
  the others.  Commands that read (status, logs, top, collect, facts, weights, unlock) act on
  part of a group and do not call it.

Pure: nothing here talks to a host.
"""

from __future__ import annotations

from typing import Iterable, Mapping, Sequence

from launcher.config.patterns import select
from launcher.errors import UsageError
from launcher.model import Host, Inventory


def limit_hosts(inventory: Inventory, hosts: Sequence[Host], pattern: str | None, *, what: str) -> tuple[Host, ...]:
    """``hosts`` (inventory order kept) narrowed to ``pattern`` (None: all of them); ``what``
    names them in the error when none match (e.g. ``"deployment glm-pd"``)."""
    if pattern is None:
        return tuple(hosts)
    chosen = {h.name for h in select(inventory, pattern, key_path="--limit")}
    kept = tuple(h for h in hosts if h.name in chosen)
    if not kept:
        names = ", ".join(h.name for h in hosts) or "none"
        raise UsageError(f"--limit {pattern!r} matches none of the hosts of {what} ({names})")
    return kept


def limited_deployments(inventory: Inventory, hosts_of: Mapping[str, Sequence[Host]],
                        pattern: str | None) -> tuple[str, ...]:  # fmt: skip
    """The deployments of ``hosts_of`` (deployment -> its hosts) with a host ``pattern`` keeps
    (None: all), in the order given.  One that keeps none of any is :func:`limit_hosts`' error."""
    if pattern is None:
        return tuple(hosts_of)
    every = tuple({h.name: h for hs in hosts_of.values() for h in hs}.values())
    what = ("deployment " if len(hosts_of) == 1 else "deployments ") + ", ".join(hosts_of)
    kept = {h.name for h in limit_hosts(inventory, every, pattern, what=what)}
    return tuple(name for name, hs in hosts_of.items() if any(h.name in kept for h in hs))


def refuse_split(members: Iterable[tuple[str, str]], keep: Iterable[str]) -> None:
    """``members``: (group, host) of every unit.  A group some of whose hosts are kept and some
    not is refused, naming the hosts to add (groups restart whole)."""
    kept = set(keep)
    by_group: dict[str, set[str]] = {}
    for group, host in members:
        by_group.setdefault(group, set()).add(host)
    for group, hosts in by_group.items():
        outside = sorted(hosts - kept)
        if outside and len(outside) < len(hosts):
            raise UsageError(
                f"--limit splits group {group!r}: it also runs on {', '.join(outside)}; include those hosts"
            )
