"""Inventory errors (exact messages, at the line of the bad value) and fleet's typed host view."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.config.inventory import expand_range, load_inventory, split_port
from launcher.errors import InputError
from tests.config.conftest import FIXTURES, REPO


def _inv(tmp_path: Path, text: str, name: str = "hosts.yaml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def _error(path: Path) -> str:
    with pytest.raises(InputError) as err:
        load_inventory(path)
    return str(err.value).replace(str(path.parent) + "/", "")


def test_example_hosts_and_specs() -> None:
    inv = load_inventory(REPO / "inventories" / "example.yaml")
    names = [h.name for h in inv.hosts]
    assert names[:4] == ["h100-01", "h100-02", "h100-03", "h100-04"]
    assert len(inv.groups["rtx6000d"].hosts) == 8
    rtx3 = inv.host("rtx-03")
    assert (rtx3.spec.gpu_model, rtx3.spec.gid_index, rtx3.spec.fabric) == ("RTX-6000D", 5, "roce")
    assert rtx3.spec.hcas == ("mlx5_0", "mlx5_1")
    assert rtx3.ssh_common_args == "-o ProxyJump=fleet@10.10.4.1"
    assert inv.host("rtx-06").spec.nccl_ifname == "ens2f0np0"
    assert inv.host("rtx-08").spec.gid_index == "auto"
    assert rtx3.groups == ("rtx6000d", "rtx6000d_rack1")
    h = inv.host("h100-02")
    assert (h.address, h.port, h.user, h.key_file) == ("10.10.0.12", 22, "fleet", "~/.ssh/fleet_ed25519")
    assert h.spec.data_ip == "10.20.0.12" and h.spec.models_dir == "/data/models"
    assert inv.host("a100-01").spec.runtime == "systemd"
    assert inv.host("ascend-01").spec.gpu_model == "Ascend-910B3"
    lines = (REPO / "inventories" / "example.yaml").read_text().splitlines()
    line = next(i for i, text in enumerate(lines, start=1) if text.strip() == "rtx-03:")
    assert str(rtx3.source) == f"{REPO / 'inventories' / 'example.yaml'}:{line}:13"


def test_nested_precedence_and_typed_vars() -> None:
    inv = load_inventory(FIXTURES / "inventories" / "nested" / "hosts.yaml")
    # host_vars/ beats inline host vars beats group_vars/<g> beats group_vars/all beats inline groups
    assert inv.host("rtx-01").vars["level"] == "host_vars-rtx-01"
    assert inv.host("rtx-02").vars["level"] == "rtx-02-inline"
    assert inv.host("h100-01").vars["level"] == "group_vars-h100"
    assert inv.host("spare-01").vars["level"] == "group_vars-all"
    # same depth: ansible_group_priority 5 (h100) beats rtx's default 1
    assert inv.host("rtx-02").spec.gpu_model == "H100"
    # a group_vars directory: files merged in name order
    assert inv.host("rtx-01").spec.mtu == 9000
    assert inv.groups["rtx"].vars["mtu"] == 9000


def test_ini_loose_values_read_as_the_field_type(tmp_path: Path) -> None:
    p = _inv(
        tmp_path,
        "[g]\nh1 gid_index=3\nh2 gid_index=4 gpu_count='8'\n[g:vars]\nfabric=roce\nhcas=mlx5_0, mlx5_1\nmtu='9000'\n",
        "hosts.ini",
    )
    inv = load_inventory(p)
    h2 = inv.host("h2")
    assert h2.vars["mtu"] == "9000" and h2.spec.mtu == 9000  # Ansible keeps the string; fleet reads 9000
    assert h2.spec.hcas == ("mlx5_0", "mlx5_1")
    assert h2.spec.gpu_count == 8  # shlex drops the quotes, then it is a Python literal


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "all:\n  children:\n    gpu:\n      hosts:\n        g1:\n          gpu_count: eight\n",
            "hosts.yaml:6:22: all/children/gpu/hosts/g1/gpu_count: should be an integer, got 'eight'",
        ),
        (
            "all:\n  vars:\n    fabric: rocee\n  hosts:\n    g1:\n",
            "hosts.yaml:3:13: all/vars/fabric: should be one of 'roce', 'ib', 'none', got 'rocee'",
        ),
        (
            "all:\n  hosts:\n    r1: {fabric: roce, gid_index: -1}\n",
            "hosts.yaml:3:35: all/hosts/r1/gid_index: should be 0-255 (an index into the HCA port's GID table), got -1",
        ),
        (
            "all:\n  hosts:\n    r1: {ansible_port: 99999}\n",
            "hosts.yaml:3:24: all/hosts/r1/ansible_port: should be a TCP port (1-65535), got 99999",
        ),
        (
            "all:\n  vars:\n    ansible_port: 0\n  hosts:\n    r1:\n",
            "hosts.yaml:3:19: all/vars/ansible_port: should be a TCP port (1-65535), got 0",
        ),
        (
            "all:\n  hosts:\n    r1: {data_ip: not-an-ip}\n",
            "hosts.yaml:3:19: all/hosts/r1/data_ip: should be an IP address, got 'not-an-ip'",
        ),
        (
            "all:\n  children:\n    rtx:\n      hostz:\n        r1:\n",
            "hosts.yaml:4:7: all/children/rtx: unknown key 'hostz' in a group (did you mean 'hosts'?)",
        ),
        (
            "all:\n  hosts:\n    a:\n    a:\n",
            "hosts.yaml:4:5: duplicate key 'a' (first at line 3)",
        ),
        (
            "all:\n  hosts:\n    gpu[01:1]:\n",
            "hosts.yaml:3:5: all/hosts: host range 'gpu[01:1]': begin and end should have the same number of digits",
        ),
        (
            "all:\n  hosts:\n    a: [1]\n",
            "hosts.yaml:3:8: all/hosts/a: host vars should be a mapping, got a list",
        ),
        (
            "all:\n  children:\n    a:\n      children:\n        b:\n          children:\n            a:\n",
            "hosts.yaml:5:9: group 'b' as a child of 'a' makes a loop",
        ),
        ("[]\n", "hosts.yaml:1:1: an inventory's top level should be a mapping of groups, got a list"),
    ],
)
def test_yaml_errors(tmp_path: Path, text: str, message: str) -> None:
    assert _error(_inv(tmp_path, text)) == message


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[g]\nh1 gpu_count=eight\n", "hosts.ini:2:14: g/h1/gpu_count: should be an integer, got 'eight'"),
        ("[g]\nh1\n[g:vars]\ngpu_count = eight\n", "hosts.ini:4:13: g:vars/gpu_count: should be an integer, got 'eight'"),
        ("[g]\nh1 fabric=roce  gid_index=three\n", "hosts.ini:2:27: g/h1/gid_index: should be an integer or 'auto', got 'three'"),
        ("[g]\nh1 fabric=roce gid_index=-2\n", "hosts.ini:2:26: g/h1/gid_index: should be 0-255 (an index into the HCA port's GID table), got -2"),
        ("[g]\nh1:99999\n", "hosts.ini:2:1: g/h1: should be a TCP port (1-65535), got 99999"),
        ("[g]\nh1 data_ip=10.0.0.300\n", "hosts.ini:2:12: g/h1/data_ip: should be an IP address, got '10.0.0.300'"),
        ("[g]\nh1 gpu_count\n", "hosts.ini:2:1: g/h1: expected key=value after the host name, got 'gpu_count'"),
        ("[g:vars]\nx=1\n", "hosts.ini:1:1: section [g:vars] is for a group that is never defined"),
        ("[p:children]\nq\n", "hosts.ini:2:1: section [p:children] names group 'q', which is never defined"),
        ("[g:kids]\n", "hosts.ini:1:1: section [g:kids] has unknown type 'kids' (use hosts, children or vars)"),
        ("[g]\nh1\n[g:vars]\nnovalue\n", "hosts.ini:4:1: g:vars: expected key=value, got 'novalue'"),
        ("[ g ]\n", "hosts.ini:1:1: invalid section '[ g ]': no spaces, and only [group], [group:vars] or [group:children]"),
    ],
)
def test_ini_errors(tmp_path: Path, text: str, message: str) -> None:
    assert _error(_inv(tmp_path, text, "hosts.ini")) == message


def test_group_vars_file_errors_point_into_the_file(tmp_path: Path) -> None:
    p = _inv(tmp_path, "all:\n  children:\n    gpu:\n      hosts:\n        g1:\n")
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "group_vars" / "gpu.yml").write_text("gpu_model: H100\ngpu_count: '8'\n")
    assert _error(p) == "group_vars/gpu.yml:2:12: gpu_count: should be an integer, got '8'"


def test_auto_gid_on_a_group_is_fine(tmp_path: Path) -> None:
    p = _inv(tmp_path, "all:\n  vars: {fabric: roce, gid_index: auto}\n  hosts:\n    a:\n    b:\n")
    assert [h.spec.gid_index for h in load_inventory(p).hosts] == ["auto", "auto"]


def test_roce_hosts_without_gid_index_default_to_auto(tmp_path: Path) -> None:
    p = _inv(tmp_path, "all:\n  hosts:\n    r1: {fabric: roce, gid_index: 3}\n    r2: {fabric: roce}\n    n1:\n")
    assert [h.spec.gid_index for h in load_inventory(p).hosts] == [3, "auto", None]


def test_a_host_overrides_its_groups_numeric_gid_index(tmp_path: Path) -> None:
    # Ansible precedence: host_vars/ over group_vars/; preflight checks each host's own value.
    p = _inv(tmp_path, "roce:\n  hosts:\n    r1:\n    r2:\n    r3:\n")
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "group_vars" / "roce.yml").write_text("fabric: roce\ngid_index: 3\n")
    (tmp_path / "host_vars").mkdir()
    (tmp_path / "host_vars" / "r2.yml").write_text("gid_index: 5\n")
    assert [h.spec.gid_index for h in load_inventory(p).hosts] == [3, 5, 3]


def test_numeric_gid_on_a_group_of_one_roce_host_is_fine(tmp_path: Path) -> None:
    p = _inv(tmp_path, "all:\n  children:\n    r:\n      vars: {fabric: roce, gid_index: 5}\n      hosts: {r1: }\n")
    assert load_inventory(p).host("r1").spec.gid_index == 5


def test_ranges_and_ports() -> None:
    assert expand_range("gpu[01:03]") == ["gpu01", "gpu02", "gpu03"]
    assert expand_range("n[a:c]") == ["na", "nb", "nc"]
    assert expand_range("x[0:10:5]-[1:2]") == ["x0-1", "x0-2", "x5-1", "x5-2", "x10-1", "x10-2"]
    assert split_port("h1:2222") == ("h1", 2222)
    assert split_port("gpu[1:3]") == ("gpu[1:3]", None)
    assert split_port("gpu[1:3]:22") == ("gpu[1:3]", 22)
    assert split_port("[fe80::1]:22") == ("fe80::1", 22)
    assert split_port("fe80::1") == ("fe80::1", None)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(InputError) as err:
        load_inventory(tmp_path / "nope.yaml")
    assert str(err.value) == f"{tmp_path / 'nope.yaml'}: no such file"
