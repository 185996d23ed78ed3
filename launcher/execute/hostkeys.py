"""Strict SSH host-key checking: known hosts files in, unknown and changed keys refused.

Known keys come from ``~/.ssh/known_hosts``, fleet's own file (``~/.config/fleet/known_hosts``,
where trusted new keys are recorded) and any ``--known-hosts`` files.  Hashed entries
(``|1|salt|hash``) and ``[host]:port`` entries for non-22 ports work as in OpenSSH.

* known and equal   → accepted
* unknown           → ``HostKeyError`` unless ``trust_new``; then recorded (with a log line)
* changed           → ``HostKeyError`` always, ``trust_new`` or not
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from typing import Sequence

from launcher.execute.sshlib import paramiko

from launcher.errors import HostKeyError, UsageError

log = logging.getLogger("fleet.execute")

SYSTEM_KNOWN_HOSTS = "~/.ssh/known_hosts"
FLEET_KNOWN_HOSTS = "~/.config/fleet/known_hosts"


def host_key_name(address: str, port: int) -> str:
    """The known_hosts name OpenSSH uses: ``host`` on port 22, else ``[host]:port``."""
    return address if port == 22 else f"[{address}]:{port}"


class KnownHosts:
    """The operator's known host keys and the trust-new decision.  Thread-safe."""

    def __init__(
        self,
        files: Sequence[str | Path] = (),
        *,
        record_to: str | Path = FLEET_KNOWN_HOSTS,
        trust_new: bool = False,
    ) -> None:
        """``files`` are read if they exist; ``record_to`` is read too and is where trusted new
        keys are appended."""
        self.record_to = Path(os.path.expanduser(record_to))
        self.trust_new = trust_new
        paths = [Path(os.path.expanduser(f)) for f in files]
        if self.record_to not in paths:
            paths.append(self.record_to)
        self.files = tuple(paths)
        self._keys = paramiko.HostKeys()
        self._lock = threading.Lock()
        for path in self.files:
            if path.is_file():
                self._keys.load(str(path))

    @classmethod
    def for_operator(cls, extra: Sequence[str] = (), *, trust_new: bool = False) -> KnownHosts:
        """``~/.ssh/known_hosts`` + ``extra`` (each must exist) + fleet's own file."""
        for path in extra:
            if not Path(path).is_file():
                raise UsageError(f"--known-hosts {path}: no such file")
        return cls((SYSTEM_KNOWN_HOSTS, *extra), trust_new=trust_new)

    def keys_for(self, name: str) -> dict[str, paramiko.PKey]:
        """Known keys of ``name`` (``host`` or ``[host]:port``) by key type; empty if unknown."""
        with self._lock:
            found = self._keys.lookup(name)
            return {} if found is None else {t: found[t] for t in found.keys()}

    def _where(self) -> str:
        home = str(Path.home())
        return ", ".join(
            "~" + str(p)[len(home) :] if str(p).startswith(home + "/") else str(p)
            for p in self.files
        )

    def unknown(self, host: str, name: str, key: paramiko.PKey) -> None:
        """Decide on a key offered by a host with no known key: record it or refuse."""
        with self._lock:
            known = self._keys.lookup(name)
            if known is not None:
                # Recorded meanwhile by a concurrent connection to the same address.
                same = known.get(key.get_name())
                if same == key:
                    return
                raise self.changed(host, name, key, same or next(iter(known.values())))
            if not self.trust_new:
                raise HostKeyError(
                    host,
                    f"unknown: {name} {key.get_name()} {key.fingerprint} is not in "
                    f"{self._where()}; verify it and add it, or pass --trust-new-hosts to "
                    "record it",
                )
            self.record_to.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = os.open(self.record_to, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            with os.fdopen(fd, "a") as out:
                out.write(f"{name} {key.get_name()} {key.get_base64()}\n")
            self._keys.add(name, key.get_name(), key)
        log.warning(
            "%s: recorded new host key %s %s for %s in %s",
            host, key.get_name(), key.fingerprint, name, self.record_to,
        )

    def changed(
        self, host: str, name: str, got: paramiko.PKey, expected: paramiko.PKey
    ) -> HostKeyError:
        return HostKeyError(
            host,
            f"changed: {name} expected {expected.get_name()} {expected.fingerprint} "
            f"(from {self._where()}) got {got.get_name()} {got.fingerprint}; refused: "
            "verify the new key out of band and replace the old entry",
        )


class StrictPolicy(paramiko.MissingHostKeyPolicy):
    """paramiko calls this only for hosts without a known key (mismatches raise
    ``BadHostKeyException`` inside ``SSHClient.connect``)."""

    def __init__(self, known: KnownHosts, host: str) -> None:
        self._known = known
        self._host = host

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        self._known.unknown(self._host, hostname, key)
