"""SGLang server argv and env for one rank of one instance.

Contract: :func:`argv` is identical on every rank of an instance except ``--node-rank`` and the
host's own ``--disaggregation-ib-device``; ``--host 0.0.0.0`` is always passed (SGLang binds
127.0.0.1 by default, which a router on another host cannot reach) and ``--port`` is passed to
every rank although only rank 0 serves HTTP, so rank argv differ in the rank alone.
``--enable-metrics`` is always passed (an override can remove it): SGLang serves no ``/metrics``
without it, and ``fleet top`` and the Prometheus targets (``launcher/observe``) read it.

Entry point: ``python3 -m sglang.launch_server``.  ``sglang serve`` is the recommended spelling in
0.5.23 but does not exist in the older images the catalog also pins, and both accept the same
flags; one spelling across the catalog keeps plans comparable.
"""

from __future__ import annotations

import re

from launcher.engines.context import BOOTSTRAP, DIST_INIT, HTTP, InstanceContext
from launcher.engines import flags
from launcher.errors import PlanError
from launcher.model import Parallelism, Recipe

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
