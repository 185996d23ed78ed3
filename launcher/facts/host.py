"""Host facts: one gather script per host, and pure parsers of what it prints.

Contract: :func:`gather_script` returns shell text (pure) that prints every section behind a
``### fleet:<name> rc=<exit code>`` marker line; :func:`parse_facts` turns that output into a
:class:`HostFacts` without I/O.  A tool that is missing on the host (exit 127) yields an empty
section, never an exception: preflight decides what is fatal.  Each section parser also works on
the tool's output alone, so tests feed them outputs in the real tools' formats.

Robustness decisions:
- Tools that hang on a sick host (``nvidia-smi`` with a GPU off the bus, ``docker`` with a wedged
  daemon, ``npu-smi``) run under ``timeout``; exit 124 then reads "did not answer".
- RDMA ports and GIDs are read from sysfs as well as from ``ibv_devinfo``: rdma-core's tools are
  missing on many hosts whose kernel drivers work.
- ``ip -j`` needs iproute2 >= 4.13; older hosts fall back to ``ip -o link`` / ``ip -o addr``.
- Free space is measured per requested path (walking up to the nearest existing parent), so a
  weights directory that does not exist yet still reports its filesystem.
- The clock is read first and last; with the control node's times around the SSH call this
  bounds the host's clock offset (:func:`clock_offset`).
"""

from __future__ import annotations

import dataclasses
import json
import re
import shlex
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from launcher.model import GpuSku

MARKER = "### fleet:"
TOOL_TIMEOUT_S = 30  # per hang-prone tool (nvidia-smi, npu-smi, docker)
SHM = "/dev/shm"

# sh function: run under coreutils timeout when the host has it.
_PRELUDE = (
    "fleet_t() { if command -v timeout >/dev/null 2>&1; then timeout \"$@\"; else shift; \"$@\"; fi; }"
)

# The sections, in order: name -> shell command.  sysfs is read directly because show_gids is an
# OFED script that many hosts lack; the loop prints "dev port index type ndev gid" per GID.
_SECTIONS: tuple[tuple[str, str], ...] = (
    ("clock_start", "date +%s.%N"),
    ("hostname", "hostname"),
    ("kernel", "uname -r"),
    (
        "gpus",
        f"fleet_t {TOOL_TIMEOUT_S} nvidia-smi --query-gpu=index,name,memory.total,driver_version,pci.bus_id "
        "--format=csv,noheader,nounits",
    ),
    ("mig", f"fleet_t {TOOL_TIMEOUT_S} nvidia-smi --query-gpu=index,mig.mode.current --format=csv,noheader"),
    ("nvidia_smi", f"fleet_t {TOOL_TIMEOUT_S} nvidia-smi"),
    ("npu", f"fleet_t {TOOL_TIMEOUT_S} npu-smi info"),
    ("ibv_devinfo", "ibv_devinfo"),
    (
        "ib_ports",
        "for p in /sys/class/infiniband/*/ports/*; do [ -e \"$p\" ] || continue; d=${p%/ports/*}; "
        "s=; read -r s 2>/dev/null <\"$p/state\"; l=; read -r l 2>/dev/null <\"$p/link_layer\"; "
        "printf '%s\\t%s\\t%s\\t%s\\n' \"${d##*/}\" \"${p##*/}\" \"$s\" \"$l\"; done",
    ),
    (
        "gids",
        "for g in /sys/class/infiniband/*/ports/*/gids/*; do [ -e \"$g\" ] || continue; "
        "p=${g%/gids/*}; i=${g##*/}; d=${p%/ports/*}; "
        "t=; read -r t 2>/dev/null <\"$p/gid_attrs/types/$i\"; n=; read -r n 2>/dev/null <\"$p/gid_attrs/ndevs/$i\"; "
        "v=; read -r v 2>/dev/null <\"$g\"; "
        "printf '%s\\t%s\\t%s\\t%s\\t%s\\t%s\\n' \"${d##*/}\" \"${p##*/}\" \"$i\" \"$t\" \"$n\" \"$v\"; done",
    ),
    ("ip_addr", "ip -j addr show 2>/dev/null || { ip -o link show && ip -o addr show; }"),
    ("docker", f"fleet_t {TOOL_TIMEOUT_S} docker version --format '{{{{json .}}}}'"),
    ("docker_runtimes", f"fleet_t {TOOL_TIMEOUT_S} docker info --format '{{{{json .Runtimes}}}}'"),
    (
        "nvidia_toolkit",
        "for b in nvidia-container-runtime-hook nvidia-container-toolkit nvidia-container-runtime "
        "nvidia-ctk; do command -v \"$b\"; done; true",
    ),
    ("dev_infiniband", "ls /dev/infiniband"),
    ("python3", "python3 -c 'import sys; print(\"%d.%d.%d\" % sys.version_info[:3])'"),
    # procps' free first (what a host's own tools say), the kernel's count where it is missing.
    ("meminfo", "free -b 2>/dev/null || grep '^MemTotal:' /proc/meminfo"),
)


def sections_script(sections: Sequence[tuple[str, str]], *, first: Sequence[tuple[str, str]] = (),
                    last: Sequence[tuple[str, str]] = ()) -> str:
    """One script printing, per section in order, ``### fleet:<name> rc=<status>`` and the
    section's output (stderr folded in, trailing newlines cut to one).  Every section runs even
    if an earlier one failed.  ``sections`` run concurrently (their outputs in a private temp
    directory, removed on exit), so a host answers in the time of its slowest tool rather than
    the sum; ``first`` and ``last`` run alone before and after them (the clock brackets).
    Without ``mktemp -d`` on the host the sections run one after another."""

    def inline(name: str, cmd: str) -> str:
        return f"out=$( {{ {cmd} ; }} 2>&1 ); rc=$?; echo '{MARKER}{name} rc='$rc; printf '%s\\n' \"$out\""

    parts = [_PRELUDE, *(inline(n, c) for n, c in first)]
    if sections:
        # Each section writes its whole block (as run inline) to its own file; one ``cat`` prints
        # them in order (a fork per section cost a host's CPU where hosts share it).  A section
        # whose file stayed empty (its subshell was killed) shows rc=255.
        background = [f"( {inline(n, c)} ) >\"$fleet_d/{i}\" 2>&1 &" for i, (n, c) in enumerate(sections)]
        missing = [f"[ -s \"$fleet_d/{i}\" ] || printf '%s\\n\\n' '{MARKER}{name} rc=255' >\"$fleet_d/{i}\""
                   for i, (name, _) in enumerate(sections)]
        files = " ".join(f"\"$fleet_d/{i}\"" for i in range(len(sections)))
        parts += [
            "if fleet_d=$(mktemp -d 2>/dev/null); then",
            "trap 'rm -rf \"$fleet_d\"' EXIT",
            *background,
            "wait",
            *missing,
            f"cat {files}",
            "else",
            *(inline(n, c) for n, c in sections),
            "fi",
        ]
    parts += [inline(n, c) for n, c in last]
    return "\n".join(parts) + "\n"


def gather_script(paths: tuple[str, ...] = ()) -> str:
    """The one script a host runs for all its facts.  ``paths`` (and /dev/shm) get a line each
    with the size and free space of their filesystem."""
    disk_paths = tuple(dict.fromkeys((*paths, SHM)))
    disk = (
        "for p in " + " ".join(shlex.quote(p) for p in disk_paths) + "; do q=$p; "
        "while [ ! -e \"$q\" ] && [ \"$q\" != / ]; do q=$(dirname \"$q\"); done; "
        "printf '%s\\t%s\\n' \"$p\" \"$(df -P -B1 \"$q\" 2>/dev/null | tail -n 1)\"; done"
    )
    clock = "date +%s.%N"
    return sections_script([*_SECTIONS[1:], ("disk", disk)], first=_SECTIONS[:1], last=[("clock_end", clock)])


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
    state: str  # PORT_ACTIVE, PORT_DOWN, PORT_INIT, ...
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
class Disk:
    """The filesystem holding one requested path."""

    path: str  # as requested
    mount: str  # where its filesystem is mounted
    total: int  # bytes
    free: int  # bytes available to unprivileged users (df "Available")


@dataclass(frozen=True, slots=True, kw_only=True)
class HostFacts:
    hostname: str = ""
    kernel: str = ""
    gpus: tuple[Gpu, ...] = ()
    gpu_error: str | None = None  # nvidia-smi ran but failed ("No devices were found", driver)
    mig_enabled: tuple[int, ...] = ()  # indices of GPUs in MIG mode
    cuda_version: str | None = None
    npus: tuple[str, ...] = ()  # Ascend chip names, e.g. "910B3", one per NPU chip
    npu_memory_mib: tuple[int, ...] = ()
    npu_error: str | None = None
    ib_ports: tuple[IbPort, ...] = ()
    gids: tuple[GidEntry, ...] = ()
    interfaces: tuple[Interface, ...] = ()
    docker_version: str | None = None
    docker_error: str | None = None  # the daemon did not answer: why
    docker_runtimes: tuple[str, ...] = ()
    nvidia_toolkit: tuple[str, ...] = ()  # paths of the NVIDIA container toolkit binaries found
    dev_infiniband: tuple[str, ...] = ()
    python3: str | None = None  # version, None when python3 is not on PATH
    disk_free: Mapping[str, int] = field(default_factory=dict)  # mount target -> bytes free
    disks: tuple[Disk, ...] = ()
    clock: float | None = None  # host clock (epoch s) at the start of the script
    clock_end: float | None = None  # ... and at its end
    missing_tools: tuple[str, ...] = ()  # sections whose command was not found
    mem_total: int | None = None  # host RAM in bytes (free -b, else /proc/meminfo MemTotal)

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

    def interface_with(self, ipv4: str) -> Interface | None:
        return next((i for i in self.interfaces if ipv4 in i.ipv4), None)

    def disk(self, path: str) -> Disk | None:
        """The filesystem of ``path``: its own line, else the one of the longest requested
        parent directory."""
        best: Disk | None = None
        for d in self.disks:
            if path == d.path or path.startswith(d.path.rstrip("/") + "/"):
                if best is None or len(d.path) > len(best.path):
                    best = d
        return best


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
    --format=csv[,noheader][,nounits]``.  An unknown size (``[N/A]``, unified-memory parts)
    reads as 0 MiB."""
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


def parse_mig_csv(text: str) -> tuple[int, ...]:
    """``nvidia-smi --query-gpu=index,mig.mode.current --format=csv,noheader``: GPUs in MIG mode."""
    out = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) == 2 and cells[0].isdigit() and cells[1] == "Enabled":
            out.append(int(cells[0]))
    return tuple(out)


def parse_mig_table(nvidia_smi: str) -> tuple[int, ...]:
    """GPUs in MIG mode from the plain ``nvidia-smi`` table: the ``MIG M.`` cell is the last cell
    of the third line of each GPU's block (drivers >= 450)."""
    lines = nvidia_smi.splitlines()
    if not any("MIG M." in line for line in lines):
        return ()
    out = []
    for i, line in enumerate(lines):
        if "MIG devices:" in line or "Processes:" in line:
            break
        m = re.match(r"^\|\s+(\d+)\s+\S", line)
        if m and i + 2 < len(lines):
            cells = [c.strip() for c in lines[i + 2].strip().strip("|").split("|")]
            if cells and cells[-1] == "Enabled":
                out.append(int(m.group(1)))
    return tuple(out)


def parse_cuda_version(nvidia_smi: str) -> str | None:
    m = re.search(r"CUDA Version:\s*([\d.]+)", nvidia_smi)
    return m.group(1) if m else None


def parse_npu_smi(text: str) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """``npu-smi info``: chip names and HBM sizes (MB), one per NPU chip, from its box table.

    Works for one chip per card (910B: ``| Chip | Bus-Id |``) and for cards with two chips
    (Atlas A3: ``| Chip  Phy-ID | Bus-Id |``, a row pair per chip); the process table that
    follows the device table is ignored."""
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
    """``ibv_devinfo`` (any verbosity); "No IB devices found" gives no ports."""
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


_SYSFS_STATES = {"1": "PORT_DOWN", "2": "PORT_INIT", "3": "PORT_ARMED", "4": "PORT_ACTIVE", "5": "PORT_ACTIVE_DEFER"}


def parse_sysfs_ports(text: str) -> tuple[IbPort, ...]:
    """Lines ``dev<TAB>port<TAB>state<TAB>link_layer`` from the gather script's sysfs walk, where
    state is the kernel's ``4: ACTIVE`` form."""
    out = []
    for line in text.splitlines():
        cells = line.split("\t")
        if len(cells) != 4 or not cells[1].isdigit():
            continue
        code = cells[2].split(":", 1)[0].strip()
        out.append(IbPort(hca=cells[0], port=int(cells[1]), state=_SYSFS_STATES.get(code, cells[2].strip()),
                          link_layer=cells[3].strip()))
    return tuple(out)


def _gid_ipv4(gid: str) -> str | None:
    """The IPv4 address of an IPv4-mapped GID (``::ffff:a.b.c.d``), else None."""
    hexes = gid.replace(":", "").lower()
    if len(hexes) != 32 or not hexes.startswith("0" * 20 + "ffff"):
        return None
    tail = hexes[24:]
    return ".".join(str(int(tail[i : i + 2], 16)) for i in range(0, 8, 2))


def parse_show_gids(text: str) -> tuple[GidEntry, ...]:
    """The OFED ``show_gids`` table: DEV PORT INDEX GID [IPv4] VER [DEV].  IPv6 GIDs have an empty
    IPv4 column; on InfiniBand ports the netdev column is empty."""
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
    """``ip -j addr show``.  Entries without a name (old iproute2 prints ``{}`` for links it
    filtered out) are skipped; VLAN names keep their ``@parent`` off (``ip`` prints it only in
    text mode)."""
    try:
        data = json.loads(text or "[]")
    except json.JSONDecodeError:
        return ()
    out = []
    for link in data if isinstance(data, list) else []:
        if not isinstance(link, dict) or not link.get("ifname"):
            continue
        addrs = tuple(
            a["local"] for a in link.get("addr_info", []) if a.get("family") == "inet" and "local" in a
        )
        flags = link.get("flags", [])
        out.append(
            Interface(
                name=str(link["ifname"]),
                mtu=int(link.get("mtu", 0)),
                up="UP" in flags or link.get("operstate") == "UP",
                ipv4=addrs,
            )
        )
    return tuple(out)


def parse_ip_oneline(text: str) -> tuple[Interface, ...]:
    """``ip -o link show`` then ``ip -o addr show`` (iproute2 without ``-j``)."""
    links: dict[str, tuple[int, bool]] = {}
    addrs: dict[str, list[str]] = {}
    for line in text.splitlines():
        link = re.match(r"^\d+:\s+([^:@\s]+)(?:@\S+)?:\s+<([^>]*)>.*?\bmtu (\d+)", line)
        if link:
            links[link.group(1)] = (int(link.group(3)), "UP" in link.group(2).split(","))
            continue
        addr = re.match(r"^\d+:\s+(\S+)\s+inet\s+(\d+\.\d+\.\d+\.\d+)", line)
        if addr:
            addrs.setdefault(addr.group(1), []).append(addr.group(2))
    return tuple(Interface(name=n, mtu=m, up=up, ipv4=tuple(addrs.get(n, ()))) for n, (m, up) in links.items())


def parse_ip(text: str) -> tuple[Interface, ...]:
    """Either form of the ``ip_addr`` section."""
    return parse_ip_addr_json(text) if text.lstrip().startswith("[") else parse_ip_oneline(text)


def parse_df(text: str) -> dict[str, int]:
    """``df -P -B1 PATH…``: mount target -> available bytes (keyed by the path's mount point)."""
    out: dict[str, int] = {}
    for line in text.splitlines()[1:]:
        cells = line.split()
        if len(cells) >= 6 and cells[3].isdigit():
            out[cells[5]] = int(cells[3])
    return out


def parse_disks(text: str) -> tuple[Disk, ...]:
    """Lines ``path<TAB><last line of df -P -B1>`` from the gather script's per-path loop."""
    out = []
    for line in text.splitlines():
        path, _, row = line.partition("\t")
        cells = row.split()
        if len(cells) >= 6 and cells[1].isdigit() and cells[3].isdigit():
            out.append(Disk(path=path, mount=" ".join(cells[5:]), total=int(cells[1]), free=int(cells[3])))
    return tuple(out)


def parse_toolkit(text: str) -> tuple[str, ...]:
    return tuple(line.strip() for line in text.splitlines() if line.strip().startswith("/"))


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
            name, rc, buf = head.strip(), int(status) if status.strip().isdigit() else 0, []
        elif name is not None:
            buf.append(line)
    if name is not None:
        sections[name] = (rc, "\n".join(buf))
    return sections


def _tool_error(rc: int, text: str, tool: str) -> str | None:
    """One line saying why a tool that exists failed (None: it succeeded or is absent)."""
    if rc in (0, 127):
        return None
    if rc == 124:
        return f"{tool} did not answer within {TOOL_TIMEOUT_S}s"
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return first or f"{tool} exited {rc}"


def _docker(rc: int, text: str) -> tuple[str | None, str | None]:
    """(server version, error) from ``docker version --format '{{json .}}'``."""
    if rc == 127:
        return None, None  # not installed: missing_tools says so
    if rc == 124:
        return None, f"docker did not answer within {TOOL_TIMEOUT_S}s"
    if rc == 0:
        try:
            doc = json.loads(text or "null")
        except json.JSONDecodeError:
            doc = None
        server = doc.get("Server") if isinstance(doc, dict) else None
        version = server.get("Version") if isinstance(server, dict) else None
        return (str(version), None) if version else (None, "docker daemon did not report a server version")
    # The client prints its own JSON before the error line: show the error, not the JSON.
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("{")]
    return None, lines[0] if lines else f"docker exited {rc}"


def parse_meminfo(text: str) -> int | None:
    """Host RAM in bytes: ``free -b``'s ``Mem:`` total, or ``MemTotal:  263842380 kB`` (the
    kernel's kB are KiB)."""
    m = re.search(r"^Mem:\s+(\d+)", text, re.M)
    if m:
        return int(m.group(1))
    m = re.search(r"^MemTotal:\s+(\d+)\s*kB", text, re.M)
    return int(m.group(1)) * 1024 if m else None


def _clock(text: str) -> float | None:
    text = text.strip()
    return float(text) if re.fullmatch(r"\d+(\.\d+)?", text) else None


def parse_facts(output: str) -> HostFacts:
    s = split_sections(output)

    def ok(name: str) -> str:
        rc, text = s.get(name, (127, ""))
        return text if rc == 0 else ""

    def raw(name: str) -> tuple[int, str]:
        return s.get(name, (127, ""))

    missing = tuple(sorted(n for n, (rc, _) in s.items() if rc == 127))
    npus, npu_mem = parse_npu_smi(ok("npu"))
    docker_version, docker_error = _docker(*raw("docker"))
    runtimes: tuple[str, ...] = ()
    try:
        rt = json.loads(ok("docker_runtimes") or "null")
        if isinstance(rt, dict):
            runtimes = tuple(sorted(rt))
    except json.JSONDecodeError:
        pass  # same: no daemon, no runtimes
    gpus_rc, gpus_text = raw("gpus")
    nvidia_smi = ok("nvidia_smi")
    ports = parse_ibv_devinfo(ok("ibv_devinfo")) or parse_sysfs_ports(ok("ib_ports"))
    py = ok("python3").strip()
    disks = parse_disks(ok("disk"))
    return HostFacts(
        hostname=ok("hostname").strip(),
        kernel=ok("kernel").strip(),
        gpus=parse_gpus_csv(ok("gpus")),
        gpu_error=_tool_error(gpus_rc, gpus_text, "nvidia-smi"),
        mig_enabled=parse_mig_csv(ok("mig")) or parse_mig_table(nvidia_smi),
        cuda_version=parse_cuda_version(nvidia_smi),
        npus=npus,
        npu_memory_mib=npu_mem,
        npu_error=_tool_error(*raw("npu"), "npu-smi"),
        ib_ports=ports,
        gids=parse_sysfs_gids(ok("gids")),
        interfaces=parse_ip(ok("ip_addr")),
        docker_version=docker_version,
        docker_error=docker_error,
        docker_runtimes=runtimes,
        nvidia_toolkit=parse_toolkit(raw("nvidia_toolkit")[1]),
        dev_infiniband=tuple(ok("dev_infiniband").split()),
        python3=py if re.fullmatch(r"\d+\.\d+\.\d+", py) else None,
        disk_free={d.mount: d.free for d in disks} or parse_df(ok("disk")),
        disks=disks,
        clock=_clock(ok("clock_start") or ok("clock")),
        clock_end=_clock(ok("clock_end")),
        missing_tools=missing,
        mem_total=parse_meminfo(ok("meminfo")),
    )


def clock_offset(hf: HostFacts, sent: float, received: float) -> tuple[float, float] | None:
    """(offset, uncertainty) in seconds of the host's clock against the control node's, from the
    control node's times just before sending the gather script and just after its output came
    back.  The host's first and last clock reads both happened inside that window, so the
    offset lies within ``[clock_end - received, clock - sent]``; its midpoint is returned with
    half the width as the uncertainty."""
    if hf.clock is None:
        return None
    end = hf.clock_end if hf.clock_end is not None else hf.clock
    high, low = hf.clock - sent, end - received
    if high < low:  # clocks are not monotonic across the call (stepped): give the wide bound
        low, high = high, low
    return (high + low) / 2, (high - low) / 2


def to_json(hf: HostFacts) -> dict[str, Any]:
    """Facts as JSON-ready data (tuples become lists, mappings dicts)."""

    def conv(value: object) -> object:
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            return {f.name: conv(getattr(value, f.name)) for f in dataclasses.fields(value)}
        if isinstance(value, Mapping):
            return {str(k): conv(v) for k, v in value.items()}
        if isinstance(value, (tuple, list)):
            return [conv(v) for v in value]
        return value

    out = conv(hf)
    assert isinstance(out, dict)
    return out
