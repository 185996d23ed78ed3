"""The per-unit record fleet keeps on each host, ``<unit dir>/manifest.json``: what runs there
(render hash, recipe, image), which generation, who deployed it when, and the files it owns.

Contract: one line of JSON with sorted keys; :func:`parse` accepts exactly what :func:`dumps`
writes and returns None for anything else (a hand-edited or truncated manifest counts as no
manifest, so the next ``up`` redeploys that unit rather than trusting it).  ``secrets_digest``
is optional: manifests written before it existed, and units without secrets, have none.

The secrets digest is a keyed hash (HMAC-SHA256 under a random per-install salt kept beside it)
of the unit's secrets file: it tells whether the values changed without storing them, and the
salt keeps equal values on two units or hosts from having equal digests.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from dataclasses import asdict, dataclass, fields
from typing import Any

from launcher.model import Runtime

MANIFEST = "manifest.json"


@dataclass(frozen=True, slots=True, kw_only=True)
class Manifest:
    deployment: str
    unit: str
    host: str
    group: str
    role: str
    rank: int
    runtime: Runtime
    render_hash: str
    recipe: str
    image: str | None
    generation: int
    deployed_by: str
    deployed_at: str  # UTC, ISO 8601
    files: tuple[str, ...]  # every path this unit owns on the host (secrets.env included)
    secrets_digest: str | None = None  # "hmac-sha256:<salt hex>:<digest hex>" of the secrets file


_OPTIONAL = frozenset({"secrets_digest"})
_DIGEST = "hmac-sha256"


def dumps(m: Manifest) -> str:
    raw = {k: v for k, v in asdict(m).items() if not (k in _OPTIONAL and v is None)}
    return json.dumps(raw, sort_keys=True, separators=(",", ":")) + "\n"


def secrets_digest(content: bytes, salt: bytes | None = None) -> str:
    """The keyed hash of a secrets file (a fresh random salt unless given)."""
    key = os.urandom(16) if salt is None else salt
    return f"{_DIGEST}:{key.hex()}:{hmac.new(key, content, hashlib.sha256).hexdigest()}"


def same_secrets(digest: str, content: bytes) -> bool:
    """Whether ``content`` is what ``digest`` was made from (an unreadable digest: no)."""
    kind, _, rest = digest.partition(":")
    salt, _, _ = rest.partition(":")
    try:
        key = bytes.fromhex(salt)
    except ValueError:
        return False
    return kind == _DIGEST and hmac.compare_digest(secrets_digest(content, key), digest)


def parse(text: str) -> Manifest | None:
    try:
        raw: Any = json.loads(text)
    except ValueError:
        return None
    names = {f.name for f in fields(Manifest)}
    if not isinstance(raw, dict) or not names - _OPTIONAL <= set(raw) <= names:
        return None
    try:
        raw["files"] = tuple(raw["files"])
        m = Manifest(**raw)
    except TypeError:
        return None
    types_ok = (
        all(isinstance(getattr(m, n), str) for n in ("deployment", "unit", "host", "group", "role", "render_hash"))
        and isinstance(m.rank, int)
        and isinstance(m.generation, int)
        and m.runtime in ("docker", "systemd")
        and all(isinstance(f, str) for f in m.files)
        and (m.secrets_digest is None or isinstance(m.secrets_digest, str))
    )
    return m if types_ok else None
