"""The typed model every layer shares: sources, recipes, inventories, playbooks, plans.

Contract: every class is a frozen, slotted, keyword-only dataclass; collections are tuples or
read-only mappings; nothing here does I/O.  The loaders (``launcher.config``) build these from
YAML/INI and attach a :class:`Source` to anything an error may need to point at; the planner
(``launcher.plan``) turns them into a :class:`Plan`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Literal, Mapping

Engine = str  # a registered engine's name (launcher/engines/registry.py); the recipe loader checks it
Topology = Literal["single", "multinode", "pd"]
GpuSku = Literal["H100", "H800", "B300", "A100", "RTX-6000D", "Ascend-910B3"]
Fabric = Literal["roce", "ib", "none"]


@dataclass(frozen=True, slots=True)
class OneOf:
    """Marks a ``str`` that must name an entry of a registry: the module ``registry`` (dotted),
    whose ``names()`` the loaders check it against (``config/schema.py``), so a new entry is its
    registry's business alone."""

    registry: str


Runtime = Annotated[str, OneOf("launcher.runtimes.registry")]  # a registered runtime's name
WeightFormat = Literal["bf16", "fp8-e4m3", "nvfp4", "mxfp4", "int4", "w8a8"]
TransferBackend = Literal["mooncake", "nixl"]
Role = Literal[
    "single",  # one process serving HTTP on one host
    "rank",  # one node of a multi-node instance (rank 0 is the leader and serves HTTP)
    "prefill",  # a node of a PD prefill instance (rank within that instance in Unit.rank)
    "decode",  # a node of a PD decode instance
    "router",  # sglang-router / vLLM PD proxy
    "mooncake-master",  # Mooncake store master (+ embedded HTTP metadata server)
    "gateway",  # the openresty route standing in for the catalog's ModelRoute
]

EMPTY: Mapping[str, str] = {}

# A unit's stop grace: long enough for an engine to finish in-flight requests after SIGTERM
# (SGLang and vLLM both drain on SIGTERM).  The planner checks engine drain timeouts against it;
# render writes it into every stop command.
STOP_TIMEOUT_S = 120


@dataclass(frozen=True, slots=True, kw_only=True)
class Source:
    """Where a value came from: ``path:line:col`` (1-based), for one-line error messages."""

    path: str
    line: int
    col: int

    def __str__(self) -> str:
        return f"{self.path}:{self.line}:{self.col}"


UNKNOWN_SOURCE = Source(path="<none>", line=0, col=0)


# --------------------------------------------------------------------------------------------
# Recipes: the catalog
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Hardware:
    """GPU requirements of one instance (per PD role: of one prefill/decode instance)."""

    skus: tuple[GpuSku, ...]  # any of these SKUs will do (e.g. H100 or H800)
    gpus_per_node: int
    nodes: int = 1
    min_gpu_memory_gib: int | None = None  # per card; None = the SKU's usual size is assumed
    # The RDMA fabric the catalog's figures were measured over (None: the entry names none).  Not a
    # requirement: `recipes fit` and preflight say when the hosts' fabric differs.
    fabric: Literal["roce", "ib"] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Parallelism:
    """Engine parallelism of one instance.  tp is the *global* TP across nodes (SGLang semantics)."""

    tp: int = 1  # tensor parallel (global, across the instance's nodes)
    pp: int = 1  # pipeline stages
    dp: int = 1  # data parallel replicas inside the instance
    ep: int = 1  # expert parallel (reuses TP ranks)
    attn_dp: int = 1  # attention data parallel (SGLang --attn-dp-size)
    dcp: int = 1  # decode context parallel

    @property
    def gpus(self) -> int:
        """GPUs one instance occupies: tp*pp*dp (EP, attention-DP and DCP reuse TP ranks)."""
        return self.tp * self.pp * self.dp


@dataclass(frozen=True, slots=True, kw_only=True)
class Quantization:
    weight_format: WeightFormat
    method: str | None = None  # engine --quantization value when it must be explicit (modelopt_fp4)


@dataclass(frozen=True, slots=True, kw_only=True)
class Speculative:
    algorithm: Literal["EAGLE", "EAGLE3", "DSPARK", "NEXTN", "MTP"]
    draft_model: str | None = None  # repo id or path; None when the target bundles its head
    draft_beside_target: bool = False  # draft weights must sit next to the target on every node
    num_steps: int | None = None
    eagle_topk: int | None = None
    num_draft_tokens: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class HiCache:
    """SGLang hierarchical KV cache (host-memory L2, optional L3 storage backend)."""

    size_gb: int | None = None  # --hicache-size (host pool GB); None = engine default ratio
    storage_backend: Literal["mooncake", "file", "nixl"] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class MooncakeStore:
    """Mooncake store for KV offload: sizes are per GPU, as the catalog states them."""

    global_segment_size: str  # e.g. "100gb"
    local_buffer_size: str  # e.g. "4gb"
    protocol: Literal["rdma", "tcp"] = "rdma"
    master_port: int = 50051
    metadata_port: int = 8080
    metrics_port: int = 9003


@dataclass(frozen=True, slots=True, kw_only=True)
class PDRole:
    """One side of a PD deployment: how many instances, and the shape of each."""

    replicas: int
    nodes: int  # nodes per instance
    parallelism: Parallelism


@dataclass(frozen=True, slots=True, kw_only=True)
class PD:
    prefill: PDRole
    decode: PDRole
    transfer_backend: TransferBackend
    bootstrap_port: int = 8998


@dataclass(frozen=True, slots=True, kw_only=True)
class Gateway:
    """The catalog's ModelRoute: a model name published through an openresty gateway."""

    route: str  # model name clients send, e.g. "deepseek-v4-flash"
    image: str = "openresty/openresty:1.27.1.2-0-bookworm"
    port: int = 9080  # not 8080: Mooncake's HTTP metadata server defaults to 8080


@dataclass(frozen=True, slots=True, kw_only=True)
class RoleImages:
    """Which image provides the program of a role that does not run the engine itself (the
    router: ``sglang_router`` / ``vllm-router``; the Mooncake master: ``mooncake_master``).
    None: the engine image.  Preflight checks each program is in its image on the host."""

    router: str | None = None  # the router's image (sglang-router / vllm-router); None: the engine image
    mooncake_master: str | None = None  # the Mooncake master's image; None: the engine image


@dataclass(frozen=True, slots=True, kw_only=True)
class Mount:
    host: str  # may use {models_dir} / {cache_dir} placeholders, filled from host vars
    container: str
    read_only: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class Throughput:
    input_len: int
    output_len: int
    concurrency: int | None = None
    input_tok_s: float | None = None
    output_tok_s: float | None = None
    note: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class LongRequest:
    tokens: int
    seconds: float


@dataclass(frozen=True, slots=True, kw_only=True)
class Measured:
    """The catalog's measured facts, as numbers."""

    weights_gib_per_card: float | None = None
    kv_pool_tokens: int | None = None  # max_total_num_tokens (SGLang) / GPU KV cache size (vLLM)
    kv_free_gib_per_card: float | None = None
    ready_seconds_cold: int | None = None  # start-up to healthy on a cold cache
    max_request_len: int | None = None
    max_req_input_len: int | None = None
    long_request: LongRequest | None = None
    throughput: tuple[Throughput, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class Gain:
    workload: Literal["50k+1.5k", "8k+1k", "tuning-benchmark"]
    percent: float
    metric: Literal[
        "normalized-throughput-within-slo",
        "normalized-throughput-8gpu-within-slo",
        "tuning-benchmark",
    ]


@dataclass(frozen=True, slots=True, kw_only=True)
class Report:
    kind: Literal["baseline", "tuned", "measured"]
    baseline: str | None = None  # recipe id this tuned variant is compared with
    tuner: str | None = None  # "LLM AutoTune"
    workload: str | None = None  # the seed's headline workload, "50k+1.5k" / "8k+1k"
    catalog_version: str | None = None  # "v1.0.0" .. "v1.1.0"
    gains: tuple[Gain, ...] = ()


ConstraintKind = Literal["arg", "arg-absent", "env", "min", "equals"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Constraint:
    """A hard-won rule, checked on the *final* planned argv/env/parallelism so overrides cannot
    slip past it.

    kind=arg:        ``flag`` must be present in argv, with ``value`` if given.
    kind=arg-absent: ``flag`` (with ``value`` if given) must not be present.
    kind=env:        env ``name`` must equal ``value``.
    kind=min:        dotted ``field`` of the recipe (e.g. ``parallelism.ep``) must be >= ``value``.
    kind=equals:     dotted ``field`` must equal ``value``.
    ``when_sku`` limits the rule to hosts with one of these GPU SKUs (empty = always).
    """

    id: str
    kind: ConstraintKind
    reason: str
    flag: str | None = None
    name: str | None = None
    field: str | None = None
    value: str | int | None = None
    when_sku: tuple[GpuSku, ...] = ()
    source: Source = UNKNOWN_SOURCE


@dataclass(frozen=True, slots=True, kw_only=True)
class Recipe:
    """One launch variant of the catalog (one seed entry)."""

    id: str  # "<family>/<variant>"
    family: str
    catalog_entry: int  # 1-based position in the seed
    summary: str
    model: str  # repo id or local path (under the host's models_dir)
    served_model_name: str | None
    engine: Engine
    engine_version: str
    image: str
    topology: Topology
    hardware: Hardware
    parallelism: Parallelism
    quantization: Quantization
    kv_cache_dtype: str | None = None
    speculative: Speculative | None = None
    hicache: HiCache | None = None
    mooncake_store: MooncakeStore | None = None
    pd: PD | None = None
    gateway: Gateway | None = None
    images: RoleImages = RoleImages()  # the router's and Mooncake master's images (default: ``image``)
    engine_args: tuple[str, ...] = ()  # extra argv tokens, appended after the generated flags
    env: Mapping[str, str] = field(default_factory=lambda: EMPTY)
    mounts: tuple[Mount, ...] = ()
    shm_size: str = "32g"
    # The engine containers' network: "host" (the default: multi-node ranks, PD transfers and RDMA
    # need it), or "bridge" -- docker's own network, the unit's listen ports published on the host
    # -- for a single-node entry that says it runs without host networking.
    network: Literal["host", "bridge"] = "host"
    gpu_memory_utilization: float | None = None  # vLLM --gpu-memory-utilization
    mem_fraction_static: float | None = None  # SGLang --mem-fraction-static
    kv_cache_memory: str | None = None  # vLLM --kv-cache-memory-bytes
    context_length: int | None = None
    port: int | None = None  # engine HTTP port; None = engine default (SGLang 30000, vLLM 8000)
    dist_init_port: int = 20000
    start_timeout_s: int = 1800  # health deadline; derived from measured.ready_seconds_cold when known
    measured: Measured = Measured()
    report: Report | None = None
    constraints: tuple[Constraint, ...] = ()
    notes: str = ""
    source: Source = UNKNOWN_SOURCE


# --------------------------------------------------------------------------------------------
# Inventories
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class HostSpec:
    """fleet's typed view of a host's vars (see inventories/example.yaml for every key)."""

    gpu_model: GpuSku | None = None
    gpu_count: int = 0
    gpu_memory_gib: int | None = None
    fabric: Fabric = "none"
    hcas: tuple[str, ...] = ()  # e.g. ("mlx5_0", "mlx5_1")
    gid_index: int | Literal["auto"] | None = None  # RoCE v2 IPv4 GID index, per host (RoCE: auto if unset)
    nccl_ifname: str | None = None  # the NIC NCCL/Gloo must use
    data_ip: str | None = None  # data-plane IP for dist-init / bootstrap
    ib_tc: int | None = None
    ib_sl: int | None = None
    mtu: int | None = None
    models_dir: str = "/models"
    cache_dir: str = "/var/cache/fleet"
    runtime: Runtime = "docker"


@dataclass(frozen=True, slots=True, kw_only=True)
class Host:
    name: str  # inventory hostname
    address: str  # ansible_host, else name
    port: int = 22
    user: str | None = None
    key_file: str | None = None
    ssh_common_args: str | None = None  # e.g. "-o ProxyJump=bastion"
    groups: tuple[str, ...] = ()  # every group the host belongs to (incl. ancestors), sorted
    vars: Mapping[str, object] = field(default_factory=dict)  # merged, Ansible precedence
    spec: HostSpec = HostSpec()
    source: Source = UNKNOWN_SOURCE


@dataclass(frozen=True, slots=True, kw_only=True)
class Group:
    name: str
    hosts: tuple[str, ...]  # direct and inherited members, inventory order
    children: tuple[str, ...]
    vars: Mapping[str, object] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class Inventory:
    path: str
    hosts: tuple[Host, ...]  # inventory order (the order Ansible lists them under `all`)
    groups: Mapping[str, Group]

    def host(self, name: str) -> Host:
        for h in self.hosts:
            if h.name == name:
                return h
        raise KeyError(name)


# --------------------------------------------------------------------------------------------
# Playbooks
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Placement:
    """Where one role runs: an Ansible host pattern, optional replica count (PD xPyD)."""

    hosts: str  # an Ansible host pattern (group, host*, a:b, a:&b, a:!b, ~regex, group[0:1])
    replicas: int | None = None  # engine roles: instances to place (PD xPyD); None: every fit
    # engine roles: an Ansible host pattern of spare hosts (in no placement): where `fleet watch` places a group whose host stays unreachable, planned as `up` plans (docs/watch.md)
    spares: str | None = None
    source: Source = UNKNOWN_SOURCE


@dataclass(frozen=True, slots=True, kw_only=True)
class Overrides:
    image: str | None = None  # the engine image instead of the recipe's (docker runtime only)
    images: RoleImages = RoleImages()  # over the recipe's, role by role
    # The served model (e.g. a path under the models mount) instead of the recipe's.
    model: str | None = None
    # A smaller shape of the same recipe: the instance's parallel sizes, and the nodes and GPUs per
    # node it is placed on (nodes x gpus_per_node must equal tp*pp*dp).
    parallelism: Parallelism | None = None
    nodes: int | None = None  # nodes per instance (with parallelism)
    gpus_per_node: int | None = None  # GPUs per node (with parallelism)
    engine_args: tuple[str, ...] = ()  # appended; "--flag value" replaces an existing --flag
    remove_args: tuple[str, ...] = ()  # flags to drop (with their values)
    env: Mapping[str, str] = field(default_factory=lambda: EMPTY)  # over the recipe's and fleet's env
    docker_args: tuple[str, ...] = ()  # raw docker run flags, e.g. sandbox memlock limit
    drop_docker_flags: tuple[str, ...] = ()  # e.g. ("--gpus",) where the machine cannot honor them
    # Parts of the recipe left out where the machine cannot run them: its Mooncake store KV
    # offload with the store's master (vLLM's CPU build: the store connector needs an
    # accelerator), its gateway (an image of its own).
    drop: tuple[Literal["mooncake_store", "gateway"], ...] = ()
    shm_size: str | None = None  # docker --shm-size instead of 32g
    start_timeout_s: int | None = None  # health deadline instead of the recipe's measured cold start
    source: Source = UNKNOWN_SOURCE


@dataclass(frozen=True, slots=True, kw_only=True)
class BenchGate:
    """``rollout.bench_gate``: at its operating load each rolling batch must bench within the
    threshold of the previous generation (attainment within the SLO, TTFT and TPOT p99) or it
    goes back; the threshold is the larger of ``threshold_pct`` and twice the previous
    generation's own repeat noise (launcher/bench/gate.py)."""

    shape: str | None = None  # None: the playbook's first bench shape, else 8k+1k (bench.scale applies)
    concurrency: int = 2  # the operating load: requests in flight while gating
    requests: int = 16  # requests per gate measurement
    threshold_pct: float = 10.0  # the least threshold (attainment points, p99 percent); noise may raise it
    source: Source = UNKNOWN_SOURCE


@dataclass(frozen=True, slots=True, kw_only=True)
class Rollout:
    strategy: Literal["all-at-once", "rolling"] = "all-at-once"  # how `fleet up` replaces changed groups
    max_unavailable: int = 1  # rolling: groups out of service at a time
    drain_timeout_s: int = 120  # rolling: longest wait for a group's requests in flight
    bench_gate: BenchGate | None = None  # rolling: bench each batch against the previous generation


@dataclass(frozen=True, slots=True, kw_only=True)
class BenchSettings:
    """A playbook's defaults for ``fleet bench`` (its flags override each one)."""

    shapes: tuple[str, ...] = ()  # "50k+1.5k", "8k+1k", "IN+OUT"; () = the catalog's two
    concurrency: tuple[int, ...] = ()  # () = 1, 4, 16
    slo: str | None = None  # "ttft=MS,tpot=MS"; None = fleet's default (the catalog states none)
    scale: float = 1.0  # lengths multiplied by this (small engines such as the sandbox's)
    tokenizer: str | None = None  # HF id or local dir; "fleet-words": fleet's word-level one; None = the recipe's model
    source: Source = UNKNOWN_SOURCE


@dataclass(frozen=True, slots=True, kw_only=True)
class SecretRef:
    """A secret the operator supplies at run time: from an env var of fleet's own process or a
    file on the control node.  Its value never appears in argv, logs or world-readable files."""

    name: str  # env name inside the unit, e.g. HF_TOKEN
    from_env: str | None = None  # an env var of fleet's own process holds it
    from_file: str | None = None  # a file on the control node holds it (~ expanded)


@dataclass(frozen=True, slots=True, kw_only=True)
class KubernetesSettings:
    """``fleet export k8s``'s cluster facts a playbook may name (its flags override them)."""

    namespace: str | None = None  # None: "default"
    rdma_resource: str | None = None  # the RDMA device plugin's resource; None: the pool's, else rdma/hca
    models_pvc: str | None = None  # a PVC holding the weights instead of the nodes' models dir


@dataclass(frozen=True, slots=True, kw_only=True)
class Metrics:
    """Prometheus scrape targets fleet keeps current for this deployment."""

    # file_sd JSON on the control host (relative: to the playbook's directory), rewritten after
    # `up`, each rolling batch and `down`; None = only `fleet metrics targets` writes targets.
    targets_file: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Playbook:
    path: str
    name: str  # the deployment's name (units are fleet-<name>-...; one playbook per name on a host)
    recipe: str  # recipe id
    runtime: Runtime | None = None  # None = each host's own runtime var
    placement: Mapping[Role, Placement]  # the hosts of each role the recipe has
    overrides: Overrides = Overrides()  # changes to the recipe for this deployment
    ports: Mapping[str, int] = field(default_factory=dict)  # http, router, gateway, dist_init ...
    rollout: Rollout = Rollout()  # how `fleet up` / `fleet restart` replace groups
    secrets: tuple[SecretRef, ...] = ()  # env secrets of the units, read at run time
    # "staged": `fleet weights stage` put the models on the hosts; engines read the local copy
    # ({models_dir}/<repo id> for repo ids) with HF_HUB_OFFLINE=1, so a missing file fails fast
    # instead of starting a download on every rank.  "download": engines fetch from the hub.
    weights: Literal["download", "staged"] = "download"
    metrics: Metrics = Metrics()  # Prometheus targets
    bench: BenchSettings = BenchSettings()  # `fleet bench` defaults
    kubernetes: KubernetesSettings = KubernetesSettings()  # read by `fleet export k8s` only
    source: Source = UNKNOWN_SOURCE


# --------------------------------------------------------------------------------------------
# Plans
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class HealthCheck:
    """``url`` says the unit is alive and serving (status, the watch, a liveness probe);
    ``ready_url``, when the program answers ``url`` before it can serve, is what a start waits
    for instead (a router: /health before its workers are registered, /readiness once one is)."""

    url: str  # http://<data ip>:<port>/health
    timeout_s: int  # deadline for the first healthy answer (the gate polls from the host itself)
    ready_url: str | None = None

    @property
    def base(self) -> str:
        """``http://<data ip>:<port>``: the server's root, where its other endpoints hang off."""
        return self.url.rsplit("/", 1)[0]

    @property
    def gate_url(self) -> str:
        """What the start gate polls: ``ready_url`` if set, else ``url``."""
        return self.ready_url or self.url


@dataclass(frozen=True, slots=True, kw_only=True)
class ContainerSpec:
    image: str
    network_host: bool = True  # else docker's bridge network, the unit's ports published on the host
    ipc_host: bool = True
    shm_size: str | None = "32g"
    gpus: tuple[int, ...] = ()  # exact device indices; () = no --gpus
    devices: tuple[str, ...] = ()  # /dev/infiniband, /dev/davinci0 ...
    cap_add: tuple[str, ...] = ()
    ulimits: tuple[str, ...] = ()  # "memlock=-1", "stack=67108864"
    mounts: tuple[Mount, ...] = ()
    extra_args: tuple[str, ...] = ()  # raw docker flags from overrides
    restart_policy: str = "unless-stopped"
    labels: Mapping[str, str] = field(default_factory=lambda: EMPTY)


@dataclass(frozen=True, slots=True, kw_only=True)
class Unit:
    """One process on one host."""

    host: str
    name: str  # unit/container name, unique per host: "fleet-<deployment>-<role>[-<i>]-r<rank>"
    deployment: str  # playbook name
    role: Role
    group: str  # restart group: all ranks of one instance share it
    rank: int = 0  # node rank inside the group
    nnodes: int = 1
    gpus: tuple[int, ...] = ()
    ports: Mapping[str, int] = field(default_factory=dict)  # name -> port
    argv: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=lambda: EMPTY)
    secrets: tuple[SecretRef, ...] = ()
    container: ContainerSpec | None = None  # None = native (systemd without a container)
    health: HealthCheck | None = None  # only on units that serve HTTP
    start_order: int = 0  # 0 mooncake/metadata, 1 engines, 2 routers, 3 gateway
    wants: tuple[str, ...] = ()  # unit names this one waits for (health)
    runtime: Runtime = "docker"


@dataclass(frozen=True, slots=True, kw_only=True)
class Plan:
    deployment: str
    recipe: str
    units: tuple[Unit, ...]  # sorted by (start_order, group, rank)
    files: Mapping[str, str] = field(default_factory=dict)  # extra config files by path under /etc/fleet (the gateway's conf; per unit: vLLM's Mooncake store config)
