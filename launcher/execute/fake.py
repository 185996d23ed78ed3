"""A recording transport for ``--check`` runs and unit tests: nothing is executed.

Every ``run`` and ``put`` is appended to :attr:`FakeTransport.calls`; ``run`` answers with the
first :class:`Reply` whose regex matches the masked shell text (default: exit 0, no output);
``put`` stores files so ``get`` can read them back.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from launcher.errors import RemoteError, UnreachableError
from launcher.execute.command import Command, Token
from launcher.execute.transport import CommandTimeout, Result, check_put_args
from launcher.model import Host


@dataclass(frozen=True, slots=True, kw_only=True)
class Reply:
    """A scripted answer: ``match`` is searched (``re.search``) in the masked shell text."""

    match: str
    exit_status: int = 0
    stdout: bytes = b""
    stderr: bytes = b""
    hang: bool = False  # behave like a command that outlives its timeout


@dataclass(frozen=True, slots=True, kw_only=True)
class RunCall:
    command: Command  # secrets stay masked in its str/repr
    stdin: bytes | None
    env: Mapping[str, str] = field(default_factory=dict)
    timeout: float


@dataclass(frozen=True, slots=True, kw_only=True)
class PutCall:
    path: str
    data: bytes
    mode: int


class FakeTransport:
    def __init__(self, host: str = "fake", replies: Sequence[Reply] = ()) -> None:
        self._host = host
        self.replies = tuple(replies)
        self.calls: list[RunCall | PutCall] = []
        self.files: dict[str, tuple[bytes, int]] = {}  # path -> (data, mode)
        self.closed = False

    @property
    def host(self) -> str:
        return self._host

    @property
    def commands(self) -> tuple[str, ...]:
        """The masked shell text of every run, in order."""
        return tuple(c.command.with_env(c.env).masked() for c in self.calls if isinstance(c, RunCall))

    def run(
        self,
        argv: Sequence[Token] | Command,
        *,
        timeout: float,
        stdin: bytes | None = None,
        env: Mapping[str, str] | None = None,
        check: bool = False,
    ) -> Result:
        command = Command.of(argv)
        self.calls.append(RunCall(command=command, stdin=stdin, env=dict(env or {}), timeout=timeout))
        shown = command.with_env(env or {}).masked()
        reply = next((r for r in self.replies if re.search(r.match, shown)), Reply(match=""))
        if reply.hang:
            raise CommandTimeout(self._host, shown, timeout)
        result = Result(host=self._host, command=shown, exit_status=reply.exit_status,
                        stdout=reply.stdout, stderr=reply.stderr)
        return result.check() if check else result

    def put(self, path: str, data: bytes, mode: int) -> None:
        check_put_args(path, mode)
        self.calls.append(PutCall(path=path, data=data, mode=mode))
        self.files[path] = (data, mode)

    def get(self, path: str) -> bytes:
        if path not in self.files:
            raise RemoteError(self._host, f"get {path}", 1, "No such file or directory")
        return self.files[path][0]

    def close(self) -> None:
        self.closed = True


class FakeConnector:
    """Hands out one :class:`FakeTransport` per host name (kept in :attr:`transports`);
    hosts named in ``unreachable`` fail to connect with the given reason."""

    def __init__(
        self, replies: Sequence[Reply] = (), unreachable: Mapping[str, str] | None = None
    ) -> None:
        self.replies = tuple(replies)
        self.unreachable = dict(unreachable or {})
        self.transports: dict[str, FakeTransport] = {}
        self.closed = False

    def connect(self, host: Host) -> FakeTransport:
        if host.name in self.unreachable:
            raise UnreachableError(host.name, self.unreachable[host.name])
        return self.transports.setdefault(host.name, FakeTransport(host.name, self.replies))

    def close(self) -> None:
        self.closed = True
        for transport in self.transports.values():
            transport.close()
