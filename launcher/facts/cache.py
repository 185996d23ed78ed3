"""Facts cached per host on the control node, with the time they were gathered.

Layout: ``$XDG_CACHE_HOME/fleet/facts/<inventory-hash>/<host>.json`` (the host name %-quoted: a
cache key is never a path) (``~/.cache`` without
XDG_CACHE_HOME; ``FLEET_FACTS_DIR`` replaces the whole ``.../facts`` root).  The inventory hash is
the sha256 of the inventory file's real path, so every inventory has its own hosts (two
inventories may name different machines ``gpu-01``).

Each entry keeps the gather script's raw output and is parsed again on load: a parser fixed
later applies to old entries, and the JSON never has to follow the dataclasses.  An entry is
ignored when it was gathered from another address/port than the inventory now names, or when it
is older than the caller's ``max_age_s``.  Writes are atomic (temp file + rename).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping

from launcher.model import Host, Inventory
from launcher.facts import host as facts
from launcher.facts.host import HostFacts

VERSION = 1
DEFAULT_MAX_AGE_S = 24 * 3600.0


@dataclass(frozen=True, slots=True, kw_only=True)
class Cached:
    host: str
    address: str
    port: int
    gathered_at: float  # control node's epoch seconds when the output came back
    clock_offset_s: float | None
    clock_uncertainty_s: float | None
    raw: str  # the gather script's output
    facts: HostFacts

    def age_s(self, now: float | None = None) -> float:
        return (time.time() if now is None else now) - self.gathered_at


def root() -> Path:
    explicit = os.environ.get("FLEET_FACTS_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "fleet" / "facts"


def inventory_dir(inventory: Inventory) -> Path:
    key = hashlib.sha256(os.path.realpath(inventory.path).encode()).hexdigest()[:16]
    return root() / key


def _key(host: str) -> str:
    """A host name as one file name, never a path: ``/`` and ``%`` are %-quoted (``../x`` is
    ``..%2Fx``); a name too long for a file name is its SHA-256."""
    key = urllib.parse.quote(host, safe=":")
    return key if len(key) <= 200 else "sha256-" + hashlib.sha256(host.encode()).hexdigest()


def _path(inventory: Inventory, host: str) -> Path:
    return inventory_dir(inventory) / f"{_key(host)}.json"


def entry(host: Host, raw: str, sent: float, received: float) -> Cached:
    """A cache entry from one gather round trip (``sent``/``received``: control node's clock
    just before sending the script and just after its output came back)."""
    hf = facts.parse_facts(raw)
    off = facts.clock_offset(hf, sent, received)
    return Cached(
        host=host.name, address=host.address, port=host.port, gathered_at=received,
        clock_offset_s=off[0] if off else None, clock_uncertainty_s=off[1] if off else None,
        raw=raw, facts=hf,
    )


def store(inventory: Inventory, item: Cached) -> Path:
    path = _path(inventory, item.host)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    doc = {
        "version": VERSION,
        "host": item.host,
        "address": item.address,
        "port": item.port,
        "inventory": os.path.realpath(inventory.path),
        "gathered_at": item.gathered_at,
        "gathered_at_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(item.gathered_at)),
        "clock_offset_s": item.clock_offset_s,
        "clock_uncertainty_s": item.clock_uncertainty_s,
        "facts": facts.to_json(item.facts),  # for people reading the file; load re-parses raw
        "raw": item.raw,
    }
    fd, tmp = tempfile.mkstemp(prefix=f".{_key(item.host)}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as out:
            json.dump(doc, out, indent=1, sort_keys=True)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    return path


def _read(path: Path) -> Cached | None:
    try:
        doc = json.loads(path.read_text())
        if doc.get("version") != VERSION:
            return None
        return Cached(
            host=str(doc["host"]), address=str(doc["address"]), port=int(doc["port"]),
            gathered_at=float(doc["gathered_at"]),
            clock_offset_s=None if doc.get("clock_offset_s") is None else float(doc["clock_offset_s"]),
            clock_uncertainty_s=None if doc.get("clock_uncertainty_s") is None else float(doc["clock_uncertainty_s"]),
            raw=str(doc["raw"]), facts=facts.parse_facts(str(doc["raw"])),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None  # absent, truncated or hand-edited: as good as no entry


def load(
    inventory: Inventory,
    hosts: Iterable[str] | None = None,
    *,
    max_age_s: float | None = DEFAULT_MAX_AGE_S,
    now: float | None = None,
) -> dict[str, Cached]:
    """The usable cached entries of ``hosts`` (default: every inventory host), by host name."""
    names = list(hosts) if hosts is not None else [h.name for h in inventory.hosts]
    out: dict[str, Cached] = {}
    for name in names:
        try:
            host = inventory.host(name)
        except KeyError:
            continue
        item = _read(_path(inventory, name))
        if item is None or (item.address, item.port) != (host.address, host.port):
            continue
        if max_age_s is not None and item.age_s(now) > max_age_s:
            continue
        out[name] = item
    return out


def facts_of(entries: Mapping[str, Cached]) -> dict[str, HostFacts]:
    """What :func:`launcher.plan.plan` takes."""
    return {name: item.facts for name, item in entries.items()}


def load_facts(inventory: Inventory, max_age_s: float | None = DEFAULT_MAX_AGE_S) -> dict[str, HostFacts]:
    """Cached facts of every inventory host, for planning (``gid_index: auto``)."""
    return facts_of(load(inventory, max_age_s=max_age_s))
