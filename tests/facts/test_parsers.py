"""Fact parsers on outputs in the real tools' formats, and the gather script run by a real bash."""

from __future__ import annotations

import stat
import subprocess
from pathlib import Path

import pytest

from launcher.facts import host as facts

CAP = Path(__file__).parent / "captured"


def read(name: str) -> str:
    return (CAP / name).read_text()


def test_gpus_csv_noheader_nounits() -> None:
    gpus = facts.parse_gpus_csv(read("nvidia-smi-query-h100.csv"))
    assert [(g.index, g.sku, g.memory_mib, g.driver, g.bus_id) for g in gpus] == [
        (0, "H100", 81559, "550.54.15", "00000000:18:00.0"),
        (1, "H100", 81559, "550.54.15", "00000000:2A:00.0"),
    ]


def test_gpus_csv_with_header_and_units() -> None:
    (gpu,) = facts.parse_gpus_csv(read("nvidia-smi-query-a100-header-units.csv"))
    assert (gpu.sku, gpu.memory_mib, gpu.bus_id) == ("A100", 81920, "")


@pytest.mark.parametrize(
    ("name", "sku"),
    [
        ("NVIDIA RTX PRO 6000D", "RTX-6000D"),
        ("NVIDIA RTX 6000D", "RTX-6000D"),
        ("NVIDIA RTX PRO 6000 Blackwell Server Edition", None),
        ("NVIDIA H800", "H800"),
        ("NVIDIA B300 SXM6 AC", "B300"),
        ("NVIDIA GeForce RTX 4090", None),
    ],
)
def test_gpu_sku(name: str, sku: str | None) -> None:
    assert facts.gpu_sku(name) == sku


def test_cuda_version_from_plain_table() -> None:
    assert facts.parse_cuda_version(read("nvidia-smi-plain-h100.txt")) == "12.4"
    assert facts.parse_cuda_version("NVIDIA-SMI has failed because it couldn't communicate") is None


def test_ibv_devinfo_roce_two_hcas_one_down() -> None:
    ports = facts.parse_ibv_devinfo(read("ibv_devinfo-roce.txt"))
    assert [(p.hca, p.port, p.state, p.link_layer, p.active_mtu) for p in ports] == [
        ("mlx5_0", 1, "PORT_ACTIVE", "Ethernet", 4096),
        ("mlx5_1", 1, "PORT_DOWN", "Ethernet", 1024),
    ]


def test_ibv_devinfo_infiniband_with_device_ports_line() -> None:
    (port,) = facts.parse_ibv_devinfo(read("ibv_devinfo-ib.txt"))
    assert (port.hca, port.state, port.link_layer) == ("mlx5_0", "PORT_ACTIVE", "InfiniBand")


def test_show_gids_roce_v2_ipv4_index() -> None:
    gids = facts.parse_show_gids(read("show_gids.txt"))
    assert [(g.index, g.version, g.ipv4) for g in gids] == [
        (0, "v1", None), (1, "v2", None), (2, "v1", "10.0.11.1"), (3, "v2", "10.0.11.1"),
    ]
    hf = facts.HostFacts(gids=gids)
    assert hf.roce_v2_gid_index("mlx5_0") == 3
    assert hf.roce_v2_gid_index("mlx5_0", ipv4="10.9.9.9") is None
    assert hf.roce_v2_gid_index("mlx5_1") is None


def test_sysfs_gids_skip_empty_slots_and_map_ipv4() -> None:
    text = "\n".join(
        [
            "mlx5_0\t1\t0\tIB/RoCE v1\tens1f0np0\tfe80:0000:0000:0000:bace:f6ff:fea1:b2c4",
            "mlx5_0\t1\t1\tRoCE v2\tens1f0np0\tfe80:0000:0000:0000:bace:f6ff:fea1:b2c4",
            "mlx5_0\t1\t4\tIB/RoCE v1\tens1f0np0\t0000:0000:0000:0000:0000:ffff:0a00:0b05",
            "mlx5_0\t1\t5\tRoCE v2\tens1f0np0\t0000:0000:0000:0000:0000:ffff:0a00:0b05",
            "mlx5_0\t1\t6\t\t\t0000:0000:0000:0000:0000:0000:0000:0000",
        ]
    )
    gids = facts.parse_sysfs_gids(text)
    assert [(g.index, g.version, g.ipv4) for g in gids] == [
        (0, "v1", None), (1, "v2", None), (4, "v1", "10.0.11.5"), (5, "v2", "10.0.11.5"),
    ]
    # The per-host answer NCCL_IB_GID_INDEX must get: 5 here, not the customary 3.
    assert facts.HostFacts(gids=gids).roce_v2_gid_index("mlx5_0", "10.0.11.5") == 5


def test_npu_smi() -> None:
    names, hbm = facts.parse_npu_smi(read("npu-smi-910b3.txt"))
    assert names == ("910B3", "910B3")
    assert hbm == (65536, 65536)


def test_ip_addr_json() -> None:
    ifs = facts.parse_ip_addr_json(read("ip-j-addr.json"))
    assert [(i.name, i.mtu, i.up, i.ipv4) for i in ifs] == [
        ("lo", 65536, True, ("127.0.0.1",)),
        ("ens1f0np0", 9000, True, ("10.0.11.1",)),
    ]
    assert facts.parse_ip_addr_json("not json") == ()


def test_df() -> None:
    text = "Filesystem 1-blocks Used Available Capacity Mounted on\n/dev/nvme0n1p1 100 40 60 40% /models\n"
    assert facts.parse_df(text) == {"/models": 60}


def _tool(bindir: Path, name: str, body: str) -> None:
    path = bindir / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def test_gather_script_in_real_bash(tmp_path: Path) -> None:
    """The gather script runs in a real bash; tools are stand-ins printing captured outputs,
    and a tool that is absent yields exit 127 and an empty section, not a failure."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    _tool(bindir, "nvidia-smi",
          f'case "$1" in --query-gpu*) cat {CAP}/nvidia-smi-query-h100.csv;; '
          f'*) cat {CAP}/nvidia-smi-plain-h100.txt;; esac\n')
    _tool(bindir, "ibv_devinfo", f"cat {CAP}/ibv_devinfo-roce.txt\n")
    _tool(bindir, "ip", f"cat {CAP}/ip-j-addr.json\n")
    _tool(bindir, "hostname", "echo gpu-07\n")
    _tool(bindir, "date", "echo 1700000000.250000000\n")
    env = {"PATH": f"{bindir}:/usr/bin:/bin", "LANG": "C"}
    script = facts.gather_script(paths=(str(tmp_path),))
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env, check=True)
    hf = facts.parse_facts(out.stdout)
    assert hf.hostname == "gpu-07"
    assert [g.sku for g in hf.gpus] == ["H100", "H100"]
    assert hf.cuda_version == "12.4"
    assert [p.hca for p in hf.ib_ports] == ["mlx5_0", "mlx5_1"]
    assert hf.interface("ens1f0np0") is not None and hf.interface("ens1f0np0").mtu == 9000  # type: ignore[union-attr]
    assert hf.clock == 1700000000.25
    assert "npu" in hf.missing_tools
    assert hf.npus == ()
    assert list(hf.disk_free.values()) and all(v > 0 for v in hf.disk_free.values())
    # Host RAM from the real /proc/meminfo (issue 30 item 6: the Mooncake store's segments are host RAM).
    with open("/proc/meminfo") as f:
        kib = int(next(line for line in f if line.startswith("MemTotal:")).split()[1])
    assert hf.mem_total == kib * 1024
