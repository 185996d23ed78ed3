"""A real Prometheus (the OS package) scrapes the targets fleet writes for a sandbox deployment,
and ``fleet top`` reads the load, on the sandbox: four single-node replicas on h1..h4 behind the
deployment's own real sglang-router on h5 (``rolling-router.yaml`` as deployment ``sb-obs``, with
``metrics: {targets_file: ...}``).

- ``fleet up`` writes the targets file itself; Prometheus (started here on 127.0.0.1 with its own
  data dir, stopped by its PID) reports all 5 targets up with fleet's labels.
- ``fleet top --once --json`` reports requests running while a bounded load runs through the
  router, and 0 everywhere after it; ``fleet top`` refreshes until Ctrl-C and then exits 0.
- Every query of dashboards/fleet.json runs on that Prometheus and finds the deployment's series.
- A rolling ``fleet up`` of generation 2 rewrites the file after each batch (a mixed-generation
  file is seen mid-rollout) and Prometheus, the same process, follows to generation 2 with every
  target up; the dashboard's rollout annotation marks generation 2 of every engine group.
  ``fleet down`` empties the deployment's targets and Prometheus drops them.

Run (root, ~3 min): ``FLEET_SANDBOX_NAME=obs1 python -m pytest -x -q tests/observe/test_sandbox_prometheus.py``
"""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml

from launcher.observe.load import samples
from launcher.sandbox.client import Sandbox
from tests.rolling.conftest import fleet, free_port, http, ok, router_variant, wait_for

pytestmark = pytest.mark.sandbox

DEPLOYMENT = "sb-obs"
PORTS = {"http": 31700, "router": 8700, "router_metrics": 29700}
ENGINE_HOSTS = ("h1", "h2", "h3", "h4")


def _playbook(tmp: Path, generation: int, targets: Path) -> str:
    path = Path(router_variant(tmp, DEPLOYMENT, PORTS, f"obs-v{generation}",
                               env={"FLEET_GENERATION": str(generation), "FLEET_STANDIN_TOKEN_MS": "20"}))  # fmt: skip
    doc = yaml.safe_load(path.read_text())
    doc["metrics"] = {"targets_file": str(targets)}
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return str(path)


class Prometheus:
    """The Debian package's prometheus on 127.0.0.1 (its own config and data dir under ``tmp``),
    reading ``targets`` through file_sd; owned by this test and stopped by its PID."""

    def __init__(self, tmp: Path, targets: Path) -> None:
        binary = shutil.which("prometheus")
        if binary is None:
            pytest.skip("needs the prometheus binary (apt: prometheus; scripts/install.sh installs it)")
        config = tmp / "prometheus.yml"
        config.write_text(yaml.safe_dump({
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
            "scrape_configs": [{"job_name": "fleet", "file_sd_configs": [{"files": [str(targets)], "refresh_interval": "1s"}]}],
        }))  # fmt: skip
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log = (tmp / "prometheus.log").open("w")
        self.proc = subprocess.Popen(
            [binary, f"--config.file={config}", f"--storage.tsdb.path={tmp / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}"],
            stdout=self.log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        wait_for("prometheus ready", self._ready, 60)

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(self.base + "/-/ready", timeout=5) as r:
                return r.status == 200
        except OSError:
            return False

    def api(self, path: str, **params: str) -> Any:
        url = f"{self.base}/api/v1/{path}" + (f"?{urllib.parse.urlencode(params)}" if params else "")
        with urllib.request.urlopen(url, timeout=10) as r:
            doc = json.loads(r.read())
        assert doc["status"] == "success", doc
        return doc["data"]

    def targets(self) -> list[dict[str, Any]]:
        active: list[dict[str, Any]] = self.api("targets", state="active")["activeTargets"]
        return [t for t in active if t["labels"].get("deployment") == DEPLOYMENT]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.log.close()


Setup = tuple[Sandbox, Path, Path, Prometheus]


@pytest.fixture(scope="module")
def deployed(sandbox_fleet: Sandbox, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    sb = sandbox_fleet
    tmp = tmp_path_factory.mktemp("observe")
    targets = tmp / "sd" / "fleet.json"
    prom = Prometheus(tmp, targets)
    v1 = _playbook(tmp, 1, targets)
    try:
        ok(fleet(sb, "up", v1, "--skip-preflight", "--quiet"))
        yield sb, tmp, targets, prom
    finally:
        prom.stop()
        fleet(sb, "down", v1, "--quiet")


def _generations(targets: Path) -> dict[str, str]:
    return {g["labels"]["unit"]: g["labels"]["generation"] for g in json.loads(targets.read_text())}


def test_prometheus_scrapes_every_target_fleet_wrote_with_its_labels(deployed: Setup) -> None:
    sb, tmp, targets, prom = deployed
    groups = json.loads(targets.read_text())
    assert sorted(g["labels"]["role"] for g in groups) == ["router", "single", "single", "single", "single"]
    # `fleet metrics targets` writes what `fleet up`'s hook wrote
    by_hand = tmp / "by-hand.json"
    ok(fleet(sb, "metrics", "targets", _playbook(tmp, 1, targets), "-o", str(by_hand)))
    assert json.loads(by_hand.read_text()) == groups

    def all_up() -> list[dict[str, Any]] | None:
        found = prom.targets()
        return found if len(found) == 5 and all(t["health"] == "up" for t in found) else None

    found = wait_for("prometheus: 5 targets of sb-obs up", all_up, 120)
    addresses = {g["targets"][0]: g["labels"] for g in groups}
    for t in found:
        labels = addresses[t["labels"]["instance"]]
        assert {k: t["labels"][k] for k in labels} == labels  # every fleet label, as written
        assert labels["generation"] == "1" and labels["deployment"] == DEPLOYMENT
        assert labels["recipe"] == "qwen/sglang-tp2-h100-tuned"
        host = labels["host"]
        assert t["labels"]["instance"].startswith(sb.host(host).data_ip + ":")
    # the engines' own series carry fleet's labels: a query by deployment and role works
    series = wait_for(
        "sglang:num_running_reqs of 4 engines",
        lambda: (r := prom.api("query", query=f'sglang:num_running_reqs{{deployment="{DEPLOYMENT}",role="single"}}')["result"])
        and len(r) == 4 and r,
        120,
    )  # fmt: skip
    assert {s["metric"]["host"] for s in series} == set(ENGINE_HOSTS)


def _top(sb: Sandbox, playbook: str) -> list[dict[str, Any]]:
    proc = ok(fleet(sb, "top", playbook, "--once", "--json", "--interval", "1"))
    rows: list[dict[str, Any]] = json.loads(proc.stdout)
    return rows


def test_top_reports_running_requests_under_load_and_none_after(deployed: Setup) -> None:
    sb, tmp, targets, _ = deployed
    playbook = _playbook(tmp, 1, targets)
    router = f"http://{sb.host('h5').data_ip}:{PORTS['router']}"
    # 2500 x 20 ms: 50 s each, so all 8 are still running when `fleet top --once` (two readings 1 s
    # apart, each over SSH) reads them, even when the machine is loaded (CI dry run 11: with 10 s
    # requests, a reading at load ~17 came after some had ended)
    body = {"model": "qwen", "prompt": "hello fleet", "max_tokens": 2500}
    results: list[int] = []
    threads = [threading.Thread(target=lambda: results.append(http(router + "/v1/completions", body, timeout=240)[0]))
               for _ in range(8)]  # fmt: skip
    for t in threads:
        t.start()
    # `fleet top` reads once all 8 are running at the engines (read on each engine's own /metrics;
    # a fixed 1 s for them to get through the router was a guess on a loaded machine).  A hang
    # bound, not a speed check: fewer than 8 never running fails here.
    engines_url = [f"http://{sb.host(h).data_ip}:{PORTS['http']}/metrics" for h in ENGINE_HOSTS]

    def running_at_engines() -> float:
        total = 0.0
        for url in engines_url:
            with urllib.request.urlopen(url, timeout=30) as r:
                total += sum(v for _, v in samples(r.read().decode()).get("sglang:num_running_reqs", []))
        return total

    wait_for("8 requests running at the engines", lambda: running_at_engines() == 8, 40)
    busy = {r["unit"]: r for r in _top(sb, playbook)}
    for t in threads:
        t.join()
    assert results == [200] * 8
    engines = [r for r in busy.values() if r["role"] == "single"]
    assert len(engines) == 4 and all(r["state"] == "running" and r["generation"] == 1 for r in engines)
    assert sum(r["running"] for r in engines) == 8, busy
    assert all(r["kv_usage"] > 0 for r in engines if r["running"])
    assert any(r["tokens_per_s"] and r["tokens_per_s"] > 0 for r in engines)
    (router_row,) = [r for r in busy.values() if r["role"] == "router"]
    assert router_row["kind"] == "sglang-router" and router_row["running"] == 8
    # after the load: 0 everywhere (a gauge may trail the last response by a moment: read again)
    readings: list[list[tuple[str, float, float | None]]] = []

    def idle() -> bool:
        rows = _top(sb, playbook)
        readings.append([(r["unit"], r["running"], r["waiting"]) for r in rows])
        return all(r["running"] == 0 and r["waiting"] in (0, None) for r in rows)

    deadline = time.monotonic() + 120  # a hang bound: each reading is a `fleet top` over SSH
    while not idle():
        assert time.monotonic() < deadline, readings


DASHBOARD = Path(__file__).resolve().parents[2] / "dashboards" / "fleet.json"


def _dashboard_exprs() -> tuple[list[tuple[str, str]], str]:
    """(panel title, expr) of every panel query, and the rollout annotation's expr, for sb-obs."""
    doc = json.loads(DASHBOARD.read_text())
    panels = [(p["title"], t["expr"].replace("$deployment", DEPLOYMENT)) for p in doc["panels"] for t in p["targets"]]
    (ann,) = [a["expr"].replace("$deployment", DEPLOYMENT) for a in doc["annotations"]["list"] if "expr" in a]
    return panels, ann


def test_every_dashboard_query_runs_on_prometheus_and_finds_the_deployment(deployed: Setup) -> None:
    """Prometheus's own PromQL parser accepts every query of dashboards/fleet.json and each finds
    series of the sandbox deployment (after the load above: the histograms have counts), the
    per-request TPOT panel included (SGLang 0.5.23's histogram, issue 29 item 10)."""
    _, _, _, prom = deployed
    panels, _ = _dashboard_exprs()
    empty = []
    for title, expr in panels:
        result = prom.api("query", query=expr)["result"]  # a query Prometheus cannot parse fails here
        if not result:
            empty.append(title)
    assert empty == [], f"no series for: {empty}"


def test_top_live_view_refreshes_until_ctrl_c_and_exits_0(deployed: Setup, tmp_path: Path) -> None:
    from tests.cli_process import WAIT_S, CliProcess

    sb, tmp, targets, _ = deployed
    argv = ["fleet", "top", _playbook(tmp, 1, targets), "-i", sb.inventory, "--known-hosts", sb.known_hosts,
            "--interval", "0.5"]  # fmt: skip
    cli = CliProcess(argv, tmp_path, "top")
    try:
        # Not a terminal: each reading (status and metrics over SSH) is appended; two of them is
        # a refresh.  WAIT_S bounds a hang, it is not a speed check.
        deadline = time.monotonic() + WAIT_S
        while cli.stdout.count("fleet-sb-obs-router-r0") < 2 and cli.proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.5)
        assert cli.stdout.count("fleet-sb-obs-router-r0") >= 2, (cli.stdout, cli.stderr)
        assert cli.proc.poll() is None, cli.stderr  # still refreshing
        cli.sigint()
        assert cli.proc.wait(30) == 0, cli.stderr
    finally:
        cli.close()
    assert "running" in cli.stdout, cli.stdout


def test_rolling_up_moves_the_targets_to_the_new_generation_without_a_prometheus_restart(deployed: Setup) -> None:
    sb, tmp, targets, prom = deployed
    pid = prom.proc.pid
    seen: list[tuple[str, ...]] = []
    done = threading.Event()

    def watch() -> None:  # what Prometheus would read, as the rollout goes
        while not done.is_set():
            gens = _generations(targets)
            snapshot = tuple(gens[u] for u in sorted(gens) if "single" in u)
            if not seen or seen[-1] != snapshot:
                seen.append(snapshot)
            time.sleep(0.05)

    watcher = threading.Thread(target=watch)
    began = time.time()
    watcher.start()
    try:
        ok(fleet(sb, "up", _playbook(tmp, 2, targets), "--skip-preflight", "--quiet"))
    finally:
        done.set()
        watcher.join()
    assert seen[0] == ("1",) * 4 and seen[-1] == ("2",) * 4
    assert any(set(s) == {"1", "2"} for s in seen), seen  # rewritten after each batch, not only at the end

    def followed() -> list[dict[str, Any]] | None:
        found = prom.targets()
        engines = [t for t in found if t["labels"]["role"] == "single"]
        ok_ = len(found) == 5 and all(t["health"] == "up" for t in found)
        return found if ok_ and sorted(t["labels"]["generation"] for t in engines) == ["2"] * 4 else None

    wait_for("prometheus: the engines' targets on generation 2, all up", followed, 120)
    # the dashboard's rollout annotation, evaluated over the rollout as Grafana does (a range
    # query), marks the new generation of every engine group
    _, annotation = _dashboard_exprs()

    def marked() -> set[str] | None:
        found = prom.api("query_range", query=annotation, start=f"{began:.0f}", end=f"{time.time():.0f}", step="2")
        groups = {r["metric"]["group"] for r in found["result"] if r["metric"]["generation"] == "2"}
        return groups if groups >= {f"{DEPLOYMENT}/single{i}" for i in range(4)} else None

    wait_for("the rollout annotation marking generation 2 of every engine group", marked, 120)
    assert prom.proc.poll() is None and prom.proc.pid == pid  # the same Prometheus, never restarted


def test_down_empties_the_deployments_targets(deployed: Setup) -> None:
    sb, tmp, targets, prom = deployed
    ok(fleet(sb, "down", _playbook(tmp, 2, targets), "--quiet"))
    assert [g for g in json.loads(targets.read_text()) if g["labels"]["deployment"] == DEPLOYMENT] == []
    wait_for("prometheus: sb-obs targets gone", lambda: prom.targets() == [], 120)
