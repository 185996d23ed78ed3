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
:class:`RenderedUnit` names its files and carries its :class:`UnitCommands` (start, the
runtime's own stop, remove with or without a drain grace, hold), and :func:`rdma_flags` are the
docker flags that decide what a container sees of RDMA (preflight's probe container gets the
same).  The executor orders starts (``Unit.start_order``, ``wants``, health) and keeps multi-node groups
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

import functools
import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

import jinja2

from launcher import hostscripts, quoting
from launcher.errors import PlanError
from launcher.model import STOP_TIMEOUT_S as STOP_TIMEOUT_S  # re-exported: the deploy layer reads it here
from launcher.model import ContainerSpec, Plan, Runtime, Unit

FLEET_ROOT = "/etc/fleet"
SYSTEMD_DIR = "/etc/systemd/system"
SYSTEMD_DOCKER = "/usr/bin/docker"  # where docker-ce and docker.io install the client
ENV_PROGRAM = "/usr/bin/env"  # resolves a native unit's relative program on the unit's PATH
SECRETS_FILE = "secrets.env"
MANIFEST_FILE = "manifest.json"

# systemd waits a little longer than the stop grace (model.STOP_TIMEOUT_S) so its own SIGKILL
# never races docker's.
SYSTEMD_STOP_MARGIN_S = 30
RESTART_SEC = 10

MODE_ENV = 0o600
MODE_SCRIPT = 0o755
MODE_FILE = 0o644

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
_RECIPE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_./-]*")  # written into comments of scripts and units
_FILE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
# In an installed wheel the templates are package data, ``launcher/templates`` (pyproject maps the
# checkout's top-level ``templates/`` there); a checkout, editable or not, has only the latter.
_PACKAGED_TEMPLATES = Path(__file__).resolve().parent / "templates"
_TEMPLATES = (
    _PACKAGED_TEMPLATES if _PACKAGED_TEMPLATES.is_dir() else _PACKAGED_TEMPLATES.parents[1] / "templates"
)


@dataclass(frozen=True, slots=True, kw_only=True)
class RenderedFile:
    path: str  # absolute path on the host
    content: str
    mode: int


# Removing a unit, gone already or not (docker: stop with a drain grace, remove; systemd: disable
# too, so a reboot does not bring it back); holding a multi-node group's docker ranks before any
# is stopped (systemd needs nothing: `systemctl stop` cancels a pending automatic restart).  The
# scripts' headers say why and how.
_DOCKER_RM = hostscripts.text("docker-remove.sh")
_SYSTEMD_STOP = hostscripts.text("systemd-remove.sh")
_DOCKER_HOLD = hostscripts.text("docker-hold.sh")


@dataclass(frozen=True, slots=True, kw_only=True)
class UnitCommands:
    """Every command the executor runs for one unit, as argv lists (:func:`unit_commands`)."""

    name: str
    runtime: Runtime
    start: tuple[tuple[str, ...], ...]  # run in order on the host
    stop: tuple[tuple[str, ...], ...]  # the runtime's own stop (what an operator would type)

    def remove(self, grace_s: int | None = None) -> tuple[str, ...]:
        """Stops and removes the unit (docker: SIGTERM and ``grace_s`` to drain first, if
        given; systemd: disabled too); succeeds if it is already gone."""
        if self.runtime == "docker":
            return ("sh", "-c", _DOCKER_RM, "sh", self.name, "" if grace_s is None else str(grace_s))
        return ("sh", "-c", _SYSTEMD_STOP, "sh", f"{self.name}.service")


def hold_argv(runtime: Runtime, names: Sequence[str]) -> tuple[str, ...] | None:
    """Keeps the runtime from restarting ``names`` while they are being stopped (None: nothing
    to do for this runtime or no names).  Never fails: a missing unit is simply not held."""
    if runtime != "docker" or not names:
        return None
    return ("sh", "-c", _DOCKER_HOLD, "sh", *names)


def unit_commands(name: str, runtime: Runtime, unit_dir: str) -> UnitCommands:
    """The commands of unit ``name`` rendered for ``runtime`` into ``unit_dir`` (docker:
    ``sh run.sh`` / ``docker stop``; systemd: ``systemctl``)."""
    if runtime == "docker":
        return UnitCommands(
            name=name, runtime=runtime, start=(("sh", f"{unit_dir}/run.sh"),),
            stop=(("docker", "stop", "-t", str(STOP_TIMEOUT_S), name),),
        )  # fmt: skip
    svc = f"{name}.service"
    return UnitCommands(
        name=name, runtime=runtime, start=(("systemctl", "daemon-reload"), ("systemctl", "enable", "--now", svc)),
        stop=(("systemctl", "stop", svc),),
    )  # fmt: skip


def rdma_flags(c: ContainerSpec) -> tuple[str, ...]:
    """The docker flags that decide what a container sees of RDMA devices: the unit's
    ``docker run`` and preflight's probe container both pass exactly these."""
    args: list[str] = []
    for dev in c.devices:
        args += ["--device", dev]
    for cap in c.cap_add:
        args += ["--cap-add", cap]
    for ulimit in c.ulimits:
        args += ["--ulimit", ulimit]
    return tuple(args)


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


def service_path(unit: str) -> str:
    return f"{SYSTEMD_DIR}/{unit}.service"


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
        runtime = "systemd"
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
        commands=unit_commands(unit.name, runtime, d),
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
        ctx = _context(plan, unit, env_path, secrets_path)
        if unit.container is None:
            program = unit.argv[0] if unit.argv else ""
            if not program or program.startswith("-") or "=" in program:
                raise PlanError(None, f"unit {unit.name!r}: a native unit needs a program as argv[0], got {program!r}")
            argv = unit.argv if program.startswith("/") else (ENV_PROGRAM, *unit.argv)
            ctx["exec_start"] = quoting.systemd_exec(argv)
            files.append(RenderedFile(path=service_path(unit.name), content=_template("native.service.j2", ctx), mode=MODE_FILE))
        elif runtime == "docker":
            run = docker_run_args(unit, detached=True, render_hash=render_hash)
            ctx["run_args"] = quoting.shell_join(run)
            ctx["stop_args"] = quoting.shell_join(("stop", "-t", str(STOP_TIMEOUT_S), unit.name))
            ctx["rm_args"] = quoting.shell_join(("rm", "-f", unit.name))
            ctx["env_path_q"] = quoting.shell_join((env_path,))
            ctx["secrets_path_q"] = quoting.shell_join((secrets_path,))
            files.append(RenderedFile(path=f"{d}/run.sh", content=_template("docker-run.sh.j2", ctx), mode=MODE_SCRIPT))
        else:
            run = docker_run_args(unit, detached=False, render_hash=render_hash)
            ctx["exec_start"] = quoting.systemd_exec((SYSTEMD_DOCKER, *run))
            ctx["exec_start_pre"] = quoting.systemd_exec((SYSTEMD_DOCKER, "rm", "-f", unit.name))
            ctx["exec_stop"] = quoting.systemd_exec((SYSTEMD_DOCKER, "stop", "-t", str(STOP_TIMEOUT_S), unit.name))
            files.append(RenderedFile(path=service_path(unit.name), content=_template("docker.service.j2", ctx), mode=MODE_FILE))
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


def docker_run_args(unit: Unit, *, detached: bool, render_hash: str) -> tuple[str, ...]:
    """``docker`` arguments (without the program) that run ``unit.argv`` in its container.

    ``argv[0]`` becomes ``--entrypoint`` so the process is exactly ``unit.argv`` whatever
    ENTRYPOINT the image declares.  Detached (docker runtime): the container restarts itself
    (policy from the plan, ``unless-stopped``: back after a daemon restart or reboot).
    Foreground (systemd runtime): ``--rm``, systemd restarts it.  No ``--init``: SGLang and
    vLLM handle SIGTERM as PID 1 and reap their own workers, and docker-init is not on every
    host; ``--stop-timeout`` gives them time to drain.
    """
    c = unit.container
    if c is None:
        raise PlanError(None, f"unit {unit.name!r}: has no container to run")
    args: list[str] = ["run"]
    args += ["-d", "--restart", c.restart_policy] if detached else ["--rm"]
    args += ["--name", unit.name, "--stop-timeout", str(STOP_TIMEOUT_S)]
    if c.network_host:
        args += ["--network", "host"]
    if c.ipc_host:
        args += ["--ipc", "host"]
    if c.shm_size:
        args += ["--shm-size", c.shm_size]
    if c.gpus:
        # docker parses --gpus as one CSV record: the list needs CSV quotes inside the token.
        args += ["--gpus", '"device=' + ",".join(str(g) for g in c.gpus) + '"']
    args += rdma_flags(c)
    for m in c.mounts:
        if not m.host.startswith("/") or not m.container.startswith("/") or ":" in m.host + m.container:
            raise PlanError(None, f"unit {unit.name!r}: mount {m.host}:{m.container}: paths must be absolute, without ':'")
        if "{" in m.host:
            raise PlanError(None, f"unit {unit.name!r}: mount {m.host}: unfilled placeholder")
        args += ["-v", f"{m.host}:{m.container}" + (":ro" if m.read_only else "")]
    labels = dict(c.labels)
    labels.update(
        {
            "fleet.deployment": unit.deployment,
            "fleet.unit": unit.name,
            "fleet.group": unit.group,
            "fleet.role": unit.role,
            "fleet.rank": str(unit.rank),
            "fleet.render-hash": render_hash,
        }
    )
    for key in sorted(labels):
        args += ["--label", f"{key}={labels[key]}"]
    for name in sorted({*unit.env, *(s.name for s in unit.secrets)}):
        args += ["-e", name]
    if unit.argv:
        args += ["--entrypoint", unit.argv[0]]
    args += c.extra_args
    args.append(c.image)
    args += unit.argv[1:]
    return tuple(args)


@functools.lru_cache(maxsize=1)
def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(_TEMPLATES)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )


def _template(name: str, ctx: Mapping[str, object]) -> str:
    return _environment().get_template(name).render(ctx)
