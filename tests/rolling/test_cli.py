"""``fleet restart`` / ``fleet rollback`` refusals through the real CLI: exit 2 and one exact
line, before any host is contacted (the inventory's hosts do not exist)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.rolling.conftest import PLAYBOOKS, REPO

HOST = "{gpu_model: H100, gpu_count: 8, fabric: roce, hcas: [mlx5_0], gid_index: 3, nccl_ifname: veth0, data_ip: 192.0.2.%d}"


@pytest.fixture()
def inventory(tmp_path: Path) -> str:
    hosts = "\n".join(f"        h{i}: {HOST % i}" for i in range(1, 5))
    path = tmp_path / "inventory.yaml"
    path.write_text(f"all:\n  children:\n    sandbox:\n      hosts:\n{hosts}\n")
    return str(path)


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["fleet", *args], capture_output=True, text=True, cwd=REPO, timeout=120)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--max-unavailable", "0"), "--max-unavailable '0': must be at least 1 (or 1%), or nothing would ever restart"),
        (("--max-unavailable", "x%"), "--max-unavailable 'x%': expected a count like 2 or a percentage like 25%"),
        (("--role", "decode"), "--role decode: deployment sb-roll has no decode groups (roles: single)"),
        (("--limit", "h9"), "pattern 'h9': 'h9' matches no host or group in {inv}"),
        (("--surge", "h4"), "--surge: deployment sb-roll is not PD; its replicas roll in place (drop --surge)"),
    ],
)
def test_restart_refusals(inventory: str, args: tuple[str, ...], message: str) -> None:
    proc = run("restart", str(PLAYBOOKS / "rolling-single.yaml"), "-i", inventory, "--rolling", *args)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines()[-1].endswith(message.format(inv=inventory)), proc.stderr


def test_max_unavailable_needs_rolling(tmp_path: Path, inventory: str) -> None:
    plain = tmp_path / "plain.yaml"
    plain.write_text((PLAYBOOKS / "rolling-single.yaml").read_text().replace("strategy: rolling", "strategy: all-at-once"))
    proc = run("restart", str(plain), "-i", inventory, "--max-unavailable", "2")
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        "fleet: error: --max-unavailable needs --rolling (or rollout: {strategy: rolling} in the playbook)"
    )


def test_single_replica_needs_force(tmp_path: Path, inventory: str) -> None:
    one = tmp_path / "one.yaml"
    one.write_text((PLAYBOOKS / "rolling-single.yaml").read_text().replace("hosts: h1:h2:h3:h4", "hosts: h1"))
    proc = run("restart", str(one), "-i", inventory, "--rolling")
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        "fleet: error: deployment sb-roll has one replica (sb-roll/single0): restarting it takes the service "
        "down; pass --force to restart it anyway"
    )
