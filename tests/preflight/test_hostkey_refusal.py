"""An unknown or changed host key stops the facts round (and so preflight and `fleet up`) with
the host-key error itself, not a per-host 'unreachable' row."""

from __future__ import annotations

import pytest

from launcher.errors import HostKeyError
from launcher.execute.transport import Transport
from launcher.model import Host, Inventory
from launcher.facts.gather import gather_facts


class _Refusing:
    """A connector whose hosts all present an unknown key (what SshConnector raises then)."""

    def connect(self, host: Host) -> Transport:
        raise HostKeyError(host.name, "unknown: not in known_hosts")

    def close(self) -> None:
        pass


def test_unknown_host_key_is_raised_not_reported_as_unreachable() -> None:
    h1, h2 = Host(name="h1", address="198.18.0.11"), Host(name="h2", address="198.18.0.12")
    inv = Inventory(path="inv.yaml", hosts=(h1, h2), groups={})
    with pytest.raises(HostKeyError) as err:
        gather_facts(inv, (h1, h2), _Refusing(), forks=2, cache=False)
    assert str(err.value).endswith(": host key unknown: not in known_hosts")
