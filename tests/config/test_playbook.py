from __future__ import annotations

from pathlib import Path

import pytest

from launcher.config.inventory import load_inventory
from launcher.config.playbook import load_playbook
from launcher.config.recipes import load_catalog
from launcher.errors import InputError
from launcher.model import Inventory
from tests.config.conftest import FIXTURES, REPO

EXAMPLES = sorted((REPO / "playbooks").glob("*.yaml"))


@pytest.fixture(scope="module")
def example_inventory() -> Inventory:
    return load_inventory(REPO / "inventories" / "example.yaml")


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
@pytest.mark.parametrize("inventory", ["example.yaml", "example.ini"])
def test_examples_load(path: Path, inventory: str) -> None:
    pb = load_playbook(path, load_catalog(REPO / "recipes"), load_inventory(REPO / "inventories" / inventory))
    assert pb.placement and pb.name


def test_one_example_per_topology() -> None:
    catalog = load_catalog(REPO / "recipes")
    inv = load_inventory(REPO / "inventories" / "example.yaml")
    topologies = sorted(catalog.get(load_playbook(p, catalog, inv).recipe).topology for p in EXAMPLES)
    assert topologies == ["multinode", "pd", "single"]


BASE = """name: t
recipe: glm/sglang-pd-6000d
placement:
  prefill: {hosts: rtx6000d_rack1, replicas: 2}
  decode:
    hosts: rtx-05:rtx-06
  router: {hosts: ctl-01}
secrets:
  - {name: HF_TOKEN, from_env: HF_TOKEN}
"""


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("recipe: glm/sglang-pd-6000d", "recipe: glm/sglang-pd-600d",
         "2:9: recipe: unknown recipe 'glm/sglang-pd-600d' (did you mean 'glm/sglang-pd-6000d'?)"),
        ("hosts: rtx-05:rtx-06", "hosts: rtx*:&h100",
         "6:12: placement/decode/hosts: pattern 'rtx*:&h100' matches no host in {inv}"),
        ("hosts: rtx-05:rtx-06", "hosts: rtx-5",
         "6:12: placement/decode/hosts: pattern 'rtx-5': 'rtx-5' matches no host or group in {inv} "
         "(did you mean 'rtx-05'?)"),
        ("  router: {hosts: ctl-01}\n", "",
         "4:3: placement: a pd recipe needs a placement for 'router'"),
        ("  router: {hosts: ctl-01}", "  router: {hosts: ctl-01}\n  single: {hosts: ctl-01}",
         "8:3: placement/single: role 'single' is not used by a pd recipe (roles: prefill, decode, router, "
         "mooncake-master, gateway)"),
        ("router: {hosts: ctl-01}", "router: {hosts: ctl-01, replicas: 2}",
         "7:37: placement/router/replicas: replicas is for engine roles (single, rank, prefill, decode); "
         "'router' runs once"),
        ("replicas: 2}", "replicas: 0}",
         "4:46: placement/prefill/replicas: should be at least 1"),
        ("  router:", "  ruoter:",
         "7:3: placement: should be one of 'single', 'rank', 'prefill', 'decode', 'router', 'mooncake-master', "
         "'gateway', got 'ruoter'"),
        ("{name: HF_TOKEN, from_env: HF_TOKEN}", "{name: HF_TOKEN, from_env: HF_TOKEN, from_file: /x}",
         "9:5: secrets/0: secret 'HF_TOKEN': set exactly one of from_env, from_file"),
        ("{name: HF_TOKEN, from_env: HF_TOKEN}", "{name: HF_TOKEN}",
         "9:5: secrets/0: secret 'HF_TOKEN': set exactly one of from_env, from_file"),
        ("{name: HF_TOKEN, from_env: HF_TOKEN}", "{name: HF-TOKEN, from_env: X}",
         "9:5: secrets/0: name should be an environment variable name, got 'HF-TOKEN'"),
        ("name: t", "name: T_1",
         "1:7: name: should be lower-case letters, digits and '-' (it names units and containers), got 'T_1'"),
        ("name: t", "name: t\nplacment: {}",
         "2:1: unknown key 'placment' (did you mean 'placement'?)"),
        ("name: t", "name: t\npath: x.yaml",
         "2:1: key 'path' is set by fleet, not written in the file"),
        ("name: t", "name: t\nrollout: {strategy: rolling, max_unavailable: 0}",
         "2:47: rollout/max_unavailable: should be at least 1"),
        ("name: t", "name: t\nports: {http: 70000}",
         "2:15: ports/http: should be a port (1-65535), got 70000"),
    ],
)
def test_errors(tmp_path: Path, example_inventory: Inventory, old: str, new: str, message: str) -> None:
    assert old in BASE
    p = tmp_path / "pb.yaml"
    p.write_text(BASE.replace(old, new, 1))
    catalog = load_catalog(FIXTURES / "recipes")
    with pytest.raises(InputError) as err:
        load_playbook(p, catalog, example_inventory)
    assert str(err.value) == f"{p}:" + message.format(inv=example_inventory.path)


def test_base_is_valid(tmp_path: Path, example_inventory: Inventory) -> None:
    p = tmp_path / "pb.yaml"
    p.write_text(BASE)
    pb = load_playbook(p, load_catalog(FIXTURES / "recipes"), example_inventory)
    assert pb.placement["prefill"].replicas == 2
    assert str(pb.placement["decode"].source) == f"{p}:6:5"
