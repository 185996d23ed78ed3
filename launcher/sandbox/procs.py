"""Processes the sandbox started, identified by PID *and* start time so a recycled PID is never
signalled, plus the namespace scans teardown needs (every process living in a host's mount or
network namespace was started by that host's sshd or dockerd, i.e. by the sandbox)."""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass
from typing import Callable

import psutil

from launcher.errors import FleetError


@dataclass(frozen=True, slots=True, kw_only=True)
class ProcRef:
    pid: int
    created: float  # psutil's create_time: with the PID, names one process (a reused PID has another)

    def alive(self) -> bool:
        """True while this very process (not a PID reuse) exists and is not a zombie."""
        try:
            proc = psutil.Process(self.pid)
            return proc.create_time() == self.created and proc.status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    def signal(self, sig: int) -> bool:
        if not self.alive():
            return False
        try:
            os.kill(self.pid, sig)
        except ProcessLookupError:
            return False
        return True


def ref(pid: int) -> ProcRef:
    try:
        return ProcRef(pid=pid, created=psutil.Process(pid).create_time())
    except psutil.NoSuchProcess:
        raise ProcessLookupError(pid) from None


def ns_inode(pid: int, kind: str) -> int | None:
    try:
        return os.stat(f"/proc/{pid}/ns/{kind}").st_ino
    except OSError:
        return None


def pids_in_namespaces(kind: str, inodes: frozenset[int]) -> tuple[int, ...]:
    """Every PID whose ``kind`` namespace (``mnt``/``net``) is one of ``inodes``."""
    found = []
    me = os.getpid()
    for pid in psutil.pids():
        if pid == me:
            continue
        ino = ns_inode(pid, kind)
        if ino is not None and ino in inodes:
            found.append(pid)
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



def poll_until(ready: Callable[[], bool], deadline: float, *, died: Callable[[], str | None],
               late: Callable[[], str], step_s: float = 0.05) -> None:
    """Polls ``ready`` (an ``OSError`` counts as not yet) until it is true.  Raises
    :class:`FleetError` with ``died()`` as soon as that names a failure (a daemon that died would
    otherwise be waited out), or with ``late()`` once ``deadline`` (``time.monotonic``) passed."""
    while True:
        why = died()
        if why is not None:
            raise FleetError(why)
        try:
            if ready():
                return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise FleetError(late())
        time.sleep(step_s)
