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
         "9:5: secrets/0: env name 'HF-TOKEN': must match [A-Za-z_][A-Za-z0-9_]*"),
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
        # Issue 16 item 5: run.sh `set -a`-sources the env, then runs the host's docker client.
        ("name: t", "name: t\noverrides:\n  env: {A: '1', DOCKER_HOST: 'tcp://10.0.0.9:2375'}",
         "3:17: overrides/env/DOCKER_HOST: env name 'DOCKER_HOST': would reconfigure the host, not the engine: "
         "the docker client's own settings (DOCKER_HOST picks the daemon, DOCKER_CONFIG its credentials, "
         "DOCKER_CERT_PATH/TLS_VERIFY its TLS)"),
        ("name: t", "name: t\noverrides:\n  env:\n    LD_PRELOAD: /tmp/x.so",
         "4:5: overrides/env/LD_PRELOAD: env name 'LD_PRELOAD': would reconfigure the host, not the engine: the "
         "dynamic loader (LD_PRELOAD, LD_AUDIT, LD_LIBRARY_PATH) would load code into the host's shell and "
         "docker client"),
        ("name: t", "name: t\noverrides:\n  env: {BASH_ENV: /tmp/x}",
         "3:9: overrides/env/BASH_ENV: env name 'BASH_ENV': is reserved by the shell that loads the env file"),
        ("name: t", "name: t\noverrides:\n  env: {HOME: /tmp}",
         "3:9: overrides/env/HOME: env name 'HOME': would reconfigure the host, not the engine: the docker "
         "client reads its config and registry credentials from $HOME/.docker"),
        ("name: t", "name: t\noverrides:\n  env: {'A-B': x}",
         "3:9: overrides/env/A-B: env name 'A-B': must match [A-Za-z_][A-Za-z0-9_]*"),
        ("name: t", "name: t\noverrides:\n  env: {A: \"x\\0y\"}",
         "3:12: overrides/env/A: contains a NUL character, which no command line or env file can carry"),
        ("name: t", "name: t\noverrides:\n  engine_args: [--x, \"a\\0\"]",
         "3:22: overrides/engine_args/1: contains a NUL character, which no command line or env file can carry"),
        ("{name: HF_TOKEN, from_env: HF_TOKEN}", "{name: DOCKER_CONFIG, from_env: X}",
         "9:5: secrets/0: env name 'DOCKER_CONFIG': would reconfigure the host, not the engine: the docker "
         "client's own settings (DOCKER_HOST picks the daemon, DOCKER_CONFIG its credentials, "
         "DOCKER_CERT_PATH/TLS_VERIFY its TLS)"),
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
