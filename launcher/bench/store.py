"""Saved bench runs: one JSON file per run under ``$FLEET_BENCH_DIR`` (else
``$XDG_STATE_HOME/fleet/bench``, ``~/.local/state`` without it), named
``<deployment>-g<generation>-<shape>-<UTC time>``; and the catalog's tuned-vs-baseline view of two.

Contract: :func:`save` writes atomically (0644: a report holds no secret); :func:`load` takes a
run's name or a unique prefix of it and raises :class:`UsageError` naming the candidates
otherwise; :func:`compare` and :func:`catalog_gain` are pure.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Mapping

from launcher.bench.results import Level, Run, run_from_json, to_json
from launcher.errors import UsageError
from launcher.model import Recipe


def root() -> Path:
    explicit = os.environ.get("FLEET_BENCH_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "fleet" / "bench"


def run_id(run: Run) -> str:
    stamp = re.sub(r"[^0-9T]", "", run.started)[:15]  # 20261201T145400
    shape = re.sub(r"[^0-9A-Za-z.+x]", "", run.shape.label)
    gen = "-" if run.generation is None else str(run.generation)
    return f"{run.deployment}-g{gen}-{shape}-{stamp}"


def save(run: Run, where: Path | None = None) -> Run:
    """Store ``run`` under its id; returns it with the id set."""
    directory = where or root()
    directory.mkdir(parents=True, exist_ok=True)
    saved = replace(run, id=run_id(run))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-")
    with os.fdopen(fd, "w") as f:
        json.dump(to_json(saved), f, indent=1)
    os.chmod(tmp, 0o644)
    os.replace(tmp, directory / f"{saved.id}.json")
    return saved


def runs(where: Path | None = None) -> tuple[Run, ...]:
    """Every saved run, oldest first."""
    directory = where or root()
    found = [run_from_json(json.loads(p.read_text()), p.stem) for p in sorted(directory.glob("*.json"))]
    return tuple(sorted(found, key=lambda r: (r.started, r.id)))


def load(name: str, where: Path | None = None) -> Run:
    directory = where or root()
    exact = directory / f"{name}.json"
    if exact.is_file():
        return run_from_json(json.loads(exact.read_text()), name)
    matches = sorted(p.stem for p in directory.glob(f"{glob_escape(name)}*.json"))
    if len(matches) == 1:
        return load(matches[0], directory)
    if not matches:
        raise UsageError(f"no saved bench run {name!r} in {directory} (see `fleet bench list`)")
    raise UsageError(f"{name!r} names {len(matches)} saved runs: {', '.join(matches[:5])}")


def glob_escape(text: str) -> str:
    return re.sub(r"([*?\[])", r"[\1]", text)


@dataclass(frozen=True, slots=True, kw_only=True)
class Comparison:
    """B against A, the way the catalog reports a tuned variant against its baseline."""

    a: Run
    b: Run
    goodput_pct: float | None  # B's best goodput vs A's, per 8 GPUs when both know their GPUs
    per_8gpu: bool
    ttft_p50_pct: float | None  # at the level where each had its best goodput
    tpot_p50_pct: float | None
    warnings: tuple[str, ...]
    levels: tuple[LevelDelta, ...] = ()  # the concurrencies both runs measured, level by level


@dataclass(frozen=True, slots=True, kw_only=True)
class LevelDelta:
    """B against A at one concurrency both measured."""

    concurrency: int
    goodput_pct: float | None  # goodput tok/s, per 8 GPUs when both know their GPUs
    load: str  # "concurrency 4" / "rate 2 req/s"
    ttft_p50_pct: float | None
    tpot_p50_pct: float | None
    attainment: tuple[float | None, float | None]  # A's, B's
    # the two medians' goodput lie within the repeated run's min..max over its repeats (A's,
    # else B's); None: neither was repeated
    inside_spread: bool | None = None
    request_rate: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class CatalogGain:
    """The catalog's tuned-vs-baseline figure for a pair of runs, beside the measured change in
    the same direction (the tuned run against the baseline run, whichever of A and B it is)."""

    tuned: str  # recipe ids
    baseline: str
    workload: str  # "8k+1k"
    percent: float  # the catalog's report.gains figure
    metric: str  # the catalog's metric ("normalized-throughput-within-slo" ...)
    measured_pct: float | None  # goodput, per 8 GPUs when both runs know their GPU count
    per_8gpu: bool


def catalog_gain(a: Run, b: Run, recipes: Mapping[str, Recipe]) -> CatalogGain | None:
    """The figure when one run's recipe is a tuned variant whose catalog baseline is the other
    run's recipe, both ran the same shape, and the tuned recipe's ``report.gains`` has a figure
    at that workload (``50k+1.5k``, ``8k+1k``); else None."""
    if (a.shape.base_label, a.shape.input_len, a.shape.output_len) != (b.shape.base_label, b.shape.input_len, b.shape.output_len):
        return None
    for tuned, base in ((b, a), (a, b)):
        recipe = recipes.get(tuned.recipe)
        report = recipe.report if recipe is not None else None
        if report is None or report.kind != "tuned" or report.baseline != base.recipe:
            continue
        gain = next((g for g in report.gains if g.workload == tuned.shape.base_label), None)
        if gain is None:
            return None
        per8 = tuned.goodput_per_8gpu_tok_s is not None and base.goodput_per_8gpu_tok_s is not None
        measured = (_pct(tuned.goodput_per_8gpu_tok_s, base.goodput_per_8gpu_tok_s) if per8
                    else _pct(tuned.goodput_tok_s, base.goodput_tok_s))  # fmt: skip
        return CatalogGain(tuned=tuned.recipe, baseline=base.recipe, workload=gain.workload, percent=gain.percent,
                           metric=gain.metric, measured_pct=measured, per_8gpu=per8)  # fmt: skip
    return None


def _pct(new: float | None, old: float | None) -> float | None:
    return None if new is None or not old else (new / old - 1.0) * 100.0


def compare(a: Run, b: Run) -> Comparison:
    """``+44.0% goodput at 8k+1k``: normalised per 8 GPUs when both runs know their GPU count."""
    warnings = []
    if (a.shape.input_len, a.shape.output_len) != (b.shape.input_len, b.shape.output_len):
        warnings.append(f"different shapes: {a.shape.label} vs {b.shape.label}")
    if (a.slo.ttft_ms, a.slo.tpot_ms) != (b.slo.ttft_ms, b.slo.tpot_ms):
        warnings.append(
            f"different SLOs: ttft={a.slo.ttft_ms:g},tpot={a.slo.tpot_ms:g} vs ttft={b.slo.ttft_ms:g},tpot={b.slo.tpot_ms:g}"
        )
    ca, cb = [lv.key for lv in a.levels], [lv.key for lv in b.levels]
    if ca != cb:
        warnings.append(f"different levels: {_loads(a)} vs {_loads(b)} "
                        "(the best levels below may be different loads; compare the common levels)")  # fmt: skip
    if a.gpus != b.gpus:
        warnings.append(f"different GPU counts: {a.gpus} vs {b.gpus}")
    per8 = a.goodput_per_8gpu_tok_s is not None and b.goodput_per_8gpu_tok_s is not None
    pa = a.goodput_per_8gpu_tok_s if per8 else a.goodput_tok_s
    pb = b.goodput_per_8gpu_tok_s if per8 else b.goodput_tok_s
    ba, bb = a.best, b.best
    return Comparison(
        a=a, b=b, goodput_pct=_pct(pb, pa), per_8gpu=per8,
        ttft_p50_pct=_pct(bb.ttft_ms_p50 if bb else None, ba.ttft_ms_p50 if ba else None),
        tpot_p50_pct=_pct(bb.tpot_ms_p50 if bb else None, ba.tpot_ms_p50 if ba else None),
        warnings=tuple(warnings), levels=_by_level(a, b, per8),
    )  # fmt: skip


def _by_level(a: Run, b: Run, per8: bool) -> tuple[LevelDelta, ...]:
    scale_a = 8 / a.gpus if per8 and a.gpus else 1.0
    scale_b = 8 / b.gpus if per8 and b.gpus else 1.0
    theirs = {lv.key: lv for lv in b.levels}
    out = []
    for la in a.levels:
        lb = theirs.get(la.key)
        if lb is None:
            continue
        out.append(LevelDelta(
            concurrency=la.concurrency, request_rate=la.request_rate, load=la.load,
            goodput_pct=_pct(lb.goodput_tok_s * scale_b, la.goodput_tok_s * scale_a),
            ttft_p50_pct=_pct(lb.ttft_ms_p50, la.ttft_ms_p50), tpot_p50_pct=_pct(lb.tpot_ms_p50, la.tpot_ms_p50),
            attainment=(la.attainment, lb.attainment), inside_spread=_inside(la, lb, scale_a, scale_b),
        ))  # fmt: skip
    return tuple(out)


def _loads(run: Run) -> str:
    rates = [lv.request_rate for lv in run.levels if lv.request_rate is not None]
    if rates:
        return f"rate {','.join(f'{r:g}' for r in rates)} req/s"
    return f"concurrency {','.join(str(lv.concurrency) for lv in run.levels)}"


def _inside(a: Level, b: Level, scale_a: float, scale_b: float) -> bool | None:
    """B's median goodput within A's min..max over A's repeats, else A's within B's."""
    span = a.range_of("goodput_tok_s")
    if span is not None:
        return span[0] * scale_a <= b.goodput_tok_s * scale_b <= span[1] * scale_a
    span = b.range_of("goodput_tok_s")
    if span is not None:
        return span[0] * scale_b <= a.goodput_tok_s * scale_a <= span[1] * scale_b
    return None
