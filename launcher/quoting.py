"""Turning argv tokens and environment values into text, once per target.

Every command is a tuple of tokens until it reaches one of these edges; nothing upstream builds
quotes by hand.

* POSIX shell (``run.sh``, run by ``sh``/``bash``): :func:`shell_join` (``shlex``).
* systemd ``Exec*=`` lines: :func:`systemd_exec`.  Per systemd.service(5) "Command lines" and
  systemd.syntax(7): ``%`` starts a specifier (``%%`` is a literal ``%``), ``$`` starts variable
  expansion (``$$`` is a literal ``$``), and a token is either bare or double-quoted with C-style
  backslash escapes.  Tokens that need it are double-quoted with ``\\\\ \\" \\n \\t \\xNN``
  escapes; non-ASCII text stays as UTF-8.
* Environment files (:func:`env_file`): one ``NAME=<shlex.quote(value)>`` per line.  The same
  text is read identically by a POSIX shell (``set -a; . file``) and by systemd's
  ``EnvironmentFile=`` parser (single quotes are literal there too, adjacent quoted pieces
  concatenate, and nothing is expanded), so one format serves both runtimes and values with
  newlines, quotes, ``$``, ``%`` or backslashes arrive byte-identical.  Docker's own
  ``--env-file`` cannot carry newlines, so it is never used.

Contract: NUL characters and lone surrogates cannot be represented by any target and raise
:class:`QuotingError`; env names must be shell identifiers that neither the sourcing shell nor
the host's docker client reads as its own settings (see ``_HOST_ENV``).
"""

from __future__ import annotations

import re
import shlex
from typing import Iterable, Mapping

from launcher.errors import FleetError

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Names a shell refuses to assign (read-only) or that change how the sourcing shell behaves.
_SHELL_RESERVED = frozenset(
    {"BASHOPTS", "BASH_ARGV0", "BASH_VERSINFO", "EUID", "IFS", "PPID", "SHELLOPTS", "UID", "ENV", "BASH_ENV"}
)
# run.sh `set -a`-sources the unit's env files and then runs the host's docker client, so every
# name there is in that client's environment too.  These would reconfigure the host rather than
# the engine (why, per name or prefix).  Not here, on purpose: PATH (run.sh resolves docker
# before loading the env; a venv PATH is a feature of native units) and HTTP(S)_PROXY/NO_PROXY
# (the engine needs them to fetch weights; the client uses them only for a tcp DOCKER_HOST,
# which is refused).
_HOST_ENV = {
    "HOME": "the docker client reads its config and registry credentials from $HOME/.docker",
    "GODEBUG": "it changes the docker client's Go runtime (e.g. its TLS and certificate checks)",
}
_HOST_ENV_PREFIXES = {
    "DOCKER_": "the docker client's own settings (DOCKER_HOST picks the daemon, DOCKER_CONFIG its "
    "credentials, DOCKER_CERT_PATH/TLS_VERIFY its TLS)",
    "LD_": "the dynamic loader (LD_PRELOAD, LD_AUDIT, LD_LIBRARY_PATH) would load code into the "
    "host's shell and docker client",
}
# Bare systemd tokens: nothing that quoting, escaping, specifiers or the first-token prefixes
# (``@-:+!``) could touch.  ``%`` and ``$`` are handled by doubling before this check.
_SYSTEMD_BARE = re.compile(r"[A-Za-z0-9_/.,=:+@%$-]+")
_C_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\t": "\\t", "\r": "\\r"}


class QuotingError(FleetError):
    """A token or value that no target can carry faithfully."""


def text_problem(text: str) -> str | None:
    """Why ``text`` cannot be an argv token or env value (NUL; lone surrogates), or None."""
    if "\0" in text:
        return "contains a NUL character, which no command line or env file can carry"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "is not valid Unicode text (lone surrogate)"
    return None


def _check_text(what: str, text: str) -> None:
    problem = text_problem(text)
    if problem is not None:
        raise QuotingError(f"{what}: {problem}")


def env_name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a unit's env name (one line), or None."""
    if not _ENV_NAME.fullmatch(name):
        return "must match [A-Za-z_][A-Za-z0-9_]*"
    if name in _SHELL_RESERVED:
        return "is reserved by the shell that loads the env file"
    why = _HOST_ENV.get(name) or next((w for p, w in _HOST_ENV_PREFIXES.items() if name.startswith(p)), None)
    return f"would reconfigure the host, not the engine: {why}" if why else None


def check_env_name(name: str) -> None:
    problem = env_name_problem(name)
    if problem is not None:
        raise QuotingError(f"env name {name!r}: {problem}")


def shell_join(argv: Iterable[str]) -> str:
    tokens = tuple(argv)
    for i, tok in enumerate(tokens):
        _check_text(f"argv[{i}]", tok)
    return shlex.join(tokens)


def systemd_token(token: str) -> str:
    """One token of an ``Exec*=`` line; systemd turns it back into exactly ``token``."""
    escaped = token.replace("%", "%%").replace("$", "$$")
    if _SYSTEMD_BARE.fullmatch(escaped):
        return escaped
    out = []
    for ch in escaped:
        if ch in _C_ESCAPES:
            out.append(_C_ESCAPES[ch])
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def systemd_exec(argv: Iterable[str]) -> str:
    """The value of an ``Exec*=`` setting running exactly ``argv`` (argv[0] an absolute path)."""
    tokens = tuple(argv)
    if not tokens or not tokens[0].startswith("/"):
        raise QuotingError(f"systemd command {tokens[:1]!r}: the program must be an absolute path")
    for i, tok in enumerate(tokens):
        _check_text(f"argv[{i}]", tok)
    return " ".join(systemd_token(t) for t in tokens)


def systemd_value(text: str) -> str:
    """A free-text setting (``Description=``): specifiers escaped, one line."""
    if "\n" in text or "\r" in text:
        raise QuotingError(f"systemd setting {text!r}: must be one line")
    return text.replace("%", "%%")


def env_line(name: str, value: str) -> str:
    check_env_name(name)
    _check_text(f"env {name}", value)
    return f"{name}={shlex.quote(value)}\n"


def env_file(env: Mapping[str, str]) -> str:
    """The text of an env file for both ``. file`` (with ``set -a``) and ``EnvironmentFile=``."""
    return "".join(env_line(k, env[k]) for k in sorted(env))
