"""Mooncake store: the master's argv and the store-client env of an engine rank.

Contract: pure builders from a :class:`~launcher.model.MooncakeStore`.  Sizes in the catalog are
*per GPU*; :func:`instance_size` converts them to what one engine process is configured with, in
a form SGLang parses.
"""

from __future__ import annotations

import re

from launcher.errors import PlanError
from launcher.model import MooncakeStore, Parallelism, Source

MASTER_BINARY = "mooncake_master"
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
    """Store-client env shared by every rank of an instance (host-specific parts come from
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
