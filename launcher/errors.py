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
    """Base class: ``str(err)`` is the one line shown to the operator."""

    exit_code: ExitCode = ExitCode.FAILED


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
        if key_path:
            parts.append(key_path)
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
        super().__init__(f"{host}: {command}: {code}" + (f": {tail}" if tail else ""))


class UnreachableError(FleetError):
    """A host could not be reached or did not answer in time."""

    def __init__(self, host: str, reason: str) -> None:
        self.host = host
        self.reason = reason
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
