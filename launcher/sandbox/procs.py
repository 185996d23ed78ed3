"""Processes the sandbox started, identified by PID *and* start time so a recycled PID is never
signalled, and the trees below them: teardown ends a recorded daemon and its descendants
(``psutil`` ``children(recursive=True)`` of the verified root), never "whatever lives in a
namespace" by a recorded number -- a namespace's inode number is reused once it dies, so a stale
state file could name someone else's.  A namespace held open (:class:`HeldNamespace`) cannot be
reused, so its members can be named safely."""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass
from typing import Callable

import psutil

from launcher.errors import FleetError

# A child subreaper above each dockerd the sandbox starts (it forwards signals to its child and
# reaps): what the daemon's children leave behind (containerd's shims) becomes its child, so it
# stays among the descendants of a recorded process instead of going to the machine's init.
REAPER = ("tini", "-s", "--")


@dataclass(frozen=True, slots=True, kw_only=True)
class ProcRef:
    pid: int
    created: float  # psutil's create_time: with the PID, names one process (a reused PID has another)

    def process(self) -> psutil.Process | None:
        """This very process (not a PID reuse) while it exists and is not a zombie."""
        try:
            proc = psutil.Process(self.pid)
            if proc.create_time() == self.created and proc.status() != psutil.STATUS_ZOMBIE:
                return proc
        except psutil.NoSuchProcess:
            pass
        return None

    def alive(self) -> bool:
        return self.process() is not None

    def stale(self) -> bool:
        """True if the PID now belongs to another process (another start time)."""
        try:
            return psutil.Process(self.pid).create_time() != self.created
        except psutil.NoSuchProcess:
            return False

    def signal(self, sig: int) -> bool:
        """Signals the process if it is still this one (checked right before the signal)."""
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


def child_of(parent: ProcRef, timeout_s: float) -> ProcRef | None:
    """The (first) child of ``parent`` once it has one, or None if it has none by ``timeout_s``
    or ``parent`` is gone."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        proc = parent.process()
        if proc is None:
            return None
        try:
            children = proc.children()
            if children:
                return ProcRef(pid=children[0].pid, created=children[0].create_time())
        except psutil.NoSuchProcess:
            pass
        time.sleep(0.01)
    return None


def descendants(root: ProcRef) -> tuple[ProcRef, ...]:
    """Every process below ``root`` while ``root`` is still that process (else none).  A
    descendant started before the root is a PID reused between psutil's two reads: left out."""
    proc = root.process()
    if proc is None:
        return ()
    found = []
    try:
        children = proc.children(recursive=True)
    except psutil.NoSuchProcess:
        return ()
    for child in children:
        try:
            created = child.create_time()
        except psutil.NoSuchProcess:
            continue
        if created >= root.created:
            found.append(ProcRef(pid=child.pid, created=created))
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


def end_tree_leaves_first(root: ProcRef, grace_s: float) -> None:
    """Ends ``root``'s descendants, rescanning until none is left, then ``root``.  For a root
    that is a child subreaper (the sandbox's sshd): while it lives, an orphan of its tree
    becomes its child, so a process forked during the teardown is found by the next scan."""
    for _ in range(10):
        below = descendants(root)
        if not below:
            break
        kill_all(below, grace_s)
    kill_all((root,), grace_s)


def end_tree_root_first(root: ProcRef, grace_s: float) -> None:
    """SIGTERMs ``root`` (a supervisor that must stop its own children, e.g. dockerd, which
    restarts a containerd killed under it) and waits up to ``grace_s`` for it while collecting
    its tree; then ends whatever of that tree is left."""
    seen: dict[int, ProcRef] = {r.pid: r for r in descendants(root)}
    root.signal(signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while root.alive() and time.monotonic() < deadline:
        seen.update((r.pid, r) for r in descendants(root))
        time.sleep(0.1)
    seen.update((r.pid, r) for r in descendants(root))
    kill_all((root,), 0.0)
    kill_all(tuple(seen.values()), 2.0)


@dataclass(frozen=True, slots=True, kw_only=True)
class HeldNamespace:
    """A namespace kept alive by an open file of it: while ``fd`` is open the namespace -- and so
    its inode number -- cannot be reused by another, unlike a number written in a state file."""

    owner: str  # what it is, for messages: "h3 net"
    kind: str  # the /proc/PID/ns entry: "net", "mnt"
    fd: int


def hold_namespace(owner: str, kind: str, path: str) -> HeldNamespace | None:
    """Opens the namespace file ``path`` (``/run/netns/NAME``, ``/proc/PID/ns/KIND``); None if
    it is gone."""
    try:
        return HeldNamespace(owner=owner, kind=kind, fd=os.open(path, os.O_RDONLY | os.O_CLOEXEC))
    except OSError:
        return None


def hold_process_namespace(owner: str, kind: str, proc: ProcRef) -> HeldNamespace | None:
    """``proc``'s ``kind`` namespace, held; None unless ``proc`` is still that very process once
    the file is open (a PID reused between the check and the open names another's namespace)."""
    held = hold_namespace(owner, kind, f"/proc/{proc.pid}/ns/{kind}")
    if held is not None and not proc.alive():
        os.close(held.fd)
        return None
    return held


def members(held: HeldNamespace) -> tuple[ProcRef, ...]:
    """The live processes whose ``held.kind`` namespace is the held one."""
    ns = os.fstat(held.fd)
    found = []
    for pid in psutil.pids():
        try:
            # The start time before the namespace: a PID reused between the two reads gives a
            # reference that no longer names a live process, so nothing is signalled through it.
            created = psutil.Process(pid).create_time()
            st = os.stat(f"/proc/{pid}/ns/{held.kind}")
            if (st.st_dev, st.st_ino) == (ns.st_dev, ns.st_ino):
                found.append(ProcRef(pid=pid, created=created))
        except (OSError, psutil.NoSuchProcess):
            continue  # ended meanwhile, or a zombie (no namespaces left)
    return tuple(found)


def describe(refs: tuple[ProcRef, ...]) -> str:
    """``PID NAME (STATUS, parent PPID)`` of each, for a line that lets someone see why."""
    out = []
    for r in refs:
        try:
            p = psutil.Process(r.pid)
            out.append(f"{r.pid} {p.name()} ({p.status()}, parent {p.ppid()})")
        except psutil.NoSuchProcess:
            out.append(f"{r.pid} (gone)")
    return ", ".join(out)


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
