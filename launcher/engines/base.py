"""The engine protocol: everything fleet knows about one inference engine, in one object.

Contract: an engine is one module under ``launcher/engines/`` that defines a subclass of
:class:`Engine` and an instance of it named ``ENGINE``; :mod:`launcher.engines.registry` finds it
by the recipe's ``engine:`` value.  Nothing outside ``launcher/engines/`` compares engine names:
the planner, preflight, weights, observability and rolling code ask the engine object.  The
defaults below are those of an engine with no multi-node executor choice, no drain wait, no
router, CUDA devices and a Mooncake client configured through env.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Mapping, Sequence

from launcher.engines import flags
from launcher.engines.context import InstanceContext
from launcher.model import Mount, Parallelism, Recipe, TransferBackend

Accelerator = Literal["gpu", "npu"]


@dataclass(frozen=True, slots=True, kw_only=True)
class MetricNames:
    """The Prometheus names a program exposes for what fleet reads (``launcher/observe``)."""

    running: str | None = None  # gauge: requests being served now (summed over label sets)
    waiting: str | None = None  # gauge: requests queued (summed)
    kv_usage: str | None = None  # gauge 0..1: KV-cache blocks/tokens in use (largest label set)
    generation_tokens: str | None = None  # counter: tokens generated
    prompt_tokens: str | None = None  # counter: prompt tokens processed
    requests: str | None = None  # counter: requests finished (engines) or routed (routers)
    ttft: str | None = None  # histogram: time to first token, seconds
    # histogram: a request's time per output token ((end - first token) / (tokens - 1)), seconds:
    # what a TPOT SLO is written in (one observation per request)
    tpot: str | None = None
    itl: str | None = None  # histogram: inter-token latency, each gap between output tokens, seconds
    e2e: str | None = None  # histogram: whole request, seconds
    # counters of prompt tokens: looked up in the engine's prefix cache / found there (their
    # ratio over a bench level is the engine's own prefix-cache hit rate)
    prefix_cache_queries: str | None = None
    prefix_cache_hits: str | None = None
    # KV-cache transfers of prefill/decode, on the side that moves the KV (the decode: NIXL's
    # pull mode reads it from the prefill): a histogram of each transfer's seconds (its _count is
    # the number of transfers done), a counter of failed ones, a histogram of bytes per transfer.
    kv_transfers: str | None = None
    kv_transfer_failures: str | None = None
    kv_transfer_bytes: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Leader:
    """A PD instance's rank 0 as the router sees it: its base URL and the ports it listens on."""

    url: str
    ports: Mapping[str, int]


class Engine:
    """One engine.  Subclasses set the class attributes and override what differs."""

    name: str  # the recipe's ``engine:`` value
    label: str  # how the catalog seed spells the engine ("SGLang")
    entry: tuple[str, ...]  # the argv prefix of a unit running this engine
    http_port: int  # default HTTP port of an instance
    rendezvous_port: str  # the port name rank 0 of a multi-node instance listens on
    metrics_kind: str  # the metric-name family its /metrics follows (``metric_names``' owner)
    # GET path on an instance's HTTP port that answers 200 once it serves (the planner's health
    # check).  One path segment: readers take the instance's base URL as the health URL without
    # its last segment.
    health_path: str = "/health"
    metric_names: tuple[tuple[str, MetricNames], ...] = ()  # (first version, names), oldest first
    # GET paths on a leader's HTTP port answering JSON with a "version" field (the running
    # server's own version, what ``fleet bench`` reports); tried in order, the first that answers.
    version_paths: tuple[str, ...] = ()
    planner_flags: tuple[str, ...] = ()  # flags the planner sets per rank: never overridden
    per_rank_flags: tuple[str, ...] = ()  # flags that may differ between ranks of an instance
    model_flags: tuple[str, ...] = ("--model",)  # where the argv names the weights
    draft_flags: tuple[str, ...] = ()  # where the argv names the draft model's weights
    tokenizer_flags: tuple[str, ...] = ("--tokenizer",)
    rank_flags: tuple[str, ...] = ()  # flags whose value is the rank's index in its instance
    ib_device_flags: tuple[str, ...] = ()  # flags naming the RDMA devices a rank uses (comma-separated)
    accelerator: Accelerator = "gpu"
    collective: Literal["nccl", "hccl"] = "nccl"  # HCCL env on every multi-node or PD rank; NCCL's across nodes
    visible_devices_env: str = "CUDA_VISIBLE_DEVICES"  # native (systemd) units' device selection
    mooncake_env: bool = True  # its Mooncake clients read MOONCAKE_* env (else a config file)

    def argv(self, recipe: Recipe, ctx: InstanceContext) -> tuple[str, ...]:
        """The full command of one rank (entry point first, the recipe's engine_args last)."""
        raise NotImplementedError

    def env(self, ctx: InstanceContext) -> dict[str, str]:
        """Engine env of one rank (the planner adds the network env)."""
        return {}

    def parallelism(self, argv: tuple[str, ...], base: Parallelism) -> Parallelism:
        """The parallelism the final argv asks for (``base`` where a flag is absent)."""
        return base

    def node_metrics(self, argv: tuple[str, ...], env: Mapping[str, str]) -> tuple[str, int] | None:
        """(IP, port) where a rank other than 0 of an instance serves /metrics with requests its
        rank 0's /metrics does not hold (whole cores on that node); None: rank 0 covers them all."""
        return None

    def listen_ports(self, ctx: InstanceContext, serves: bool) -> dict[str, int]:
        """The ports one rank's process listens on (what the planner's collision check compares)."""
        out: dict[str, int] = {}
        if serves:
            out["http"] = ctx.ports["http"]
            if ctx.nnodes > 1:
                out[self.rendezvous_port] = ctx.ports[self.rendezvous_port]
        return out

    def model_value(self, argv: tuple[str, ...]) -> str | None:
        """The weights the argv names (path or repo id)."""
        return flags.value(argv, self.model_flags)

    def image_needs(self, argv: tuple[str, ...]) -> tuple[str, ...]:
        """What the image must provide beyond the entry program for this argv, in preflight's
        ``image-programs.sh`` terms (a command, or ``python3 -m PKG``)."""
        return ()

    def served_model(self, argv: tuple[str, ...]) -> str:
        """The model name requests must ask for: ``--served-model-name``, else the weights named."""
        return flags.value(argv, ("--served-model-name",)) or self.model_value(argv) or ""

    def draft_value(self, argv: tuple[str, ...]) -> str | None:
        """The draft model's weights the argv names, if any."""
        return flags.value(argv, self.draft_flags) if self.draft_flags else None

    def wants_ray(self, argv: tuple[str, ...]) -> bool:
        """Whether a multi-node instance with this final argv runs as a Ray cluster."""
        return False

    def ray_argv(self, ctx: InstanceContext) -> tuple[str, ...]:
        raise NotImplementedError(f"{self.name} has no Ray executor")

    def stop_problem(self, argv: tuple[str, ...], grace_s: int) -> str | None:
        """Why this argv cannot stop within fleet's stop grace (SIGKILL after); None = it can."""
        return None

    def device_env(self, ids: tuple[int, ...]) -> dict[str, str]:
        """Env that selects a container's devices (after the runtime renumbered them from 0)."""
        return {}

    def container_devices(self, ids: tuple[int, ...]) -> tuple[tuple[str, ...], tuple[int, ...]]:
        """(device nodes, GPUs for ``--gpus``) of a container holding devices ``ids``."""
        return (), ids

    def container_mounts(self, multinode: bool) -> tuple[Mount, ...]:
        """Host files (drivers) the engine's container needs beyond the recipe's mounts."""
        return ()

    def router_argv(self, workers: tuple[str, ...], port: int, metrics_port: int) -> tuple[str, ...] | None:
        """The regular-mode router over ``workers``; None when fleet knows no router for it."""
        return None

    def pd_router_argv(
        self, prefill: Sequence[Leader], decode: Sequence[Leader], port: int, metrics_port: int,
        backend: TransferBackend,
    ) -> tuple[str, ...]:  # fmt: skip
        raise NotImplementedError(f"{self.name} has no PD router")
