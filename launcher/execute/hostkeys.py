"""Strict SSH host-key checking with OpenSSH's known_hosts semantics.

Which files a host's key is checked against (a :class:`Trust`): its ``UserKnownHostsFile``
(default ``~/.ssh/known_hosts`` and ``known_hosts2``) and ``GlobalKnownHostsFile`` (default
``/etc/ssh/ssh_known_hosts`` and ``ssh_known_hosts2``), as OpenSSH takes them from
``ansible_ssh_common_args`` or ssh config, then any ``--known-hosts`` files and fleet's own file
(``~/.config/fleet/known_hosts``, where ``--trust-new-hosts`` records keys).  Lines are read as
OpenSSH reads them: host patterns with ``*``/``?``/``!``, hashed names (``|1|salt|hash``),
``[host]:port`` for ports other than 22, ``@revoked`` and ``@cert-authority`` markers; a line
OpenSSH would skip (unknown key type, bad base64, a hashed name whose salt or hash is not 20
bytes) is skipped, never fatal.

* revoked (``@revoked`` key, or a certificate's CA) → ``HostKeyError``, always
* a host certificate signed by a ``@cert-authority`` key for the host → checked (principals,
  validity, signature; :mod:`launcher.execute.hostcert`): accepted or ``HostKeyError`` with why;
  signed by no CA fleet knows → its plain key is checked, as OpenSSH falls back
* known and equal   → accepted
* changed           → ``HostKeyError`` always, whatever the trust setting
* unknown           → ``HostKeyError`` unless the trust records new keys (``--trust-new-hosts``,
  or ``StrictHostKeyChecking=accept-new|no`` the operator wrote); then recorded, with a log line
"""

from __future__ import annotations

import base64
import binascii
import logging
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from launcher.errors import HostKeyError, UsageError
from launcher.execute.hostcert import CERT_SUFFIX, cert_problem, glob_match, parse_cert
from launcher.execute.sshlib import paramiko

log = logging.getLogger("fleet.execute")

USER_KNOWN_HOSTS = ("~/.ssh/known_hosts", "~/.ssh/known_hosts2")
GLOBAL_KNOWN_HOSTS = ("/etc/ssh/ssh_known_hosts", "/etc/ssh/ssh_known_hosts2")
FLEET_KNOWN_HOSTS = "~/.config/fleet/known_hosts"
_CA, _REVOKED = "@cert-authority", "@revoked"
# StrictHostKeyChecking values: fleet cannot ask, so `ask` (OpenSSH's default) is `yes`.
_STRICT = ("yes", "ask")
_RECORD_NEW = ("accept-new", "no", "off")


def host_key_name(address: str, port: int) -> str:
    """The known_hosts name OpenSSH uses: ``host`` on port 22, else ``[host]:port``."""
    return address if port == 22 else f"[{address}]:{port}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Trust:
    """How one host's key is checked: the files read, in order, and where an unknown key is
    recorded (None: refused).  ``weakened`` is the operator's own non-strict setting, which
    fleet says on every run."""

    files: tuple[Path, ...]
    record_to: Path | None
    weakened: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class _Entry:
    marker: str  # "", _CA or _REVOKED
    names: str  # the host-pattern field as written
    key: paramiko.PKey
    where: str  # file:line


def names_match(field: str, name: str) -> bool:
    """Whether a known_hosts host field (pattern list or hashed name) covers ``name``."""
    if field.startswith("|1|"):
        return _hashed_ok(field) and bool(paramiko.HostKeys.hash_host(name, field) == field)
    matched = False
    for pattern in field.split(","):
        negated = pattern.startswith("!")
        if glob_match(pattern[1:] if negated else pattern, name):
            if negated:
                return False
            matched = True
    return matched


def _hashed_ok(field: str) -> bool:
    """Whether a hashed host field is ``|1|salt|hash`` with a 20-byte salt and hash, as OpenSSH
    requires (it skips any other; paramiko asserts on the salt's length)."""
    parts = field.split("|")
    if len(parts) != 4:
        return False
    try:
        return all(len(base64.b64decode(p, validate=True)) == 20 for p in parts[2:])
    except binascii.Error:
        return False


def _parse(path: Path) -> list[_Entry]:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return []
    except OSError as err:
        raise UsageError(f"{path}: cannot read known hosts: {err.strerror}") from None
    entries: list[_Entry] = []
    for lineno, raw in enumerate(text.splitlines(), start=1):
        fields = raw.split()
        if not fields or fields[0].startswith("#"):
            continue
        marker = fields.pop(0) if fields[0].startswith("@") else ""
        where = f"{path}:{lineno}"
        if marker not in ("", _CA, _REVOKED) or len(fields) < 3 or (fields[0].startswith("|") and not _hashed_ok(fields[0])):
            log.debug("%s: skipped (not a known_hosts line OpenSSH reads)", where)
            continue
        try:
            key = paramiko.PKey.from_type_string(fields[1], base64.b64decode(fields[2], validate=True))
        except (ValueError, TypeError, paramiko.SSHException, paramiko.pkey.UnknownKeyType) as err:
            log.debug("%s: skipped (%s)", where, err)  # OpenSSH skips these lines too
            continue
        entries.append(_Entry(marker=marker, names=fields[0], key=key, where=where))
    return entries


class KnownHosts:
    """The operator's known host keys and trust decisions.  Thread-safe; files are read once."""

    def __init__(
        self,
        files: Sequence[str | Path] = (),
        *,
        record_to: str | Path = FLEET_KNOWN_HOSTS,
        trust_new: bool = False,
        user_files: Sequence[str | Path] = (),
        global_files: Sequence[str | Path] = (),
    ) -> None:
        """``files`` (``--known-hosts``) are read for every host after its user and global
        files; ``user_files``/``global_files`` are the defaults a host's own
        ``UserKnownHostsFile``/``GlobalKnownHostsFile`` replace; ``record_to`` is read last and
        is where ``trust_new`` records unknown keys."""
        self.record_to = _path(record_to)
        self.trust_new = trust_new
        self._extra = tuple(_path(f) for f in files)
        self._user = tuple(_path(f) for f in user_files)
        self._global = tuple(_path(f) for f in global_files)
        self._loaded: dict[Path, list[_Entry]] = {}
        self._lock = threading.Lock()

    @classmethod
    def for_operator(cls, extra: Sequence[str] = (), *, trust_new: bool = False) -> KnownHosts:
        """OpenSSH's default files + ``extra`` (each must exist) + fleet's own file."""
        for path in extra:
            if not Path(path).is_file():
                raise UsageError(f"--known-hosts {path}: no such file")
        return cls(extra, trust_new=trust_new, user_files=USER_KNOWN_HOSTS, global_files=GLOBAL_KNOWN_HOSTS)

    def trust(
        self,
        user_files: Sequence[str] | None = None,
        global_files: Sequence[str] | None = None,
        strict: str | None = None,
        said_in: str = "",
    ) -> Trust:
        """The trust for a host whose ssh settings (``said_in``) give these values (None: not
        set).  A file list of ``none`` reads no file.  ValueError for a StrictHostKeyChecking
        value OpenSSH does not know."""
        users = self._user if user_files is None else tuple(_path(f) for f in user_files if f.lower() != "none")
        globals_ = self._global if global_files is None else tuple(_path(f) for f in global_files if f.lower() != "none")
        files = tuple(dict.fromkeys((*users, *globals_, *self._extra, self.record_to)))
        value = (strict or "yes").lower()
        if value in _STRICT:
            return Trust(files=files, record_to=self.record_to if self.trust_new else None)
        if value not in _RECORD_NEW:
            raise ValueError(f"StrictHostKeyChecking={strict}: expected yes, ask, accept-new or no")
        # As OpenSSH: new keys go to the first user file.  A changed key is still refused.
        return Trust(files=files, record_to=users[0] if users else self.record_to,
                     weakened=f"StrictHostKeyChecking={strict} ({said_in}): new host keys are "
                     "recorded without verification; changed keys are still refused")  # fmt: skip

    def _entries(self, trust: Trust, name: str) -> list[_Entry]:
        out: list[_Entry] = []
        for path in trust.files:
            if path not in self._loaded:
                self._loaded[path] = _parse(path)
            out += (e for e in self._loaded[path] if names_match(e.names, name))
        return out

    def preference(self, name: str, trust: Trust) -> tuple[frozenset[str], bool]:
        """The key types known for ``name`` and whether a ``@cert-authority`` covers it: the
        host key algorithms to ask for first, as OpenSSH orders them."""
        with self._lock:
            entries = self._entries(trust, name)
        known = frozenset(e.key.get_name() for e in entries if not e.marker)
        return known, any(e.marker == _CA for e in entries)

    def keys_for(self, name: str, trust: Trust) -> dict[str, paramiko.PKey]:
        """The plain keys known for ``name`` (not revoked), by key type; empty if unknown."""
        with self._lock:
            entries = self._entries(trust, name)
        revoked = [e.key for e in entries if e.marker == _REVOKED]
        return {e.key.get_name(): e.key for e in entries if not e.marker and e.key not in revoked}

    def check(self, host: str, name: str, hostname: str, key: paramiko.PKey, trust: Trust) -> None:
        """Accept ``key`` offered by ``host`` (known as ``name``, reached as ``hostname``) or
        raise :class:`HostKeyError` (see the module docstring for the rules)."""
        with self._lock:
            entries = self._entries(trust, name)
            self._refuse_revoked(host, name, key, entries)
            blob = key.public_blob
            if blob is not None and blob.key_type.endswith(CERT_SUFFIX):
                try:
                    cert = parse_cert(blob.key_blob)
                except ValueError as err:
                    raise HostKeyError(host, f"certificate of {name} unreadable: {err}; refused") from None
                ca = next((e for e in entries if e.marker == _CA and e.key.asbytes() == cert.signature_key), None)
                if ca is not None:
                    self._refuse_revoked(host, name, ca.key, entries, "its CA ")
                    problem = cert_problem(cert, hostname, ca.key)
                    if problem is not None:
                        raise HostKeyError(
                            host, f"certificate refused: {name} {blob.key_type} id {cert.key_id!r} "
                            f"(CA {ca.key.fingerprint} at {ca.where}): {problem}",
                        )  # fmt: skip
                    return
            known = [e.key for e in entries if not e.marker]
            if key in known:
                return
            if known:
                same_type = [k for k in known if k.get_name() == key.get_name()]
                raise self.changed(host, name, key, (same_type or known)[0], trust)
            if trust.record_to is None:
                raise HostKeyError(
                    host,
                    f"unknown: {name} {key.get_name()} {key.fingerprint} is not in "
                    f"{self._where(trust)}; verify it and add it, or pass --trust-new-hosts to "
                    "record it",
                )
            self._record(trust.record_to, name, key)
        log.warning(
            "%s: recorded new host key %s %s for %s in %s",
            host, key.get_name(), key.fingerprint, name, trust.record_to,
        )

    def _refuse_revoked(self, host: str, name: str, key: paramiko.PKey, entries: list[_Entry], whose: str = "") -> None:
        revoked = next((e for e in entries if e.marker == _REVOKED and e.key == key), None)
        if revoked is not None:
            raise HostKeyError(
                host, f"revoked: {name} {whose}{key.get_name()} {key.fingerprint} is marked @revoked at "
                f"{revoked.where}; refused",
            )  # fmt: skip

    def _record(self, path: Path, name: str, key: paramiko.PKey) -> None:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        with os.fdopen(fd, "a") as out:
            out.write(f"{name} {key.get_name()} {key.get_base64()}\n")
        self._loaded.setdefault(path, []).append(_Entry(marker="", names=name, key=key, where=f"{path} (recorded now)"))

    def _where(self, trust: Trust) -> str:
        home = str(Path.home())
        return ", ".join(
            "~" + str(p)[len(home) :] if str(p).startswith(home + "/") else str(p)
            for p in trust.files
            if p == self.record_to or p.is_file()
        )

    def changed(
        self, host: str, name: str, got: paramiko.PKey, expected: paramiko.PKey, trust: Trust
    ) -> HostKeyError:
        return HostKeyError(
            host,
            f"changed: {name} expected {expected.get_name()} {expected.fingerprint} "
            f"(from {self._where(trust)}) got {got.get_name()} {got.fingerprint}; refused: "
            "verify the new key out of band and replace the old entry",
        )


def _path(f: str | Path) -> Path:
    return Path(os.path.expanduser(f))


class StrictPolicy(paramiko.MissingHostKeyPolicy):
    """paramiko's hook for the host key: fleet gives paramiko no known keys, so every key the
    server offers comes here and :meth:`KnownHosts.check` decides."""

    def __init__(self, known: KnownHosts, host: str, hostname: str, trust: Trust) -> None:
        self._known = known
        self._host = host
        self._hostname = hostname
        self._trust = trust

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        self._known.check(self._host, hostname, self._hostname, key, self._trust)
