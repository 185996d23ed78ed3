# Weights from the hub (launcher/weights/hub.py), run on a host by the hub's own client library:
# python3 -c <this> '{"mode": "size"|"download", "repo": ID, "revision": REV, "dir": DIR}'.
# huggingface_hub must be importable by the host's python3.  The token, if any, is in HF_TOKEN
# (set by the caller from a 0600 file, never in argv); HF_ENDPOINT names a mirror if set.
# size: prints {"need": bytes still to download (files not present with their size), "free":
# bytes free at DIR (nearest existing ancestor), "fs": that filesystem's id, "total": the
# revision's size}; nothing written.
# download: snapshot_download into DIR (resumable; files already there are kept), then every file
# of the revision's tree is checked against the hub's own hash of it -- an LFS file's sha256, any
# other file's git blob id (sha1 of "blob <size>\0" + content) -- and hashed (sha256) in the same
# read; prints {"files": {path: [size, mtime_s, sha256]}, "bad": [[path, why], ...]}.
import hashlib
import json
import os
import sys

from huggingface_hub import HfApi, snapshot_download
from huggingface_hub.hf_api import RepoFile


def tree(opts):
    return [f for f in HfApi().list_repo_tree(opts["repo"], revision=opts["revision"], recursive=True)
            if isinstance(f, RepoFile)]


def check(path, f):
    """(size, mtime, sha256, why-not-the-hub's or None) of the local copy of hub file ``f``."""
    st = os.stat(path)
    sha256, git = hashlib.sha256(), hashlib.sha1(b"blob %d\0" % st.st_size)
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            sha256.update(block)
            git.update(block)
    why = None
    if st.st_size != f.size:
        why = "%d bytes, the hub says %d" % (st.st_size, f.size)
    elif f.lfs is not None and sha256.hexdigest() != f.lfs.sha256:
        why = "sha256 %s..., the hub says %s..." % (sha256.hexdigest()[:12], f.lfs.sha256[:12])
    elif f.lfs is None and git.hexdigest() != f.blob_id:
        why = "git blob %s..., the hub says %s..." % (git.hexdigest()[:12], f.blob_id[:12])
    return st.st_size, int(st.st_mtime), sha256.hexdigest(), why


opts = json.loads(sys.argv[1])
if opts["mode"] == "size":
    total = need = 0
    for f in tree(opts):
        total += f.size
        p = os.path.join(opts["dir"], f.path)
        if not (os.path.isfile(p) and os.path.getsize(p) == f.size):
            need += f.size
    base = opts["dir"]
    while not os.path.exists(base):
        base = os.path.dirname(base) or "/"
    vfs = os.statvfs(base)
    json.dump({"need": need, "free": vfs.f_bavail * vfs.f_frsize, "fs": os.stat(base).st_dev, "total": total},
              sys.stdout)
else:
    snapshot_download(opts["repo"], revision=opts["revision"], local_dir=opts["dir"])
    files, bad = {}, []
    for f in tree(opts):
        size, mtime, digest, why = check(os.path.join(opts["dir"], f.path), f)
        files[f.path] = [size, mtime, digest]
        if why:
            bad.append([f.path, why])
    json.dump({"files": files, "bad": bad}, sys.stdout)
