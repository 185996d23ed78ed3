"""The shared sandbox fleet: hosts, their own docker, fake hardware, inventory, faults, CLI."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys

import paramiko
import pytest

from launcher.sandbox import faults, fleet
from launcher.sandbox.client import Sandbox

pytestmark = pytest.mark.sandbox
SANDBOX_HOSTS = 15  # h9.. are the RTX-6000D hosts (tests/conftest.py sizes the session sandbox)


def test_each_host_is_itself(sandbox_fleet: Sandbox) -> None:
    sb = sandbox_fleet
    for name in ("h1", "h3"):
        res = sb.ssh(name, "hostname; echo $FLEET_SANDBOX_HOST; docker info --format '{{.Name}}'; "
                           "echo mine > /srv/who; cat /srv/who")  # fmt: skip
        assert res.out.split() == [name, name, name, "mine"], res.err
    h3 = sb.host("h3")
    res = sb.ssh("h3", "docker run --rm --network host fleet-standin:latest sh -c 'hostname; ip -o -4 addr'")
    assert res.out.splitlines()[0] == "h3"
    assert any(ln.split()[1:4] == ["ens1f0", "inet", f"{h3.data_ip}/20"] for ln in res.out.splitlines()[1:])
    assert "veth0" not in res.out


def test_strict_host_keys(sandbox_fleet: Sandbox) -> None:
    sb = sandbox_fleet
    h1, h2 = sb.host("h1"), sb.host("h2")
    client = paramiko.SSHClient()
    client.load_host_keys(sb.known_hosts)
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    # h2's key presented under h1's address must be refused: write a known_hosts that swaps them.
    lines = open(sb.known_hosts).read().splitlines()
    swapped = [ln.replace(h2.address + " ", h1.address + " ") for ln in lines if ln.startswith(h2.address + " ")]
    bad = paramiko.SSHClient()
    bad.get_host_keys().add(h1.address, "ssh-ed25519",
                            paramiko.Ed25519Key(data=base64.b64decode(swapped[0].split()[2])))  # fmt: skip
    bad.set_missing_host_key_policy(paramiko.RejectPolicy())
    # Both reach the key exchange (the host key is refused only there): the loaded machine's bound
    # for the banner and key exchange, as the session's other tiers need (a 3 s banner read failed
    # 8 of 14 hosts at load ~99; paramiko's own default is 15 s).
    with pytest.raises(paramiko.BadHostKeyException):
        bad.connect(h1.address, username="root", key_filename=sb.client_key, look_for_keys=False,
                    allow_agent=False, timeout=10, banner_timeout=60, auth_timeout=60)  # fmt: skip
    client.connect(h1.address, username="root", key_filename=sb.client_key, look_for_keys=False,
                   allow_agent=False, timeout=10, banner_timeout=60, auth_timeout=60)  # fmt: skip
    client.close()


def test_fake_hardware(sandbox_fleet: Sandbox) -> None:
    sb = sandbox_fleet
    q = sb.ssh("h1", "nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader,nounits")
    assert q.out.splitlines()[0] == "0, NVIDIA H100 80GB HBM3, 81559, 550.54.15"
    assert len(q.out.splitlines()) == 8
    assert sb.ssh("h1", "nvidia-smi -L").out.startswith("GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-")
    assert "NV18" in sb.ssh("h1", "nvidia-smi topo -m").out
    assert "PORT_ACTIVE (4)" in sb.ssh("h1", "ibv_devinfo").out
    h2 = sb.host("h2")
    gids = sb.ssh("h2", "show_gids").out
    assert f"mlx5_0\t1\t5\t0000:0000:0000:0000:0000:ffff:" in gids and f"{h2.data_ip}  \tv2\tveth0" in gids
    p = "/sys/class/infiniband/mlx5_0/ports/1"
    assert sb.ssh("h2", f"cat {p}/gid_attrs/types/5 {p}/gid_attrs/ndevs/5").out.split("\n")[:2] == ["RoCE v2", "veth0"]
    assert sb.ssh("h1", "stat -c %F /dev/infiniband/uverbs0").out.strip() == "character special file"
    h4 = sb.ssh("h4", "ibv_devinfo; echo rc=$?; ls /sys/class/infiniband /dev/infiniband 2>&1 | wc -l")
    assert "No IB devices found" in h4.err and "rc=255" in h4.out
    assert sb.ssh("h4", "test -e /sys/class/infiniband || test -e /dev/infiniband").rc == 1
    npu = sb.ssh("h5", "npu-smi info; nvidia-smi")
    assert "910B3" in npu.out and npu.rc == 127
    # the real class dirs are still there under the fake infiniband tree
    assert "veth0" in sb.ssh("h1", "ls /sys/class/net").out


def test_rtx6000d_hosts(sandbox_fleet: Sandbox) -> None:
    sb = sandbox_fleet
    q = sb.ssh("h9", "nvidia-smi --query-gpu=index,name,memory.total,compute_cap --format=csv,noheader,nounits")
    assert q.out.splitlines() == [f"{i}, NVIDIA RTX PRO 6000D, 86016, 12.0" for i in range(8)]
    table = sb.ssh("h15", "nvidia-smi").out
    assert "NVIDIA RTX PRO 6000D" in table and "86016MiB" in table and "H100" not in table
    assert "NV" not in sb.ssh("h9", "nvidia-smi topo -m").out.split("Legend")[0], "PCIe only"
    gids = sb.ssh("h9", "show_gids").out
    assert f"mlx5_0\t1\t3\t0000:0000:0000:0000:0000:ffff:" in gids and f"{sb.host('h9').data_ip}  \tv2\tveth0" in gids


def test_each_host_has_its_own_fleet_dirs(sandbox_fleet: Sandbox) -> None:
    sb = sandbox_fleet
    for d in ("/etc/fleet", "/var/lib/fleet"):
        assert sb.ssh("h1", f"echo h1 > {d}/.who && cat {d}/.who").out == "h1\n"
        assert sb.ssh("h2", f"cat {d}/.who").rc == 1, f"{d} is per host"
        assert sb.ssh("h1", f"rm {d}/.who").rc == 0


def test_the_image_carries_the_real_router(sandbox_fleet: Sandbox) -> None:
    res = sandbox_fleet.ssh("h15", "docker run --rm fleet-standin:latest python3 -c "
                                   "'import sglang_router.launch_router as m, sglang_router.version as v; "
                                   "print(v.__version__, m.__file__)'")  # fmt: skip
    assert res.rc == 0, res.err
    assert res.out.split() == ["0.3.2", "/usr/local/lib/python3.11/dist-packages/sglang_router/launch_router.py"]


def test_facts_parsers_read_the_fake_hardware(sandbox_fleet: Sandbox) -> None:
    facts = pytest.importorskip("launcher.facts.host", reason="launcher/facts/host.py not present")
    sb = sandbox_fleet
    for name, index in (("h1", 3), ("h2", 5)):
        out = sb.ssh(name, facts.gather_script()).out
        parsed = facts.parse_facts(out)
        assert parsed.roce_v2_gid_index("mlx5_0", sb.host(name).data_ip) == index


def test_inventory_is_loadable(sandbox_fleet: Sandbox) -> None:
    inv_mod = pytest.importorskip("launcher.config.inventory", reason="inventory loader not present")
    inv = inv_mod.load_inventory(sandbox_fleet.inventory)
    assert [h.name for h in inv.hosts][:5] == ["h1", "h2", "h3", "h4", "h5"]
    h2, h3, h5 = inv.host("h2"), inv.host("h3"), inv.host("h5")
    assert (h2.spec.gid_index, h3.spec.nccl_ifname, h5.spec.gpu_model) == (5, "ens1f0", "Ascend-910B3")
    assert h3.spec.data_ip == sandbox_fleet.host("h3").data_ip and h3.address == h3.spec.data_ip
    n = len(sandbox_fleet.hosts)
    assert inv.groups["rtx6000d"].hosts == tuple(f"h{i}" for i in range(9, n + 1))
    h100 = inv.groups["h100"].hosts
    assert h100 == ("h1", "h2", "h3", "h4", "h6", "h7", "h8") and inv.host("h9").spec.gpu_model == "RTX-6000D"


def test_ansible_reaches_the_hosts(sandbox_fleet: Sandbox) -> None:
    env = dict(os.environ, ANSIBLE_HOST_KEY_CHECKING="True", ANSIBLE_STDOUT_CALLBACK="minimal")
    proc = subprocess.run(
        ("ansible", "-i", sandbox_fleet.inventory, "h1:h3", "-m", "command", "-a", "hostname"),
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "h1 | CHANGED | rc=0" in proc.stdout and "h3 | CHANGED | rc=0" in proc.stdout


def _connect_fails(sb: Sandbox, host: str) -> type[BaseException]:
    with pytest.raises((TimeoutError, paramiko.SSHException, OSError)) as err:
        sb.connect(host, timeout=2).close()
    return err.type


# Each fault is cleared, then h6 must answer again: a new connection with the loaded machine's
# bound for the banner and key exchange (Sandbox.connect's default is 10 s), not a speed check.
HEALED_S = 60.0


def test_faults(sandbox_fleet: Sandbox) -> None:
    sb = sandbox_fleet
    h6 = sb.host("h6")
    faults.sshd_signal(h6, "stop")
    try:
        _connect_fails(sb, "h6")
    finally:
        faults.sshd_signal(h6, "cont")
    sb.connect("h6", timeout=HEALED_S).close()
    faults.link(h6, up=False)
    try:
        assert _connect_fails(sb, "h6") is TimeoutError
    finally:
        faults.link(h6, up=True)
    sb.connect("h6", timeout=HEALED_S).close()
    faults.drop_ssh(h6)
    try:
        assert _connect_fails(sb, "h6") is TimeoutError
    finally:
        faults.clear(h6)
    sb.connect("h6", timeout=HEALED_S).close()


def test_cli_status(sandbox_fleet: Sandbox) -> None:
    proc = subprocess.run(
        (sys.executable, "-m", "launcher.cli", "sandbox", "status", "--name", sandbox_fleet.state.name, "--json"),
        capture_output=True, text=True,
    )  # fmt: skip
    if proc.returncode != 0 and "No module named launcher.cli.__main__" in proc.stderr:
        proc = subprocess.run(("fleet", "sandbox", "status", "--name", sandbox_fleet.state.name, "--json"),
                              capture_output=True, text=True)  # fmt: skip
    info = json.loads(proc.stdout)
    assert info["up"] and all(h["sshd"] and h["dockerd"] for h in info["hosts"])


def test_loopback_mode() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root")
    st = fleet.up("loop", 2, mode="loopback", docker=False)
    try:
        sb = Sandbox(st)
        assert [sb.ssh(h, "hostname").out.strip() for h in sb.hosts] == ["h1", "h2"]
        assert st.host("h2").port == 22002
        with pytest.raises(Exception, match="network faults need a netns sandbox"):
            faults.link(st.host("h1"), up=False)
        sb.close()
    finally:
        fleet.down("loop")
    assert all(h.sshd is not None and not h.sshd.alive() for h in st.hosts)
