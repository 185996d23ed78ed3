"""Secret values, resolved on the control node only: from the playbook's ``secrets`` (env var
of fleet's own process or a file), overridden by ``--secret NAME=@FILE`` / ``--secret
NAME=env:VAR`` / ``--secret NAME`` (env var NAME).

Contract: a value is never taken from the command line itself (it would show in ``ps`` on the
control node); a missing or empty value, a file that is not UTF-8 text or holds a NUL byte is a
:class:`UsageError` naming the secret, never its value.  A file's trailing line ending (LF or
CRLF, as editors leave it) is not part of the value.
"""

from __future__ import annotations

import os
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


def _value(ref: SecretRef, environ: Mapping[str, str]) -> str:
    if ref.from_file is not None:
        try:
            value = Path(ref.from_file).expanduser().read_bytes().decode("utf-8").rstrip("\r\n")
        except OSError as err:
            raise UsageError(f"secret {ref.name}: cannot read {ref.from_file}: {err.strerror}") from None
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
