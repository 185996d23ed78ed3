"""Host rule family "docker" / "nvidia-runtime": hosts of container units run a docker daemon
that answers and can pass GPUs (``--gpus``) where units ask for them."""

from __future__ import annotations

from launcher.preflight.rules.base import Check, HostCase, verdict
from launcher.runtimes import container


def host(case: HostCase) -> list[Check]:
    hf, needs, h = case.facts, case.needs, case.host.name
    if hf is None or not needs.containers:
        return []
    if container.TOOL in hf.missing_tools:
        return [Check(host=h, unit="", name="docker", status="fail", message="docker is not installed",
                      fix="install docker (docker-ce or docker.io)")]
    if hf.docker_version is None:
        err = hf.docker_error or "docker daemon not answering"
        return [Check(host=h, unit="", name="docker", status="fail",
                      message=f"docker daemon not answering: {err}", fix=_docker_fix(err))]
    out = [Check(host=h, unit="", name="docker", status="pass", message=f"docker {hf.docker_version}")]
    if needs.docker_gpus:
        ok = "nvidia" in hf.docker_runtimes or bool(hf.nvidia_toolkit)
        have = "nvidia runtime registered" if "nvidia" in hf.docker_runtimes else "nvidia-container-toolkit installed"
        out.append(verdict(h, "", "nvidia-runtime", ok, have,
                          "docker cannot pass GPUs (--gpus): no nvidia runtime and no NVIDIA container "
                          "toolkit on the host",
                          "install nvidia-container-toolkit, run nvidia-ctk runtime configure "
                          "--runtime=docker and restart docker"))
    return out


def _docker_fix(error: str) -> str:
    if "permission denied" in error:
        return "connect as root or add the SSH user to the docker group"
    return "start the docker daemon (systemctl start docker) and check it answers: docker info"
