"""Bench-gated rollouts (``rollout.bench_gate`` / ``--bench-gate``): a short bench of each
batch's previous generation, taken out of its routers and drained, is that batch's baseline;
after the batch restarts healthy, the same bench runs against its new-generation groups,
addressed directly (their rank 0 URLs, never through a router).  A batch
whose attainment (share of requests within both SLOs) dropped, or whose TTFT or TPOT p99 rose,
beyond its threshold -- the larger of the configured floor and twice the baseline's own repeat
noise (two back-to-back runs of the previous generation) -- in two measurements in a row fails
the gate: the rollout puts it back on the previous generation and stops, with the numbers and
thresholds.

Contract: :func:`judge` is pure; :class:`Gate` implements the rolling loop's per-batch gate
(``before`` / ``after``, see :class:`launcher.rolling.roll.BatchGate`) and sends load only to
the URLs it is given, bounded like ``fleet bench`` (count and time).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

from launcher.bench import store
from launcher.bench.client import LevelSpec, run_level
from launcher.bench.results import Level, level_from_aiperf
from launcher.bench.run import level_duration, model_name, tokenizer_of, utc_now
from launcher.config.benchspec import CATALOG_SHAPES, Shape, Slo, default_slo, new_seed, parse_shape, parse_slo
from launcher.config.recipes import open_catalog
from launcher.errors import FleetError
from launcher.model import BenchGate, Playbook, Recipe


@dataclass(frozen=True, slots=True, kw_only=True)
class GateSpec:
    shape: Shape
    slo: Slo
    concurrency: int
    requests: int
    threshold_pct: float
    model: str
    tokenizer: str
    timeout_s: float = 120.0


def _pct(new: float, old: float) -> float:
    return (new / old - 1.0) * 100.0 if old else 0.0


NOISE_FACTOR = 2.0  # a threshold is at least this many times the baseline's own repeat noise
# What the gate judges: (name, Level attribute, higher is better).  Attainment (share of requests
# within both SLOs) in percentage points; the p99s relative.
METRICS: tuple[tuple[str, str, bool], ...] = (
    ("attainment", "attainment", True), ("TTFT p99", "ttft_ms_p99", False), ("TPOT p99", "tpot_ms_p99", False),
)  # fmt: skip


@dataclass(frozen=True, slots=True, kw_only=True)
class Baseline:
    """Two back-to-back runs of the previous generation: each metric's reference (their mean),
    its repeat noise, and the threshold derived from it -- the larger of the configured floor
    and NOISE_FACTOR x the noise (attainment: points; p99s: percent of the reference)."""

    runs: tuple[Level, Level]
    floor_pct: float

    def values(self, attr: str) -> tuple[float, float] | None:
        a, b = (getattr(lv, attr) for lv in self.runs)
        return None if a is None or b is None else (float(a), float(b))

    def ref(self, attr: str) -> float | None:
        v = self.values(attr)
        return None if v is None else (v[0] + v[1]) / 2

    def noise_pct(self, attr: str) -> float | None:
        """Attainment: the two runs' difference in points; a latency: relative to their mean."""
        v, ref = self.values(attr), self.ref(attr)
        if v is None or ref is None:
            return None
        if attr == "attainment":
            return abs(v[0] - v[1]) * 100.0
        return abs(v[0] - v[1]) / ref * 100.0 if ref else 0.0

    def threshold_pct(self, attr: str) -> float:
        return max(self.floor_pct, NOISE_FACTOR * (self.noise_pct(attr) or 0.0))

    def describe(self) -> str:
        parts = []
        for name, attr, _ in METRICS:
            v = self.values(attr)
            if v is None:
                continue
            unit = "pts" if attr == "attainment" else "%"
            shown = (f"{100 * v[0]:.0f}%, {100 * v[1]:.0f}%" if attr == "attainment" else f"{v[0]:.1f}, {v[1]:.1f} ms")
            parts.append(f"{name} {shown} (noise {self.noise_pct(attr):.1f}{unit}, threshold "
                         f"{self.threshold_pct(attr):.1f}{unit})")  # fmt: skip
        return "; ".join(parts)


def _numbers(base: Baseline, after: Level) -> str:
    parts = []
    for name, attr, _ in METRICS:
        ref, now = base.ref(attr), getattr(after, attr)
        if ref is None:
            continue
        if attr == "attainment":
            shown = "n/a" if now is None else f"{100 * now:.0f}% ({100 * (now - ref):+.1f} pts"
            parts.append(f"{name} {100 * ref:.0f}% -> {shown}" + ("" if now is None else f", threshold "
                         f"{base.threshold_pct(attr):.1f} pts)"))  # fmt: skip
        else:
            shown = "n/a" if now is None else f"{now:.1f} ms ({_pct(now, ref):+.1f}%"
            parts.append(f"{name} {ref:.1f} -> {shown}" + ("" if now is None else f", threshold "
                         f"{base.threshold_pct(attr):.1f}%)"))  # fmt: skip
    return ", ".join(parts)


def judge(base: Baseline, after: Level, where: str) -> str | None:
    """None when ``after`` is within each metric's threshold of the baseline's reference; else
    the one-line reason with the numbers and thresholds.  A level where nothing completed fails."""
    if after.completed == 0:
        return f"bench gate: the new generation completed no request at {where}"
    worse = []
    for name, attr, higher_better in METRICS:
        ref, now, limit = base.ref(attr), getattr(after, attr), base.threshold_pct(attr)
        if ref is None:
            continue
        if now is None:
            worse.append(f"{name} not measured")
        elif higher_better and (ref - now) * 100.0 > limit:
            worse.append(f"{name} dropped")
        elif not higher_better and now > ref * (1.0 + limit / 100.0):
            worse.append(f"{name} rose")
    if not worse:
        return None
    return f"bench gate: {' and '.join(worse)} beyond the threshold at {where}: {_numbers(base, after)}"


class Gate:
    """The per-batch gate of a rolling rollout.  ``notes`` collects one line per measurement."""

    def __init__(self, spec: GateSpec, artifacts: Path, secrets: Mapping[str, str]) -> None:
        self.spec = spec
        self.artifacts = artifacts
        self.secrets = secrets
        self.baseline: Baseline | None = None
        self.notes: list[str] = []
        self._runs = 0

    def _measure(self, urls: Sequence[str]) -> Level:
        s = self.spec
        self._runs += 1
        spec = LevelSpec(
            urls=tuple(urls), model=s.model, tokenizer=s.tokenizer, shape=s.shape, slo=s.slo,
            concurrency=s.concurrency, requests=s.requests, timeout_s=s.timeout_s,
            duration_s=level_duration(s.shape, s.slo, s.concurrency, s.requests + s.concurrency),
            warmup=s.concurrency,  # the new generation just started: its first requests pay its warm-up
            seed=new_seed(),  # fresh prompts: the old generation holds none of them warm in its prefix cache
        )  # fmt: skip
        return level_from_aiperf(run_level(spec, self.artifacts / f"gate-{self._runs}", self.secrets), s.concurrency)

    def _where(self) -> str:
        s = self.spec
        return f"{s.shape.label} x{s.concurrency} ({s.requests} requests)"

    def before(self, urls: Sequence[str]) -> None:
        """Measure the previous generation on the batch about to restart (drained, out of its
        routers) twice, back to back: that batch's baseline and its repeat noise, from which the
        thresholds follow.  Taken right before the batch restarts, on the same groups, so both
        sides see the same hosts and the machine loaded alike.  A later batch whose previous
        generation completes nothing is compared with the last baseline; the first batch's is
        an error."""
        runs = (self._measure(urls), self._measure(urls))
        if any(r.completed == 0 for r in runs):
            if self.baseline is None:
                raise FleetError(f"bench gate: the previous generation completed no request at {self._where()}")
            self.notes.append(f"bench gate: the previous generation of this batch completed no request at {self._where()}: "
                              "compared with the last baseline")  # fmt: skip
            return
        self.baseline = Baseline(runs=runs, floor_pct=self.spec.threshold_pct)
        self.notes.append(f"bench gate baseline (previous generation, 2 runs back to back) at {self._where()}: "
                          f"{self.baseline.describe()} (threshold: the larger of {self.spec.threshold_pct:g} and "
                          f"{NOISE_FACTOR:g} x the noise)")  # fmt: skip

    def after(self, urls: Sequence[str]) -> str | None:
        """None when the new generation's groups at ``urls`` pass; else the reason.  A failed
        measurement is taken again at once and the batch fails only when the second fails too
        (the reason then gives both): a short bench is a few requests, and one of them stalled
        by a load spike moves a p99 past any threshold (a CI run of the sandbox test at load
        ~80: a generation as fast as its baseline read TPOT p99 +161% against 1.5% of noise)."""
        base = self.baseline
        if base is None:
            raise FleetError("bench gate: no baseline measured")
        first = self._measure(urls)
        reason = judge(base, first, self._where())
        if reason is None:
            self.notes.append(f"bench gate passed at {self._where()}: {_numbers(base, first)}")
            return None
        self.notes.append(f"{reason}; measuring again")
        again = self._measure(urls)
        second = judge(base, again, self._where())
        if second is None:
            self.notes.append(f"bench gate passed when measured again at {self._where()}: {_numbers(base, again)}")
            return None
        first_numbers = "completed no request" if first.completed == 0 else _numbers(base, first)
        return f"{second} (measured twice; the first measurement: {first_numbers})"


def gate_spec(playbook: Playbook, recipe: Recipe) -> GateSpec:
    """The gate's bench from ``rollout.bench_gate`` (its defaults when the playbook has none)
    and the playbook's ``bench`` section (scale, SLO, tokenizer)."""
    gate = playbook.rollout.bench_gate or BenchGate()
    bench = playbook.bench
    shape = parse_shape(gate.shape or (bench.shapes or CATALOG_SHAPES[1:])[0]).scaled(bench.scale)
    slo = parse_slo(bench.slo, f"playbook {bench.source}") if bench.slo is not None else default_slo()
    return GateSpec(
        shape=shape, slo=slo, concurrency=gate.concurrency, requests=gate.requests, threshold_pct=gate.threshold_pct,
        model=model_name(recipe), tokenizer=tokenizer_of(None, playbook, recipe),
    )  # fmt: skip


def gate_for(playbook: Playbook, deployment: str, secrets: Mapping[str, str]) -> Gate:
    """The gate of one rollout; the client's artifacts go beside the kept bench runs."""
    spec = gate_spec(playbook, open_catalog().get(playbook.recipe))
    return Gate(spec, store.root() / "artifacts" / f"{deployment}-gate-{utc_now().replace(':', '')}", secrets)
