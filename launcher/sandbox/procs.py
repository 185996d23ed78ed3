"""Processes the sandbox started, identified by PID *and* start time so a recycled PID is never
signalled, plus the namespace scans teardown needs (every process living in a host's mount or
network namespace was started by that host's sshd or dockerd, i.e. by the sandbox)."""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass


@dataclass(frozen=True, slots=True, kw_only=True)
class ProcRef:
    pid: int
    start: int  # /proc/<pid>/stat field 22 (clock ticks since boot)

    def alive(self) -> bool:
        """True while this very process (not a PID reuse) exists and is not a zombie."""
        stat = _stat(self.pid)
        return stat is not None and stat[1] == self.start and stat[0] != "Z"

    def signal(self, sig: int) -> bool:
        if not self.alive():
            return False
        try:
            os.kill(self.pid, sig)
        except ProcessLookupError:
            return False
        return True


def ref(pid: int) -> ProcRef:
    stat = _stat(pid)
    if stat is None:
        raise ProcessLookupError(pid)
    return ProcRef(pid=pid, start=stat[1])


def _stat(pid: int) -> tuple[str, int] | None:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            text = f.read()
    except OSError:
        return None
    # The command name may contain spaces and parentheses; fields resume after the last ')'.
    rest = text[text.rindex(")") + 2 :].split()
    return rest[0], int(rest[19])


def ns_inode(pid: int, kind: str) -> int | None:
    try:
        return os.stat(f"/proc/{pid}/ns/{kind}").st_ino
    except OSError:
        return None


def pids_in_namespaces(kind: str, inodes: frozenset[int]) -> tuple[int, ...]:
    """Every PID whose ``kind`` namespace (``mnt``/``net``) is one of ``inodes``."""
    found = []
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        ino = ns_inode(int(entry), kind)
        if ino is not None and ino in inodes:
            found.append(int(entry))
    return tuple(found)


def wait_gone(refs: tuple[ProcRef, ...], timeout_s: float) -> tuple[ProcRef, ...]:
    """Waits until none of ``refs`` is alive; returns the ones still alive at the deadline."""
    deadline = time.monotonic() + timeout_s
    left = tuple(r for r in refs if r.alive())
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = tuple(r for r in left if r.alive())
    return left


def kill_all(refs: tuple[ProcRef, ...], grace_s: float) -> None:
    """SIGTERM, wait up to ``grace_s``, then SIGKILL whatever is left and wait for it."""
    for r in refs:
        r.signal(signal.SIGTERM)
    for r in wait_gone(refs, grace_s):
        r.signal(signal.SIGKILL)
    wait_gone(refs, 5.0)

