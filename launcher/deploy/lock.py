"""The per-host deploy lock: an atomic ``mkdir /run/fleet/lock/<deployment>`` with an
``owner`` file (``who@control-host pid=N start=S time=T id=X``; ``S``: the process's start time,
so a reused pid is not taken for the holder).

It lives under ``/run`` (a tmpfs): a lock guards a deploy that is running now, so a reboot of
the host, which ends anything that deploy was doing there, also clears its lock.  Only root can
create entries in ``/run``, so no other local user can plant ``/run/fleet`` or a lock in it
first (``/run/lock``, where it lived before, is world-writable: a user could block every deploy
by creating ``/run/lock/fleet``, or make it a symlink that ``fleet unlock``'s ``rm -rf`` would
follow).  Every script that writes or removes there checks the whole way first
(``hostscripts/lock-safe.sh``): ``/run`` owned by root (others may write it only when it is
sticky), and ``/run/fleet``, ``/run/fleet/lock`` and the lock directory real directories, not
symlinks, owned by root or the connecting user and writable by no one else; anything else is
refused (:class:`UnsafeLockError`: one line naming the path, and what to do).  A connecting
user other than root needs root to make ``/run/fleet`` for it once per boot (said in one line).

Contract: :func:`acquire` succeeds only if the directory did not exist; otherwise it raises
:class:`LockedError` naming the holder.  :func:`release` removes the lock only while its owner
file is still ours (or, taking over, the dead holder's), so a lock broken and re-taken by
someone else is left alone.  Only :func:`break_lock` (``fleet unlock`` / ``--break-lock``)
removes someone else's lock.  :func:`holder_state` tells a lock left by a fleet process of this
control host that is gone (its pid ended or now belongs to another process) from one that runs.

Starts are ordered against their cancellation inside the lock directory (:func:`serial_argv`,
:func:`fence_argv`): a Ctrl-C stops waiting for a running remote command after a short grace,
and the teardown that follows runs beside it on a new channel, so a start still under way on the
host could otherwise bring its unit up after the teardown (or after fleet exited).  What a host
needs for it: ``flock`` (util-linux).
"""

from __future__ import annotations

import datetime
import getpass
import re
import socket
import uuid
from typing import Literal, Sequence

import psutil

from launcher import hostscripts
from launcher.remote import STEP_TIMEOUT_S, failure, sh, tail
from launcher.errors import FleetError
from launcher.execute.transport import Result, Transport

LOCK_ROOT = "/run/fleet/lock"

_HELD = 75  # exit status of the acquire script when the lock exists (EX_TEMPFAIL)
_UNSAFE = 77  # ... when a path on the way could be changed by someone else (EX_NOPERM)
_NO_ROOT = 73  # ... when LOCK_ROOT cannot be made: /run takes entries from root only (EX_CANTCREAT)

_NO_FLOCK = 127
# The scripts (launcher/hostscripts/lock-*.sh) say what each does and why; each runs after
# lock-safe.sh's path checks.
_SAFE = hostscripts.text("lock-safe.sh")
_ACQUIRE = _SAFE + hostscripts.text("lock-acquire.sh")
_RELEASE = _SAFE + hostscripts.text("lock-release.sh")
_BREAK = _SAFE + hostscripts.text("lock-break.sh")
_SERIAL = _SAFE + hostscripts.text("lock-serial.sh")  # a start, under the lock and its step's fence
_FENCE = _SAFE + hostscripts.text("lock-fence.sh")


class LockedError(FleetError):
    """Another deploy holds the lock on a host; ``holder`` says whether it still runs (see
    :func:`holder_state`)."""

    def __init__(self, host: str, deployment: str, owner: str) -> None:
        self.host = host
        self.owner = owner
        self.holder = holder_state(owner)
        if self.holder == "running":
            why = "a fleet run still going on this control host; wait for it to end"
        else:
            why = "if that deploy is dead, run `fleet unlock` (or pass --break-lock)"
        super().__init__(f"{host}: deployment {deployment!r} is locked by {owner}; {why}")


class UnsafeLockError(FleetError):
    """The lock's directory on a host could be changed by another local user: refused."""

    def __init__(self, host: str, reason: str) -> None:
        self.host = host
        super().__init__(f"{host}: refusing the deploy lock: {reason}; remove it as root and run again")


def lock_dir(deployment: str) -> str:
    return f"{LOCK_ROOT}/{deployment}"


def claim_name(deployment: str, kind: Literal["preflight", "watch"]) -> str:
    """The lock name of a deployment's claim taken beside its deploy lock: one preflight at a
    time (:mod:`launcher.preflight.claim`), one watch at a time (:mod:`launcher.watch.loop`)."""
    return f"{deployment}.{kind}"


def owner_line() -> str:
    """Who is deploying, from where; the random id makes the line unique to this run."""
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    me = psutil.Process()
    return (f"{getpass.getuser()}@{socket.gethostname()} pid={me.pid} start={me.create_time():.2f} time={now} "
            f"id={uuid.uuid4().hex[:12]}")  # fmt: skip


_OWNER = re.compile(r"[^@\s]*@(?P<host>\S+) pid=(?P<pid>\d+) start=(?P<start>[0-9.]+) ")


def holder_state(owner: str) -> Literal["dead", "running", "unknown"]:
    """Whether the fleet process ``owner`` (a lock's owner line) names still runs, as far as
    this control host can tell: ``dead`` when it ran here and its pid is gone or belongs to a
    process started at another time; ``running`` when that process is still here; ``unknown``
    for another control host or a line without a start time."""
    m = _OWNER.match(owner)
    if m is None or m["host"] != socket.gethostname():
        return "unknown"
    try:
        started = psutil.Process(int(m["pid"])).create_time()
    except psutil.NoSuchProcess:
        return "dead"
    return "dead" if abs(started - float(m["start"])) > 1.0 else "running"


def acquire_argv(deployment: str, owner: str) -> tuple[str, ...]:
    return sh(_ACQUIRE, LOCK_ROOT, lock_dir(deployment), owner)


def break_argv(deployment: str) -> tuple[str, ...]:
    """Removes the lock whoever holds it; prints the previous owner line (nothing: no lock)."""
    return sh(_BREAK, lock_dir(deployment))


def acquired(result: Result, deployment: str) -> None:
    """Judges the answer to :func:`acquire_argv`: returns if the lock is now ours."""
    if result.exit_status == _HELD:
        raise LockedError(result.host, deployment, result.stdout_text.strip() or "(no owner file)")
    unsafe(result)
    if result.exit_status == _NO_ROOT:
        raise FleetError(f"{result.host}: {tail(result.stderr_text, 1)}")
    if result.exit_status == _NO_FLOCK and not result.stderr_text.strip():
        raise FleetError(f"{result.host}: flock not found (util-linux): fleet needs it on every host it deploys to")
    if not result.ok:
        raise failure(result, f"mkdir {lock_dir(deployment)}")


def unsafe(result: Result) -> None:
    """Raises :class:`UnsafeLockError` when a lock script refused a path (lock-safe.sh)."""
    if result.exit_status == _UNSAFE:
        raise UnsafeLockError(result.host, tail(result.stderr_text, 1))


def acquire(shell: Transport, deployment: str, owner: str) -> None:
    acquired(shell.run(acquire_argv(deployment, owner), timeout=STEP_TIMEOUT_S), deployment)


def take(shell: Transport, deployment: str, owner: str, *, force: bool = False,
         timeout: float = STEP_TIMEOUT_S) -> None:
    """The lock for ``owner``: broken first with ``force``; a lock whose holder is gone
    (:func:`holder_state` ``dead``) is released as that holder and taken again; any other
    holder raises :class:`LockedError`.  For locks taken alone (a watch's claim, preflight's);
    a deploy session judges its acquire inside a batch (:mod:`launcher.deploy.session`)."""
    def once() -> None:
        acquired(shell.run(acquire_argv(deployment, owner), timeout=timeout), deployment)

    if force:
        break_lock(shell, deployment)
    try:
        once()
    except LockedError as err:
        if err.holder != "dead":
            raise
        release(shell, deployment, err.owner)
        once()


def release(shell: Transport, deployment: str, owner: str) -> None:
    result = shell.run(sh(_RELEASE, lock_dir(deployment), owner), timeout=STEP_TIMEOUT_S)
    unsafe(result)
    if not result.ok:
        raise failure(result, f"rm -rf {lock_dir(deployment)}")


SERIAL_WAIT_S = 90  # for another start holding the flock; below the caller's step timeout


def serial_argv(deployment: str, owner: str, step: str, argv: Sequence[str]) -> tuple[str, ...]:
    """``argv`` run on the host only while ``owner`` holds the deploy lock and start step
    ``step`` is not fenced off, holding the lock directory's ``ops`` flock meanwhile (waiting
    up to :data:`SERIAL_WAIT_S` for it).  Exit 75 (nothing run) otherwise."""
    return sh(_SERIAL, lock_dir(deployment), owner, step, str(SERIAL_WAIT_S), *argv)


def fence_argv(deployment: str, step: str, wait_s: float) -> tuple[str, ...]:
    """After it succeeds, no :func:`serial_argv` command of ``step`` is running on the host or
    will run (waits up to ``wait_s`` for one running now; exit 1 if it still runs).  Succeeds
    at once without the lock directory: then nothing can start either."""
    return sh(_FENCE, lock_dir(deployment), step, str(int(wait_s)))


def break_lock(shell: Transport, deployment: str) -> str | None:
    """Removes the lock whoever holds it; returns the previous owner line (None: no lock)."""
    result = shell.run(break_argv(deployment), timeout=STEP_TIMEOUT_S)
    unsafe(result)
    if not result.ok:
        raise failure(result, f"rm -rf {lock_dir(deployment)}")
    return result.stdout_text.strip() or None
