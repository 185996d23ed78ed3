"""dashboards/fleet.json (Grafana) is built on what the targets expose: every metric a query or
annotation names is one the engines serve (the stand-in's rendering of the real SGLang and vLLM
names) or the real routers serve (the name map, read from sglang-router 0.3.2 / vllm-router
0.1.17), and every label it selects or groups by is a label fleet writes on its targets, an
engine's own, or Prometheus's.  Grafana itself is in neither the OS packages nor the Python
index here; its dashboard types are (grafana-foundation-sdk, generated from Grafana's schemas):
every field the dashboard sets is one they declare.  And what Grafana needs to draw the queries
right: the heatmap format over cumulative ``_bucket`` series (else Grafana stacks the cumulative
counts as they come), an instant query for the table (else one row per sample), seconds only
where the values are seconds."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Iterator

from grafana_foundation_sdk.cog import plugins as grafana_plugins
from grafana_foundation_sdk.cog.encoder import JSONEncoder as GrafanaJSON
from grafana_foundation_sdk.models.dashboard import Dashboard as GrafanaDashboard

from launcher.observe.load import samples
from launcher.observe.names import NAMES, names_for
from launcher.observe.targets import LABELS
from launcher.sandbox.standin.metrics import Stats

DASHBOARD = Path(__file__).resolve().parents[2] / "dashboards" / "fleet.json"
PROMQL_WORDS = {
    "sum", "max", "min", "count", "rate", "increase", "histogram_quantile", "by", "without", "unless", "offset",
    "and", "or", "on", "ignoring",
}
ENGINE_LABELS = {"le", "model_name", "engine", "tp_rank", "pp_rank", "dp_rank", "engine_type", "worker"}
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
                 "vllm:request_time_per_output_token_seconds_bucket", "vllm:inter_token_latency_seconds_bucket",
                 "sglang:request_time_per_output_token_seconds_bucket",
                 "smg_router_requests_total", "up"):  # fmt: skip
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


def _panels(kind: str) -> list[dict[str, Any]]:
    return [p for p in json.loads(DASHBOARD.read_text())["panels"] if p["type"] == kind]


def test_heatmaps_read_the_buckets_as_a_heatmap_of_counts_on_a_seconds_axis() -> None:
    heatmaps = _panels("heatmap")
    assert len(heatmaps) == 2
    for panel in heatmaps:
        assert all("_bucket" in t["expr"] and t["format"] == "heatmap" for t in panel["targets"]), panel["title"]
        assert panel["options"]["calculate"] is False  # the engines' own buckets, not Grafana's
        assert panel["options"]["yAxis"]["unit"] == "s"
        assert panel["fieldConfig"]["defaults"]["unit"] == panel["options"]["cellValues"]["unit"] == "short"


def test_the_table_is_one_instant_row_per_target() -> None:
    (table,) = _panels("table")
    assert all(t["instant"] is True and t["range"] is False and t["format"] == "table" for t in table["targets"])


def test_latency_panels_are_in_seconds_and_tpot_is_per_request() -> None:
    by_title = {p["title"]: p for p in _panels("timeseries")}
    for panel in by_title.values():
        quantiles = [t for t in panel["targets"] if t["expr"].startswith("histogram_quantile")]
        if quantiles:
            assert panel["fieldConfig"]["defaults"]["unit"] == "s", panel["title"]
    tpot = by_title["TPOT per request p50 / p99 per deployment"]
    tpot_names = {f"{names_for(kind).tpot}_bucket" for kind in ("vllm", "sglang")}
    assert tpot_names == {"vllm:request_time_per_output_token_seconds_bucket",
                          "sglang:request_time_per_output_token_seconds_bucket"}  # fmt: skip
    assert all(_metrics(t["expr"]) == tpot_names for t in tpot["targets"])
    assert not any("inter_token" in t["expr"] for t in tpot["targets"])
    itl = by_title["Inter-token latency p50 / p99 per deployment"]
    assert all("sglang:inter_token_latency_seconds_bucket" in t["expr"] for t in itl["targets"])


# Fields the Prometheus data source reads off its annotation query, and the query variable's text
# (which Grafana writes on save), outside the generated types, which drop them.
BEYOND_THE_TYPES = {"/annotations/list[0]/builtIn", "/annotations/list[1]/step", "/annotations/list[1]/titleFormat",
                    "/annotations/list[1]/tagKeys", "/annotations/list[1]/textFormat", "/templating/list[1]/definition"}  # fmt: skip


def _dropped(given: Any, decoded: Any, path: str = "") -> Iterator[str]:
    """The paths of ``given`` missing from ``decoded`` or holding another value there."""
    if isinstance(given, dict) and isinstance(decoded, dict):
        for key, value in given.items():
            if key not in decoded:
                yield f"{path}/{key}"
            else:
                yield from _dropped(value, decoded[key], f"{path}/{key}")
    elif isinstance(given, list) and isinstance(decoded, list) and len(given) == len(decoded):
        for i, (a, b) in enumerate(zip(given, decoded)):
            yield from _dropped(a, b, f"{path}[{i}]")
    elif given != decoded:
        yield f"{path}: {given!r} became {decoded!r}"


def _through_grafanas_types(doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` decoded by Grafana's dashboard types (panel options and queries by each panel
    type's and data source's own) and encoded back: what they do not declare is gone."""
    grafana_plugins.register_default_plugins()
    decoded: dict[str, Any] = json.loads(json.dumps(GrafanaDashboard.from_json(doc), cls=GrafanaJSON))
    return decoded


def test_every_field_is_one_grafanas_dashboard_types_declare() -> None:
    """Issue 29 item 11: a misspelt option (``yaxis``), a panel option of another panel type or a
    query field Prometheus's queries lack would not survive the decode."""
    doc = json.loads(DASHBOARD.read_text())
    assert set(_dropped(doc, _through_grafanas_types(doc))) == BEYOND_THE_TYPES
    heatmap = next(p for p in doc["panels"] if p["type"] == "heatmap")
    heatmap["options"]["yaxis"] = heatmap["options"].pop("yAxis")
    heatmap["targets"][0]["fromat"] = "heatmap"
    (table,) = [p for p in doc["panels"] if p["type"] == "table"]
    table["options"]["calculate"] = False  # a heatmap option
    index = doc["panels"].index(heatmap), doc["panels"].index(table)
    assert set(_dropped(doc, _through_grafanas_types(doc))) - BEYOND_THE_TYPES == {
        f"/panels[{index[0]}]/options/yaxis", f"/panels[{index[0]}]/targets[0]/fromat", f"/panels[{index[1]}]/options/calculate",
    }
