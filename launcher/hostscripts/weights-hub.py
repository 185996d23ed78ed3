# Weights from the hub (launcher/weights/hub.py), run on a host by the hub's own client library:
# python3 -c <this> '{"mode": "size"|"download", "repo": ID, "revision": REV, "dir": DIR}'.
# huggingface_hub must be importable by the host's python3.  The token, if any, is in HF_TOKEN
# (set by the caller from a 0600 file, never in argv); HF_ENDPOINT names a mirror if set.
# size: prints {"need": bytes still to download (files not present with their size), "free":
# bytes free at DIR (nearest existing ancestor), "fs": that filesystem's id, "total": the
# revision's size}; nothing written.
# download: snapshot_download into DIR (resumable; files already there are kept), prints {}.
import json
import os
import sys

from huggingface_hub import HfApi, snapshot_download
from huggingface_hub.hf_api import RepoFile

opts = json.loads(sys.argv[1])
if opts["mode"] == "size":
    total = need = 0
    for f in HfApi().list_repo_tree(opts["repo"], revision=opts["revision"], recursive=True):
        if isinstance(f, RepoFile):
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
    json.dump({}, sys.stdout)
