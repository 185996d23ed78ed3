"""Per-host network env for collective and KV-transfer libraries (NCCL, Gloo, UCX, Mooncake, HCCL).

Contract: every function takes ONE host (its :class:`HostSpec`, plus gathered facts where a value
is ``auto``) and returns that host's env; nothing here produces a fleet-wide value, because GID
indices and NIC names differ between hosts (one global NCCL_IB_GID_INDEX kills TP init when one
host's RoCE v2 GID sits at another index).  Missing inputs are :class:`PlanError` naming the host.

Spelling decisions:
- ``NCCL_SOCKET_IFNAME=={ifname}``: NCCL treats a plain value as a *prefix* (``eth1`` would also
  take ``eth10``); the leading ``=`` asks for an exact match.  Gloo has no such syntax and would
  look for an interface literally named ``=eth1``, so ``GLOO_SOCKET_IFNAME`` gets the plain name.
- ``NCCL_IB_HCA==mlx5_0:1,mlx5_1:1``: exact names with the port, for the same prefix reason
  (``mlx5_1`` would match ``mlx5_10``..``mlx5_17``).
- ``NCCL_IB_GID_INDEX`` only on RoCE; on InfiniBand the GID index is meaningless and an empty or
  stale value would be parsed as 0.
"""

from __future__ import annotations

from typing import Mapping

from launcher.errors import PlanError
from launcher.model import Host
from launcher.facts.host import HostFacts


def data_ip(host: Host) -> str:
    """The host's data-plane IP: ``data_ip`` var, else its SSH address."""
    return host.spec.data_ip or host.address


def gid_index(host: Host, facts: Mapping[str, HostFacts] | None) -> int | None:
    """The RoCE v2 GID index to use on ``host`` (None off RoCE).

    ``gid_index: auto`` resolves from gathered facts: every listed HCA must have a RoCE v2 IPv4
    GID, at the same index (NCCL and Mooncake take one index per process).
    """
    spec = host.spec
    if spec.fabric != "roce":
        return None
    key = f"{host.name}/gid_index"
    if isinstance(spec.gid_index, int):
        return spec.gid_index
    if spec.gid_index is None:
        raise PlanError(host.source, "RoCE host has no GID index: set gid_index (a number, or auto)", key)
    found = facts.get(host.name) if facts is not None else None
    if found is None:
        raise PlanError(host.source, "gid_index is auto but no facts were gathered: run `fleet facts`", key)
    hcas = spec.hcas or tuple(sorted({g.hca for g in found.gids}))
    by_hca = {hca: found.roce_v2_gid_index(hca) for hca in hcas}
    missing = sorted(h for h, i in by_hca.items() if i is None)
    if not hcas or missing:
        what = ", ".join(missing) if missing else "any HCA"
        raise PlanError(host.source, f"gid_index is auto but facts show no RoCE v2 IPv4 GID on {what}", key)
    indices = sorted({i for i in by_hca.values() if i is not None})
    if len(indices) > 1:
        shown = ", ".join(f"{h}={i}" for h, i in sorted(by_hca.items()))
        raise PlanError(
            host.source, f"HCAs have different RoCE v2 GID indices ({shown}): set gid_index or hcas", key
        )
    return indices[0]


def _ifname(host: Host) -> str:
    if not host.spec.nccl_ifname:
        raise PlanError(
            host.source, "multi-node and PD units need nccl_ifname (the data NIC)", f"{host.name}/nccl_ifname"
        )
    return host.spec.nccl_ifname


def nccl_env(host: Host, gid: int | None) -> dict[str, str]:
    """NCCL + Gloo env for a rank of a multi-node instance on ``host``."""
    spec = host.spec
    ifname = _ifname(host)
    env = {"NCCL_SOCKET_IFNAME": f"={ifname}", "GLOO_SOCKET_IFNAME": ifname}
    if spec.fabric == "none":
        # No RDMA NIC: say so, rather than let NCCL probe verbs devices that are not there.
        env["NCCL_IB_DISABLE"] = "1"
        return env
    if spec.hcas:
        env["NCCL_IB_HCA"] = "=" + ",".join(f"{h}:1" for h in spec.hcas)
    if gid is not None:
        env["NCCL_IB_GID_INDEX"] = str(gid)
    if spec.ib_tc is not None:
        env["NCCL_IB_TC"] = str(spec.ib_tc)
    if spec.ib_sl is not None:
        env["NCCL_IB_SL"] = str(spec.ib_sl)
    return env


def mooncake_protocol(host: Host, wanted: str = "rdma") -> str:
    """The Mooncake transfer protocol, always explicit (SGLang and vLLM default to rdma, Mooncake to tcp)."""
    return "tcp" if host.spec.fabric == "none" else wanted


def mooncake_device(host: Host, protocol: str) -> str:
    """The RDMA devices a Mooncake client uses, comma-separated; empty lets Mooncake discover them."""
    return ",".join(host.spec.hcas) if protocol == "rdma" else ""


def mooncake_env(host: Host, gid: int | None, protocol: str) -> dict[str, str]:
    """Mooncake env of ``host`` as SGLang's clients read it (PD transfer and store clients)."""
    env = {
        "MOONCAKE_PROTOCOL": protocol,
        "MOONCAKE_LOCAL_HOSTNAME": data_ip(host),
    }
    device = mooncake_device(host, protocol)
    if device:
        env["MOONCAKE_DEVICE"] = device
    return {**env, **mc_env(host, gid, protocol)}


def mc_env(host: Host, gid: int | None, protocol: str) -> dict[str, str]:
    """The transfer engine's own env (``MC_*``), read by its C++ core under any engine."""
    spec = host.spec
    env: dict[str, str] = {}
    if gid is not None:
        # Mooncake falls back to NCCL_IB_GID_INDEX, then to GID 0 (link-local: times out).
        env["MC_GID_INDEX"] = str(gid)
    if spec.ib_tc is not None and protocol == "rdma":
        env["MC_IB_TC"] = str(spec.ib_tc)
    if spec.ib_sl is not None and protocol == "rdma":
        env["MC_IB_SL"] = str(spec.ib_sl)
    return env


def ucx_env(host: Host, gid: int | None) -> dict[str, str]:
    """UCX env for NIXL: NIXL ignores every NCCL knob and hangs without UCX_NET_DEVICES.

    A host without an RDMA fabric moves the KV cache over TCP on its data NIC: UCX_NET_DEVICES
    names that interface (UCX otherwise takes every interface it finds, loopback and docker
    bridges included) and UCX_TLS=tcp keeps UCX off its shared-memory transports, which it also
    offers to peers it believes local -- containers of two hosts on one kernel look local to it."""
    spec = host.spec
    if spec.fabric == "none":
        return {"UCX_NET_DEVICES": _ifname(host), "UCX_TLS": "tcp"}
    if not spec.hcas:
        return {}
    env = {"UCX_NET_DEVICES": ",".join(f"{h}:1" for h in spec.hcas)}
    if gid is not None:
        env["UCX_IB_GID_INDEX"] = str(gid)
    return env


def hccl_env(host: Host) -> dict[str, str]:
    """Ascend HCCL + Gloo env of ``host`` for multi-node / PD ranks."""
    ifname = _ifname(host)
    return {
        "HCCL_IF_IP": data_ip(host),
        "HCCL_SOCKET_IFNAME": ifname,
        "GLOO_SOCKET_IFNAME": ifname,
        "TP_SOCKET_IFNAME": ifname,
    }
