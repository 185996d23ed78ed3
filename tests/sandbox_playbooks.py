"""Playbooks that sandbox test modules write for themselves: a catalog recipe placed on sandbox
hosts with the sandbox's overrides, as playbooks/sandbox/*.yaml have them -- the stand-in image,
the docker flags this machine cannot honour dropped, a small /dev/shm -- plus each test's own."""

from __future__ import annotations

from typing import Mapping

DROP = "[--gpus, --device, --ulimit]"
DROP_KEEP_DEVICE = "[--gpus, --ulimit]"  # the hosts' fake HCAs have real device nodes for --device


def standin_playbook(
    name: str,
    recipe: str,
    placement: Mapping[str, str],
    *,
    drop: str = DROP,
    start_timeout_s: int | None = None,
    env: Mapping[str, str] | None = None,
    overrides: str = "",
    ports: Mapping[str, int] | None = None,
    rest: str = "",
) -> str:
    """The playbook's YAML text.  ``placement``: role -> hosts; ``env`` values are written
    double-quoted; ``overrides``: more lines of the overrides mapping, indented; ``rest``: more
    top-level sections, after the ports."""
    lines = [f"name: {name}", f"recipe: {recipe}", "placement:"]
    lines += [f"  {role}:\n    hosts: {hosts}" for role, hosts in placement.items()]
    lines += ["overrides:", "  image: fleet-standin:latest", f"  drop_docker_flags: {drop}", "  shm_size: 1g"]
    if start_timeout_s is not None:
        lines.append(f"  start_timeout_s: {start_timeout_s}")
    if env:
        lines += ["  env:", *(f'    {k}: "{v}"' for k, v in env.items())]
    text = "\n".join(lines) + "\n" + overrides
    if ports:
        text += "ports:\n" + "".join(f"  {k}: {v}\n" for k, v in ports.items())
    return text + rest
