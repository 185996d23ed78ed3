"""Bench-gated rollouts (``rollout.bench_gate`` / ``--bench-gate``): a short bench of each
batch's previous generation, taken out of its routers and drained, is that batch's baseline;
after the batch restarts healthy, the same bench runs against its new-generation groups,
addressed directly (their rank 0 URLs, never through a router).  A batch whose goodput
dropped, or whose TTFT p50 rose, by more than the threshold fails the gate: the rollout puts it
back on the previous generation and stops, with both numbers.

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
from launcher.bench.run import model_name, tokenizer_of, utc_now
from launcher.bench.spec import CATALOG_SHAPES, Shape, Slo, default_slo, parse_shape, parse_slo
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
    duration_s: float = 120.0
    timeout_s: float = 120.0


def _pct(new: float, old: float) -> float:
    return (new / old - 1.0) * 100.0 if old else 0.0


def _numbers(before: Level, after: Level) -> str:
    tb, ta = before.ttft_ms_p50, after.ttft_ms_p50
    ttft = "n/a" if tb is None or ta is None else f"{tb:.1f} -> {ta:.1f} ms ({_pct(ta, tb):+.1f}%)"
    return (
        f"goodput {before.goodput_tok_s:.1f} -> {after.goodput_tok_s:.1f} tok/s "
        f"({_pct(after.goodput_tok_s, before.goodput_tok_s):+.1f}%), TTFT p50 {ttft}"
    )


def judge(before: Level, after: Level, threshold_pct: float, where: str) -> str | None:
    """None when ``after`` is within the threshold of ``before``; else the one-line reason with
    both numbers.  A level where nothing completed fails."""
    limit = threshold_pct / 100.0
    worse = []
    if after.completed == 0 or after.goodput_tok_s < before.goodput_tok_s * (1.0 - limit):
        worse.append("goodput dropped")
    tb, ta = before.ttft_ms_p50, after.ttft_ms_p50
    if tb is not None and (ta is None or ta > tb * (1.0 + limit)):
        worse.append("TTFT p50 rose")
    if not worse:
        return None
    return f"bench gate: {' and '.join(worse)} beyond {threshold_pct:g}% at {where}: {_numbers(before, after)}"


class Gate:
    """The per-batch gate of a rolling rollout.  ``notes`` collects one line per measurement."""

    def __init__(self, spec: GateSpec, artifacts: Path, secrets: Mapping[str, str]) -> None:
        self.spec = spec
        self.artifacts = artifacts
        self.secrets = secrets
        self.baseline: Level | None = None
        self.notes: list[str] = []
        self._runs = 0

    def _measure(self, urls: Sequence[str]) -> Level:
        s = self.spec
        self._runs += 1
        spec = LevelSpec(
            urls=tuple(urls), model=s.model, tokenizer=s.tokenizer, shape=s.shape, slo=s.slo,
            concurrency=s.concurrency, requests=s.requests, duration_s=s.duration_s, timeout_s=s.timeout_s,
            warmup=s.concurrency,  # the new generation just started: its first requests pay its warm-up
        )  # fmt: skip
        return level_from_aiperf(run_level(spec, self.artifacts / f"gate-{self._runs}", self.secrets), s.concurrency)

    def _where(self) -> str:
        s = self.spec
        return f"{s.shape.label} x{s.concurrency} ({s.requests} requests)"

    def before(self, urls: Sequence[str]) -> None:
        """Measure the previous generation on the batch about to restart (drained, out of its
        routers): that batch's baseline.  Taken right before the batch restarts, on the same
        groups, so both numbers see the same hosts and the machine loaded alike (a baseline
        taken once at the start drifts with the load over a long rollout).  A later batch whose
        previous generation completes nothing is compared with the last baseline; the first
        batch's is an error."""
        now = self._measure(urls)
        if now.completed == 0:
            if self.baseline is None:
                raise FleetError(f"bench gate: the previous generation completed no request at {self._where()}")
            self.notes.append(f"bench gate: the previous generation of this batch completed no request at {self._where()}: "
                              "compared with the last baseline")  # fmt: skip
            return
        self.baseline = now
        ttft = None if now.ttft_ms_p50 is None else round(now.ttft_ms_p50, 1)
        self.notes.append(f"bench gate baseline (previous generation) at {self._where()}: goodput "
                          f"{now.goodput_tok_s:.1f} tok/s, TTFT p50 {ttft} ms")  # fmt: skip

    def after(self, urls: Sequence[str]) -> str | None:
        """None when the new generation's groups at ``urls`` pass; else the reason."""
        if self.baseline is None:
            raise FleetError("bench gate: no baseline measured")
        now = self._measure(urls)
        reason = judge(self.baseline, now, self.spec.threshold_pct, self._where())
        if reason is None:
            self.notes.append(f"bench gate passed at {self._where()}: {_numbers(self.baseline, now)}")
        return reason


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
