"""How fleet runs remote commands: checked, with a deadline, and with the command shown masked
(or by a short label) in errors.  Light on purpose (the transport types are for annotations
only): the runtimes' builders use it, and the planner imports the runtimes.

Contract: a non-zero exit becomes a :class:`RemoteError` naming the host, the label/command with
every secret value masked, the exit status and the last lines of stderr (stdout when stderr is
empty).  A transport is used by one thread at a time.
"""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING, Iterable, Sequence

from launcher.errors import RemoteError
from launcher.output import mask

if TYPE_CHECKING:
    from launcher.execute.transport import Result, Transport

TAIL_LINES = 20
STEP_TIMEOUT_S = 120.0  # ordinary steps (inspect, write, stop); pulls and health have their own


def sh(script: str, *args: str) -> tuple[str, ...]:
    """``sh -c SCRIPT sh ARGS...``: a fixed script with data passed as positional parameters,
    so no value is ever spliced into shell text."""
    return ("sh", "-c", script, "sh", *args)


def tail(text: str, lines: int = TAIL_LINES) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def show(argv: Sequence[str], secrets: Iterable[str] = ()) -> str:
    """How a command appears in messages: shell-quoted once, secrets masked."""
    return mask(shlex.join(argv), secrets)


def failure(result: Result, shown: str, secrets: Iterable[str] = ()) -> RemoteError:
    detail = tail(result.stderr_text) or tail(result.stdout_text)
    return RemoteError(result.host, mask(shown, secrets), result.exit_status, mask(detail, secrets))


def check(
    transport: Transport,
    argv: Sequence[str],
    *,
    label: str | None = None,
    secrets: Iterable[str] = (),
    timeout: float = STEP_TIMEOUT_S,
) -> str:
    """Runs ``argv``; returns stdout, or raises :class:`RemoteError` naming ``label`` (a short
    form of a long ``sh -c`` script) or else the command."""
    result = transport.run(argv, timeout=timeout)
    if not result.ok:
        raise failure(result, label if label is not None else show(argv), secrets)
    return result.stdout_text
