"""What every preflight rule reads and returns: the verdict type (:class:`Check`), the probes'
results (:class:`ProbeResults` and its parts), what a host's units need (:class:`Needs`), and
the cases a rule is given (:class:`HostCase`, :class:`ProbeCase`).  Pure."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal, Mapping, Sequence

from launcher.engines import registry
from launcher.facts.host import HostFacts
from launcher.model import Host, Inventory, Plan, Playbook, Recipe, Unit
from launcher.runtimes import registry as runtimes

Status = Literal["pass", "warn", "fail"]
Level = Literal["cheap", "full"]  # preflight's depth: "full" also hashes the weights

MANIFEST = "fleet.sha256"

STAGE_FIX = "fleet weights stage PLAYBOOK -i INVENTORY --source DIR|HOST:PATH"


@dataclass(frozen=True, slots=True, kw_only=True)
class Check:
    host: str
    unit: str  # "" for host-wide checks; the group for group checks
    name: str
    status: Status
    message: str
    fix: str = ""

    def line(self) -> str:
        """One line for the operator: status, host[/unit], check, message, fix."""
        return check_line(self.status, f"{self.host}/{self.unit}" if self.unit else self.host, self.name, self.message,
                     self.fix)  # fmt: skip


def check_line(status: str, where: str, name: str, message: str, fix: str) -> str:
    return f"{status}: {where}: {name}: {message}" + (f" (fix: {fix})" if fix else "")


@dataclass(frozen=True, slots=True, kw_only=True)
class PathProbe:
    exists: bool
    bytes: int | None = None  # None: unknown (du timed out)
    files: int | None = None
    manifest: str | None = None  # None: no fleet.sha256; "ok"; else what is wrong with it
    staged: str | None = None  # None: no fleet-weights.json; "ok"; else which files differ from it
    revision: str | None = None  # the fleet-weights.json revision


@dataclass(frozen=True, slots=True, kw_only=True)
class ImageProbe:
    status: Literal["visible", "absent", "no-image", "error"]
    detail: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class ProgramsProbe:
    """Which of the programs its units run an image on a host lacks."""

    status: Literal["checked", "no-image", "error"]
    missing: tuple[str, ...] = ()
    detail: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class ReachTarget:
    """A port some ranks must reach on another rank's host before they can start."""

    label: str  # dist-init, master-port, ray, bootstrap, nixl-side-channel, mooncake-master
    group: str  # the group whose port it is
    unit: str  # the unit that will listen there
    host: str
    ip: str  # the listener host's data IP
    port: int
    clients: tuple[tuple[str, str, str], ...]  # (host, unit, source IP)

    @property
    def key(self) -> str:
        return f"{self.ip}:{self.port}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Reach:
    target: ReachTarget
    client: str  # host
    unit: str
    error: str | None  # None: reached; else why not
    probed: bool = True  # False: the probe could not run (error says why)
    unreachable: str = ""  # not probed because SSH could not reach this host (error says how)


@dataclass(frozen=True, slots=True, kw_only=True)
class ProbeResults:
    """What the remote probes found, per host (absent = not probed)."""

    listening_ports: Mapping[str, frozenset[int]] = field(default_factory=dict)
    running_units: Mapping[str, frozenset[str]] = field(default_factory=dict)  # our own units
    paths: Mapping[str, Mapping[str, PathProbe]] = field(default_factory=dict)
    images: Mapping[tuple[str, str], ImageProbe] = field(default_factory=dict)  # (host, unit)
    programs: Mapping[tuple[str, str], ProgramsProbe] = field(default_factory=dict)  # (host, image)
    reach: tuple[Reach, ...] = ()
    listener_errors: Mapping[tuple[str, str], str] = field(default_factory=dict)  # (host, ip:port)
    clock_offset_s: Mapping[str, tuple[float, float]] = field(default_factory=dict)  # (offset, ±)
    errors: Mapping[str, str] = field(default_factory=dict)  # host -> why its probe failed


def data_plane(unit: Unit) -> bool:
    """Ranks that talk to other hosts over the data plane (multi-node ranks, PD workers)."""
    return unit.role in ("rank", "prefill", "decode") and (unit.nnodes > 1 or unit.role != "rank")


def verdict(host: str, unit: str, name: str, ok: bool, good: str, bad: str, fix: str,
           bad_status: Status = "fail") -> Check:
    return Check(host=host, unit=unit, name=name, status="pass" if ok else bad_status,
                 message=good if ok else bad, fix="" if ok else fix)


def size_text(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return f"{n} B"


def parse_size(text: str) -> int | None:
    """Docker's size spelling (``32g``, ``512m``, ``1gb``) in bytes."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([bkmgt]?)b?", text.strip().lower())
    if not m:
        return None
    scale = {"": 1, "b": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}[m.group(2)]
    return int(float(m.group(1)) * scale)


@dataclass(frozen=True, slots=True, kw_only=True)
class Needs:
    """What a host must offer, from its planned units (or from the recipe when planning failed)."""

    gpus: int  # device indices used: 0..gpus-1
    containers: bool
    docker_gpus: bool  # some unit passes --gpus
    data_plane: bool
    shm: int | None  # bytes wanted in the host's /dev/shm (units with --ipc host)


def needs_of(units: Sequence[Unit]) -> Needs:
    shm = [parse_size(u.container.shm_size) for u in units
           if u.container is not None and u.container.ipc_host and u.container.shm_size]
    return Needs(
        gpus=max((max(u.gpus) + 1 for u in units if u.gpus), default=0),
        containers=any(u.container is not None for u in units),
        docker_gpus=any(u.container is not None and u.container.gpus for u in units),
        data_plane=any(data_plane(u) for u in units),
        shm=max((s for s in shm if s), default=None),
    )


def recipe_needs(recipe: Recipe, host: Host, playbook: Playbook | None = None) -> Needs:
    """What a host of ``recipe`` needs when there is no plan to tell (the playbook's dropped
    docker flags still apply)."""
    runtime = (playbook.runtime if playbook else None) or host.spec.runtime
    dropped = playbook.overrides.drop_docker_flags if playbook else ()
    shm = (playbook.overrides.shm_size if playbook else None) or recipe.shm_size
    containers = runtimes.get(runtime).containers
    return Needs(gpus=recipe.hardware.gpus_per_node, containers=containers,
                  docker_gpus=containers and registry.get(recipe.engine).accelerator == "gpu" and "--gpus" not in dropped,
                  data_plane=recipe.topology != "single",
                  shm=parse_size(shm) if "--shm-size" not in dropped and "--ipc" not in dropped else None)


@dataclass(frozen=True, slots=True, kw_only=True)
class HostCase:
    """One host the rules judge: its planned units (none when only the recipe is known), what
    they need, its facts (None: not gathered; ``unreachable`` then says why, when it does)."""

    host: Host
    units: tuple[Unit, ...]
    needs: Needs
    recipe: Recipe
    facts: HostFacts | None
    unreachable: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanCase:
    """The whole plan, for the rules that compare hosts or read the probes (``probes``: None
    before any probe ran)."""

    plan: Plan
    inventory: Inventory
    recipe: Recipe
    facts: Mapping[str, HostFacts]
    probes: ProbeResults | None = None
