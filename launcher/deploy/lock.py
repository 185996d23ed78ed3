"""The per-host deploy lock: an atomic ``mkdir /run/lock/fleet/<deployment>`` with an
``owner`` file (``who@control-host pid=N time=T id=X``).

It lives in ``/run/lock`` (the FHS place for lock files, a tmpfs): a lock guards a deploy that
is running now, so a reboot of the host, which ends anything that deploy was doing there, also
clears its lock.

Contract: :func:`acquire` succeeds only if the directory did not exist; otherwise it raises
:class:`LockedError` naming the holder.  :func:`release` removes the lock only while its owner
file is still ours, so a lock broken and re-taken by someone else is left alone.  Only
:func:`break_lock` (``fleet unlock`` / ``--break-lock``) removes someone else's lock.
"""

from __future__ import annotations

import datetime
import getpass
import os
import socket
import uuid

from launcher.deploy.remote import STEP_TIMEOUT_S, check, failure, sh
from launcher.errors import FleetError
from launcher.execute.transport import Result, Transport

LOCK_ROOT = "/run/lock/fleet"

_HELD = 75  # exit status of the acquire script when the lock exists (EX_TEMPFAIL)

_ACQUIRE = (
    'mkdir -p "$1" && '
    'if mkdir -m 0755 "$2" 2>/dev/null; then printf "%s\\n" "$3" > "$2/owner"; '
    'else cat "$2/owner" 2>/dev/null || echo "(no owner file)"; exit 75; fi'
)
_RELEASE = '[ ! -d "$1" ] || { [ "$(cat "$1/owner" 2>/dev/null)" = "$2" ] && rm -rf "$1"; } || true'
_BREAK = 'if [ -d "$1" ]; then cat "$1/owner" 2>/dev/null || echo "(no owner file)"; rm -rf "$1"; fi'


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
    if not result.ok:
        raise failure(result, f"mkdir {lock_dir(deployment)}")


def acquire(shell: Transport, deployment: str, owner: str) -> None:
    acquired(shell.run(acquire_argv(deployment, owner), timeout=STEP_TIMEOUT_S), deployment)


def release(shell: Transport, deployment: str, owner: str) -> None:
    check(shell, sh(_RELEASE, lock_dir(deployment), owner), label=f"rm -rf {lock_dir(deployment)}")


def break_lock(shell: Transport, deployment: str) -> str | None:
    """Removes the lock whoever holds it; returns the previous owner line (None: no lock)."""
    out = check(shell, break_argv(deployment), label=f"rm -rf {lock_dir(deployment)}")
    return out.strip() or None
