"""A local record of every run that changed hosts (``up``, ``down``, ``restart``, ``rollback``,
``unlock``, ``weights stage``, the watch's actions; not ``--check``): one JSON object per line in ``history.jsonl`` under the user's state directory
(``$XDG_STATE_HOME/fleet``, else ``~/.local/state/fleet``; ``FLEET_STATE_DIR`` replaces the
whole directory).  ``fleet history`` reads it.

Contract: a record holds the command line as typed (fleet never takes a secret value on it),
the playbook's path and sha256, the deployment, the hosts, each unit's (or restart group's)
outcome, the duration and the exit status -- never a secret value.  The file is created 0600
and appended under ``flock``, one ``write`` per record, so concurrent runs never interleave
lines.  A line that is not a record is an error naming ``file:line``.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

from launcher.errors import InputError
from launcher.model import Source

FILE = "history.jsonl"


@dataclass(frozen=True, slots=True, kw_only=True)
class Outcome:
    host: str
    unit: str  # a unit, or a restart group for restart/rollback
    outcome: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Run:
    started: str  # UTC, ISO 8601
    command: tuple[str, ...]
    user: str
    deployment: str
    playbook: str  # as given: a file or a recipe id
    playbook_sha256: str | None  # of the file's bytes; None for a recipe id
    hosts: tuple[str, ...]
    outcomes: tuple[Outcome, ...]
    duration_s: float
    exit_code: int


def state_dir() -> Path:
    if os.environ.get("FLEET_STATE_DIR"):
        return Path(os.environ["FLEET_STATE_DIR"])
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "fleet"


def path() -> Path:
    return state_dir() / FILE


def digest(playbook: str | os.PathLike[str]) -> str | None:
    """The sha256 of a playbook file (None when ``playbook`` is a recipe id, not a file)."""
    p = Path(playbook)
    return hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else None


def started_now() -> tuple[str, float]:
    """(the ISO UTC time, a monotonic clock reading) a run started at."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), time.monotonic()


def record(run: Run) -> Path:
    """Appends ``run`` (one line); returns the file."""
    where = path()
    where.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    line = (json.dumps(asdict(run), sort_keys=True) + "\n").encode()
    fd = os.open(where, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.write(fd, line)
    finally:
        os.close(fd)
    return where


def read() -> list[Run]:
    """Every recorded run, oldest first ([] when nothing was recorded yet)."""
    where = path()
    try:
        text = where.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    runs = []
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
            data["command"] = tuple(data["command"])
            data["hosts"] = tuple(data["hosts"])
            data["outcomes"] = tuple(Outcome(**o) for o in data["outcomes"])
            runs.append(Run(**data))
        except KeyError as err:
            raise InputError(Source(path=str(where), line=n, col=1), f"not a fleet history record (no {err})") from None
        except (ValueError, TypeError) as err:
            raise InputError(Source(path=str(where), line=n, col=1), f"not a fleet history record ({err})") from None
    return runs


def counts(run: Run) -> dict[str, int]:
    """Outcome -> how many units (or groups) ended so, in first-seen order."""
    out: dict[str, int] = {}
    for o in run.outcomes:
        out[o.outcome] = out.get(o.outcome, 0) + 1
    return out


def of(outcomes: Sequence[tuple[str, str, str]]) -> tuple[Outcome, ...]:
    return tuple(Outcome(host=h, unit=u, outcome=o) for h, u, o in outcomes)
