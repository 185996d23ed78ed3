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
"""

from __future__ import annotations

from launcher.model import TransferBackend

SGLANG_ROUTER: tuple[str, ...] = ("python3", "-m", "sglang_router.launch_router")
VLLM_ROUTER: tuple[str, ...] = ("vllm-router",)
GATEWAY_ARGV: tuple[str, ...] = ("openresty", "-g", "daemon off;")
GATEWAY_CONF_PATH = "/etc/nginx/conf.d/default.conf"  # where openresty images include server blocks


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
        "  location = /health {\n"
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
