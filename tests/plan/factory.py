"""Model objects built in Python for planner tests (no loader involved)."""

from __future__ import annotations

import dataclasses
from typing import Any

from launcher.config.recipes import Catalog
from launcher.model import (
    PD,
    Constraint,
    Group,
    Hardware,
    RoleImages,
    Host,
    HostSpec,
    Inventory,
    MooncakeStore,
    Overrides,
    Parallelism,
    PDRole,
    Placement,
    Playbook,
    Quantization,
    Recipe,
    Role,
    Source,
)

PB = Source(path="playbooks/x.yaml", line=1, col=1)
PLACE = Source(path="playbooks/x.yaml", line=5, col=3)
OVR = Source(path="playbooks/x.yaml", line=12, col=7)
REC = Source(path="recipes/fam/v.yaml", line=1, col=1)


def host(name: str, ip: str, **spec: Any) -> Host:
    base: dict[str, Any] = {"gpu_model": "H100", "gpu_count": 8, "nccl_ifname": "eth1", "data_ip": ip}
    base.update(spec)
    return Host(name=name, address=ip, spec=HostSpec(**base), source=Source(path="inv.yaml", line=3, col=5))


def inventory(*hosts: Host) -> Inventory:
    names = tuple(h.name for h in hosts)
    return Inventory(path="inv.yaml", hosts=hosts, groups={"all": Group(name="all", hosts=names, children=())})


def recipe(**kw: Any) -> Recipe:
    base: dict[str, Any] = dict(
        id="fam/v",
        family="fam",
        catalog_entry=1,
        summary="test",
        model="org/model",
        served_model_name="model",
        engine="sglang",
        engine_version="0.5.23",
        image="lmsysorg/sglang:v0.5.23",
        topology="single",
        hardware=Hardware(skus=("H100",), gpus_per_node=8),
        parallelism=Parallelism(tp=8),
        quantization=Quantization(weight_format="bf16"),
        start_timeout_s=900,
        source=REC,
    )
    base.update(kw)
    return Recipe(**base)


def multinode(**kw: Any) -> Recipe:
    args: dict[str, Any] = dict(
        topology="multinode",
        hardware=Hardware(skus=("H100",), gpus_per_node=8, nodes=2),
        parallelism=Parallelism(tp=8, pp=2),
    )
    args.update(kw)
    return recipe(**args)


def pd(transfer: str = "mooncake", **kw: Any) -> Recipe:
    side = PDRole(replicas=1, nodes=1, parallelism=Parallelism(tp=8))
    args: dict[str, Any] = dict(
        topology="pd",
        pd=PD(prefill=dataclasses.replace(side, replicas=2), decode=side, transfer_backend=transfer),
    )
    args.update(kw)
    return recipe(**args)


def playbook(placement: dict[Role, str], replicas: dict[str, int] | None = None, **kw: Any) -> Playbook:
    reps = replicas or {}
    args: dict[str, Any] = dict(
        path="playbooks/x.yaml",
        name="x",
        recipe="fam/v",
        placement={r: Placement(hosts=p, replicas=reps.get(r), source=PLACE) for r, p in placement.items()},
        source=PB,
    )
    args.update(kw)
    return Playbook(**args)


def overrides(**kw: Any) -> Overrides:
    return Overrides(source=OVR, **kw)


def catalog(r: Recipe) -> Catalog:
    return Catalog(root="recipes", recipes={r.id: r})


def constraint(**kw: Any) -> Constraint:
    return Constraint(source=Source(path="recipes/fam/v.yaml", line=30, col=3), **kw)


STORE = MooncakeStore(global_segment_size="100gb", local_buffer_size="4gb")
