"""The execution contract every transport (SSH, local, fake) implements.

``run`` takes an argv (or a :class:`Command`) and quotes it exactly once, at the transport's
edge.  Non-zero exits come back as a :class:`Result` unless the caller passes ``check=True``;
then they raise :class:`launcher.errors.RemoteError` with the masked command.  A command that
outlives its timeout always raises :class:`CommandTimeout` (there is no exit status to return),
a lost connection :class:`launcher.errors.UnreachableError`.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from typing import Mapping, Protocol, Sequence

from launcher import hostscripts
from launcher.errors import RemoteError
from launcher.execute.command import Command, Token

STDERR_TAIL_LINES = 5

_PUT_SCRIPT = hostscripts.text("put.sh")  # the atomic write; its header says how
PUT_TEMP_PREFIX = ".fleet-put."


@dataclass(frozen=True, slots=True, kw_only=True)
class Result:
    """What one command did on one host.  ``command`` is the masked shell text."""

    host: str
    command: str
    exit_status: int  # -1: the command died of a signal (SSH sends no exit status then)
    stdout: bytes
    stderr: bytes

    @property
    def ok(self) -> bool:
        return self.exit_status == 0

    @property
    def stdout_text(self) -> str:
        return self.stdout.decode("utf-8", "replace")

    @property
    def stderr_text(self) -> str:
        return self.stderr.decode("utf-8", "replace")

    def check(self) -> Result:
        """Return self if the command succeeded, else raise :class:`RemoteError`."""
        if not self.ok:
            tail = "\n".join(self.stderr_text.strip().splitlines()[-STDERR_TAIL_LINES:])
            raise RemoteError(self.host, self.command, self.exit_status, tail)
        return self


class CommandTimeout(RemoteError):
    """A command was still running at its deadline; its channel/process was closed."""

    def __init__(self, host: str, command: str, timeout: float) -> None:
        self.timeout = timeout
        super().__init__(host, command, None, f"timed out after {timeout:g}s")


class Transport(Protocol):
    """One host's execution channel.  Implementations are used by one thread at a time."""

    @property
    def host(self) -> str:
        """The inventory name, used in every error."""
        ...

    def run(
        self,
        argv: Sequence[Token] | Command,
        *,
        timeout: float,
        stdin: bytes | None = None,
        env: Mapping[str, str] | None = None,
        check: bool = False,
    ) -> Result:
        """Run argv (``env`` is prefixed as ``env NAME=VALUE``; never put secrets there)."""
        ...

    def put(self, path: str, data: bytes, mode: int) -> None:
        """Write ``data`` to absolute ``path`` atomically with ``mode``, parents created."""
        ...

    def get(self, path: str) -> bytes:
        """Read a whole file (``RemoteError`` if it cannot)."""
        ...

    def close(self) -> None: ...


def check_put_args(path: str, mode: int) -> None:
    """Contract checks shared by all transports (programming errors, not user input)."""
    if not posixpath.isabs(path) or path.endswith("/"):
        raise ValueError(f"put needs an absolute file path, got {path!r}")
    if not 0 <= mode <= 0o7777:
        raise ValueError(f"bad file mode {mode:o}")


def put_command(path: str, mode: int) -> Command:
    """The remote atomic write of stdin to ``path`` (see ``_PUT_SCRIPT``)."""
    check_put_args(path, mode)
    return Command(argv=("sh", "-c", _PUT_SCRIPT, "fleet-put", path, f"{mode:04o}"))


def get_command(path: str) -> Command:
    return Command(argv=("cat", "--", path))
