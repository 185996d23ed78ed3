"""The per-host deploy lock: an atomic ``mkdir /run/lock/fleet/<deployment>`` with an
``owner`` file (``who@control-host pid=N time=T id=X``).

It lives in ``/run/lock`` (the FHS place for lock files, a tmpfs): a lock guards a deploy that
is running now, so a reboot of the host, which ends anything that deploy was doing there, also
clears its lock.

Contract: :func:`acquire` succeeds only if the directory did not exist; otherwise it raises
:class:`LockedError` naming the holder.  :func:`release` removes the lock only while its owner
file is still ours, so a lock broken and re-taken by someone else is left alone.  Only
:func:`break_lock` (``fleet unlock`` / ``--break-lock``) removes someone else's lock.

Starts are ordered against their cancellation inside the lock directory (:func:`serial_argv`,
:func:`fence_argv`): a Ctrl-C stops waiting for a running remote command after a short grace,
and the teardown that follows runs beside it on a new channel, so a start still under way on the
host could otherwise bring its unit up after the teardown (or after fleet exited).  What a host
needs for it: ``flock`` (util-linux).
"""

from __future__ import annotations

import datetime
import getpass
import os
import socket
import uuid
from typing import Sequence

from launcher import hostscripts
from launcher.deploy.remote import STEP_TIMEOUT_S, check, failure, sh
from launcher.errors import FleetError
from launcher.execute.transport import Result, Transport

LOCK_ROOT = "/run/lock/fleet"

_HELD = 75  # exit status of the acquire script when the lock exists (EX_TEMPFAIL)

_NO_FLOCK = 127
# The scripts (launcher/hostscripts/lock-*.sh) say what each does and why.
_ACQUIRE = hostscripts.text("lock-acquire.sh")
_RELEASE = hostscripts.text("lock-release.sh")
_BREAK = hostscripts.text("lock-break.sh")
_SERIAL = hostscripts.text("lock-serial.sh")  # a start, under the lock and its step's fence
_FENCE = hostscripts.text("lock-fence.sh")


class LockedError(FleetError):
    """Another deploy holds the lock on a host."""

    def __init__(self, host: str, deployment: str, owner: str) -> None:
        self.host = host
        self.owner = owner
        super().__init__(
            f"{host}: deployment {deployment!r} is locked by {owner}; "
            f"if that deploy is dead, run `fleet unlock` (or pass --break-lock)"
        )


def lock_dir(deployment: str) -> str:
    return f"{LOCK_ROOT}/{deployment}"


def owner_line() -> str:
    """Who is deploying, from where; the random id makes the line unique to this run."""
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return f"{getpass.getuser()}@{socket.gethostname()} pid={os.getpid()} time={now} id={uuid.uuid4().hex[:12]}"


def acquire_argv(deployment: str, owner: str) -> tuple[str, ...]:
    return sh(_ACQUIRE, LOCK_ROOT, lock_dir(deployment), owner)


def break_argv(deployment: str) -> tuple[str, ...]:
    """Removes the lock whoever holds it; prints the previous owner line (nothing: no lock)."""
    return sh(_BREAK, lock_dir(deployment))


def acquired(result: Result, deployment: str) -> None:
    """Judges the answer to :func:`acquire_argv`: returns if the lock is now ours."""
    if result.exit_status == _HELD:
        raise LockedError(result.host, deployment, result.stdout_text.strip() or "(no owner file)")
    if result.exit_status == _NO_FLOCK and not result.stderr_text.strip():
        raise FleetError(f"{result.host}: flock not found (util-linux): fleet needs it on every host it deploys to")
    if not result.ok:
        raise failure(result, f"mkdir {lock_dir(deployment)}")


def acquire(shell: Transport, deployment: str, owner: str) -> None:
    acquired(shell.run(acquire_argv(deployment, owner), timeout=STEP_TIMEOUT_S), deployment)


def release(shell: Transport, deployment: str, owner: str) -> None:
    check(shell, sh(_RELEASE, lock_dir(deployment), owner), label=f"rm -rf {lock_dir(deployment)}")


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
    out = check(shell, break_argv(deployment), label=f"rm -rf {lock_dir(deployment)}")
    return out.strip() or None
