"""The bench gate's verdict (pure), its per-batch baselines, its spec from a playbook, and the
flag over the playbook."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Sequence

import pytest

from launcher.bench.gate import Gate, GateSpec, gate_spec, judge
from launcher.bench.results import Level
from launcher.bench.spec import default_slo, parse_shape
from launcher.config.inventory import load_inventory
from launcher.config.playbook import load_playbook
from launcher.config.recipes import open_catalog
from launcher.errors import FleetError, InputError
from tests.fleetbench.test_report_store import level

REPO = Path(__file__).resolve().parents[2]
BASE = level(2, 100.0, 100.0, ttft=50.0)


def test_within_the_threshold_passes() -> None:
    assert judge(BASE, level(2, 95.0, 91.0, ttft=54.9), 10, "w") is None


def test_slower_fails_with_both_numbers() -> None:
    slow = level(2, 50.0, 50.0, ttft=100.0)
    assert judge(BASE, slow, 10, "64+100 x2 (8 requests)") == (
        "bench gate: goodput dropped and TTFT p50 rose beyond 10% at 64+100 x2 (8 requests): "
        "goodput 100.0 -> 50.0 tok/s (-50.0%), TTFT p50 50.0 -> 100.0 ms (+100.0%)"
    )
    assert judge(BASE, level(2, 100.0, 100.0, ttft=56.0), 10, "w") == (
        "bench gate: TTFT p50 rose beyond 10% at w: goodput 100.0 -> 100.0 tok/s (+0.0%), TTFT p50 50.0 -> 56.0 ms (+12.0%)"
    )
    nothing = dataclasses.replace(BASE, completed=0, ttft_ms_p50=None)
    assert judge(BASE, nothing, 10, "w") is not None


PLAYBOOK = """\
name: g
recipe: qwen/sglang-tp2-h100-tuned
placement:
  single:
    hosts: h100
rollout:
  strategy: rolling
  bench_gate:
    concurrency: 2
    threshold_pct: {pct}
bench:
  shapes: [8k+1k]
  scale: 0.01
  slo: ttft=500,tpot=40
  tokenizer: fleet-words
"""


def test_spec_from_the_playbook(tmp_path: Path) -> None:
    pb = tmp_path / "g.yaml"
    pb.write_text(PLAYBOOK.format(pct=30))
    catalog = open_catalog()
    playbook = load_playbook(pb, catalog, load_inventory(REPO / "inventories" / "example.yaml"))
    spec = gate_spec(playbook, catalog.get(playbook.recipe))
    assert (spec.shape.input_len, spec.shape.output_len, spec.concurrency, spec.requests, spec.threshold_pct) == (80, 10, 2, 16, 30)
    assert (spec.slo.ttft_ms, spec.tokenizer) == (500.0, "fleet-words")


def test_threshold_checked_at_its_line(tmp_path: Path) -> None:
    pb = tmp_path / "g.yaml"
    pb.write_text(PLAYBOOK.format(pct=150))
    with pytest.raises(InputError) as err:
        load_playbook(pb, open_catalog(), load_inventory(REPO / "inventories" / "example.yaml"))
    assert str(err.value) == f"{pb}:10:20: rollout/bench_gate/threshold_pct: should be between 0 and 100 (percent)"


def test_a_pd_playbook_refuses_a_bench_gate_at_its_line(tmp_path: Path) -> None:
    pd = (REPO / "playbooks" / "pd-glm-2p1d-6000d.yaml").read_text()
    pb = tmp_path / "pd.yaml"
    pb.write_text(pd.replace("  drain_timeout_s: 300\n", "  drain_timeout_s: 300\n  bench_gate:\n    threshold_pct: 20\n"))
    with pytest.raises(InputError) as err:
        load_playbook(pb, open_catalog(), load_inventory(REPO / "inventories" / "example.yaml"))
    assert str(err.value) == (
        f"{pb}:18:3: rollout/bench_gate: a PD deployment rolls by cohort switch, which is not bench-gated: the serving "
        "cohort carries every request, so nothing measures it like the idle new one (docs/bench.md)"
    )


@pytest.mark.parametrize(("pct", "flag", "gated"), [(30, None, True), (30, False, False), (None, None, False), (None, True, True)])
def test_the_flag_over_the_playbook(tmp_path: Path, pct: int | None, flag: bool | None, gated: bool) -> None:
    """``--bench-gate`` / ``--no-bench-gate`` / neither (the playbook's ``rollout.bench_gate``)."""
    from launcher.cli.rolling import with_bench_gate
    from launcher.pipeline import deployment, load_inputs, target_of
    from launcher.rolling.roll import RollOptions

    pb = tmp_path / "g.yaml"
    text = PLAYBOOK.format(pct=pct)
    pb.write_text(text if pct is not None else text.replace("  bench_gate:\n    concurrency: 2\n    threshold_pct: None\n", ""))
    inputs = load_inputs(pb, REPO / "inventories" / "example.yaml")
    options = with_bench_gate(RollOptions(), inputs.playbook, target_of(deployment(inputs)), flag)
    assert (options.gate is not None) == gated
    assert options.gate is None or options.gate.spec.threshold_pct == (pct or 10)  # type: ignore[attr-defined]


class Scripted(Gate):
    """The gate with its client replaced by the levels a test gives, in order."""

    def __init__(self, levels: list[Level]) -> None:
        spec = GateSpec(shape=parse_shape("32+30"), slo=default_slo(), concurrency=2, requests=8, threshold_pct=10,
                        model="m", tokenizer="fleet-words")  # fmt: skip
        super().__init__(spec, Path("/nonexistent"), {})
        self.levels = levels

    def _measure(self, urls: Sequence[str]) -> Level:
        return self.levels.pop(0)


def test_each_batch_is_compared_with_its_own_baseline() -> None:
    """The machine got 30% slower between batch 1 and batch 2: batch 2's new generation is as
    fast as its own previous generation, measured right before it restarted, and passes."""
    loaded = level(2, 70.0, 70.0, ttft=65.0)
    gate = Scripted([BASE, level(2, 99.0, 99.0, ttft=51.0), loaded, level(2, 69.0, 69.0, ttft=66.0),
                     dataclasses.replace(BASE, completed=0, ttft_ms_p50=None), level(2, 30.0, 30.0, ttft=66.0)])  # fmt: skip
    gate.before(["u1"])
    assert gate.after(["u1"]) is None
    gate.before(["u2"])
    assert gate.after(["u2"]) is None
    gate.before(["u3"])  # completed nothing: the last baseline stays
    assert gate.after(["u3"]) == ("bench gate: goodput dropped beyond 10% at 32+30 x2 (8 requests): "
                                  "goodput 70.0 -> 30.0 tok/s (-57.1%), TTFT p50 65.0 -> 66.0 ms (+1.5%)")  # fmt: skip
    assert [n.split(" at ")[0] for n in gate.notes] == [
        "bench gate baseline (previous generation)", "bench gate passed",
        "bench gate baseline (previous generation)", "bench gate passed",
        "bench gate: the previous generation of this batch completed no request",
    ]
    assert gate.notes[3] == "bench gate passed at 32+30 x2 (8 requests): goodput 70.0 -> 69.0 tok/s (-1.4%), TTFT p50 65.0 -> 66.0 ms (+1.5%)"


def test_the_first_baseline_must_complete_requests() -> None:
    gate = Scripted([dataclasses.replace(BASE, completed=0, ttft_ms_p50=None)])
    with pytest.raises(FleetError, match=r"^bench gate: the previous generation completed no request at 32\+30 x2 \(8 requests\)$"):
        gate.before(["u1"])
