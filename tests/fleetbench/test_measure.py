"""The measurement is right (issue 15's first proof), with the real client (aiperf, from
scripts/install.sh's venv) against the engine stand-in on loopback: at FLEET_STANDIN_TOKEN_MS=T
the reported TPOT p50 is within 10% of T and output tok/s within 10% of concurrency / T; a
stand-in failing every 5th request shows exactly those failures, and the stand-in's own log
agrees on every request."""

from __future__ import annotations

from pathlib import Path
import pytest

from launcher.bench.client import LevelSpec, aiperf_path, run_level
from launcher.bench.results import level_from_aiperf
from launcher.bench.spec import Shape, Slo
from tests.sandbox.test_standin import Proc, free_port, procs, wait_status  # noqa: F401 - procs: fixture

pytestmark = pytest.mark.skipif(
    not Path(aiperf_path()).is_file(), reason=f"aiperf not installed at {aiperf_path()} (scripts/install.sh)"
)


def standin(procs: list[Proc], **env: str) -> str:
    port = free_port()
    p = Proc(["vllm", "serve", "tiny", "--host", "127.0.0.1", "--port", str(port)], **env)
    procs.append(p)
    url = f"http://127.0.0.1:{port}"
    wait_status(f"{url}/health", 200)
    return url


def spec(url: str, out: int, concurrency: int, requests: int) -> LevelSpec:
    return LevelSpec(
        urls=(url,), model="tiny", tokenizer="fleet-words", shape=Shape(label="t", input_len=32, output_len=out),
        slo=Slo(ttft_ms=1000, tpot_ms=1000, origin="test"), concurrency=concurrency, requests=requests,
        duration_s=120, timeout_s=60,
    )  # fmt: skip


@pytest.mark.parametrize(("token_ms", "out"), [(20, 100), (50, 40)])
def test_tpot_and_throughput_match_the_token_delay(procs: list[Proc], tmp_path: Path, token_ms: int, out: int) -> None:
    url = standin(procs, FLEET_STANDIN_TOKEN_MS=str(token_ms))
    lv = level_from_aiperf(run_level(spec(url, out, 2, 6), tmp_path, {}), 2)
    assert (lv.completed, lv.failed) == (6, 0)
    assert lv.tpot_ms_p50 == pytest.approx(token_ms, rel=0.10)
    assert lv.output_throughput_tok_s == pytest.approx(2 / (token_ms / 1000), rel=0.10)
    assert lv.input_throughput_tok_s == pytest.approx(lv.request_throughput * 32, rel=0.02)
    assert lv.goodput_tok_s == pytest.approx(lv.output_throughput_tok_s, rel=0.02)  # all within the loose SLO


def test_every_fifth_request_failing_is_counted(procs: list[Proc], tmp_path: Path) -> None:
    url = standin(procs, FLEET_STANDIN_TOKEN_MS="5", FLEET_STANDIN_FAIL_EVERY="5")
    lv = level_from_aiperf(run_level(spec(url, 8, 2, 15), tmp_path, {}), 2)
    assert (lv.completed, lv.failed) == (12, 3)
    procs[0].p.terminate()
    _, events, _ = procs[0].finish()
    kinds = [e["event"] for e in events]
    assert (kinds.count("request"), kinds.count("request_failed")) == (12, 3)
