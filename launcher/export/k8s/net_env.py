"""The init container's script: derive a node's per-host network env on the node itself.

Run as ``python3 -c <this file> OUT HCAS KEY...`` inside the engine image (any python3 >= 3.8,
standard library only) on a hostNetwork pod.  Writes ``export KEY=VALUE`` lines to OUT, which
the engine container sources before it execs the engine.  The rules are fleet's own
(``launcher/network.py``, ``gid_index: auto``):

- a GID index key (NCCL_IB_GID_INDEX, MC_GID_INDEX, UCX_IB_GID_INDEX): the index of the RoCE v2
  IPv4-mapped GID on port 1, which must be the same on every listed HCA (NCCL and Mooncake take
  one index per process);
- a NIC key (NCCL_SOCKET_IFNAME as ``=NIC`` for an exact match, GLOO/HCCL/TP_SOCKET_IFNAME as
  ``NIC``): on RoCE the netdev of that GID on the first HCA (the data NIC), else the NIC that
  holds the pod IP (env FLEET_POD_IP: the node's IP under hostNetwork).

Any failure exits 1 with one line on stderr: the pod stays in Init and says why.
"""

import fcntl
import os
import socket
import struct
import sys

GID_KEYS = ("NCCL_IB_GID_INDEX", "MC_GID_INDEX", "UCX_IB_GID_INDEX")
IB = "/sys/class/infiniband"
SIOCGIFADDR = 0x8915


def _read(path: str) -> str:
    try:
        with open(path) as fh:
            return fh.read().strip()
    except OSError:
        return ""  # unpopulated GID table entries fail to read (EINVAL)


def roce_v2_gid(hca: str) -> "tuple[int, str] | None":
    """(index, netdev) of the RoCE v2 IPv4-mapped GID on port 1 of ``hca``."""
    port = f"{IB}/{hca}/ports/1"
    try:
        indices = sorted(int(i) for i in os.listdir(f"{port}/gids"))
    except OSError:
        return None
    for i in indices:
        gid = _read(f"{port}/gids/{i}")
        if _read(f"{port}/gid_attrs/types/{i}") == "RoCE v2" and gid.startswith("0000:0000:0000:0000:0000:ffff:"):
            return i, _read(f"{port}/gid_attrs/ndevs/{i}")
    return None


def nic_of(ip: str) -> "str | None":
    """The interface holding IPv4 ``ip``."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for name in sorted(os.listdir("/sys/class/net")):
            try:
                raw = fcntl.ioctl(s.fileno(), SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
            except OSError:
                continue
            if socket.inet_ntoa(raw[20:24]) == ip:
                return name
    return None


def derive(hcas: "list[str]", keys: "list[str]", pod_ip: str) -> "dict[str, str]":
    gid: "int | None" = None
    ndev = ""
    if any(k in GID_KEYS for k in keys) or (hcas and os.path.isdir(IB)):
        found = {h: roce_v2_gid(h) for h in hcas}
        missing = sorted(h for h, f in found.items() if f is None)
        if any(k in GID_KEYS for k in keys) and (missing or not hcas):
            raise SystemExit(f"fleet-net-env: no RoCE v2 IPv4 GID on {', '.join(missing) or 'any HCA'}")
        indices = sorted({f[0] for f in found.values() if f is not None})
        if len(indices) > 1:
            shown = ", ".join(f"{h}={f[0]}" for h, f in sorted(found.items()) if f is not None)
            raise SystemExit(f"fleet-net-env: HCAs have different RoCE v2 GID indices ({shown})")
        if indices and not missing:
            gid = indices[0]
            ndev = next(f[1] for f in found.values() if f is not None)
    out = {}
    for key in keys:
        if key in GID_KEYS:
            out[key] = str(gid)
            continue
        nic = ndev or nic_of(pod_ip)
        if not nic:
            raise SystemExit(f"fleet-net-env: no NIC holds the pod IP {pod_ip!r} and no RoCE GID names one")
        out[key] = f"={nic}" if key == "NCCL_SOCKET_IFNAME" else nic
    return out


def main(argv: "list[str]") -> None:
    out_path, hcas, keys = argv[0], [h for h in argv[1].split(",") if h], argv[2:]
    values = derive(hcas, keys, os.environ.get("FLEET_POD_IP", ""))
    with open(out_path, "w") as fh:
        for key in keys:
            fh.write(f"export {key}='{values[key]}'\n")
    for key in keys:
        print(f"fleet-net-env: {key}={values[key]}")


if __name__ == "__main__":
    main(sys.argv[1:])
