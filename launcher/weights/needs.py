"""Which weights each engine unit reads (:func:`weight_needs`: target, draft, tokenizer, as a path
its mounts reach or a repo id), and which model directories each host of a deployment needs, and
where (:func:`model_needs`).  Pure, from the plan; preflight checks the same needs.

A model is needed on exactly the hosts that run an engine unit reading it (target, and draft
when the recipe has one), at the host path its units read: the path the engine is given, mapped
back through the unit's mounts, or -- for a repo id -- fleet's staging convention
``{models_dir}/<repo id>`` (what preflight looks for).  The source holds each model at its
relative name: the path below the host's ``models_dir`` (``<org>/<name>`` for a repo id), else
the directory's base name.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass

from launcher.engines import flags, registry
from launcher.errors import UsageError
from launcher.model import Host, Inventory, Plan, Recipe, Unit

OFFLINE_ENV = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")


def _to_host(unit: Unit, container_path: str) -> str | None:
    """A container path mapped back to the host through the unit's mounts (native: as is)."""
    if unit.container is None:
        return container_path
    for m in sorted(unit.container.mounts, key=lambda m: -len(m.container)):
        root = m.container.rstrip("/")
        if container_path == m.container or container_path.startswith(root + "/"):
            return m.host.rstrip("/") + container_path[len(root):] if root else m.host
    return None


def _hf_cache(unit: Unit, repo: str) -> str | None:
    """Host path of ``repo`` in the Hugging Face hub cache the unit's process uses."""
    env = unit.env
    hub = env.get("HF_HUB_CACHE") or env.get("HUGGINGFACE_HUB_CACHE")
    if not hub:
        home = env.get("HF_HOME") or ("/root/.cache/huggingface" if unit.container else None)
        if home is None:
            return None
        hub = posixpath.join(home, "hub")
    host = _to_host(unit, hub)
    return posixpath.join(host, "models--" + repo.replace("/", "--")) if host else None


@dataclass(frozen=True, slots=True, kw_only=True)
class WeightNeed:
    what: str  # "weights" / "draft weights"
    value: str  # as the engine gets it: a path, or a Hugging Face repo id
    local: str | None = None  # host path when the engine is given a path
    staged: str | None = None  # repo id: where the fleet convention stages it ({models_dir}/<repo>)
    hf_cache: str | None = None  # repo id: the HF cache entry the engine will use
    beside: bool = False  # a local path that must sit beside the target on every rank (DSPARK draft)
    offline: bool = False  # HF_HUB_OFFLINE: nothing can be downloaded


def _need(unit: Unit, host: Host, what: str, value: str, beside: bool = False) -> WeightNeed:
    offline = any(unit.env.get(k, "").lower() in ("1", "true", "yes") for k in OFFLINE_ENV)
    if value.startswith("/"):
        return WeightNeed(what=what, value=value, local=_to_host(unit, value), beside=beside, offline=offline)
    if re.fullmatch(r"[\w.-]+/[\w.-]+", value):
        # A repo id is fetched like the target, into the same cache: nothing to sit beside.
        return WeightNeed(what=what, value=value, staged=posixpath.join(host.spec.models_dir, value),
                          hf_cache=_hf_cache(unit, value), offline=offline)
    return WeightNeed(what=what, value=value, offline=offline)


def weight_needs(unit: Unit, host: Host, recipe: Recipe) -> tuple[WeightNeed, ...]:
    """The weights an engine unit reads: target, draft when the recipe has one, tokenizer when
    the engine is given a separate one."""
    if unit.role not in ("single", "rank", "prefill", "decode"):
        return ()
    out = []
    engine = registry.get(recipe.engine)
    # A Ray node loads the weights for the one `vllm serve` on rank 0: vLLM's model is the
    # positional argument, which overrides cannot change, so the recipe's model is the final one.
    model = recipe.model if unit.argv[:1] == ("ray",) else engine.model_value(unit.argv)
    if model:
        out.append(_need(unit, host, "weights", model))
    draft = None if unit.argv[:1] == ("ray",) else engine.draft_value(unit.argv)
    if draft:
        beside = bool(recipe.speculative and recipe.speculative.draft_beside_target)
        out.append(_need(unit, host, "draft weights", draft, beside))
    tokenizer = None if unit.argv[:1] == ("ray",) else flags.value(unit.argv, engine.tokenizer_flags)
    if tokenizer and tokenizer != model:
        out.append(_need(unit, host, "tokenizer", tokenizer))
    return tuple(out)


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelNeed:
    model: str  # as the units name it (repo id or path)
    what: str  # "weights" / "draft weights"
    rel: str  # its directory below the source root
    paths: tuple[tuple[str, str], ...]  # (host, host path) in inventory order


def source_rel(path: str, models_dir: str) -> str:
    root = models_dir.rstrip("/") + "/"
    return path[len(root):].strip("/") if path.startswith(root) else posixpath.basename(path.rstrip("/"))


def model_needs(plan: Plan, inventory: Inventory, recipe: Recipe) -> tuple[ModelNeed, ...]:
    """Every model the plan's engine units read, with its host paths; target first."""
    found: dict[str, tuple[str, str, dict[str, str]]] = {}
    order = {h.name: i for i, h in enumerate(inventory.hosts)}
    for u in plan.units:
        host = inventory.host(u.host)
        for need in weight_needs(u, host, recipe):
            path = need.local or need.staged
            if path is None:
                raise UsageError(f"{u.host}/{u.name}: {need.what} {need.value!r} is neither a path its mounts "
                                 "reach nor a repo id: nothing to stage")
            rel = source_rel(path, host.spec.models_dir)
            what, _, hosts = found.setdefault(need.value, (need.what, rel, {}))
            if hosts.setdefault(u.host, path) != path:
                raise UsageError(f"{u.host}: units read {need.value} from both {hosts[u.host]} and {path}")
    return tuple(ModelNeed(model=m, what=what, rel=rel,
                           paths=tuple(sorted(hosts.items(), key=lambda kv: order[kv[0]])))
                 for m, (what, rel, hosts) in sorted(found.items(), key=lambda kv: kv[1][0] != "weights"))
