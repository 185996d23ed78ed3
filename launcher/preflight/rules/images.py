"""Rule family "rdma-in-container" / "programs": per unit, /dev/infiniband is visible inside its
image with the rendered flags (:func:`unit`); per host and image, every program its units run is
in it (:func:`programs`).  Which units and images get those probes is decided here too
(:func:`rdma_container`, :func:`device_dropped`, :func:`programs_of`)."""

from __future__ import annotations

import shlex
from typing import Mapping, Sequence

from launcher import hostscripts
from launcher.engines import registry
from launcher.engines.images import program_of
from launcher.model import Inventory, Plan, Unit
from launcher.preflight.rules.base import Check, ImageProbe, PlanCase, ProbeResults, ProgramsProbe, data_plane
from launcher.runtimes.container import rdma_flags


def unit(case: PlanCase, u: Unit) -> list[Check]:
    assert case.probes is not None
    image = case.probes.images.get((u.host, u.name))
    if image is not None:
        return [_image_check(u, image)]
    if rdma_container(u, case.inventory) and device_dropped(u):
        return [_dropped_check(u)]  # known from the plan: image_units probes nothing for it
    return []


def programs(case: PlanCase) -> list[Check]:
    assert case.probes is not None
    return _program_checks(case.plan, case.probes)


def rdma_container(u: Unit, inventory: Inventory) -> bool:
    """A containerised data-plane rank on a host with an RDMA fabric."""
    return u.container is not None and data_plane(u) and inventory.host(u.host).spec.fabric != "none"


def device_dropped(u: Unit) -> bool:
    """The rendered flags pass no /dev/infiniband and nothing else that could (no extra docker
    args): the container cannot see it, so there is nothing to run to find out."""
    return u.container is not None and "/dev/infiniband" not in u.container.devices and not u.container.extra_args


def programs_of(u: Unit) -> tuple[str, ...]:
    """What ``u``'s image must provide: its program, then what its engine needs for this argv."""
    engine = registry.of_argv(u.argv)
    return (program_of(u.argv), *(engine.image_needs(u.argv) if engine is not None else ()))


def _dropped_check(u: Unit) -> Check:
    assert u.container is not None
    return Check(host=u.host, unit=u.name, name="rdma-in-container", status="warn",
                 message=f"/dev/infiniband is not visible inside {u.container.image}: the playbook drops --device "
                 "(overrides.drop_docker_flags), so NCCL/Mooncake run over TCP",
                 fix="remove --device from overrides.drop_docker_flags to use RDMA")


def _image_check(u: Unit, probe: ImageProbe) -> Check:
    assert u.container is not None
    image = u.container.image
    rendered = "/dev/infiniband" in u.container.devices
    if probe.status == "visible":
        return Check(host=u.host, unit=u.name, name="rdma-in-container", status="pass",
                     message=f"/dev/infiniband visible inside {image} ({probe.detail})")
    if probe.status == "no-image":
        return Check(host=u.host, unit=u.name, name="rdma-in-container", status="warn",
                     message=f"image {image} is not on the host yet; /dev/infiniband inside it not checked",
                     fix=f"docker pull {image}, then run fleet preflight again")
    if probe.status == "absent" and not rendered:
        return _dropped_check(u)
    what = probe.detail if probe.status == "absent" else f"docker run failed: {probe.detail}"
    return Check(host=u.host, unit=u.name, name="rdma-in-container", status="fail",
                 message=f"/dev/infiniband not visible inside {image} with the rendered flags: {what}",
                 fix="load the RDMA drivers on the host and keep --device /dev/infiniband --cap-add IPC_LOCK "
                 "--ulimit memlock=-1; otherwise NCCL falls back to TCP silently")


_IMAGE_SETTING = {"router": "images.router", "mooncake-master": "images.mooncake_master", "gateway": "gateway.image"}


def _program_checks(plan: Plan, probes: ProbeResults) -> list[Check]:
    """Per host and image: each program its units run is in it (fail naming host, image and
    program), or the image is not there to look into (warn)."""
    out: list[Check] = []
    for (host, image), probe in sorted(probes.programs.items()):
        users = [u for u in plan.units if u.host == host and u.container is not None and u.container.image == image]
        if not users:
            continue
        unit = users[0].name
        if probe.status == "no-image":
            out.append(Check(host=host, unit=unit, name="programs", status="warn",
                             message=f"image {image} is not on the host yet; the programs it must run are not checked",
                             fix=f"docker pull {image}, then run fleet preflight again"))
        elif probe.status == "error":
            out.append(Check(host=host, unit=unit, name="programs", status="warn",
                             message=f"could not look into image {image}: {probe.detail}",
                             fix="see the error (the check runs sh inside the image)"))
        elif not probe.missing:
            programs = sorted({p for u in users for p in programs_of(u)})
            out.append(Check(host=host, unit=unit, name="programs", status="pass",
                             message=f"image {image} has {', '.join(programs)}"))
        for program in probe.missing:
            u = next(u for u in users if program in programs_of(u))
            verb = "runs" if program == program_of(u.argv) else "needs"
            setting = _IMAGE_SETTING.get(u.role, "image")
            where = "the recipe's gateway.image" if u.role == "gateway" else \
                f"{setting} in the recipe, or overrides.{setting} in the playbook"
            out.append(Check(host=host, unit=u.name, name="programs", status="fail",
                             message=f"image {image} on {host} has no {program} (the {u.role} {verb} it)",
                             fix=f"use an image that provides it: {where}"))
    return out


PROBE_CONTAINER_PREFIX = "fleet-preflight-"


DOCKER_RUN_TIMEOUT_S = 60


ImagePrograms = tuple[tuple[str, tuple[str, ...]], ...]  # (image, programs run from it), by image


_IMAGE_PROGRAMS = hostscripts.text("image-programs.sh")


def rdma_probe_flags(unit: Unit) -> tuple[str, ...]:
    """The rendered docker flags that decide what the container sees of RDMA (render's
    :func:`launcher.runtimes.container.rdma_flags`), the unit's extra docker args, and the image."""
    c = unit.container
    assert c is not None
    return (*rdma_flags(c), *c.extra_args, c.image)



def probe_sections(images: Sequence[Unit], programs: ImagePrograms, deployment: str) -> list[tuple[str, str]]:
    """The host probe's sections this family reads: ``image:<unit>`` (``ls /dev/infiniband`` in
    the unit's image with its rendered flags) and ``programs:<j>`` (the programs the image of
    ``programs[j]`` lacks; its probe container named after ``deployment``, so a leftover of a
    killed run is removed by the next one)."""
    parts = []
    for u in images:
        name = PROBE_CONTAINER_PREFIX + u.name
        assert u.container is not None
        run = shlex.join(("docker", "run", "--rm", "--name", name, "--network", "none",
                          *rdma_probe_flags(u)[:-1], "--entrypoint", "ls", u.container.image,
                          "-1", "/dev/infiniband"))
        image = shlex.quote(u.container.image)
        parts.append((
            f"image:{u.name}",
            f"docker rm -f {shlex.quote(name)} >/dev/null 2>&1; "
            f"if ! docker image inspect {image} >/dev/null 2>&1; then echo 'fleet: image not present'; exit 3; fi; "
            f"fleet_t {DOCKER_RUN_TIMEOUT_S} {run}",
        ))
    for j, (image, progs) in enumerate(programs):
        name = f"{PROBE_CONTAINER_PREFIX}{deployment}-programs-{j}"
        run = shlex.join(("docker", "run", "--rm", "--name", name, "--network", "none", "--entrypoint", "sh",
                          image, "-c", _IMAGE_PROGRAMS, "image-programs", *progs))
        parts.append((
            f"programs:{j}",
            f"docker rm -f {shlex.quote(name)} >/dev/null 2>&1; "
            f"if ! docker image inspect {shlex.quote(image)} >/dev/null 2>&1; then echo 'fleet: image not present'; "
            f"exit 3; fi; fleet_t {DOCKER_RUN_TIMEOUT_S} {run}",
        ))
    return parts


def parse_probe(s: Mapping[str, tuple[int, str]],
                programs: ImagePrograms) -> tuple[dict[str, ImageProbe], dict[str, ProgramsProbe]]:  # fmt: skip
    """(unit -> its image's /dev/infiniband verdict, image -> its programs verdict)."""
    images = {name.split(":", 1)[1]: _image_verdict(rc, body) for name, (rc, body) in s.items() if name.startswith("image:")}
    progs = {image: _programs_verdict(*s[f"programs:{j}"]) for j, (image, _) in enumerate(programs)
             if f"programs:{j}" in s}
    return images, progs


def _image_verdict(rc: int, text: str) -> ImageProbe:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if rc == 0:
        devices = [ln for ln in lines if not ln.startswith(("WARNING", "ls:"))]
        if any(d.startswith("uverbs") for d in devices):
            return ImageProbe(status="visible", detail=" ".join(devices))
        return ImageProbe(status="absent", detail="no uverbs device" + (f" (lists {' '.join(devices)})" if devices else ""))
    if rc == 3 and "fleet: image not present" in lines:
        return ImageProbe(status="no-image")
    if rc == 124:
        return ImageProbe(status="error", detail=f"docker run did not finish within {DOCKER_RUN_TIMEOUT_S}s")
    if any("/dev/infiniband" in ln and "No such file" in ln and ln.startswith("ls:") for ln in lines):
        return ImageProbe(status="absent", detail="no /dev/infiniband in the container")
    err = next((ln for ln in lines if ln.startswith("docker:")), lines[0] if lines else f"docker run exited {rc}")
    err = err.removeprefix("docker: ").removeprefix("Error response from daemon: ")
    return ImageProbe(status="error", detail=err)


def _programs_verdict(rc: int, text: str) -> ProgramsProbe:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if rc == 0 and lines[-1:] == ["checked"]:
        return ProgramsProbe(status="checked", missing=tuple(ln[len("missing "):] for ln in lines
                                                            if ln.startswith("missing ")))
    if rc == 3 and "fleet: image not present" in lines:
        return ProgramsProbe(status="no-image")
    if rc == 124:
        return ProgramsProbe(status="error", detail=f"docker run did not finish within {DOCKER_RUN_TIMEOUT_S}s")
    err = next((ln for ln in lines if ln.startswith("docker:")), lines[-1] if lines else f"docker run exited {rc}")
    return ProgramsProbe(status="error", detail=err.removeprefix("docker: ").removeprefix("Error response from daemon: "))
