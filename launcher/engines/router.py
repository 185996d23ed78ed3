"""Request routing in front of the engines: the PD router, the regular router and the gateway.

Contract: pure builders.  SGLang PD uses ``sglang_router.launch_router --pd-disaggregation``
(the router tells prefill and decode each request's bootstrap address).  vLLM PD uses
``vllm-router --vllm-pd-disaggregation``: vLLM's KV connectors need the two-stage request flow
(prefill with ``max_tokens=1`` then decode, one request id) that vllm-router implements over HTTP;
sglang-router only drives vLLM workers over gRPC, which the catalog's ``vllm serve`` units do not
start.  In front of non-PD instances the same two routers run in regular mode (``--worker-urls``,
the routers' default cache-aware policy).  The gateway is openresty with one generated server
block (:func:`gateway_conf`).
"""

from __future__ import annotations

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


def vllm_pd_argv(prefill: tuple[str, ...], decode: tuple[str, ...], port: int) -> tuple[str, ...]:
    out: list[str] = [*VLLM_ROUTER, "--vllm-pd-disaggregation"]
    for url in prefill:
        out += ["--prefill", url]
    for url in decode:
        out += ["--decode", url]
    out += ["--host", "0.0.0.0", "--port", str(port)]
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
