"""Host rule family "gid <hca>": each data-plane unit's GID index env is its host's RoCE v2 IPv4
GID index."""

from __future__ import annotations

from typing import Sequence

from launcher.facts.host import HostFacts
from launcher.model import Host, Unit
from launcher.preflight.rules.base import Check, HostCase, data_plane


GID_ENV = ("NCCL_IB_GID_INDEX", "MC_GID_INDEX", "UCX_IB_GID_INDEX")



def host(case: HostCase) -> list[Check]:
    return _gid_checks(case.host, [u for u in case.units if data_plane(u)], case.facts)


def _gid_checks(host: Host, units: Sequence[Unit], hf: HostFacts | None) -> list[Check]:
    """Per data-plane unit: its GID index env equals this host's RoCE v2 IPv4 GID index."""
    spec = host.spec
    if hf is None or spec.fabric != "roce":
        return []
    out: list[Check] = []
    for hca in spec.hcas:
        if not any(p.hca == hca for p in hf.ib_ports) and not any(g.hca == hca for g in hf.gids):
            continue  # the hca check already failed this host
        found = hf.roce_v2_gid_index(hca, spec.data_ip)
        for u in units:
            present = [k for k in GID_ENV if k in u.env]
            if not present:
                continue
            if found is None:
                out.append(Check(host=host.name, unit=u.name, name=f"gid {hca}", status="fail",
                                 message=f"{hca} has no RoCE v2 IPv4 GID"
                                 + (f" for {spec.data_ip}" if spec.data_ip else ""),
                                 fix="assign the data IP to the HCA's netdev; check show_gids"))
                continue
            wrong = [k for k in present if u.env[k] != str(found)]
            if wrong:
                k = wrong[0]
                out.append(Check(host=host.name, unit=u.name, name=f"gid {hca}", status="fail",
                                 message=f"{k}={u.env[k]} but {hca}'s RoCE v2 IPv4 GID is at index {found}",
                                 fix=f"set gid_index: {found} (or auto) for {host.name}"))
            else:
                out.append(Check(host=host.name, unit=u.name, name=f"gid {hca}", status="pass",
                                 message=f"{present[0]}={found}"))
    return out
