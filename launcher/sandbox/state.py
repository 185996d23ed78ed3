"""On-disk state of one sandbox: ``<root>/<name>/state.json`` plus per-host directories.

The root is ``$FLEET_SANDBOX_DIR`` or ``/var/lib/fleet-sandbox``; the image cache is
``$FLEET_SANDBOX_CACHE`` or ``/var/cache/fleet-sandbox``.  The state file is written as soon as
anything exists (namespaces, processes), and rewritten as pieces come up, so ``down`` (or the
next ``up``) can clean up after a crash half-way through.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any, Literal

from launcher.errors import UsageError
from launcher.sandbox.procs import ProcRef

Mode = Literal["netns", "loopback"]
HostKind = Literal["docker", "systemd"]  # systemd: systemd_host.py (systemd as PID 1 in a container)
_NAME = re.compile(r"^[a-z][a-z0-9]{0,11}$")


def state_root() -> Path:
    return Path(os.environ.get("FLEET_SANDBOX_DIR", "/var/lib/fleet-sandbox"))


def cache_root() -> Path:
    return Path(os.environ.get("FLEET_SANDBOX_CACHE", "/var/cache/fleet-sandbox"))


def check_name(name: str) -> str:
    """Sandbox names become namespace names, so they are short lowercase words."""
    if not _NAME.match(name):
        raise UsageError(f"sandbox name {name!r}: use 1-12 lowercase letters/digits, first a letter")
    return name


@dataclass(frozen=True, slots=True, kw_only=True)
class HostState:
    name: str  # inventory name and hostname: h1, h2, ...
    index: int  # 1-based
    dir: str  # per-host directory (srv, run, docker data-root, keys, fake hardware)
    netns: str | None  # network namespace name; None in loopback mode
    address: str  # where sshd listens (ansible_host)
    port: int
    ifname: str  # the host's data NIC
    data_ip: str
    kind: HostKind = "docker"
    sshd: ProcRef | None = None
    sshd_init: ProcRef | None = None  # hostinit.py, sshd's parent: a dead sshd's sessions stay below it
    dockerd: ProcRef | None = None  # the tini above the host's dockerd (see dockerd.py)

    @property
    def docker_socket(self) -> str:
        return f"{self.dir}/run/docker.sock"


@dataclass(frozen=True, slots=True, kw_only=True)
class SandboxState:
    name: str
    mode: Mode
    dir: str
    slot: int | None = None  # netns mode: which 198.18.<16*slot>.0/20 subnet
    ctl_netns: str | None = None
    root_ifname: str | None = None  # root-namespace end of the link into the ctl bridge
    route_metric: int | None = None  # metric of our `unreachable 198.18.0.0/15` guard route
    hosts: tuple[HostState, ...] = ()
    image_tags: tuple[str, ...] = ()
    inventory: str = ""  # where the generated inventory was written

    @property
    def client_key(self) -> str:
        return f"{self.dir}/client_key"

    @property
    def known_hosts(self) -> str:
        return f"{self.dir}/known_hosts"

    def host(self, name: str) -> HostState:
        for h in self.hosts:
            if h.name == name:
                return h
        raise UsageError(f"sandbox {self.name}: no host {name!r}")

    def with_host(self, host: HostState) -> SandboxState:
        return replace(self, hosts=tuple(host if h.name == host.name else h for h in self.hosts))


def state_path(name: str) -> Path:
    return state_root() / name / "state.json"


def save(state: SandboxState) -> None:
    path = Path(state.dir) / "state.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(asdict(state), indent=1))
    tmp.replace(path)


def load(name: str) -> SandboxState | None:
    path = state_path(name)
    try:
        raw: dict[str, Any] = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    known = {f.name for f in fields(HostState)} - {"sshd", "sshd_init", "dockerd"}
    hosts = tuple(
        HostState(
            # An older state file may hold fields teardown no longer uses (namespace inodes).
            **{k: v for k, v in h.items() if k in known},
            sshd=_proc(h.get("sshd")),
            sshd_init=_proc(h.get("sshd_init")),
            dockerd=_proc(h.get("dockerd")),
        )
        for h in raw.pop("hosts")
    )
    raw["image_tags"] = tuple(raw.get("image_tags", ()))
    return SandboxState(**raw, hosts=hosts)


def _proc(raw: dict[str, float] | None) -> ProcRef | None:
    if raw is None:
        return None
    # A state written before ProcRef held psutil's create_time has none: that process is never
    # taken for alive, so never signalled (``down`` reports its PID as another process's).
    return ProcRef(pid=int(raw["pid"]), created=raw.get("created", -1.0))


def names() -> tuple[str, ...]:
    root = state_root()
    if not root.is_dir():
        return ()
    return tuple(sorted(p.parent.name for p in root.glob("*/state.json")))
