"""Commands as argv tokens, some of them secret.

A :class:`Secret` prints as ``***`` everywhere (str, repr, logs, error messages); its value is
revealed only by :meth:`Command.shell_text` / :meth:`Command.reveal`, i.e. at the edge where the
command is sent.  Secrets should rather travel in 0600 files (``Transport.put``); masking is the
second line of defence for the rare value that must sit in argv.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import Mapping, Sequence

MASK = "***"
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True, slots=True, repr=False)
class Secret:
    """A value that must never be displayed."""

    value: str

    def __str__(self) -> str:
        return MASK

    def __repr__(self) -> str:
        return f"Secret({MASK})"


Token = str | Secret


@dataclass(frozen=True, slots=True, kw_only=True, repr=False)
class Command:
    """An argv (never empty).  ``str()``/``repr()`` are masked; only :meth:`reveal` and
    :meth:`shell_text` expose secret values."""

    argv: tuple[Token, ...]

    def __post_init__(self) -> None:
        if not self.argv:
            raise ValueError("a command needs at least one argv token")

    @classmethod
    def of(cls, argv: Sequence[Token] | Command) -> Command:
        return argv if isinstance(argv, Command) else cls(argv=tuple(argv))

    @classmethod
    def shell(cls, script: str) -> Command:
        """A shell snippet, run by ``sh -c`` (pipes, redirections, ``&&``)."""
        return cls(argv=("sh", "-c", script))

    def with_env(self, env: Mapping[str, str]) -> Command:
        """Prefix ``env NAME=VALUE …``.  Values are visible in the remote process list: pass
        secrets in files instead."""
        for name in env:
            if not _ENV_NAME.fullmatch(name):
                raise ValueError(f"bad environment variable name {name!r}")
        if not env:
            return self
        return Command(argv=("env", *(f"{k}={v}" for k, v in env.items()), *self.argv))

    def reveal(self) -> tuple[str, ...]:
        """The real argv, secrets included: only for sending."""
        return tuple(t.value if isinstance(t, Secret) else t for t in self.argv)

    def shell_text(self) -> str:
        """The one shell quoting of the real argv (what an SSH exec request carries)."""
        return shlex.join(self.reveal())

    def masked(self) -> str:
        """The shell text with every secret shown as ``***``: safe for logs and errors."""
        return " ".join(MASK if isinstance(t, Secret) else shlex.quote(t) for t in self.argv)

    def __str__(self) -> str:
        return self.masked()

    def __repr__(self) -> str:
        return f"Command({self.masked()!r})"
