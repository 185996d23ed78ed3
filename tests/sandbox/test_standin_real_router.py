"""The stand-in vLLM NIXL prefill and decode behind the REAL vllm-router 0.1.17 in PD mode -- and
the vllm-router stand-in put through the same assertions, so the stand-in router is held to the
real one's contract (launcher/sandbox/standin/router.py's docstring says what was measured).

Loopback only.  Every process runs the command line fleet plans: playbooks/sandbox/real-pd.yaml
(catalog entry deepseek/vllm-pd-tp8-6000d-nvfp4 reshaped to 1P1D, the sandbox's vLLM PD) planned
on the sandbox inventory, its units' argv and env moved to 127.0.0.1 and free ports -- the router
``vllm-router --vllm-pd-disaggregation --kv-connector nixl --prefill URL --decode URL ...`` as
:func:`launcher.engines.router.vllm_pd_argv` renders it.  The real router comes from its parser
venv (tools/parser_venvs.sh); without it the real-router cases skip, saying so on stdout and in
the skip reason (``pytest -rs``), and the stand-in's still run.

Asserted through each router: completions and chats, streamed and not, answered by the decode
under the router's request id; the decode's KV-transfer counters as fleet's canary reads them
(:func:`launcher.observe.load.transfers`); a decode pointed at a closed NIXL side channel (the
prefill's answer relayed with another port) failing the request as vLLM fails it, passed through
-- what the canary quotes -- and vLLM's error line; a worker gone; ``/health``, ``/readiness`` and the worker API
fleet's watch calls (:class:`launcher.rolling.router_api.RouterClient`); a body that is not JSON.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Iterator

import pytest

from launcher.deploy import crossing
from launcher.deploy.session import Target
from launcher.hosthttp import DirectHttp
from launcher.observe.load import Transfers, transfers
from launcher.observe.names import names_for
from launcher.pipeline import load_target
from launcher.rolling.router_api import RouterClient, RouterError
from launcher.sandbox.inventory import preview
from launcher.sandbox.standin.server import VLLM_GENERATION_ERROR
from tests.parsers.real import cache_dir, venv_absent
from tests.sandbox.test_standin import REPO, free_port, wait_status

REAL, STANDIN = "vllm-router 0.1.17", "stand-in"
ROUTER_EXE = cache_dir() / "vllm-router-0.1.17" / "bin" / "vllm-router"
PLAYBOOK = REPO / "playbooks" / "sandbox" / "real-pd.yaml"
START_S = 120  # hang bound for a process to answer /health on a loaded machine
REFUSED = "caused by: client error (Connect) caused by: tcp connect error caused by: Connection refused (os error 111)"


def planned(tmp_path: Path) -> Target:
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(preview(17))
    return load_target(PLAYBOOK, inventory, None, None)


def _set(argv: tuple[str, ...], values: dict[str, str]) -> list[str]:
    """``argv`` with the value after each flag named in ``values`` replaced; every flag must be there."""
    out = list(argv)
    for flag, value in values.items():
        assert flag in out, f"fleet's planned argv has no {flag}: {argv}"
        out[out.index(flag) + 1] = value
    return out


def _sub(argv: list[str], old: str, new: str) -> list[str]:
    assert old in argv, f"{old} not in {argv}"
    return [new if a == old else a for a in argv]


@dataclass
class Pd:
    """One prefill, one decode and one router on loopback; the processes and their captured output."""

    kind: str
    tmp: Path
    prefill: str = ""
    decode: str = ""
    front: str = ""
    served: str = ""
    side_channel: int = 0  # the prefill's NIXL side-channel port
    via: dict[str, str] = field(default_factory=dict)  # role -> the URL the router has for it
    seen: list[tuple[str, str, str, dict[str, Any]]] = field(default_factory=list)  # relayed (role, path, X-Request-Id, body)
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    relays: list[ThreadingHTTPServer] = field(default_factory=list)

    def spawn(self, name: str, argv: list[str], env: dict[str, str]) -> None:
        with open(self.tmp / f"{name}.log", "ab") as log, open(self.tmp / f"{name}.err", "ab") as err:
            self.procs[name] = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=err,
                                                env={**os.environ, **env})  # fmt: skip

    def stop(self, name: str) -> None:
        p = self.procs[name]
        if p.poll() is None:
            p.kill()
        p.wait(30)


def start_pd(kind: str, tmp_path: Path, running: list[Pd], relays: bool = False, side_port: int | None = None) -> Pd:
    """Fleet's planned 1P1D on loopback behind router ``kind`` (added to ``running`` first: stopped
    by the fixture however far it got).  ``relays``: the router reaches each
    engine through a relay recording the generation requests it sends (:attr:`Pd.seen`);
    ``side_port``: the prefill's relay rewrites the NIXL side-channel port of its answers to this
    one (where nothing listens)."""
    target = planned(tmp_path)
    units = {d.unit.role: d for d in target.units}
    pd = Pd(kind=kind, tmp=tmp_path)
    running.append(pd)
    engine_env = {"PYTHONPATH": str(REPO), "FLEET_STANDIN_TOKEN_MS": "5"}
    bases: dict[str, str] = {}
    for role in ("prefill", "decode"):
        d = units[role]
        assert d.unit.health is not None
        port, side = free_port(), free_port()
        argv = _set(d.unit.argv, {"--port": str(port)})
        env = {**d.unit.env, **engine_env, "VLLM_HOST_IP": "127.0.0.1", "VLLM_NIXL_SIDE_CHANNEL_HOST": "127.0.0.1",
               "VLLM_NIXL_SIDE_CHANNEL_PORT": str(side)}  # fmt: skip
        pd.spawn(role, [sys.executable, "-m", "launcher.sandbox.standin.server", *argv], env)
        bases[d.unit.health.url.rsplit("/", 1)[0]] = f"http://127.0.0.1:{port}"
        setattr(pd, role, f"http://127.0.0.1:{port}")
        if role == "prefill":
            pd.side_channel = side
    for role in ("prefill", "decode"):
        wait_status(f"{getattr(pd, role)}/health", 200, START_S)
    pd.served = str(json.loads(_get(f"{pd.decode}/v1/models")[1])["data"][0]["id"])

    r = units["router"].unit.argv
    assert r[:4] == ("vllm-router", "--vllm-pd-disaggregation", "--kv-connector", "nixl"), r
    port = free_port()
    argv = _set(r, {"--host": "127.0.0.1", "--port": str(port), "--prometheus-host": "127.0.0.1",
                    "--prometheus-port": str(free_port())})  # fmt: skip
    for planned_url, url in bases.items():
        role = "prefill" if url == pd.prefill else "decode"
        pd.via[role] = relay(pd, role, side_port if role == "prefill" else None) if relays else url
        argv = _sub(argv, planned_url, pd.via[role])
    if kind == REAL:
        pd.spawn("router", [str(ROUTER_EXE), *argv[1:]], {"NO_COLOR": "1"})
    else:
        pd.spawn("router", [sys.executable, "-m", "launcher.sandbox.standin.router", *argv[1:]], engine_env)
    pd.front = f"http://127.0.0.1:{port}"
    wait_status(f"{pd.front}/health", 200, START_S)
    return pd


def relay(pd: Pd, role: str, side_port: int | None) -> str:
    """An HTTP relay to ``pd``'s ``role`` engine; records each generation request in ``pd.seen``.
    With ``side_port`` its JSON answers carry that as their ``kv_transfer_params.remote_port``: a
    prefill whose side channel the decode cannot reach."""
    target = getattr(pd, role)

    class Relay(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            return

        def do_GET(self) -> None:
            self._pass(None)

        def do_POST(self) -> None:
            self._pass(self.rfile.read(int(self.headers.get("Content-Length") or 0)))

        def _pass(self, data: bytes | None) -> None:
            if self.path in ("/v1/completions", "/v1/chat/completions") and data is not None:
                pd.seen.append((role, self.path, self.headers.get("X-Request-Id", ""), json.loads(data)))
            headers = {k: v for k, v in self.headers.items() if k.lower() in ("content-type", "x-request-id")}
            req = urllib.request.Request(target + self.path, data=data, headers=headers, method=self.command)
            try:
                with urllib.request.urlopen(req, timeout=60) as r:
                    status, ctype, body = r.status, r.headers.get("Content-Type", ""), r.read()
            except urllib.error.HTTPError as err:
                status, ctype, body = err.code, err.headers.get("Content-Type", ""), err.read()
            if side_port is not None and status == 200 and ctype.startswith("application/json"):
                doc = json.loads(body)
                if isinstance(doc, dict) and isinstance(doc.get("kv_transfer_params"), dict):
                    doc["kv_transfer_params"]["remote_port"] = side_port
                    body = json.dumps(doc).encode()
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Relay)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    pd.relays.append(server)
    return f"http://127.0.0.1:{server.server_address[1]}"


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def post(url: str, body: dict[str, Any], ctype: str = "application/json") -> tuple[int, str, bytes]:
    """(status, content type, body) of a POST, as a client sends it."""
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": ctype})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, r.headers.get("Content-Type", ""), r.read()
    except urllib.error.HTTPError as err:
        return err.code, err.headers.get("Content-Type", ""), err.read()


def counters(pd: Pd) -> tuple[float, float]:
    """The decode's (done, failed) KV transfers, read as fleet's canary reads them."""
    t = transfers(names_for("vllm"), _get(f"{pd.decode}/metrics")[1].decode())
    assert isinstance(t, Transfers)
    return t.done, t.failed


@pytest.fixture(params=[REAL, STANDIN])
def kind(request: pytest.FixtureRequest) -> str:
    if request.param == REAL:
        reason = venv_absent("vllm-router", "0.1.17")
        if reason is None and not ROUTER_EXE.is_file():
            reason = f"{ROUTER_EXE} missing: run tools/parser_venvs.sh vllm-router-0.1.17"
        if reason:
            print(f"SKIP the real vllm-router cases: {reason}")
            pytest.skip(f"real vllm-router: {reason}")
    return str(request.param)


@pytest.fixture
def running() -> Iterator[list[Pd]]:
    started: list[Pd] = []
    yield started
    for pd in started:
        for name in pd.procs:
            pd.stop(name)
        for server in pd.relays:
            server.shutdown()
            server.server_close()


def rid_prefix(pd: Pd) -> str:
    """The router's request id up to its random part: vLLM names its answer after it."""
    p, d = (pd.via[role].removeprefix("http://") for role in ("prefill", "decode"))
    return f"___prefill_addr_{p}___decode_addr_{d}_"


def test_completions_and_chats_cross_from_prefill_to_decode(kind: str, tmp_path: Path, running: list[Pd]) -> None:
    pd = start_pd(kind, tmp_path, running, relays=True)
    # fleet's own canary request, through fleet's own HTTP client
    status, text = DirectHttp().request("POST", pd.front + "/v1/completions", {
        "model": pd.served, "prompt": crossing.CANARY_PROMPT, "max_tokens": crossing.CANARY_TOKENS, "temperature": 0})  # fmt: skip
    assert status == 200, text
    answer = json.loads(text)
    assert answer["id"].startswith("cmpl-" + rid_prefix(pd)), answer["id"]
    assert (answer["usage"]["completion_tokens"], answer["fleet_standin"]["role"]) == (crossing.CANARY_TOKENS, "decode")
    assert counters(pd) == (1, 0)

    chat = {"model": pd.served, "max_tokens": 3, "messages": [{"role": "user", "content": "hi"}]}
    status, ctype, body = post(pd.front + "/v1/chat/completions", chat)
    answer = json.loads(body)
    assert (status, answer["object"], answer["choices"][0]["message"]["content"]) == (
        200, "chat.completion", "the fleet serves"), body
    assert answer["id"].startswith("chatcmpl-" + rid_prefix(pd)), answer["id"]

    for path, req in (("/v1/completions", {"model": pd.served, "prompt": "p q", "max_tokens": 2}), ("/v1/chat/completions", chat)):
        status, ctype, body = post(pd.front + path, {**req, "stream": True, "stream_options": {"include_usage": True}})
        events = [json.loads(x) for x in body.decode().split("\n\n") if x.startswith("data: {") for x in [x[6:]]]
        assert (status, ctype, body.endswith(b"data: [DONE]\n\n")) == (200, "text/event-stream", True), body
        assert events[-1]["usage"]["completion_tokens"] == req["max_tokens"], events[-1]
        assert all(e["id"].split("-", 1)[1].startswith(rid_prefix(pd)) for e in events), events
    assert counters(pd) == (4, 0)

    # What the router sent: each request to the prefill, then to the decode, under one request id.
    # The prefill's: one token, not streamed, asking for a remote decode; the decode's: the
    # client's request with the kv_transfer_params the prefill answered (the relay saw both).
    assert [(role, path) for role, path, _, _ in pd.seen] == [
        (role, path) for path in ("/v1/completions", "/v1/chat/completions", "/v1/completions", "/v1/chat/completions")
        for role in ("prefill", "decode")]  # fmt: skip
    asked = {"do_remote_decode": True, "do_remote_prefill": False, "remote_engine_id": None,
             "remote_block_ids": None, "remote_host": None, "remote_port": None}  # fmt: skip
    clients = (crossing.CANARY_TOKENS, 3, 2, 3)  # each request's max_tokens, in order
    for (_, _, p_rid, p_body), (_, _, d_rid, d_body), tokens in zip(pd.seen[::2], pd.seen[1::2], clients):
        assert p_rid == d_rid and p_rid.startswith(rid_prefix(pd)), (p_rid, d_rid)
        assert (p_body["max_tokens"], p_body["min_tokens"], p_body["stream"], p_body["kv_transfer_params"],
                "stream_options" in p_body) == (1, 1, False, asked, False), p_body  # fmt: skip
        params = d_body["kv_transfer_params"]
        assert (d_body["max_tokens"], params["do_remote_prefill"], params["remote_request_id"], params["remote_port"]) == (
            tokens, True, p_rid, pd.side_channel), d_body  # fmt: skip
    assert [d_body.get("stream", False) for _, _, _, d_body in pd.seen[1::2]] == [False, False, True, True]


def test_a_decode_pointed_at_a_closed_side_channel_fails_the_request(kind: str, tmp_path: Path,
                                                                     running: list[Pd]) -> None:  # fmt: skip
    closed = free_port()  # nothing listens there: the decode's connection is refused
    pd = start_pd(kind, tmp_path, running, relays=True, side_port=closed)
    status, text = DirectHttp().request("POST", pd.front + "/v1/completions",
                                        {"model": pd.served, "prompt": "p", "max_tokens": 2})  # fmt: skip
    # the decode's own answer (vLLM's failed generation), passed through: what the canary quotes
    # after "the router answered 500: "
    assert (status, json.loads(text)) == (500, VLLM_GENERATION_ERROR), text
    assert crossing._snippet(text) == "Internal server error"
    status, ctype, body = post(pd.front + "/v1/chat/completions", {
        "model": pd.served, "max_tokens": 2, "stream": True, "messages": [{"role": "user", "content": "hi"}]})  # fmt: skip
    assert (status, ctype, body) == (200, "text/event-stream",
                                     f"data: {json.dumps(VLLM_GENERATION_ERROR)}\n\ndata: [DONE]\n\n".encode())  # fmt: skip
    assert counters(pd) == (0, 2)
    pd.stop("decode")
    lines = [ln for ln in (tmp_path / "decode.err").read_text().splitlines() if ln.startswith("ERROR ")]
    assert len(lines) == 2 and all(ln.endswith(
        "[nixl_connector.py] NIXL transfer failure: handshake_setup_failed | Context: KV transfer from "
        f"127.0.0.1:{closed} failed: [Errno 111] Connection refused") for ln in lines), lines


def test_a_worker_that_fails_or_is_gone(kind: str, tmp_path: Path, running: list[Pd]) -> None:
    pd = start_pd(kind, tmp_path, running)
    req = {"model": pd.served, "prompt": "p", "max_tokens": 2}
    pd.stop("decode")
    url = pd.decode + "/v1/completions"
    assert post(pd.front + "/v1/completions", req) == (500, "text/plain; charset=utf-8", (
        f"Transparent proxy request failed: Network error: Decode request failed to {url}: error sending request "
        f"for url ({url}) {REFUSED}").encode())  # fmt: skip
    pd.stop("prefill")
    url = pd.prefill + "/v1/completions"
    status, text = DirectHttp().request("POST", pd.front + "/v1/completions", req)
    assert (status, text) == (500, f"Transparent proxy request failed: Network error: Prefill request to {pd.prefill} "
                                   f"failed: error sending request for url ({url}) {REFUSED}")  # fmt: skip


def test_a_prefill_answering_an_error(kind: str, tmp_path: Path, running: list[Pd], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLEET_STANDIN_FAIL_EVERY", "1")  # every generation request on the engines: 500
    pd = start_pd(kind, tmp_path, running)
    url = pd.prefill + "/v1/completions"
    assert post(pd.front + "/v1/completions", {"model": pd.served, "prompt": "p", "max_tokens": 2}) == (
        500, "text/plain; charset=utf-8",
        f"Transparent proxy request failed: Network error: Prefill server {url} returned 500 Internal Server Error: "
        '{"error": {"message": "injected failure (FLEET_STANDIN_FAIL_EVERY)", "code": 500}}'.encode())  # fmt: skip


def test_health_workers_and_what_the_router_refuses(kind: str, tmp_path: Path, running: list[Pd]) -> None:
    pd = start_pd(kind, tmp_path, running)
    assert _get(pd.front + "/health") == (200, b"All servers healthy")
    # what fleet's start gate waits on (launcher.engines.router.Program.ready_path)
    assert _get(pd.front + "/readiness") == (200, b'{"status":"ready","prefill":{"healthy":1,"total":1},'
                                                  b'"decode":{"healthy":1,"total":1}}')  # fmt: skip
    client = RouterClient(pd.front)
    listed = {(w.id, w.url, w.worker_type, w.healthy, w.load) for w in client.workers()}
    assert listed == {(pd.prefill, pd.prefill, "prefill", True, 0), (pd.decode, pd.decode, "decode", True, 0)}
    with pytest.raises(RouterError) as refused:
        client.add("http://127.0.0.1:9", "decode")
    assert str(refused.value) == (f"router {pd.front}: POST /workers: HTTP 400: "
                                  '{"error":"PD router requires specific add_prefill_server or add_decode_server '
                                  'methods","code":"ADD_WORKER_FAILED"}')  # fmt: skip
    assert post(pd.front + "/v1/completions", {"model": pd.served, "prompt": "p"}, ctype="text/plain") == (
        415, "text/plain; charset=utf-8", b"Expected request with `Content-Type: application/json`")
    assert counters(pd) == (0, 0)


def test_the_router_waits_for_its_workers_then_gives_up(kind: str, tmp_path: Path) -> None:
    """Nothing listens until every worker is healthy; after --worker-startup-timeout-secs it exits 1."""
    target = planned(tmp_path)
    r = next(d.unit.argv for d in target.units if d.unit.role == "router")
    nobody = f"http://127.0.0.1:{free_port()}"
    argv = _set(r, {"--host": "127.0.0.1", "--port": str(free_port()), "--prometheus-host": "127.0.0.1",
                    "--prometheus-port": str(free_port()), "--prefill": nobody, "--decode": nobody})  # fmt: skip
    argv += ["--worker-startup-timeout-secs", "2"]
    exe = [str(ROUTER_EXE)] if kind == REAL else [sys.executable, "-m", "launcher.sandbox.standin.router"]
    done = subprocess.run([*exe, *argv[1:]], capture_output=True, text=True, timeout=START_S,
                          env={**os.environ, "PYTHONPATH": str(REPO), "NO_COLOR": "1"})  # fmt: skip
    last = done.stderr.strip().splitlines()[-1]
    assert (done.returncode, last) == (1, f'RuntimeError: Timeout 2s waiting for hosts ["{nobody}"] to become healthy. '
                                          "Please set --router-worker-startup-timeout-secs (vllm_router.launch_server) "
                                          "or --worker-startup-timeout-secs (vllm_worker.router) to a larger value"), done.stderr  # fmt: skip
