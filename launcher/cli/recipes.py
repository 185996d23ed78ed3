"""``fleet recipes list|show|fit``: browse the catalog and see where a recipe could run.

Tables for people, ``--json`` (sorted keys) for scripts; loader errors are one line, exit 2.
"""

from __future__ import annotations

import difflib
import sys
import typing
from typing import Iterable, Sequence

import click
import yaml
from rich.console import Console

from launcher.cli import cli
from launcher.cli.options import inventory_option
from launcher.config.fit import fit
from launcher.config.inventory_sources import load_sources
from launcher.config.recipes import load_catalog
from launcher.engines import registry
from launcher.errors import UsageError
from launcher.model import GpuSku, Hardware, Parallelism, Recipe, Report, Topology
from launcher.output import dumps, print_listing
from launcher.plan import to_jsonable
from launcher.preflight.rules.base import size_text
from launcher.preflight.rules.memory import STORE_RAM_HEADROOM, segments_ram


def show_table(columns: Sequence[str], rows: Iterable[Sequence[str]], title: str | None = None, *,
               console: Console | None = None) -> None:  # fmt: skip
    """:func:`launcher.output.print_listing` (ids never broken); to a pipe or a file, 200 columns."""
    if console is None:
        console = Console(file=sys.stdout)
        if not console.is_terminal:  # a pipe or a file: do not squeeze ids into 80 columns
            console = Console(file=sys.stdout, width=200)
    print_listing(columns, list(rows), title=title, console=console)


def checked_choice(flag: str, value: str | None, choices: Iterable[str]) -> str | None:
    """``value`` when it is one of ``choices`` (None passes); else a :class:`UsageError` with
    did-you-mean (matched ignoring case and dashes: ``rtx6000d`` -> ``RTX-6000D``) and the
    valid values, so a typo in a filter is not an empty list."""
    known = list(choices)
    if value is None or value in known:
        return value

    def folded(s: str) -> str:
        return s.lower().replace("-", "").replace("_", "")

    exact = [c for c in known if folded(c) == folded(value)]
    close = exact or [
        c for f in difflib.get_close_matches(folded(value), [folded(c) for c in known], n=1, cutoff=0.6)
        for c in known if folded(c) == f
    ]  # fmt: skip
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise UsageError(f"{flag}: unknown value {value!r}{hint}; one of: {', '.join(known)}")


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


def network_text(r: Recipe) -> str:
    """The engine containers' network as the render sets it (``runtimes/container.py``)."""
    if r.network == "host":
        return "host (--network host)"
    http = registry.get(r.engine).http_port
    return (f"bridge (docker's bridge network, no host networking; each unit's listen ports published on "
            f"the host, --publish {http}:{http} for the HTTP port unless the playbook sets another)")


def store_ram_text(r: Recipe) -> str:
    """The host RAM a node's Mooncake global segments take, as preflight's host-memory check counts
    it (:func:`launcher.preflight.rules.memory.segments_ram` of the node's GPUs)."""
    assert r.mooncake_store is not None
    gpus = r.hardware.gpus_per_node
    need = segments_ram(r.mooncake_store, gpus)
    if need is None:
        return f"unknown (global_segment_size {r.mooncake_store.global_segment_size!r} does not parse)"
    return (f"{size_text(need)} per node ({gpus} GPUs x {r.mooncake_store.global_segment_size} global segment); "
            f"preflight fails a host with less RAM and warns above {STORE_RAM_HEADROOM:.0%} of it")


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
    checked_choice("--family", family, dict.fromkeys(r.family for r in catalog.recipes.values()))
    checked_choice("--engine", engine, registry.names())
    checked_choice("--gpu", sku, typing.get_args(GpuSku))
    checked_choice("--topology", topology, typing.get_args(Topology))
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
    if r.hardware.fabric:
        lines.append(f"  fabric: {r.hardware.fabric} (the catalog's figures were measured over it)")
    lines.append(f"  model: {r.model}  (served as {r.served_model_name or r.model})")
    lines.append(f"  image: {r.image}  ({r.engine} {r.engine_version})")
    for role, image in (("router", r.images.router), ("mooncake_master", r.images.mooncake_master)):
        if image is not None:
            lines.append(f"  {role} image: {image}")
    lines.append(f"  network: {network_text(r)}")
    for label, value in (
        ("kv_cache_dtype", r.kv_cache_dtype),
        ("speculative", r.speculative),
        ("hicache", r.hicache),
        ("mooncake_store", r.mooncake_store),
        ("gateway", r.gateway),
        ("context_length", r.context_length),
        ("gpu_memory_utilization", r.gpu_memory_utilization),
        ("mem_fraction_static", r.mem_fraction_static),
    ):
        if value is not None:
            lines.append(f"  {label}: {to_jsonable(value)}")
    if r.mooncake_store is not None:
        lines.append(f"  mooncake_store host RAM: {store_ram_text(r)}")
    if r.pd is not None:
        # Nested roles read as YAML (the recipe's own language), not as a Python dict.
        pd_yaml = yaml.safe_dump({"pd": to_jsonable(r.pd)}, sort_keys=False, default_flow_style=False)
        lines.extend("  " + line for line in pd_yaml.splitlines())
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
@inventory_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON (sorted keys).")
def fit_command(recipe_id: str, inventory_path: str, as_json: bool) -> None:
    """Which hosts and groups of the inventory can run RECIPE_ID, and why the others cannot."""
    recipe = load_catalog().get(recipe_id)
    report = fit(recipe, load_sources(inventory_path))
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
        ("host", "fits", "why not", "note"),
        [(h.host, "yes" if h.fits else "no", "; ".join(h.reasons), "; ".join(h.notes)) for h in report.hosts],
    )
    show_table(
        ("group", "fits", "fitting hosts", "why not"),
        [(g.group, "yes" if g.fits else "no", str(len(g.hosts)), g.reason) for g in report.groups],
    )
