"""The stand-in as an SGLang rank with the Mooncake store backend and as the Mooncake master, on
loopback: every rank SGLang makes a store client (a PD decode only with its radix cache or KV
offload) mounts its segment at the master before it is healthy, the master records the clients
while they live, and a rank that cannot reach the master (or the metadata server its env names)
exits 1 at once with SGLang's one line."""

from __future__ import annotations

import json
import re
import time

from launcher.sandbox.standin import server
from tests.sandbox.test_standin import Proc, free_port, get, procs, start, wait_status

__all__ = ["procs"]  # the fixture, used by name

HICACHE = ["--enable-hierarchical-cache", "--hicache-storage-backend", "mooncake"]


def engine_argv(port: int, *extra: str) -> list[str]:
    return ["sglang-launch", "--model-path", "m", "--port", str(port), *extra]


def master(procs: list[Proc], metadata: int | None = None) -> tuple[int, int]:
    """A master on free ports; returns (rpc, metrics)."""
    rpc, metrics = free_port(), free_port()
    argv = ["mooncake_master", f"--rpc_port={rpc}", f"--metrics_port={metrics}"]
    if metadata is not None:
        argv += ["--enable_http_metadata_server=true", f"--http_metadata_server_port={metadata}"]
    start(procs, argv)
    wait_status(f"http://127.0.0.1:{metrics}/metrics", 200)
    return rpc, metrics


def clients(metrics: int) -> tuple[int, list[dict[str, str]]]:
    """``master_active_clients`` and the recorded clients' labels, from the master's /metrics."""
    text = get(f"http://127.0.0.1:{metrics}/metrics")[1].decode()
    count = int(re.search(r"^master_active_clients (\d+)$", text, re.M).group(1))  # type: ignore[union-attr]
    rows = [dict(re.findall(r'(\w+)="([^"]*)"', line)) for line in text.splitlines() if line.startswith("mooncake_standin_store_client{")]
    return count, rows


def store_env(rpc: int, **extra: str) -> dict[str, str]:
    return {"MOONCAKE_MASTER": f"127.0.0.1:{rpc}", "MOONCAKE_TE_META_DATA_SERVER": "P2PHANDSHAKE",
            "MOONCAKE_GLOBAL_SEGMENT_SIZE": "800gb", "MOONCAKE_LOCAL_HOSTNAME": "127.0.0.1", **extra}  # fmt: skip


def test_every_rank_mounts_at_the_master_while_it_lives(procs: list[Proc]) -> None:
    rpc, metrics = master(procs)
    assert clients(metrics) == (0, [])
    ports = [free_port(), free_port()]
    engines = [start(procs, engine_argv(p, *HICACHE), **store_env(rpc)) for p in ports]
    for p in ports:
        wait_status(f"http://127.0.0.1:{p}/health", 200)
    count, rows = clients(metrics)
    assert count == 2 and [(r["role"], r["rank"], r["client"], r["segment"]) for r in rows] == [
        ("single", "0", "127.0.0.1", "800gb")
    ] * 2, rows
    engines[0].stop()
    deadline = time.monotonic() + 60  # a hang bound: the master sees the connection close
    while clients(metrics)[0] != 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert clients(metrics)[0] == 1, "a gone client is no longer recorded"


def test_unreachable_master_fails_at_start_with_one_line(procs: list[Proc]) -> None:
    dead = free_port()
    rc, events, err = Proc(engine_argv(free_port(), *HICACHE), **store_env(dead)).finish()
    assert rc == 1
    assert err.splitlines() == [
        f"FATAL: Failed to setup Mooncake store, error code: -900 (master 127.0.0.1:{dead}: Connection refused)"
    ]
    assert not any(e["event"] == "ready" for e in events)


def test_missing_master_env_fails_like_sglang(procs: list[Proc]) -> None:
    rc, _, err = Proc(engine_argv(free_port(), *HICACHE)).finish()
    assert (rc, err.splitlines()) == (
        1, ["FATAL: ValueError: Either the environment variable 'MOONCAKE_MASTER' or 'MOONCAKE_CLIENT' is not set."]
    )  # fmt: skip


def test_no_store_client_without_the_hierarchical_cache(procs: list[Proc]) -> None:
    port = free_port()
    start(procs, engine_argv(port, "--hicache-storage-backend", "mooncake"), MOONCAKE_MASTER=f"127.0.0.1:{free_port()}")
    wait_status(f"http://127.0.0.1:{port}/health", 200)


def test_a_pd_decode_is_a_store_client_only_with_its_radix_cache_or_offload(procs: list[Proc]) -> None:
    """SGLang forces a decode's cache to a chunk cache: no HiCache, so no store client."""
    dead = free_port()
    decode = ["--disaggregation-mode", "decode"]
    port = free_port()
    start(procs, engine_argv(port, *HICACHE, *decode), **store_env(dead))
    wait_status(f"http://127.0.0.1:{port}/health", 200)
    for extra in (["--disaggregation-decode-enable-radix-cache", *HICACHE],
                  ["--disaggregation-decode-enable-offload-kvcache", "--hicache-storage-backend", "mooncake"]):  # fmt: skip
        rc, _, err = Proc(engine_argv(free_port(), *decode, *extra), **store_env(dead)).finish()
        assert (rc, err.splitlines()) == (
            1, [f"FATAL: Failed to setup Mooncake store, error code: -900 (master 127.0.0.1:{dead}: Connection refused)"]
        ), extra  # fmt: skip


def test_http_metadata_server_is_published_to_and_required(procs: list[Proc]) -> None:
    meta = free_port()
    rpc, metrics = master(procs, metadata=meta)
    url = f"http://127.0.0.1:{meta}/metadata"
    port = free_port()
    start(procs, engine_argv(port, *HICACHE), **store_env(rpc, MOONCAKE_TE_META_DATA_SERVER=url))
    wait_status(f"http://127.0.0.1:{port}/health", 200)
    code, body = get(f"{url}?key=mooncake/rpc_meta/127.0.0.1")
    assert code == 200 and json.loads(body)["ip_or_host_name"] == "127.0.0.1"
    assert clients(metrics)[0] == 1

    dead = f"http://127.0.0.1:{free_port()}/metadata"
    rc, _, err = Proc(engine_argv(free_port(), *HICACHE), **store_env(rpc, MOONCAKE_TE_META_DATA_SERVER=dead)).finish()
    assert (rc, err.splitlines()) == (
        1, [f"FATAL: Failed to setup Mooncake store, error code: -900 (metadata server {dead}: Connection refused)"]
    )  # fmt: skip


def test_extra_config_names_the_master_before_the_env(procs: list[Proc]) -> None:
    rpc, metrics = master(procs)
    port = free_port()
    extra = json.dumps({"master_server_address": f"127.0.0.1:{rpc}", "local_hostname": "10.0.0.7"})
    start(procs, engine_argv(port, *HICACHE, "--hicache-storage-backend-extra-config", extra),
          **store_env(free_port()))  # fmt: skip
    wait_status(f"http://127.0.0.1:{port}/health", 200)
    assert [r["client"] for r in clients(metrics)[1]] == ["10.0.0.7"]


def test_segment_sizes_are_read_as_sglang_reads_them() -> None:
    assert server.segment_bytes("1600gb") == 1600 << 30 and server.segment_bytes(" 4GB ") == 4 << 30
    assert server.segment_bytes("1048576") == 1 << 20
    s = server.parse_sglang(["--model-path", "m", *HICACHE])
    for bad in ("800mb", "4gib", "gb"):
        try:
            server.store_config(s, store_env(1, MOONCAKE_GLOBAL_SEGMENT_SIZE=bad))
        except server.Fatal as err:
            assert str(err) == f"ValueError: invalid global_segment_size {bad!r}: SGLang reads <n>gb or bytes"
        else:
            raise AssertionError(f"{bad!r} fails SGLang's start")


def test_config_precedence_unit() -> None:
    s = server.parse_sglang(["--model-path", "m", *HICACHE])
    env = store_env(1, SGLANG_HICACHE_MOONCAKE_CONFIG_PATH="/nonexistent/mc.json")
    try:
        server.store_config(s, env)
    except server.Fatal as err:
        assert str(err).startswith("RuntimeError: Failed to load config from /nonexistent/mc.json: ")
    else:
        raise AssertionError("a config path that cannot be read is fatal, as in SGLang")
    assert server.store_config(s, store_env(9)) == server.StoreConfig(
        master="127.0.0.1:9", metadata="P2PHANDSHAKE", local_hostname="127.0.0.1", segment="800gb"
    )
