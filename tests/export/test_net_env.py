"""The init container's script (launcher/export/k8s/net_env.py) on a GID table laid out as the
kernel's sysfs lays it out, and run as the pod runs it (``python3 -c TEXT OUT HCAS KEY...``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.export.k8s import net_env
from launcher.export.k8s.pods import net_env_script

V2 = "0000:0000:0000:0000:0000:ffff:0a0a:040b"


def gid_table(root: Path, hca: str, entries: list[tuple[str, str, str]]) -> None:
    """``entries``: (gid, type, ndev) at index 0, 1, ... (type "" = unreadable, as unpopulated ones are)."""
    port = root / hca / "ports" / "1"
    for sub in ("gids", "gid_attrs/types", "gid_attrs/ndevs"):
        (port / sub).mkdir(parents=True)
    for i, (gid, kind, ndev) in enumerate(entries):
        (port / "gids" / str(i)).write_text(gid + "\n")
        if kind:
            (port / "gid_attrs" / "types" / str(i)).write_text(kind + "\n")
            (port / "gid_attrs" / "ndevs" / str(i)).write_text(ndev + "\n")


LINK_LOCAL = ("fe80:0000:0000:0000:0000:0000:0000:0001", "IB/RoCE v1", "ens1f0np0")


def test_roce_v2_index_and_its_nic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(net_env, "IB", str(tmp_path))
    for hca in ("mlx5_0", "mlx5_1"):
        gid_table(tmp_path, hca, [LINK_LOCAL, LINK_LOCAL, ("0" * 39, "", ""), (V2, "RoCE v2", "ens1f0np0")])
    keys = ["MC_GID_INDEX", "NCCL_IB_GID_INDEX", "NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"]
    assert net_env.derive(["mlx5_0", "mlx5_1"], keys, "") == {
        "MC_GID_INDEX": "3", "NCCL_IB_GID_INDEX": "3", "NCCL_SOCKET_IFNAME": "=ens1f0np0", "GLOO_SOCKET_IFNAME": "ens1f0np0",
    }  # fmt: skip


def test_hcas_at_different_indices_fail(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(net_env, "IB", str(tmp_path))
    gid_table(tmp_path, "mlx5_0", [(V2, "RoCE v2", "a")])
    gid_table(tmp_path, "mlx5_1", [LINK_LOCAL, (V2, "RoCE v2", "b")])
    with pytest.raises(SystemExit) as err:
        net_env.derive(["mlx5_0", "mlx5_1"], ["NCCL_IB_GID_INDEX"], "")
    assert str(err.value) == "fleet-net-env: HCAs have different RoCE v2 GID indices (mlx5_0=0, mlx5_1=1)"


def test_no_roce_v2_gid_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(net_env, "IB", str(tmp_path))
    gid_table(tmp_path, "mlx5_0", [LINK_LOCAL])
    with pytest.raises(SystemExit) as err:
        net_env.derive(["mlx5_0"], ["MC_GID_INDEX"], "")
    assert str(err.value) == "fleet-net-env: no RoCE v2 IPv4 GID on mlx5_0"


def test_the_script_as_the_pod_runs_it(tmp_path: Path) -> None:
    """Off RoCE (no HCAs named) the NIC is the one holding the pod IP: loopback here."""
    out = tmp_path / "net.env"
    env = {**os.environ, "FLEET_POD_IP": "127.0.0.1"}
    r = subprocess.run([sys.executable, "-c", net_env_script(), str(out), "", "GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"],
                       env=env, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert out.read_text() == "export GLOO_SOCKET_IFNAME='lo'\nexport NCCL_SOCKET_IFNAME='=lo'\n"
    sourced = subprocess.run(["sh", "-c", f'set -a && . {out} && set +a && exec "$@"', "x", "sh", "-c",
                              'echo "$GLOO_SOCKET_IFNAME $NCCL_SOCKET_IFNAME"'], capture_output=True, text=True, timeout=60)  # fmt: skip
    assert sourced.stdout == "lo =lo\n"


def test_an_unknown_pod_ip_fails(tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, "-c", net_env_script(), str(tmp_path / "o"), "", "GLOO_SOCKET_IFNAME"],
                       env={**os.environ, "FLEET_POD_IP": "203.0.113.9"}, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert (r.returncode, r.stderr) == (1, "fleet-net-env: no NIC holds the pod IP '203.0.113.9' and no RoCE GID names one\n")
