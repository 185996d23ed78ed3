"""How stage reaches hosts and judges a failed transfer.  Pure.

- A host without ``data_ip``: the rsync source address and authorized_keys' ``from=`` are the
  address fleet's own ssh connects to (ssh_config's HostName applied, as an IP), not the raw
  inventory name (issue 25 item 15).
- A failed transfer is blamed on the receiver only when the receiver itself failed (fleet lost
  it, rsync's own usage/file errors there, or a push from the control host); anything else may
  be the sender or the link (issue 25 item 8)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from launcher.errors import FleetError, RemoteError, UnreachableError
from launcher.execute.hostkeys import KnownHosts
from launcher.execute.ssh import load_ssh_config, resolve
from launcher.execute.transport import CommandTimeout
from launcher.weights.stage import blame, reach_address
from tests.preflight.factory import host


def test_a_host_without_data_ip_is_reached_at_the_address_ssh_config_resolves(tmp_path: Path) -> None:
    config = tmp_path / "ssh_config"
    config.write_text("Host gpu-a\n  HostName 127.0.0.7\nHost gpu-b\n  HostName localhost\n")
    known = KnownHosts(record_to=tmp_path / "known")
    for name, want in (("gpu-a", "127.0.0.7"), ("gpu-b", ("127.0.0.1", "::1"))):
        h = dataclasses.replace(host(name, ""), address=name)
        h = dataclasses.replace(h, spec=dataclasses.replace(h.spec, data_ip=None))
        got = reach_address(h, resolve(h, load_ssh_config(str(config)), known))
        assert got == want or got in want, (name, got)
    with_ip = host("gpu-c", "10.1.1.3")
    assert reach_address(with_ip, resolve(with_ip, load_ssh_config(str(config)), known)) == "10.1.1.3"


@pytest.mark.parametrize(("err", "push", "side"), [
    (UnreachableError("h1", "connection lost"), False, "receiver"),
    (RemoteError("h1", "rsync", 11, "mkdir failed: No space left on device"), False, "receiver"),
    (RemoteError("h1", "rsync", 255, "ssh: connect to host 10.0.0.9 port 22: Connection refused"), False, "either"),
    (RemoteError("h1", "rsync", 12, "connection unexpectedly closed"), False, "either"),
    (CommandTimeout("h1", "rsync", 60.0), False, "either"),
    (RemoteError("h1", "rsync", 255, "ssh: connect to host h1 port 22: Connection timed out"), True, "receiver"),
])  # fmt: skip
def test_blame(err: FleetError, push: bool, side: str) -> None:
    assert blame(err, push=push) == side
