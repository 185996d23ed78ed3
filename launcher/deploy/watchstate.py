"""What ``fleet watch`` (:mod:`launcher.watch`) keeps about a group, on the group's own hosts: the times it recreated it and,
once it gave up (a crash loop), why -- so a restarted watch (or one on another control host)
backs off and stops exactly as the last one would have, and ``fleet status`` shows the group
failed.  One JSON line per group in ``/etc/fleet/<deployment>/.watch/<group>.json`` (0644: it
holds no secret), written on every host of the group under the deploy lock.

A "failed" mark holds for the generation it was written about: it names each rank's
``deployed_at`` (from the manifests); once anyone deploys the group again (``fleet up``), the
stamps differ and the mark no longer counts.

It lives in the deploy layer beside the manifest, as an on-host format ``fleet status`` reads
too.  Contract: builders and parsers are pure; a line that does not parse is ignored (a
hand-edited file counts as no history).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from launcher.deploy.manifest import Manifest
from launcher.remote import sh
from launcher.deploy.survey import deployment_dir
from launcher.execute.files import Put

KEEP = 50  # recreation times kept per group: far more than any crash window needs


@dataclass(frozen=True, slots=True, kw_only=True)
class History:
    """What the hosts keep about the watch's work on one group, merged (:func:`merged`)."""

    recreations: tuple[float, ...] = ()  # epoch seconds
    failed: str = ""  # why the watch gave up ("" : it did not, or the group was redeployed since)


@dataclass(frozen=True, slots=True, kw_only=True)
class Record:
    group: str
    recreations: tuple[float, ...] = ()
    failed: str = ""
    failed_for: str = ""  # the stamp (see :func:`stamp`) the failed mark is about


def state_dir(deployment: str) -> str:
    return f"{deployment_dir(deployment)}/.watch"


def state_path(deployment: str, group: str) -> str:
    return f"{state_dir(deployment)}/{group.replace('/', '_')}.json"


_READ = 'for f in "$1"/*.json; do [ -f "$f" ] && { cat "$f"; printf "\\n"; }; done; true'


def read_argv(deployment: str) -> tuple[str, ...]:
    """Every group record of the deployment on the host, one per line (nothing: none)."""
    return sh(_READ, state_dir(deployment))


def parse(out: str) -> dict[str, Record]:
    found: dict[str, Record] = {}
    for line in out.splitlines():
        try:
            raw: Any = json.loads(line)
            rec = Record(group=str(raw["group"]), recreations=tuple(float(t) for t in raw.get("recreations", ())),
                         failed=str(raw.get("failed", "")), failed_for=str(raw.get("failed_for", "")))  # fmt: skip
        except (ValueError, KeyError, TypeError, AttributeError):
            continue
        found[rec.group] = rec
    return found


def stamp(manifests: Iterable[Manifest | None]) -> str:
    """The group's deployment as its ranks' manifests date it."""
    return " ".join(sorted(f"{m.unit}@{m.deployed_at}" for m in manifests if m is not None))


def merged(records: Sequence[Record], current: str) -> History:
    """The history of one group from its hosts' records; a failed mark counts only while
    ``current`` (the group's :func:`stamp` now) is the one it was written about."""
    times = tuple(sorted({t for r in records for t in r.recreations}))
    failed = next((r.failed for r in records if r.failed and r.failed_for == current), "")
    return History(recreations=times, failed=failed)


def put(deployment: str, record: Record) -> Put:
    body = {"group": record.group, "recreations": list(record.recreations[-KEEP:]), "failed": record.failed,
            "failed_for": record.failed_for}  # fmt: skip
    return Put(path=state_path(deployment, record.group), data=(json.dumps(body, sort_keys=True) + "\n").encode(),
               mode=0o644)  # fmt: skip


def recreated(history: History, group: str, now: float) -> Record:
    """The record after one more recreation at ``now`` (``history``: before it, so writing
    this again at the attempt's end moves its time there)."""
    return Record(group=group, recreations=(*history.recreations, now))


def gave_up(history: History, group: str, why: str, current: str) -> Record:
    return Record(group=group, recreations=history.recreations, failed=why, failed_for=current)


def marks(records: Mapping[str, Record], stamps: Mapping[str, str]) -> dict[str, str]:
    """Group -> why the watch gave up on it, for the groups whose mark still holds."""
    return {g: r.failed for g, r in records.items() if r.failed and stamps.get(g) == r.failed_for}
