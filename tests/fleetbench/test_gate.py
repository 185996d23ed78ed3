"""The bench gate's verdict (pure), its per-batch baselines, its spec from a playbook, and the
flag over the playbook."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Sequence

import pytest

from launcher.bench.gate import Baseline, Gate, GateSpec, gate_spec, judge
from launcher.bench.results import Level
from launcher.config.benchspec import default_slo, parse_shape
from launcher.config.inventory import load_inventory
from launcher.config.playbook import load_playbook
from launcher.config.recipes import open_catalog
from launcher.errors import FleetError, InputError
from tests.fleetbench.test_report_store import level

REPO = Path(__file__).resolve().parents[2]
def lv(att: float, ttft99: float, tpot99: float, completed: int = 10) -> Level:
    """A gate measurement: ``att`` of its requests within both SLOs, TTFT and TPOT p99."""
    base = level(2, 100.0, 100.0)
    return dataclasses.replace(base, completed=completed, failed=0, good_requests=round(att * completed),
                               ttft_ms_p99=ttft99, tpot_ms_p99=tpot99)  # fmt: skip


QUIET = Baseline(runs=(lv(1.0, 100.0, 20.0), lv(1.0, 104.0, 20.4)), floor_pct=10)
NOISY = Baseline(runs=(lv(0.9, 100.0, 20.0), lv(1.0, 130.0, 20.0)), floor_pct=10)


def test_thresholds_come_from_the_baselines_repeat_noise() -> None:
    """Issue 29 item 6: two back-to-back baseline runs give each metric's noise; its threshold
    is the larger of the floor and twice that noise (attainment in points, p99s in percent)."""
    assert QUIET.ref("ttft_ms_p99") == 102.0
    assert QUIET.noise_pct("ttft_ms_p99") == pytest.approx(3.92, abs=0.01)
    assert QUIET.threshold_pct("ttft_ms_p99") == 10  # the floor: 2 x 3.9% is under it
    assert NOISY.noise_pct("ttft_ms_p99") == pytest.approx(26.09, abs=0.01)
    assert NOISY.threshold_pct("ttft_ms_p99") == pytest.approx(52.17, abs=0.01)
    assert (NOISY.noise_pct("attainment"), NOISY.threshold_pct("attainment")) == (pytest.approx(10.0), pytest.approx(20.0))
    assert NOISY.describe().startswith("attainment 90%, 100% (noise 10.0pts, threshold 20.0pts); TTFT p99 100.0, 130.0 ms "
                                       "(noise 26.1%, threshold 52.2%)")  # fmt: skip


def test_judged_on_attainment_and_p99_within_the_noise_derived_thresholds() -> None:
    assert judge(QUIET, lv(1.0, 110.0, 22.0), "w") is None
    # +30% TTFT p99 fails the quiet baseline (threshold 10%) and passes the noisy one (52.2%)
    assert judge(NOISY, lv(0.9, 132.6, 20.0), "w") is None
    assert judge(QUIET, lv(1.0, 132.6, 20.0), "64+100 x2 (8 requests)") == (
        "bench gate: TTFT p99 rose beyond the threshold at 64+100 x2 (8 requests): attainment 100% -> 100% (+0.0 pts, "
        "threshold 10.0 pts), TTFT p99 102.0 -> 132.6 ms (+30.0%, threshold 10.0%), TPOT p99 20.2 -> 20.0 ms (-1.0%, "
        "threshold 10.0%)"
    )
    reason = judge(QUIET, lv(0.6, 100.0, 30.0), "w")
    assert reason is not None and reason.startswith("bench gate: attainment dropped and TPOT p99 rose beyond the threshold at w: ")
    assert judge(QUIET, lv(1.0, 100.0, 20.0, completed=0), "w") == "bench gate: the new generation completed no request at w"


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
    from launcher.rolling.options import with_bench_gate
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
    fast as its own previous generation, measured twice right before it restarted, and passes;
    batch 3's baseline completed nothing, so the last one judges it (and it fails twice)."""
    loaded = lv(1.0, 130.0, 26.0)
    gate = Scripted([lv(1.0, 100.0, 20.0), lv(1.0, 100.0, 20.0), lv(1.0, 101.0, 20.0),
                     loaded, loaded, lv(1.0, 131.0, 26.0),
                     lv(1.0, 100.0, 20.0, completed=0), loaded, lv(0.5, 131.0, 26.0), lv(0.6, 132.0, 26.0)])  # fmt: skip
    gate.before(["u1"])
    assert gate.after(["u1"]) is None
    gate.before(["u2"])
    assert gate.after(["u2"]) is None
    gate.before(["u3"])  # completed nothing: the last baseline stays
    assert gate.after(["u3"]) == ("bench gate: attainment dropped beyond the threshold at 32+30 x2 (8 requests): "
                                  "attainment 100% -> 60% (-40.0 pts, threshold 10.0 pts), TTFT p99 130.0 -> 132.0 ms "
                                  "(+1.5%, threshold 10.0%), TPOT p99 26.0 -> 26.0 ms (+0.0%, threshold 10.0%) "
                                  "(measured twice; the first measurement: attainment 100% -> 50% (-50.0 pts, threshold "
                                  "10.0 pts), TTFT p99 130.0 -> 131.0 ms (+0.8%, threshold 10.0%), TPOT p99 26.0 -> 26.0 ms "
                                  "(+0.0%, threshold 10.0%))")  # fmt: skip
    assert [n.split(" at ")[0] for n in gate.notes] == [
        "bench gate baseline (previous generation, 2 runs back to back)", "bench gate passed",
        "bench gate baseline (previous generation, 2 runs back to back)", "bench gate passed",
        "bench gate: the previous generation of this batch completed no request",
        "bench gate: attainment dropped beyond the threshold",
    ]
    assert gate.notes[2].endswith("(threshold: the larger of 10 and 2 x the noise)")
    assert gate.notes[-1].endswith("; measuring again")
    assert gate.levels == []


def test_one_failed_measurement_is_taken_again_and_a_pass_passes() -> None:
    """A load spike stalled one request of the first measurement (TPOT p99 +161%, as a CI run
    measured it for a generation as fast as the baseline): the second passes, so the batch does."""
    gate = Scripted([lv(1.0, 100.0, 20.0), lv(1.0, 100.0, 20.0), lv(0.8, 100.0, 52.2), lv(1.0, 101.0, 20.2)])
    gate.before(["u1"])
    assert gate.after(["u1"]) is None
    assert gate.notes[1:] == [
        "bench gate: attainment dropped and TPOT p99 rose beyond the threshold at 32+30 x2 (8 requests): attainment "
        "100% -> 80% (-20.0 pts, threshold 10.0 pts), TTFT p99 100.0 -> 100.0 ms (+0.0%, threshold 10.0%), TPOT p99 "
        "20.0 -> 52.2 ms (+161.0%, threshold 10.0%); measuring again",
        "bench gate passed when measured again at 32+30 x2 (8 requests): attainment 100% -> 100% (+0.0 pts, threshold "
        "10.0 pts), TTFT p99 100.0 -> 101.0 ms (+1.0%, threshold 10.0%), TPOT p99 20.0 -> 20.2 ms (+1.0%, threshold 10.0%)",
    ]  # fmt: skip
    assert gate.levels == []


def test_a_new_generation_that_completes_nothing_twice_fails_with_both() -> None:
    gate = Scripted([lv(1.0, 100.0, 20.0), lv(1.0, 100.0, 20.0), lv(1.0, 100.0, 20.0, completed=0),
                     lv(1.0, 100.0, 20.0, completed=0)])  # fmt: skip
    gate.before(["u1"])
    assert gate.after(["u1"]) == ("bench gate: the new generation completed no request at 32+30 x2 (8 requests) "
                                  "(measured twice; the first measurement: completed no request)")  # fmt: skip


def test_the_first_baseline_must_complete_requests() -> None:
    gate = Scripted([lv(1.0, 100.0, 20.0, completed=0), lv(1.0, 100.0, 20.0)])
    with pytest.raises(FleetError, match=r"^bench gate: the previous generation completed no request at 32\+30 x2 \(8 requests\)$"):
        gate.before(["u1"])
