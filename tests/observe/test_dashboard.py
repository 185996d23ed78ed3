"""dashboards/fleet.json (Grafana) is built on what the targets expose: every metric a query or
annotation names is one the engines serve (the stand-in's rendering of the real SGLang and vLLM
names) or the real routers serve (the name map, read from sglang-router 0.3.2 / vllm-router
0.1.17), and every label it selects or groups by is a label fleet writes on its targets, an
engine's own, or Prometheus's.  Grafana itself is in neither the OS packages nor the Python
index here, so its schema check cannot run; this checks the queries instead."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Iterator

from launcher.observe.load import samples
from launcher.observe.names import NAMES
from launcher.observe.targets import LABELS
from launcher.sandbox.standin.metrics import Stats

DASHBOARD = Path(__file__).resolve().parents[2] / "dashboards" / "fleet.json"
PROMQL_WORDS = {
    "sum", "max", "min", "count", "rate", "increase", "histogram_quantile", "by", "without", "unless", "offset",
    "and", "or", "on", "ignoring",
}
ENGINE_LABELS = {"le", "model_name", "engine", "tp_rank", "pp_rank", "engine_type", "worker"}
PROMETHEUS_LABELS = {"__name__", "instance", "job"}


def _exprs(doc: dict[str, Any]) -> Iterator[str]:
    for panel in doc["panels"]:
        for target in panel["targets"]:
            yield target["expr"]
    for ann in doc["annotations"]["list"]:
        if "expr" in ann:
            yield ann["expr"]


def _metrics(expr: str) -> set[str]:
    names = set()
    for alternatives in re.findall(r'__name__=~"([^"]+)"', expr):
        names |= set(alternatives.split("|"))
    bare = re.sub(r'\{[^}]*\}', "{}", expr)  # label matchers out of the way
    bare = re.sub(r'"[^"]*"', "", bare)
    for word in re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*(?=\s*[\{\[])", bare):
        if word not in PROMQL_WORDS:
            names.add(word)
    return names


def _labels(expr: str) -> set[str]:
    found = set()
    for group in re.findall(r"\b(?:by|without)\s*\(([^)]*)\)", expr):
        found |= {x.strip() for x in group.split(",") if x.strip()}
    for matchers in re.findall(r"\{([^}]*)\}", expr):
        found |= set(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)\s*"', matchers))
    return found


def _exposed() -> set[str]:
    """Every sample name the stand-in serves as SGLang and as vLLM, the routers' names, ``up``."""
    names = {"up"}
    for engine in ("sglang", "vllm"):
        names |= set(samples(Stats(engine, "m", 4, 100).render().decode()))
    for kind, _, m in NAMES:
        if kind.endswith("router"):
            names |= {v for v in (m.running, m.requests) if v}
            names |= {f"{m.e2e}_bucket"} if m.e2e else set()
    return names


def test_every_query_names_exposed_metrics_and_known_labels() -> None:
    doc = json.loads(DASHBOARD.read_text())
    exposed, allowed = _exposed(), set(LABELS) | ENGINE_LABELS | PROMETHEUS_LABELS
    exprs = list(_exprs(doc))
    assert len(exprs) >= 12
    used: set[str] = set()
    for expr in exprs:
        names = _metrics(expr)
        assert names, expr
        assert names <= exposed, f"{expr}: {sorted(names - exposed)} not exposed"
        assert _labels(expr) <= allowed, f"{expr}: {sorted(_labels(expr) - allowed)} is no target/engine label"
        used |= names
    # throughput, TTFT/TPOT histograms, queue, KV use of both engines, the routers, targets
    for name in ("vllm:generation_tokens_total", "sglang:generation_tokens_total", "vllm:num_requests_waiting",
                 "sglang:num_queue_reqs", "vllm:kv_cache_usage_perc", "sglang:token_usage",
                 "vllm:time_to_first_token_seconds_bucket", "sglang:inter_token_latency_seconds_bucket",
                 "smg_worker_requests_active", "up"):  # fmt: skip
        assert name in used, name


def test_rollouts_are_annotated_by_generation_and_the_deployment_is_a_variable() -> None:
    doc = json.loads(DASHBOARD.read_text())
    (rollouts,) = [a for a in doc["annotations"]["list"] if "expr" in a]
    assert "generation" in _labels(rollouts["expr"]) and "{{generation}}" in rollouts["titleFormat"]
    names = [v["name"] for v in doc["templating"]["list"]]
    assert "deployment" in names
    assert all('deployment=~"$deployment"' in e for e in _exprs(doc))


def test_the_checker_catches_an_unknown_metric_and_label() -> None:
    assert _metrics('sum by (deployment) (rate({__name__=~"vllm:nope_total", deployment=~"$d"}[1m]))') == {"vllm:nope_total"}
    assert _metrics("rate(vllm:gpu_cache_usage_perc{x=\"1\"}[5m])") == {"vllm:gpu_cache_usage_perc"}
    assert "vllm:gpu_cache_usage_perc" not in _exposed()  # the pre-0.10 name, gone in vLLM 0.32
    assert _labels('sum by (deployment, pod) (up{namespace="x"})') == {"deployment", "pod", "namespace"}
