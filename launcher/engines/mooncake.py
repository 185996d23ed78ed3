"""Mooncake store: the master's argv and the store-client env of an engine rank.

Contract: pure builders from a :class:`~launcher.model.MooncakeStore`.  Sizes in the catalog are
*per GPU*; :func:`instance_size` converts them to what one engine process is configured with.
"""

from __future__ import annotations

import re

from launcher.errors import PlanError
from launcher.model import MooncakeStore, Source

MASTER_BINARY = "mooncake_master"
_SIZE = re.compile(r"^\s*([0-9]+)\s*([kmgt]?i?b?)\s*$", re.IGNORECASE)


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


def instance_size(per_gpu: str, tp: int, source: Source, key_path: str) -> str:
    """Per-GPU size x TP, in the same unit (``"100gb"``, tp 8 -> ``"800gb"``).

    SGLang gives every TP rank its own store client and splits the configured
    ``MOONCAKE_GLOBAL_SEGMENT_SIZE`` / ``MOONCAKE_LOCAL_BUFFER_SIZE`` across the TP ranks, so the
    value that leaves ``per_gpu`` on each GPU is ``per_gpu * tp`` (the instance's global TP).
    """
    m = _SIZE.match(per_gpu)
    if m is None:
        raise PlanError(source, f"size {per_gpu!r} is not a number with a unit like 100gb", key_path)
    return f"{int(m.group(1)) * tp}{m.group(2).lower()}"


def client_env(store: MooncakeStore, master: str, tp: int, source: Source) -> dict[str, str]:
    """Store-client env shared by every rank of an instance (host-specific parts come from
    :func:`launcher.network.mooncake_env`)."""
    return {
        "MOONCAKE_MASTER": master,
        "MOONCAKE_TE_META_DATA_SERVER": "P2PHANDSHAKE",
        "MOONCAKE_GLOBAL_SEGMENT_SIZE": instance_size(
            store.global_segment_size, tp, source, "mooncake_store/global_segment_size"
        ),
        "MOONCAKE_LOCAL_BUFFER_SIZE": instance_size(
            store.local_buffer_size, tp, source, "mooncake_store/local_buffer_size"
        ),
    }
