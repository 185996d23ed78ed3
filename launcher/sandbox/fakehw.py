"""Fake hardware of sandbox hosts: what each host pretends to have, its tools and sysfs tree.

Every host gets a profile; a few differ on purpose so preflight/facts code meets the cases real
fleets have (hosts are 1-based):
- default: 8x H100 80GB, RoCE HCA ``mlx5_0`` on the data NIC, RoCE v2 IPv4 GID at index 3;
- h2: the RoCE v2 IPv4 GID sits at index 5 (an IPv6 ULA pair comes first);
- h3: its NIC is ``ens1f0``, not ``veth0``;
- h4: the HCA is missing (no mlx5 device, no /sys/class/infiniband, no /dev/infiniband), while
  the inventory still declares ``mlx5_0`` as a real host's stale vars would;
- h5: an Ascend host, 8x 910B3 (``npu-smi info``; no nvidia-smi, no mlx5);
- h9 and above: 8x RTX PRO 6000D (~84 GiB, PCIe only, driver 575), RoCE HCA ``mlx5_0``, GID
  index 3 -- the hardware of the catalog's multi-node PP and PD recipes (a 15-host sandbox has
  h9..h15: six hosts for a 2P1D PD deployment of two-node instances, one for its router);
- every host: 2 TiB of RAM (``free -b``), as the catalog's eight-accelerator servers have;
- h16 and above: the same RTX PRO 6000D hosts on Ethernet only (``fabric: none``, no HCA): what
  the real engine's prefill/decode KV transfer runs over in the sandbox (NIXL over UCX's TCP
  transport on the data NIC; the h9.. hosts' HCAs are fake, which no real UCX can open).

Materialised per host under ``<hostdir>/fakehw``: ``bin/`` (wrappers bound over
/usr/local/sbin by hostinit), ``spec.json``, ``sys/class/infiniband/<dev>/ports/1/{gids,
gid_attrs/types,gid_attrs/ndevs}/<i>`` (bound over /sys/class/infiniband), and
``dev/infiniband/<node>`` files holding ``major:minor`` (hostinit makes real character nodes
from them in the host's private /dev).
"""

from __future__ import annotations

import ipaddress
import json
import shutil
import sys
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from launcher.model import Fabric, GpuSku

TOOLS_DIR = "fakehw"  # under the sandbox dir: tool.py + captured outputs
_DEV_NODES = {"uverbs0": "231:192", "rdma_cm": "10:58"}
# The RAM an eight-accelerator server of the catalog has (what `free -b` answers on every profile),
# so preflight's host-memory check judges the recipe against the pretended server, not this VM.
HOST_RAM_GIB = 2048


@dataclass(frozen=True, slots=True, kw_only=True)
class Profile:
    host: str
    ifname: str
    data_ip: str
    gpu_model: GpuSku
    gpu_count: int
    gpu_memory_gib: int
    fabric: Fabric
    hcas_declared: tuple[str, ...]  # what the inventory says
    hcas_present: tuple[str, ...]  # what the host really has
    gid_index: int | None

    def inventory_vars(self) -> dict[str, Any]:
        """fleet host vars (HostSpec field names) for this host."""
        return {
            "gpu_model": self.gpu_model,
            "gpu_count": self.gpu_count,
            "gpu_memory_gib": self.gpu_memory_gib,
            "fabric": self.fabric,
            "hcas": list(self.hcas_declared),
            "gid_index": self.gid_index,
            "nccl_ifname": self.ifname,
            "data_ip": self.data_ip,
            "models_dir": "/srv/models",
            "cache_dir": "/srv/cache",
            "runtime": "docker",
        }


def ifname_for(index: int) -> str:
    return "ens1f0" if index == 3 else "veth0"


FIRST_RTX6000D = 9  # hosts h9.. are RTX-6000D hosts
FIRST_ETHERNET_ONLY = 16  # hosts h16.. are RTX-6000D hosts without an RDMA fabric


def profile(index: int, data_ip: str) -> Profile:
    host = f"h{index}"
    if index >= FIRST_ETHERNET_ONLY:
        return Profile(
            host=host, ifname=ifname_for(index), data_ip=data_ip, gpu_model="RTX-6000D",
            gpu_count=8, gpu_memory_gib=84, fabric="none", hcas_declared=(), hcas_present=(),
            gid_index=None,
        )  # fmt: skip
    if index >= FIRST_RTX6000D:
        return Profile(
            host=host, ifname=ifname_for(index), data_ip=data_ip, gpu_model="RTX-6000D",
            gpu_count=8, gpu_memory_gib=84, fabric="roce", hcas_declared=("mlx5_0",),
            hcas_present=("mlx5_0",), gid_index=3,
        )  # fmt: skip
    if index == 5:
        return Profile(
            host=host, ifname=ifname_for(index), data_ip=data_ip, gpu_model="Ascend-910B3",
            gpu_count=8, gpu_memory_gib=64, fabric="none", hcas_declared=(), hcas_present=(),
            gid_index=None,
        )  # fmt: skip
    return Profile(
        host=host, ifname=ifname_for(index), data_ip=data_ip, gpu_model="H100", gpu_count=8,
        gpu_memory_gib=80, fabric="roce", hcas_declared=("mlx5_0",),
        hcas_present=() if index == 4 else ("mlx5_0",), gid_index=5 if index == 2 else 3,
    )  # fmt: skip


def _mapped(ipv4: str) -> str:
    packed = ipaddress.IPv6Address(f"::ffff:{ipv4}").packed
    return ":".join(packed[i : i + 2].hex() for i in range(0, 16, 2))


def _gids(p: Profile, index: int) -> list[tuple[int, str, str, str, str]]:
    """(index, gid, type, ndev, ipv4) rows as show_gids lists them."""
    link_local = f"fe80:0000:0000:0000:b8ce:f6ff:fe{index:02x}:{index:04x}"
    rows = [(0, link_local, "IB/RoCE v1", p.ifname, ""), (1, link_local, "RoCE v2", p.ifname, "")]
    if p.gid_index == 5:
        ula = f"fd00:0198:0018:0000:b8ce:f6ff:fe{index:02x}:{index:04x}"
        rows += [(2, ula, "IB/RoCE v1", p.ifname, ""), (3, ula, "RoCE v2", p.ifname, "")]
    base = len(rows)
    mapped = _mapped(p.data_ip)
    rows += [(base, mapped, "IB/RoCE v1", p.ifname, p.data_ip),
             (base + 1, mapped, "RoCE v2", p.ifname, p.data_ip)]  # fmt: skip
    return rows


@dataclass(frozen=True, slots=True, kw_only=True)
class _Card:
    """What nvidia-smi reports for one SKU (the captured table/topo files match these)."""

    name: str
    memory_mib: int
    driver: str
    compute_cap: str
    power_limit: str
    power_draw: str
    temperature: int
    buses: tuple[str, ...]
    table: str
    topo: str


_CARDS: dict[str, _Card] = {
    "H100": _Card(
        name="NVIDIA H100 80GB HBM3", memory_mib=81559, driver="550.54.15", compute_cap="9.0",
        power_limit="700.00", power_draw="71.00", temperature=31,
        buses=("18", "2A", "3A", "5D", "9A", "AB", "BA", "DB"),
        table="nvidia-smi-h100x8.txt", topo="nvidia-smi-topo-h100x8.txt",
    ),
    "RTX-6000D": _Card(
        name="NVIDIA RTX PRO 6000D", memory_mib=86016, driver="575.57.08", compute_cap="12.0",
        power_limit="600.00", power_draw="38.00", temperature=33,
        buses=("16", "38", "49", "5A", "98", "B8", "C8", "D8"),
        table="nvidia-smi-6000dx8.txt", topo="nvidia-smi-topo-6000dx8.txt",
    ),
}  # fmt: skip


def spec(p: Profile, index: int) -> dict[str, Any]:
    gpus = []
    card = _CARDS.get(p.gpu_model, _CARDS["H100"])
    if p.gpu_model in _CARDS:
        for i in range(p.gpu_count):
            gpus.append({
                "index": i, "name": card.name, "memory.total": card.memory_mib,
                "memory.used": 1, "memory.free": card.memory_mib - 1,
                "driver_version": card.driver, "pci.bus_id": f"00000000:{card.buses[i]}:00.0",
                "uuid": f"GPU-5a1d{index:04x}-0000-4000-8000-{i:012x}",
                "utilization.gpu": 0, "temperature.gpu": card.temperature,
                "compute_cap": card.compute_cap, "power.limit": card.power_limit,
                "power.draw": card.power_draw, "serial": f"165232{index:04d}{i}",
                "persistence_mode": "Enabled", "count": p.gpu_count,
            })  # fmt: skip
    hcas = [
        {"name": name, "fw_ver": "28.39.1002", "guid": f"b8ce:f603:00{index:02x}:{n:04x}",
         "gids": _gids(p, index)}
        for n, name in enumerate(p.hcas_present)
    ]  # fmt: skip
    return {"host": p.host, "gpus": gpus, "table": card.table, "topo": card.topo,
            "npu": "npu-smi-info-910b3x8.txt", "hcas": hcas,
            "mem_total_bytes": HOST_RAM_GIB * 1024**3}  # fmt: skip


# A tool's answer depends only on its argv and the host's spec, which never changes while the
# sandbox is up.  So each wrapper keeps its first answer per argv (stdout, stderr, exit status;
# keyed by a checksum of the length-prefixed arguments; nvidia-smi's table keeps its first
# timestamp) and replays it: a shell and a few coreutils instead of a Python start per call.
# Otherwise the fakes' own cost (50-110 ms per call on the shared cores) dominates every
# preflight timing.  The status file is written last: a half-written answer is never replayed.
_WRAPPER = """#!/bin/sh
key=$(for a; do printf '%d:%s\\n' "${{#a}}" "$a"; done | cksum | tr ' ' _)
c={root}/cache/{name}.$key
if [ -r "$c.rc" ]; then
  cat "$c.out"; cat "$c.err" >&2; exit "$(cat "$c.rc")"
fi
{python} -I {tools}/tool.py {root}/spec.json {name} "$@" >"$c.out.$$" 2>"$c.err.$$"
rc=$?
cat "$c.out.$$"; cat "$c.err.$$" >&2
mv -f "$c.out.$$" "$c.out" && mv -f "$c.err.$$" "$c.err" && echo $rc >"$c.rc.$$" && mv -f "$c.rc.$$" "$c.rc"
exit $rc
"""


def install_tools(sandbox_dir: Path) -> Path:
    """Copies tool.py and the captured outputs into the sandbox dir; returns that directory."""
    dest = sandbox_dir / TOOLS_DIR
    dest.mkdir(parents=True, exist_ok=True)
    for item in resources.files("launcher.sandbox").joinpath("fakehw_tools").iterdir():
        if item.is_file() and (item.name.endswith(".txt") or item.name == "tool.py"):
            (dest / item.name).write_bytes(item.read_bytes())
    return dest


def materialize(p: Profile, index: int, hostdir: Path, tools: Path) -> None:
    root = hostdir / "fakehw"
    shutil.rmtree(root, ignore_errors=True)
    (root / "bin").mkdir(parents=True)
    s = spec(p, index)
    (root / "spec.json").write_text(json.dumps(s, indent=1))
    names = ["free", "nvidia-smi"] if s["gpus"] else ["free"]
    if p.fabric != "none":
        names += ["ibv_devinfo", "show_gids"]  # OFED is installed even where the HCA is gone
    if p.gpu_model.startswith("Ascend"):
        names.append("npu-smi")
    python = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable
    (root / "cache").mkdir()
    for name in names:
        wrapper = root / "bin" / name
        wrapper.write_text(_WRAPPER.format(python=python, tools=tools, root=root, name=name))
        wrapper.chmod(0o755)
    for hca in s["hcas"]:
        port = root / "sys/class/infiniband" / hca["name"] / "ports/1"
        for sub in ("gids", "gid_attrs/types", "gid_attrs/ndevs"):
            (port / sub).mkdir(parents=True)
        used = {row[0] for row in hca["gids"]}
        for i in range(max(used) + 3):  # trailing unused entries read as zero GIDs
            if i not in used:
                (port / "gids" / str(i)).write_text("0000:" * 7 + "0000\n")
        for i, gid, kind, ndev, _ in hca["gids"]:
            (port / "gids" / str(i)).write_text(gid + "\n")
            (port / "gid_attrs/types" / str(i)).write_text(kind + "\n")
            (port / "gid_attrs/ndevs" / str(i)).write_text(ndev + "\n")
        (port / "state").write_text("4: ACTIVE\n")
        (port / "phys_state").write_text("5: LinkUp\n")
        (port / "link_layer").write_text("Ethernet\n")
        (port / "rate").write_text("400 Gb/sec (4X NDR)\n")
        (port.parent.parent / "node_guid").write_text(hca["guid"] + "\n")
        (port.parent.parent / "fw_ver").write_text(hca["fw_ver"] + "\n")
    if s["hcas"]:
        (root / "dev/infiniband").mkdir(parents=True)
        for node, numbers in _DEV_NODES.items():
            (root / "dev/infiniband" / node).write_text(numbers)
