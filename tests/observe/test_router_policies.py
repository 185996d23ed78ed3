"""What ``fleet top`` reads for a router under a policy other than cache_aware, on the real
routers (sglang-router 0.3.2 ``--policy round_robin``, vllm-router 0.1.17 ``--policy random``,
from their parser venvs, tools/parser_venvs.sh) on 127.0.0.1 over two stand-in vLLM workers with
requests in flight: the router exports no in-flight gauge under these policies, and the router's
row carries its workers' own ``vllm:num_requests_running``, summed.  Every process is this
test's own, stopped by its PID."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import pytest

from launcher.deploy.top import sample
from launcher.errors import FleetError
from launcher.observe.load import Load, samples
from launcher.observe.targets import Endpoint
from tests.parsers.real import cache_dir
from tests.rolling.conftest import free_port, wait_for

pytestmark = pytest.mark.parsers
REPO = Path(__file__).resolve().parents[2]
IN_FLIGHT = 6
# 1500 tokens x 20 ms: 30 s per request, all still running when the reading comes (a hang bound,
# not a timing assertion: the workers are stopped at the end, which ends the requests)
MAX_TOKENS = 1500


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as r:
        body: bytes = r.read()
        return body.decode()


def _healthy(url: str) -> bool:
    try:
        _get(url)
    except OSError:
        return False
    return True


def _stop(procs: Sequence[subprocess.Popen[bytes]], kill: bool = False) -> None:
    """Ends this test's own processes by PID; ``kill``: at once (a stand-in vLLM told to stop with
    requests in flight stays until SIGKILL, as vLLM with --shutdown-timeout 0)."""
    for p in procs:
        if p.poll() is None:
            p.kill() if kill else p.terminate()
    for p in procs:
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(5)


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[list[int]]:
    """Two stand-in vLLM servers on 127.0.0.1; their ports."""
    ports = [free_port(), free_port()]
    env = dict(os.environ, PYTHONPATH=str(REPO), FLEET_STANDIN_TOKEN_MS="20")
    procs = []
    for port in ports:
        argv = (sys.executable, "-m", "launcher.sandbox.standin.server", "vllm", "serve", "m", "--host", "127.0.0.1",
                "--port", str(port))  # fmt: skip
        with open(tmp_path / f"worker-{port}.log", "ab") as log:
            procs.append(subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env))
    try:
        for port in ports:
            wait_for(f"stand-in on {port}", lambda: _healthy(f"http://127.0.0.1:{port}/health"), 60)
        yield ports
    finally:
        _stop(procs, kill=True)


def _router_argv(kind: str, policy: str, urls: list[str], port: int, metrics: int) -> tuple[str, ...] | None:
    if kind == "sglang-router":
        python = cache_dir() / "sglang-router-0.3.2" / "bin" / "python"
        head: tuple[str, ...] = (str(python), "-m", "sglang_router.launch_router")
        tail: tuple[str, ...] = ("--prometheus-port", str(metrics))
        exe = python
    else:
        exe = cache_dir() / "vllm-router-0.1.17" / "bin" / "vllm-router"
        head = (str(exe),)
        tail = ("--prometheus-host", "127.0.0.1", "--prometheus-port", str(metrics))
    if not exe.exists():
        return None
    return (*head, "--worker-urls", *urls, "--host", "127.0.0.1", "--port", str(port), *tail, "--policy", policy)


def _loopback_fetch(hosts: Any, eps: Sequence[Endpoint], conn: Any, forks: int) -> dict[tuple[str, str], str | FleetError]:
    """``fleet top``'s fetch without SSH: every endpoint is on 127.0.0.1 here."""
    out: dict[tuple[str, str], str | FleetError] = {}
    for ep in eps:
        try:
            out[(ep.host, ep.unit)] = _get(ep.url)
        except OSError as err:
            out[(ep.host, ep.unit)] = FleetError(f"{ep.url}: {err}")
    return out


def _chat(url: str, done: list[BaseException | None]) -> Callable[[], None]:
    def run() -> None:
        body = {"model": "m", "messages": [{"role": "user", "content": "hello"}], "max_tokens": MAX_TOKENS}
        req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=120) as r:
                r.read()
            done.append(None)
        except OSError as err:  # the workers stopped under it at the end: expected
            done.append(err)

    return run


@pytest.mark.parametrize("kind, policy", [("sglang-router", "round_robin"), ("vllm-router", "random")])
def test_top_reads_a_routers_running_from_its_workers_under_a_non_cache_aware_policy(
    kind: str, policy: str, workers: list[int], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    urls = [f"http://127.0.0.1:{p}" for p in workers]
    port, metrics = free_port(), free_port()
    argv = _router_argv(kind, policy, urls, port, metrics)
    if argv is None:
        pytest.skip(f"{kind} parser venv absent under {cache_dir()}: run tools/parser_venvs.sh")
    with open(tmp_path / "router.log", "ab") as log:
        router = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                  env=dict(os.environ, NO_COLOR="1", HF_HUB_OFFLINE="1"))  # fmt: skip
    threads: list[threading.Thread] = []
    try:
        wait_for(f"{kind} on {port} (log {tmp_path / 'router.log'})", lambda: _healthy(f"http://127.0.0.1:{port}/health"), 60)
        done: list[BaseException | None] = []
        threads = [threading.Thread(target=_chat(f"http://127.0.0.1:{port}/v1/chat/completions", done), daemon=True)
                   for _ in range(IN_FLIGHT)]  # fmt: skip
        for t in threads:
            t.start()

        def engines_running() -> float:
            return sum(v for p in workers for _, v in samples(_get(f"http://127.0.0.1:{p}/metrics"))["vllm:num_requests_running"])

        wait_for(f"{IN_FLIGHT} requests running at the workers", lambda: engines_running() == IN_FLIGHT, 60)
        own = samples(_get(f"http://127.0.0.1:{metrics}/metrics"))
        assert not {"smg_worker_requests_active", "vllm_router_running_requests"} & set(own), sorted(own)

        eps = tuple(Endpoint(host="local", unit=f"w{i}", role="single", rank=0, group=f"d/w{i}", kind="vllm",
                             address=f"127.0.0.1:{p}") for i, p in enumerate(workers))  # fmt: skip
        eps += (Endpoint(host="local", unit="router", role="router", rank=0, group="d/router", kind=kind,
                         address=f"127.0.0.1:{metrics}", workers=tuple(f"127.0.0.1:{p}" for p in workers)),)  # fmt: skip
        import launcher.deploy.top as top

        monkeypatch.setattr(top, "fetch", _loopback_fetch)
        loads = sample((), eps, {"vllm": "0.32.0"}, lambda host: None, 1).loads  # type: ignore[arg-type]
        row = loads[("local", "router")]
        assert isinstance(row, Load) and row.running == IN_FLIGHT, loads
        assert row.requests == IN_FLIGHT  # the router's own routed counter counts under this policy too
        per_worker = [loads[("local", f"w{i}")] for i in range(2)]
        assert sum(w.running or 0 for w in per_worker if isinstance(w, Load)) == IN_FLIGHT
        print(f"{kind} --policy {policy}: router row running={row.running} requests={row.requests}; "
              f"workers {[w.running for w in per_worker if isinstance(w, Load)]}")
    finally:
        _stop([router], kill=True)  # requests are still in flight: no graceful drain to wait for
