"""Network plumbing of a netns sandbox: a ctl namespace with a bridge, one namespace per host,
and a link from the root namespace into the bridge.

Addressing: sandbox slot ``k`` (0..15) owns ``198.18.<16k>.0/20``.  The root namespace gets
``198.18.<16k>.1/20`` on interface ``fsb<k>`` (its peer is a port of the ctl bridge), so the fleet
CLI, ansible and the tests reach every host directly -- no ``ip netns exec`` for the user.  The
guard ``unreachable 198.18.0.0/15`` (metric ``4200+k``, so concurrent sandboxes and an operator's
own guard never remove each other's) stays in the root namespace while the sandbox exists: the
connected /20 is more specific and wins, every other address of the benchmarking range is refused
on the spot, and the hosts themselves have no default route, so nothing leaves the machine.
"""

from __future__ import annotations

import ipaddress
import os
import subprocess
from dataclasses import dataclass

from launcher.errors import FleetError

SLOTS = 16
GUARD = "198.18.0.0/15"
_ROUTE_METRIC_BASE = 4200


class NetnsRefused(FleetError):
    """``ip netns add`` is not permitted here (the caller may fall back to loopback hosts)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Slot:
    index: int

    @property
    def network(self) -> ipaddress.IPv4Network:
        return ipaddress.IPv4Network(f"198.18.{16 * self.index}.0/20")

    @property
    def root_ifname(self) -> str:
        return f"fsb{self.index}"

    @property
    def root_address(self) -> str:
        return str(self.network.network_address + 1)

    @property
    def route_metric(self) -> int:
        return _ROUTE_METRIC_BASE + self.index

    def host_address(self, index: int) -> str:
        """Host ``index`` (1-based) sits at .11, .12, ... of the slot's /20."""
        addr = self.network.network_address + 10 + index
        if addr >= self.network.broadcast_address:
            raise FleetError(f"too many sandbox hosts for {self.network}")
        return str(addr)


def ctl_name(sandbox: str) -> str:
    return f"fsb-{sandbox}-ctl"


def host_ns_name(sandbox: str, host: str) -> str:
    return f"fsb-{sandbox}-{host}"


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(("ip", *args), capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise FleetError(f"ip {' '.join(args)}: {proc.stderr.strip() or f'exit {proc.returncode}'}")
    return proc


def free_slot() -> Slot:
    used = {n for n in os.listdir("/sys/class/net") if n.startswith("fsb")}
    for k in range(SLOTS):
        if f"fsb{k}" not in used:
            return Slot(index=k)
    raise FleetError(f"all {SLOTS} sandbox slots are in use (links fsb0..fsb{SLOTS - 1})")


def add_guard(slot: Slot) -> None:
    ip("route", "replace", "unreachable", GUARD, "metric", str(slot.route_metric))


def del_guard(metric: int) -> None:
    ip("route", "del", "unreachable", GUARD, "metric", str(metric), check=False)


def make_ctl(sandbox: str, slot: Slot) -> str:
    """Creates the ctl namespace, its bridge and the root link; returns the ctl ns name."""
    ctl = ctl_name(sandbox)
    proc = ip("netns", "add", ctl, check=False)
    if proc.returncode != 0:
        raise NetnsRefused(f"ip netns add {ctl}: {proc.stderr.strip()}")
    ip("-n", ctl, "link", "set", "lo", "up")
    ip("-n", ctl, "link", "add", "br0", "type", "bridge")
    ip("-n", ctl, "link", "set", "br0", "up")
    ip("link", "add", slot.root_ifname, "type", "veth", "peer", "name", "up0", "netns", ctl)
    ip("-n", ctl, "link", "set", "up0", "master", "br0", "up")
    ip("addr", "add", f"{slot.root_address}/20", "dev", slot.root_ifname)
    ip("link", "set", slot.root_ifname, "up")
    return ctl


def make_host(sandbox: str, slot: Slot, index: int, host: str, ifname: str) -> str:
    """Creates host ``index``'s namespace with its NIC ``ifname`` on the bridge; returns its ns."""
    ns = host_ns_name(sandbox, host)
    ctl = ctl_name(sandbox)
    ip("netns", "add", ns)
    ip("link", "add", ifname, "netns", ns, "type", "veth", "peer", "name", f"vh{index}", "netns", ctl)
    ip("-n", ctl, "link", "set", f"vh{index}", "master", "br0", "up")
    ip("-n", ns, "link", "set", "lo", "up")
    ip("-n", ns, "addr", "add", f"{slot.host_address(index)}/20", "dev", ifname)
    ip("-n", ns, "link", "set", ifname, "up")
    return ns


def namespaces(sandbox: str) -> tuple[str, ...]:
    """Every namespace of this sandbox that exists (``ip netns`` view)."""
    prefix = f"fsb-{sandbox}-"
    try:
        listed = os.listdir("/run/netns")
    except FileNotFoundError:
        return ()
    return tuple(sorted(n for n in listed if n.startswith(prefix)))


def delete(sandbox: str) -> None:
    for ns in namespaces(sandbox):
        ip("netns", "del", ns, check=False)


def delete_root_link(root_ifname: str | None) -> None:
    if root_ifname and os.path.exists(f"/sys/class/net/{root_ifname}"):
        ip("link", "del", root_ifname, check=False)
