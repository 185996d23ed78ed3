"""Fleet's vLLM Mooncake store config, fed to vLLM's own loader in its parser venv (no GPU needed):
``MooncakeStoreConfig.load_from_config()`` (0.30.0: in the store connector's worker module; 0.33.0:
``vllm.distributed.mooncake_store``) and the client address vLLM passes to ``store.setup``
(``rdma_utils.get_requester_local_hostname(get_ip())``), under the env fleet renders for the unit.

Skipped, with the reason, when a venv is absent (tools/parser_venvs.sh builds them).  One
subprocess per vLLM version (~15-25 s: importing vLLM).  Run:
``python -m pytest -q -rs tests/plan/test_vllm_mooncake_store_real.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from launcher.engines import mooncake
from launcher.model import MooncakeStore, Source, Unit
from tests.parsers.real import cache_dir, venv_absent, venv_name
from tests.plan.test_catalog import auto_plan

LOADERS = {
    "0.30.0": "vllm.distributed.kv_transfer.kv_connector.v1.mooncake.store.worker",
    "0.33.0": "vllm.distributed.mooncake_store",
}
GIB = 1 << 30
SRC = Source(path="recipes/x.yaml", line=1, col=1)
# The store env fleet rendered for entry 32's prefill0 before it wrote vLLM a config file.
OLD_ENV = {
    "MOONCAKE_DEVICE": "mlx5_0,mlx5_1",
    "MOONCAKE_GLOBAL_SEGMENT_SIZE": "800gb",
    "MOONCAKE_LOCAL_BUFFER_SIZE": "32gb",
    "MOONCAKE_LOCAL_HOSTNAME": "10.10.4.11",
    "MOONCAKE_MASTER": "10.10.4.11:50051",
    "MOONCAKE_PROTOCOL": "rdma",
    "MOONCAKE_TE_META_DATA_SERVER": "P2PHANDSHAKE",
}

# Loads each case's config under exactly the case's env; prints one JSON result per case.
PROBE = """
import dataclasses, importlib, json, os, sys
cases = json.load(sys.stdin)
loader = importlib.import_module(sys.argv[1])
from vllm.distributed.kv_transfer.kv_connector.v1.mooncake import rdma_utils
from vllm.utils.network_utils import get_ip
base = {k: v for k, v in os.environ.items() if not k.startswith(("MOONCAKE_", "MC_", "VLLM_HOST_IP"))}
out = []
for env in cases:
    os.environ.clear()
    os.environ.update(base)
    os.environ.update(env)
    try:
        config = dataclasses.asdict(loader.MooncakeStoreConfig.load_from_config())
        out.append({"config": config, "local_hostname": rdma_utils.get_requester_local_hostname(get_ip())})
    except Exception as err:
        out.append({"error": f"{type(err).__name__}: {err}"})
print(json.dumps(out))
"""


def run(version: str, cases: list[dict[str, str]]) -> list[dict[str, object]]:
    reason = venv_absent("vllm", version)
    if reason:
        pytest.skip(reason)
    python = cache_dir() / venv_name("vllm", version) / "bin" / "python"
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", VLLM_TARGET_DEVICE="cpu")
    done = subprocess.run(
        [str(python), "-c", PROBE, LOADERS[version]],
        input=json.dumps(cases), capture_output=True, text=True, env=env, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    result: list[dict[str, object]] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def entry_32_prefill() -> tuple[Unit, str]:
    p = auto_plan("deepseek/vllm-pd-tp8-6000d-nvfp4")
    u = next(u for u in p.units if u.role == "prefill")
    return u, p.files[f"{p.deployment}/{u.name}/{mooncake.VLLM_CONFIG_FILE}"]


def unit_env(u: Unit, config: Path) -> dict[str, str]:
    """The unit's rendered env, its config path moved to where the test wrote the file."""
    return {**u.env, "MOONCAKE_CONFIG_PATH": str(config)}


@pytest.mark.parametrize("version", sorted(LOADERS))
def test_real_loader_reads_fleets_file(version: str, tmp_path: Path) -> None:
    u, text = entry_32_prefill()
    (tmp_path / "entry32.json").write_text(text)
    store = MooncakeStore(global_segment_size="1tb", local_buffer_size="512mb")
    (tmp_path / "sizes.json").write_text(mooncake.vllm_store_config(store, "10.0.0.1:50051", "tcp", "", SRC))
    # What fleet rendered before: SGLang's MOONCAKE_* env, no MOONCAKE_CONFIG_PATH.
    old = {**{k: v for k, v in u.env.items() if k != "MOONCAKE_CONFIG_PATH"}, **OLD_ENV}
    got = run(version, [unit_env(u, tmp_path / "entry32.json"), unit_env(u, tmp_path / "sizes.json"), old])
    assert got[0] == {
        "config": {
            "metadata_server": "P2PHANDSHAKE",
            "master_server_address": "10.10.4.11:50051",
            "protocol": "rdma",
            "device_name": "mlx5_0,mlx5_1",
            "mode": "embedded",
            "global_segment_size": 100 * GIB,  # per worker: 8 workers give the instance 800 GiB
            "local_buffer_size": 4 * GIB,
            "enable_offload": False,
            "tenant_id": "default",
        },
        "local_hostname": "10.10.4.11",  # VLLM_HOST_IP: the data address the peers reach
    }
    assert got[1]["config"] == {
        "metadata_server": "P2PHANDSHAKE",
        "master_server_address": "10.0.0.1:50051",
        "protocol": "tcp",
        "device_name": "",
        "mode": "embedded",
        "global_segment_size": 1024 * GIB,
        "local_buffer_size": 512 << 20,
        "enable_offload": False,
        "tenant_id": "default",
    }
    assert got[2] == {"error": "ValueError: The environment variable 'MOONCAKE_CONFIG_PATH' is not set."}
