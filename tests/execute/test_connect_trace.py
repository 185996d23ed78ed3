"""``fleet -v`` shows a failed connect too (logger ``fleet.ssh``, INFO): each attempt at a host
that cannot be reached is one line, so what a dead host's waits cost, and how many were made,
can be seen (issue #26 follow-up: ``up --check`` tried a dead host twice).  Loopback only: a
port nothing listens on refuses at once."""

from __future__ import annotations

import logging
import re
import socket
from pathlib import Path

import pytest

from launcher.errors import UnreachableError
from launcher.execute.hostkeys import KnownHosts
from launcher.execute.ssh import SshConnector, SshOptions
from launcher.model import Host, Source


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed again when the block ends: nothing listens there


def test_each_failed_connect_is_one_v_line(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    port = closed_port()
    host = Host(name="h9", address="127.0.0.1", port=port, source=Source(path="inv.yaml", line=2, col=3))
    options = SshOptions(ssh_config=None, use_agent=False, look_for_keys=False)
    caplog.set_level(logging.INFO, logger="fleet.ssh")
    with SshConnector(KnownHosts((), record_to=tmp_path / "kh"), options) as connector:
        for _ in range(2):  # the connector itself remembers nothing: every connect tries again
            with pytest.raises(UnreachableError, match=f"^h9: unreachable: connection refused by 127.0.0.1:{port}$"):
                connector.connect(host)
    shown = [re.sub(r" after \d+\.\d\d s:", " after N s:", r.getMessage()) for r in caplog.records
             if r.name == "fleet.ssh"]  # fmt: skip
    assert shown == [f"h9: no connection to 127.0.0.1:{port} after N s: connection refused by 127.0.0.1:{port}"] * 2
