"""Errors a user can act on.  Each renders as exactly one line; the CLI maps them to exit codes.

Library code raises these; only ``launcher.cli`` prints them and picks the exit code.
"""

from __future__ import annotations

import enum

from launcher.model import Source


class ExitCode(enum.IntEnum):
    OK = 0
    FAILED = 1  # a remote step failed
    BAD_INPUT = 2  # inventory, recipe, playbook or flag is wrong
    PARTIAL = 3  # some hosts failed, others succeeded
    INTERRUPTED = 130


class FleetError(Exception):
    """Base class: ``str(err)`` is the one line shown to the operator; ``debug`` (may be empty)
    is what only ``--debug`` shows besides it (e.g. the whole remote script of a failed step)."""

    exit_code: ExitCode = ExitCode.FAILED
    debug: str = ""


BRIEF_CHARS = 120


def brief(command: str) -> str:
    """``command`` as it fits in a one-line error: a multi-line script by its first line (its
    header comment says what it does), anything past :data:`BRIEF_CHARS` cut; a cut is marked
    `` … (N lines; --debug shows it)`` and the whole text belongs in ``FleetError.debug``."""
    lines = command.splitlines() or [""]
    first = lines[0]
    if len(lines) == 1 and len(first) <= BRIEF_CHARS:
        return command
    return f"{first[:BRIEF_CHARS].rstrip()} … ({len(lines)} lines; --debug shows it)"


_KEY_PATH_CHARS = 200


class InputError(FleetError):
    """Bad input at a known position: ``path:line:col: key/path: message``."""

    exit_code = ExitCode.BAD_INPUT

    def __init__(self, source: Source | None, message: str, key_path: str = "") -> None:
        self.source = source
        self.key_path = key_path
        self.message = message
        parts = []
        if source is not None:
            parts.append(str(source))
        if key_path:  # a hostile name can be megabytes long: the line stays readable
            parts.append(key_path if len(key_path) <= _KEY_PATH_CHARS else f"{key_path[:_KEY_PATH_CHARS]}...")
        parts.append(message)
        super().__init__(": ".join(parts))


class UsageError(FleetError):
    """A bad command-line flag or argument (no file position)."""

    exit_code = ExitCode.BAD_INPUT


class PlanError(InputError):
    """The inputs load but cannot be placed (fit, ranks, ports, constraints)."""


class RemoteError(FleetError):
    """A command on a host failed: host, masked command, exit code, last stderr lines."""

    def __init__(self, host: str, command: str, exit_status: int | None, detail: str) -> None:
        self.host = host
        self.command = command
        self.exit_status = exit_status
        self.detail = detail
        code = "no exit status" if exit_status is None else f"exit {exit_status}"
        tail = detail.strip().splitlines()[-1] if detail.strip() else ""
        shown = brief(command)
        if shown != command:
            self.debug = f"{host}: the whole command:\n{command}"
        super().__init__(f"{host}: {shown}: {code}" + (f": {tail}" if tail else ""))


class UnreachableError(FleetError):
    """A host could not be reached or did not answer in time."""

    def __init__(self, host: str, reason: str, *, debug: str = "") -> None:
        self.host = host
        self.reason = reason
        self.debug = debug
        super().__init__(f"{host}: unreachable: {reason}")


class HostKeyError(FleetError):
    """A host's SSH key is unknown or changed: refused before anything runs."""

    exit_code = ExitCode.BAD_INPUT

    def __init__(self, host: str, reason: str) -> None:
        self.host = host
        super().__init__(f"{host}: host key {reason}")


class NotServingError(FleetError):
    """A deployment that is not healthy, or whose endpoint does not answer, was asked to serve
    a benchmark: refused before any request is sent."""

    exit_code = ExitCode.BAD_INPUT
