"""The rollout tests' bounded load (:class:`tests.rolling.loadgen.LoadGen`: its threads, bounds and
stop) with OpenAI chat requests a REAL vLLM answers, each checked whole: a short answer's
``usage.completion_tokens`` == asked; a stream ends with finish_reason ``length``, its usage ==
asked, then ``[DONE]`` (``ignore_eos``: the random model would stop anywhere).  A body cut short
counts as truncated.  Each prompt is mostly random text: the router's default cache-aware policy
sends a prompt that shares most of its text with earlier ones to the same worker, which would
leave the other replica idle.  Each answer's completion id is kept (``origin["id"]``): through
vllm-router in PD mode it names the prefill and decode that served it."""

from __future__ import annotations

import http.client
import json
import random
import time
from typing import Any

from tests.rolling.loadgen import LoadGen, Outcome


def truncated(o: Outcome) -> bool:
    """The answer came, but not whole."""
    return o.error.startswith("truncated")


class ChatLoad(LoadGen):
    def _short(self, n: int) -> Outcome:
        return self._chat(n, stream=False)

    def _stream(self, n: int) -> Outcome:
        return self._chat(n, stream=True)

    def _chat(self, n: int, *, stream: bool) -> Outcome:
        kind, want, started = ("stream" if stream else "short"), (self.stream_tokens if stream else self.short_tokens), time.time()
        words = " ".join(f"{random.getrandbits(32):08x}" for _ in range(12))
        body: dict[str, Any] = {"model": self.model, "messages": [{"role": "user", "content": f"{words} request {n}"}],
                                "max_tokens": want, "ignore_eos": True, "stream": stream}  # fmt: skip
        if stream:
            body["stream_options"] = {"include_usage": True}
        conn = http.client.HTTPConnection(self.host, self.port, timeout=120)

        def out(ok: bool, error: str = "", status: int = 200, cid: str = "") -> Outcome:
            return Outcome(n=n, kind=kind, ok=ok, started=started, ended=time.time(), status=status, error=error,
                           origin={"id": cid} if cid else {})  # fmt: skip

        try:
            conn.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
            resp = conn.getresponse()
            raw = resp.read()
            if resp.status != 200:
                return out(False, f"HTTP {resp.status}: {raw[:200]!r}", resp.status)
            if not stream:
                doc = json.loads(raw)
                got = doc["usage"]["completion_tokens"]
                return out(got == want, "" if got == want else f"truncated: {got} tokens", cid=str(doc.get("id", "")))
            events = [ln[6:] for ln in raw.decode().splitlines() if ln.startswith("data: ")]
            chunks = [json.loads(e) for e in events if e != "[DONE]"]
            finish = [c["choices"][0]["finish_reason"] for c in chunks if c.get("choices") and c["choices"][0]["finish_reason"]]
            usage = [c["usage"]["completion_tokens"] for c in chunks if c.get("usage")]
            done = events[-1:] == ["[DONE]"]
            whole = done and finish == ["length"] and usage == [want]
            cid = next((str(c["id"]) for c in chunks if c.get("id")), "")
            return out(whole, "" if whole else f"truncated: finish={finish} usage={usage} done={done}", cid=cid)
        except http.client.IncompleteRead as err:  # the body was cut: a stream that lost its end
            return out(False, f"truncated: {err!r}", 0)
        except (OSError, ValueError, KeyError, http.client.HTTPException) as err:
            return out(False, repr(err), 0)
        finally:
            conn.close()
