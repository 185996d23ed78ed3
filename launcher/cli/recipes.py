"""``fleet recipes list|show|fit``: browse the catalog and see where a recipe could run.

Tables for people, ``--json`` (sorted keys) for scripts; loader errors are one line, exit 2.
"""

from __future__ import annotations

import sys
from typing import Iterable, Sequence

import click
from rich.console import Console
from rich.table import Table

from launcher.cli import cli
from launcher.config.fit import fit
from launcher.config.inventory import load_inventory
from launcher.config.recipes import load_catalog
from launcher.model import Hardware, Parallelism, Recipe, Report
from launcher.output import dumps
from launcher.plan import to_jsonable


def show_table(columns: Sequence[str], rows: Iterable[Sequence[str]], title: str | None = None) -> None:
    """A plain table whose cells wrap instead of being cut (ids must stay readable)."""
    t = Table(title=title, box=None, pad_edge=False)
    for col in columns:
        t.add_column(col, overflow="fold")
    for row in rows:
        t.add_row(*(c.replace("[", r"\[") for c in row))
    console = Console(file=sys.stdout)
    if not console.is_terminal:  # a pipe or a file: do not squeeze ids into 80 columns
        console = Console(file=sys.stdout, width=200)
    console.print(t)


def hardware_text(hw: Hardware) -> str:
    """``8×H100``, ``8×H100/H800×2``."""
    text = f"{hw.gpus_per_node}×{'/'.join(hw.skus)}"
    return text + (f"×{hw.nodes}" if hw.nodes > 1 else "")


def parallelism_text(p: Parallelism) -> str:
    """``TP8 PP2 EP8``: TP always, the others when not 1."""
    parts = [f"TP{p.tp}"]
    for label, value in (("PP", p.pp), ("DP", p.dp), ("EP", p.ep), ("ADP", p.attn_dp), ("DCP", p.dcp)):
        if value != 1:
            parts.append(f"{label}{value}")
    return " ".join(parts)


def recipe_parallelism(r: Recipe) -> str:
    if r.pd is not None:
        pre, dec = r.pd.prefill, r.pd.decode
        return f"{pre.replicas}P {parallelism_text(pre.parallelism)} / {dec.replicas}D {parallelism_text(dec.parallelism)}"
    return parallelism_text(r.parallelism)


def report_text(report: Report | None) -> str:
    if report is None:
        return "-"
    gains = ", ".join(f"{g.percent:+g}% ({g.workload})" for g in report.gains)
    return f"{report.kind} {gains}".strip()


def quant_text(r: Recipe) -> str:
    text = r.quantization.weight_format
    return text + (f" kv:{r.kv_cache_dtype}" if r.kv_cache_dtype else "")


def summary(r: Recipe) -> dict[str, object]:
    return {
        "id": r.id,
        "catalog_entry": r.catalog_entry,
        "family": r.family,
        "engine": r.engine,
        "topology": r.topology,
        "hardware": hardware_text(r.hardware),
        "parallelism": recipe_parallelism(r),
        "quantization": quant_text(r),
        "report": report_text(r.report),
    }


def details(r: Recipe) -> dict[str, object]:
    """Every field of the recipe as JSON-ready data (positions as ``path:line:col`` text)."""
    data = to_jsonable(r)
    assert isinstance(data, dict)
    data["source"] = str(r.source)
    data["constraints"] = [{**c, "source": str(rc.source)} for c, rc in zip(data["constraints"], r.constraints)]
    return data


@cli.group("recipes")
def recipes() -> None:
    """The recipe catalog (recipes/<family>/<variant>.yaml)."""


@recipes.command("list")
@click.option("--family", default=None, help="Only this model family.")
@click.option("--engine", default=None, help="Only this engine (sglang, vllm, vllm-ascend).")
@click.option("--gpu", "sku", default=None, help="Only recipes that accept this GPU SKU.")
@click.option("--topology", default=None, help="Only single, multinode or pd.")
@click.option("--tuned", "kind", flag_value="tuned", default=None, help="Only tuned variants.")
@click.option("--baseline", "kind", flag_value="baseline", help="Only baseline variants.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (sorted keys).")
def list_command(
    family: str | None, engine: str | None, sku: str | None, topology: str | None, kind: str | None, as_json: bool
) -> None:
    """List recipes in catalog order."""
    catalog = load_catalog()
    chosen = [
        r
        for r in catalog.recipes.values()
        if (family is None or r.family == family)
        and (engine is None or r.engine == engine)
        and (sku is None or sku in r.hardware.skus)
        and (topology is None or r.topology == topology)
        and (kind is None or (r.report is not None and r.report.kind == kind))
    ]
    if as_json:
        click.echo(dumps([summary(r) for r in chosen]))
        return
    columns = ("id", "entry", "engine", "topology", "hardware", "parallelism", "quant", "report")
    rows = [
        (r.id, str(r.catalog_entry), r.engine, r.topology, hardware_text(r.hardware), recipe_parallelism(r),
         quant_text(r), report_text(r.report))
        for r in chosen
    ]
    show_table(columns, rows, title=f"{len(chosen)} of {len(catalog.recipes)} recipes")


@recipes.command("show")
@click.argument("recipe_id")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (sorted keys).")
def show_command(recipe_id: str, as_json: bool) -> None:
    """Everything about one recipe: launch settings, measured facts, report, constraints, notes."""
    r = load_catalog().get(recipe_id)
    if as_json:
        click.echo(dumps(details(r)))
        return
    s = summary(r)
    lines = [f"{r.id} (catalog entry {r.catalog_entry}) — {r.summary.strip()}"]
    for key in ("engine", "topology", "hardware", "parallelism", "quantization", "report"):
        lines.append(f"  {key}: {s[key]}")
    lines.append(f"  model: {r.model}  (served as {r.served_model_name or r.model})")
    lines.append(f"  image: {r.image}  ({r.engine} {r.engine_version})")
    for label, value in (
        ("kv_cache_dtype", r.kv_cache_dtype),
        ("speculative", r.speculative),
        ("hicache", r.hicache),
        ("mooncake_store", r.mooncake_store),
        ("pd", r.pd),
        ("gateway", r.gateway),
        ("context_length", r.context_length),
        ("gpu_memory_utilization", r.gpu_memory_utilization),
        ("mem_fraction_static", r.mem_fraction_static),
    ):
        if value is not None:
            lines.append(f"  {label}: {to_jsonable(value)}")
    if r.engine_args:
        lines.append(f"  engine_args: {' '.join(r.engine_args)}")
    for name, value in sorted(r.env.items()):
        lines.append(f"  env {name}={value}")
    measured_data = to_jsonable(r.measured)
    assert isinstance(measured_data, dict)
    measured = {k: v for k, v in measured_data.items() if v not in (None, [])}
    if measured:
        lines.append("  measured:")
        lines.extend(f"    {k}: {v}" for k, v in sorted(measured.items()))
    if r.constraints:
        lines.append("  constraints:")
        for c in r.constraints:
            what = " ".join(str(x) for x in (c.flag, c.name, c.field, c.value) if x is not None)
            skus = f" on {'/'.join(c.when_sku)}" if c.when_sku else ""
            lines.append(f"    {c.id} [{c.kind} {what}{skus}]: {c.reason.strip()}")
    if r.notes.strip():
        lines.append("  notes: " + " ".join(r.notes.split()))
    click.echo("\n".join(lines))


@recipes.command("fit")
@click.argument("recipe_id")
@click.option("-i", "--inventory", "inventory_path", required=True, help="Inventory file (YAML or INI).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (sorted keys).")
def fit_command(recipe_id: str, inventory_path: str, as_json: bool) -> None:
    """Which hosts and groups of the inventory can run RECIPE_ID, and why the others cannot."""
    recipe = load_catalog().get(recipe_id)
    report = fit(recipe, load_inventory(inventory_path))
    if as_json:
        data = to_jsonable(report)
        assert isinstance(data, dict)
        click.echo(dumps(data))
        return
    hosts_ok = [h.host for h in report.hosts if h.fits]
    groups_ok = [g.group for g in report.groups if g.fits and g.group != "all"]
    click.echo(
        f"{recipe.id}: {hardware_text(recipe.hardware)}, one deployment needs {report.nodes_needed} "
        f"host{'s' if report.nodes_needed > 1 else ''}"
    )
    click.echo(f"hosts that fit: {', '.join(hosts_ok) or 'none'}")
    click.echo(f"groups that can hold a deployment: {', '.join(groups_ok) or 'none'}")
    show_table(
        ("host", "fits", "why not"),
        [(h.host, "yes" if h.fits else "no", "; ".join(h.reasons)) for h in report.hosts],
    )
    show_table(
        ("group", "fits", "fitting hosts", "why not"),
        [(g.group, "yes" if g.fits else "no", str(len(g.hosts)), g.reason) for g in report.groups],
    )
