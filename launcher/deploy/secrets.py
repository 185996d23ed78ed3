"""Secret values, resolved on the control node only: from the playbook's ``secrets`` (env var
of fleet's own process or a file), overridden by ``--secret NAME=@FILE`` / ``--secret
NAME=env:VAR`` / ``--secret NAME`` (env var NAME).

Contract: a value is never taken from the command line itself (it would show in ``ps`` on the
control node); a missing or empty value, a file that group or others may access (as ssh refuses
a private key), is larger than 1 MiB, not UTF-8 text or holds a NUL byte is a
:class:`UsageError` naming the secret, never its value.  A file's trailing line ending (LF or
CRLF, as editors leave it) is not part of the value.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Mapping, Sequence

from launcher.errors import UsageError
from launcher.model import SecretRef
from launcher.quoting import check_env_name


def parse_flag(flag: str) -> SecretRef:
    """``NAME=@FILE`` | ``NAME=env:VAR`` | ``NAME`` (env var of the same name)."""
    name, sep, source = flag.partition("=")
    try:
        check_env_name(name)
    except Exception:
        raise UsageError(f"--secret {name!r}: not a valid environment variable name") from None
    if not sep:
        return SecretRef(name=name, from_env=name)
    if source.startswith("@") and len(source) > 1:
        return SecretRef(name=name, from_file=source[1:])
    if source.startswith("env:") and len(source) > 4:
        return SecretRef(name=name, from_env=source[4:])
    raise UsageError(
        f"--secret {name}=...: give @FILE or env:VAR (a value on the command line would show in ps)"
    )


def resolve(
    refs: Sequence[SecretRef], flags: Sequence[str], environ: Mapping[str, str] = os.environ
) -> dict[str, str]:
    """NAME -> value for every secret the playbook declares (flags override its sources)."""
    overrides = {r.name: r for r in (parse_flag(f) for f in flags)}
    declared = {r.name for r in refs}
    unknown = sorted(set(overrides) - declared)
    if unknown:
        raise UsageError(f"--secret {unknown[0]}: the playbook declares no such secret")
    values = {}
    for ref in refs:
        ref = overrides.get(ref.name, ref)
        values[ref.name] = _value(ref, environ)
    return values


def resolve_readable(
    refs: Sequence[SecretRef], flags: Sequence[str], environ: Mapping[str, str] = os.environ
) -> tuple[dict[str, str], dict[str, str]]:
    """What ``--check`` resolves: :func:`resolve`'s values of the secrets this control host can
    read, and NAME -> the one-line reason for each it cannot (a check reports their units'
    change as unknown instead of stopping).  A bad ``--secret`` flag is still an error."""
    overrides = {r.name: r for r in (parse_flag(f) for f in flags)}
    unknown_flags = sorted(set(overrides) - {r.name for r in refs})
    if unknown_flags:
        raise UsageError(f"--secret {unknown_flags[0]}: the playbook declares no such secret")
    values: dict[str, str] = {}
    unreadable: dict[str, str] = {}
    for ref in refs:
        try:
            values[ref.name] = _value(overrides.get(ref.name, ref), environ)
        except UsageError as err:
            unreadable[ref.name] = str(err)
    return values, unreadable


def _value(ref: SecretRef, environ: Mapping[str, str]) -> str:
    if ref.from_file is not None:
        try:
            value = _private_file(ref.name, ref.from_file).decode("utf-8").rstrip("\r\n")
        except UnicodeDecodeError as err:
            raise UsageError(
                f"secret {ref.name}: {ref.from_file} is not UTF-8 text (byte {err.start}); a secret is text"
            ) from None
        if "\0" in value:
            raise UsageError(f"secret {ref.name}: {ref.from_file} contains a NUL byte, which no env file can carry")
    elif ref.from_env is not None:
        if ref.from_env not in environ:
            raise UsageError(f"secret {ref.name}: environment variable {ref.from_env} is not set")
        value = environ[ref.from_env]
    else:
        raise UsageError(f"secret {ref.name}: no source (set from_env or from_file, or pass --secret)")
    if not value:
        raise UsageError(f"secret {ref.name}: empty value")
    return value


MAX_SECRET_BYTES = 1 << 20  # a token, key or password; more is not a secret file


def _private_file(name: str, path: str) -> bytes:
    """A secret file's bytes; refused, as ssh refuses a private key, when group or others may
    read or write it (checked on the file opened, so a swapped path cannot slip past)."""
    try:
        with Path(path).expanduser().open("rb") as f:
            mode = os.fstat(f.fileno()).st_mode
            if mode & 0o077:
                raise UsageError(
                    f"secret {name}: {path} is accessible by group or others (mode {stat.S_IMODE(mode):04o}); run "
                    f"chmod 600 {path}, as ssh requires of a private key"
                )
            data = f.read(MAX_SECRET_BYTES + 1)
    except OSError as err:
        raise UsageError(f"secret {name}: cannot read {path}: {err.strerror}") from None
    if len(data) > MAX_SECRET_BYTES:
        raise UsageError(f"secret {name}: {path} is larger than {MAX_SECRET_BYTES} bytes; a secret is not")
    return data
