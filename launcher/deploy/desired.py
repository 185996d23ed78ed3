"""What should run where, as the deploy layer sees it: one :class:`Desired` per unit (its files,
render hash, run script), grouped into restart groups and start steps.

Contract: pure.  A group's units may live on several hosts; a group restarts as a whole.  Steps
are the distinct ``start_order`` values, ascending (0 Mooncake, 1 engines, 2 routers, 3 gateway).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterable, Mapping, Sequence

from launcher.limit import refuse_split
from launcher.model import Plan, Unit
from launcher.quoting import env_file
from launcher.render import RenderedPlan
from launcher.runtimes.base import UnitCommands


@dataclass(frozen=True, slots=True, kw_only=True)
class File:
    path: str
    content: bytes
    mode: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Desired:
    unit: Unit
    dir: str  # /etc/fleet/<deployment>/<unit>: the manifest and prev/ live here
    files: tuple[File, ...]  # rendered files but the manifest (fleet writes it, with generation)
    owned: tuple[str, ...]  # every path the unit owns (manifest and secrets file included)
    render_hash: str
    secrets_path: str
    commands: UnitCommands  # as render built them
    recipe: str
    image: str | None

    @property
    def host(self) -> str:
        return self.unit.host

    @property
    def name(self) -> str:
        return self.unit.name

    @property
    def start(self) -> tuple[tuple[str, ...], ...]:
        return self.commands.start


def from_rendered(plan: Plan, rendered: RenderedPlan) -> tuple[Desired, ...]:
    """One :class:`Desired` per planned unit, in plan order."""
    out = []
    for unit in plan.units:
        host = rendered.hosts[unit.host]
        ru = next(r for r in host.units if r.name == unit.name)
        by_path = {f.path: f for f in host.files}
        files = tuple(
            File(path=p, content=by_path[p].content.encode(), mode=by_path[p].mode)
            for p in ru.files
            if p != ru.manifest
        )
        owned = (*ru.files, ru.secrets_file) if unit.secrets else ru.files
        out.append(
            Desired(
                unit=replace(unit, runtime=ru.runtime),
                dir=ru.unit_dir,
                files=files,
                owned=tuple(sorted(owned)),
                render_hash=ru.render_hash,
                secrets_path=ru.secrets_file,
                commands=ru.commands,
                recipe=rendered.recipe,
                image=unit.container.image if unit.container else None,
            )
        )
    return tuple(out)


def groups(units: Iterable[Desired]) -> dict[str, tuple[Desired, ...]]:
    """Units by restart group, groups in plan order, ranks ascending."""
    out: dict[str, list[Desired]] = {}
    for d in units:
        out.setdefault(d.unit.group, []).append(d)
    return {g: tuple(sorted(ds, key=lambda d: d.unit.rank)) for g, ds in out.items()}


def step_of(group: Sequence[Desired]) -> int:
    return min(d.unit.start_order for d in group)


def limit(units: Sequence[Desired], hosts: Iterable[str]) -> tuple[Desired, ...]:
    """The units on ``hosts``; a group cut in two by the limit is refused (groups restart whole)."""
    keep = set(hosts)
    refuse_split(((d.unit.group, d.host) for d in units), keep)
    return tuple(d for d in units if d.host in keep)


def secrets_file(d: Desired, values: Mapping[str, str]) -> File | None:
    """The unit's ``secrets.env`` (mode 0600) from values resolved on the control node."""
    if not d.unit.secrets:
        return None
    env = {ref.name: values[ref.name] for ref in d.unit.secrets}
    return File(path=d.secrets_path, content=env_file(env).encode(), mode=0o600)
