"""Remote steps as argv lists, whatever the runtime: the health probe, the lost-peer reading of a
failure line, and installing a unit's files with the previous generation kept in
``<unit dir>/prev/`` (liveness, logs and the failure log are the runtime's: ``launcher/runtimes``).

Contract: builders are pure (argv out, no I/O).  What a host needs: a POSIX ``sh`` with
coreutils, ``flock`` (util-linux; see :mod:`launcher.deploy.lock`), what its runtime needs, and
one of ``curl``, ``wget`` or ``python3`` for health probes.
"""

from __future__ import annotations

import base64
import re
from typing import Sequence

from launcher import hostscripts
from launcher.deploy.manifest import MANIFEST
from launcher.remote import sh
from launcher.render import SECRETS_FILE

PREV = "prev"

NO_PROBE_TOOL = 127  # probe exit status when the host has none of curl/wget/python3


# ---------------------------------------------------------------------------------------------
# health

_PROBE = hostscripts.text("http-probe.sh")


def probe_argv(url: str, timeout_s: int = 5) -> tuple[str, ...]:
    """An HTTP GET from the host itself; exit 0 on a 2xx answer."""
    return sh(_PROBE, url, str(timeout_s))


# Failure lines that only say a peer rank went away: the rank that logs one died of another's
# failure.  The stand-in's two lines (rank 0 losing a rank, a rank losing rank 0); Gloo's pair.cc
# "Connection closed by peer [ip]:port" / "Read error [ip]:port: Connection reset by peer"; NCCL's
# ncclRemoteError ("... a remote process exiting prematurely"); torch's TCPStore ("Connection was
# likely closed. Did the remote server shutdown or crash?").
_PEER_LOST = re.compile(
    r"process group is broken|transport/tcp/pair\.cc:\d+\].*(?:closed|reset) by peer|ncclRemoteError"
    r"|remote process exit|Did the remote server shutdown or crash"
)


def peer_lost(line: str) -> bool:
    """Whether a failure line (``Runtime.failure_lines``) only reports a lost peer rank."""
    return _PEER_LOST.search(line) is not None


# ---------------------------------------------------------------------------------------------
# files

_ROTATE = hostscripts.text("rotate-prev.sh")
_REMOVE = 'for f in "$@"; do rm -f "$f" || exit 1; done'


def rotate_argv(unit_dir: str, old_files: Sequence[str]) -> tuple[str, ...]:
    """Copies the current generation's files (never the secrets file) and manifest into
    ``<unit dir>/prev/<absolute path>``, replacing the generation kept there before."""
    keep = [f for f in old_files if not f.endswith("/" + SECRETS_FILE)]
    return sh(_ROTATE, unit_dir, *keep)


def remove_argv(paths: Sequence[str]) -> tuple[str, ...]:
    return sh(_REMOVE, *paths)


def manifest_path(unit_dir: str) -> str:
    return f"{unit_dir}/{MANIFEST}"


_READ_MANIFESTS = 'for f in "$1"/*/manifest.json; do [ -f "$f" ] && { printf "\\n"; cat "$f"; }; done; true'


def read_manifests_argv(deployment_dir: str) -> tuple[str, ...]:
    """Every unit manifest of one deployment on the host, one JSON document per line."""
    return sh(_READ_MANIFESTS, deployment_dir)


_HASHES = 'for f in "$@"; do if [ -f "$f" ]; then sha256sum "$f"; else echo "- $f"; fi; done'


def hashes_argv(paths: Sequence[str]) -> tuple[str, ...]:
    """``sha256  path`` per existing file, ``- path`` per missing one."""
    return sh(_HASHES, *paths)


def parse_hashes(out: str) -> dict[str, str | None]:
    found: dict[str, str | None] = {}
    for line in out.splitlines():
        digest, _, path = line.partition(" ")
        if path:
            found[path.lstrip(" *")] = None if digest == "-" else digest
    return found


_READ = 'for f in "$@"; do if [ -f "$f" ]; then printf "%s " "$(base64 -w0 < "$f")"; else printf "- "; fi; printf "%s\\n" "$f"; done'


def read_files_argv(paths: Sequence[str]) -> tuple[str, ...]:
    """Each file's content as ``<base64> <path>`` (``- <path>`` when absent), one per line."""
    return sh(_READ, *paths)


def parse_files(out: str) -> dict[str, bytes | None]:
    found: dict[str, bytes | None] = {}
    for line in out.splitlines():
        data, _, path = line.partition(" ")
        if path:
            found[path] = None if data == "-" else base64.b64decode(data)
    return found
