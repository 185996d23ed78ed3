"""``fleet bench PLAYBOOK -i INV`` / ``fleet bench list`` / ``fleet bench compare A B``: measure a
running deployment through its public endpoint with aiperf, report it in the catalog's terms
beside the recipe's figures, keep it, compare two kept runs (docs/bench.md).

Exit codes: 0 ok; 1 the client failed; 2 bad flags, an unhealthy deployment or an endpoint that
does not answer (nothing is sent then); 130 interrupted (the client is stopped with it).
"""

from __future__ import annotations

import functools
import json
import sys
from contextlib import ExitStack
from pathlib import Path
from typing import Callable

import click

from launcher.bench import report, store
from launcher.bench.client import WORDS_TOKENIZER
from launcher.bench.results import Level, Run, to_json
from launcher.bench.run import (
    ENGINE_ROLES, Sweep, assemble, check_endpoint, engine_gpus, generation, model_name, needs_hub, refuse_unhealthy,
    sweep_levels, tokenizer_of, utc_now,
)  # fmt: skip
from launcher.config.benchspec import (
    ATTAINMENT_TARGET, CATALOG_SHAPES, DEFAULT_CONCURRENCY, SEED_RANGE, Shape, Slo, default_slo, level_seed, new_seed,
    parse_concurrency, parse_rates, parse_shape, parse_slo, parse_target,
)  # fmt: skip
from launcher.cli import cli
from launcher.cli.common import connector, ssh_options
from launcher.config.recipes import open_catalog
from launcher.errors import UsageError
from launcher.model import Playbook
from launcher.output import print_table, table


class _BenchGroup(click.Group):
    """``fleet bench PLAYBOOK ...`` runs a bench; ``list`` and ``compare`` are subcommands."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ("-h", "--help"):
            args = ["run", *args]
        return super().parse_args(ctx, args)


@cli.group("bench", cls=_BenchGroup)
def bench_group() -> None:
    """Measure a deployment (fleet bench PLAYBOOK -i INV), list kept runs, compare two."""


def _shapes(flags: tuple[str, ...], playbook: Playbook) -> tuple[Shape, ...]:
    if flags:
        return tuple(parse_shape(s.strip(), None, "--shape") for f in flags for s in f.split(",") if s.strip())
    return tuple(parse_shape(s) for s in (playbook.bench.shapes or CATALOG_SHAPES))


def _slo(flag: str | None, playbook: Playbook) -> Slo:
    if flag is not None:
        return parse_slo(flag, "--slo")
    if playbook.bench.slo is not None:
        return parse_slo(playbook.bench.slo, f"playbook {playbook.bench.source}")
    return default_slo()


@bench_group.command("run")
@click.argument("playbook")
@ssh_options
@click.option("--shape", "shapes", multiple=True, metavar="IN+OUT",
              help="Workload shape(s): 50k+1.5k, 8k+1k or IN+OUT (default: the playbook's, else the catalog's two).")
@click.option("--concurrency", default=None, metavar="N,N,...", help="Concurrency sweep (default 1,4,16).")
@click.option("--request-rate", "request_rate", default=None, metavar="R,R,...",
              help="Open loop instead: requests/s per level, Poisson arrivals, no cap on requests in flight.")
@click.option("--attainment-target", "attainment_pct", type=float, default=ATTAINMENT_TARGET * 100, show_default=True,
              metavar="PCT", help="Share of requests within both SLOs a level needs for the SLO capacity (percent).")
@click.option("--requests", type=click.IntRange(1, 100000), default=None,
              help="Requests per level (default 4 x concurrency, at least 8).")
@click.option("--duration", "duration_s", type=click.FloatRange(1, 86400), default=None,
              help="Seconds per level after which no request starts (default: sized from the shape, SLO, concurrency and requests).")
@click.option("--slo", default=None, metavar="ttft=MS,tpot=MS", help="Goodput SLO (default: the playbook's, else fleet's).")
@click.option("--scale", type=click.FloatRange(0, 1000, min_open=True), default=None,
              help="Multiply the shapes' lengths (small engines such as the sandbox's).")
@click.option("--tokenizer", default=None,
              help=f"HF id or local dir for prompt lengths (default: the playbook's, else the recipe's model; {WORDS_TOKENIZER}: fleet's word-level one).")
@click.option("--request-timeout", "timeout_s", type=click.FloatRange(1, 86400), default=600.0, show_default=True,
              help="One request's time limit in seconds.")
@click.option("--secret", "secrets", multiple=True, metavar="NAME[=@FILE|=env:VAR]",
              help="Secret source override (HF_TOKEN for a gated tokenizer).")
@click.option("--repeat", type=click.IntRange(1, 20), default=1, show_default=True,
              help="Run each level N times (fresh prompts each); the report gives the median and the spread.")
@click.option("--seed", type=click.IntRange(0, SEED_RANGE - 1), default=None,
              help="The run's prompt seed, to repeat a run (its report's seed; default: a fresh one per run).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON (a list when several shapes).")
@click.option("-o", "--output", "out_dir", default=None, type=click.Path(file_okay=False),
              help="Also write each report's JSON, markdown and PNG plot here.")
# Hidden: a bench measures the whole serving path (router, prefill and decode ranks); part of it
# cannot be measured, so --limit is refused with the reason rather than ignored (docs/cli.md).
@click.option("--limit", "-l", "limit_pattern", default=None, metavar="PATTERN", hidden=True)
def run_command(
    playbook: str, inventory_path: str, forks: int, trust_new_hosts: bool, known_hosts: tuple[str, ...],
    shapes: tuple[str, ...], concurrency: str | None, request_rate: str | None, attainment_pct: float,
    requests: int | None, duration_s: float | None, slo: str | None,
    scale: float | None, tokenizer: str | None, timeout_s: float, secrets: tuple[str, ...], repeat: int,
    seed: int | None, as_json: bool, out_dir: str | None, limit_pattern: str | None,
) -> None:  # fmt: skip
    """Drive PLAYBOOK's endpoint (its router, else rank 0) with aiperf at each concurrency and
    report goodput within the SLO, normalised per 8 GPUs, beside the recipe's figures.  Refuses
    a deployment that is not healthy before sending anything."""
    from launcher.deploy import crossing
    from launcher.deploy.demo import endpoint
    from launcher.deploy.secrets import resolve
    from launcher.deploy.session import Connections
    from launcher.bench import prefix, version
    from launcher.observe.load import Transfers
    from launcher.deploy.status import status
    from launcher.pipeline import deployment, load_inputs, target_of

    if limit_pattern is not None:
        raise UsageError("--limit: fleet bench measures the whole deployment through its endpoint (every host serves "
                         "it) and cannot measure part of it; fleet top --limit shows some hosts' load")
    levels_flag = parse_concurrency(concurrency) if concurrency is not None else None
    rates = parse_rates(request_rate) if request_rate is not None else ()
    if rates and levels_flag:
        raise UsageError("--request-rate (open loop) and --concurrency (closed loop): give one")
    attainment = parse_target(attainment_pct)
    if slo is not None:
        parse_slo(slo, "--slo")
    for f in shapes:
        for s in f.split(","):
            parse_shape(s.strip(), None, "--shape")
    inputs = load_inputs(playbook, inventory_path)
    pb = inputs.playbook
    recipe = inputs.catalog.get(pb.recipe)
    the_slo = _slo(slo, pb)
    factor = scale if scale is not None else pb.bench.scale
    the_shapes = tuple(s.scaled(factor) for s in _shapes(shapes, pb))
    levels = levels_flag or pb.bench.concurrency or DEFAULT_CONCURRENCY
    tok = tokenizer_of(tokenizer, pb, recipe)
    wanted = tuple(s for s in pb.secrets if s.name == "HF_TOKEN") if needs_hub(tok) else ()
    secret_values = resolve(wanted, secrets) if wanted else {}
    dep = deployment(inputs)
    target = target_of(dep)
    with ExitStack() as stack:
        conn = stack.enter_context(connector(known_hosts, trust_new_hosts))
        rows = status(target, conn.connect, forks)
        refuse_unhealthy(target.deployment, rows)
        kv: Callable[[], Transfers | None] | None = None
        if crossing.applies(target.units):
            # Prefill/decode: the decodes' own KV-transfer counters around each level.
            decodes = tuple(h for h in target.hosts if any(d.host == h.name and d.unit.role == "decode" for d in target.units))
            session = stack.enter_context(Connections(decodes, conn.connect, forks))
            session.require_all()
            kv = functools.partial(crossing.decode_transfers, session.transports, target.units)
        url = endpoint(target).url
        check_endpoint(url)
        # The engines' own prefix-cache counters around each level (read on their hosts).
        eps = prefix.engine_endpoints([d.unit for d in target.units])
        cache = functools.partial(prefix.read, target.hosts, eps, conn, forks) if eps else None

        the_plan = dep.plan
        engines = [u for u in the_plan.units if u.role in ENGINE_ROLES]
        image = engines[0].container.image if engines and engines[0].container else recipe.image
        gpus = engine_gpus(the_plan.units)
        hosts = {u.host for u in engines}
        skus = sorted({str(h.spec.gpu_model) for h in inputs.inventory.hosts if h.name in hosts and h.spec.gpu_model})
        gen = generation(rows)
        # what the running engines say they are (their own version endpoint), not the recipe's
        served = version.read(target.hosts, [d.unit for d in target.units], conn, forks)
        caveats = report.caveats(recipe, image=image, gpus=gpus, skus=skus, scale=factor, served=served)
        out = Path(out_dir) if out_dir else None
        runs: list[Run] = []
        for k, shape in enumerate(the_shapes):
            # --seed: the first shape's run seed; a later shape's is derived past its levels' seeds
            run_seed = new_seed() if seed is None else level_seed(seed, 4096 * k)
            sweep = Sweep(url=url, model=model_name(recipe), tokenizer=tok, shape=shape, slo=the_slo, concurrency=levels,
                          requests=requests, duration_s=duration_s, timeout_s=timeout_s, seed=run_seed, repeat=repeat,
                          rates=rates)  # fmt: skip
            loads = (f"request rate {','.join(f'{r:g}' for r in rates)} req/s (Poisson)" if rates
                     else f"concurrency {','.join(map(str, levels))}")  # fmt: skip
            click.echo(f"bench {target.deployment} gen {gen if gen is not None else '-'}: {shape.label} "
                       f"({shape.input_len}+{shape.output_len} tokens) at {loads} "
                       f"via {url}; SLO ttft={the_slo.ttft_ms:g}ms,tpot={the_slo.tpot_ms:g}ms ({the_slo.origin}); seed {run_seed}", err=True)  # fmt: skip
            started = utc_now()
            artifacts = (out or store.root()) / "artifacts" / f"{target.deployment}-{started.replace(':', '')}-{len(runs)}"
            done, client = sweep_levels(sweep, artifacts, secret_values, _progress, kv, cache)
            run = store.save(assemble(
                sweep=sweep, levels=done, client=client, started=started, deployment=target.deployment, recipe=recipe.id,
                gen=gen, engine_version=served.text, image=image, gpus=gpus, caveats=caveats, attainment_target=attainment,
            ))  # fmt: skip
            # scaled lengths: the recipe's full-shape figures are not shown beside them as comparable
            figures = report.figures(recipe, shape) if factor == 1.0 else ()
            if out is not None:
                out.mkdir(parents=True, exist_ok=True)
                (out / f"{run.id}.json").write_text(json.dumps(to_json(run), indent=1) + "\n")
                (out / f"{run.id}.md").write_text(report.markdown(run, figures))
                report.plot(run, figures, out / f"{run.id}.png", report.recipe_gpus(recipe))
            if not as_json:
                click.echo(report.markdown(run, figures))
            click.echo(f"saved as {run.id}", err=True)
            runs.append(run)
        if as_json:
            docs = [to_json(r) for r in runs]
            click.echo(json.dumps(docs[0] if len(docs) == 1 else docs, indent=1))
        failed = sum(lv.failed + lv.cancelled for r in runs for lv in r.levels)
        sys.exit(0 if not failed else 1)


def _progress(level: Level) -> None:
    cancelled = f", {level.cancelled} cancelled at the level's end" if level.cancelled else ""
    click.echo(f"  {level.load}: {level.completed} completed, {level.failed} failed{cancelled}, "
               f"{level.output_throughput_tok_s:.1f} output tok/s, goodput {level.goodput_tok_s:.1f} tok/s"
               f"{report.cache_note(level)}", err=True)  # fmt: skip


@bench_group.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print the runs as JSON.")
def list_command(as_json: bool) -> None:
    """The kept runs, oldest first (``$FLEET_BENCH_DIR``, else ~/.local/state/fleet/bench)."""
    runs = store.runs()
    if as_json:
        click.echo(json.dumps([to_json(r) for r in runs], indent=1))
        return
    rows = [
        (r.id, r.deployment, r.recipe, "-" if r.generation is None else str(r.generation), r.shape.label,
         str(len(r.levels)), f"{r.goodput_tok_s:.1f}", _num(r.goodput_per_8gpu_tok_s), r.started)
        for r in runs
    ]  # fmt: skip
    columns = ("run", "deployment", "recipe", "gen", "shape", "levels", "goodput tok/s", "per 8 GPUs", "started")
    print_table(table(columns, rows, title=str(store.root())))


def _num(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}"


def _signed(v: float | None, what: str) -> str:
    return f"{what} n/a" if v is None else f"{v:+.1f}% {what}"


# How the catalog words its report.gains metrics.
_METRICS = {
    "normalized-throughput-within-slo": "normalized throughput within the SLO",
    "normalized-throughput-8gpu-within-slo": "throughput per 8 GPUs within the SLO",
}


@bench_group.command("compare")
@click.argument("a")
@click.argument("b")
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as JSON.")
@click.option("--force", is_flag=True,
              help="Compare runs that swept different levels, shapes, SLOs or GPU counts (warned, not refused).")
def compare_command(a: str, b: str, as_json: bool, force: bool) -> None:
    """B against A (two kept runs, by name or unique prefix), as the catalog reports a tuned
    variant against its baseline: ``+44.0% goodput at 8k+1k``.  When one run's recipe is a tuned
    variant of the other's, the catalog's own figure at that shape is shown beside it.  Runs
    that swept different levels, shapes, SLOs or GPU counts are refused (exit 2) unless --force."""
    cmp = store.compare(store.load(a), store.load(b))
    if cmp.warnings and not force:
        raise UsageError(f"{cmp.b.id} vs {cmp.a.id}: not like for like -- {'; '.join(cmp.warnings)}; "
                         "--force compares them anyway")  # fmt: skip
    for w in cmp.warnings:
        click.echo(f"WARNING: {cmp.b.id} vs {cmp.a.id}: {w} (compared anyway: --force)", err=True)
    gain = store.catalog_gain(cmp.a, cmp.b, open_catalog().recipes)
    if as_json:
        click.echo(json.dumps({
            "a": cmp.a.id, "b": cmp.b.id, "shape": cmp.b.shape.label, "goodput_pct": cmp.goodput_pct,
            "per_8gpu": cmp.per_8gpu, "ttft_p50_pct": cmp.ttft_p50_pct, "tpot_p50_pct": cmp.tpot_p50_pct,
            "warnings": list(cmp.warnings),
            "levels": [{"concurrency": d.concurrency, "request_rate": d.request_rate, "goodput_pct": d.goodput_pct, "ttft_p50_pct": d.ttft_p50_pct,
                        "tpot_p50_pct": d.tpot_p50_pct, "attainment": list(d.attainment),
                        "inside_spread": d.inside_spread} for d in cmp.levels],
            "catalog": None if gain is None else {
                "tuned": gain.tuned, "baseline": gain.baseline, "workload": gain.workload, "gain_pct": gain.percent,
                "metric": gain.metric, "measured_pct": gain.measured_pct, "per_8gpu": gain.per_8gpu,
            },
        }, indent=1))  # fmt: skip
        return
    norm = " (per 8 GPUs)" if cmp.per_8gpu else ""
    click.echo(f"{cmp.b.id} vs {cmp.a.id}: {_signed(cmp.goodput_pct, 'goodput')}{norm} at {cmp.b.shape.base_label}; "
               f"at the best level {_signed(cmp.ttft_p50_pct, 'TTFT p50')}, {_signed(cmp.tpot_p50_pct, 'TPOT p50')}")  # fmt: skip
    for r in (cmp.a, cmp.b):
        click.echo(f"  {r.id}: {r.deployment} gen {r.generation} ({r.recipe}), goodput {r.goodput_tok_s:.1f} tok/s, "
                   f"per 8 GPUs {_num(r.goodput_per_8gpu_tok_s)}, SLO ttft={r.slo.ttft_ms:g},tpot={r.slo.tpot_ms:g}")  # fmt: skip
    if gain is not None:
        scaled = "" if cmp.b.shape.label == cmp.b.shape.base_label else " (lengths scaled here: the catalog's figure is for the full shape)"
        click.echo(f"  catalog: {gain.tuned} vs its baseline {gain.baseline}: {gain.percent:+.1f}% "
                   f"{_METRICS.get(gain.metric, gain.metric)} at {gain.workload}; measured: "
                   f"{_signed(gain.measured_pct, 'goodput')}{' (per 8 GPUs)' if gain.per_8gpu else ''}{scaled}")  # fmt: skip
    for d in cmp.levels:
        shares = " -> ".join("-" if x is None else f"{100 * x:.0f}%" for x in d.attainment)
        att = "" if d.attainment == (None, None) else f", within both SLOs {shares}"
        if d.inside_spread is not None:
            att += (", inside the repeats' spread: no difference shown" if d.inside_spread
                    else ", outside the repeats' spread")  # fmt: skip
        click.echo(f"  at {d.load}: {_signed(d.goodput_pct, 'goodput')}, {_signed(d.ttft_p50_pct, 'TTFT p50')}, "
                   f"{_signed(d.tpot_p50_pct, 'TPOT p50')}{att}")  # fmt: skip
    for w in cmp.warnings:
        click.echo(f"  warning: {w}")
