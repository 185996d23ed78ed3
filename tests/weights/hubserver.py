"""A stand-in for the hub's file API, enough for ``huggingface_hub.snapshot_download`` over plain
HTTP (no xet): ``GET /api/models/<repo>/revision/<rev>`` (repo info: the commit a tag names),
``GET /api/models/<repo>/tree/<rev>`` (the recursive file list: git blob oid, size, and for
large files the LFS sha256), ``HEAD``/``GET /<repo>/resolve/<rev>/<path>`` with the headers the
client reads (``X-Repo-Commit``, ``ETag``, ``X-Linked-Etag``/``X-Linked-Size`` for LFS files,
``Content-Length``; ``Range`` honoured).  Like a gated repo, every request must carry
``Authorization: Bearer <token>`` (401 otherwise); each request's path and whether it carried
the token are recorded.  ``tamper`` (repo -> path -> bytes) makes ``resolve`` serve other bytes
than the tree describes, as a broken mirror or a corrupted cache in between would.  An LFS
file's tree ``oid`` is its pointer file's git blob id, as on the hub."""

from __future__ import annotations

import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Mapping
from urllib.parse import unquote, urlparse

LFS_MIN = 1024  # files this large are LFS files, as the hub stores weights


def _blob_oid(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _tree_oid(data: bytes) -> str:
    """The git blob id the hub lists: of the content, or of the LFS pointer for an LFS file."""
    if len(data) < LFS_MIN:
        return _blob_oid(data)
    pointer = f"version https://git-lfs.github.com/spec/v1\noid sha256:{hashlib.sha256(data).hexdigest()}\nsize {len(data)}\n"
    return _blob_oid(pointer.encode())


class HubServer:
    def __init__(self, repos: Mapping[str, Mapping[str, bytes]], commit: str, token: str, host: str,
                 tamper: Mapping[str, Mapping[str, bytes]] | None = None) -> None:
        self.repos, self.commit, self.token, self.tamper = repos, commit, token, tamper or {}
        self.requests: list[tuple[str, bool]] = []  # (path, had the token)
        self.downloads: list[str] = []  # the path of every GET of a file's content (resolve)
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_HEAD(self) -> None:
                self._serve(body=False)

            def do_GET(self) -> None:
                self._serve(body=True)

            def _serve(self, body: bool) -> None:
                path = unquote(urlparse(self.path).path)
                authorized = self.headers.get("Authorization") == f"Bearer {server.token}"
                server.requests.append((path, authorized))
                if not authorized:
                    return self._send(401, b'{"error": "Invalid credentials"}', {}, body)
                if path.startswith("/api/models/"):
                    return self._api(path[len("/api/models/"):], body)
                org, name, verb, rev, *rest = path.strip("/").split("/")
                files = server.repos.get(f"{org}/{name}")
                data = files.get("/".join(rest)) if files is not None else None
                if verb != "resolve" or rev not in (server.commit, "main") or data is None:
                    return self._send(404, b'{"error": "Entry not found"}', {"X-Error-Code": "EntryNotFound"}, body)
                data = server.tamper.get(f"{org}/{name}", {}).get("/".join(rest), data)
                if body:
                    server.downloads.append(path)
                headers = {"X-Repo-Commit": server.commit, "ETag": f'"{_blob_oid(data)}"'}
                if len(data) >= LFS_MIN:
                    headers |= {"X-Linked-Etag": f'"{hashlib.sha256(data).hexdigest()}"', "X-Linked-Size": str(len(data))}
                start = 0
                rng = self.headers.get("Range", "")
                if rng.startswith("bytes=") and rng[6:].split("-")[0].isdigit():
                    start = int(rng[6:].split("-")[0])
                    headers["Content-Range"] = f"bytes {start}-{len(data) - 1}/{len(data)}"
                self._send(206 if start else 200, data[start:], headers, body)

            def _api(self, rest: str, body: bool) -> None:
                org, name, kind, rev = rest.split("/")[:4]
                files = server.repos.get(f"{org}/{name}")
                if files is None or rev not in (server.commit, "main"):
                    return self._send(404, b'{"error": "Repository or revision not found"}',
                                      {"X-Error-Code": "RevisionNotFound"}, body)
                if kind == "revision":
                    doc: object = {"id": f"{org}/{name}", "sha": server.commit,
                                   "siblings": [{"rfilename": p} for p in sorted(files)]}
                else:
                    doc = [{"type": "file", "oid": _tree_oid(d), "size": len(d), "path": p,
                            **({"lfs": {"oid": hashlib.sha256(d).hexdigest(), "size": len(d), "pointerSize": 134}}
                               if len(d) >= LFS_MIN else {})} for p, d in sorted(files.items())]
                self._send(200, json.dumps(doc).encode(), {"Content-Type": "application/json"}, body)

            def _send(self, status: int, data: bytes, headers: Mapping[str, str], body: bool) -> None:
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if body:
                    self.wfile.write(data)

        self._http = ThreadingHTTPServer((host, 0), Handler)
        self.url = f"http://{host}:{self._http.server_address[1]}"
        self._thread = threading.Thread(target=self._http.serve_forever, daemon=True)

    def __enter__(self) -> HubServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._http.shutdown()
        self._http.server_close()
