"""Host rule family "interface" / "data-ip" / "mtu" / "hca" / "/dev/infiniband" / "fabric": a
data-plane host's NIC and RDMA ports are as the inventory says (:func:`host`), and its fabric is
the one the catalog's figures were measured over (:func:`measured`, a warning)."""

from __future__ import annotations

from typing import Sequence

from launcher.facts.host import HostFacts
from launcher.model import Host, Recipe, Unit
from launcher.preflight.rules.base import Check, HostCase, data_plane, verdict


def host(case: HostCase) -> list[Check]:
    if case.facts is None or not case.needs.data_plane:
        return []
    return _fabric_checks(case.host, case.facts)


def measured(case: HostCase) -> list[Check]:
    return _measured_fabric_checks(case.host, case.units, case.recipe)


def _fabric_checks(host: Host, hf: HostFacts) -> list[Check]:
    h, spec = host.name, host.spec
    out: list[Check] = []
    if spec.nccl_ifname:
        iface = hf.interface(spec.nccl_ifname)
        if iface is None:
            names = ", ".join(i.name for i in hf.interfaces if i.name != "lo") or "none"
            out.append(Check(host=h, unit="", name="interface", status="fail",
                             message=f"interface {spec.nccl_ifname} not found (host has {names})",
                             fix="set nccl_ifname to the data-plane NIC (ip -br addr)"))
        else:
            out.append(verdict(h, "", "interface", iface.up, f"{spec.nccl_ifname} up, MTU {iface.mtu}",
                              f"interface {spec.nccl_ifname} is down", f"ip link set {spec.nccl_ifname} up"))
            if spec.data_ip:
                elsewhere = hf.interface_with(spec.data_ip)
                where = f"; {spec.data_ip} is on {elsewhere.name}" if elsewhere and elsewhere is not iface else ""
                out.append(verdict(h, "", "data-ip", spec.data_ip in iface.ipv4,
                                  f"{spec.data_ip} on {spec.nccl_ifname}",
                                  f"data_ip {spec.data_ip} is not on {spec.nccl_ifname} "
                                  f"(it has {', '.join(iface.ipv4) or 'no IPv4'}{where})",
                                  "fix data_ip or nccl_ifname so NCCL/Gloo bind the right NIC"))
            if spec.mtu is not None:
                # The inventory's mtu may be the NIC's or, on InfiniBand, the HCA ports' MTU.
                hca_mtus = {p.active_mtu for p in hf.ib_ports if p.hca in spec.hcas and p.active_mtu}
                out.append(verdict(h, "", "mtu", spec.mtu == iface.mtu or spec.mtu in hca_mtus,
                                  f"MTU {spec.mtu} as the inventory says",
                                  f"{spec.nccl_ifname} has MTU {iface.mtu}"
                                  + (f" (HCA ports {', '.join(map(str, sorted(hca_mtus)))})" if hca_mtus else "")
                                  + f", the inventory says {spec.mtu}",
                                  f"ip link set {spec.nccl_ifname} mtu {spec.mtu} (and in the host's network "
                                  "config), or fix mtu in the inventory", bad_status="warn"))
    if spec.fabric == "none":
        return out
    layer = "Ethernet" if spec.fabric == "roce" else "InfiniBand"
    listed = ", ".join(sorted({p.hca for p in hf.ib_ports})) or "none"
    for hca in spec.hcas:
        port = next((p for p in hf.ib_ports if p.hca == hca), None)
        if port is None:
            out.append(Check(host=h, unit="", name=f"hca {hca}", status="fail",
                             message=f"HCA {hca} not found (ibv_devinfo lists {listed})",
                             fix="fix hcas in the inventory or the RDMA driver; without it NCCL "
                             "silently falls back to TCP"))
            continue
        ok = port.state == "PORT_ACTIVE" and port.link_layer == layer
        fix = ("start a subnet manager (opensm) on the fabric" if port.state == "PORT_INIT"
               else "bring the port up / check cabling and fabric")
        out.append(verdict(h, "", f"hca {hca}", ok, f"{hca} port {port.port} ACTIVE ({layer})",
                          f"{hca} port {port.port} is {port.state} ({port.link_layer}), want "
                          f"PORT_ACTIVE ({layer})", fix))
    if spec.hcas:
        out.append(verdict(h, "", "/dev/infiniband", bool(hf.dev_infiniband),
                          f"/dev/infiniband: {' '.join(hf.dev_infiniband)}",
                          "/dev/infiniband is missing on the host",
                          "load the RDMA drivers (ib_uverbs, rdma_ucm)"))
    return out


def _measured_fabric_checks(host: Host, units: Sequence[Unit], recipe: Recipe) -> list[Check]:
    """A data-plane host whose RDMA fabric is not the one the catalog's figures were measured
    over (``hardware.fabric``): it runs, but the figures do not carry over (warn)."""
    measured, have = recipe.hardware.fabric, host.spec.fabric
    if measured is None or have in ("none", measured) or not any(data_plane(u) for u in units):
        return []
    return [Check(host=host.name, unit="", name="fabric", status="warn",
                  message=f"fabric {have}; {recipe.id}'s figures were measured over {measured}",
                  fix="compare against the catalog's numbers with care, or place it on hosts with "
                      f"fabric {measured}")]
