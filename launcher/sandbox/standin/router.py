"""vllm-router stand-in, PD mode only: plays ``vllm-router --vllm-pd-disaggregation --kv-connector
nixl --prefill URL --decode URL --host H --port P ...`` (vllm-router 0.1.17) in front of the
stand-in's vLLM prefill and decode, so a vLLM NIXL PD deployment -- and fleet's PD canary
(``launcher/deploy/crossing.py``) -- runs in the sandbox without the real-engine image.

Contract: the real router's, as measured with the 0.1.17 binary in front of the stand-in engines
(tests/sandbox/test_standin_real_router.py runs both routers through the same assertions; the
stand-in engines' side is held to the real engines by tests/real_engine/contract.py):

- Start-up: nothing listens until every worker answers ``GET /health`` 200; after
  ``--worker-startup-timeout-secs`` (600) the router exits 1 with its ``RuntimeError: Timeout ...``
  line.
- ``POST /v1/completions`` | ``/v1/chat/completions`` with ``Content-Type: application/json``
  (else 415, text ``Expected request with `Content-Type: application/json```): one request id
  ``___prefill_addr_<host:port>___decode_addr_<host:port>_<32 hex>`` sent as ``X-Request-Id`` to
  both workers (vLLM names its answer after it: ``cmpl-___prefill_addr_...``).  The prefill gets
  the body with ``max_tokens: 1`` (and ``max_completion_tokens: 1`` when the client set it),
  ``min_tokens: 1``, ``stream: false``, no ``stream_options``, and ``kv_transfer_params:
  {"do_remote_decode": true, "do_remote_prefill": false, "remote_engine_id": null,
  "remote_block_ids": null, "remote_host": null, "remote_port": null}``; the prefill's answered
  ``kv_transfer_params`` go with the client's body to the decode, whose answer -- status,
  content type and body, streamed or not, a failure included -- is the client's.
- A worker that fails otherwise: 500, text ``Transparent proxy request failed: Network error:
  ...`` naming the worker and what failed (a prefill's HTTP error with its status and body; a
  refused connection in reqwest's words).
- ``GET /health``: 200 ``All servers healthy``.  ``GET /readiness`` (fleet's start gate): 200
  ``{"status":"ready","prefill":{"healthy":N,"total":N},"decode":{...}}`` (every worker counted
  healthy: the router listens only once they are, and the stand-in does not re-check them).
  ``GET /workers``: the workers in the shape the
  real one lists them (``load`` 0: per-worker load not played).  ``POST /workers``: 400, the
  real router's JSON refusal (PD mode takes no worker over its API; launcher/watch/homes.py).
- Prefills and decodes are taken round-robin (the real default is cache-aware; with one prefill
  and one decode the same).
- Not played: regular mode, the mooncake connector's bootstrap query, the Prometheus listener
  (nothing of fleet's health or canary reads it), the real router's ``/tokenize`` and
  ``/v1/.../render`` calls to the workers before each request (the stand-in engines answer 404
  there and the real router goes on without them), other paths (404).

Argv goes through argcheck's vllm-router snapshot as the engines' does.  The base stand-in image
carries no ``vllm-router`` program (preflight's programs check is tested against that): a test that
wants this router derives an image adding the shim ``exec python3 -m standin.router "$@"`` (see
:data:`SHIM`).  Stdlib only, like the server.
"""

from __future__ import annotations

import itertools
import json
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from typing import Any, Iterator

from .server import LOG, Fatal, _Server, check_engine_argv

SHIM = '#!/bin/sh\n# Stand-in for vllm-router (PD mode).\nexec python3 -m standin.router "$@"\n'
TIMEOUT_S = 600.0  # one request's bound at each worker (a loaded sandbox is slow, never stuck)
FAILED = "Transparent proxy request failed: Network error: "
NOT_JSON = b"Expected request with `Content-Type: application/json`"
NO_ADD = {"error": "PD router requires specific add_prefill_server or add_decode_server methods",
          "code": "ADD_WORKER_FAILED"}  # fmt: skip


@dataclass(frozen=True, slots=True)
class Args:
    prefill: tuple[str, ...]
    decode: tuple[str, ...]
    host: str
    port: int
    startup_timeout_s: int


def parse(argv: list[str]) -> Args:
    """The PD-mode options this stand-in plays (argcheck has rejected what the real parser would)."""
    prefill: list[str] = []
    decode: list[str] = []
    host, port, pd, timeout = "0.0.0.0", 30000, False, 600
    it = iter(argv)
    for arg in it:
        if arg == "--vllm-pd-disaggregation":
            pd = True
        elif arg == "--prefill":
            prefill.append(next(it))
        elif arg == "--decode":
            decode.append(next(it))
        elif arg == "--host":
            host = next(it)
        elif arg == "--port":
            port = int(next(it))
        elif arg == "--worker-startup-timeout-secs":
            timeout = int(next(it))
    if not pd or not prefill or not decode:
        raise Fatal("the vllm-router stand-in plays PD mode only: --vllm-pd-disaggregation, --prefill and --decode")
    return Args(prefill=tuple(prefill), decode=tuple(decode), host=host, port=port, startup_timeout_s=timeout)


class _Pick:
    def __init__(self, urls: tuple[str, ...]) -> None:
        self._it: Iterator[str] = itertools.cycle(urls)
        self._lock = threading.Lock()

    def __call__(self) -> str:
        with self._lock:
            return next(self._it)


def _hostport(url: str) -> str:
    return urllib.parse.urlsplit(url).netloc


def _cause(err: OSError) -> str:
    """reqwest's chain for a failed connection (measured: a refused one); others in Python's words."""
    if isinstance(err, ConnectionRefusedError) or isinstance(getattr(err, "reason", None), ConnectionRefusedError):
        return "client error (Connect) caused by: tcp connect error caused by: Connection refused (os error 111)"
    return str(getattr(err, "reason", err))


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    prefill: _Pick
    decode: _Pick
    workers: tuple[tuple[str, str], ...]  # (url, worker_type), as GET /workers lists them

    def log_message(self, format: str, *args: Any) -> None:
        return

    def do_GET(self) -> None:
        if self.path == "/health":
            self._reply(200, "text/plain; charset=utf-8", b"All servers healthy")
        elif self.path == "/readiness":
            count = {k: sum(1 for _, t in self.workers if t == k) for k in ("prefill", "decode")}
            ready: dict[str, object] = {"status": "ready", **{k: {"healthy": n, "total": n} for k, n in count.items()}}
            self._reply(200, "application/json", _compact(ready))
        elif self.path == "/workers":
            listed = [{"url": url, "model_id": "unknown", "worker_type": kind, "is_healthy": True, "load": 0,
                       "connection_mode": "Http", "priority": 50, "cost": 1.0,
                       **({"bootstrap_port": None} if kind == "prefill" else {})} for url, kind in self.workers]  # fmt: skip
            count = {k: sum(1 for _, t in self.workers if t == k) for k in ("prefill", "decode")}
            doc = {"workers": listed, "total": len(listed), "stats": {
                "prefill_count": count["prefill"], "decode_count": count["decode"], "regular_count": 0}}  # fmt: skip
            self._reply(200, "application/json", _compact(doc))
        else:
            self._reply(404, "text/plain", b"Not Found")

    def do_POST(self) -> None:
        data = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path == "/workers":
            self._reply(400, "application/json", _compact(NO_ADD))
            return
        if self.path not in ("/v1/completions", "/v1/chat/completions"):
            self._reply(404, "text/plain", b"Not Found")
            return
        if not (self.headers.get("Content-Type") or "").startswith("application/json"):
            self._reply(415, "text/plain; charset=utf-8", NOT_JSON)
            return
        body: dict[str, Any] = json.loads(data or b"{}")
        prefill, decode = self.prefill(), self.decode()
        rid = f"___prefill_addr_{_hostport(prefill)}___decode_addr_{_hostport(decode)}_{uuid.uuid4().hex}"
        first = dict(body, max_tokens=1, min_tokens=1, stream=False, kv_transfer_params={
            "do_remote_decode": True, "do_remote_prefill": False, "remote_engine_id": None,
            "remote_block_ids": None, "remote_host": None, "remote_port": None})  # fmt: skip
        first.pop("stream_options", None)
        if "max_completion_tokens" in first:
            first["max_completion_tokens"] = 1
        url = prefill + self.path
        try:
            with urllib.request.urlopen(_request(url, first, rid), timeout=TIMEOUT_S) as r:
                answer = r.read()
        except urllib.error.HTTPError as err:
            LOG("router_failed", stage="prefill", worker=prefill, status=err.code)
            text = err.read().decode(errors="replace")
            self._failed(f"Prefill server {url} returned {err.code} {err.reason}: {text}")
            return
        except OSError as err:
            LOG("router_failed", stage="prefill", worker=prefill, error=str(err))
            self._failed(f"Prefill request to {prefill} failed: error sending request for url ({url}) "
                         f"caused by: {_cause(err)}")  # fmt: skip
            return
        body["kv_transfer_params"] = json.loads(answer).get("kv_transfer_params")
        url = decode + self.path
        try:
            resp = urllib.request.urlopen(_request(url, body, rid), timeout=TIMEOUT_S)
        except urllib.error.HTTPError as err:  # the decode's own answer, passed through
            LOG("router_failed", stage="decode", worker=decode, status=err.code)
            self._reply(err.code, err.headers.get("Content-Type", "application/json"), err.read())
            return
        except OSError as err:
            LOG("router_failed", stage="decode", worker=decode, error=str(err))
            self._failed(f"Decode request failed to {url}: error sending request for url ({url}) caused by: {_cause(err)}")
            return
        with resp:
            self.send_response(resp.status)
            self.send_header("Content-Type", resp.headers.get("Content-Type", "application/json"))
            self.send_header("Connection", "close")
            self.end_headers()
            self.close_connection = True
            while chunk := resp.read1(65536):  # streams pass through as they come
                self.wfile.write(chunk)
                self.wfile.flush()
        LOG("routed", prefill=prefill, decode=decode, rid=rid)

    def _failed(self, what: str) -> None:
        self._reply(500, "text/plain; charset=utf-8", (FAILED + what).encode())

    def _reply(self, status: int, ctype: str, data: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def _compact(doc: object) -> bytes:
    return json.dumps(doc, separators=(",", ":")).encode()  # serde_json's spelling


def _request(url: str, body: dict[str, Any], rid: str) -> urllib.request.Request:
    return urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                  headers={"Content-Type": "application/json", "X-Request-Id": rid})  # fmt: skip


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/health", timeout=5) as r:
            return bool(r.status == 200)
    except OSError:
        return False


def wait_for_workers(urls: tuple[str, ...], timeout_s: int) -> None:
    """Until every worker answers /health 200, as the real router waits before it listens."""
    deadline = time.monotonic() + timeout_s
    waiting = sorted(set(urls))
    while waiting:
        waiting = [u for u in waiting if not _healthy(u)]
        if waiting and time.monotonic() >= deadline:
            raise Fatal(f"RuntimeError: Timeout {timeout_s}s waiting for hosts {json.dumps(waiting)} to become healthy. "
                        "Please set --router-worker-startup-timeout-secs (vllm_router.launch_server) or "
                        "--worker-startup-timeout-secs (vllm_worker.router) to a larger value")  # fmt: skip
        if waiting:
            time.sleep(1.0)


def main(argv: list[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    LOG.role = "router"
    try:
        check_engine_argv("vllm-router", args, "vllm-router")
        a = parse(args)
        wait_for_workers(a.prefill + a.decode, a.startup_timeout_s)
    except Fatal as err:
        sys.stderr.write(str(err) + "\n")
        sys.exit(err.code)
    workers = tuple((u, "prefill") for u in a.prefill) + tuple((u, "decode") for u in a.decode)
    handler = type("Routed", (Handler,), {"prefill": _Pick(a.prefill), "decode": _Pick(a.decode), "workers": workers})
    server = _Server((a.host, a.port), handler)
    LOG("listening", what="router", bind=a.host, port=a.port, prefill=list(a.prefill), decode=list(a.decode))
    server.serve_forever()


if __name__ == "__main__":
    main()
