"""What real Ansible says about an inventory or a host pattern (the reference the loaders are
tested against).  Runs ``ansible-inventory`` / ``ansible`` from ansible-core."""

from __future__ import annotations

import functools
import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class AnsibleView:
    order: tuple[str, ...]  # `ansible all --list-hosts`
    groups: dict[str, frozenset[str]]  # group -> hosts incl. descendants' (as --list shows them)
    hostvars: dict[str, dict[str, Any]]


def _env(tmp: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        ANSIBLE_INVENTORY_UNPARSED_FAILED="1",  # a parse failure is an error, not a warning
        ANSIBLE_INVENTORY_ENABLED="yaml,ini",
        ANSIBLE_LOCALHOST_WARNING="0",
        ANSIBLE_HOME=tmp,
        ANSIBLE_LOCAL_TEMP=tmp,
        ANSIBLE_NOCOLOR="1",
    )
    return env


def _run(argv: list[str]) -> str:
    tmp = "/tmp/fleet-tests-ansible"
    os.makedirs(tmp, exist_ok=True)
    proc = subprocess.run(argv, capture_output=True, text=True, env=_env(tmp), check=False)
    if proc.returncode != 0:
        raise AssertionError(f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc.stdout


def list_hosts(inventory: Path, pattern: str) -> tuple[str, ...]:
    out = _run(["ansible", "-i", str(inventory), pattern, "--list-hosts"])
    lines = [ln.strip() for ln in out.splitlines() if ln.strip()]
    assert lines and lines[0].startswith("hosts ("), out
    return tuple(lines[1:])


@functools.lru_cache(maxsize=None)
def inventory_view(inventory: Path) -> AnsibleView:
    data = json.loads(_run(["ansible-inventory", "-i", str(inventory), "--list"]))
    meta = data.pop("_meta")

    def closure(name: str) -> frozenset[str]:
        entry = data.get(name, {})
        hosts = set(entry.get("hosts", ()))
        for child in entry.get("children", ()):
            hosts |= closure(child)
        return frozenset(hosts)

    return AnsibleView(
        order=list_hosts(inventory, "all"),
        groups={name: closure(name) for name in data},
        hostvars=meta["hostvars"],
    )
