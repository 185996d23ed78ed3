"""vllm-ascend (Huawei NPU): the container devices, driver mounts and env a rank needs.

Contract: the argv is vLLM's (:func:`launcher.engines.vllm.argv`, ``vllm serve``); what differs
is the container: no ``--gpus``, one ``--device /dev/davinciN`` per NPU plus the three control
devices, and the host's driver files mounted read-only (vllm-ascend's docker instructions).
"""

from __future__ import annotations

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
