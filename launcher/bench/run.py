"""One ``fleet bench`` sweep against a deployment: refuse an unhealthy one (nothing sent), check
its endpoint answers, run the client once per concurrency level, and assemble the :class:`Run`.

Contract: :func:`refuse_unhealthy` and :func:`engine_gpus` are pure; :func:`check_endpoint` sends
at most two GETs to the endpoint's health URL (no load); :func:`sweep` sends load only to
``url``, bounded per level by ``requests`` and ``duration_s``.  Errors are one-line
:class:`FleetError`\\ s.
"""

from __future__ import annotations

import math
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Mapping, Sequence

from launcher.bench.client import LevelSpec, run_level
from launcher.bench.results import KvTransfers, Level, Run, combine, level_from_aiperf
from launcher.config.benchspec import ATTAINMENT_TARGET, Shape, Slo, level_seed
from launcher.deploy.status import REPROBE_AFTER_S, UnitStatus
from launcher.errors import NotServingError
from launcher.bench.client import WORDS_TOKENIZER
from launcher.model import Playbook, Recipe, Unit
from launcher.observe.load import PrefixCache, Transfers

ENGINE_ROLES = ("single", "rank", "prefill", "decode")
PROBE_TIMEOUT_S = 5.0


@dataclass(frozen=True, slots=True, kw_only=True)
class Sweep:
    """What to send: one shape at each concurrency, to ``url``."""

    url: str
    model: str
    tokenizer: str
    shape: Shape
    slo: Slo
    concurrency: tuple[int, ...]
    requests: int | None  # per level; None = 4 x concurrency, at least 8
    duration_s: float | None  # per level: no request starts after this; None = sized (level_duration)
    timeout_s: float  # one request's limit
    seed: int  # the run's seed; level i, repeat r sends the prompts of level_seed(seed, i + r * levels)
    repeat: int = 1  # runs of each level; the report gives their median and spread
    # Open loop: one level per rate (requests/s, Poisson arrivals, no cap on those in flight)
    # instead of the concurrency levels.
    rates: tuple[float, ...] = ()

    @property
    def loads(self) -> tuple[tuple[int, float | None], ...]:
        """(concurrency, rate) per level: closed loop (c, None), open loop (0, r)."""
        if self.rates:
            return tuple((0, r) for r in self.rates)
        return tuple((c, None) for c in self.concurrency)


def model_name(recipe: Recipe) -> str:
    """The model name requests carry: the served name, else the model."""
    return recipe.served_model_name or recipe.model


def tokenizer_of(flag: str | None, playbook: Playbook, recipe: Recipe) -> str:
    """``--tokenizer``, else the playbook's ``bench.tokenizer``, else the recipe's model."""
    return flag or playbook.bench.tokenizer or recipe.model


def needs_hub(tokenizer: str) -> bool:
    """The tokenizer comes from a model hub (not fleet's, not a local directory)."""
    from pathlib import Path

    return tokenizer != WORDS_TOKENIZER and not Path(tokenizer).is_dir()


def refuse_unhealthy(deployment: str, rows: Sequence[UnitStatus]) -> None:
    """Every unit running and, where it has a health check, answering it."""
    if not rows:
        raise NotServingError(f"{deployment}: not deployed (no units found); nothing sent")
    bad = [r for r in rows if r.state != "running" or r.health not in ("ok", "-")]
    if bad:
        shown = ", ".join(f"{r.host}/{r.unit} {r.state}" + (f" health {r.health}" if r.state == "running" else "") for r in bad[:3])
        more = f" and {len(bad) - 3} more" if len(bad) > 3 else ""
        raise NotServingError(f"{deployment}: not healthy ({shown}{more}); nothing sent")


def generation(rows: Sequence[UnitStatus]) -> int | None:
    """The engines' generation (the newest, while a rollout is half-way)."""
    gens = [r.generation for r in rows if r.role in ENGINE_ROLES and r.generation is not None]
    return max(gens, default=None)


def engine_gpus(units: Sequence[Unit]) -> int:
    """GPUs the plan gives the deployment's engine processes (the per-8-GPU normaliser)."""
    return sum(len(u.gpus) for u in units if u.role in ENGINE_ROLES)


def check_endpoint(url: str, sleep: Callable[[float], None] = time.sleep) -> None:
    """A GET of ``url``/health from this host: the endpoint the client will load answers.  A
    failed GET is tried once more, :data:`~launcher.deploy.status.REPROBE_AFTER_S` later (as
    ``fleet status`` judges health: one slow answer on a busy machine is not a refusal); the
    second failure is the error."""
    for attempt in (1, 2):
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=PROBE_TIMEOUT_S) as r:
                r.read()
            return
        except urllib.error.HTTPError as err:
            why = f"{url}/health answered HTTP {err.code}; nothing sent"
        except OSError as err:
            why = f"{url}: unreachable from this host ({getattr(err, 'reason', err)}); nothing sent"
        if attempt == 1:
            sleep(REPROBE_AFTER_S)
    raise NotServingError(why)


OPEN_LOOP_S = 60.0  # an open-loop level's default requests: this many seconds of arrivals


def requests_for(sweep: Sweep, concurrency: int, rate: float | None = None) -> int:
    """``--requests``, else 4 x concurrency (closed loop) or a minute of arrivals (open loop), at least 8."""
    if sweep.requests is not None:
        return sweep.requests
    return max(8, math.ceil(OPEN_LOOP_S * rate) if rate is not None else 4 * concurrency)


MIN_DURATION_S = 60.0


def level_duration(shape: Shape, slo: Slo, concurrency: int, requests: int, rate: float | None = None) -> float:
    """Seconds a level may issue requests for: its requests in waves of ``concurrency``, each
    request as long as the SLO allows (TTFT + output tokens x TPOT), twice over; open loop, the
    arrivals' span (requests / rate) plus one request, twice over; at least MIN_DURATION_S.  A
    fixed 300 s cut a large shape's level short: aiperf cancelled the requests still running
    (50k+1.5k at the default SLO takes up to 160 s a request)."""
    per_request_s = (slo.ttft_ms + shape.output_len * slo.tpot_ms) / 1000.0
    if rate is not None:
        return max(MIN_DURATION_S, round(2.0 * (requests / rate + per_request_s)))
    waves = -(-requests // concurrency)
    return max(MIN_DURATION_S, round(2.0 * waves * per_request_s))


def sweep_levels(
    sweep: Sweep, artifacts: Path, secrets: Mapping[str, str], on_level: Callable[[Level], None],
    kv: Callable[[], Transfers | None] | None = None, cache: Callable[[], PrefixCache | None] | None = None,
) -> tuple[tuple[Level, ...], str]:
    """Run the client at each concurrency in turn, each level with its own seed; returns the
    levels and the client's name.  ``kv``: reads the decodes' KV-transfer counters (summed),
    ``cache`` the engines' prefix-cache counters, each read before and after each level."""
    levels = []
    client = "aiperf"
    loads = sweep.loads
    for i, (c, rate) in enumerate(loads):
        repeats = []
        for r in range(sweep.repeat):
            seed = level_seed(sweep.seed, i + r * len(loads))
            n = requests_for(sweep, c, rate)
            duration = (sweep.duration_s if sweep.duration_s is not None
                        else level_duration(sweep.shape, sweep.slo, c, n, rate))  # fmt: skip
            spec = LevelSpec(
                urls=(sweep.url,), model=sweep.model, tokenizer=sweep.tokenizer, shape=sweep.shape, slo=sweep.slo,
                concurrency=c, requests=n, duration_s=duration, timeout_s=sweep.timeout_s, seed=seed, rate=rate,
            )  # fmt: skip
            before = kv() if kv is not None else None
            cached_before = cache() if cache is not None else None
            name = f"c{c}" if rate is None else f"rate{rate:g}"
            doc = run_level(spec, artifacts / (name if sweep.repeat == 1 else f"{name}-r{r + 1}"), secrets)
            client = f"aiperf {doc.get('aiperf_version', '?')}"
            level = replace(level_from_aiperf(doc, c), seed=seed, request_rate=rate)
            cached_after = cache() if cache is not None else None
            if cached_before is not None and cached_after is not None:
                level = replace(level, prefix_cache_hit_rate=cached_after.since(cached_before).hit_rate)
            after = kv() if kv is not None else None
            if before is not None and after is not None:
                moved = after.since(before)
                level = replace(level, kv=KvTransfers(done=int(moved.done), failed=int(moved.failed), avg_ms=moved.avg_ms,
                                                      mib=moved.bytes / 2**20))  # fmt: skip
            on_level(level)
            repeats.append(level)
        levels.append(combine(repeats))
    return tuple(levels), client


def utc_now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def assemble(
    *, sweep: Sweep, levels: tuple[Level, ...], client: str, started: str, deployment: str, recipe: str,
    gen: int | None, engine_version: str, image: str, gpus: int, caveats: tuple[str, ...],
    attainment_target: float = ATTAINMENT_TARGET,
) -> Run:  # fmt: skip
    return Run(
        id="", deployment=deployment, recipe=recipe, generation=gen, engine_version=engine_version, image=image,
        gpus=gpus, endpoint=sweep.url, shape=sweep.shape, slo=sweep.slo, started=started, client=client,
        levels=levels, caveats=caveats, seed=sweep.seed, attainment_target=attainment_target,
    )  # fmt: skip
