"""The weights manifest (one JSON file per model directory on every host) and the comparison of
a host's copy with the expected manifest.  Pure.

A manifest lists every file of the model with size and sha256 (the same on every host: they
describe the content) and mtime (seconds; this host's own, recorded when the copy was made: the
cheap check compares size and mtime against it, as rsync's quick check does, and only
``--full`` reads every byte).  It is written last, after every file is in place, and removed
before a copy is changed, so a directory with a manifest is a complete copy.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Literal, Mapping

MANIFEST_NAME = "fleet-weights.json"
FORMAT = "fleet-weights/1"
# Never part of a model: the manifest itself, rsync's partial transfers, the hub client's
# local-dir bookkeeping.
SKIP = (MANIFEST_NAME, ".fleet-partial", ".cache")
VIEW_PREFIX = ".fleet-view-"  # a source's resolved view of its symlinked files, for one run

Problem = Literal["missing", "size", "modified", "sha256", "extra"]


@dataclass(frozen=True, slots=True, kw_only=True)
class FileEntry:
    path: str  # relative to the model directory
    size: int
    sha256: str
    mtime: int | None = None  # seconds, of the copy the manifest was made from (None: unknown)
    # "inode:ctime_ns" of that copy when it was hashed: a scan reuses the sha256 only while the
    # file still has this stamp (a write in place changes the ctime, whatever the mtime says)
    stamp: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Manifest:
    model: str  # as the units name it: a repo id or a path
    revision: str
    files: tuple[FileEntry, ...]  # sorted by path

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)

    def by_path(self) -> dict[str, FileEntry]:
        return {f.path: f for f in self.files}

    def same_content(self, other: Manifest) -> bool:
        """Same revision, same files with the same sizes and hashes (mtimes may differ)."""
        return self.content_key() == other.content_key()

    def content_key(self) -> tuple[str, tuple[tuple[str, int, str], ...]]:
        return self.revision, tuple((f.path, f.size, f.sha256) for f in self.files)


@dataclass(frozen=True, slots=True, kw_only=True)
class Listing:
    """What a scan found in one directory: ``files`` path -> (size, mtime); ``sha256`` only
    when the scan hashed."""

    exists: bool
    files: Mapping[str, tuple[int, int]]
    sha256: Mapping[str, str] | None = None
    manifest: Manifest | None = None
    manifest_error: str | None = None  # unreadable or malformed manifest
    free: int = 0
    fs: int = 0
    stamps: Mapping[str, str] | None = None  # path -> "inode:ctime_ns"
    links: tuple[str, ...] = ()  # files reached through a symlink
    broken: tuple[str, ...] = ()  # symlinks that lead nowhere (not files)


@dataclass(frozen=True, slots=True, kw_only=True)
class Mismatch:
    path: str
    problem: Problem
    detail: str = ""

    def line(self) -> str:
        return f"{self.path}: {self.problem}" + (f" ({self.detail})" if self.detail else "")


def content_revision(files: tuple[FileEntry, ...]) -> str:
    """A revision for a source with none given: the hash of its file list, so every copy of the
    same content names the same revision."""
    h = hashlib.sha256()
    for f in files:
        h.update(f"{f.path}\0{f.size}\0{f.sha256}\n".encode())
    return "sha256:" + h.hexdigest()[:16]


def to_json(m: Manifest) -> str:
    return json.dumps({
        "format": FORMAT, "model": m.model, "revision": m.revision,
        "files": [{"path": f.path, "size": f.size, "sha256": f.sha256,
                   **({"mtime": f.mtime} if f.mtime is not None else {}),
                   **({"stamp": f.stamp} if f.stamp is not None else {})} for f in m.files],
    }, indent=1, sort_keys=True) + "\n"  # fmt: skip


def from_json(doc: object) -> Manifest:
    """A manifest from its parsed JSON; ``ValueError`` naming what is wrong."""
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ValueError(f"not a {FORMAT} manifest")
    try:
        files = tuple(sorted((FileEntry(path=str(e["path"]), size=int(e["size"]), sha256=str(e["sha256"]),
                                        mtime=int(e["mtime"]) if "mtime" in e else None,
                                        stamp=str(e["stamp"]) if "stamp" in e else None)
                              for e in doc["files"]), key=lambda f: f.path))  # fmt: skip
        return Manifest(model=str(doc["model"]), revision=str(doc["revision"]), files=files)
    except (KeyError, TypeError, ValueError) as err:
        raise ValueError(f"malformed manifest: {err}") from None


def from_listing(model: str, revision: str | None, listing: Listing) -> Manifest:
    """The manifest of a hashed listing (``revision`` None: derived from the content)."""
    assert listing.sha256 is not None, "only a hashed listing has a manifest"
    files = tuple(FileEntry(path=p, size=s, sha256=listing.sha256[p], mtime=t, stamp=(listing.stamps or {}).get(p))
                  for p, (s, t) in sorted(listing.files.items()))  # fmt: skip
    return Manifest(model=model, revision=revision or content_revision(files), files=files)


def for_host(expected: Manifest, listing: Listing) -> Manifest:
    """What a host's manifest says once its copy matches ``expected``: the expected content with
    the host's own mtimes."""
    files = tuple(FileEntry(path=f.path, size=f.size, sha256=f.sha256, mtime=listing.files[f.path][1],
                            stamp=(listing.stamps or {}).get(f.path)) for f in expected.files)  # fmt: skip
    return Manifest(model=expected.model, revision=expected.revision, files=files)


def compare(expected: Manifest, listing: Listing) -> tuple[Mismatch, ...]:
    """Every file of the host's copy that differs from ``expected``, in path order.

    A file the scan hashed is judged by its sha256.  Without a hash, a file of the right size is taken as intact when its mtime equals the one
    the host's own manifest recorded for that content (or, with no such record, the expected
    one: rsync keeps the source's mtime)."""
    own = listing.manifest.by_path() if listing.manifest is not None else {}
    out: list[Mismatch] = []
    for f in expected.files:
        have = listing.files.get(f.path)
        if have is None:
            out.append(Mismatch(path=f.path, problem="missing"))
            continue
        size, mtime = have
        if size != f.size:
            out.append(Mismatch(path=f.path, problem="size", detail=f"{size} bytes, expected {f.size}"))
        elif listing.sha256 is not None and f.path in listing.sha256:
            if listing.sha256[f.path] != f.sha256:
                out.append(Mismatch(path=f.path, problem="sha256", detail=f"sha256 {listing.sha256[f.path][:12]}…, "
                                    f"expected {f.sha256[:12]}…"))
        else:
            rec = own.get(f.path)
            ref = rec.mtime if rec is not None and rec.sha256 == f.sha256 and rec.mtime is not None else f.mtime
            if ref is not None and ref != mtime:
                out.append(Mismatch(path=f.path, problem="modified", detail="mtime differs from the manifest's"))
    names = {f.path for f in expected.files}
    out.extend(Mismatch(path=p, problem="extra", detail="not in the source")
               for p in sorted(listing.files) if p not in names)  # fmt: skip
    return tuple(sorted(out, key=lambda m: m.path))


def parse_scan(raw: Mapping[str, object]) -> Listing:
    """One directory of scan_host.py's output."""
    doc = dict(raw)
    files = {str(p): (int(v[0]), int(v[1])) for p, v in dict(doc["files"]).items()}  # type: ignore[call-overload]
    sums = doc.get("sha256")
    manifest, error = None, None
    m = doc.get("manifest")
    if isinstance(m, str):
        error = m.removeprefix("error: ")
    elif m is not None:
        try:
            manifest = from_json(m)
        except ValueError as err:
            error = str(err)
    return Listing(exists=bool(doc["exists"]), files=files,
                   sha256={str(k): str(v) for k, v in dict(sums).items()} if isinstance(sums, dict) else None,  # fmt: skip
                   stamps={str(k): str(v) for k, v in dict(doc["stamps"]).items()} if isinstance(doc.get("stamps"), dict) else None,  # type: ignore[call-overload]
                   manifest=manifest, manifest_error=error, free=int(doc["free"]), fs=int(doc["fs"]),  # type: ignore[call-overload]
                   links=tuple(str(x) for x in doc.get("links") or ()),  # type: ignore[attr-defined]
                   broken=tuple(str(x) for x in doc.get("broken") or ()))  # type: ignore[attr-defined]
