"""A bounded load generator for rollout tests: threads sending short ``/generate`` requests and
long streaming ``/v1/chat/completions`` to one router on this machine (loopback or sandbox
addresses only), checking every answer is complete.

Bounded in count (``max_requests``) and time (``max_seconds``); it stops by itself.  A request
counts as failed on any non-200 status, transport error, malformed or truncated body (a stream
without its final chunk and ``[DONE]``, or fewer tokens than asked for).
"""

from __future__ import annotations

import http.client
import itertools
import json
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True, kw_only=True)
class Outcome:
    n: int
    kind: str  # short | stream
    ok: bool
    started: float
    ended: float
    status: int = 0
    error: str = ""
    tokens: int = 0
    host: str = ""
    generation: str = ""
    origin: dict[str, Any] = field(default_factory=dict)


class LoadGen:
    def __init__(
        self,
        base_url: str,
        *,
        workers: int = 12,
        stream_every: int = 5,
        stream_tokens: int = 400,
        short_tokens: int = 4,
        max_requests: int = 20000,
        max_seconds: float = 150.0,
        model: str = "m",
    ) -> None:
        parts = urllib.parse.urlsplit(base_url)
        host = parts.hostname or ""
        # Only this machine's loopback or the sandbox's own addresses (198.18.0.0/15, made here).
        assert host in ("127.0.0.1", "localhost") or host.startswith(("198.18.", "198.19.")), base_url
        self.host, self.port = host, parts.port or 80
        self.workers = workers
        self.stream_every = stream_every
        self.stream_tokens = stream_tokens
        self.short_tokens = short_tokens
        self.max_requests = max_requests
        self.max_seconds = max_seconds
        self.model = model
        self.results: list[Outcome] = []
        self._lock = threading.Lock()
        self._counter = itertools.count()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._deadline = 0.0

    # -- control

    def start(self) -> LoadGen:
        self._deadline = time.monotonic() + self.max_seconds
        for i in range(self.workers):
            t = threading.Thread(target=self._loop, name=f"load-{i}", daemon=True)
            t.start()
            self._threads.append(t)
        return self

    def stop(self, at_least: int = 0, timeout: float = 120.0) -> list[Outcome]:
        """Keeps sending until ``at_least`` requests finished (or the time bound), then stops."""
        until = time.monotonic() + timeout
        while len(self.results) < at_least and time.monotonic() < until and any(t.is_alive() for t in self._threads):
            time.sleep(0.1)
        self._stop.set()
        for t in self._threads:
            t.join(60)
        return list(self.results)

    @property
    def failures(self) -> list[Outcome]:
        return [r for r in self.results if not r.ok]

    # -- one worker

    def _loop(self) -> None:
        while not self._stop.is_set() and time.monotonic() < self._deadline:
            n = next(self._counter)
            if n >= self.max_requests:
                return
            stream = n % self.stream_every == 0
            out = self._stream(n) if stream else self._short(n)
            with self._lock:
                self.results.append(out)

    def _conn(self) -> http.client.HTTPConnection:
        return http.client.HTTPConnection(self.host, self.port, timeout=60)

    def _short(self, n: int) -> Outcome:
        started = time.time()
        body = {"text": f"request {n}", "sampling_params": {"max_new_tokens": self.short_tokens}, "rid": f"load-{n}"}
        conn = self._conn()
        try:
            conn.request("POST", "/generate", json.dumps(body), {"Content-Type": "application/json"})
            resp = conn.getresponse()
            raw = resp.read()
            if resp.status != 200:
                return Outcome(n=n, kind="short", ok=False, started=started, ended=time.time(), status=resp.status,
                               error=raw[:200].decode(errors="replace"))  # fmt: skip
            doc = json.loads(raw)
            meta = doc.get("meta_info", {})
            origin = doc.get("fleet_standin", {})
            tokens = int(meta.get("completion_tokens", -1))
            ok = tokens == self.short_tokens and len(doc.get("text", "").split()) == self.short_tokens
            return Outcome(n=n, kind="short", ok=ok, started=started, ended=time.time(), status=200, tokens=tokens,
                           host=str(origin.get("host", "")), generation=str(origin.get("generation", "")),
                           origin=origin, error="" if ok else f"truncated: {tokens} tokens")  # fmt: skip
        except (OSError, ValueError, http.client.HTTPException) as err:
            return Outcome(n=n, kind="short", ok=False, started=started, ended=time.time(), error=repr(err))
        finally:
            conn.close()

    def _stream(self, n: int) -> Outcome:
        started = time.time()
        body = {
            "model": self.model, "messages": [{"role": "user", "content": f"long request {n}"}],
            "max_tokens": self.stream_tokens, "stream": True,
        }  # fmt: skip
        conn = self._conn()
        tokens, finish, done, origin = 0, None, False, {}
        try:
            conn.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
            resp = conn.getresponse()
            if resp.status != 200:
                raw = resp.read()
                return Outcome(n=n, kind="stream", ok=False, started=started, ended=time.time(), status=resp.status,
                               error=raw[:200].decode(errors="replace"))  # fmt: skip
            while True:
                line = resp.readline()
                if not line:
                    break
                text = line.decode(errors="replace").strip()
                if not text.startswith("data:"):
                    continue
                data = text[5:].strip()
                if data == "[DONE]":
                    done = True
                    break
                chunk = json.loads(data)
                for choice in chunk.get("choices", []):
                    if choice.get("delta", {}).get("content"):
                        tokens += 1
                    if choice.get("finish_reason"):
                        finish = choice["finish_reason"]
                if "fleet_standin" in chunk:
                    origin = chunk["fleet_standin"]
            ok = done and finish == "length" and tokens == self.stream_tokens
            error = "" if ok else f"truncated: {tokens} tokens, finish={finish}, done={done}"
            return Outcome(n=n, kind="stream", ok=ok, started=started, ended=time.time(), status=200, tokens=tokens,
                           host=str(origin.get("host", "")), generation=str(origin.get("generation", "")),
                           origin=origin, error=error)  # fmt: skip
        except (OSError, ValueError, http.client.HTTPException) as err:
            return Outcome(n=n, kind="stream", ok=False, started=started, ended=time.time(), tokens=tokens,
                           error=f"{err!r} after {tokens} tokens")  # fmt: skip
        finally:
            conn.close()
