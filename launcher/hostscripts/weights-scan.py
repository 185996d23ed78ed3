# Weights scan (launcher/weights/stage.py scan_argv), standard library only: python3 -c <this>
# '{"dirs": [...], "hash": bool, "reuse": bool, "manifest": NAME, "skip": [...],
# "skip_prefix": [...]}'.  Runs on hosts
# and, for a directory source, on the control host.  Prints per dir as JSON: exists, files
# {rel: [size, mtime_s]}, sha256 {rel: hex} (hash only), manifest (its JSON, "error: ..." if
# unreadable, or null), free (bytes free on its filesystem, nearest existing ancestor), fs (that
# filesystem's device id), links (files reached through a symlink: read through it), broken
# (symlinks that lead nowhere: not files).  Symlinked directories are followed (each real
# directory once), stamps {rel: "inode:ctime_ns"}.  hash_only (a list): hash only those files.
# With reuse (a source dir), files whose size and mtime equal what the
# dir's own manifest records take its sha256 -- only with the same stamp too (the file was not
# written since it was hashed): hashing hundreds of GB each run would cost more
# than the copy; hosts being verified always hash.
from __future__ import annotations

import hashlib
import json
import os
import sys
from typing import Any


def nearest(path: str) -> str:
    while not os.path.exists(path):
        path = os.path.dirname(path) or "/"
    return path


def sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            block = f.read(1 << 20)
            if not block:
                return h.hexdigest()
            h.update(block)


def skipped(rel: str, opts: dict[str, Any]) -> bool:
    return rel in opts["skip"] or rel.startswith(tuple(opts.get("skip_prefix", ())))


def scan(d: str, opts: dict[str, Any]) -> dict[str, Any]:
    base = nearest(d)
    vfs = os.statvfs(base)
    files: dict[str, list[int]] = {}
    out: dict[str, Any] = {"exists": os.path.isdir(d), "files": files, "manifest": None,
                           "free": vfs.f_bavail * vfs.f_frsize, "fs": os.stat(base).st_dev}
    if not out["exists"]:
        return out
    mpath = os.path.join(d, opts["manifest"])
    if os.path.isfile(mpath):
        try:
            with open(mpath) as f:
                out["manifest"] = json.load(f)
        except (OSError, ValueError) as err:
            out["manifest"] = "error: %s" % err
    known: dict[str, tuple[int, int | None, str | None, str]] = {}
    if opts.get("reuse") and isinstance(out["manifest"], dict):
        for e in out["manifest"].get("files", ()):
            known[e["path"]] = (e["size"], e.get("mtime"), e.get("stamp"), e["sha256"])
    only = set(opts["hash_only"]) if opts.get("hash_only") is not None else None
    stamps: dict[str, str] = {}
    sums: dict[str, str] = {}
    links: list[str] = []
    broken: list[str] = []
    seen_root = os.path.realpath(d)
    seen = {seen_root}
    for root, dirs, names in os.walk(d, followlinks=True):
        rel_root = os.path.relpath(root, d)
        keep = []
        for x in sorted(dirs):
            real = os.path.realpath(os.path.join(root, x))
            if not skipped(os.path.normpath(os.path.join(rel_root, x)), opts) and real not in seen:
                seen.add(real)
                keep.append(x)
        dirs[:] = keep
        for name in sorted(names):
            rel = os.path.normpath(os.path.join(rel_root, name))
            if skipped(rel, opts):
                continue
            p = os.path.join(root, name)
            try:
                st = os.stat(p)
            except OSError:
                broken.append(rel)
                continue
            if os.path.realpath(p) != os.path.join(seen_root, rel):
                links.append(rel)
            files[rel] = [st.st_size, int(st.st_mtime)]
            # No user-space call sets a file's ctime back: a write in place changes the stamp
            # even when the writer restores the mtime.
            stamps[rel] = stamp = "%d:%d" % (st.st_ino, st.st_ctime_ns)
            if opts["hash"] and (only is None or rel in only):
                k = known.get(rel)
                sums[rel] = k[3] if k and k[:3] == (st.st_size, int(st.st_mtime), stamp) else sha256(p)
    if opts["hash"]:
        out["sha256"] = sums
    out["stamps"] = stamps
    out["links"], out["broken"] = links, broken
    return out


def main() -> None:
    opts = json.loads(sys.argv[1])
    json.dump({d: scan(d, opts) for d in opts["dirs"]}, sys.stdout)


if __name__ == "__main__":
    main()
