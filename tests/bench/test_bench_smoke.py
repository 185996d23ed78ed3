"""Smoke tests of the hand-run benchmarks in bench/: each script runs on a tiny size and writes
well-formed results.  No timing is asserted (the numbers live in bench/README.md)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "bench"
PEERS = Path(os.environ.get("FLEET_BENCH_PEERS_VENV", "/var/cache/fleet-bench/peers-venv"))


def run(script: str, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([sys.executable, str(BENCH / script), *args], capture_output=True, text=True,
                          timeout=timeout, cwd=REPO)  # fmt: skip
    assert proc.returncode == 0, f"{script} rc={proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


def load(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(path.read_text())
    assert doc["machine"]["cpus"] >= 1 and len(doc["machine"]["loadavg_at_start"]) == 3
    return doc


def sandbox_prereqs(docker: bool) -> None:
    if not sys.platform.startswith("linux") or os.geteuid() != 0:
        pytest.skip("the sandbox benchmarks need Linux and root")
    for tool in ("ip", "unshare", "nsenter", "ssh-keygen", "/usr/sbin/sshd", *(("dockerd", "docker") if docker else ())):
        if shutil.which(tool) is None:
            pytest.skip(f"the sandbox benchmarks need {tool}")


def test_planrender_small(tmp_path: Path) -> None:
    out = tmp_path / "pr.json"
    proc = run("planrender.py", "--small", "--runs", "1", "--out", str(out))
    doc = load(out)
    s = doc["summary"]
    # one deployment of each kind: 8 single + 2x2 PP2 + (2x2 + 2 + router) PD + 2x2 PP2 units
    assert (s["hosts"], s["deployments"], s["units"]) == (22, 4, 23)
    assert set(s["phases_median_s"]) == {"imports", "inventory", "catalog", "playbooks", "plan", "render"}
    assert s["tracemalloc_peak_mib"] > 0 and s["maxrss_median_mib"] > 0
    assert "| plan + render |" in proc.stdout


@pytest.mark.sandbox
def test_fanout_tiny(tmp_path: Path) -> None:
    sandbox_prereqs(docker=False)
    tools = ["fleet", "fleet-up"]
    if (PEERS / "bin/ansible-playbook").exists() and (PEERS / "bin/pyinfra").exists():
        tools += ["ansible-f5", "pyinfra"]
    out = tmp_path / "fanout.json"
    proc = run("fanout.py", "--hosts", "2", "--runs", "1", "--tools", ",".join(tools), "--name", "bsmoke",
               "--out", str(out))  # fmt: skip
    doc = load(out)
    assert [(r["tool"], r["hosts"], r["ok"]) for r in doc["runs"]] == [(t, 2, True) for t in tools]
    fleet_run = next(r for r in doc["runs"] if r["tool"] == "fleet")
    assert sorted(fleet_run["trace"]["hosts"]) == ["h1", "h2"]
    assert [s for s, _, _ in fleet_run["trace"]["hosts"]["h1"]] == ["connect", "install", "start+status"]
    assert {row["tool"] for row in doc["summary"]["table"]} == set(tools)
    assert "| fleet |" in proc.stdout


@pytest.mark.sandbox
def test_bringup_tiny(tmp_path: Path) -> None:
    sandbox_prereqs(docker=True)
    out = tmp_path / "bringup.json"
    run("bringup.py", "--scenarios", "pp2-router", "--runs", "1", "--delay", "0", "--name", "bsmoke",
        "--out", str(out))  # fmt: skip
    doc = load(out)
    assert [(r["scenario"], r["preflight"], r["ok"], r["units"]) for r in doc["runs"]] == [
        ("pp2-router", True, True, 3), ("pp2-router --skip-preflight", False, True, 3)]
    for rec in doc["runs"]:
        tl = rec["timeline_s"]
        assert 0 < tl["first_event"] <= tl["engines_healthy"] <= tl["starting"] <= tl["healthy"] <= rec["wall_s"]
        assert rec["floor"]["ok"] and len(rec["floor"]["steps_s"]) == 2  # engines, then the router
    assert [s["scenario"] for s in doc["summary"]] == ["pp2-router", "pp2-router --skip-preflight"]


@pytest.mark.sandbox
def test_rolling_tiny(tmp_path: Path) -> None:
    sandbox_prereqs(docker=True)
    out = tmp_path / "rolling.json"
    run("rolling.py", "--groups", "2", "--runs", "1", "--delay", "0", "--name", "bsmoke", "--out", str(out))
    doc = load(out)
    (rec,) = doc["runs"]
    assert rec["ok"] and sorted(rec["own_s"]) == ["h1", "h2"] and len(rec["batches_s"]) == 2
    assert doc["summary"]["ratio_median"] == rec["ratio"]


@pytest.mark.sandbox
def test_weights_tiny(tmp_path: Path) -> None:
    sandbox_prereqs(docker=False)
    out = tmp_path / "weights.json"
    proc = run("weights.py", "--hosts", "2", "--files", "3", "--file-mib", "1", "--rate-mbit", "400",
               "--name", f"wt{os.getpid()}", "--out", str(out))
    runs = {(r["hosts"], r["mode"]): r for r in load(out)["runs"]}
    assert set(runs) == {(1, "hosts"), (2, "hosts"), (2, "source")} and all(r["ok"] for r in runs.values())
    # host to host the source is read once; the baseline reads it once per host
    assert (runs[(2, "hosts")]["from_source"], runs[(2, "source")]["from_source"]) == (3, 6)
    # the schedule's link-time bound (launcher/weights/spread.py: rarest first, two transfers per
    # link sharing its rate): 5 file-times against one copy's 3 with 3 files and 2 hosts (a chain
    # took 4; with 48 files it is 1.17x); every host from the source: 6 against 3.
    assert (runs[(2, "hosts")]["link_bound"], runs[(2, "source")]["link_bound"]) == (5 / 3, 2.0)
    assert "| 2 | source |" in proc.stdout


@pytest.mark.sandbox
def test_watch_tiny(tmp_path: Path) -> None:
    sandbox_prereqs(docker=True)
    out = tmp_path / "watch.json"
    run("watch.py", "--runs", "1", "--interval", "1", "--cpu-seconds", "3", "--name", "bwsmoke", "--out", str(out))
    doc = load(out)
    (rec,) = doc["recover"]
    assert rec["total_s"] >= rec["restart_and_health_s"] > 0 and rec["detect_s"] > 0
    assert [c["hosts"] for c in doc["cpu"]] == [5, 8] and all(c["cpu_s"] > 0 for c in doc["cpu"])
