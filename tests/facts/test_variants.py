"""Fact parsers on real-world variants of each tool's output (see captured/README.md), and on
the gather script's own output captured from the sandbox hosts."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.facts import host as facts

CAP = Path(__file__).parent / "captured"


def read(name: str) -> str:
    return (CAP / name).read_text()


def section(name: str, rc: int, text: str) -> str:
    return f"{facts.MARKER}{name} rc={rc}\n{text}\n"


# --- nvidia-smi ------------------------------------------------------------------------------


def test_query_with_header_units_and_bus_id() -> None:
    gpus = facts.parse_gpus_csv(read("nvidia-smi-query-h100-header-units.csv"))
    assert [(g.index, g.sku, g.memory_mib, g.driver, g.bus_id) for g in gpus] == [
        (0, "H100", 81559, "550.127.05", "00000000:18:00.0"),
        (1, "H100", 81559, "550.127.05", "00000000:2A:00.0"),
    ]


def test_query_unknown_memory_reads_as_zero() -> None:
    (gpu,) = facts.parse_gpus_csv(read("nvidia-smi-query-b300-na-memory.csv"))
    assert (gpu.sku, gpu.memory_mib, gpu.driver) == ("B300", 0, "580.82.07")


@pytest.mark.parametrize(
    ("capture", "rc", "error"),
    [
        ("nvidia-smi-no-devices.txt", 6, "No devices were found"),
        ("nvidia-smi-driver-failed.txt", 9,
         "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure "
         "that the latest NVIDIA driver is installed and running."),
    ],
)
def test_nvidia_smi_failures_are_kept_as_one_line(capture: str, rc: int, error: str) -> None:
    hf = facts.parse_facts(section("gpus", rc, read(capture)) + section("nvidia_smi", rc, read(capture)))
    assert (hf.gpus, hf.gpu_error, hf.cuda_version) == ((), error, None)
    assert "gpus" not in hf.missing_tools


def test_nvidia_smi_missing_is_not_an_error_but_a_missing_tool() -> None:
    hf = facts.parse_facts(section("gpus", 127, "sh: 1: nvidia-smi: not found"))
    assert (hf.gpu_error, hf.missing_tools) == (None, ("gpus",))


def test_nvidia_smi_hang_reads_did_not_answer() -> None:
    hf = facts.parse_facts(section("gpus", 124, ""))
    assert hf.gpu_error == "nvidia-smi did not answer within 30s"


def test_mig_from_query_and_from_plain_table() -> None:
    assert facts.parse_mig_csv(read("nvidia-smi-query-mig.csv")) == (0,)
    assert facts.parse_mig_csv(read("nvidia-smi-query-mig-na.csv")) == ()
    table = read("nvidia-smi-plain-a100-mig.txt")
    assert facts.parse_mig_table(table) == (0,)
    assert facts.parse_mig_table(read("nvidia-smi-plain-h100.txt")) == ()
    assert facts.parse_cuda_version(table) == "12.2"
    # The query is preferred; a driver that refuses the field falls back to the table.
    refused = section("mig", 2, 'Field "mig.mode.current" is not a valid field to query.')
    assert facts.parse_facts(refused + section("nvidia_smi", 0, table)).mig_enabled == (0,)


# --- ibv_devinfo and sysfs ports -------------------------------------------------------------


def test_ibv_devinfo_no_devices() -> None:
    assert facts.parse_ibv_devinfo(read("ibv_devinfo-none.txt")) == ()
    hf = facts.parse_facts(section("ibv_devinfo", 255, read("ibv_devinfo-none.txt")))
    assert hf.ib_ports == () and "ibv_devinfo" not in hf.missing_tools


def test_ibv_devinfo_port_init_and_bond() -> None:
    (init,) = facts.parse_ibv_devinfo(read("ibv_devinfo-ib-init.txt"))
    assert (init.hca, init.state, init.link_layer) == ("mlx5_2", "PORT_INIT", "InfiniBand")
    (bond,) = facts.parse_ibv_devinfo(read("ibv_devinfo-roce-bond.txt"))
    assert (bond.hca, bond.state, bond.link_layer, bond.active_mtu) == ("mlx5_bond_0", "PORT_ACTIVE", "Ethernet", 1024)


def test_sysfs_ports_stand_in_for_a_missing_ibv_devinfo() -> None:
    text = "mlx5_0\t1\t4: ACTIVE\tEthernet\nmlx5_1\t1\t1: DOWN\tInfiniBand\n"
    assert [(p.hca, p.port, p.state, p.link_layer) for p in facts.parse_sysfs_ports(text)] == [
        ("mlx5_0", 1, "PORT_ACTIVE", "Ethernet"), ("mlx5_1", 1, "PORT_DOWN", "InfiniBand"),
    ]
    hf = facts.parse_facts(section("ibv_devinfo", 127, "") + section("ib_ports", 0, text))
    assert [p.state for p in hf.ib_ports] == ["PORT_ACTIVE", "PORT_DOWN"]


# --- GIDs ------------------------------------------------------------------------------------


def test_show_gids_ipv6_and_vlan_put_the_ipv4_v2_gid_at_7() -> None:
    gids = facts.parse_show_gids(read("show_gids-ipv6-vlan.txt"))
    assert [(g.index, g.version, g.ipv4, g.netdev) for g in gids][-2:] == [
        (6, "v1", "172.16.120.11", "ens2f0np0.120"), (7, "v2", "172.16.120.11", "ens2f0np0.120"),
    ]
    assert all(g.ipv4 is None for g in gids[:6])
    hf = facts.HostFacts(gids=gids)
    assert hf.roce_v2_gid_index("mlx5_0") == 7
    assert hf.roce_v2_gid_index("mlx5_0", "172.16.120.11") == 7


def test_show_gids_infiniband_has_no_netdev_and_no_v2() -> None:
    gids = facts.parse_show_gids(read("show_gids-ib.txt"))
    assert [(g.hca, g.index, g.version, g.netdev) for g in gids] == [("mlx5_0", 0, "v1", ""), ("mlx5_1", 0, "v1", "")]
    assert facts.HostFacts(gids=gids).roce_v2_gid_index("mlx5_0") is None


def test_sysfs_gids_infiniband() -> None:
    (gid,) = facts.parse_sysfs_gids(read("sysfs-gids-ib.txt"))
    assert (gid.index, gid.version, gid.ipv4, gid.netdev) == (0, "v1", None, "")


# --- npu-smi ---------------------------------------------------------------------------------


def test_npu_smi_a3_lists_every_chip() -> None:
    names, hbm = facts.parse_npu_smi(read("npu-smi-a3-two-chips.txt"))
    assert names == ("Ascend910",) * 4 and hbm == (65536,) * 4


def test_npu_smi_warning_chip_and_process_rows() -> None:
    names, hbm = facts.parse_npu_smi(read("npu-smi-910b4-1-warning.txt"))
    assert names == ("910B4-1", "910B4-1") and hbm == (32768, 32768)


def test_npu_smi_dcmi_failure() -> None:
    hf = facts.parse_facts(section("npu", 255, read("npu-smi-dcmi-failed.txt")))
    assert (hf.npus, hf.npu_error) == ((), "dcmi model initialized failed, because the device is used. ret is -8020")


# --- ip --------------------------------------------------------------------------------------


def test_ip_json_secondary_addresses_vlan_and_down_links() -> None:
    ifs = {i.name: i for i in facts.parse_ip_addr_json(read("ip-j-addr-multi.json"))}
    assert ifs["eno1"].ipv4 == ("10.8.1.21", "10.8.1.121")
    assert (ifs["eno2"].up, ifs["eno2"].ipv4) == (True, ())  # UP flag set, no carrier: admin up
    assert (ifs["ens2f0np0"].mtu, ifs["ens2f0np0"].ipv4) == (9000, ())
    assert ifs["ens2f0np0.120"].ipv4 == ("172.16.120.11",)
    hf = facts.HostFacts(interfaces=tuple(ifs.values()))
    assert hf.interface_with("10.8.1.121") is ifs["eno1"]
    assert hf.interface_with("10.9.9.9") is None


def test_ip_json_of_old_iproute2_skips_empty_objects() -> None:
    (bond,) = facts.parse_ip_addr_json(read("ip-j-addr-old-iproute2.json"))
    assert (bond.name, bond.mtu, bond.ipv4) == ("bond0", 4200, ("10.10.10.1",))


def test_ip_oneline_fallback() -> None:
    ifs = facts.parse_ip(read("ip-o-link-addr.txt"))
    assert [(i.name, i.mtu, i.up, i.ipv4) for i in ifs] == [
        ("lo", 65536, True, ("127.0.0.1",)),
        ("em1", 1500, True, ("10.20.0.7",)),
        ("ib0", 2044, True, ("192.168.100.7",)),
        ("em1.30", 1500, False, ()),
    ]


# --- docker ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("capture", "error"),
    [
        ("docker-version-daemon-down.txt",
         "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?"),
        ("docker-version-permission.txt",
         'permission denied while trying to connect to the Docker daemon socket at unix:///var/run/docker.sock: '
         'Get "http://%2Fvar%2Frun%2Fdocker.sock/v1.47/version": dial unix /var/run/docker.sock: connect: permission denied'),
    ],
)
def test_docker_errors(capture: str, error: str) -> None:
    hf = facts.parse_facts(section("docker", 1, read(capture)))
    assert (hf.docker_version, hf.docker_error) == (None, error)


def test_docker_runtimes_with_status_objects() -> None:
    hf = facts.parse_facts(section("docker_runtimes", 0, read("docker-info-runtimes-nvidia.json")))
    assert hf.docker_runtimes == ("io.containerd.runc.v2", "nvidia", "runc")


def test_docker_missing_and_hung() -> None:
    assert facts.parse_facts(section("docker", 127, "")).docker_error is None
    assert facts.parse_facts(section("docker", 124, "")).docker_error == "docker did not answer within 30s"


# --- whole gather outputs from the sandbox ---------------------------------------------------


def test_gather_output_h2_gid_5_behind_ipv6() -> None:
    hf = facts.parse_facts(read("gather-sandbox-h2.txt"))
    assert hf.hostname == "h2" and len(hf.gpus) == 8 and hf.gpu_error is None and hf.mig_enabled == ()
    assert hf.roce_v2_gid_index("mlx5_0") == 5
    assert [(p.hca, p.state, p.link_layer) for p in hf.ib_ports] == [("mlx5_0", "PORT_ACTIVE", "Ethernet")]
    veth = hf.interface("veth0")
    assert veth is not None and veth.mtu == 1500 and hf.roce_v2_gid_index("mlx5_0", veth.ipv4[0]) == 5
    assert hf.docker_version == "20.10.24+dfsg1" and "nvidia" not in hf.docker_runtimes
    assert hf.nvidia_toolkit == () and hf.python3 == "3.11.7"
    assert hf.dev_infiniband == ("rdma_cm", "uverbs0")
    shm, models = hf.disk("/dev/shm"), hf.disk("/srv/models/Qwen/Qwen3")
    assert shm is not None and shm.mount == "/dev/shm" and shm.total == 25276510208
    assert models is not None and models.path == "/srv/models" and models.mount == "/srv"
    assert hf.clock is not None and hf.clock_end is not None and 0 <= hf.clock_end - hf.clock < 5


def test_gather_output_h4_without_hca() -> None:
    hf = facts.parse_facts(read("gather-sandbox-h4.txt"))
    assert (hf.ib_ports, hf.gids, hf.dev_infiniband) == ((), (), ())
    assert "ibv_devinfo" not in hf.missing_tools  # installed; it found no device (exit 255)


def test_gather_output_h5_ascend() -> None:
    hf = facts.parse_facts(read("gather-sandbox-h5.txt"))
    assert hf.npus == ("910B3",) * 8 and hf.npu_memory_mib == (65536,) * 8
    assert hf.gpus == () and hf.gpu_error is None and {"gpus", "ibv_devinfo"} <= set(hf.missing_tools)


def test_clock_offset_bounds() -> None:
    hf = facts.HostFacts(clock=1000.5, clock_end=1000.7)
    # sent at 990.0, back at 991.0: the host's 0.2 s ran inside that second.
    off = facts.clock_offset(hf, 990.0, 991.0)
    assert off is not None
    offset, uncertainty = off
    assert offset == pytest.approx(10.1) and uncertainty == pytest.approx(0.4)
    assert facts.clock_offset(facts.HostFacts(), 0.0, 1.0) is None


def test_to_json_round_trips_through_json() -> None:
    import json

    hf = facts.parse_facts(read("gather-sandbox-h2.txt"))
    doc = json.loads(json.dumps(facts.to_json(hf)))
    assert doc["hostname"] == "h2" and doc["gids"][-1]["index"] == 5 and doc["disks"][0]["path"] == "/srv/models"
