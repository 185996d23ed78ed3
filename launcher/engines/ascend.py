"""vllm-ascend (Huawei NPU): the container devices, driver mounts and env a rank needs.

Contract: the argv is vLLM's (:class:`launcher.engines.vllm.VLLM`, ``vllm serve``); what differs
is the container: no ``--gpus``, one ``--device /dev/davinciN`` per NPU plus the three control
devices, and the host's driver files mounted read-only (vllm-ascend's docker instructions).
"""

from __future__ import annotations

from launcher.engines.vllm import VLLM
from launcher.model import Mount

CONTROL_DEVICES: tuple[str, ...] = ("/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc")
_DRIVER_FILES: tuple[str, ...] = (
    "/usr/local/dcmi",
    "/usr/local/bin/npu-smi",
    "/usr/local/Ascend/driver/lib64/",
    "/usr/local/Ascend/driver/version.info",
    "/etc/ascend_install.info",
)
# HCCL's RDMA setup reads these on multi-node / PD ranks.
_HCCN_FILES: tuple[str, ...] = ("/usr/local/Ascend/driver/tools/hccn_tool", "/etc/hccn.conf")


def devices(npus: tuple[int, ...]) -> tuple[str, ...]:
    return tuple(f"/dev/davinci{i}" for i in npus) + CONTROL_DEVICES


def mounts(multinode: bool) -> tuple[Mount, ...]:
    files = _DRIVER_FILES + (_HCCN_FILES if multinode else ())
    return tuple(Mount(host=f, container=f, read_only=True) for f in files)


def env(npus: tuple[int, ...]) -> dict[str, str]:
    # Only this rank's /dev/davinciN nodes are passed into the container, where the runtime
    # numbers them from 0; the visible-device list is therefore logical, not the host indices.
    return {"ASCEND_RT_VISIBLE_DEVICES": ",".join(str(i) for i in range(len(npus)))}


class VLLMAscend(VLLM):
    """vLLM's argv, PD connectors and router; Ascend NPUs as the container's devices."""

    name = "vllm-ascend"
    label = "vllm-ascend"
    metric_names = ()  # vLLM's names (metrics_kind)
    accelerator = "npu"
    collective = "hccl"
    visible_devices_env = "ASCEND_RT_VISIBLE_DEVICES"

    def device_env(self, ids: tuple[int, ...]) -> dict[str, str]:
        return env(ids)

    def container_devices(self, ids: tuple[int, ...]) -> tuple[tuple[str, ...], tuple[int, ...]]:
        return devices(ids), ()

    def container_mounts(self, multinode: bool) -> tuple[Mount, ...]:
        return mounts(multinode)

    def router_argv(self, workers: tuple[str, ...], port: int, metrics_port: int) -> tuple[str, ...] | None:
        return None  # vllm-router's regular mode is not known to drive vllm-ascend workers


ENGINE = VLLMAscend()
