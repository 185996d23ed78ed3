"""Host rule family "host-memory": the Mooncake store's segments fit in the host's RAM."""

from __future__ import annotations

from typing import Sequence

from launcher.facts.host import HostFacts
from launcher.model import Host, MooncakeStore, Recipe, Unit
from launcher.preflight.rules.base import Check, HostCase, parse_size, size_text


def host(case: HostCase) -> list[Check]:
    if case.facts is None:
        return []
    return _store_memory_checks(case.host, case.units, case.recipe, case.facts)


# A host needs this much RAM left beside the Mooncake store's segments (engine, OS, page cache).
STORE_RAM_HEADROOM = 0.8


def segments_ram(store: MooncakeStore, gpus: int) -> int | None:
    """The host RAM, in bytes, the Mooncake store's global segments take on a host whose engines
    run on ``gpus`` GPUs: each GPU's engine process contributes ``global_segment_size`` (the
    catalog's sizes are per GPU).  None when the size does not parse.  Local buffers are not
    counted (SGLang 0.5.23 uses a fixed 16 MB one)."""
    per_gpu = parse_size(store.global_segment_size)
    return None if per_gpu is None else per_gpu * gpus


def _store_memory_checks(host: Host, units: Sequence[Unit], recipe: Recipe, hf: HostFacts) -> list[Check]:
    """The Mooncake store's global segments are host RAM (:func:`segments_ram` of the host's
    engine GPUs).  Fails above the host's RAM, warns above 80% of it."""
    store = recipe.mooncake_store
    if store is None or hf.mem_total is None:
        return []
    gpus = sum(len(u.gpus) for u in units if u.role in ("single", "rank", "prefill", "decode"))
    need = segments_ram(store, gpus) if gpus else None
    if need is None:
        return []
    have = hf.mem_total
    said = (f"Mooncake store segments need {size_text(need)} of host RAM ({gpus} GPUs x "
            f"{store.global_segment_size}); the host has {size_text(have)}")
    fix = "use hosts with more RAM, or a recipe of your own with a smaller mooncake_store.global_segment_size (per GPU)"
    if need > have:
        return [Check(host=host.name, unit="", name="host-memory", status="fail", message=said, fix=fix)]
    if need > STORE_RAM_HEADROOM * have:
        return [Check(host=host.name, unit="", name="host-memory", status="warn",
                      message=f"{said}: less than 20% left for the engines and the OS", fix=fix)]
    return [Check(host=host.name, unit="", name="host-memory", status="pass", message=said)]
