"""``fleet bench`` refuses bad flags with one line and exit 2 before loading anything (so nothing
can be sent); ``list`` and ``compare`` over a store of saved runs."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from launcher.bench import store
from tests.fleetbench.test_report_store import level, run

REPO = Path(__file__).resolve().parents[2]


def fleet(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["fleet", *args], capture_output=True, text=True, cwd=REPO, timeout=60,
                          env={**os.environ, **(env or {})})  # fmt: skip


@pytest.mark.parametrize(
    ("flag", "message"),
    [
        (("--shape", "8k"), "bad shape '8k': expected IN+OUT token counts such as 8k+1k or 512+64"),
        (("--slo", "ttft=1"), "bad SLO 'ttft=1': expected ttft=MS,tpot=MS"),
        (("--concurrency", "4,0"), "bad --concurrency '4,0': expected distinct integers from 1 to 4096, such as 1,4,16"),
    ],
)
def test_bad_flags_one_line_exit_2(flag: tuple[str, ...], message: str) -> None:
    # An inventory that does not exist: the flags are refused before any input is read.
    proc = fleet("bench", "playbooks/sandbox/single.yaml", "-i", "/nonexistent/inv.yaml", *flag)
    assert (proc.returncode, proc.stdout, proc.stderr) == (2, "", f"fleet: error: {message}\n")


def test_list_and_compare(tmp_path: Path) -> None:
    a = store.save(run(), tmp_path)
    b = store.save(run(deployment="glm-tuned", gpus=8, started="2026-12-01T16:00:00Z",
                       levels=(level(16, 100.0, 72.0, ttft=800.0, tpot=66.0),)), tmp_path)  # fmt: skip
    env = {"FLEET_BENCH_DIR": str(tmp_path), "COLUMNS": "250"}
    listed = fleet("bench", "list", env=env)
    assert listed.returncode == 0 and a.id in listed.stdout and b.id in listed.stdout, listed
    assert [r["id"] for r in json.loads(fleet("bench", "list", "--json", env=env).stdout)] == [a.id, b.id]
    cmp = fleet("bench", "compare", a.id, "glm-tuned", env=env)
    assert cmp.returncode == 0, cmp
    assert cmp.stdout.splitlines()[0] == (
        f"{b.id} vs {a.id}: +44.0% goodput (per 8 GPUs) at 50k+1.5k; at the best level -11.1% TTFT p50, +10.0% TPOT p50"
    )
    missing = fleet("bench", "compare", a.id, "nope", env=env)
    assert (missing.returncode, missing.stderr) == (2, f"fleet: error: no saved bench run 'nope' in {tmp_path} (see `fleet bench list`)\n")


def test_bench_gate_needs_a_rolling_rollout() -> None:
    proc = fleet("up", "playbooks/multinode-deepseek-pp2-6000d.yaml", "-i", "inventories/example.yaml", "--bench-gate")
    assert (proc.returncode, proc.stderr) == (
        2, "fleet: error: --bench-gate gates the batches of a rolling rollout: the playbook needs rollout.strategy: rolling\n"
    )
