"""A recipe's hard-won rules, checked on the FINAL argv/env/parallelism of each instance.

Contract: :func:`check` raises :class:`PlanError` for the first violated constraint that applies
to the instance's GPU SKUs.  When the recipe as written satisfies the rule and the playbook's
overrides break it, the error points at the overrides
(``playbooks/x.yaml:12:7: overrides/engine_args: refused by constraint ID: REASON``); when the
recipe breaks its own rule it points at the constraint.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from launcher.config.recipes import field_value
from launcher.engines import flags
from launcher.errors import PlanError
from launcher.model import Constraint, Overrides, Recipe


@dataclass(frozen=True, slots=True, kw_only=True)
class Subject:
    """What a constraint is evaluated on: a recipe view (its parallelism already the effective
    one of the instance) with the argv and env one rank runs with."""

    recipe: Recipe
    argv: tuple[str, ...]
    env: Mapping[str, str]


def _norm(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def holds(c: Constraint, s: Subject) -> bool:
    if c.kind in ("arg", "arg-absent"):
        assert c.flag is not None
        found = flags.values(s.argv, (c.flag,))
        if c.value is not None:
            found = tuple(v for v in found if v and v[0] == _norm(c.value))
        return bool(found) == (c.kind == "arg")
    if c.kind == "env":
        assert c.name is not None
        return s.env.get(c.name) == _norm(c.value)
    assert c.field is not None
    actual = field_value(s.recipe, c.field)
    if c.kind == "min":
        return isinstance(actual, int) and isinstance(c.value, int) and actual >= c.value
    return _norm(actual) == _norm(c.value)


def applies(c: Constraint, skus: frozenset[str]) -> bool:
    return not c.when_sku or bool(skus.intersection(c.when_sku))


def _override_key(c: Constraint, overrides: Overrides) -> str:
    if c.kind == "env":
        return "overrides/env"
    if c.flag is not None and c.flag in overrides.remove_args:
        return "overrides/remove_args"
    return "overrides/engine_args"


def check(
    constraints: tuple[Constraint, ...],
    *,
    final: Subject,
    written: Subject,
    overrides: Overrides,
    skus: frozenset[str],
) -> None:
    """``written`` is the same instance without the playbook's overrides."""
    for c in constraints:
        if not applies(c, skus) or holds(c, final):
            continue
        if not holds(c, written):
            raise PlanError(
                c.source, f"recipe {final.recipe.id} breaks its own constraint {c.id}: {c.reason}", "constraints"
            )
        raise PlanError(overrides.source, f"refused by constraint {c.id}: {c.reason}", _override_key(c, overrides))
