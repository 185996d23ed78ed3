"""The execution layer on the netns sandbox fleet: the sandbox's own inventory, strict host
keys from its known_hosts, per-host results, and a partitioned host reported unreachable."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.config.inventory import load_inventory
from launcher.execute.fanout import run_all
from launcher.execute.hostkeys import KnownHosts
from launcher.execute.ssh import SshConnector, SshOptions
from launcher.execute.transport import Transport
from launcher.model import Host
from launcher.sandbox import faults
from launcher.sandbox.client import Sandbox

pytestmark = pytest.mark.sandbox


def _hostname(host: Host, t: Transport) -> str:
    return t.run(["hostname"], timeout=20, check=True).stdout_text.strip()


# A partitioned host never answers the TCP connect: named after connect_timeout.  The others do
# at once (the kernel answers), but their sshd's banner and key exchange wait for CPU on the loaded
# CI machine (two cores, load ~90): those get the loaded machine's bound, not 3 s.
OPTIONS = SshOptions(connect_timeout=3.0, banner_timeout=60.0, auth_timeout=60.0, ssh_config=None, use_agent=False,
                     look_for_keys=False)


def _known(sandbox: Sandbox, tmp_path: Path) -> KnownHosts:
    return KnownHosts((sandbox.known_hosts,), record_to=tmp_path / "fleet_known_hosts")


def test_fanout_over_sandbox_fleet(sandbox_fleet: Sandbox, tmp_path: Path) -> None:
    hosts = load_inventory(sandbox_fleet.inventory).hosts
    with SshConnector(_known(sandbox_fleet, tmp_path), OPTIONS) as connector:
        result = run_all(hosts, _hostname, connector=connector, forks=8)
    assert result.values() == {h.name: h.name for h in hosts}


def test_partitioned_sandbox_host_is_unreachable(sandbox_fleet: Sandbox, tmp_path: Path) -> None:
    if sandbox_fleet.state.mode != "netns":
        pytest.skip("link faults need a netns sandbox; this one is loopback")
    hosts = load_inventory(sandbox_fleet.inventory).hosts
    known = _known(sandbox_fleet, tmp_path)
    victim = sandbox_fleet.host(hosts[-1].name)
    faults.link(victim, up=False)
    try:
        with SshConnector(known, OPTIONS) as connector:
            result = run_all(hosts, _hostname, connector=connector, forks=8)
    finally:
        faults.link(victim, up=True)
    assert set(result.values()) == {h.name for h in hosts[:-1]}
    (down,) = result.unreachable
    assert down.reason == (
        f"{victim.name}: unreachable: no answer from {victim.address}:{victim.port} within 3s"
    )


def test_the_sandbox_inventory_alone_names_its_known_hosts(sandbox_fleet: Sandbox, tmp_path: Path) -> None:
    """No --known-hosts: the inventory's `-o UserKnownHostsFile=... -o StrictHostKeyChecking=yes`
    is honoured as OpenSSH honours it (before, every host was 'unknown')."""
    hosts = load_inventory(sandbox_fleet.inventory).hosts
    known = KnownHosts(record_to=tmp_path / "fleet_known_hosts", user_files=(tmp_path / "known_hosts",))
    with SshConnector(known, OPTIONS) as connector:
        result = run_all(hosts, _hostname, connector=connector, forks=8)
    assert result.values() == {h.name: h.name for h in hosts}
    assert not (tmp_path / "fleet_known_hosts").exists()
