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

from launcher.deploy.remote import STEP_TIMEOUT_S, check, failure, sh
from launcher.errors import FleetError
from launcher.execute.transport import Result, Transport

LOCK_ROOT = "/run/lock/fleet"

_HELD = 75  # exit status of the acquire script when the lock exists (EX_TEMPFAIL)

_NO_FLOCK = 127
# Checked before the lock is taken: without flock no start could run (see _SERIAL), and a
# restart would have stopped the running generation first.
_ACQUIRE = (
    'command -v flock >/dev/null 2>&1 || exit 127; '
    'mkdir -p "$1" && '
    'if mkdir -m 0755 "$2" 2>/dev/null; then printf "%s\\n" "$3" > "$2/owner"; '
    'else cat "$2/owner" 2>/dev/null || echo "(no owner file)"; exit 75; fi'
)
_RELEASE = '[ ! -d "$1" ] || { [ "$(cat "$1/owner" 2>/dev/null)" = "$2" ] && rm -rf "$1"; } || true'
_BREAK = 'if [ -d "$1" ]; then cat "$1/owner" 2>/dev/null || echo "(no owner file)"; rm -rf "$1"; fi'


# A start runs only while this run holds the lock and its start step is not fenced off, with
# the lock directory's `ops` file flock'ed for its whole run: the command inherits the locked
# descriptor (shells exec the last command of `sh -c`; closing it there would drop the lock;
# docker and systemd start the unit's processes themselves, so none of them inherits it).  A
# missing directory ends the script before `exec` could (a failed redirection of `exec` would
# exit the shell anyway).
_SERIAL = (
    'd=$1 o=$2 t=$3 w=$4; shift 4; '
    'command -v flock >/dev/null 2>&1 || { echo "flock not found (util-linux): fleet needs it to start units" >&2; exit 127; }; '
    '[ -d "$d" ] || { echo "not started: the deploy lock $d is gone" >&2; exit 75; }; '
    'exec 9>>"$d/ops"; '
    'flock -w "$w" 9 || { echo "not started: another start of this deployment still runs on this host after ${w}s '
    '(left by an interrupted run?)" >&2; exit 75; }; '
    'held=; IFS= read -r held 2>/dev/null <"$d/owner"; '
    '[ "$held" = "$o" ] || { echo "not started: this run no longer holds the deploy lock $d" >&2; exit 75; }; '
    'f=; IFS= read -r f 2>/dev/null <"$d/fence"; '
    '[ "$f" != "$t" ] || { echo "not started: its start step was cancelled" >&2; exit 75; }; '
    '"$@"'
)
# Waits for the starts running under the lock, then fences off the rest of step `t`.
_FENCE = (
    'd=$1 t=$2 w=$3; [ -d "$d" ] || exit 0; '
    'command -v flock >/dev/null 2>&1 || { echo "flock not found (util-linux)" >&2; exit 127; }; '
    'exec 9>>"$d/ops"; '
    'flock -w "$w" 9 || { echo "a start is still running after ${w}s; its unit may come up later" >&2; exit 1; }; '
    'printf "%s\\n" "$t" >"$d/fence"'
)


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
