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

from launcher.engines import flags
from launcher.engines.context import BOOTSTRAP, HTTP, MASTER_PORT, NIXL_SIDE_CHANNEL, RAY, InstanceContext
from launcher.model import Parallelism, Recipe

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
    """NixlConnector (kv_both: the proxy decides P vs D) or MooncakeConnector (producer on
    prefill, consumer on decode); a Mooncake store adds MooncakeStoreConnector, combined with
    the PD connector through MultiConnector.  The store connector takes its client config from
    the JSON file MOONCAKE_CONFIG_PATH names (the planner writes it), never from this argv."""
    connectors: list[dict[str, object]] = []
    if ctx.pd_mode is not None:
        if ctx.transfer_backend == "nixl":
            connectors.append({"kv_connector": "NixlConnector", "kv_role": "kv_both"})
        else:
            role = "kv_producer" if ctx.pd_mode == "prefill" else "kv_consumer"
            connectors.append({"kv_connector": "MooncakeConnector", "kv_role": role})
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
