"""Playbooks: which recipe runs where, with what overrides → :class:`Playbook`.

Contract: :func:`load_playbook` decodes the file strictly and checks, at the line concerned, that
the recipe exists, that the placement roles suit the recipe's topology, that every placement
pattern selects at least one inventory host, that ``replicas`` is only given to engine roles,
and that each secret has exactly one source.  Whether the selected hosts can actually hold the
recipe is the planner's question.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Mapping

from launcher.config.patterns import select
from launcher.config.recipes import Catalog
from launcher.config.schema import decode_as
from launcher.config.unitinputs import check_unit_inputs
from launcher.config.yamlpos import Map, Node, find, load_mapping
from launcher.errors import InputError
from launcher.quoting import env_name_problem
from launcher.model import Inventory, Playbook, Role, Topology

ROLES: Mapping[Topology, tuple[tuple[Role, ...], tuple[Role, ...]]] = {
    # topology: (required roles, optional roles)
    "single": (("single",), ("router", "gateway")),
    "multinode": (("rank",), ("router", "gateway")),
    "pd": (("prefill", "decode", "router"), ("mooncake-master", "gateway")),
}
# Engine roles may run several instances; router, Mooncake master and gateway run once.
REPLICATED: tuple[Role, ...] = ("single", "rank", "prefill", "decode")
_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$")


def load_playbook(path: Path | str, catalog: Catalog, inventory: Inventory) -> Playbook:
    node = load_mapping(path)
    check_unit_inputs(node, ("overrides/env",))
    playbook = decode_as(node, Playbook, given={"path": str(path)})
    check_playbook(playbook, node, catalog, inventory)
    return playbook


def _at(node: Map, key_path: str) -> Node:
    found = find(node, key_path)
    return found if found is not None else node


def check_playbook(playbook: Playbook, node: Map, catalog: Catalog, inventory: Inventory) -> None:
    """The cross-checks of the module docstring; ``node`` is the playbook's YAML."""
    if not _NAME.match(playbook.name):
        raise InputError(
            _at(node, "name").source,
            f"should be lower-case letters, digits and '-' (it names units and containers), got {playbook.name!r}",
            "name",
        )
    try:
        recipe = catalog.get(playbook.recipe)
    except InputError as err:
        raise InputError(_at(node, "recipe").source, err.message, "recipe") from None
    required, optional = ROLES[recipe.topology]
    allowed = required + optional
    for role, placement in playbook.placement.items():
        where = f"placement/{role}"
        if role not in allowed:
            raise InputError(
                _key_source(node, "placement", role).source,
                f"role {role!r} is not used by a {recipe.topology} recipe (roles: {', '.join(allowed)})",
                where,
            )
        if placement.replicas is not None:
            if role not in REPLICATED:
                raise InputError(
                    _at(node, f"{where}/replicas").source,
                    f"replicas is for engine roles ({', '.join(REPLICATED)}); {role!r} runs once",
                    f"{where}/replicas",
                )
            if placement.replicas < 1:
                raise InputError(_at(node, f"{where}/replicas").source, "should be at least 1", f"{where}/replicas")
        select(inventory, placement.hosts, _at(node, f"{where}/hosts").source, f"{where}/hosts")
    placed = {h.name for p in playbook.placement.values() for h in select(inventory, p.hosts)}
    for role, placement in playbook.placement.items():
        if placement.spares is None:
            continue
        where = f"placement/{role}/spares"
        src = _at(node, where).source
        if role not in REPLICATED:
            raise InputError(src, f"spares are for engine roles ({', '.join(REPLICATED)}); {role!r} runs once", where)
        taken = [h.name for h in select(inventory, placement.spares, src, where) if h.name in placed]
        if taken:
            raise InputError(src, f"{', '.join(taken)} already placed: spare hosts must be in no placement", where)
    missing = [r for r in required if r not in playbook.placement]
    if missing:
        raise InputError(
            _at(node, "placement").source,
            f"a {recipe.topology} recipe needs a placement for {', '.join(repr(m) for m in missing)}",
            "placement",
        )
    seen: set[str] = set()
    for i, secret in enumerate(playbook.secrets):
        where = f"secrets/{i}"
        src = _at(node, where).source
        problem = env_name_problem(secret.name)
        if problem is not None:
            raise InputError(src, f"env name {secret.name!r}: {problem}", where)
        if secret.name in seen:
            raise InputError(src, f"secret {secret.name!r} is listed twice", where)
        seen.add(secret.name)
        if (secret.from_env is None) == (secret.from_file is None):
            raise InputError(src, f"secret {secret.name!r}: set exactly one of from_env, from_file", where)
    for name, port in playbook.ports.items():
        if not 1 <= port <= 65535:
            raise InputError(_at(node, f"ports/{name}").source, f"should be a port (1-65535), got {port}", f"ports/{name}")
    _check_bench(playbook, node, recipe.topology)
    if playbook.rollout.max_unavailable < 1:
        raise InputError(
            _at(node, "rollout/max_unavailable").source, "should be at least 1", "rollout/max_unavailable"
        )


def _check_bench(playbook: Playbook, node: Map, topology: Topology) -> None:
    """The ``bench`` section's values parse as ``fleet bench`` will read them; a bench gate only
    where rollouts go batch by batch (a PD deployment switches cohorts: not gated, docs/bench.md)."""
    from launcher.config.benchspec import MAX_CONCURRENCY, parse_shape, parse_slo

    bench = playbook.bench
    for i, shape in enumerate(bench.shapes):
        parse_shape(shape, _at(node, f"bench/shapes/{i}").source, f"bench/shapes/{i}")
    if bench.slo is not None:
        parse_slo(bench.slo, "playbook", _at(node, "bench/slo").source)
    for i, level in enumerate(bench.concurrency):
        if not 1 <= level <= MAX_CONCURRENCY:
            raise InputError(_at(node, f"bench/concurrency/{i}").source, f"should be 1 to {MAX_CONCURRENCY}", f"bench/concurrency/{i}")
    if not bench.scale > 0:
        raise InputError(_at(node, "bench/scale").source, "should be a positive number", "bench/scale")
    gate = playbook.rollout.bench_gate
    if gate is not None and topology == "pd":
        raise InputError(_key_source(node, "rollout", "bench_gate").source,
                         "a PD deployment rolls by cohort switch, which is not bench-gated: the serving cohort carries "
                         "every request, so nothing measures it like the idle new one (docs/bench.md)",
                         "rollout/bench_gate")  # fmt: skip
    if gate is not None:
        if gate.shape is not None:
            parse_shape(gate.shape, _at(node, "rollout/bench_gate/shape").source, "rollout/bench_gate/shape")
        for key, value, low in (("concurrency", gate.concurrency, 1), ("requests", gate.requests, 1)):
            if not low <= value <= MAX_CONCURRENCY:
                raise InputError(_at(node, f"rollout/bench_gate/{key}").source, f"should be 1 to {MAX_CONCURRENCY}",
                                 f"rollout/bench_gate/{key}")  # fmt: skip
        if not 0 < gate.threshold_pct < 100:
            raise InputError(_at(node, "rollout/bench_gate/threshold_pct").source, "should be between 0 and 100 (percent)",
                             "rollout/bench_gate/threshold_pct")  # fmt: skip


def _key_source(node: Map, parent: str, key: str) -> Node:
    block = find(node, parent)
    if isinstance(block, Map):
        k = block.key_node(key)
        if k is not None:
            return k
    return node
