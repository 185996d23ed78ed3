# A source's resolved view (launcher/weights/stage.py view_argv), standard library only:
# python3 -c <this> SRC VIEW, the files (relative to SRC) as a JSON list on stdin.  Makes VIEW
# hold each file as a regular file: a hard link to what SRC's path leads to (through any
# symlink: a Hugging Face cache snapshot is links into blobs/), a copy where no link can be made
# (another filesystem).  rsync's daemon sends regular files only, never through a link.
import json
import os
import shutil
import sys

src, view = sys.argv[1], sys.argv[2]
for rel in json.load(sys.stdin):
    target = os.path.join(view, rel)
    os.makedirs(os.path.dirname(target), exist_ok=True)
    real = os.path.realpath(os.path.join(src, rel))
    try:
        os.link(real, target)
    except OSError:
        shutil.copy2(real, target)
