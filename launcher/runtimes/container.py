"""The container engine both runtimes drive (``docker``): a unit's ``docker run`` arguments,
the RDMA flags preflight's probe container shares with it, and the images a host has or pulls.

Contract: builders are pure; :func:`ensure_image` does one round trip.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from launcher.errors import PlanError
from launcher.model import STOP_TIMEOUT_S, ContainerSpec, Unit
from launcher.remote import check, sh

if TYPE_CHECKING:
    from launcher.execute.transport import Transport

TOOL = "docker"  # the container engine's client program on the hosts


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
    else:  # docker's bridge: the unit's listen ports on the host, so health checks and peers reach it
        for port in sorted(set(unit.ports.values())):
            args += ["--publish", f"{port}:{port}"]
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


# images

_PULL = 'if docker image inspect "$1" >/dev/null 2>&1; then echo present; else docker pull -q "$1" >/dev/null && echo pulled; fi'


PULL_TIMEOUT_S = 3600.0  # multi-GB engine images on a slow registry mirror


_IMAGES = 'for i in "$@"; do if docker image inspect "$i" >/dev/null 2>&1; then echo "present $i"; else echo "absent $i"; fi; done'


def images_argv(images: Sequence[str]) -> tuple[str, ...]:
    """Which of ``images`` the host has (read only; a dead daemon counts as absent, so the
    pull that follows reports it)."""
    return sh(_IMAGES, *images)


def parse_images(out: str) -> dict[str, bool]:
    found: dict[str, bool] = {}
    for line in out.splitlines():
        state, _, image = line.partition(" ")
        if image and state in ("present", "absent"):
            found[image] = state == "present"
    return found


def ensure_image(shell: Transport, image: str) -> str:
    """``present`` or ``pulled``; a failed pull raises."""
    return check(shell, sh(_PULL, image), label=f"docker pull {image}", timeout=PULL_TIMEOUT_S).strip()
