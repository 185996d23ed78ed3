"""SGLang server argv and env for one rank of one instance.

Contract: :func:`argv` is identical on every rank of an instance except ``--node-rank`` and the
host's own ``--disaggregation-ib-device``; ``--host 0.0.0.0`` is always passed (SGLang binds
127.0.0.1 by default, which a router on another host cannot reach) and ``--port`` is passed to
every rank although only rank 0 serves HTTP, so rank argv differ in the rank alone.
``--enable-metrics`` is always passed (an override can remove it): SGLang serves no ``/metrics``
without it, and ``fleet top`` and the Prometheus targets (``launcher/observe``) read it; under
attention DP ``--enable-metrics-for-all-schedulers`` goes with it (0.5.23 on), so that every
scheduler reports, not only attention-TP rank 0 of each DP group.

Entry point: ``python3 -m sglang.launch_server``.  ``sglang serve`` is the recommended spelling in
0.5.23 but does not exist in the older images the catalog also pins, and both accept the same
flags; one spelling across the catalog keeps plans comparable.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Mapping, Sequence

from launcher.engines import flags, router
from launcher.engines.base import Engine, Leader, MetricNames
from launcher.engines.context import BOOTSTRAP, DIST_INIT, HTTP, InstanceContext
from launcher.errors import PlanError
from launcher.model import Parallelism, Recipe, TransferBackend

ENTRY: tuple[str, ...] = ("python3", "-m", "sglang.launch_server")
# SGLang's own names for speculative algorithms; MTP heads (DeepSeek style) are NEXTN.
_SPEC_ALGORITHM = {"EAGLE": "EAGLE", "EAGLE3": "EAGLE3", "DSPARK": "DSPARK", "NEXTN": "NEXTN", "MTP": "NEXTN"}
# Flags that differ per rank and so are left out of the "same args on every rank" comparison.
PER_RANK_FLAGS: tuple[str, ...] = ("--node-rank", "--disaggregation-ib-device")
# Flags the planner owns: an override of these would desynchronise the ranks of an instance.
PLANNER_FLAGS: tuple[str, ...] = (
    "--node-rank",
    "--nnodes",
    "--dist-init-addr",
    "--nccl-init-addr",
    "--disaggregation-mode",
)

_TP = ("--tp-size", "--tp", "--tensor-parallel-size")
_PP = ("--pp-size", "--pipeline-parallel-size")
_DP = ("--dp-size", "--data-parallel-size")
_EP = ("--ep-size", "--ep", "--expert-parallel-size")
_ATTN_DP = ("--attn-dp-size", "--attention-data-parallel-size")
_DCP = ("--dcp-size", "--decode-context-parallel-size")
ALL_SCHEDULERS = "--enable-metrics-for-all-schedulers"


def version_tuple(version: str) -> tuple[int, ...]:
    """``"0.5.23.post1"`` -> (0, 5, 23)."""
    return tuple(int(p) for p in re.findall(r"\d+", version)[:3])


def _new_spellings(recipe: Recipe) -> bool:
    # 0.5.23 introduced --attn-dp-size / --dcp-size / --cuda-graph-max-bs-decode.
    return version_tuple(recipe.engine_version) >= (0, 5, 23)


def argv(recipe: Recipe, ctx: InstanceContext) -> tuple[str, ...]:
    par = ctx.parallelism
    out: list[str] = [*ENTRY, "--model-path", recipe.model]
    if ctx.served_model_name:
        out += ["--served-model-name", ctx.served_model_name]
    out += ["--host", "0.0.0.0", "--port", str(ctx.ports[HTTP]), "--tp-size", str(par.tp)]
    if not flags.has(recipe.engine_args, ("--enable-metrics",)):
        out.append("--enable-metrics")  # /metrics is off by default; fleet top and Prometheus read it
    if _all_schedulers(recipe, par):
        # Under attention DP only attention-TP rank 0 of each DP group reports otherwise; with it
        # every scheduler does (each TP rank of a group holds the group's requests: the readers
        # count a core once, launcher/observe/load.py).
        out.append(ALL_SCHEDULERS)
    if par.pp > 1:
        out += ["--pp-size", str(par.pp)]
    if par.dp > 1:
        out += ["--dp-size", str(par.dp)]
    if par.attn_dp > 1:
        if _new_spellings(recipe):
            out += ["--attn-dp-size", str(par.attn_dp)]
        else:
            # Before 0.5.23 attention DP was spelled "--dp-size N --enable-dp-attention".
            out += ["--dp-size", str(par.attn_dp), "--enable-dp-attention"]
    if par.ep > 1:
        out += ["--ep-size", str(par.ep)]
    if par.dcp > 1:
        if not _new_spellings(recipe):
            raise PlanError(
                recipe.source, f"decode context parallel needs SGLang >= 0.5.23, recipe pins {recipe.engine_version}",
                "parallelism/dcp",
            )
        out += ["--dcp-size", str(par.dcp)]
    if recipe.quantization.method:
        out += ["--quantization", recipe.quantization.method]
    if recipe.kv_cache_dtype:
        out += ["--kv-cache-dtype", recipe.kv_cache_dtype]
    if recipe.mem_fraction_static is not None:
        out += ["--mem-fraction-static", str(recipe.mem_fraction_static)]
    if recipe.context_length is not None:
        out += ["--context-length", str(recipe.context_length)]
    out += _speculative(recipe)
    out += _hicache(recipe)
    if ctx.nnodes > 1:
        out += [
            "--nnodes", str(ctx.nnodes),
            "--node-rank", str(ctx.rank),
            "--dist-init-addr", f"{ctx.leader_ip}:{ctx.ports[DIST_INIT]}",
        ]
    if ctx.pd_mode is not None and ctx.transfer_backend is not None:
        out += [
            "--disaggregation-mode", ctx.pd_mode,
            "--disaggregation-transfer-backend", ctx.transfer_backend,
            "--disaggregation-bootstrap-port", str(ctx.ports[BOOTSTRAP]),
        ]
        spec = ctx.host.spec
        if spec.fabric != "none" and spec.hcas:
            out += ["--disaggregation-ib-device", ",".join(spec.hcas)]
    return (*out, *recipe.engine_args)


def _all_schedulers(recipe: Recipe, par: Parallelism) -> bool:
    """Attention DP (the recipe's parallelism or its engine_args) on a SGLang that has the flag
    (0.5.23's arg_groups/fields/observability.py; no older SGLang is in the catalog)."""
    return (
        _new_spellings(recipe)
        and parallelism(tuple(recipe.engine_args), par).attn_dp > 1
        and not flags.has(recipe.engine_args, (ALL_SCHEDULERS,))
    )


def _speculative(recipe: Recipe) -> list[str]:
    spec = recipe.speculative
    if spec is None:
        return []
    out = ["--speculative-algorithm", _SPEC_ALGORITHM[spec.algorithm]]
    if spec.draft_model:
        out += ["--speculative-draft-model-path", spec.draft_model]
    if spec.num_steps is not None:
        out += ["--speculative-num-steps", str(spec.num_steps)]
    if spec.eagle_topk is not None:
        out += ["--speculative-eagle-topk", str(spec.eagle_topk)]
    if spec.num_draft_tokens is not None:
        out += ["--speculative-num-draft-tokens", str(spec.num_draft_tokens)]
    return out


def _hicache(recipe: Recipe) -> list[str]:
    hc = recipe.hicache
    if hc is None:
        return []
    out = ["--enable-hierarchical-cache"]
    if hc.size_gb is not None:
        out += ["--hicache-size", str(hc.size_gb)]
    if hc.storage_backend is not None:
        # The Mooncake client is configured through env (MOONCAKE_*), not
        # --hicache-storage-backend-extra-config: its local_hostname and device differ per node,
        # and env keeps the argv identical on every rank.
        out += ["--hicache-storage-backend", hc.storage_backend]
    return out


def env(ctx: InstanceContext) -> dict[str, str]:
    """Engine env of this rank (network env is added by the planner)."""
    # SGLang picks its PD/bootstrap/ZMQ address by a UDP-route trick otherwise: wrong on
    # multi-NIC hosts.
    return {"SGLANG_HOST_IP": ctx.data_ip}


def parallelism(argv: tuple[str, ...], base: Parallelism) -> Parallelism:
    """The parallelism the final argv asks for (``base`` where a flag is absent)."""

    def num(names: tuple[str, ...], default: int) -> int:
        v = flags.value(argv, names)
        return int(v) if v is not None and v.isdigit() else default

    dp, attn_dp = num(_DP, base.dp), num(_ATTN_DP, base.attn_dp)
    if flags.has(argv, ("--enable-dp-attention",)):
        dp, attn_dp = 1, dp  # the pre-0.5.23 spelling: --dp-size counts attention-DP groups
    return Parallelism(
        tp=num(_TP, base.tp),
        pp=num(_PP, base.pp),
        dp=dp,
        ep=num(_EP, base.ep),
        attn_dp=attn_dp,
        dcp=num(_DCP, base.dcp),
    )


# SGLang 0.5's names (collector.py): the scheduler gauges, the tokenizer's counters and histograms.
_NAMES_0_5 = MetricNames(
    running="sglang:num_running_reqs", waiting="sglang:num_queue_reqs", kv_usage="sglang:token_usage",
    generation_tokens="sglang:generation_tokens_total", prompt_tokens="sglang:prompt_tokens_total",
    requests="sglang:num_requests_total", ttft="sglang:time_to_first_token_seconds",
    # TTFT, inter-token latency and end-to-end only: no per-request TPOT histogram before 0.5.23
    itl="sglang:inter_token_latency_seconds", e2e="sglang:e2e_request_latency_seconds",
    # every prompt token counts in prompt_tokens_total, the radix cache's share in cached_tokens_total
    prefix_cache_queries="sglang:prompt_tokens_total", prefix_cache_hits="sglang:cached_tokens_total",
)


class SGLang(Engine):
    name = "sglang"
    label = "SGLang"
    entry = ENTRY
    http_port = 30000
    rendezvous_port = DIST_INIT
    metrics_kind = "sglang"
    # server args plus "version": sglang.__version__ (entrypoints/http_server.py); 0.5.23 names
    # it /server_info (/get_server_info a deprecated alias), 0.5.5 /get_server_info only
    version_paths = ("/server_info", "/get_server_info")
    metric_names: tuple[tuple[str, MetricNames], ...] = (
        ("0.5.0", _NAMES_0_5),
        # the 0.5.23 wheel's TokenizerMetricsCollector (srt/observability/metrics_collector.py)
        # declares a per-request TPOT histogram, (finished - first token) / (tokens - 1), observed
        # once per request finished by stop or length on every worker but a PD prefill.  Older
        # 0.5 releases keep the names above: the first release to declare it was not pinned down.
        ("0.5.23", dataclasses.replace(_NAMES_0_5, tpot="sglang:request_time_per_output_token_seconds")),
    )
    planner_flags = PLANNER_FLAGS
    per_rank_flags = PER_RANK_FLAGS
    rank_flags = ("--node-rank",)
    ib_device_flags = ("--disaggregation-ib-device",)
    # the builders above, as this engine's methods
    argv = staticmethod(argv)
    env = staticmethod(env)
    parallelism = staticmethod(parallelism)
    model_flags = ("--model-path", "--model")
    draft_flags = ("--speculative-draft-model-path",)
    tokenizer_flags = ("--tokenizer-path",)

    def node_metrics(self, argv: tuple[str, ...], env: Mapping[str, str]) -> tuple[str, int] | None:
        """SGLang's nodes other than the first serve /health and, with --enable-metrics, /metrics
        on --port (0.5.23 entrypoints/engine.py: ``launch_dummy_health_check_server(host, port,
        enable_metrics)``), from the schedulers on that node (Prometheus multiprocess files are
        per node).  Under attention DP those are DP groups of their own, reported nowhere else;
        without it a node > 0 holds TP/PP peers of rank 0's schedulers, which rank 0 reports."""
        port = flags.value(argv, ("--port",))
        ip = env.get("SGLANG_HOST_IP")
        if not flags.has(argv, ("--enable-metrics",)) or port is None or not port.isdigit() or not ip:
            return None
        return (ip, int(port)) if parallelism(argv, Parallelism()).attn_dp > 1 else None

    def listen_ports(self, ctx: InstanceContext, serves: bool) -> dict[str, int]:
        out = super().listen_ports(ctx, serves)
        if serves and ctx.role == "prefill":
            out[BOOTSTRAP] = ctx.ports[BOOTSTRAP]  # every prefill runs the bootstrap server
        return out

    def router_argv(self, workers: tuple[str, ...], port: int, metrics_port: int) -> tuple[str, ...]:
        return router.sglang_argv(workers, port, metrics_port)

    def pd_router_argv(
        self, prefill: Sequence[Leader], decode: Sequence[Leader], port: int, metrics_port: int,
        backend: TransferBackend,
    ) -> tuple[str, ...]:  # fmt: skip
        return router.sglang_pd_argv(
            tuple((p.url, p.ports[BOOTSTRAP]) for p in prefill), tuple(d.url for d in decode), port, metrics_port
        )


ENGINE = SGLang()
