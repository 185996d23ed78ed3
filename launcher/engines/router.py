"""Request routing in front of the engines: the PD router, the regular router and the gateway.

Contract: pure builders.  SGLang PD uses ``sglang_router.launch_router --pd-disaggregation``
(the router tells prefill and decode each request's bootstrap address).  vLLM PD uses
``vllm-router --vllm-pd-disaggregation``: vLLM's KV connectors need the two-stage request flow
(prefill with ``max_tokens=1`` then decode, one request id) that vllm-router implements over HTTP;
sglang-router only drives vLLM workers over gRPC, which the catalog's ``vllm serve`` units do not
start.  In front of non-PD instances the same two routers run in regular mode (``--worker-urls``,
the routers' default cache-aware policy).  The gateway is openresty with one generated server
block (:func:`gateway_conf`).

vllm-router facts are from the 0.1.17 package's own ``vllm_router/router_args.py`` (its argparse
front end, snapshot ``options/vllm-router-0.1.17.json``): ``--host`` and ``--prometheus-host``
default to 127.0.0.1, ``--port`` to 30000, ``--prometheus-port`` to 29000 (the metrics listener
always starts); ``--prefill URL [BOOTSTRAP_PORT]`` and ``--decode URL`` repeat per instance;
``--kv-connector`` (nixl | mooncake | moriio, default nixl) picks the PD request protocol.

What fleet needs of a running router beyond its argv is its :class:`Program` (the registry
below: :func:`of_argv`, :func:`register`): its health path, the workers a PD command line
lists, whether its PD mode takes workers over its API, and its Kubernetes service discovery.
The planner, the watch (``launcher/watch/homes.py``) and the k8s export ask it; none of them
names a router program or flag (``tests/unit/test_plugin_names.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Sequence

from launcher.engines import flags
from launcher.engines.named import Named
from launcher.model import TransferBackend

SGLANG_ROUTER: tuple[str, ...] = ("python3", "-m", "sglang_router.launch_router")
VLLM_ROUTER: tuple[str, ...] = ("vllm-router",)
GATEWAY_ARGV: tuple[str, ...] = ("openresty", "-g", "daemon off;")
GATEWAY_CONF_PATH = "/etc/nginx/conf.d/default.conf"  # where openresty images include server blocks
GATEWAY_HEALTH_PATH = "/health"  # answered by the server block itself (:func:`gateway_conf`)


def sglang_pd_argv(
    prefill: tuple[tuple[str, int], ...], decode: tuple[str, ...], port: int, metrics_port: int
) -> tuple[str, ...]:
    """``prefill`` = (rank-0 URL, bootstrap port) per prefill instance; ``decode`` = rank-0 URLs.

    Bootstrap ports are always given explicitly: a prefill without one falls back to each
    scheduler's own --disaggregation-bootstrap-port, which breaks when two prefill instances
    share a host.
    """
    out: list[str] = [*SGLANG_ROUTER, "--pd-disaggregation"]
    for url, bootstrap in prefill:
        out += ["--prefill", url, str(bootstrap)]
    for url in decode:
        out += ["--decode", url]
    out += ["--host", "0.0.0.0", "--port", str(port), "--prometheus-port", str(metrics_port)]
    return tuple(out)


VLLM_ROUTER_METRICS_PORT = 29000  # vllm-router's --prometheus-port default


def vllm_pd_argv(
    prefill: tuple[str, ...],
    decode: tuple[str, ...],
    port: int,
    metrics_port: int = VLLM_ROUTER_METRICS_PORT,
    transfer_backend: TransferBackend = "nixl",
    bootstrap_ports: tuple[int, ...] = (),
) -> tuple[str, ...]:
    """``prefill`` and ``decode`` = rank-0 URLs; ``transfer_backend`` = the router's
    ``--kv-connector`` (its request protocol must match the workers' KV connector).

    With mooncake the router asks each prefill's bootstrap server (``http://<prefill
    host>:<port>/query``) for its engine ids at start-up and hands that address to decode; the
    port is the ``--prefill`` entry's second value, 8998 when absent (vllm-router's Rust PD
    router), so ``bootstrap_ports`` (each prefill's VLLM_MOONCAKE_BOOTSTRAP_PORT, in ``prefill``
    order) is required then: two prefill instances on one host cannot both use 8998.  NIXL takes
    the prefill's KV handle from its response and needs none.

    The metrics listener is bound to all interfaces, as in :func:`vllm_argv`: left at its
    default it listens on 127.0.0.1:29000, out of the scraper's reach.
    """
    if transfer_backend == "mooncake" and len(bootstrap_ports) != len(prefill):
        raise ValueError("vllm-router with mooncake needs one bootstrap port per prefill")
    out: list[str] = [*VLLM_ROUTER, "--vllm-pd-disaggregation", "--kv-connector", transfer_backend]
    for i, url in enumerate(prefill):
        out += ["--prefill", url, *(str(p) for p in bootstrap_ports[i : i + 1])]
    for url in decode:
        out += ["--decode", url]
    out += [
        "--host", "0.0.0.0", "--port", str(port),
        "--prometheus-host", "0.0.0.0", "--prometheus-port", str(metrics_port),
    ]  # fmt: skip
    return tuple(out)


def sglang_argv(workers: tuple[str, ...], port: int, metrics_port: int) -> tuple[str, ...]:
    """Regular mode over ``workers`` (every instance's rank-0 URL, all after one ``--worker-urls``)."""
    return (
        *SGLANG_ROUTER, "--worker-urls", *workers,
        "--host", "0.0.0.0", "--port", str(port), "--prometheus-port", str(metrics_port),
    )  # fmt: skip


def vllm_argv(workers: tuple[str, ...], port: int, metrics_port: int) -> tuple[str, ...]:
    """Regular mode over ``workers``, as :func:`sglang_argv`.  vllm-router binds its HTTP and
    Prometheus listeners to 127.0.0.1 unless told otherwise; both must be reachable from the
    clients and the scraper on other hosts."""
    return (
        *VLLM_ROUTER, "--worker-urls", *workers, "--host", "0.0.0.0", "--port", str(port),
        "--prometheus-host", "0.0.0.0", "--prometheus-port", str(metrics_port),
    )  # fmt: skip


def gateway_conf(deployment: str, route: str, upstreams: tuple[str, ...], port: int) -> str:
    """The openresty server block publishing model ``route`` on ``port``.

    Requests under ``/v1/`` whose JSON body names another model get 404 (the seed's ModelRoute
    matches on the model name); bodies without a model (``GET /v1/models``) pass through.
    ``upstreams`` are ``host:port`` of the router, or of every instance's rank 0.
    """
    name = "fleet_" + "".join(c if c.isalnum() else "_" for c in deployment)
    servers = "".join(f"    server {u};\n" for u in upstreams)
    return (
        f"# fleet gateway for deployment {deployment}: model {route}\n"
        f"upstream {name} {{\n{servers}}}\n"
        "server {\n"
        f"  listen {port};\n"
        "  client_max_body_size 64m;\n"
        f"  location = {GATEWAY_HEALTH_PATH} {{\n"
        "    return 200 \"ok\\n\";\n"
        "  }\n"
        "  location /v1/ {\n"
        "    access_by_lua_block {\n"
        "      ngx.req.read_body()\n"
        "      local body = ngx.req.get_body_data()\n"
        "      local model = body and body:match('\"model\"%s*:%s*\"([^\"]*)\"')\n"
        f"      if model and model ~= \"{route}\" then\n"
        "        return ngx.exit(ngx.HTTP_NOT_FOUND)\n"
        "      end\n"
        "    }\n"
        "    proxy_http_version 1.1;\n"
        "    proxy_buffering off;\n"
        "    proxy_read_timeout 3600s;\n"
        f"    proxy_pass http://{name};\n"
        "  }\n"
        "}\n"
    )


# ---------------------------------------------------------------------------------------------
# The router programs, as fleet drives them once started
# ---------------------------------------------------------------------------------------------

# Flags that list a router's workers by address, with how many values each takes (None: every
# value up to the next flag); a ``--prefill``'s second value is its bootstrap port.  The same
# for both programs (vllm-router's argparse front end copies sglang-router's; both snapshots).
_WORKER_LISTS: dict[str, int | None] = {"--prefill": 2, "--decode": 1, "--worker-urls": None}
# Kubernetes service discovery (both programs, same flags): the leader pods are found by label.
_SELECTOR_FLAGS: tuple[str, ...] = ("--selector", "--prefill-selector", "--decode-selector")


@dataclass(frozen=True, slots=True, kw_only=True)
class PdWorker:
    """A worker as a PD router's command line lists it: its type and (prefill) bootstrap port."""

    role: Literal["prefill", "decode"]
    bootstrap_port: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Program:
    """One router program.  The methods read and rewrite the command lines this module builds;
    a plug-in's program with other flags subclasses and overrides them.

    ``health_path`` is one path segment: readers take a unit's base URL as its health URL without
    the last segment.  ``ready_path`` (one segment, or None): what a start waits for instead.
    Both routers answer /health as soon as they listen, sglang-router 0.3.2 before it has
    registered its ``--worker-urls`` (its /workers empty meanwhile; measured under load); its
    /readiness answers 503 "insufficient healthy workers" until a worker is healthy (with every
    worker dead, /health and /liveness still answer 200), 200 after; vllm-router 0.1.17's answers
    200 ``{"status":"ready",...}`` with its healthy workers counted, in regular and PD mode
    (measured).  ``pd_adds_workers``: its PD mode takes workers over its worker API
    (``POST /workers``); sglang-router 0.3.2 does (``worker_type``, ``bootstrap_port``);
    vllm-router 0.1.17 does not (``POST /workers`` and ``/add_worker`` answer 400 "PD router
    requires specific add_prefill_server or add_decode_server methods"; measured), so the watch
    never takes a worker out of it.  ``bootstrap_annotation``: the pod annotation its service
    discovery reads a prefill's bootstrap port from.  ``pd_inflight``: the gauges of its
    ``/metrics`` whose sum is the requests it has in flight in PD mode, every stage of one
    (empty: none known).  vllm-router 0.1.17, measured on real vLLM PD over NIXL with streams
    and plain answers in flight: ``vllm_router_pd_unknown_prefill_requests`` (at a prefill),
    ``vllm_router_pd_pending_decode_requests`` (prefilled, not yet sent to a decode: no engine
    counts these) and ``vllm_router_pd_active_decode_requests`` (at a decode), per worker, all 0
    before and after.  sglang-router 0.3.2's only in-flight gauge moves under some policies only.
    ``ready_with_one_worker``: in regular mode its readiness passes once one of its workers is
    healthy, the others dead (sglang-router 0.3.2: as above, and with a dead worker listed
    before a live one, 200 after 3.7 s, only the live one registered), so the watch may start it
    before its broken workers (:mod:`launcher.watch.loop`); vllm-router 0.1.17's regular mode
    with a worker dead is not measured, so it waits for its workers.
    """

    name: str  # the program as messages name it; also its metrics kind (launcher/observe/names.py)
    entry: tuple[str, ...]  # the argv prefix of a unit running it
    health_path: str = "/health"
    ready_path: str | None = "/readiness"
    pd_adds_workers: bool = True
    bootstrap_annotation: str = "sglang.ai/bootstrap-port"
    pd_inflight: tuple[str, ...] = ()
    ready_with_one_worker: bool = False

    def runs(self, argv: Sequence[str]) -> bool:
        return tuple(argv[: len(self.entry)]) == self.entry

    def pd_workers(self, argv: Sequence[str]) -> dict[str, PdWorker]:
        """A PD command line's ``--prefill URL [PORT]`` and ``--decode URL`` workers, by URL
        (without a trailing slash)."""
        out: dict[str, PdWorker] = {}
        for i, arg in enumerate(argv):
            if arg in ("--prefill", "--decode") and i + 1 < len(argv):
                url = argv[i + 1].rstrip("/")
                port = argv[i + 2] if arg == "--prefill" and i + 2 < len(argv) and argv[i + 2].isdigit() else None
                out[url] = PdWorker(role="prefill" if arg == "--prefill" else "decode",
                                    bootstrap_port=int(port) if port is not None else None)  # fmt: skip
        return out

    def is_pd(self, argv: Sequence[str]) -> bool:
        """Whether the command line runs the PD mode (it lists prefill workers)."""
        return flags.has(tuple(argv), ("--prefill",))

    def discovery_argv(
        self, argv: Sequence[str], port: int, namespace: str, *, selector: Sequence[str] = (),
        prefill: Sequence[str] = (), decode: Sequence[str] = (),
    ) -> tuple[str, ...]:  # fmt: skip
        """``argv`` with the workers it lists by address replaced by Kubernetes service discovery
        in ``namespace`` at the engines' ``port``: label selectors (``key=value`` each) of the
        prefill and decode leader pods (PD mode, :meth:`is_pd`), else ``selector``."""
        out: list[str] = []
        i = 0
        while i < len(argv):
            a = argv[i]
            if a in _WORKER_LISTS:
                count = _WORKER_LISTS[a]
                i += 1
                taken = 0
                while i < len(argv) and not argv[i].startswith("--") and (count is None or taken < count):
                    if taken == 1 and a == "--prefill" and not (argv[i].isdigit() or argv[i] == "none"):
                        break
                    i, taken = i + 1, taken + 1
                continue
            out.append(a)
            i += 1
        if self.is_pd(argv):
            out += ["--service-discovery", "--prefill-selector", *prefill, "--decode-selector", *decode]
        else:
            out += ["--service-discovery", "--selector", *selector]
        out += ["--service-discovery-port", str(port), "--service-discovery-namespace", namespace]
        return tuple(out)


def discovery_selectors(argv: Sequence[str]) -> list[dict[str, str]]:
    """The label selectors of the service discovery flags anywhere in ``argv`` (a pod's whole
    command, wrapper included), in order: each flag's ``key=value`` values as a dict."""
    out: list[dict[str, str]] = []
    for i, a in enumerate(argv):
        if a in _SELECTOR_FLAGS:
            pairs: dict[str, str] = {}
            for value in argv[i + 1 :]:
                if value.startswith("--"):
                    break
                k, _, v = value.partition("=")
                pairs[k] = v
            out.append(pairs)
    return out


SGLANG = Program(name="sglang-router", entry=SGLANG_ROUTER, ready_with_one_worker=True)
VLLM = Program(name="vllm-router", entry=VLLM_ROUTER, pd_adds_workers=False, pd_inflight=(
    "vllm_router_pd_unknown_prefill_requests", "vllm_router_pd_pending_decode_requests",
    "vllm_router_pd_active_decode_requests",
))
_PROGRAMS: Named[Program] = Named("router program", (SGLANG, VLLM))
register = _PROGRAMS.register  # a plug-in engine's router program
unregister = _PROGRAMS.unregister
programs = _PROGRAMS.all


def of_argv(argv: Sequence[str]) -> Program | None:
    """The program a router unit's argv runs (by its entry point); None when none is registered."""
    return next((p for p in _PROGRAMS.all() if p.runs(argv)), None)
