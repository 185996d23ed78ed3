"""Node pools: what ``fleet export k8s RECIPE --pools FILE`` knows about a cluster instead of an
inventory, and the per-host Kubernetes facts of either.

Contract: :func:`load_pools` reads a pool file (errors at ``file:line:col``); :func:`pool_inventory`
turns the pools into an :class:`~launcher.model.Inventory` of stand-in hosts (``<pool>-<i>``,
addresses from 198.18.0.0/15, never contacted) so the SAME planner places the recipe on them;
:class:`NodeFacts` is what the exporter needs per planned host (node labels to select it, the
RDMA resource name, the models volume, the env keys to derive on the node).  With an inventory,
:func:`inventory_facts` derives them from the hosts' vars.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Mapping

from launcher.config.schema import decode_as
from launcher.config.yamlpos import load_mapping
from launcher.errors import InputError
from launcher.model import EMPTY, Fabric, GpuSku, Group, Host, HostSpec, Inventory, Source, UNKNOWN_SOURCE

POOL_LABEL = "fleet.io/pool"
GPU_LABEL = "fleet.io/gpu"
NET_LABEL = "fleet.io/net"
DEFAULT_RDMA_RESOURCE = "rdma/hca"
# RoCE GID index keys, and the NIC-name keys (value exact with '=' for NCCL): derived on the node
# when the hosts of one pod template disagree, or a pool says ``auto``.
GID_KEYS: tuple[str, ...] = ("NCCL_IB_GID_INDEX", "MC_GID_INDEX", "UCX_IB_GID_INDEX")
IFNAME_KEYS: tuple[str, ...] = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "HCCL_SOCKET_IFNAME", "TP_SOCKET_IFNAME")
_STANDIN_NET = ipaddress.ip_network("198.18.0.0/15")  # the benchmarking range: never routed, never contacted
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


@dataclass(frozen=True, slots=True, kw_only=True)
class NodePool:
    """One pool of identical Kubernetes nodes (the keys of a pool file entry)."""

    name: str
    nodes: int
    gpu_model: GpuSku
    gpu_count: int
    gpu_memory_gib: int | None = None
    fabric: Fabric = "none"
    hcas: tuple[str, ...] = ()
    gid_index: int | Literal["auto"] | None = None  # RoCE; auto: derived on each node by an init container
    nccl_ifname: str | None = None  # "auto": derived on each node (RoCE: the GID's netdev; else the pod IP's NIC)
    ib_tc: int | None = None
    ib_sl: int | None = None
    node_selector: Mapping[str, str] = field(default_factory=lambda: EMPTY)  # default {fleet.io/pool: name}
    rdma_resource: str = DEFAULT_RDMA_RESOURCE
    models_dir: str = "/models"
    models_pvc: str | None = None  # a PVC holding the weights instead of the nodes' models_dir
    cache_dir: str = "/var/cache/fleet"
    source: Source = UNKNOWN_SOURCE


@dataclass(frozen=True, slots=True, kw_only=True)
class PoolFile:
    pools: tuple[NodePool, ...]
    source: Source = UNKNOWN_SOURCE


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeFacts:
    """What the exporter needs about the node a planned host stands for."""

    labels: Mapping[str, str]  # nodeSelector terms that pick this host's nodes
    rdma_resource: str = DEFAULT_RDMA_RESOURCE
    models_pvc: str | None = None
    derive: frozenset[str] = frozenset()  # env keys always derived on the node (pool says auto)
    label_node: bool = False  # the export says to label this host's node (inventory hosts; pools are labelled already)


def load_pools(path: Path | str) -> PoolFile:
    """Read and check a pool file: at least one pool, unique names, valid label values."""
    node = load_mapping(path)
    pools = decode_as(node, PoolFile)
    if not pools.pools:
        raise InputError(pools.source, "no pools", "pools")
    seen: set[str] = set()
    for i, p in enumerate(pools.pools):
        key = f"pools/{i}"
        if p.name in seen:
            raise InputError(p.source, f"pool {p.name!r} is named twice", f"{key}/name")
        seen.add(p.name)
        if not re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,40}[a-z0-9])?", p.name):
            raise InputError(p.source, f"pool name {p.name!r}: lowercase letters, digits and '-' (at most 42)", f"{key}/name")
        if p.nodes < 1 or p.gpu_count < 1:
            raise InputError(p.source, "nodes and gpu_count must be at least 1", key)
        for k, v in p.node_selector.items():
            if not _LABEL_VALUE.fullmatch(v) or len(v) > 63:
                raise InputError(p.source, f"node_selector {k}: {v!r} is not a label value", f"{key}/node_selector")
    return pools


def pool_inventory(pools: PoolFile, path: str) -> tuple[Inventory, dict[str, NodeFacts]]:
    """Stand-in hosts for the pools (``<pool>-0`` .. in pool order), one group per pool, and the
    :class:`NodeFacts` of each host.  ``gid_index: auto`` and ``nccl_ifname: auto`` plan with a
    placeholder and are marked to be derived on the node."""
    hosts: list[Host] = []
    groups: dict[str, Group] = {}
    facts: dict[str, NodeFacts] = {}
    addresses = _STANDIN_NET.hosts()
    for p in pools.pools:
        derive: set[str] = set()
        gid = p.gid_index
        if gid == "auto":
            gid, derive = 0, derive | set(GID_KEYS)
        ifname = p.nccl_ifname
        if ifname == "auto":
            ifname, derive = "auto0", derive | set(IFNAME_KEYS)
        spec = HostSpec(
            gpu_model=p.gpu_model, gpu_count=p.gpu_count, gpu_memory_gib=p.gpu_memory_gib, fabric=p.fabric,
            hcas=p.hcas, gid_index=gid, nccl_ifname=ifname, ib_tc=p.ib_tc, ib_sl=p.ib_sl,
            models_dir=p.models_dir, cache_dir=p.cache_dir,
        )  # fmt: skip
        names = []
        for i in range(p.nodes):
            name = f"{p.name}-{i}"
            hosts.append(Host(name=name, address=str(next(addresses)), groups=("all", p.name), spec=spec, source=p.source))
            facts[name] = NodeFacts(
                labels=dict(p.node_selector) or {POOL_LABEL: p.name}, rdma_resource=p.rdma_resource,
                models_pvc=p.models_pvc, derive=frozenset(derive),
            )  # fmt: skip
            names.append(name)
        groups[p.name] = Group(name=p.name, hosts=tuple(names), children=())
    groups["all"] = Group(name="all", hosts=tuple(h.name for h in hosts), children=tuple(p.name for p in pools.pools))
    return Inventory(path=path, hosts=tuple(hosts), groups=groups), facts


def inventory_facts(inventory: Inventory) -> dict[str, NodeFacts]:
    """Node facts of inventory hosts: each host is selected by its GPU SKU and a network profile
    label (data NIC and RoCE GID index, e.g. ``ens1f0np0.gid3``), which ``nodes.sh`` in the
    export applies (``kubectl label node <host>``: node names are taken to be inventory names)."""
    out: dict[str, NodeFacts] = {}
    for h in inventory.hosts:
        labels: dict[str, str] = {}
        if h.spec.gpu_model is not None:
            labels[GPU_LABEL] = label_value(h.spec.gpu_model.lower())
        profile = net_profile(h.spec)
        if profile:
            labels[NET_LABEL] = profile
        out[h.name] = NodeFacts(labels=labels, label_node=True)
    return out


def net_profile(spec: HostSpec) -> str:
    """``<nic>[.gid<N>]``: what per-host network env a pod on this node needs ('' off-fabric)."""
    if spec.fabric == "none" or not spec.nccl_ifname:
        return ""
    gid = f".gid{spec.gid_index}" if spec.fabric == "roce" and spec.gid_index is not None else ""
    return label_value(f"{spec.nccl_ifname}{gid}")


def label_value(text: str) -> str:
    """``text`` as a Kubernetes label value: other characters become '-', at most 63."""
    value = re.sub(r"[^-A-Za-z0-9_.]", "-", text)[:63].strip("-_.")
    return value
