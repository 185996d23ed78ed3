"""Fleet's inventory resolution equals real Ansible's, on every fixture and example inventory."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from launcher.cli import cli
from launcher.config.inventory import load_inventory
from tests.config.ansible_ref import inventory_view
from tests.config.conftest import FIXTURES, REPO

INVENTORIES = sorted(
    [p for p in (FIXTURES / "inventories").glob("*/hosts.*")]
    + [p for p in (REPO / "inventories").glob("*") if p.suffix in (".yaml", ".yml", ".ini")]
)


def _ids(p: Path) -> str:
    return str(p.relative_to(REPO))


@pytest.mark.parametrize("path", INVENTORIES, ids=_ids)
def test_same_hosts_groups_and_vars_as_ansible(path: Path) -> None:
    ref = inventory_view(path)
    inv = load_inventory(path)
    assert tuple(h.name for h in inv.hosts) == ref.order
    for name, hosts in ref.groups.items():
        assert set(inv.groups[name].hosts) == hosts, name
    for group in inv.groups.values():
        if group.hosts and group.name != "all":
            assert frozenset(group.hosts) == ref.groups[group.name], group.name
    for host in inv.hosts:
        mine = json.loads(json.dumps(dict(host.vars)))
        assert mine == ref.hostvars.get(host.name, {}), host.name
        expected_groups = sorted(g for g, members in ref.groups.items() if host.name in members and g != "all")
        assert list(host.groups) == expected_groups, host.name


def test_fixtures_are_all_found() -> None:
    # The parametrisation above must not silently shrink.
    assert len([p for p in INVENTORIES if "fixtures" in str(p)]) >= 4


def test_example_yaml_and_ini_are_the_same_fleet() -> None:
    yaml_inv = load_inventory(REPO / "inventories" / "example.yaml")
    ini_inv = load_inventory(REPO / "inventories" / "example.ini")
    assert [h.name for h in yaml_inv.hosts] == [h.name for h in ini_inv.hosts]
    for a, b in zip(yaml_inv.hosts, ini_inv.hosts):
        assert (a.address, a.port, a.user, a.key_file, a.ssh_common_args, a.groups) == (
            b.address,
            b.port,
            b.user,
            b.key_file,
            b.ssh_common_args,
            b.groups,
        ), a.name
        assert dict(a.vars) == dict(b.vars), a.name
        assert a.spec == b.spec, a.name
    assert {n: g.hosts for n, g in yaml_inv.groups.items()} == {n: g.hosts for n, g in ini_inv.groups.items()}


@pytest.mark.parametrize("path", INVENTORIES, ids=_ids)
def test_inventory_list_json_agrees_with_ansible_inventory(path: Path) -> None:
    """What the operator sees (`fleet inventory list --json`) is what `ansible-inventory --list` says."""
    result = CliRunner().invoke(cli, ["inventory", "list", "-i", str(path), "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    ref = inventory_view(path)
    assert [h["name"] for h in data["hosts"]] == list(ref.order)
    assert {h["name"]: h["vars"] for h in data["hosts"]} == {h: ref.hostvars.get(h, {}) for h in ref.order}
    assert {name: set(g["hosts"]) for name, g in data["groups"].items()} == {n: set(m) for n, m in ref.groups.items()}


def test_roce_layout_resolves_gid_per_host() -> None:
    inv = load_inventory(FIXTURES / "inventories" / "roce_overrides" / "hosts.ini")
    assert {h.name: h.spec.gid_index for h in inv.hosts} == {
        "rtx-a01": 3, "rtx-a02": 5, "rtx-a03": 3, "rtx-b1": "auto", "rtx-b2": "auto", "cpu1": None, "cpu2": None,
    }  # fmt: skip
    assert inv.host("rtx-b2").port == 2200 and inv.host("cpu1").port == 2222
