"""What an engine argv builder needs to know about one rank of one instance.

Contract: the planner fills an :class:`InstanceContext` per (instance, rank); the engine modules
(:mod:`launcher.engines.sglang`, :mod:`launcher.engines.vllm`, :mod:`launcher.engines.ascend`)
turn it plus a :class:`~launcher.model.Recipe` into argv and env without looking at anything
else.  Every field that must be identical on all ranks of an instance (leader address, ports,
parallelism) is computed once by the planner and copied into each rank's context.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Mapping

from launcher.model import Host, Parallelism, TransferBackend

EngineRole = Literal["single", "rank", "prefill", "decode"]
Executor = Literal["mp", "ray"]

# Port names an instance may hold; playbook ``ports`` use the same names.
HTTP = "http"
DIST_INIT = "dist_init"
BOOTSTRAP = "bootstrap"
MASTER_PORT = "master_port"
NIXL_SIDE_CHANNEL = "nixl_side_channel"
RAY = "ray"


@dataclass(frozen=True, slots=True, kw_only=True)
class InstanceContext:
    """One rank of one engine instance, as placed by the planner."""

    deployment: str
    role: EngineRole
    index: int  # instance index within its role (prefill1 -> 1)
    rank: int  # node rank inside the instance
    nnodes: int
    host: Host
    data_ip: str  # this host's data-plane IP
    leader_ip: str  # rank 0's data-plane IP (dist-init / master address)
    gpus: tuple[int, ...]  # device indices on this host
    parallelism: Parallelism  # of the whole instance (global TP)
    ports: Mapping[str, int]  # instance ports (http, dist_init, bootstrap, master_port, ...)
    served_model_name: str | None = None
    transfer_backend: TransferBackend | None = None  # PD only
    mooncake_master: str | None = None  # "ip:port" of the Mooncake store master
    executor: Executor = "mp"

    @property
    def pd_mode(self) -> Literal["prefill", "decode"] | None:
        if self.role == "prefill" or self.role == "decode":
            return self.role
        return None
