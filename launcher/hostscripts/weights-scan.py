# Weights scan (launcher/weights/stage.py scan_argv), standard library only: python3 -c <this>
# '{"dirs": [...], "hash": bool, "reuse": bool, "manifest": NAME, "skip": [...]}'.  Runs on hosts
# and, for a directory source, on the control host.  Prints per dir as JSON: exists, files
# {rel: [size, mtime_s]}, sha256 {rel: hex} (hash only), manifest (its JSON, "error: ..." if
# unreadable, or null), free (bytes free on its filesystem, nearest existing ancestor), fs (that
# filesystem's device id).  With reuse (a source dir), files whose size and mtime equal what the
# dir's own manifest records take its sha256: hashing hundreds of GB each run would cost more
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
    known: dict[str, tuple[int, int | None, str]] = {}
    if opts.get("reuse") and isinstance(out["manifest"], dict):
        for e in out["manifest"].get("files", ()):
            known[e["path"]] = (e["size"], e.get("mtime"), e["sha256"])
    sums: dict[str, str] = {}
    for root, dirs, names in os.walk(d):
        rel_root = os.path.relpath(root, d)
        dirs[:] = sorted(x for x in dirs if os.path.normpath(os.path.join(rel_root, x)) not in opts["skip"])
        for name in sorted(names):
            rel = os.path.normpath(os.path.join(rel_root, name))
            if rel in opts["skip"]:
                continue
            p = os.path.join(root, name)
            st = os.stat(p)
            files[rel] = [st.st_size, int(st.st_mtime)]
            if opts["hash"]:
                k = known.get(rel)
                sums[rel] = k[2] if k and k[:2] == (st.st_size, int(st.st_mtime)) else sha256(p)
    if opts["hash"]:
        out["sha256"] = sums
    return out


def main() -> None:
    opts = json.loads(sys.argv[1])
    json.dump({d: scan(d, opts) for d in opts["dirs"]}, sys.stdout)


if __name__ == "__main__":
    main()
