"""What an inventory host may be called and reached as (issue 25 item 1): the refusals are in
the hostile-input corpus (tests/unit/test_hostile_corpus.py); these are the ordinary values that
must keep loading."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.addresses import address_problem, name_problem, user_problem
from launcher.config.inventory import load_inventory


@pytest.mark.parametrize("address", ["10.0.0.1", "::1", "fe80::1%eth0", "gpu-01", "gpu_01.dc1.example.com", "a" * 63, "localhost"])
def test_ordinary_addresses(address: str) -> None:
    assert address_problem(address) is None


@pytest.mark.parametrize("address", ["999.1.1.1", "1.2.3", "-h", "h;id", "h h", "h\nx", "a..b", "h$(id)", "", "a" * 64, "x.-y"])
def test_refused_addresses(address: str) -> None:
    assert address_problem(address) is not None


def test_names_and_users() -> None:
    assert [name_problem(n) for n in ("gpu-01", "h1", "2001:db8::1", "_x")] == [None] * 4
    assert all(name_problem(n) for n in ("-x", ".x", "h;id", "h/x", "a" * 241, ""))
    assert [user_problem(u) for u in ("root", "ops@corp.example", "svc.fleet-1")] == [None] * 3
    assert all(user_problem(u) for u in ("-oProxyCommand=x", "u;id", "u x", "", "u$x"))


def test_an_inventory_of_ordinary_hosts_loads(tmp_path: Path) -> None:
    p = tmp_path / "hosts.ini"
    p.write_text("[g]\ngpu-[01:03] ansible_user=ops@corp.example mtu=9000 ib_tc=106 ib_sl=3 gid_index=3\n"
                 "v6 ansible_host=fe80::1%eth0\n[g:vars]\ngpu_count=8\n")  # fmt: skip
    inv = load_inventory(p)
    assert [(h.name, h.address, h.user) for h in inv.hosts] == [
        ("gpu-01", "gpu-01", "ops@corp.example"), ("gpu-02", "gpu-02", "ops@corp.example"),
        ("gpu-03", "gpu-03", "ops@corp.example"), ("v6", "fe80::1%eth0", None)]
