"""A run rendered for operators: a markdown table per concurrency level, the recipe's figures for
that shape beside the measured ones with their ratio, the caveats that make them incomparable,
and a PNG chart (output tok/s per GPU against tok/s per user, the SLO region shaded, the SLO
capacity marked; attainment per level).

Contract: pure but for :func:`plot`, which writes one PNG file (matplotlib, Agg backend).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from launcher.bench.prefix import HIGH, flagged
from launcher.bench.results import Level, Run
from launcher.bench.version import ServerVersion
from launcher.config.benchspec import Shape
from launcher.model import Recipe, Throughput
from launcher.observe.names import version_key


def recipe_gpus(recipe: Recipe) -> int:
    """GPUs the recipe's figures were measured on: one instance, or a PD recipe's whole set."""
    if recipe.pd is not None:
        per = recipe.hardware.gpus_per_node
        return per * (recipe.pd.prefill.replicas * recipe.pd.prefill.nodes + recipe.pd.decode.replicas * recipe.pd.decode.nodes)
    return recipe.hardware.gpus_per_node * recipe.hardware.nodes


def caveats(
    recipe: Recipe, *, image: str, gpus: int, skus: Sequence[str], scale: float, served: ServerVersion
) -> tuple[str, ...]:
    """Why measured numbers must not be read as a regression against the recipe's.  ``served``:
    the version the running engines reported (their own endpoint), never the recipe's."""
    out = []
    if image != recipe.image:
        out.append(f"image {image} is not the recipe's {recipe.image}")
    if not served.versions:
        why = served.unread[0] if served.unread else "no engine leader"
        out.append(f"engine version not read from the server ({why}); the recipe's figures are for "
                   f"{recipe.engine} {recipe.engine_version}")  # fmt: skip
    elif any(version_key(v) != version_key(recipe.engine_version) for v in served.versions):
        out.append(f"engine {recipe.engine} {served.text} (read from the server), the recipe's figures are for "
                   f"{recipe.engine_version}")  # fmt: skip
    if gpus != recipe_gpus(recipe):
        out.append(f"{gpus} GPUs, the recipe's figures are for {recipe_gpus(recipe)} (compare per 8 GPUs)")
    other = sorted(set(skus) - set(recipe.hardware.skus))
    if other:
        out.append(f"GPU {', '.join(other)}, the recipe's figures are for {', '.join(recipe.hardware.skus)}")
    if scale != 1.0:
        out.append(f"lengths scaled x{scale:g}: the recipe's figures are for the full shape (not shown beside these)")
    return tuple(out)


def figures(recipe: Recipe, shape: Shape) -> tuple[Throughput, ...]:
    """The recipe's measured throughput figures for this shape's lengths (unscaled)."""
    return tuple(
        t for t in recipe.measured.throughput if (t.input_len, t.output_len) == (shape.input_len, shape.output_len)
    )


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}"


def _ratio(measured: float, figure: float | None) -> str:
    return "-" if not figure else f"{measured / figure:.2f}x"


def _pct(rate: float | None) -> str:
    return "-" if rate is None else f"{100 * rate:.1f}%"


def cache_note(level: Level) -> str:
    """``, prefix cache 0.0%`` for a progress line; flagged when high; "" when not read."""
    if level.prefix_cache_hit_rate is None:
        return ""
    high = " (high: prompts answered from cache)" if flagged(level.prefix_cache_hit_rate) else ""
    return f", prefix cache {_pct(level.prefix_cache_hit_rate)}{high}"


def _spread(run: Run) -> list[str]:
    """With --repeat: the figures above are medians; here their min..max over the repeats."""
    if all(lv.repeats == 1 for lv in run.levels):
        return []
    out = ["Medians over repeats; min..max per level:", ""]
    for lv in run.levels:
        parts = [f"{k} {lo:.1f}..{hi:.1f}" for k, lo, hi in lv.spread]
        out.append(f"- {lv.load} ({lv.repeats} runs): {', '.join(parts) or '-'}")
    return out + [""]


def _attainment(run: Run) -> list[str]:
    """Per level the share of requests within both SLOs; the highest load where enough were."""
    if all(lv.attainment is None for lv in run.levels):
        return []
    target = f"{run.attainment_target:.0%}"
    shares = ", ".join(f"{_cell(lv)}: {_pct(lv.attainment)}" for lv in run.levels)
    cap = run.capacity
    if cap is None:
        where = f"**SLO capacity: no level had {target} of its requests within both SLOs**"
    else:
        per8 = f", {cap.output_throughput_tok_s * 8 / run.gpus:.1f} per 8 GPUs" if run.gpus else ""
        where = (f"**SLO capacity (the highest load with >= {target} of requests within both SLOs): "
                 f"{cap.load}, {cap.output_throughput_tok_s:.1f} output tok/s{per8}**")  # fmt: skip
    return [f"Requests within both SLOs (TTFT and TPOT), per level {shares}.", "", where, ""]


def _prompts(run: Run) -> list[str]:
    """The seeds the prompts came from and the engines' own prefix-cache hit rate per level."""
    if run.seed is None:
        return []
    seeds = ", ".join(f"{_cell(lv)}: {lv.seed}" for lv in run.levels)
    rates = ", ".join(f"{_cell(lv)}: {_pct(lv.prefix_cache_hit_rate)}" for lv in run.levels)
    out = [f"Prompts: run seed {run.seed} (`fleet bench --seed {run.seed}` repeats them), per level {seeds}; "
           f"prompt tokens the engines' prefix caches answered, per level {rates}.", ""]  # fmt: skip
    for lv in run.levels:
        if flagged(lv.prefix_cache_hit_rate):
            out += [f"**warning: at {lv.load} the engines' prefix caches answered "
                    f"{_pct(lv.prefix_cache_hit_rate)} of prompt tokens (over {HIGH:.0%}): its TTFT and throughput "
                    "are better than cold prompts'**", ""]  # fmt: skip
    return out


def markdown(run: Run, recipe_figures: Sequence[Throughput]) -> str:
    """The report: header, one row per level, the recipe's figures side by side, caveats."""
    per8 = run.goodput_per_8gpu_tok_s
    lines = [
        f"# {run.deployment} ({run.recipe}), generation {run.generation if run.generation is not None else '-'}: {run.shape.label}",
        "",
        f"{run.shape.input_len} input + {run.shape.output_len} output tokens per request; "
        f"SLO TTFT <= {run.slo.ttft_ms:g} ms, TPOT <= {run.slo.tpot_ms:g} ms ({run.slo.origin}); "
        f"{run.gpus} GPUs (the plan's engines); engine {run.engine_version or '?'} ({_version_origin(run)}); "
        f"{run.client} against {run.endpoint}; {run.started}",
        "",
        f"**goodput within the SLO: {run.goodput_tok_s:.1f} output tok/s"
        + (f", {per8:.1f} per 8 GPUs**" if per8 is not None else "**"),
        "",
        f"| {_head(run)} | completed | failed | cancelled | req/s | input tok/s | output tok/s | per 8 GPUs | TTFT p50 | TTFT p99 | TPOT p50 | TPOT p99 | E2E p50 | goodput tok/s |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for level in run.levels:
        lines.append(
            f"| {_cell(level)} | {level.completed} | {level.failed} | {level.cancelled} | {level.request_throughput:.2f} | "
            f"{level.input_throughput_tok_s:.1f} | {level.output_throughput_tok_s:.1f} | "
            f"{_num(run.per_8gpu(level.output_throughput_tok_s))} | {_ms(level.ttft_ms_p50)} | "
            f"{_ms(level.ttft_ms_p99)} | {_ms(level.tpot_ms_p50)} | {_ms(level.tpot_ms_p99)} | {_ms(level.e2e_ms_p50)} | "
            f"{level.goodput_tok_s:.1f} |"
        )
    lines.append("")
    lines += _spread(run)
    lines += _attainment(run)
    lines += _prompts(run)
    kv = [(_cell(lv), lv.kv) for lv in run.levels if lv.kv is not None]
    if kv:
        lines += ["KV transfers prefill -> decode, from the decodes' own counters during each level:", "",
                  f"| {_head(run)} | transfers | failed | avg transfer | KV moved |", "|---:|---:|---:|---:|---:|"]  # fmt: skip
        for level_c, moved in kv:
            lines.append(f"| {level_c} | {moved.done} | {moved.failed} | {_ms(moved.avg_ms)} | {moved.mib:.2f} MiB |")
        lines.append("")
    if run.shape.label != run.shape.base_label:
        lines += [f"The recipe's figures for {run.shape.base_label} are for the full shape; this run's lengths are "
                  f"scaled ({run.shape.label}): not comparable, not shown beside its numbers.", ""]  # fmt: skip
    elif recipe_figures and any(lv.request_rate is not None for lv in run.levels):
        lines += ["The recipe's figures are at fixed concurrencies; this run's levels are request rates (open "
                  "loop): not shown beside them.", ""]  # fmt: skip
    elif recipe_figures:
        lines += ["The recipe's figures for this shape, beside the nearest measured level:", "",
                  "| recipe concurrency | recipe input tok/s | measured | ratio | recipe output tok/s | measured | ratio | note |",
                  "|---:|---:|---:|---:|---:|---:|---:|---|"]  # fmt: skip
        for t in recipe_figures:
            lv = _nearest(run.levels, t.concurrency)
            if lv is None:
                continue
            lines.append(
                f"| {t.concurrency or '-'} (measured at {lv.concurrency}) | {t.input_tok_s or '-'} | "
                f"{lv.input_throughput_tok_s:.1f} | {_ratio(lv.input_throughput_tok_s, t.input_tok_s)} | "
                f"{t.output_tok_s or '-'} | {lv.output_throughput_tok_s:.1f} | "
                f"{_ratio(lv.output_throughput_tok_s, t.output_tok_s)} | {t.note} |"
            )
        lines.append("")
    else:
        lines += ["The recipe records no throughput figure for this shape.", ""]
    for c in run.caveats:
        lines.append(f"- not comparable with the recipe as is: {c}")
    return "\n".join(lines).rstrip() + "\n"


def _head(run: Run) -> str:
    return "request rate (req/s)" if any(lv.request_rate is not None for lv in run.levels) else "concurrency"


def _cell(lv: Level) -> str:
    return str(lv.concurrency) if lv.request_rate is None else f"{lv.request_rate:g}"


def _num(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}"


def _version_origin(run: Run) -> str:
    return "read from the server" if run.engine_version else "not read from the server"


def _nearest(levels: Sequence[Level], concurrency: int | None) -> Level | None:
    if not levels:
        return None
    if concurrency is None:
        return max(levels, key=lambda lv: lv.output_throughput_tok_s)
    return min(levels, key=lambda lv: abs(lv.concurrency - concurrency))


@dataclass(frozen=True, slots=True, kw_only=True)
class Point:
    """One level on the chart: output tok/s per GPU against tok/s per user (1000 / TPOT p50)."""

    label: str  # "c=4" / "4 req/s"
    per_user: float  # tok/s one request sees while decoding
    per_gpu: float  # the deployment's output tok/s over the plan's GPUs
    attainment: float | None
    capacity: bool  # the SLO capacity level (DistServe's goodput)


def chart_points(run: Run) -> tuple[Point, ...]:
    """The levels that decoded (TPOT measured), in sweep order."""
    cap = run.capacity
    gpus = run.gpus or 1
    return tuple(
        Point(label=f"c={lv.concurrency}" if lv.request_rate is None else f"{lv.request_rate:g} req/s",
              per_user=1000.0 / lv.tpot_ms_p50, per_gpu=lv.output_throughput_tok_s / gpus, attainment=lv.attainment,
              capacity=lv is cap)  # fmt: skip
        for lv in run.levels if lv.tpot_ms_p50
    )


def plot(run: Run, recipe_figures: Sequence[Throughput], path: Path, recipe_gpus: int | None = None) -> None:
    """Left: output tok/s per GPU (y) against tok/s per user (x), one point per level, the TPOT
    SLO's region (tok/s per user >= 1000 / TPOT limit) shaded, the SLO capacity level marked, the
    recipe's figures per GPU as lines.  Right: each level's attainment (share of requests within
    both SLOs) against the target: a level can sit inside the TPOT region at p50 while many of its
    requests miss an SLO."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pts = chart_points(run)
    fig, (ax, bars) = plt.subplots(1, 2, figsize=(12, 4.6), gridspec_kw={"width_ratios": [3, 2]})
    slo_x = 1000.0 / run.slo.tpot_ms
    right = max([p.per_user for p in pts] + [slo_x]) * 1.15
    ax.axvspan(slo_x, right, color="green", alpha=0.08, label=f"TPOT <= {run.slo.tpot_ms:g} ms (SLO)")
    ax.plot([p.per_user for p in pts], [p.per_gpu for p in pts], marker="o", label="measured (p50 TPOT)")
    for p in pts:
        ax.annotate(p.label, (p.per_user, p.per_gpu), textcoords="offset points", xytext=(4, 4), fontsize=8)
        if p.capacity:
            ax.plot([p.per_user], [p.per_gpu], marker="*", markersize=16, color="orange", linestyle="none",
                    label=f"SLO capacity ({p.label}, >= {run.attainment_target:.0%} within both SLOs)")  # fmt: skip
    for t in recipe_figures:
        if t.output_tok_s and recipe_gpus:
            ax.axhline(t.output_tok_s / recipe_gpus, color="grey", linestyle=":",
                       label=f"recipe {t.output_tok_s / recipe_gpus:.1f} tok/s/GPU (c={t.concurrency})")  # fmt: skip
    ax.set_xlim(0, right)
    ax.set_xlabel("tok/s per user (1000 / TPOT p50)")
    ax.set_ylabel(f"output tok/s per GPU ({run.gpus} GPUs)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    labels = [p.label for p in pts]
    shares = [100 * (p.attainment or 0.0) for p in pts]
    colors = ["tab:green" if p.attainment is not None and p.attainment >= run.attainment_target else "tab:red" for p in pts]
    bars.bar(labels, shares, color=colors)
    bars.axhline(100 * run.attainment_target, color="black", linestyle="--", label=f"target {run.attainment_target:.0%}")
    bars.set_ylim(0, 105)
    bars.set_ylabel("% of requests within both SLOs")
    bars.set_title(f"attainment (TTFT <= {run.slo.ttft_ms:g} ms, TPOT <= {run.slo.tpot_ms:g} ms)", fontsize=9)
    bars.legend(fontsize=7)
    fig.suptitle(f"{run.deployment} gen {run.generation}: {run.shape.label} ({run.client})", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
