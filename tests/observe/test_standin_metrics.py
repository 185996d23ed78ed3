"""The stand-in serves the engines' own metric names (every name fleet top and the dashboard read
from an engine) with values that follow its load: running and waiting requests, KV use,
counters.  Runs the stand-in on loopback as a subprocess, as tests/sandbox/test_standin.py does."""

from __future__ import annotations

import json
import threading
import time
import urllib.request
import pytest

from launcher.observe.load import read, samples
from launcher.observe.names import Kind, MetricNames, names_for
from tests.sandbox.test_standin import Proc, free_port, get, procs, wait_status

__all__ = ["procs"]  # the stand-in tests' fixture: their processes are stopped after each test


def _start(procs: list[Proc], engine: str, *extra: str) -> str:
    port = free_port()
    if engine == "sglang":
        argv = ["sglang", "serve", "--model-path", "m", "--host", "127.0.0.1", "--port", str(port), *extra]
        version = "0.5.23"
    else:
        argv = ["vllm", "serve", "m", "--host", "127.0.0.1", "--port", str(port), *extra]
        version = "0.33.0"
    p = Proc(argv, FLEET_ENGINE_VERSION=version, FLEET_STANDIN_TOKEN_MS="40")
    procs.append(p)
    base = f"http://127.0.0.1:{port}"
    wait_status(base + "/health", 200)
    return base


def _load(base: str, engine: Kind) -> tuple[MetricNames, str]:
    status, body = get(base + "/metrics")
    assert status == 200, body
    return names_for(engine), body.decode()


def _requests(base: str, n: int, tokens: int) -> list[threading.Thread]:
    def one() -> None:
        body = json.dumps({"model": "m", "prompt": "a b c", "max_tokens": tokens}).encode()
        urllib.request.urlopen(urllib.request.Request(base + "/v1/completions", data=body), timeout=60).read()

    threads = [threading.Thread(target=one) for _ in range(n)]
    for t in threads:
        t.start()
    return threads


@pytest.mark.parametrize("engine,cap", [("sglang", "--max-running-requests"), ("vllm", "--max-num-seqs")])
def test_running_and_waiting_follow_the_load_in_the_engines_names(procs: list[Proc], engine: Kind, cap: str) -> None:
    base = _start(procs, engine, *(["--enable-metrics"] if engine == "sglang" else []), cap, "2")
    names, text = _load(base, engine)
    exposed = samples(text)
    for field in ("running", "waiting", "kv_usage", "generation_tokens", "prompt_tokens", "requests"):
        assert getattr(names, field) in exposed, field
    for hist in (h for h in (names.ttft, names.tpot, names.itl, names.e2e) if h):
        assert f"{hist}_bucket" in exposed and f"{hist}_count" in exposed, hist
    idle = read(names, text)
    assert (idle.running, idle.waiting, idle.kv_usage) == (0, 0, 0)
    # 100 tokens x 40 ms: 4 s each, 2 at a time: the five read (2, 3) for 4 s once the last one
    # arrived (1 s requests ended before a CI run at load ~99 read it)
    threads = _requests(base, 5, 100)
    deadline = time.monotonic() + 60
    busy = read(*_load(base, engine))
    while (busy.running, busy.waiting) != (2, 3) and time.monotonic() < deadline:
        time.sleep(0.05)
        busy = read(*_load(base, engine))
    assert (busy.running, busy.waiting) == (2, 3)
    assert busy.kv_usage is not None and busy.kv_usage > 0
    for t in threads:
        t.join()
    done = read(*_load(base, engine))
    assert (done.running, done.waiting, done.kv_usage) == (0, 0, 0)
    assert done.generation_tokens == 5 * 100 and done.requests == 5
    # one TPOT observation per request (issue 29 item 10: SGLang 0.5.23 has it as vLLM does)
    assert names.tpot and samples(_load(base, engine)[1])[f"{names.tpot}_count"][0][1] == 5


def test_sglang_serves_no_metrics_without_enable_metrics(procs: list[Proc]) -> None:
    base = _start(procs, "sglang")
    assert get(base + "/metrics")[0] == 404
