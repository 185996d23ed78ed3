"""dashboards/fleet-rules.yaml: Prometheus's own `promtool` accepts the rules and runs them over
input series (tests/observe/fleet-rules.test.yaml: each alert fires where it should and stays
quiet beside it), and every metric and label a rule names is one the targets expose."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Iterator

import yaml

from launcher.config.benchspec import DEFAULT_TPOT_MS, DEFAULT_TTFT_MS
from launcher.observe.load import samples
from launcher.observe.names import names_for
from launcher.observe.targets import LABELS
from launcher.sandbox.standin.metrics import Stats
from launcher.watch.metrics import Metrics
from tests.observe.test_dashboard import ENGINE_LABELS, PROMETHEUS_LABELS, _exposed, _labels, _metrics

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "dashboards" / "fleet-rules.yaml"
RULE_TESTS = Path(__file__).with_name("fleet-rules.test.yaml")
# Read where the stand-in does not serve them: the routers' per-worker health (0/1), seen flip to
# 0 on the real sglang-router 0.3.2 and vllm-router 0.1.17 once their worker failed its checks;
# SGLang's PD failure counters (python/sglang/srt/metrics/collector.py, SchedulerMetricsCollector).
ELSEWHERE = {"smg_worker_health", "vllm_router_worker_health",
             "sglang:num_transfer_failed_reqs_total", "sglang:num_bootstrap_failed_reqs_total"}  # fmt: skip
RULE_LABELS = {"worker", "state", "severity"}  # the routers' and the watch's own, the alerts' own


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    tool = shutil.which("promtool")
    assert tool, "promtool missing: scripts/install.sh installs the prometheus package"
    return subprocess.run([tool, *args], capture_output=True, text=True, timeout=120, cwd=ROOT)


def _rules() -> Iterator[dict[str, str]]:
    for group in yaml.safe_load(RULES.read_text())["groups"]:
        yield from group["rules"]


def test_promtool_checks_the_rules() -> None:
    done = _promtool("check", "rules", str(RULES))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS: 18 rules found" in done.stdout


def test_promtool_runs_the_rules_over_input_series() -> None:
    done = _promtool("test", "rules", str(RULE_TESTS))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_every_alert_the_issue_asks_for_has_a_firing_case() -> None:
    alerts = {r["alert"] for r in _rules() if "alert" in r}
    assert alerts == {"FleetGroupStalled", "FleetRankDownLeaderUp", "FleetDeploymentPartiallyUp", "FleetDeploymentDown",
                      "FleetKVCacheNearFull", "FleetQueueGrowing", "FleetTTFTSLOBurn", "FleetTPOTSLOBurn",
                      "FleetRouterNoHealthyWorker", "FleetPDTransferFailures"}  # fmt: skip
    fired = set()
    for case in yaml.safe_load(RULE_TESTS.read_text())["tests"]:
        fired |= {t["alertname"] for t in case.get("alert_rule_test", []) if t["exp_alerts"]}
    assert fired == alerts


def test_rules_name_exposed_metrics_and_known_labels() -> None:
    watch_metrics = Metrics()
    watch_metrics.surveyed("d", {"healthy": 1}, 0.0)  # what fleet watch exports after a survey
    watch = {s.name for family in watch_metrics.registry.collect() for s in family.samples}
    exposed = _exposed() | set(samples(Stats("vllm", "m", 4, 100, kv_transfers=True).render().decode())) | watch | ELSEWHERE
    allowed = set(LABELS) | ENGINE_LABELS | PROMETHEUS_LABELS | RULE_LABELS
    recorded = {r["record"] for r in _rules() if "record" in r}
    for rule in _rules():
        names = _metrics(rule["expr"]) - recorded
        assert names <= exposed, f"{rule.get('alert') or rule['record']}: {sorted(names - exposed)} not exposed"
        assert _labels(rule["expr"]) <= allowed, f"{rule['expr']}: {sorted(_labels(rule['expr']) - allowed)}"


def test_the_slo_thresholds_are_fleets_default_slo() -> None:
    exprs = {r["record"]: r["expr"] for r in _rules() if "record" in r}
    assert DEFAULT_TTFT_MS == 10000 and DEFAULT_TPOT_MS == 100  # the le bounds below, in seconds
    assert all('le="10.0"' in exprs[f"fleet:ttft_slo_miss:ratio_rate{w}"] for w in ("5m", "1h"))
    assert all('le="0.1"' in exprs[f"fleet:tpot_slo_miss:ratio_rate{w}"] for w in ("5m", "1h"))
    # both engines' per-request TPOT (issue 29 item 10), each with a 0.1 s bucket bound
    for engine in ("vllm", "sglang"):
        tpot = names_for(engine).tpot
        assert all(f"{tpot}_bucket" in _metrics(exprs[f"fleet:tpot_slo_miss:ratio_rate{w}"]) for w in ("5m", "1h"))
        served = samples(Stats(engine, "m", 4, 100).render().decode())[f"{tpot}_bucket"]
        assert "0.1" in {labels["le"] for labels, _ in served}, engine
