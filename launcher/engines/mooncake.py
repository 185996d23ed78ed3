"""Mooncake store: the master's argv and the store-client config of an engine rank.

Contract: pure builders from a :class:`~launcher.model.MooncakeStore`.  Sizes in the catalog are
*per GPU*.  SGLang's client is configured through env (:func:`client_env`; :func:`instance_size`
converts the sizes to what one SGLang process is configured with).  vLLM's MooncakeStoreConnector
reads no MOONCAKE_* env: every worker (one per GPU) loads the JSON file named by
``MOONCAKE_CONFIG_PATH`` (:func:`vllm_store_config`) and contributes its ``global_segment_size``.
"""

from __future__ import annotations

import json
import re

from launcher.errors import PlanError
from launcher.model import MooncakeStore, Parallelism, Source

MASTER_BINARY = "mooncake_master"
MASTER_HEALTH_PATH = "/metrics"  # what the planner's health check of the master GETs, on its metrics port
CONFIG_PATH_ENV = "MOONCAKE_CONFIG_PATH"  # vLLM's only source of its store client's config
VLLM_CONFIG_FILE = "mooncake-store.json"
_SIZE = re.compile(r"^\s*([0-9]+)\s*([kmgt]?)i?b?\s*$", re.IGNORECASE)
_UNIT = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}  # binary, as Mooncake's
_GIB = 1 << 30


def master_argv(rpc_port: int, metadata_port: int, metrics_port: int) -> tuple[str, ...]:
    """The master with its embedded HTTP metadata server."""
    return (
        MASTER_BINARY,
        "--rpc_port",
        str(rpc_port),
        "--enable_http_metadata_server=true",
        "--http_metadata_server_port",
        str(metadata_port),
        "--metrics_port",
        str(metrics_port),
    )


def store_ranks(par: Parallelism) -> int:
    """How many store clients SGLang splits an instance's MOONCAKE_GLOBAL_SEGMENT_SIZE across: its
    HiCache storage config's ``tp_size * pp_size`` (one client per GPU rank; under DP attention
    ``tp_size`` is the attention TP, ``tp / attn_dp``)."""
    return max(1, par.tp // max(1, par.attn_dp)) * par.pp


def instance_size(per_gpu: str, ranks: int, source: Source, key_path: str) -> str:
    """``per_gpu * ranks`` (``"100gb"``, 16 ranks -> ``"1600gb"``), so each rank's share is
    ``per_gpu``.  Units are binary; the result is whole GiB as ``"<n>gb"`` or else a byte count,
    the only two forms SGLang parses (its ``gb`` is GiB; ``"512mb"`` would fail its start)."""
    m = _SIZE.match(per_gpu)
    if m is None:
        raise PlanError(source, f"size {per_gpu!r} is not a number with a unit like 100gb", key_path)
    total = int(m.group(1)) * _UNIT[m.group(2).lower()] * ranks
    return f"{total // _GIB}gb" if total % _GIB == 0 else str(total)


def client_env(store: MooncakeStore, master: str, par: Parallelism, source: Source) -> dict[str, str]:
    """SGLang's store-client env shared by every rank of an instance (host-specific parts come from
    :func:`launcher.network.mooncake_env`).  SGLang 0.5.23 reads MOONCAKE_LOCAL_BUFFER_SIZE nowhere
    (its store client's local buffer is a fixed 16 MB); it is rendered for the record."""
    ranks = store_ranks(par)
    return {
        "MOONCAKE_MASTER": master,
        "MOONCAKE_TE_META_DATA_SERVER": "P2PHANDSHAKE",
        "MOONCAKE_GLOBAL_SEGMENT_SIZE": instance_size(
            store.global_segment_size, ranks, source, "mooncake_store/global_segment_size"
        ),
        "MOONCAKE_LOCAL_BUFFER_SIZE": instance_size(
            store.local_buffer_size, ranks, source, "mooncake_store/local_buffer_size"
        ),
    }


def vllm_store_config(
    store: MooncakeStore, master: str, protocol: str, device: str, source: Source
) -> str:
    """The JSON file vLLM's store client loads (vLLM 0.30 and 0.33 ``MooncakeStoreConfig.from_file``).

    Sizes stay per GPU: each worker process contributes ``global_segment_size`` itself.  They are
    written ``<n>gb`` (GiB) or as a byte count: vLLM parses only gb/mb/kb/b suffixes ("1tb" or
    "4gib" would fail its start).  The client's own address is not in the file: vLLM takes it from
    MOONCAKE_REQUESTER_LOCAL_HOSTNAME, else VLLM_HOST_IP.  ``device`` empty lets Mooncake discover
    the RDMA devices."""
    doc = {
        "device_name": device,
        "global_segment_size": instance_size(store.global_segment_size, 1, source, "mooncake_store/global_segment_size"),
        "local_buffer_size": instance_size(store.local_buffer_size, 1, source, "mooncake_store/local_buffer_size"),
        "master_server_address": master,
        "metadata_server": "P2PHANDSHAKE",
        "mode": "embedded",
        "protocol": protocol,
    }
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"
