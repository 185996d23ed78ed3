"""Faults on sandbox hosts (no netem in this kernel: nft, link state and signals instead).

- ``sshd_signal``: SIGSTOP (a hung host: TCP connects, no banner), SIGCONT, SIGKILL (dead sshd:
  connection refused at once; running containers and sessions keep going).
- ``link``: the host's NIC down/up (connects time out).
- ``drop_ssh``: nft drops tcp/22 in the host's namespace (connects time out).
- ``loss``: nft drops a share of all incoming packets at random.
- ``clear``: removes the nft table (link and signals are undone with their own call).
Network faults need netns mode; in loopback mode they raise UsageError.
"""

from __future__ import annotations

import signal
import subprocess

from launcher.errors import FleetError, UsageError
from launcher.sandbox import netns
from launcher.sandbox.state import HostState

_TABLE = "fleetfault"
SIGNALS = {"stop": signal.SIGSTOP, "cont": signal.SIGCONT, "kill": signal.SIGKILL}


def sshd_signal(host: HostState, action: str) -> None:
    if host.sshd is None or not host.sshd.signal(SIGNALS[action]):
        raise FleetError(f"{host.name}: sshd is not running")


def _ns(host: HostState) -> str:
    if not host.netns:
        raise UsageError(f"{host.name}: network faults need a netns sandbox (this one is loopback)")
    return host.netns


def link(host: HostState, up: bool) -> None:
    netns.ip("-n", _ns(host), "link", "set", host.ifname, "up" if up else "down")


def _nft(host: HostState, script: str) -> None:
    proc = subprocess.run(
        ("ip", "netns", "exec", _ns(host), "nft", "-f", "-"), input=script, capture_output=True,
        text=True,
    )  # fmt: skip
    if proc.returncode != 0:
        raise FleetError(f"{host.name}: nft: {proc.stderr.strip()}")


def _rule(host: HostState, rule: str) -> None:
    _nft(host, f"table inet {_TABLE} {{\n chain input {{\n  type filter hook input priority 0;\n  {rule}\n }}\n}}\n")


def drop_ssh(host: HostState) -> None:
    _rule(host, f"tcp dport {host.port} drop;")


def loss(host: HostState, percent: int) -> None:
    if not 0 < percent <= 100:
        raise UsageError(f"loss percent must be 1..100, got {percent}")
    _rule(host, f"numgen random mod 100 < {percent} drop;")


def clear(host: HostState) -> None:
    proc = subprocess.run(
        ("ip", "netns", "exec", _ns(host), "nft", "delete", "table", "inet", _TABLE),
        capture_output=True, text=True,
    )  # fmt: skip
    if proc.returncode != 0 and "No such file" not in proc.stderr:
        raise FleetError(f"{host.name}: nft: {proc.stderr.strip()}")
