"""The probes fleet sends an engine, as one function: run against the real vLLM and against the
stand-in, the results must match (the stand-in's contract, checked).

- health: ``GET /health`` 200 once serving (fleet's health gate);
- version: ``GET /version`` a JSON object with one ``version`` field (what ``fleet bench`` reports);
- models: ``GET /v1/models`` names the served model;
- in-flight counter: :func:`launcher.rolling.router_api.inflight` (what drain waits on) reads 0
  when idle, >= 1 while a stream runs, 0 again after;
- chat: ``POST /v1/chat/completions`` shape (object, role, finish_reason, usage);
- streaming: SSE ``data:`` chunks of ``chat.completion.chunk``, the first delta carrying the
  role, the last a finish_reason, then ``data: [DONE]``; usage on request (include_usage).
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from typing import Any

from launcher.bench.version import version_of
from launcher.hosthttp import DirectHttp
from launcher.observe.names import version_key
from launcher.rolling.router_api import inflight

STREAM_TOKENS = 480  # long enough to be seen in flight by a poll (~2 s at ~250 tokens/s)
MAX_STREAMS = 10  # streams sent back to back until one is seen in flight


def _post(base: str, body: dict[str, Any], timeout: float = 120.0) -> bytes:
    req = urllib.request.Request(f"{base}/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})  # fmt: skip
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return bytes(r.read())


def stream_events(base: str, model: str, max_tokens: int, timeout: float = 300.0) -> list[Any]:
    """The SSE events of one streamed chat completion (JSON objects, then the string [DONE])."""
    body = {"model": model, "messages": [{"role": "user", "content": "tell a long story"}],
            "max_tokens": max_tokens, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True}}  # fmt: skip
    raw = _post(base, body, timeout).decode()
    out: list[Any] = []
    for line in raw.splitlines():
        if line.startswith("data: "):
            data = line[len("data: "):]
            out.append(data if data == "[DONE]" else json.loads(data))
    return out


def probe(base: str, model: str) -> dict[str, Any]:
    """What fleet's probes observe of the engine at ``base`` (normalised: shapes, not values)."""
    seen: dict[str, Any] = {}
    with urllib.request.urlopen(f"{base}/health", timeout=10) as r:
        seen["health"] = r.status
    with urllib.request.urlopen(f"{base}/v1/models", timeout=10) as r:
        models = json.loads(r.read())
    seen["models"] = (models.get("object"), [m.get("id") for m in models.get("data", [])])
    # the version endpoint fleet bench reads (launcher/bench/version.py): vLLM's /version
    with urllib.request.urlopen(f"{base}/version", timeout=10) as r:
        doc = json.loads(r.read())
    seen["version"] = (sorted(doc), version_of(json.dumps(doc)) is not None and bool(version_key(doc["version"])))
    http = DirectHttp()
    seen["inflight_idle"] = inflight(http, base)

    chat = json.loads(_post(base, {"model": model, "messages": [{"role": "user", "content": "hello"}],
                                   "max_tokens": 5, "ignore_eos": True}))  # fmt: skip
    choice = chat["choices"][0]
    seen["chat"] = (chat["object"], choice["message"]["role"], type(choice["message"]["content"]).__name__,
                    choice["finish_reason"], chat["usage"]["completion_tokens"],
                    sorted(k for k in chat["usage"] if k in ("prompt_tokens", "completion_tokens", "total_tokens")))  # fmt: skip

    # Streams follow one another until the poll has seen one in flight (at most MAX_STREAMS): on a
    # quiet machine one stream can end between two polls; the first stream's events are checked.
    events: list[Any] = []
    seen_busy = threading.Event()

    def streams() -> None:
        events.extend(stream_events(base, model, STREAM_TOKENS))
        for _ in range(MAX_STREAMS - 1):
            if seen_busy.is_set():
                return
            stream_events(base, model, STREAM_TOKENS)

    t = threading.Thread(target=streams)
    t.start()
    busy = 0
    deadline = time.monotonic() + 120
    while t.is_alive() and time.monotonic() < deadline:
        n = inflight(http, base)
        busy = max(busy, n or 0)
        if busy:
            seen_busy.set()
            break
        time.sleep(0.05)
    t.join(timeout=300)
    seen["inflight_busy_seen"] = busy >= 1
    chunks = [e for e in events if isinstance(e, dict)]
    content = [c for c in chunks if c.get("choices") and c["choices"][0]["delta"].get("content")]
    finishes = [c["choices"][0]["finish_reason"] for c in chunks if c.get("choices") and c["choices"][0]["finish_reason"]]
    usage = [c["usage"] for c in chunks if c.get("usage")]
    seen["stream"] = (
        {c["object"] for c in chunks}, chunks[0]["choices"][0]["delta"].get("role") if chunks else None,
        finishes, events[-1] if events else None, usage[-1]["completion_tokens"] if usage else None,
        len(content) > 0,
    )  # fmt: skip
    deadline = time.monotonic() + 30
    while (left := inflight(http, base)) and time.monotonic() < deadline:
        time.sleep(0.1)
    seen["inflight_after"] = left
    return seen


EXPECTED = {
    "health": 200,
    "version": (["version"], True),
    "inflight_idle": 0,
    "chat": ("chat.completion", "assistant", "str", "length", 5, ["completion_tokens", "prompt_tokens", "total_tokens"]),
    "inflight_busy_seen": True,
    "stream": ({"chat.completion.chunk"}, "assistant", ["length"], "[DONE]", STREAM_TOKENS, True),
    "inflight_after": 0,
}


# ---------------------------------------------------------------------------------------------
# prefill/decode (vLLM's NixlConnector): what a PD router does, and what fleet's canary reads

# The kv_transfer_params keys the stand-in's prefill answers (launcher/sandbox/standin/server.py):
# the real one must answer them too (it may answer more), since routers pass the dict on whole.
PD_PARAMS = ("do_remote_prefill", "remote_block_ids", "remote_engine_id", "remote_host", "remote_port")


def _completion(base: str, body: dict[str, Any], timeout: float = 300.0) -> dict[str, Any]:
    req = urllib.request.Request(f"{base}/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})  # fmt: skip
    with urllib.request.urlopen(req, timeout=timeout) as r:
        doc: dict[str, Any] = json.loads(r.read())
    return doc


def _transfers(base: str) -> tuple[float, float]:
    """The decode's (done, failed) KV transfers, in the names fleet's canary reads."""
    from launcher.observe.load import transfers
    from launcher.observe.names import names_for

    with urllib.request.urlopen(f"{base}/metrics", timeout=10) as r:
        t = transfers(names_for("vllm"), r.read().decode())
    assert t is not None
    return t.done, t.failed


def pd_probe(prefill: str, decode: str, model: str) -> dict[str, Any]:
    """The exchange a PD router runs (vllm-router, vLLM's toy proxy): the prefill asked for one
    token with ``do_remote_decode``, its ``kv_transfer_params`` handed to the decode, which pulls
    the KV and generates; and the decode's transfer counters around it (normalised: shapes)."""
    seen: dict[str, Any] = {}
    before = _transfers(decode)
    first = _completion(prefill, {"model": model, "prompt": "prefill here, decode there", "max_tokens": 1,
                                  "kv_transfer_params": {"do_remote_decode": True, "do_remote_prefill": False}})  # fmt: skip
    params = first.get("kv_transfer_params") or {}
    seen["prefill"] = (first["object"], first["usage"]["completion_tokens"], sorted(k for k in PD_PARAMS if k in params))
    seen["params_types"] = {k: type(params[k]).__name__ for k in PD_PARAMS if k in params}
    answer = _completion(decode, {"model": model, "prompt": "prefill here, decode there", "max_tokens": 4,
                                  "ignore_eos": True, "kv_transfer_params": params})  # fmt: skip
    seen["decode"] = (answer["object"], answer["choices"][0]["finish_reason"], answer["usage"]["completion_tokens"])
    deadline = time.monotonic() + 15  # the real decode's counters follow its engine loop by a step
    while (after := _transfers(decode))[0] == before[0] and time.monotonic() < deadline:
        time.sleep(0.5)
    seen["transfers"] = (after[0] - before[0], after[1] - before[1])
    return seen


PD_EXPECTED = {
    "prefill": ("text_completion", 1, sorted(PD_PARAMS)),
    "params_types": {"do_remote_prefill": "bool", "remote_block_ids": "list", "remote_engine_id": "str",
                     "remote_host": "str", "remote_port": "int"},
    "decode": ("text_completion", "length", 4),
    "transfers": (1.0, 0.0),
}
