"""What a plan is allowed to do but an operator should hear before it runs.

Contract: :func:`warnings` returns one line per finding, in plan order, each said once: flags
the pinned engine version deprecates, an engine version fleet has no option snapshot for, an
engine image whose name or tag says another engine or version than the recipe's pin, and an
``overrides.image`` / ``overrides.images`` that units running natively under systemd do not use.
Refusals (an unknown or removed flag, overrides the argv contradicts) are the planner's
:class:`~launcher.errors.PlanError`\\ s; this module only warns.  Pure.
"""

from __future__ import annotations

from launcher.engines import optioncheck
from launcher.model import Plan, Playbook, Recipe, RoleImages

ENGINE_ROLES = frozenset({"single", "rank", "prefill", "decode"})


def warnings(recipe: Recipe, playbook: Playbook, plan: Plan) -> tuple[str, ...]:
    out: list[str] = []
    engines = [u for u in plan.units if u.role in ENGINE_ROLES]
    for argv in dict.fromkeys(u.argv for u in engines):
        out.extend(optioncheck.argv_warnings(argv, recipe.engine, recipe.engine_version))
    for image in dict.fromkeys(u.container.image for u in engines if u.container is not None):
        found = optioncheck.image_warning(image, recipe.engine, recipe.engine_version)
        if found is not None:
            out.append(found)
    ov = playbook.overrides
    native = [u.host for u in plan.units if u.container is None]
    overridden = [name for name, given in (("image", ov.image), ("images", ov.images != RoleImages())) if given]
    if native and overridden:
        hosts = ", ".join(dict.fromkeys(native))
        out.append(f"{playbook.source.path}: overrides.{' and overrides.'.join(overridden)} not used on {hosts}: "
                   f"runtime systemd runs the programs installed on the host, not an image")  # fmt: skip
    return tuple(dict.fromkeys(out))
