"""The per-unit record fleet keeps on each host, ``<unit dir>/manifest.json``: what runs there
(render hash, recipe, image), which generation, who deployed it when, and the files it owns.

Contract: one line of JSON with sorted keys; :func:`parse` accepts exactly what :func:`dumps`
writes and returns None for anything else (a hand-edited or truncated manifest counts as no
manifest, so the next ``up`` redeploys that unit rather than trusting it).

The manifest is world-readable (0644), so it holds nothing derived from a secret: whether secret
values changed is judged from the 0600 secrets file itself (see :mod:`launcher.deploy.survey`).
A manifest without ``playbook`` (older fleet) is read with it empty.  The ``secrets_digest`` older fleet versions wrote is accepted and dropped on reading (and
rewritten away by the next run that holds the deploy lock: :mod:`launcher.deploy.session`).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from typing import Any

from launcher.model import Runtime
from launcher.runtimes import registry as runtimes

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
    # The playbook that owns the deployment here: "<absolute path> sha256:<16 hex of its text>"
    # ("" : written by an older fleet, or from a recipe id); see launcher/deploy/owner.py.
    playbook: str = ""


LEGACY_KEY = "secrets_digest"  # a salted HMAC of the secrets file, written by fleet before 2026-12


def dumps(m: Manifest) -> str:
    return json.dumps(asdict(m), sort_keys=True, separators=(",", ":")) + "\n"


def parse(text: str) -> Manifest | None:
    try:
        raw: Any = json.loads(text)
    except ValueError:
        return None
    names = {f.name for f in fields(Manifest)}
    if not isinstance(raw, dict) or not names - {"playbook"} <= set(raw) - {LEGACY_KEY} <= names:
        return None
    raw.pop(LEGACY_KEY, None)
    try:
        raw["files"] = tuple(raw["files"])
        m = Manifest(**raw)
    except TypeError:
        return None
    types_ok = (
        all(isinstance(getattr(m, n), str)
            for n in ("deployment", "unit", "host", "group", "role", "render_hash", "playbook"))
        and isinstance(m.rank, int)
        and isinstance(m.generation, int)
        and m.runtime in runtimes.names()
        and all(isinstance(f, str) for f in m.files)
    )
    return m if types_ok else None
