"""Fake hardware tools of a sandbox host: ``tool.py SPEC.json TOOL ARGS...``.

Answers like nvidia-smi (table, ``-L``, ``--query-gpu=... --format=csv[,noheader][,nounits]``,
``topo -m``), ibv_devinfo (``-l``, ``-d DEV``), show_gids, ``npu-smi info`` and ``free -b`` from the host's
spec (written by ``launcher.sandbox.fakehw``) and the captured outputs next to this file.
Stdlib only; runs with the control node's python3 inside the host's namespaces.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
UNITS = {"memory.total": "MiB", "memory.used": "MiB", "memory.free": "MiB",
         "utilization.gpu": "%", "power.limit": "W", "power.draw": "W"}  # fmt: skip


def nvidia_smi(spec: dict[str, Any], args: list[str]) -> int:
    gpus: list[dict[str, Any]] = spec["gpus"]
    if args[:2] == ["topo", "-m"]:
        sys.stdout.write((HERE / spec["topo"]).read_text())
        return 0
    if args == ["-L"]:
        for g in gpus:
            print(f"GPU {g['index']}: {g['name']} (UUID: {g['uuid']})")
        return 0
    query = next((a.split("=", 1)[1] for a in args if a.startswith("--query-gpu=")), None)
    if query is None:
        if args:
            print("Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.")
            return 2
        print(time.strftime("%a %b %d %H:%M:%S %Y") + "       ")
        sys.stdout.write((HERE / spec["table"]).read_text())
        return 0
    fmt = next((a.split("=", 1)[1] for a in args if a.startswith("--format=")), "")
    opts = set(fmt.split(","))
    if "csv" not in opts:
        print('"--query-gpu" requires "--format=csv" option.')
        return 2
    fields = [f.strip() for f in query.split(",")]
    for f in fields:
        if f not in gpus[0]:
            print(f'Field "{f}" is not a valid field to query.')
            return 2
    if "noheader" not in opts:
        units = "nounits" not in opts
        print(", ".join(f"{f} [{UNITS[f]}]" if units and f in UNITS else f for f in fields))
    for g in gpus:
        cells = []
        for f in fields:
            v = g[f]
            cells.append(f"{v} {UNITS[f]}" if "nounits" not in opts and f in UNITS else str(v))
        print(", ".join(cells))
    return 0


def _hcas(spec: dict[str, Any], args: list[str]) -> list[dict[str, Any]]:
    hcas: list[dict[str, Any]] = spec["hcas"]
    if "-d" in args:
        want = args[args.index("-d") + 1]
        return [h for h in hcas if h["name"] == want]
    return hcas


def ibv_devinfo(spec: dict[str, Any], args: list[str]) -> int:
    hcas = _hcas(spec, args)
    if not hcas:
        print("No IB devices found", file=sys.stderr)
        return 255
    if "-l" in args:
        print(f"{len(hcas)} HCA{'s' if len(hcas) != 1 else ''} found:")
        for h in hcas:
            print(f"\t{h['name']}")
        return 0
    blocks = []
    for h in hcas:
        blocks.append(
            f"hca_id:\t{h['name']}\n"
            "\ttransport:\t\t\tInfiniBand (0)\n"
            f"\tfw_ver:\t\t\t\t{h['fw_ver']}\n"
            f"\tnode_guid:\t\t\t{h['guid']}\n"
            f"\tsys_image_guid:\t\t\t{h['guid']}\n"
            "\tvendor_id:\t\t\t0x02c9\n"
            "\tvendor_part_id:\t\t\t4129\n"
            "\thw_ver:\t\t\t\t0x0\n"
            "\tboard_id:\t\t\tMT_0000000838\n"
            "\tphys_port_cnt:\t\t\t1\n"
            "\t\tport:\t1\n"
            "\t\t\tstate:\t\t\tPORT_ACTIVE (4)\n"
            "\t\t\tmax_mtu:\t\t4096 (5)\n"
            "\t\t\tactive_mtu:\t\t4096 (5)\n"
            "\t\t\tsm_lid:\t\t\t0\n"
            "\t\t\tport_lid:\t\t0\n"
            "\t\t\tport_lmc:\t\t0x00\n"
            "\t\t\tlink_layer:\t\tEthernet\n"
        )
    sys.stdout.write("\n".join(blocks))
    return 0


def show_gids(spec: dict[str, Any], args: list[str]) -> int:
    hcas = _hcas(spec, args[:0] + (["-d", args[0]] if args else []))
    print("DEV\tPORT\tINDEX\tGID\t\t\t\t\tIPv4  \t\tVER\tDEV")
    print("---\t----\t-----\t---\t\t\t\t\t------------  \t---\t---")
    n = 0
    for h in hcas:
        for index, gid, kind, ndev, ipv4 in h["gids"]:
            ver = "v2" if kind == "RoCE v2" else "v1"
            ip = f"{ipv4}  " if ipv4 else "\t"
            print(f"{h['name']}\t1\t{index}\t{gid}\t{ip}\t{ver}\t{ndev}")
            n += 1
    print(f"n_gids_found={n}")
    return 0


def npu_smi(spec: dict[str, Any], args: list[str]) -> int:
    if args[:1] != ["info"]:
        print("Usage: npu-smi info", file=sys.stderr)
        return 1
    sys.stdout.write((HERE / spec["npu"]).read_text())
    return 0


def free(spec: dict[str, Any], args: list[str]) -> int:
    """procps' ``free -b``: the host RAM the profile pretends (a GPU server's, not this machine's)."""
    if args != ["-b"]:
        print(f"free: fleet's stand-in answers only -b, got {' '.join(args)}", file=sys.stderr)
        return 1
    total = spec["mem_total_bytes"]
    print("               total        used        free      shared  buff/cache   available")
    print(f"Mem:    {total:>12} {total // 64:>11} {total - total // 32:>11} {0:>11} {total // 64:>11} "
          f"{total - total // 64:>11}")
    print(f"Swap:   {0:>12} {0:>11} {0:>11}")
    return 0


TOOLS = {"nvidia-smi": nvidia_smi, "ibv_devinfo": ibv_devinfo, "show_gids": show_gids,
         "npu-smi": npu_smi, "free": free}  # fmt: skip


def main(argv: list[str]) -> int:
    spec = json.loads(Path(argv[0]).read_text())
    return TOOLS[argv[1]](spec, argv[2:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
