"""A missing SSH key file is one error before any host is contacted -- not a failure per host
plus the reachability warnings that cascade from each (issue #26 item 10)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from launcher.cli import cli
from launcher.config.inventory import load_inventory
from launcher.errors import InputError
from launcher.execute.fanout import run_all
from launcher.execute.hostkeys import KnownHosts
from launcher.execute.ssh import SshConnector

REPO = Path(__file__).resolve().parents[2]

INVENTORY = """\
all:
  vars:
    ansible_ssh_private_key_file: /nonexistent/fleet_key
  children:
    gpus:
      hosts:
        h1: {ansible_host: 127.0.0.1, ansible_port: 1}
        h2: {ansible_host: 127.0.0.1, ansible_port: 1}
        h3: {ansible_host: 127.0.0.1, ansible_port: 1}
"""


def test_one_error_for_every_host_before_any_connect(tmp_path: Path) -> None:
    inv = tmp_path / "inv.yaml"
    inv.write_text(INVENTORY)
    hosts = load_inventory(str(inv)).hosts
    touched: list[str] = []
    with pytest.raises(InputError) as caught:
        run_all(hosts, lambda h, t: touched.append(h.name), connector=SshConnector(KnownHosts.for_operator((), trust_new=False)))
    assert str(caught.value) == (f"{inv}:7:9: h1/ansible_ssh_private_key_file: no such file: /nonexistent/fleet_key "
                                 "(also for h2, h3)")  # fmt: skip
    assert touched == []


def test_fleet_facts_says_it_once(tmp_path: Path) -> None:
    inv = tmp_path / "inv.yaml"
    inv.write_text(INVENTORY)
    result = CliRunner().invoke(cli, ["facts", "-i", str(inv), "--no-cache"])
    assert (result.exit_code, result.stdout, result.stderr) == (2, "", (
        f"fleet: error: {inv}:7:9: h1/ansible_ssh_private_key_file: no such file: /nonexistent/fleet_key "
        "(also for h2, h3)\n"))  # fmt: skip
