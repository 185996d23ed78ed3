"""Plan -> per-host files: pure and byte-reproducible.

``render(plan, runtime=None)`` reads nothing but its own templates (``templates/*.j2``): no
clock, environment, randomness or host state, and every collection is emitted in sorted order,
so the same plan always gives the same bytes.

Host layout (``D`` = deployment, ``U`` = unit name)::

    /etc/fleet/D/U/run.sh          0755  docker runtime: replaces and starts the container (sh)
    /etc/fleet/D/U/env             0600  the unit's non-secret env, NAME=<shell-quoted value>
    /etc/fleet/D/U/secrets.env     0600  written by the executor at deploy time, same format;
                                         never rendered (render never sees secret values)
    /etc/fleet/D/U/manifest.json   0644  render hash, recipe, image, unit identity, files
    /etc/fleet/NAME                0644  Plan.files[NAME] (gateway config, vLLM's Mooncake store
                                         config), on every host with a unit that mounts it or
                                         whose directory D/U holds it (it counts in that unit's hash)
    /etc/systemd/system/U.service  0644  systemd runtime (docker wrapper or native engine)

Env values never reach argv: the container gets ``-e NAME`` (name only) and docker reads the
value from its own environment, which ``run.sh`` fills by sourcing ``env``/``secrets.env`` with
``set -a`` and systemd fills with ``EnvironmentFile=``; :mod:`launcher.quoting` writes one env
format that both read byte-identically.

Actions are left to the executor, but render builds every command it runs for a unit: each
:class:`RenderedUnit` names its files and carries its ``UnitCommands`` (start, the runtime's own
stop, remove with or without a drain grace), both written by the unit's runtime
(``launcher/runtimes``: its ``unit_files`` and ``commands``); render adds the env file, the
manifest and the plan files, and hashes them all.  The executor orders starts (``Unit.start_order``, ``wants``, health) and keeps multi-node groups
together: systemd cannot bind units on different hosts to each other, so when any rank of a
group is down or unhealthy the executor stops every rank of that group and starts them again,
rank 0 first.  A local ``Restart=on-failure`` / ``--restart unless-stopped`` only covers single
process crashes and reboots.

``render_hash`` is the sha256 of the unit's files (path, mode, content; the manifest excluded)
rendered with an empty ``fleet.render-hash`` label; the final files then carry the hash in that
label, so the executor can compare a running container with the plan.  Generation, deployer and
time are deploy-time facts the executor adds to the manifest.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Mapping

from launcher import quoting
from launcher.errors import PlanError
from launcher.model import STOP_TIMEOUT_S as STOP_TIMEOUT_S  # re-exported: the deploy layer reads it here
from launcher.model import Plan, Runtime, Unit
from launcher.runtimes import registry as runtimes
from launcher.runtimes.base import RenderedFile, UnitCommands, UnitRender

FLEET_ROOT = "/etc/fleet"
SECRETS_FILE = "secrets.env"
MANIFEST_FILE = "manifest.json"

# systemd waits a little longer than the stop grace (model.STOP_TIMEOUT_S) so its own SIGKILL
# never races docker's.
SYSTEMD_STOP_MARGIN_S = 30
RESTART_SEC = 10

MODE_ENV = 0o600
MODE_FILE = 0o644

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
_RECIPE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_./-]*")  # written into comments of scripts and units
_FILE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")


@dataclass(frozen=True, slots=True, kw_only=True)
class RenderedUnit:
    name: str
    runtime: Runtime
    render_hash: str
    unit_dir: str
    files: tuple[str, ...]  # every rendered path of this unit, sorted (manifest included)
    manifest: str  # path of manifest.json
    secrets_file: str  # where the executor writes secrets.env (only if the unit has secrets)
    commands: UnitCommands

    @property
    def start(self) -> tuple[tuple[str, ...], ...]:
        return self.commands.start

    @property
    def stop(self) -> tuple[tuple[str, ...], ...]:
        return self.commands.stop


@dataclass(frozen=True, slots=True, kw_only=True)
class RenderedHost:
    host: str
    files: tuple[RenderedFile, ...]  # sorted by path
    units: tuple[RenderedUnit, ...]  # in plan order (start_order, group, rank)


@dataclass(frozen=True, slots=True, kw_only=True)
class RenderedPlan:
    deployment: str
    recipe: str
    hosts: Mapping[str, RenderedHost]  # sorted by host name


def unit_dir(deployment: str, unit: str) -> str:
    return f"{FLEET_ROOT}/{deployment}/{unit}"


def plan_file_path(name: str) -> str:
    """Where ``Plan.files[name]`` lands on the hosts whose units mount it."""
    return f"{FLEET_ROOT}/{name}"


def render(plan: Plan, runtime: Runtime | None = None) -> RenderedPlan:
    """Files and start/stop argvs per host.  ``runtime`` overrides every unit's own runtime;
    units without a container always get a native systemd unit."""
    _check_name("deployment", plan.deployment)
    if not _RECIPE.fullmatch(plan.recipe):
        raise PlanError(None, f"recipe {plan.recipe!r}: must match [A-Za-z0-9][A-Za-z0-9_./-]*")
    for name in plan.files:
        if not all(_FILE_NAME.fullmatch(part) for part in name.split("/")):
            raise PlanError(None, f"plan file {name!r}: must be a relative path of [A-Za-z0-9_.-] names")
        if not any(_ships(plan, u, name) for u in plan.units):
            raise PlanError(None, f"plan file {name!r}: no unit mounts {plan_file_path(name)}")

    per_host: dict[str, tuple[dict[str, RenderedFile], list[RenderedUnit]]] = {}
    seen: set[tuple[str, str]] = set()
    for unit in plan.units:
        _check_name(f"unit on {unit.host}", unit.name)
        if (unit.host, unit.name) in seen:
            raise PlanError(None, f"unit {unit.name!r}: appears twice on host {unit.host}")
        seen.add((unit.host, unit.name))
        files, rendered = _render_unit(plan, unit, runtime or unit.runtime)
        host_files, host_units = per_host.setdefault(unit.host, ({}, []))
        # A plan file mounted by two units of one host is one file there.
        host_files.update((f.path, f) for f in files)
        host_units.append(rendered)

    hosts = {
        host: RenderedHost(host=host, files=tuple(files[p] for p in sorted(files)), units=tuple(units))
        for host, (files, units) in sorted(per_host.items())
    }
    return RenderedPlan(deployment=plan.deployment, recipe=plan.recipe, hosts=hosts)


def _check_name(what: str, name: str) -> None:
    # Names end up in paths, container names, unit names and systemd settings unquoted.
    if not _NAME.fullmatch(name):
        raise PlanError(None, f"{what} {name!r}: must match [A-Za-z0-9][A-Za-z0-9_.-]*")


def _render_unit(plan: Plan, unit: Unit, runtime: Runtime) -> tuple[list[RenderedFile], RenderedUnit]:
    if unit.container is None:
        runtime = runtimes.native().name
    for name in unit.env:
        _check_env_name(unit, name)
    for secret in unit.secrets:
        _check_env_name(unit, secret.name)
        if secret.name in unit.env:
            raise PlanError(None, f"unit {unit.name!r}: {secret.name} is both a secret and a plain env value")

    first = _unit_files(plan, unit, runtime, render_hash="")
    render_hash = _hash(first)
    files = _unit_files(plan, unit, runtime, render_hash=render_hash)
    d = unit_dir(plan.deployment, unit.name)
    manifest = RenderedFile(
        path=f"{d}/{MANIFEST_FILE}",
        content=_manifest(plan, unit, runtime, render_hash, [f.path for f in files]),
        mode=MODE_FILE,
    )
    files.append(manifest)
    rendered = RenderedUnit(
        name=unit.name,
        runtime=runtime,
        render_hash=render_hash,
        unit_dir=d,
        files=tuple(sorted(f.path for f in files)),
        manifest=manifest.path,
        secrets_file=f"{d}/{SECRETS_FILE}",
        commands=runtimes.get(runtime).commands(unit.name, d),
    )
    return files, rendered


def _check_env_name(unit: Unit, name: str) -> None:
    try:
        quoting.check_env_name(name)
    except quoting.QuotingError as err:
        raise PlanError(None, f"unit {unit.name!r}: {err}") from None


def _hash(files: list[RenderedFile]) -> str:
    h = hashlib.sha256()
    for f in sorted(files, key=lambda f: f.path):
        data = f.content.encode("utf-8")
        h.update(f"{f.path}\0{f.mode:o}\0{len(data)}\0".encode())
        h.update(data)
    return h.hexdigest()


def _manifest(plan: Plan, unit: Unit, runtime: Runtime, render_hash: str, paths: list[str]) -> str:
    d = unit_dir(plan.deployment, unit.name)
    owned = [*paths, f"{d}/{MANIFEST_FILE}"]
    if unit.secrets:
        owned.append(f"{d}/{SECRETS_FILE}")
    doc = {
        "deployment": plan.deployment,
        "unit": unit.name,
        "host": unit.host,
        "group": unit.group,
        "role": unit.role,
        "rank": unit.rank,
        "runtime": runtime,
        "render_hash": render_hash,
        "recipe": plan.recipe,
        "image": unit.container.image if unit.container else None,
        "files": sorted(owned),
    }
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False) + "\n"


def _unit_files(plan: Plan, unit: Unit, runtime: Runtime, *, render_hash: str) -> list[RenderedFile]:
    d = unit_dir(plan.deployment, unit.name)
    env_path, secrets_path = f"{d}/env", f"{d}/{SECRETS_FILE}"
    try:
        files = [RenderedFile(path=env_path, content=quoting.env_file(unit.env), mode=MODE_ENV)]
        files += runtimes.get(runtime).unit_files(UnitRender(
            plan=plan, unit=unit, unit_dir=d, env_path=env_path, secrets_path=secrets_path, render_hash=render_hash,
            context=_context(plan, unit, env_path, secrets_path),
        ))  # fmt: skip
    except quoting.QuotingError as err:
        raise PlanError(None, f"unit {unit.name!r}: {err}") from None
    files.extend(
        RenderedFile(path=plan_file_path(name), content=plan.files[name], mode=MODE_FILE)
        for name in sorted(plan.files)
        if _ships(plan, unit, name)
    )
    return files


def _ships(plan: Plan, unit: Unit, name: str) -> bool:
    """Whether ``Plan.files[name]`` is one of ``unit``'s files: the unit mounts it, or it lies in
    the unit's own directory (a native unit reads it there; a container mounts it)."""
    path = plan_file_path(name)
    mounted = unit.container is not None and any(m.host == path for m in unit.container.mounts)
    return mounted or path.startswith(unit_dir(plan.deployment, unit.name) + "/")


def _context(plan: Plan, unit: Unit, env_path: str, secrets_path: str) -> dict[str, object]:
    where = f"{unit.role} rank {unit.rank}" if unit.nnodes > 1 or unit.rank else unit.role
    start_timeout = unit.health.timeout_s if unit.health else 0
    return {
        "deployment": plan.deployment,
        "recipe": plan.recipe,
        "unit": unit.name,
        "description": quoting.systemd_value(f"fleet {plan.deployment}: {unit.name} ({where}, group {unit.group})"),
        "env_path": env_path,
        "secrets_path": secrets_path,
        "restart_sec": RESTART_SEC,
        # Type=exec: the start job ends when docker is exec'd, so an image pull (inside
        # `docker run`) is never cut short; this bounds ExecStartPre and the exec only.
        "start_timeout": max(start_timeout, 600),
        "stop_timeout": STOP_TIMEOUT_S + SYSTEMD_STOP_MARGIN_S,
        "engine_stop_timeout": STOP_TIMEOUT_S,
    }
