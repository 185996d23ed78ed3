"""The vllm-router stand-in (PD mode) in front of the stand-in's vLLM NIXL prefill and decode, on
loopback, and the decode's failed pull: HTTP 500, the failed-transfer counter, vLLM's own error
line on stderr (what fleet's PD canary quotes).  The router's failure answers, health and worker
API, next to the real vllm-router's: tests/sandbox/test_standin_real_router.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from typing import Any, Iterator

import pytest

from tests.sandbox.test_standin import REPO, free_port, get, wait_status

KV = '{"kv_connector":"NixlConnector","kv_role":"%s"}'


def spawn(module: str, argv: list[str], **env: str) -> subprocess.Popen[str]:
    full = {**os.environ, "PYTHONPATH": str(REPO), "FLEET_STANDIN_TOKEN_MS": "5", **env}
    return subprocess.Popen([sys.executable, "-m", f"launcher.sandbox.standin.{module}", *argv], env=full,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip


@pytest.fixture
def started() -> Iterator[list[subprocess.Popen[str]]]:
    procs: list[subprocess.Popen[str]] = []
    yield procs
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.communicate()


def engine(procs: list[subprocess.Popen[str]], role: str, **env: str) -> str:
    port = free_port()
    procs.append(spawn("server", ["vllm", "serve", "m", "--port", str(port), "--kv-transfer-config", KV % role], **env))
    wait_status(f"http://127.0.0.1:{port}/health", 200)
    return f"http://127.0.0.1:{port}"


def router(procs: list[subprocess.Popen[str]], prefill: str, decode: str) -> str:
    port = free_port()
    procs.append(spawn("router", ["--vllm-pd-disaggregation", "--kv-connector", "nixl", "--prefill", prefill,
                                  "--decode", decode, "--host", "127.0.0.1", "--port", str(port),
                                  "--prometheus-host", "0.0.0.0", "--prometheus-port", str(free_port())]))  # fmt: skip
    wait_status(f"http://127.0.0.1:{port}/health", 200)
    return f"http://127.0.0.1:{port}"


def post(url: str, body: dict[str, Any]) -> tuple[int, bytes]:
    """A JSON POST (the real router answers 415 to any other content type, and so does the stand-in)."""
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def counters(decode: str) -> tuple[str, str]:
    text = get(f"{decode}/metrics")[1].decode()
    done = next(ln for ln in text.splitlines() if ln.startswith("vllm:nixl_xfer_time_seconds_count"))
    failed = next(ln for ln in text.splitlines() if ln.startswith("vllm:nixl_num_failed_transfers_total"))
    return done.rsplit(" ", 1)[1], failed.rsplit(" ", 1)[1]


def test_a_completion_crosses_from_prefill_to_decode(started: list[subprocess.Popen[str]]) -> None:
    side = free_port()
    prefill = engine(started, "kv_producer", VLLM_NIXL_SIDE_CHANNEL_HOST="127.0.0.1",
                     VLLM_NIXL_SIDE_CHANNEL_PORT=str(side))  # fmt: skip
    decode = engine(started, "kv_consumer")
    front = router(started, prefill, decode)
    status, body = post(f"{front}/v1/completions", {"model": "m", "prompt": "p q", "max_tokens": 3})
    answer = json.loads(body)
    assert (status, answer["usage"]["completion_tokens"], answer["fleet_standin"]["role"]) == (200, 3, "decode")
    assert counters(decode) == ("1", "0")
    status, body = post(f"{front}/v1/chat/completions", {"model": "m", "max_tokens": 2, "stream": True,
                                                         "messages": [{"role": "user", "content": "hi"}]})  # fmt: skip
    assert status == 200 and body.endswith(b"data: [DONE]\n\n"), body
    assert counters(decode) == ("2", "0")


def test_a_decode_that_cannot_reach_the_side_channel(started: list[subprocess.Popen[str]]) -> None:
    decode = engine(started, "kv_consumer")
    closed = free_port()  # nothing listens there: the connection is refused
    params = {"do_remote_prefill": True, "remote_engine_id": "p", "remote_request_id": "r1",
              "remote_host": "127.0.0.1", "remote_port": closed, "remote_block_ids": [0]}  # fmt: skip
    status, body = get(f"{decode}/v1/completions", {"model": "m", "prompt": "p", "max_tokens": 2,
                                                    "kv_transfer_params": params})  # fmt: skip
    assert status == 500, body
    assert counters(decode) == ("0", "1")
    started[0].kill()
    err = started[0].communicate()[1]
    lines = [ln for ln in err.splitlines() if ln.startswith("ERROR ")]
    assert len(lines) == 1 and lines[0].endswith(
        "[nixl_connector.py] NIXL transfer failure: handshake_setup_failed | Context: KV transfer from "
        f"127.0.0.1:{closed} failed: [Errno 111] Connection refused"), err


def test_regular_mode_is_not_played() -> None:
    proc = spawn("router", ["--worker-urls", "http://127.0.0.1:1", "--port", str(free_port())])
    out, err = proc.communicate(timeout=30)
    assert (proc.returncode, err) == (1, "the vllm-router stand-in plays PD mode only: --vllm-pd-disaggregation, "
                                         "--prefill and --decode\n"), out  # fmt: skip
