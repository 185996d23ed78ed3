"""Engine stand-in: plays SGLang, vLLM and the Mooncake master inside the sandbox image, only
because this machine has no GPUs.  It honours the real contract, not a simplified one:

- argv: the real command lines (``python3 -m sglang.launch_server ...``, ``sglang serve ...``,
  ``vllm serve MODEL ...``, ``mooncake_master ...``).  Engine argv goes through
  ``argcheck.check_argv(engine, FLEET_ENGINE_VERSION, args)`` (the option snapshots of the real
  parsers); anything the real parser rejects exits 2 with an argparse-style message.
- settings come from argv and env the way the engines read them (SGLang ``--host`` defaults to
  127.0.0.1, port 30000; vLLM binds all interfaces, port 8000; GLOO_/NCCL_SOCKET_IFNAME,
  SGLANG_HOST_IP / VLLM_HOST_IP, VLLM_NIXL_SIDE_CHANNEL_HOST/PORT).
- multi-node: rank 0 listens on the dist-init (vLLM: master) port; every rank, rank 0 included,
  connects there from the address of the interface named by GLOO_SOCKET_IFNAME /
  NCCL_SOCKET_IFNAME (NCCL prefix/``=``/``^`` syntax; a name that matches nothing fails at once,
  as Gloo/NCCL do).  Until all ``nnodes`` ranks joined nothing is healthy; a missing rank or a
  wrong address times out after FLEET_STANDIN_DIST_TIMEOUT s (60) and exits 1; a rank that dies
  after joining makes the others exit 1 (the connections stay open, like NCCL's watchdog).
- HTTP (rank 0 only): /health, /health_generate, /ready (503 while starting or draining),
  /model_info, /server_info (+ the /get_* aliases the router probes), /v1/models, /generate,
  /v1/completions, /v1/chat/completions (SSE when ``stream``), OpenAI-shaped with usage.
  Every generated token takes FLEET_STANDIN_TOKEN_MS ms (20), the first one
  FLEET_STANDIN_FIRST_TOKEN_MS (default: the same): token i of a request is sent at first + i x
  that delay after it was admitted (paced against the clock, so per-token overhead does not add
  up; a long first token -- a prefill -- keeps a loaded machine's scheduling noise a small part of
  TTFT), and ``usage`` counts the whitespace-separated words of the
  prompt and the tokens sent.  FLEET_STANDIN_FAIL_EVERY=N answers every Nth generation request
  on this engine with HTTP 500 before any token (a failure a benchmark client must count);
  FLEET_STANDIN_STALL_AFTER=N admits every generation request after the Nth and sends it nothing
  until its client goes away (a wedged engine: what a benchmark's end must cancel).
- /metrics: the engine's own Prometheus names for load and latency (:mod:`standin.metrics`;
  SGLang only with ``--enable-metrics``, 404 otherwise, as SGLang); requests beyond
  ``--max-running-requests`` / ``--max-num-seqs`` (256) wait for a running slot.
- PD (SGLang): the prefill serves the bootstrap port; a decode request carries the
  ``bootstrap_host/port/room`` the router injects, asks the prefill's bootstrap server for the
  prefill's KV endpoint (its advertised host IP) and connects to it for that room.  vLLM
  P/D: the prefill answers ``kv_transfer_params`` with its NIXL side channel
  (VLLM_NIXL_SIDE_CHANNEL_HOST/PORT); the decode connects there.  A decode whose pull fails
  counts it in ``vllm:nixl_num_failed_transfers``, logs vLLM's own line on stderr (``ERROR ...
  [nixl_connector.py] NIXL transfer failure: handshake_setup_failed | Context: ...`` when the side
  channel is unreachable), and fails the request as vLLM fails a generation: 500 with its
  ErrorResponse ``Internal server error``, or, streamed, that error as an event of the 200 stream
  (docs/real-engine.md; vLLM 0.32's source).
  vllm-router's PD mode in front of them: :mod:`standin.router`.
- Mooncake store (SGLang with ``--enable-hierarchical-cache --hicache-storage-backend mooncake``):
  every rank is a store client, as each of SGLang's ranks is -- but a PD decode, whose KV cache
  SGLang forces to a chunk cache (no HiCache), only with ``--disaggregation-decode-enable-radix-cache``
  or ``--disaggregation-decode-enable-offload-kvcache``.  After the rendezvous, before it is
  healthy, it reads its config as SGLang does (``--hicache-storage-backend-extra-config`` JSON with
  a master address, else the JSON file at SGLANG_HICACHE_MOONCAKE_CONFIG_PATH, else MOONCAKE_MASTER
  / MOONCAKE_TE_META_DATA_SERVER / MOONCAKE_LOCAL_HOSTNAME / MOONCAKE_GLOBAL_SEGMENT_SIZE; the size
  only as ``<n>gb`` or bytes), publishes itself to the metadata server when that is an
  ``http://`` URL (P2PHANDSHAKE needs none), and mounts its segment at the master's RPC port.  Any of it failing exits 1 at once with SGLang's
  one line (``Failed to setup Mooncake store, error code: -900`` plus the address and the cause);
  each attempt waits at most FLEET_STANDIN_STORE_TIMEOUT s (5).  Losing the master later is only
  logged: SGLang keeps serving, its offload calls fail.
- Mooncake master: RPC, metrics and the embedded HTTP metadata server on their flags' ports; the
  master records every mounted store client while its connection lasts, and /metrics reports
  ``master_active_clients N`` and one ``mooncake_standin_store_client{...} 1`` line per client.
- SIGTERM/SIGINT: nothing new is admitted (503, /health 503), and requests in flight are handled
  as the real engine handles them (:func:`stop`): vLLM by its ``--shutdown-timeout``
  (default 0: aborted, and the process stays until SIGKILL), SGLang waits for all of them.
  FLEET_STANDIN_START_DELAY (s) delays readiness; FLEET_STANDIN_FAIL =
  ``crash-at-start`` | ``crash-after:<s>`` | ``never-healthy`` injects failures.
- stdout: one JSON line per event; each served request logs host, role, generation
  (FLEET_GENERATION) and request id.

Stdlib only: it runs on the image's bare python3.11.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import http.server
import importlib
import json
import os
import select
import signal
import socket
import struct
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping

from .metrics import Request, Stats

# vLLM's ErrorResponse for a failed generation (vllm/exceptions.py GenerationError).
VLLM_GENERATION_ERROR = {"error": {"message": "Internal server error", "type": "InternalServerError", "param": None,
                                   "code": 500}}  # fmt: skip
WORDS = ("the", "fleet", "serves", "tokens", "from", "a", "stand", "in", "engine", "today")


# ---------------------------------------------------------------------------------------------
# Output


class Log:
    """JSON lines on stdout, each tagged with host, role and generation."""

    def __init__(self) -> None:
        self.host = socket.gethostname()
        self.role = "starting"
        self.generation = os.environ.get("FLEET_GENERATION")
        self._lock = threading.Lock()

    def __call__(self, event: str, **fields: Any) -> None:
        rec = {"ts": round(time.time(), 3), "event": event, "host": self.host, "role": self.role}
        if self.generation is not None:
            rec["generation"] = self.generation
        rec.update(fields)
        with self._lock:
            sys.stdout.write(json.dumps(rec, sort_keys=True) + "\n")
            sys.stdout.flush()


LOG = Log()


class Fatal(Exception):
    """Ends the process with ``code`` after logging ``message`` (as a failed engine would)."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


def die(message: str, code: int = 1) -> None:
    """Exits the whole process from any thread."""
    LOG("fatal", message=message, exit_code=code)
    sys.stderr.write(f"FATAL: {message}\n")
    sys.stderr.flush()
    os._exit(code)


# ---------------------------------------------------------------------------------------------
# Settings from argv and env


@dataclass(frozen=True, slots=True, kw_only=True)
class Settings:
    engine: str  # sglang | vllm | mooncake
    model: str = ""
    served_name: str = ""
    host: str = ""  # HTTP bind address ("" = all interfaces)
    port: int = 0
    serve_http: bool = True
    tp: int = 1
    pp: int = 1
    nnodes: int = 1
    node_rank: int = 0
    dist_addr: tuple[str, int] | None = None
    pd_mode: str = "null"  # null | prefill | decode
    bootstrap_port: int = 8998
    kv_config: dict[str, Any] = field(default_factory=dict)
    extra_ports: tuple[tuple[str, int, str], ...] = ()  # mooncake: (name, port, kind)
    store: str = ""  # HiCache storage backend (only with the hierarchical cache enabled)
    store_extra: dict[str, Any] = field(default_factory=dict)  # its extra config
    metrics: bool = True  # /metrics served (SGLang: --enable-metrics)
    max_running: int = 256  # SGLang --max-running-requests, vLLM --max-num-seqs
    # SIGTERM: seconds requests in flight may take before they are aborted (vLLM
    # --shutdown-timeout, 0 = at once); None = as long as they take (SGLang, Mooncake master).
    shutdown_timeout: int | None = None
    args: dict[str, Any] = field(default_factory=dict)  # what /server_info reports

    @property
    def role(self) -> str:
        if self.engine == "mooncake":
            return "mooncake-master"
        if self.pd_mode in ("prefill", "decode"):
            return self.pd_mode
        return "rank" if self.nnodes > 1 else "single"


class _Parser(argparse.ArgumentParser):
    """argparse that reports like the engines' parsers (exit 2) but through :class:`Fatal`."""

    def error(self, message: str) -> Any:  # noqa: D401 - argparse's hook
        raise Fatal(f"{self.prog}: error: {message}", 2)


def _addr(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit():
        raise Fatal(f"dist-init address {text!r} is not HOST:PORT", 1)
    return host, int(port)


def parse_sglang(args: list[str]) -> Settings:
    p = _Parser(prog="launch_server.py", add_help=False, allow_abbrev=False)
    p.add_argument("--model-path", "--model", dest="model", default="")
    p.add_argument("--served-model-name", default=None)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--tp-size", "--tp", "--tensor-parallel-size", dest="tp", type=int, default=1)
    p.add_argument("--pp-size", "--pipeline-parallel-size", dest="pp", type=int, default=1)
    p.add_argument("--dp-size", "--dp", "--data-parallel-size", dest="dp", type=int, default=1)
    p.add_argument("--nnodes", type=int, default=1)
    p.add_argument("--node-rank", type=int, default=0)
    p.add_argument("--dist-init-addr", "--nccl-init-addr", dest="dist", default=None)
    p.add_argument("--disaggregation-mode", default="null")
    p.add_argument("--disaggregation-bootstrap-port", type=int, default=8998)
    p.add_argument("--enable-hierarchical-cache", "--enable-hicache", dest="hicache", action="store_true")
    p.add_argument("--hicache-storage-backend", default=None)
    p.add_argument("--hicache-storage-backend-extra-config", default=None)
    p.add_argument("--disaggregation-decode-enable-radix-cache", dest="decode_radix", action="store_true")
    p.add_argument("--disaggregation-decode-enable-offload-kvcache", dest="decode_offload", action="store_true")
    p.add_argument("--enable-metrics", action="store_true")
    p.add_argument("--max-running-requests", type=int, default=256)
    ns, _ = p.parse_known_args(args)
    if ns.nnodes > 1 and not ns.dist:
        raise Fatal("--dist-init-addr is required when --nnodes > 1", 1)
    served = ns.served_model_name or ns.model
    decode = ns.disaggregation_mode == "decode"
    # A decode's cache is a chunk cache unless its radix cache is on; its KV offload has a store of its own.
    uses_store = (ns.hicache and (not decode or ns.decode_radix)) or (decode and ns.decode_offload)
    store = (ns.hicache_storage_backend or "") if uses_store else ""
    return Settings(
        engine="sglang", model=ns.model, served_name=served, host=ns.host, port=ns.port,
        serve_http=ns.node_rank == 0, tp=ns.tp, pp=ns.pp, nnodes=ns.nnodes,
        node_rank=ns.node_rank, dist_addr=_addr(ns.dist) if ns.dist else None,
        pd_mode=ns.disaggregation_mode, bootstrap_port=ns.disaggregation_bootstrap_port,
        store=store, store_extra=_extra_config(ns.hicache_storage_backend_extra_config) if store else {},
        metrics=ns.enable_metrics, max_running=ns.max_running_requests,
        args={
            "model_path": ns.model, "served_model_name": served, "host": ns.host,
            "port": ns.port, "tp_size": ns.tp, "pp_size": ns.pp, "dp_size": ns.dp,
            "nnodes": ns.nnodes, "node_rank": ns.node_rank, "dist_init_addr": ns.dist,
            "disaggregation_mode": ns.disaggregation_mode,
            "disaggregation_bootstrap_port": ns.disaggregation_bootstrap_port,
            "enable_hierarchical_cache": ns.hicache, "hicache_storage_backend": ns.hicache_storage_backend,
        },
    )  # fmt: skip


def _extra_config(text: str | None) -> dict[str, Any]:
    """``--hicache-storage-backend-extra-config``: a JSON object, or ``@path`` to a JSON file."""
    if not text:
        return {}
    try:
        raw = Path(text[1:]).read_text() if text.startswith("@") else text
        parsed = json.loads(raw)
    except (OSError, ValueError) as err:
        raise Fatal(f"ValueError: invalid --hicache-storage-backend-extra-config {text!r}: {err}") from err
    if not isinstance(parsed, dict):
        raise Fatal(f"ValueError: --hicache-storage-backend-extra-config {text!r} is not a JSON object")
    return parsed


def parse_vllm(args: list[str]) -> Settings:
    p = _Parser(prog="vllm serve", add_help=False, allow_abbrev=False)
    p.add_argument("model_tag", nargs="?", default=None)
    p.add_argument("--model", default=None)
    p.add_argument("--served-model-name", nargs="+", default=None)
    p.add_argument("--host", default=None)
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--tensor-parallel-size", "-tp", dest="tp", type=int, default=1)
    p.add_argument("--pipeline-parallel-size", "-pp", dest="pp", type=int, default=1)
    p.add_argument("--nnodes", "-n", type=int, default=1)
    p.add_argument("--node-rank", "-r", type=int, default=0)
    p.add_argument("--master-addr", default="127.0.0.1")
    p.add_argument("--master-port", type=int, default=29501)
    p.add_argument("--headless", action="store_true")
    p.add_argument("--kv-transfer-config", default=None)
    p.add_argument("--max-num-seqs", type=int, default=256)
    p.add_argument("--shutdown-timeout", type=int, default=0)
    ns, _ = p.parse_known_args(args)
    model = ns.model or ns.model_tag or ""
    kv: dict[str, Any] = json.loads(ns.kv_transfer_config) if ns.kv_transfer_config else {}
    role = kv.get("kv_role", "")
    pd = {"kv_producer": "prefill", "kv_consumer": "decode"}.get(role, "null")
    served = ns.served_model_name[0] if ns.served_model_name else model
    return Settings(
        engine="vllm", model=model, served_name=served, host=ns.host or "", port=ns.port,
        serve_http=not ns.headless and ns.node_rank == 0, tp=ns.tp, pp=ns.pp,
        nnodes=ns.nnodes, node_rank=ns.node_rank,
        dist_addr=(ns.master_addr, ns.master_port) if ns.nnodes > 1 else None,
        pd_mode=pd, kv_config=kv, max_running=ns.max_num_seqs, shutdown_timeout=ns.shutdown_timeout,
        args={
            "model": model, "served_model_name": served, "host": ns.host, "port": ns.port,
            "tensor_parallel_size": ns.tp, "pipeline_parallel_size": ns.pp,
            "nnodes": ns.nnodes, "node_rank": ns.node_rank, "master_addr": ns.master_addr,
            "master_port": ns.master_port, "headless": ns.headless, "kv_transfer_config": kv,
        },
    )  # fmt: skip


MOONCAKE_FLAGS = {
    "rpc_port": "50051", "port": "", "rpc_address": "0.0.0.0", "rpc_interface": "",
    "rpc_thread_num": "4", "metrics_port": "9003", "enable_http_metadata_server": "false",
    "http_metadata_server_port": "8080", "http_metadata_server_host": "0.0.0.0",
    "enable_metric_reporting": "true", "default_kv_lease_ttl": "5000",
    "default_kv_soft_pin_ttl": "1800000", "allow_evict_soft_pinned_objects": "true",
    "eviction_ratio": "0.05", "eviction_high_watermark_ratio": "0.95", "client_ttl": "10",
    "cluster_id": "mooncake_cluster", "enable_ha": "false", "etcd_endpoints": "",
    "root_fs_dir": "", "memory_allocator": "offset", "v": "0", "logtostderr": "false",
}  # fmt: skip
_MOONCAKE_BOOL = {"enable_http_metadata_server", "enable_metric_reporting", "enable_ha",
                  "allow_evict_soft_pinned_objects", "logtostderr"}  # fmt: skip


def parse_mooncake(args: list[str]) -> Settings:
    """gflags syntax: ``--name=value``, ``--name value``, ``--bool`` / ``--nobool``."""
    values = dict(MOONCAKE_FLAGS)
    i = 0
    while i < len(args):
        arg = args[i]
        if not arg.startswith("-"):
            raise Fatal(f"ERROR: unexpected argument '{arg}'", 1)
        name, eq, value = arg.lstrip("-").partition("=")
        if not eq and name.startswith("no") and name[2:] in _MOONCAKE_BOOL:
            name, value, eq = name[2:], "false", "="
        if name not in values:
            raise Fatal(f"ERROR: unknown command line flag '{name}'", 1)
        if not eq:
            if name in _MOONCAKE_BOOL:
                value = "true"
            elif i + 1 < len(args):
                i += 1
                value = args[i]
            else:
                raise Fatal(f"ERROR: flag '{name}' is missing its argument", 1)
        values[name] = value
        i += 1
    for name in ("rpc_port", "metrics_port", "http_metadata_server_port"):
        if not values[name].isdigit():
            raise Fatal(f"ERROR: illegal value '{values[name]}' specified for int32 flag '{name}'")
    rpc = int(values["port"] or values["rpc_port"])
    ports: list[tuple[str, int, str]] = [("rpc", rpc, "tcp")]
    if values["enable_metric_reporting"] == "true":
        ports.append(("metrics", int(values["metrics_port"]), "metrics"))
    if values["enable_http_metadata_server"] == "true":
        ports.append(("metadata", int(values["http_metadata_server_port"]), "metadata"))
    return Settings(engine="mooncake", serve_http=False, extra_ports=tuple(ports), args=values)


def _argcheck() -> Any:
    """The option-snapshot checker: the image ships it as /app/argcheck.py, a source checkout
    has it in launcher.engines; None without either."""
    for module in ("argcheck", "launcher.engines.argcheck"):
        try:
            return importlib.import_module(module)
        except ImportError:
            continue
    return None


def engine_version(engine: str, env: Mapping[str, str]) -> str:
    """The version this stand-in plays: ``FLEET_ENGINE_VERSION``, else the newest option
    snapshot's -- the one its argv is checked against, and what its version endpoint says."""
    argcheck = _argcheck()
    known = tuple(argcheck.known_versions(engine)) if argcheck is not None else ()
    return env.get("FLEET_ENGINE_VERSION") or (known or ("",))[-1]


def check_engine_argv(engine: str, args: list[str], prog: str) -> None:
    """Rejects what the real parser would, via the shipped option snapshots (argcheck)."""
    argcheck = _argcheck()
    if argcheck is None:
        LOG("argcheck_missing", message="argv NOT checked: no argcheck module")
        return
    version = engine_version(engine, os.environ)
    try:
        problems = tuple(argcheck.check_argv(engine, version, tuple(args)))
    except argcheck.SnapshotNotFound as err:
        LOG("argcheck_skipped", message=f"argv NOT checked: {err}")
        return
    if problems and engine == "mooncake":  # gflags: message on stderr, exit 1
        raise Fatal(problems[0], 1)
    if problems:
        raise Fatal(f"usage: {prog} [options]\n{prog}: error: {problems[0]}", 2)


def parse_command(argv: list[str]) -> Settings:
    """``argv[0]`` names the entry point the shim was called as."""
    if not argv:
        raise Fatal("usage: server.py {sglang-launch|sglang|vllm|mooncake_master} ARGS...", 2)
    entry, rest = argv[0], argv[1:]
    if entry == "sglang-launch":
        check_engine_argv("sglang", rest, "launch_server.py")
        return parse_sglang(rest)
    if entry in ("sglang", "vllm"):
        if not rest or rest[0] != "serve":
            raise Fatal(f"usage: {entry} serve ...\n{entry}: error: expected the 'serve' command", 2)
        check_engine_argv(entry, rest[1:], f"{entry} serve")
        return parse_sglang(rest[1:]) if entry == "sglang" else parse_vllm(rest[1:])
    if entry == "mooncake_master":
        check_engine_argv("mooncake", rest, "mooncake_master")
        return parse_mooncake(rest)
    raise Fatal(f"unknown entry point {entry!r}", 2)


# ---------------------------------------------------------------------------------------------
# Interfaces (NCCL_SOCKET_IFNAME semantics)

SIOCGIFADDR = 0x8915


def interface_ipv4(name: str) -> str | None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            raw = fcntl.ioctl(s.fileno(), SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
        except OSError:
            return None
    return socket.inet_ntoa(raw[20:24])


def interfaces() -> tuple[str, ...]:
    return tuple(name for _, name in socket.if_nameindex())


def match_ifname(spec: str, names: tuple[str, ...]) -> tuple[str, ...]:
    """NCCL's rule: comma list of prefixes; ``=`` exact names; leading ``^`` excludes."""
    exclude = spec.startswith("^")
    body = spec[1:] if exclude else spec
    exact = body.startswith("=")
    items = tuple(x for x in (body[1:] if exact else body).split(",") if x)

    def hit(n: str) -> bool:
        return any(n == x if exact else n.startswith(x) for x in items)

    return tuple(n for n in names if hit(n) != exclude)


@dataclass(frozen=True, slots=True, kw_only=True)
class Nic:
    name: str | None
    ip: str | None


def pick_nic(env: dict[str, str]) -> Nic:
    """The interface Gloo/NCCL would use; a name that matches no usable NIC is fatal."""
    names = interfaces()
    chosen: Nic | None = None
    for var in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"):
        spec = env.get(var)
        if not spec:
            continue
        usable = tuple(n for n in match_ifname(spec, names) if interface_ipv4(n))
        if not usable:
            raise Fatal(f"{var}={spec}: no usable socket interface found; have {sorted(names)}")
        if chosen is None:
            chosen = Nic(name=usable[0], ip=interface_ipv4(usable[0]))
    if chosen is not None:
        return chosen
    for n in names:
        if n != "lo" and (addr := interface_ipv4(n)):
            return Nic(name=None, ip=addr)
    return Nic(name=None, ip=None)


def advertised_ip(env: dict[str, str], nic: Nic, engine: str) -> str:
    var = "SGLANG_HOST_IP" if engine == "sglang" else "VLLM_HOST_IP"
    return env.get(var) or env.get("HOST_IP") or nic.ip or "127.0.0.1"


def connect_from(nic: Nic, addr: tuple[str, int], timeout: float) -> socket.socket:
    """A TCP connection to ``addr`` leaving through ``nic`` (bound to its address)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        if nic.name:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, nic.name.encode())
        if nic.name and nic.ip:
            s.bind((nic.ip, 0))
        s.connect(addr)
    except BaseException:
        s.close()
        raise
    return s


def listen(host: str, port: int) -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind((host, port))
    except OSError as err:
        s.close()
        raise Fatal(f"bind {host or '0.0.0.0'}:{port}: {err.strerror}") from err
    s.listen(128)
    return s


def _send(conn: socket.socket, obj: dict[str, Any]) -> None:
    conn.sendall((json.dumps(obj) + "\n").encode())


def _recv_line(conn: socket.socket) -> dict[str, Any] | None:
    buf = b""
    while not buf.endswith(b"\n"):
        chunk = conn.recv(4096)
        if not chunk:
            return None
        buf += chunk
    parsed: dict[str, Any] = json.loads(buf)
    return parsed


# ---------------------------------------------------------------------------------------------
# Rendezvous (torch.distributed / NCCL init stand-in)


class Rendezvous:
    """Rank 0's store: collects one hello per rank; tells everyone once all ``nnodes`` joined;
    afterwards a closed connection means a lost rank, which is fatal for the instance."""

    def __init__(self, nnodes: int, port: int) -> None:
        self.nnodes = nnodes
        self.sock = listen("", port)
        self.lock = threading.Lock()
        self.joined: dict[int, tuple[socket.socket, dict[str, Any]]] = {}
        self.complete = False

    def serve(self) -> None:
        while True:
            conn, _ = self.sock.accept()
            threading.Thread(target=self._peer, args=(conn,), daemon=True).start()

    def _peer(self, conn: socket.socket) -> None:
        hello = _recv_line(conn)
        if hello is None:
            conn.close()
            return
        rank = int(hello.get("rank", -1))
        with self.lock:
            problem = None
            if hello.get("nnodes") != self.nnodes:
                problem = f"world size mismatch: rank {rank} says {hello.get('nnodes')}, rank 0 says {self.nnodes}"  # noqa: E501
            elif not 0 <= rank < self.nnodes or rank in self.joined or self.complete:
                problem = f"rank {rank} is invalid or already joined"
            if problem:
                _send(conn, {"error": problem})
                conn.close()
                LOG("rendezvous_reject", rank=rank, peer=hello.get("host"), reason=problem)
                return
            self.joined[rank] = (conn, hello)
            LOG("rendezvous_join", rank=rank, peer=hello.get("host"), ip=hello.get("ip"))
            if len(self.joined) == self.nnodes:
                self.complete = True
                peers = [self.joined[r][1] for r in sorted(self.joined)]
                for c, _ in self.joined.values():
                    _send(c, {"ok": True, "peers": peers})
        while True:  # watch the rank: EOF means it died
            try:
                data = conn.recv(4096)
            except OSError:
                data = b""
            if data:
                continue
            with self.lock:
                self.joined.pop(rank, None)
                complete = self.complete
            if complete:
                die(f"rank {rank} ({hello.get('host')}) disconnected: process group is broken")
            LOG("rendezvous_leave", rank=rank, peer=hello.get("host"))
            return


def join(settings: Settings, nic: Nic, deadline: float) -> list[dict[str, Any]]:
    """Connects to the dist-init address (retrying until ``deadline``) and waits for all ranks."""
    assert settings.dist_addr is not None
    hello = {"rank": settings.node_rank, "nnodes": settings.nnodes, "host": LOG.host, "ip": nic.ip}
    last = "no attempt"
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise Fatal(
                f"rank {settings.node_rank}: timed out after joining nobody at "
                f"{settings.dist_addr[0]}:{settings.dist_addr[1]} ({last})"
            )
        try:
            conn = connect_from(nic, settings.dist_addr, min(left, 2.0))
        except OSError as err:
            last = err.strerror or str(err)
            time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))
            continue
        break
    _send(conn, hello)
    conn.settimeout(max(0.1, deadline - time.monotonic()))
    try:
        reply = _recv_line(conn)
    except TimeoutError:
        raise Fatal(f"rank {settings.node_rank}: timed out waiting for all {settings.nnodes} ranks")
    if reply is None or "error" in reply:
        raise Fatal(f"rank {settings.node_rank}: rendezvous refused: {(reply or {}).get('error')}")
    conn.settimeout(None)

    def watch() -> None:
        try:
            while conn.recv(4096):
                pass
        except OSError:
            pass
        die(f"rank {settings.node_rank}: lost the connection to rank 0: process group is broken")

    threading.Thread(target=watch, daemon=True).start()
    peers: list[dict[str, Any]] = reply["peers"]
    return peers


# ---------------------------------------------------------------------------------------------
# Engine state shared by the HTTP handlers


class Engine:
    def __init__(self, settings: Settings, env: dict[str, str]) -> None:
        self.s = settings
        self.env = env
        self.token_s = float(env.get("FLEET_STANDIN_TOKEN_MS", "20")) / 1000.0
        self.first_s = float(env.get("FLEET_STANDIN_FIRST_TOKEN_MS") or self.token_s * 1000.0) / 1000.0
        self.fail_every = int(env.get("FLEET_STANDIN_FAIL_EVERY", "0"))
        self.stall_after = int(env.get("FLEET_STANDIN_STALL_AFTER", "0"))
        self.generations = 0  # generation requests accepted, for FAIL_EVERY and STALL_AFTER
        self.pd_timeout = float(env.get("FLEET_STANDIN_PD_TIMEOUT", "30"))
        self.healthy = threading.Event()
        self.draining = threading.Event()
        self.aborted = threading.Event()  # SIGTERM gave up on the requests in flight: no more tokens
        self.lock = threading.Lock()
        self.inflight = 0
        self.served = 0
        self.peers: list[dict[str, Any]] = []
        self.nic = Nic(name=None, ip=None)
        self.adv_ip = "127.0.0.1"
        self.kv_port = 0
        self.rooms: dict[str, float] = {}  # prefill: bootstrap rooms seen, for the decode side
        self.rooms_cv = threading.Condition(self.lock)
        self.started = time.time()
        kv_pool = int(env.get("FLEET_STANDIN_KV_TOKENS", "65536"))
        nixl = settings.engine == "vllm" and settings.kv_config.get("kv_connector") == "NixlConnector"
        self.stats = Stats(settings.engine, settings.served_name, max(1, settings.max_running), kv_pool, kv_transfers=nixl)

    # -- bookkeeping
    def enter(self) -> bool:
        with self.lock:
            if self.draining.is_set():
                return False
            self.inflight += 1
            return True

    def injection(self) -> str | None:
        """Counts a generation request; ``"fail"`` for every ``fail_every``-th one
        (FLEET_STANDIN_FAIL_EVERY), ``"stall"`` for every one after the ``stall_after``-th
        (FLEET_STANDIN_STALL_AFTER), None for the rest."""
        with self.lock:
            self.generations += 1
            if self.fail_every > 0 and self.generations % self.fail_every == 0:
                return "fail"
            if 0 < self.stall_after < self.generations:
                return "stall"
            return None

    def leave(self) -> None:
        with self.lock:
            self.inflight -= 1
            self.served += 1

    def idle(self) -> bool:
        with self.lock:
            return self.inflight == 0

    # -- PD, prefill side
    def note_room(self, room: str) -> None:
        with self.rooms_cv:
            self.rooms[room] = time.time()
            self.rooms_cv.notify_all()

    def serve_kv(self, sock: socket.socket) -> None:
        """KV 'transfer' endpoint: a decode sends a room; we answer once that room was prefilled."""
        while True:
            conn, peer = sock.accept()
            threading.Thread(target=self._kv_peer, args=(conn, peer), daemon=True).start()

    def _kv_peer(self, conn: socket.socket, peer: tuple[str, int]) -> None:
        with conn:
            try:
                req = _recv_line(conn)
            except OSError:
                return
            if req is None:
                return
            room = str(req.get("room"))
            with self.rooms_cv:
                ok = self.rooms_cv.wait_for(lambda: room in self.rooms, timeout=self.pd_timeout)
            LOG("kv_transfer", room=room, decode=req.get("host"), decode_ip=peer[0], ok=ok)
            try:
                _send(conn, {"ok": ok, "room": room, "prefill_host": LOG.host})
            except OSError:
                pass

    # -- PD, decode side
    def fetch_kv(self, body: dict[str, Any]) -> dict[str, Any]:
        """Pulls the KV for this request from its prefill; raises RuntimeError on failure."""
        if self.s.engine == "sglang":
            host, room = body.get("bootstrap_host"), body.get("bootstrap_room")
            port = body.get("bootstrap_port") or self.s.bootstrap_port
            if host is None or room is None:
                raise RuntimeError("decode request without bootstrap_host/bootstrap_room")
            url = f"http://{_urlhost(str(host))}:{port}/route"
            try:
                with urllib.request.urlopen(url, timeout=self.pd_timeout) as r:
                    route = json.loads(r.read())
            except (OSError, ValueError) as err:
                raise RuntimeError(f"bootstrap server {host}:{port} unreachable: {err}") from err
            target = (route["rank_ip"], int(route["rank_port"]))
        else:
            params = body.get("kv_transfer_params") or {}
            if "remote_host" not in params:
                raise RuntimeError("decode request without kv_transfer_params.remote_host")
            room = params.get("remote_request_id")
            target = (params["remote_host"], int(params["remote_port"]))
        try:
            with connect_from(self.nic, target, self.pd_timeout) as conn:
                _send(conn, {"room": str(room), "host": LOG.host})
                reply = _recv_line(conn)
        except OSError as err:
            raise KvFailure(f"KV transfer from {target[0]}:{target[1]} failed: {err}", "handshake_setup_failed") from err
        if not reply or not reply.get("ok"):
            raise KvFailure(f"KV transfer for room {room}: prefill never had it", "transfer_failed")
        return {"prefill_host": reply["prefill_host"], "bootstrap_room": room}


class KvFailure(RuntimeError):
    """The decode could not pull a request's KV; ``kind`` is vLLM's NIXL failure name."""

    def __init__(self, message: str, kind: str) -> None:
        super().__init__(message)
        self.kind = kind


def engine_error(where: str, message: str) -> None:
    """One line on stderr in vLLM's logger format (``ERROR MM-DD HH:MM:SS [file.py:line] ...``):
    the engine's own error line fleet quotes (the PD canary, ``launcher/deploy/crossing.py``)."""
    sys.stderr.write(f"ERROR {time.strftime('%m-%d %H:%M:%S')} [{where}] {message}\n")
    sys.stderr.flush()


def _urlhost(host: str) -> str:
    return f"[{host}]" if ":" in host else host


# ---------------------------------------------------------------------------------------------
# HTTP


def _tokens(n: int) -> Iterator[str]:
    for i in range(n):
        yield (" " if i else "") + WORDS[i % len(WORDS)]


def _prompt_text(body: dict[str, Any]) -> str:
    if "messages" in body:
        return " ".join(str(m.get("content", "")) for m in body["messages"])
    return str(body.get("prompt", body.get("text", "")))


def _prompt_tokens(body: dict[str, Any]) -> int:
    return max(1, len(_prompt_text(body).split()))


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    engine: Engine  # set on the subclass made per server

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass  # one JSON line per request instead

    # -- helpers
    def _json(self, status: int, obj: Any) -> None:
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _empty(self, status: int) -> None:
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _ready(self) -> bool:
        return self.engine.healthy.is_set() and not self.engine.draining.is_set()

    # -- GET
    def do_GET(self) -> None:  # noqa: N802 - stdlib name
        e, s = self.engine, self.engine.s
        path = self.path.split("?", 1)[0]
        if path in ("/health", "/health_generate", "/ready"):
            if path == "/health_generate" and self._ready():
                time.sleep(e.token_s)
            self._empty(200 if self._ready() else 503)
        elif path in ("/model_info", "/get_model_info"):
            self._json(200, {
                "model_path": s.model, "tokenizer_path": s.model, "is_generation": True,
                "served_model_name": s.served_name, "weight_version": "default",
                "has_image_understanding": False, "has_audio_understanding": False,
                "preferred_sampling_params": None,
            })  # fmt: skip
        elif path in ("/server_info", "/get_server_info"):
            self._json(200, {
                **s.args, "version": f"{engine_version(s.engine, e.env)} (fleet stand-in)",
                "engine": s.engine, "role": s.role, "host_name": LOG.host,
                "peers": e.peers, "healthy": self._ready(), "requests_served": e.served,
            })  # fmt: skip
        elif path == "/v1/models":
            self._json(200, {"object": "list", "data": [{
                "id": s.served_name, "object": "model", "created": int(e.started),
                "owned_by": s.engine, "root": s.model, "max_model_len": 131072,
            }]})  # fmt: skip
        elif path == "/version":
            # vLLM's /version: {"version": vllm.__version__}; this one says it is a stand-in
            self._json(200, {"version": f"{engine_version(s.engine, e.env)} (fleet stand-in)"})
        elif path == "/metrics" and s.metrics:
            data = e.stats.render()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        else:
            self._json(404, {"detail": "Not Found"})

    # -- POST
    def do_POST(self) -> None:  # noqa: N802 - stdlib name
        path = self.path.split("?", 1)[0]
        kinds = {"/generate": "generate", "/v1/completions": "completion",
                 "/v1/chat/completions": "chat"}  # fmt: skip
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if path not in kinds:
            self._json(404, {"detail": "Not Found"})
            return
        try:
            body: dict[str, Any] = json.loads(raw or b"{}")
        except ValueError:
            self._json(400, {"error": {"message": "request body is not JSON", "code": 400}})
            return
        if not self._ready() or not self.engine.enter():
            self._json(503, {"error": {"message": "server is not ready", "code": 503}})
            return
        try:
            injected = self.engine.injection()
            if injected == "fail":
                LOG("request_failed", kind=kinds[path], error="FLEET_STANDIN_FAIL_EVERY")
                self._json(500, {"error": {"message": "injected failure (FLEET_STANDIN_FAIL_EVERY)", "code": 500}})
                return
            with self.engine.stats.admitted(_prompt_tokens(body)) as timing:
                if injected == "stall":
                    self._stall(kinds[path])
                else:
                    self._generate(kinds[path], body, timing)
        finally:
            self.engine.leave()

    def _generate(self, kind: str, body: dict[str, Any], timing: Request) -> None:
        e, s = self.engine, self.engine.s
        rid = str(body.get("rid") or self.headers.get("X-Request-Id") or os.urandom(8).hex())
        origin: dict[str, Any] = {"host": LOG.host, "role": s.role}
        if e.env.get("FLEET_GENERATION"):
            origin["generation"] = e.env["FLEET_GENERATION"]
        room = body.get("bootstrap_room")
        if room is not None:
            origin["bootstrap_room"] = room
        if s.pd_mode == "decode":
            t_kv = time.monotonic()
            try:
                origin.update(e.fetch_kv(body))
                e.stats.transferred(time.monotonic() - t_kv)
            except RuntimeError as err:
                e.stats.transferred(None)
                LOG("request_failed", rid=rid, kind=kind, error=str(err), bootstrap_room=room)
                if s.engine == "vllm" and isinstance(err, KvFailure):
                    # vLLM's decode logs the NIXL failure, then fails the request (measured with
                    # the side channel refused: the router answered 500; docs/real-engine.md)
                    engine_error("nixl_connector.py", f"NIXL transfer failure: {err.kind} | Context: {err}")
                    self._generation_error(bool(body.get("stream")))
                    return
                self._json(500, {"error": {"message": str(err), "code": 500}})
                return
            origin["decode_host"] = LOG.host
        kv_params = None
        if s.pd_mode == "prefill":
            origin["prefill_host"] = LOG.host
            if s.engine == "sglang" and room is not None:
                e.note_room(str(room))
            if s.engine == "vllm":
                kv_params = {
                    "do_remote_prefill": True, "remote_engine_id": LOG.host,
                    "remote_request_id": rid, "remote_host": e.adv_ip, "remote_port": e.kv_port,
                    "remote_block_ids": [0],
                }  # fmt: skip
                e.note_room(rid)
        sp = body.get("sampling_params") or {}
        want = body.get("max_tokens", body.get("max_completion_tokens", sp.get("max_new_tokens")))
        n = max(0, min(int(want if want is not None else 16), 8192))
        if s.pd_mode == "prefill":
            n = min(n, 1)  # a prefill emits the first token; decode produces the rest
        prompt = _prompt_tokens(body)
        created = int(time.time())
        model = str(body.get("model") or s.served_name)
        ident = ("chatcmpl-" if kind == "chat" else "cmpl-") + rid
        usage = {"prompt_tokens": prompt, "completion_tokens": n, "total_tokens": prompt + n}
        # the prompt's digest: a client's prompt reuse (the same prompt sent twice) shows in the log
        digest = hashlib.sha256(_prompt_text(body).encode()).hexdigest()[:16]
        LOG("request_start", rid=rid, kind=kind, max_tokens=n, prompt_sha=digest, **_origin_fields(origin))
        stream = bool(body.get("stream"))
        sent_text = []
        arrived = time.monotonic()
        try:
            if stream:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Connection", "close")
                self.end_headers()
                self.close_connection = True
                if kind == "chat":
                    self._sse(_chunk(ident, created, model, {"role": "assistant", "content": ""}))
            for i, tok in enumerate(_tokens(n)):
                time.sleep(max(0.0, arrived + e.first_s + i * e.token_s - time.monotonic()))
                if e.aborted.is_set():  # no further token; the connection stays open until the kill
                    threading.Event().wait()
                timing.token()
                sent_text.append(tok)
                if not stream:
                    continue
                if kind == "chat":
                    self._sse(_chunk(ident, created, model, {"content": tok}))
                elif kind == "completion":
                    self._sse({"id": ident, "object": "text_completion", "created": created,
                               "model": model, "choices": [{"index": 0, "text": tok,
                               "finish_reason": None}]})  # fmt: skip
                else:
                    self._sse({"text": "".join(sent_text), "meta_info": {
                        "id": rid, "completion_tokens": len(sent_text), "prompt_tokens": prompt,
                        "finish_reason": None}})  # fmt: skip
            text = "".join(sent_text)
            finish = "length"
            if kind == "chat":
                full: dict[str, Any] = {
                    "id": ident, "object": "chat.completion", "created": created, "model": model,
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                 "finish_reason": finish}],
                    "usage": usage, "fleet_standin": origin,
                }  # fmt: skip
                last: dict[str, Any] = _chunk(ident, created, model, {}, finish)
            elif kind == "completion":
                full = {
                    "id": ident, "object": "text_completion", "created": created, "model": model,
                    "choices": [{"index": 0, "text": text, "finish_reason": finish}],
                    "usage": usage, "fleet_standin": origin,
                }  # fmt: skip
                last = {"id": ident, "object": "text_completion", "created": created,
                        "model": model, "choices": [{"index": 0, "text": "",
                        "finish_reason": finish}]}  # fmt: skip
            else:
                meta = {"id": rid, "prompt_tokens": prompt, "completion_tokens": n,
                        "finish_reason": {"type": "length", "length": n}, **origin}  # fmt: skip
                full = {"text": text, "meta_info": meta, "fleet_standin": origin}
                last = full
            if kv_params is not None:
                full["kv_transfer_params"] = kv_params
            if stream:
                last = dict(last, fleet_standin=origin)
                if kind != "generate" and (body.get("stream_options") or {}).get("include_usage"):
                    last["usage"] = usage
                self._sse(last)
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()
            else:
                self._json(200, full)
        except (BrokenPipeError, ConnectionResetError):
            LOG("request_aborted", rid=rid, kind=kind, tokens=len(sent_text), reason="client gone")
            return
        LOG("request", rid=rid, kind=kind, tokens=n, stream=stream, **_origin_fields(origin))

    def _stall(self, kind: str) -> None:
        """Sends nothing until the client closes its end (FLEET_STANDIN_STALL_AFTER; the request
        counts as running meanwhile): a closed connection reads as readable with no bytes left."""
        LOG("request_start", kind=kind, stalled=True)
        while not self.engine.aborted.is_set():
            readable, _, _ = select.select([self.connection], [], [], 0.2)
            if not readable:
                continue
            try:
                gone = not self.connection.recv(1, socket.MSG_PEEK)
            except ConnectionResetError:
                gone = True
            if gone:
                LOG("request_aborted", kind=kind, tokens=0, reason="client gone")
                return
            time.sleep(0.2)  # bytes of a next request wait unread, as a wedged engine leaves them
        threading.Event().wait()  # SIGTERM gave up on the requests in flight: open until the kill

    def _generation_error(self, stream: bool) -> None:
        """vLLM's answer to a request whose generation failed (finish_reason "error", as a KV load
        failure ends it; vllm/entrypoints/generate/base/serving.py raises GenerationError): 500 and
        its ErrorResponse; streamed, the 200 stream already begun carries it as an event."""
        if not stream:
            self._json(500, VLLM_GENERATION_ERROR)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        self._sse(VLLM_GENERATION_ERROR)
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()

    def _sse(self, obj: dict[str, Any]) -> None:
        self.wfile.write(b"data: " + json.dumps(obj).encode() + b"\n\n")
        self.wfile.flush()


def _origin_fields(origin: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in origin.items() if k not in ("host", "role", "generation")}


def _chunk(ident: str, created: int, model: str, delta: dict[str, Any],
           finish: str | None = None) -> dict[str, Any]:  # fmt: skip
    return {"id": ident, "object": "chat.completion.chunk", "created": created, "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}  # fmt: skip


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128


def serve_http(engine: Engine) -> _Server:
    handler = type("BoundHandler", (Handler,), {"engine": engine})
    try:
        server = _Server((engine.s.host, engine.s.port), handler)
    except OSError as err:
        raise Fatal(f"bind {engine.s.host or '0.0.0.0'}:{engine.s.port}: {err.strerror}") from err
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


class _BootstrapHandler(http.server.BaseHTTPRequestHandler):
    """SGLang's bootstrap server on the prefill: tells decodes where the prefill's KV lives."""

    engine: Engine

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass

    def do_GET(self) -> None:  # noqa: N802
        if self.path.startswith("/route") or self.path.startswith("/health"):
            data = json.dumps({"rank_ip": self.engine.adv_ip, "rank_port": self.engine.kv_port,
                               "host": LOG.host}).encode()  # fmt: skip
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
        else:
            data = b"{}"
            self.send_response(404)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


# ---------------------------------------------------------------------------------------------
# Mooncake store client (SGLang's HiCache storage backend ``mooncake``)

MOONCAKE_RPC_FAIL = -900  # Mooncake's ErrorCode::RPC_FAIL


@dataclass(frozen=True, slots=True, kw_only=True)
class StoreConfig:
    master: str  # HOST:PORT of the master's RPC
    metadata: str  # P2PHANDSHAKE, an http:// metadata URL, or another server's address
    local_hostname: str
    segment: str  # global segment size as configured (the instance's, before SGLang splits it)


def _has_master(config: dict[str, Any]) -> bool:
    return bool(config.get("master_server_address") or config.get("client_server_address"))


def store_config(settings: Settings, env: dict[str, str]) -> StoreConfig:
    """SGLang's precedence: extra config naming a master > JSON file > env (messages as SGLang's)."""
    if _has_master(settings.store_extra):
        src = settings.store_extra
    elif path := env.get("SGLANG_HICACHE_MOONCAKE_CONFIG_PATH"):
        try:
            src = json.loads(Path(path).read_text())
        except (OSError, ValueError) as err:
            raise Fatal(f"RuntimeError: Failed to load config from {path}: {err}") from err
        if not isinstance(src, dict) or not _has_master(src):
            raise Fatal("ValueError: Either master_server_address or client_server_address is required in config file")
    else:
        if not env.get("MOONCAKE_MASTER") and not env.get("MOONCAKE_CLIENT"):
            raise Fatal("ValueError: Either the environment variable 'MOONCAKE_MASTER' or 'MOONCAKE_CLIENT' is not set.")
        src = {
            "master_server_address": env.get("MOONCAKE_MASTER", ""),
            "metadata_server": env.get("MOONCAKE_TE_META_DATA_SERVER", "P2PHANDSHAKE"),
            "local_hostname": env.get("MOONCAKE_LOCAL_HOSTNAME") or env.get("LOCAL_HOSTNAME") or "localhost",
            "global_segment_size": env.get("MOONCAKE_GLOBAL_SEGMENT_SIZE", "4gb"),
        }
    segment = str(src.get("global_segment_size") or "4gb")
    segment_bytes(segment)
    master = str(src.get("master_server_address") or "")
    if not master:  # a standalone mooncake_client (MOONCAKE_CLIENT) is not played here
        raise Fatal("Failed to setup Mooncake store: no master_server_address (the stand-in plays no mooncake_client)")
    return StoreConfig(
        master=master, metadata=str(src.get("metadata_server") or "P2PHANDSHAKE"),
        local_hostname=str(src.get("local_hostname") or "localhost"),
        segment=segment,
    )  # fmt: skip


def segment_bytes(size: str) -> int:
    """SGLang's reading of global_segment_size: ``<n>gb`` (GiB) or a plain byte count, nothing else."""
    text = size.strip().lower()
    try:
        return int(text[:-2].strip()) << 30 if text.endswith("gb") else int(text)
    except ValueError:
        raise Fatal(f"ValueError: invalid global_segment_size {size!r}: SGLang reads <n>gb or bytes") from None


def _setup_failed(what: str, err: object) -> Fatal:
    """SGLang's one line; the cause is the OS's words (``Connection refused``, ``timed out``)."""
    cause = getattr(err, "reason", err)  # urllib wraps the socket error
    words = getattr(cause, "strerror", None) or str(cause) or type(cause).__name__
    return Fatal(f"Failed to setup Mooncake store, error code: {MOONCAKE_RPC_FAIL} ({what}: {words})")


def _publish_metadata(cfg: StoreConfig, timeout: float) -> None:
    """The transfer engine registers this client with the metadata server the config names."""
    if cfg.metadata == "P2PHANDSHAKE":
        return
    if cfg.metadata.startswith(("http://", "https://")):
        key = f"mooncake/rpc_meta/{cfg.local_hostname}"
        body = json.dumps({"ip_or_host_name": cfg.local_hostname, "rpc_port": 0}).encode()
        req = urllib.request.Request(f"{cfg.metadata}?key={key}", data=body, method="PUT")
        try:
            with urllib.request.urlopen(req, timeout=timeout):
                return
        except (OSError, ValueError) as err:
            raise _setup_failed(f"metadata server {cfg.metadata}", err) from err
    address = cfg.metadata.split("://", 1)[-1].split(";", 1)[0].split("/", 1)[0]  # etcd://H:P;H2:P2
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise _setup_failed("metadata server", f"{cfg.metadata!r} is not P2PHANDSHAKE, a URL or HOST:PORT")
    try:
        socket.create_connection((host, int(port)), timeout=timeout).close()
    except OSError as err:
        raise _setup_failed(f"metadata server {cfg.metadata}", err) from err


def join_store(engine: Engine) -> None:
    """Publishes the metadata, mounts the segment at the master (one attempt each, as SGLang's
    setup() makes); keeps the master connection open for the process's life."""
    s, env = engine.s, engine.env
    cfg = store_config(s, env)
    timeout = float(env.get("FLEET_STANDIN_STORE_TIMEOUT", "5"))
    _publish_metadata(cfg, timeout)
    host, _, port = cfg.master.rpartition(":")
    if not host or not port.isdigit():
        raise _setup_failed("master", f"{cfg.master!r} is not HOST:PORT")
    hello = {"op": "mount_segment", "client": cfg.local_hostname, "host": LOG.host, "role": s.role,
             "rank": s.node_rank, "segment": cfg.segment}  # fmt: skip
    try:
        conn = socket.create_connection((host.strip("[]"), int(port)), timeout=timeout)
        _send(conn, hello)
        reply = _recv_line(conn)
    except (OSError, ValueError) as err:
        raise _setup_failed(f"master {cfg.master}", err) from err
    if not reply or not reply.get("ok"):
        conn.close()
        raise _setup_failed(f"master {cfg.master}", "the master refused the segment")
    conn.settimeout(None)
    LOG("store_connected", master=cfg.master, metadata=cfg.metadata, segment=cfg.segment)

    def watch() -> None:
        with conn:
            try:
                while conn.recv(4096):
                    pass
            except OSError:
                pass
        LOG("store_master_lost", master=cfg.master)

    threading.Thread(target=watch, daemon=True).start()


# ---------------------------------------------------------------------------------------------
# Mooncake master


class StoreClients:
    """The master's record of mounted store clients: one per open client connection."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.clients: dict[int, dict[str, Any]] = {}

    def serve(self, sock: socket.socket) -> None:
        while True:
            conn, peer = sock.accept()
            LOG("rpc_connect", peer=peer[0])
            threading.Thread(target=self._client, args=(conn, peer[0]), daemon=True).start()

    def _client(self, conn: socket.socket, peer: str) -> None:
        with conn:
            try:
                hello = _recv_line(conn)
            except (OSError, ValueError):
                return
            if hello is None or hello.get("op") != "mount_segment":
                return
            client = {k: str(hello.get(k, "")) for k in ("host", "role", "rank", "client", "segment")}
            with self.lock:
                self.clients[id(conn)] = {**client, "peer": peer}
            LOG("store_client_mounted", **client, peer=peer)
            try:
                _send(conn, {"ok": True})
                while conn.recv(4096):
                    pass
            except OSError:
                pass
            with self.lock:
                self.clients.pop(id(conn), None)
            LOG("store_client_gone", **client, peer=peer)

    def metrics(self) -> bytes:
        with self.lock:
            clients = sorted(self.clients.values(), key=lambda c: (c["host"], c["rank"]))
        lines = [f"master_active_clients {len(clients)}"]
        for c in clients:
            labels = ",".join(f'{k}="{c[k]}"' for k in ("host", "role", "rank", "client", "peer", "segment"))
            lines.append(f"mooncake_standin_store_client{{{labels}}} 1")
        return ("\n".join(lines) + "\n").encode()


class _MetaHandler(http.server.BaseHTTPRequestHandler):
    """Mooncake's HTTP metadata server (``/metadata?key=``) and the master's /metrics."""

    store: dict[str, bytes] = {}
    kind = "metadata"
    clients: StoreClients | None = None  # the master's record (metrics only)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass

    def _reply(self, status: int, data: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _key(self) -> str | None:
        from urllib.parse import parse_qs, urlsplit

        parts = urlsplit(self.path)
        if self.kind == "metrics" or parts.path != "/metadata":
            return None
        return parse_qs(parts.query).get("key", [""])[0]

    def do_GET(self) -> None:  # noqa: N802
        if self.kind == "metrics":
            recorded = self.clients.metrics() if self.clients else b""
            self._reply(200, b"master_key_count %d\n" % len(self.store) + recorded)
            return
        key = self._key()
        if key is None:
            self._reply(404, b"")
        elif key in self.store:
            self._reply(200, self.store[key])
        else:
            self._reply(404, b"metadata not found")

    def do_PUT(self) -> None:  # noqa: N802
        key = self._key()
        n = int(self.headers.get("Content-Length") or 0)
        if key is None:
            self._reply(404, b"")
            return
        self.store[key] = self.rfile.read(n)
        self._reply(200, b"metadata updated")

    def do_DELETE(self) -> None:  # noqa: N802
        key = self._key()
        self.store.pop(key or "", None)
        self._reply(200, b"metadata deleted")


def run_mooncake(settings: Settings, engine: Engine) -> None:
    clients = StoreClients()
    for name, port, kind in settings.extra_ports:
        if kind == "tcp":
            sock = listen(settings.args.get("rpc_address", ""), port)
            threading.Thread(target=clients.serve, args=(sock,), daemon=True).start()
        else:
            handler = type(f"{name}Handler", (_MetaHandler,), {"kind": kind, "store": {}, "clients": clients})
            try:
                srv = _Server(("", port), handler)
            except OSError as err:
                raise Fatal(f"bind 0.0.0.0:{port}: {err.strerror}") from err
            threading.Thread(target=srv.serve_forever, daemon=True).start()
        LOG("listening", what=name, port=port)
    engine.healthy.set()


# ---------------------------------------------------------------------------------------------
# Main


STOP_SIGNALS = {signal.SIGTERM, signal.SIGINT}


def stop(engine: Engine, signum: int) -> None:
    """SIGTERM/SIGINT as the played engine handles them.  From the signal on nothing new is
    admitted (503) and /health answers 503; requests in flight:

    - vLLM ``--shutdown-timeout N`` (measured with 0.32, docs/real-engine.md): with 0, its
      default, the engine is stopped at once -- the requests in flight get no further token and
      the server waits on their open connections, so the process stays until SIGKILL (exit 0 at
      once when nothing is in flight); with N > 0 they finish and it exits 0, and those still
      running after N s are aborted as with 0 (that expiry was not measured);
    - SGLang (its tokenizer manager's SIGTERM watchdog): it waits for every request in flight,
      however long, then exits 0 (its 5 s polling of the count and ``SGL_FORCE_SHUTDOWN`` are
      not played);
    - the Mooncake master serves no requests: it exits 0 at once.
    """

    if engine.draining.is_set():
        return
    engine.draining.set()
    LOG("draining", signal=signal.Signals(signum).name, inflight=engine.inflight,
        shutdown_timeout=engine.s.shutdown_timeout)  # fmt: skip

    def finish() -> None:
        limit = engine.s.shutdown_timeout
        deadline = None if limit is None else time.monotonic() + limit
        while not engine.idle() and (deadline is None or time.monotonic() < deadline):
            time.sleep(0.02)
        if not engine.idle():
            engine.aborted.set()
            LOG("aborted", inflight=engine.inflight)
            return  # the process stays, holding the aborted requests' connections, until killed
        LOG("exit", code=0)
        sys.stdout.flush()
        os._exit(0)

    threading.Thread(target=finish, daemon=True).start()


def start(argv: list[str], env: dict[str, str]) -> Engine:
    """Parses, checks and starts everything that runs in the background; returns the engine.
    Raises :class:`Fatal` for what a real engine would die of during start-up."""
    settings = parse_command(argv)
    LOG.role = settings.role
    engine = Engine(settings, env)
    fail = env.get("FLEET_STANDIN_FAIL", "")
    LOG("start", engine=settings.engine, argv=argv[1:], rank=settings.node_rank,
        nnodes=settings.nnodes, fail=fail or None)  # fmt: skip
    if fail == "crash-at-start":
        raise Fatal("injected failure: crash-at-start")
    if fail.startswith("crash-after:"):
        delay = float(fail.split(":", 1)[1])
        threading.Timer(delay, die, args=("injected failure: " + fail,)).start()
    if settings.engine == "mooncake":
        run_mooncake(settings, engine)
        return engine
    engine.nic = pick_nic(env)
    engine.adv_ip = advertised_ip(env, engine.nic, settings.engine)
    if settings.serve_http:
        serve_http(engine)
        LOG("listening", what="http", bind=settings.host or "0.0.0.0", port=settings.port)
    if settings.pd_mode == "prefill" and settings.node_rank == 0:
        kv = listen(engine.adv_ip, 0)  # fails if the advertised IP is not this host's
        engine.kv_port = kv.getsockname()[1]
        if settings.engine == "sglang":
            threading.Thread(target=engine.serve_kv, args=(kv,), daemon=True).start()
            handler = type("Boot", (_BootstrapHandler,), {"engine": engine})
            try:
                boot = _Server(("", settings.bootstrap_port), handler)
            except OSError as err:
                raise Fatal(f"bootstrap port {settings.bootstrap_port}: {err.strerror}") from err
            threading.Thread(target=boot.serve_forever, daemon=True).start()
        else:
            engine.kv_port = _nixl_side_channel(env, kv, engine)
    threading.Thread(target=_bring_up, args=(engine, fail), daemon=True).start()
    return engine


def _nixl_side_channel(env: dict[str, str], kv: socket.socket, engine: Engine) -> int:
    """vLLM's NIXL side channel listens on VLLM_NIXL_SIDE_CHANNEL_HOST:PORT (localhost, 5600)."""
    kv.close()
    host = env.get("VLLM_NIXL_SIDE_CHANNEL_HOST", "localhost")
    port = int(env.get("VLLM_NIXL_SIDE_CHANNEL_PORT", "5600"))
    try:
        addr = socket.gethostbyname(host)
    except OSError as err:
        raise Fatal(f"VLLM_NIXL_SIDE_CHANNEL_HOST={host}: {err}") from err
    sock = listen(addr, port)
    engine.adv_ip = host
    threading.Thread(target=engine.serve_kv, args=(sock,), daemon=True).start()
    return port


def _bring_up(engine: Engine, fail: str) -> None:
    s, env = engine.s, engine.env
    try:
        delay = float(env.get("FLEET_STANDIN_START_DELAY", "0"))
        time.sleep(delay)
        if s.nnodes > 1:
            timeout = float(env.get("FLEET_STANDIN_DIST_TIMEOUT", "60"))
            deadline = time.monotonic() + timeout
            if s.node_rank == 0:
                assert s.dist_addr is not None
                rdv = Rendezvous(s.nnodes, s.dist_addr[1])
                threading.Thread(target=rdv.serve, daemon=True).start()
            engine.peers = join(s, engine.nic, deadline)
            LOG("rendezvous_done", peers=[f"rank{p['rank']}:{p['host']}@{p['ip']}" for p in engine.peers])
        if s.store == "mooncake":
            join_store(engine)
        if fail == "never-healthy":
            LOG("never_healthy")
            return
        engine.healthy.set()
        LOG("ready", port=s.port if s.serve_http else None)
    except Fatal as err:
        die(str(err), err.code)
    except Exception as err:  # a bug here must still end the process, not hang it unhealthy
        die(f"stand-in error: {err!r}")


def main(argv: list[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    # Blocked before any thread exists, so every thread inherits the mask and the main thread
    # takes the signals with sigwait.  (A Python handler runs only in the main thread: a signal
    # the kernel delivered to an HTTP thread left the main thread asleep, the stop unhandled.)
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        engine = start(args, dict(os.environ))
    except Fatal as err:
        if err.code == 2:  # a usage error: exactly what argparse prints
            sys.stderr.write(str(err) + "\n")
            sys.stderr.flush()
            os._exit(2)
        die(str(err), err.code)
    while True:
        stop(engine, signal.sigwait(STOP_SIGNALS))


if __name__ == "__main__":
    main()
