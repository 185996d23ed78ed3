"""``fleet bench`` refuses bad flags with one line and exit 2 before loading anything (so nothing
can be sent); ``list`` and ``compare`` over a store of saved runs."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from launcher.bench import store
from launcher.config.benchspec import Shape, Slo
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
        (("--request-rate", "1,x"), "bad --request-rate '1,x': expected distinct requests/s above 0 (at most 10000), such as 0.5,1,2"),
        (("--request-rate", "1", "--concurrency", "2"), "--request-rate (open loop) and --concurrency (closed loop): give one"),
        (("--attainment-target", "0"), "bad --attainment-target 0: expected a percentage above 0, at most 100"),
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
    # different levels and GPU counts (issue 29 item 3): refused, one line, unless --force
    refused = fleet("bench", "compare", a.id, "glm-tuned", env=env)
    assert (refused.returncode, refused.stdout, refused.stderr) == (2, "", (
        f"fleet: error: {b.id} vs {a.id}: not like for like -- different levels: concurrency 4,12 vs concurrency 16 (the best "
        "levels below may be different loads; compare the common levels); different GPU counts: 16 vs 8; --force "
        "compares them anyway\n"))  # fmt: skip
    cmp = fleet("bench", "compare", a.id, "glm-tuned", "--force", env=env)
    assert cmp.returncode == 0, cmp
    assert cmp.stderr.splitlines()[1] == f"WARNING: {b.id} vs {a.id}: different GPU counts: 16 vs 8 (compared anyway: --force)"
    assert cmp.stdout.splitlines()[0] == (
        f"{b.id} vs {a.id}: +44.0% goodput (per 8 GPUs) at 50k+1.5k; at the best level -11.1% TTFT p50, +10.0% TPOT p50"
    )
    missing = fleet("bench", "compare", a.id, "nope", env=env)
    assert (missing.returncode, missing.stderr) == (2, f"fleet: error: no saved bench run 'nope' in {tmp_path} (see `fleet bench list`)\n")


def test_compare_refuses_another_shape_and_slo(tmp_path: Path) -> None:
    """Issue 29 item 3: one line, exit 2, every difference named; --force warns once per difference."""
    a = store.save(run(), tmp_path)
    b = store.save(run(deployment="glm-8k", started="2026-12-01T16:00:00Z",
                       shape=Shape(label="8k+1k", input_len=8000, output_len=1000),
                       slo=Slo(ttft_ms=2000, tpot_ms=50, origin="--slo")), tmp_path)  # fmt: skip
    env = {"FLEET_BENCH_DIR": str(tmp_path), "COLUMNS": "250"}
    refused = fleet("bench", "compare", a.id, b.id, env=env)
    assert (refused.returncode, refused.stdout, refused.stderr) == (2, "", (
        f"fleet: error: {b.id} vs {a.id}: not like for like -- different shapes: 50k+1.5k vs 8k+1k; different SLOs: "
        "ttft=10000,tpot=100 vs ttft=2000,tpot=50; --force compares them anyway\n"))  # fmt: skip
    forced = fleet("bench", "compare", a.id, b.id, "--force", env=env)
    assert forced.returncode == 0, forced
    assert forced.stderr.splitlines() == [
        f"WARNING: {b.id} vs {a.id}: different shapes: 50k+1.5k vs 8k+1k (compared anyway: --force)",
        f"WARNING: {b.id} vs {a.id}: different SLOs: ttft=10000,tpot=100 vs ttft=2000,tpot=50 (compared anyway: --force)",
    ]


def test_bench_gate_needs_a_rolling_rollout() -> None:
    proc = fleet("up", "playbooks/multinode-deepseek-pp2-6000d.yaml", "-i", "inventories/example.yaml", "--bench-gate")
    assert (proc.returncode, proc.stderr) == (
        2, "fleet: error: --bench-gate gates the batches of a rolling rollout: the playbook needs rollout.strategy: rolling\n"
    )


PD_REFUSED = "--bench-gate: PD deployment glm-pd rolls by cohort switch, which is not bench-gated (docs/bench.md)"


@pytest.mark.parametrize(
    ("command", "playbook", "flags", "message"),
    [
        ("restart", "playbooks/single-qwen-a100.yaml", (), "--bench-gate gates the batches of a rolling restart: give "
                                                           "--rolling (or rollout.strategy: rolling in the playbook)"),
        ("restart", "playbooks/pd-glm-2p1d-6000d.yaml", ("--rolling",), PD_REFUSED),
        ("up", "playbooks/pd-glm-2p1d-6000d.yaml", (), PD_REFUSED),
    ],
)  # fmt: skip
def test_bench_gate_refused(command: str, playbook: str, flags: tuple[str, ...], message: str) -> None:
    """Before any host is asked (the example inventory's hosts do not exist)."""
    proc = fleet(command, playbook, "-i", "inventories/example.yaml", *flags, "--bench-gate", "--secret", "HF_TOKEN=env:T",
                 env={"T": "x"})  # fmt: skip
    assert (proc.returncode, proc.stdout, proc.stderr) == (2, "", f"fleet: error: {message}\n")


def test_compare_shows_the_catalogs_gain_beside_the_measured_one(tmp_path: Path) -> None:
    """qwen/sglang-tp2-h100-tuned records +12.1% at 8k+1k against qwen/sglang-tp2-h100."""
    shape = Shape(label="8k+1k", input_len=8000, output_len=1000)
    base = store.save(run(deployment="qwen-base", recipe="qwen/sglang-tp2-h100", gpus=2, shape=shape,
                          levels=(level(4, 100.0, 100.0),)), tmp_path)  # fmt: skip
    tuned = store.save(run(deployment="qwen-tuned", recipe="qwen/sglang-tp2-h100-tuned", gpus=2, shape=shape,
                           started="2026-12-01T16:00:00Z", levels=(level(4, 120.0, 112.0, ttft=810.0),)), tmp_path)  # fmt: skip
    env = {"FLEET_BENCH_DIR": str(tmp_path)}
    out = fleet("bench", "compare", "qwen-base", "qwen-tuned", env=env)
    assert (out.returncode, out.stderr) == (0, ""), out
    assert out.stdout == (
        f"{tuned.id} vs {base.id}: +12.0% goodput (per 8 GPUs) at 8k+1k; at the best level -10.0% TTFT p50, +0.0% TPOT p50\n"
        f"  {base.id}: qwen-base gen 1 (qwen/sglang-tp2-h100), goodput 100.0 tok/s, per 8 GPUs 400.0, SLO ttft=10000,tpot=100\n"
        f"  {tuned.id}: qwen-tuned gen 1 (qwen/sglang-tp2-h100-tuned), goodput 112.0 tok/s, per 8 GPUs 448.0, SLO ttft=10000,tpot=100\n"
        "  catalog: qwen/sglang-tp2-h100-tuned vs its baseline qwen/sglang-tp2-h100: +12.1% normalized throughput within "
        "the SLO at 8k+1k; measured: +12.0% goodput (per 8 GPUs)\n"
        "  at concurrency 4: +12.0% goodput, -10.0% TTFT p50, +0.0% TPOT p50\n"  # level by level
    )
    # The other way round, the catalog's figure is still tuned against baseline.
    back = json.loads(fleet("bench", "compare", "qwen-tuned", "qwen-base", "--json", env=env).stdout)
    assert back["goodput_pct"] == pytest.approx(-10.714, abs=1e-3)
    assert back["catalog"] == {"tuned": "qwen/sglang-tp2-h100-tuned", "baseline": "qwen/sglang-tp2-h100", "workload": "8k+1k",
                               "gain_pct": 12.1, "metric": "normalized-throughput-within-slo", "measured_pct": pytest.approx(12.0),
                               "per_8gpu": True}  # fmt: skip
    # A pair the catalog does not compare (and another shape) shows no catalog line.
    other = store.save(run(deployment="glm", started="2026-12-01T17:00:00Z"), tmp_path)
    assert "catalog:" not in fleet("bench", "compare", "qwen-base", other.id, env=env).stdout
