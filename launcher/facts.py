"""Host facts: one gather script per host, and pure parsers of what it prints.

Contract: :func:`gather_script` returns shell text (pure) that prints every section behind a
``### fleet:<name> rc=<exit code>`` marker line; :func:`parse_facts` turns that output into a
:class:`HostFacts` without I/O.  A tool that is missing on the host (exit 127) yields an empty
section, never an exception: preflight decides what is fatal.  Each section parser also works on
the tool's output alone, so tests feed them captured real outputs.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from typing import Mapping

from launcher.model import GpuSku

MARKER = "### fleet:"

# The sections, in order: name -> shell command.  sysfs is read directly because show_gids is an
# OFED script that many hosts lack; the loop prints "dev port index type ndev gid" per GID.
_SECTIONS: tuple[tuple[str, str], ...] = (
    ("hostname", "hostname"),
    (
        "gpus",
        "nvidia-smi --query-gpu=index,name,memory.total,driver_version,pci.bus_id "
        "--format=csv,noheader,nounits",
    ),
    ("nvidia_smi", "nvidia-smi"),
    ("npu", "npu-smi info"),
    ("ibv_devinfo", "ibv_devinfo"),
    (
        "gids",
        "for g in /sys/class/infiniband/*/ports/*/gids/*; do [ -e \"$g\" ] || continue; "
        "p=${g%/gids/*}; i=${g##*/}; d=${p%/ports/*}; "
        "t=$(cat \"$p/gid_attrs/types/$i\" 2>/dev/null); n=$(cat \"$p/gid_attrs/ndevs/$i\" 2>/dev/null); "
        "v=$(cat \"$g\" 2>/dev/null); "
        "printf '%s\\t%s\\t%s\\t%s\\t%s\\t%s\\n' \"${d##*/}\" \"${p##*/}\" \"$i\" \"$t\" \"$n\" \"$v\"; done",
    ),
    ("ip_addr", "ip -j addr show"),
    ("docker", "docker version --format '{{json .}}'"),
    ("docker_runtimes", "docker info --format '{{json .Runtimes}}'"),
    ("dev_infiniband", "ls /dev/infiniband"),
    ("clock", "date +%s.%N"),
)


def gather_script(paths: tuple[str, ...] = ()) -> str:
    """The one script a host runs for all its facts; ``paths`` get a free-space line each."""
    parts = []
    sections = list(_SECTIONS)
    if paths:
        sections.append(("disk", "df -P -B1 " + " ".join(shlex.quote(p) for p in paths)))
    for name, cmd in sections:
        # Every section runs even if an earlier one failed; stderr is folded into the section
        # so a missing tool is visible, and the marker carries the exit status.
        parts.append(f"out=$( {{ {cmd} ; }} 2>&1 ); rc=$?; echo '{MARKER}{name} rc='$rc; "
                     "printf '%s\\n' \"$out\"")
    return "\n".join(parts) + "\n"


@dataclass(frozen=True, slots=True, kw_only=True)
class Gpu:
    index: int
    name: str
    sku: GpuSku | None
    memory_mib: int
    driver: str
    bus_id: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class IbPort:
    hca: str
    port: int
    state: str  # PORT_ACTIVE, PORT_DOWN, ...
    link_layer: str  # "InfiniBand" or "Ethernet" (= RoCE)
    active_mtu: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class GidEntry:
    hca: str
    port: int
    index: int
    gid: str
    version: str  # "v1" / "v2" ("RoCE v2" in sysfs types)
    ipv4: str | None
    netdev: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Interface:
    name: str
    mtu: int
    up: bool
    ipv4: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class HostFacts:
    hostname: str = ""
    gpus: tuple[Gpu, ...] = ()
    cuda_version: str | None = None
    npus: tuple[str, ...] = ()  # Ascend chip names, e.g. "910B3", one per NPU
    npu_memory_mib: tuple[int, ...] = ()
    ib_ports: tuple[IbPort, ...] = ()
    gids: tuple[GidEntry, ...] = ()
    interfaces: tuple[Interface, ...] = ()
    docker_version: str | None = None
    docker_runtimes: tuple[str, ...] = ()
    dev_infiniband: tuple[str, ...] = ()
    disk_free: Mapping[str, int] = field(default_factory=dict)  # mount target -> bytes free
    clock: float | None = None
    missing_tools: tuple[str, ...] = ()  # sections whose command was not found

    def roce_v2_gid_index(self, hca: str, ipv4: str | None = None) -> int | None:
        """The RoCE v2 IPv4 GID index of ``hca`` (matching ``ipv4`` when given), else None.

        This is what NCCL_IB_GID_INDEX / MC_GID_INDEX must be on this host: link-local and v1
        GIDs time out (NVIDIA/nccl#769, #1131), and the index differs between hosts.
        """
        for g in sorted(self.gids, key=lambda e: (e.port, e.index)):
            if g.hca == hca and g.version == "v2" and g.ipv4 and (ipv4 is None or g.ipv4 == ipv4):
                return g.index
        return None

    def interface(self, name: str) -> Interface | None:
        return next((i for i in self.interfaces if i.name == name), None)


_SKU_PATTERNS: tuple[tuple[str, GpuSku], ...] = (
    (r"\bH100\b", "H100"),
    (r"\bH800\b", "H800"),
    (r"\bB300\b", "B300"),
    (r"\bA100\b", "A100"),
    (r"\bRTX (?:PRO )?6000D\b", "RTX-6000D"),
)


def gpu_sku(name: str) -> GpuSku | None:
    """Map an nvidia-smi product name to a catalog SKU (None when the catalog has no such SKU)."""
    for pattern, sku in _SKU_PATTERNS:
        if re.search(pattern, name):
            return sku
    return None


def parse_gpus_csv(text: str) -> tuple[Gpu, ...]:
    """``nvidia-smi --query-gpu=index,name,memory.total,driver_version[,pci.bus_id]
    --format=csv[,noheader][,nounits]``."""
    gpus = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) < 4 or not cells[0].isdigit():
            continue  # header line or noise
        mem = re.match(r"(\d+)", cells[2])
        gpus.append(
            Gpu(
                index=int(cells[0]),
                name=cells[1],
                sku=gpu_sku(cells[1]),
                memory_mib=int(mem.group(1)) if mem else 0,
                driver=cells[3],
                bus_id=cells[4] if len(cells) > 4 else "",
            )
        )
    return tuple(gpus)


def parse_cuda_version(nvidia_smi: str) -> str | None:
    m = re.search(r"CUDA Version:\s*([\d.]+)", nvidia_smi)
    return m.group(1) if m else None


def parse_npu_smi(text: str) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """``npu-smi info``: chip names and HBM sizes (MB) per NPU, from its box table."""
    names: list[str] = []
    hbm: list[int] = []
    rows = [r for r in text.splitlines() if r.startswith("|")]
    for i, row in enumerate(rows):
        cells = [c.strip() for c in row.strip("|").split("|")]
        m = re.match(r"^(\d+)\s+(\S+)$", cells[0]) if cells else None
        if m and len(cells) >= 2 and cells[1] in {"OK", "Warning", "Alarm", "Critical"}:
            names.append(m.group(2))
            nxt = rows[i + 1] if i + 1 < len(rows) else ""
            sizes = re.findall(r"(\d+)\s*/\s*(\d+)", nxt)
            hbm.append(int(sizes[-1][1]) if sizes else 0)
    return tuple(names), tuple(hbm)


def parse_ibv_devinfo(text: str) -> tuple[IbPort, ...]:
    ports: list[IbPort] = []
    hca = ""
    port: int | None = None
    attrs: dict[str, str] = {}

    def flush() -> None:
        if hca and port is not None:
            mtu = re.match(r"(\d+)", attrs.get("active_mtu", ""))
            ports.append(
                IbPort(
                    hca=hca,
                    port=port,
                    state=attrs.get("state", "").split(" ")[0],
                    link_layer=attrs.get("link_layer", ""),
                    active_mtu=int(mtu.group(1)) if mtu else None,
                )
            )

    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("hca_id:"):
            flush()
            hca, port, attrs = line.split(":", 1)[1].strip(), None, {}
        elif line.startswith("port:"):
            flush()
            port, attrs = int(line.split(":", 1)[1]), {}
        elif ":" in line and port is not None:
            key, value = line.split(":", 1)
            attrs[key.strip()] = value.strip()
    flush()
    return tuple(ports)


def _gid_ipv4(gid: str) -> str | None:
    """The IPv4 address of an IPv4-mapped GID (``::ffff:a.b.c.d``), else None."""
    hexes = gid.replace(":", "").lower()
    if len(hexes) != 32 or not hexes.startswith("0" * 20 + "ffff"):
        return None
    tail = hexes[24:]
    return ".".join(str(int(tail[i : i + 2], 16)) for i in range(0, 8, 2))


def parse_show_gids(text: str) -> tuple[GidEntry, ...]:
    """The OFED ``show_gids`` table: DEV PORT INDEX GID [IPv4] VER DEV."""
    out = []
    for line in text.splitlines():
        cells = line.split()
        if len(cells) < 5 or not cells[1].isdigit() or not cells[2].isdigit():
            continue
        ver = next((c for c in cells[3:] if c in {"v1", "v2"}), "")
        ipv4 = next((c for c in cells[4:] if re.fullmatch(r"\d+\.\d+\.\d+\.\d+", c)), None)
        out.append(
            GidEntry(
                hca=cells[0], port=int(cells[1]), index=int(cells[2]), gid=cells[3],
                version=ver, ipv4=ipv4, netdev=cells[-1] if cells[-1] not in {"v1", "v2"} else "",
            )
        )
    return tuple(out)


def parse_sysfs_gids(text: str) -> tuple[GidEntry, ...]:
    """Lines ``dev<TAB>port<TAB>index<TAB>type<TAB>ndev<TAB>gid`` from the gather script's sysfs
    walk.  Unused table slots (all-zero GID, no type) are dropped."""
    out = []
    for line in text.splitlines():
        cells = line.split("\t")
        if len(cells) != 6 or not cells[1].isdigit() or not cells[2].isdigit():
            continue
        dev, port, index, gtype, ndev, gid = cells
        if not gtype or set(gid.replace(":", "")) <= {"0"}:
            continue
        version = "v2" if "v2" in gtype else "v1" if gtype else ""
        out.append(
            GidEntry(hca=dev, port=int(port), index=int(index), gid=gid, version=version,
                     ipv4=_gid_ipv4(gid), netdev=ndev)
        )
    return tuple(out)


def parse_ip_addr_json(text: str) -> tuple[Interface, ...]:
    try:
        data = json.loads(text or "[]")
    except json.JSONDecodeError:
        return ()
    out = []
    for link in data if isinstance(data, list) else []:
        addrs = tuple(
            a["local"] for a in link.get("addr_info", []) if a.get("family") == "inet" and "local" in a
        )
        flags = link.get("flags", [])
        out.append(
            Interface(
                name=str(link.get("ifname", "")),
                mtu=int(link.get("mtu", 0)),
                up="UP" in flags or link.get("operstate") == "UP",
                ipv4=addrs,
            )
        )
    return tuple(out)


def parse_df(text: str) -> dict[str, int]:
    """``df -P -B1 PATH…``: mount target -> available bytes (keyed by the path's mount point)."""
    out: dict[str, int] = {}
    for line in text.splitlines()[1:]:
        cells = line.split()
        if len(cells) >= 6 and cells[3].isdigit():
            out[cells[5]] = int(cells[3])
    return out


def split_sections(output: str) -> dict[str, tuple[int, str]]:
    """Gather-script output -> section name -> (exit status, text)."""
    sections: dict[str, tuple[int, str]] = {}
    name: str | None = None
    rc = 0
    buf: list[str] = []
    for line in output.splitlines():
        if line.startswith(MARKER):
            if name is not None:
                sections[name] = (rc, "\n".join(buf))
            head, _, status = line[len(MARKER):].partition(" rc=")
            name, rc, buf = head.strip(), int(status or 0), []
        elif name is not None:
            buf.append(line)
    if name is not None:
        sections[name] = (rc, "\n".join(buf))
    return sections


def parse_facts(output: str) -> HostFacts:
    s = split_sections(output)

    def ok(name: str) -> str:
        rc, text = s.get(name, (127, ""))
        return text if rc == 0 else ""

    missing = tuple(sorted(n for n, (rc, _) in s.items() if rc == 127))
    npus, npu_mem = parse_npu_smi(ok("npu"))
    docker_version: str | None = None
    try:
        dv = json.loads(ok("docker") or "null")
        if isinstance(dv, dict):
            docker_version = (dv.get("Server") or {}).get("Version") or (dv.get("Client") or {}).get("Version")
    except json.JSONDecodeError:
        pass  # an unreachable daemon prints prose; docker_version stays unknown
    runtimes: tuple[str, ...] = ()
    try:
        rt = json.loads(ok("docker_runtimes") or "null")
        if isinstance(rt, dict):
            runtimes = tuple(sorted(rt))
    except json.JSONDecodeError:
        pass  # same: no daemon, no runtimes
    clock_text = ok("clock").strip()
    return HostFacts(
        hostname=ok("hostname").strip(),
        gpus=parse_gpus_csv(ok("gpus")),
        cuda_version=parse_cuda_version(ok("nvidia_smi")),
        npus=npus,
        npu_memory_mib=npu_mem,
        ib_ports=parse_ibv_devinfo(ok("ibv_devinfo")),
        gids=parse_sysfs_gids(ok("gids")),
        interfaces=parse_ip_addr_json(ok("ip_addr")),
        docker_version=docker_version,
        docker_runtimes=runtimes,
        dev_infiniband=tuple(ok("dev_infiniband").split()),
        disk_free=parse_df(ok("disk")),
        clock=float(clock_text) if re.fullmatch(r"\d+(\.\d+)?", clock_text) else None,
        missing_tools=missing,
    )
