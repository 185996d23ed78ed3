"""A run rendered for operators: a markdown table per concurrency level, the recipe's figures for
that shape beside the measured ones with their ratio, the caveats that make them incomparable,
and a PNG plot (throughput against TTFT and TPOT across the sweep, SLO lines, the recipe's figure).

Contract: pure but for :func:`plot`, which writes one PNG file (matplotlib, Agg backend).
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from launcher.bench.results import Level, Run
from launcher.bench.spec import Shape
from launcher.model import Recipe, Throughput


def recipe_gpus(recipe: Recipe) -> int:
    """GPUs the recipe's figures were measured on: one instance, or a PD recipe's whole set."""
    if recipe.pd is not None:
        per = recipe.hardware.gpus_per_node
        return per * (recipe.pd.prefill.replicas * recipe.pd.prefill.nodes + recipe.pd.decode.replicas * recipe.pd.decode.nodes)
    return recipe.hardware.gpus_per_node * recipe.hardware.nodes


def caveats(recipe: Recipe, *, image: str, gpus: int, skus: Sequence[str], scale: float) -> tuple[str, ...]:
    """Why measured numbers must not be read as a regression against the recipe's."""
    out = []
    if image != recipe.image:
        out.append(f"image {image} is not the recipe's {recipe.image} (engine {recipe.engine} {recipe.engine_version} not confirmed)")
    if gpus != recipe_gpus(recipe):
        out.append(f"{gpus} GPUs, the recipe's figures are for {recipe_gpus(recipe)} (compare per 8 GPUs)")
    other = sorted(set(skus) - set(recipe.hardware.skus))
    if other:
        out.append(f"GPU {', '.join(other)}, the recipe's figures are for {', '.join(recipe.hardware.skus)}")
    if scale != 1.0:
        out.append(f"lengths scaled x{scale:g}: the recipe's figures are for the full shape")
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


def markdown(run: Run, recipe_figures: Sequence[Throughput]) -> str:
    """The report: header, one row per level, the recipe's figures side by side, caveats."""
    per8 = run.goodput_per_8gpu_tok_s
    lines = [
        f"# {run.deployment} ({run.recipe}), generation {run.generation if run.generation is not None else '-'}: {run.shape.label}",
        "",
        f"{run.shape.input_len} input + {run.shape.output_len} output tokens per request; "
        f"SLO TTFT <= {run.slo.ttft_ms:g} ms, TPOT <= {run.slo.tpot_ms:g} ms ({run.slo.origin}); "
        f"{run.gpus} GPUs; {run.client} against {run.endpoint}; {run.started}",
        "",
        f"**goodput within the SLO: {run.goodput_tok_s:.1f} output tok/s"
        + (f", {per8:.1f} per 8 GPUs**" if per8 is not None else "**"),
        "",
        "| concurrency | completed | failed | req/s | input tok/s | output tok/s | TTFT p50 | TTFT p99 | TPOT p50 | TPOT p99 | E2E p50 | goodput tok/s |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for level in run.levels:
        lines.append(
            f"| {level.concurrency} | {level.completed} | {level.failed} | {level.request_throughput:.2f} | "
            f"{level.input_throughput_tok_s:.1f} | {level.output_throughput_tok_s:.1f} | {_ms(level.ttft_ms_p50)} | "
            f"{_ms(level.ttft_ms_p99)} | {_ms(level.tpot_ms_p50)} | {_ms(level.tpot_ms_p99)} | {_ms(level.e2e_ms_p50)} | "
            f"{level.goodput_tok_s:.1f} |"
        )
    lines.append("")
    if recipe_figures:
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


def _nearest(levels: Sequence[Level], concurrency: int | None) -> Level | None:
    if not levels:
        return None
    if concurrency is None:
        return max(levels, key=lambda lv: lv.output_throughput_tok_s)
    return min(levels, key=lambda lv: abs(lv.concurrency - concurrency))


def plot(run: Run, recipe_figures: Sequence[Throughput], path: Path) -> None:
    """Output tok/s (x) against TTFT p50 and TPOT p50 (y), one point per concurrency level, the
    SLO as horizontal lines, the recipe's output tok/s figures as vertical lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    xs = [lv.output_throughput_tok_s for lv in run.levels]
    for ax, name, values, limit in (
        (axes[0], "TTFT p50 (ms)", [lv.ttft_ms_p50 for lv in run.levels], run.slo.ttft_ms),
        (axes[1], "TPOT p50 (ms)", [lv.tpot_ms_p50 for lv in run.levels], run.slo.tpot_ms),
    ):
        pts = [(x, y, lv.concurrency) for x, y, lv in zip(xs, values, run.levels) if y is not None]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label="measured")
        for x, y, c in pts:
            ax.annotate(f"c={c}", (x, y), textcoords="offset points", xytext=(4, 4), fontsize=8)
        ax.axhline(limit, color="red", linestyle="--", label=f"SLO {limit:g} ms")
        for t in recipe_figures:
            if t.output_tok_s:
                ax.axvline(t.output_tok_s, color="green", linestyle=":", label=f"recipe {t.output_tok_s:g} tok/s (c={t.concurrency})")
        ax.set_xlabel("output tok/s")
        ax.set_ylabel(name)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"{run.deployment} gen {run.generation}: {run.shape.label} ({run.client})", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
