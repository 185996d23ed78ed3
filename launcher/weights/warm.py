"""``fleet weights warm``: read each host's staged weights into its page cache before ``up``.

The page cache is the host kernel's: an engine in a container reads its bind-mounted weights
through the same cache, so warming the host path the units mount (:mod:`launcher.weights.needs`)
is what the engine's load then finds resident.  The reading is vmtouch's (``-t``); its plain
report gives the resident pages before and after.  Every host is measured first, so a host
without vmtouch or without a staged directory stops the run before any host reads anything.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Sequence

from launcher.errors import FleetError, RemoteError
from launcher.execute.fanout import DEFAULT_FORKS, run_all
from launcher.execute.ssh import SshConnector
from launcher.execute.transport import Transport
from launcher.model import Host, Inventory
from launcher.weights.needs import ModelNeed
from launcher.weights.stage import hosts_of

VMTOUCH_MAX = str(1 << 50)  # bytes: vmtouch skips files above -m (default 500 MB); shards are GBs
MEASURE_TIMEOUT_S = 600.0
WARM_TIMEOUT_S = 6 * 3600.0  # reading hundreds of GB from disk
_RESIDENT = re.compile(r"Resident Pages: (\d+)/(\d+)")
_NO_TOOL = 127  # the remote shell's "command not found"


class WarmRefused(FleetError):
    """Some host cannot be warmed (no vmtouch, nothing staged): no host was warmed."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Warmed:
    """One host: its model dirs' size and the part of it in the page cache, in bytes (whole pages)."""

    host: str
    total: int
    before: int
    after: int
    seconds: float  # the reading (vmtouch -t)


def vmtouch_argv(dirs: Sequence[str], *, touch: bool) -> tuple[str, ...]:
    """vmtouch over ``dirs``: ``touch`` reads every page in, else only counts resident pages."""
    return ("vmtouch", *(("-t",) if touch else ()), "-m", VMTOUCH_MAX, "--", *dirs)


def parse_resident(text: str) -> tuple[int, int]:
    """(resident pages, pages) from vmtouch's report."""
    m = _RESIDENT.search(text)
    if m is None:
        raise ValueError("no 'Resident Pages' line")
    return int(m.group(1)), int(m.group(2))


def _vmtouch(t: Transport, dirs: Sequence[str], *, touch: bool, timeout: float) -> str:
    r = t.run(vmtouch_argv(dirs, touch=touch), timeout=timeout)
    if r.exit_status == _NO_TOOL:
        raise FleetError(f"{t.host}: vmtouch not found (install the Debian package vmtouch there)")
    missing = [d for d in dirs if f"unable to stat {d} " in r.stderr_text]
    if missing:
        raise FleetError(f"{t.host}: {', '.join(missing)}: no such directory (fleet weights stage puts it there)")
    if r.exit_status != 0:
        raise RemoteError(t.host, "vmtouch", r.exit_status, r.stderr_text)
    return r.stdout_text


def _resident(t: Transport, dirs: Sequence[str]) -> tuple[int, int]:
    out = _vmtouch(t, dirs, touch=False, timeout=MEASURE_TIMEOUT_S)
    try:
        return parse_resident(out)
    except ValueError as err:
        raise RemoteError(t.host, "vmtouch", 0, f"unreadable report: {err}") from None


def _page_size(t: Transport) -> int:
    r = t.run(("getconf", "PAGESIZE"), timeout=MEASURE_TIMEOUT_S, check=True)
    try:
        return int(r.stdout_text.strip())
    except ValueError:
        raise RemoteError(t.host, "getconf PAGESIZE", 0, f"unreadable: {r.stdout_text!r}") from None


def warm(inventory: Inventory, needs: Sequence[ModelNeed], connector: SshConnector, *,
         forks: int = DEFAULT_FORKS) -> tuple[Warmed, ...]:
    """Reads every needed model dir into its host's page cache; per host in inventory order.
    Raises :class:`WarmRefused` (every host's problem named) before reading anything when some
    host cannot be measured, and :class:`FleetError` when a host's reading fails."""
    hosts, dirs = hosts_of(inventory, needs)

    def measure(h: Host, t: Transport) -> tuple[int, int, int]:
        resident, pages = _resident(t, dirs[h.name])  # first: it names a missing vmtouch
        return _page_size(t), resident, pages

    first = run_all(hosts, measure, connector=connector, forks=forks)
    problems = [u.reason for u in first.unreachable] + [f.message for f in first.failed]
    if problems:
        raise WarmRefused("nothing was warmed: " + "; ".join(problems))
    before = first.values()

    def read(h: Host, t: Transport) -> Warmed:
        page, resident, pages = before[h.name]
        t0 = time.monotonic()
        _vmtouch(t, dirs[h.name], touch=True, timeout=WARM_TIMEOUT_S)
        seconds = time.monotonic() - t0
        after, _ = _resident(t, dirs[h.name])
        return Warmed(host=h.name, total=pages * page, before=resident * page, after=after * page, seconds=seconds)

    second = run_all(hosts, read, connector=connector, forks=forks)
    problems = [u.reason for u in second.unreachable] + [f.message for f in second.failed]
    if problems:
        raise FleetError("warming failed: " + "; ".join(problems))
    return tuple(o.value for o in second.ok)
