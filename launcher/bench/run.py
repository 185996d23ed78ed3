"""One ``fleet bench`` sweep against a deployment: refuse an unhealthy one (nothing sent), check
its endpoint answers, run the client once per concurrency level, and assemble the :class:`Run`.

Contract: :func:`refuse_unhealthy` and :func:`engine_gpus` are pure; :func:`check_endpoint` sends
one GET to the endpoint's health URL (no load); :func:`sweep` sends load only to ``url``, bounded
per level by ``requests`` and ``duration_s``.  Errors are one-line :class:`FleetError`\\ s.
"""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Sequence

from launcher.bench.client import LevelSpec, run_level
from launcher.bench.results import Level, Run, level_from_aiperf
from launcher.bench.spec import Shape, Slo
from launcher.deploy.status import UnitStatus
from launcher.errors import NotServingError
from launcher.bench.client import WORDS_TOKENIZER
from launcher.model import Playbook, Recipe, Unit

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
    duration_s: float  # per level: no request starts after this
    timeout_s: float  # one request's limit


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


def check_endpoint(url: str) -> None:
    """One GET of ``url``/health from this host: the endpoint the client will load answers."""
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=PROBE_TIMEOUT_S) as r:
            r.read()
    except urllib.error.HTTPError as err:
        raise NotServingError(f"{url}/health answered HTTP {err.code}; nothing sent") from None
    except OSError as err:
        reason = getattr(err, "reason", err)
        raise NotServingError(f"{url}: unreachable from this host ({reason}); nothing sent") from None


def requests_for(sweep: Sweep, concurrency: int) -> int:
    return sweep.requests if sweep.requests is not None else max(8, 4 * concurrency)


def sweep_levels(
    sweep: Sweep, artifacts: Path, secrets: Mapping[str, str], on_level: Callable[[Level], None]
) -> tuple[tuple[Level, ...], str]:
    """Run the client at each concurrency in turn; returns the levels and the client's name."""
    levels = []
    client = "aiperf"
    for c in sweep.concurrency:
        spec = LevelSpec(
            urls=(sweep.url,), model=sweep.model, tokenizer=sweep.tokenizer, shape=sweep.shape, slo=sweep.slo,
            concurrency=c, requests=requests_for(sweep, c), duration_s=sweep.duration_s, timeout_s=sweep.timeout_s,
        )  # fmt: skip
        doc = run_level(spec, artifacts / f"c{c}", secrets)
        client = f"aiperf {doc.get('aiperf_version', '?')}"
        level = level_from_aiperf(doc, c)
        on_level(level)
        levels.append(level)
    return tuple(levels), client


def utc_now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def assemble(
    *, sweep: Sweep, levels: tuple[Level, ...], client: str, started: str, deployment: str, recipe: str,
    gen: int | None, engine_version: str, image: str, gpus: int, caveats: tuple[str, ...],
) -> Run:  # fmt: skip
    return Run(
        id="", deployment=deployment, recipe=recipe, generation=gen, engine_version=engine_version, image=image,
        gpus=gpus, endpoint=sweep.url, shape=sweep.shape, slo=sweep.slo, started=started, client=client,
        levels=levels, caveats=caveats,
    )  # fmt: skip
