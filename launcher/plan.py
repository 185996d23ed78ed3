"""The pure planner: inventory + recipe + playbook (+ facts) -> a :class:`Plan` of units.

Contract: :func:`plan` and :func:`auto_playbook` do no I/O and read no clock, env or randomness;
the same inputs give the same plan.  Every refusal is a one-line :class:`PlanError` at the
playbook's, recipe's or inventory's position.

Placement (inventory order throughout, so ranks never depend on how a pattern is spelled):
- single: one instance per matched host; with ``replicas`` N, instances go round-robin over the
  matched hosts, several on one host where its GPUs allow.
- multinode: consecutive groups of ``hardware.nodes`` matched hosts; with ``replicas``, each rank
  takes the first matched host with enough free GPUs that the instance does not use yet.
- pd: prefill instances (replicas x nodes) then decode instances, first-fit the same way from
  their own patterns; GPUs are handed out from one pool, so two instances never share a GPU.
- router: PD recipes always get one (PD mode).  A single or multinode playbook that places a
  ``router`` gets one in regular mode over every instance's rank 0 (SGLang and vLLM engines); the
  gateway, if any, then sends its traffic to the router instead of the instances.
Ports: an instance's ports are the base ports plus the slot of its rank 0 on that host (the
second instance on a host gets 30001, 20001, ...); the NIXL side channel steps by 8 because vLLM
adds the DP rank to it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import posixpath
import re
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

from launcher import constraints, network
from launcher.engines import flags, images, mooncake, optioncheck, registry, router
from launcher.engines.base import Engine, Leader
from launcher.runtimes import registry as runtimes
from launcher.engines.context import (
    BOOTSTRAP,
    DIST_INIT,
    HTTP,
    MASTER_PORT,
    NIXL_SIDE_CHANNEL,
    RAY,
    EngineRole,
    Executor,
    InstanceContext,
)
from launcher.config.recipes import Catalog
from launcher.errors import PlanError
from launcher.facts.host import HostFacts
from launcher.model import (
    ContainerSpec,
    HealthCheck,
    Host,
    Inventory,
    Mount,
    Overrides,
    PDRole,
    Parallelism,
    Placement,
    Plan,
    Playbook,
    Recipe,
    Role,
    RoleImages,
    Source,
    STOP_TIMEOUT_S,
    Unit,
)

FILES_ROOT = "/etc/fleet"  # Plan.files[name] lands at FILES_ROOT/name on the hosts mounting it
INFRA_TIMEOUT_S = 300  # router, Mooncake master, gateway: no weights to load
NIXL_STEP = 8
ROUTER_PORTS = (8000, 8100, 8200, 8300, 8400, 8500)
ENGINE_ROLES: dict[str, tuple[EngineRole, ...]] = {
    "single": ("single",),
    "multinode": ("rank",),
    "pd": ("prefill", "decode"),
}
INFRA_ROLES: tuple[Role, ...] = ("router", "mooncake-master", "gateway")
# docker flag -> how to empty the matching ContainerSpec field
_DROPPABLE: dict[str, Callable[[ContainerSpec], ContainerSpec]] = {
    "--gpus": lambda c: dataclasses.replace(c, gpus=()),
    "--device": lambda c: dataclasses.replace(c, devices=()),
    "--ulimit": lambda c: dataclasses.replace(c, ulimits=()),
    "--cap-add": lambda c: dataclasses.replace(c, cap_add=()),
    "--shm-size": lambda c: dataclasses.replace(c, shm_size=None),
    "--ipc": lambda c: dataclasses.replace(c, ipc_host=False),
    "--network": lambda c: dataclasses.replace(c, network_host=False),
    "--restart": lambda c: dataclasses.replace(c, restart_policy=""),
}


# ---------------------------------------------------------------------------------------------
# Inputs
# ---------------------------------------------------------------------------------------------


def default_ports(recipe: Recipe) -> dict[str, int]:
    """Base ports by name (the names playbook ``ports`` may set)."""
    ports = {
        HTTP: recipe.port or registry.get(recipe.engine).http_port,
        DIST_INIT: recipe.dist_init_port,
        BOOTSTRAP: recipe.pd.bootstrap_port if recipe.pd else 8998,
        MASTER_PORT: 29501,
        NIXL_SIDE_CHANNEL: 5600,
        RAY: 6379,
        "router": 8000,  # never 30000: SGLang's own default
        "router_metrics": 29000,
        "gateway": recipe.gateway.port if recipe.gateway else 9080,
    }
    store = recipe.mooncake_store
    ports["mooncake_master"] = store.master_port if store else 50051
    ports["mooncake_metadata"] = store.metadata_port if store else 8080
    ports["mooncake_metrics"] = store.metrics_port if store else 9003
    return ports


def _ports(recipe: Recipe, playbook: Playbook) -> dict[str, int]:
    ports = default_ports(recipe)
    for name, port in playbook.ports.items():
        if name not in ports:
            raise PlanError(
                playbook.source, f"unknown port name {name!r}; expected one of {', '.join(sorted(ports))}",
                f"ports/{name}",
            )
        ports[name] = port
    return ports


def deployment_name(name: str) -> str:
    """Docker- and systemd-safe: lower-case letters, digits and dashes."""
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "deployment"


@dataclass(frozen=True, slots=True, kw_only=True)
class _HostView:
    sku: str | None
    gpus: int


def _host_view(host: Host, facts: Mapping[str, HostFacts] | None) -> _HostView:
    """Gathered facts win over inventory vars: they are what the host really has."""
    found = facts.get(host.name) if facts is not None else None
    if found is not None and found.gpus:
        return _HostView(sku=found.gpus[0].sku, gpus=len(found.gpus))
    if found is not None and found.npus:
        return _HostView(sku=host.spec.gpu_model, gpus=len(found.npus))
    return _HostView(sku=host.spec.gpu_model, gpus=host.spec.gpu_count)


# ---------------------------------------------------------------------------------------------
# GPU allocation
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class _Rank:
    host: Host
    gpus: tuple[int, ...]
    slot: int  # how many engine ranks this host held before this one


@dataclass(frozen=True, slots=True, kw_only=True)
class _Instance:
    role: EngineRole
    index: int
    ranks: tuple[_Rank, ...]
    parallelism: Parallelism

    @property
    def group_key(self) -> str:
        return f"{self.role}{self.index}"


class _Pool:
    """Free GPUs per host; hands out the lowest free indices (local state of one plan() call)."""

    def __init__(self, views: Mapping[str, _HostView]) -> None:
        self._views = views
        self._next: dict[str, int] = {}
        self._slots: dict[str, int] = {}

    def free(self, host: Host) -> int:
        return self._views[host.name].gpus - self._next.get(host.name, 0)

    def take(self, host: Host, n: int) -> _Rank:
        start = self._next.get(host.name, 0)
        slot = self._slots.get(host.name, 0)
        self._next[host.name] = start + n
        self._slots[host.name] = slot + 1
        return _Rank(host=host, gpus=tuple(range(start, start + n)), slot=slot)


def _hosts(inventory: Inventory, placement: Placement, key: str) -> tuple[Host, ...]:
    from launcher.config.patterns import select

    return select(inventory, placement.hosts, placement.source, key)


def _check_skus(recipe: Recipe, hosts: tuple[Host, ...], views: Mapping[str, _HostView], where: Source, key: str) -> None:
    wanted = " or ".join(recipe.hardware.skus)
    for h in hosts:
        sku = views[h.name].sku
        if sku is None:
            raise PlanError(where, f"host {h.name} has no gpu_model; recipe {recipe.id} runs on {wanted}", key)
        if sku not in recipe.hardware.skus:
            raise PlanError(where, f"host {h.name} has {sku} GPUs; recipe {recipe.id} runs on {wanted}", key)


def _first_fit(
    pool: _Pool, hosts: tuple[Host, ...], role: EngineRole, replicas: int, nodes: int, need: int,
    par: Parallelism, where: Source, key: str, start: int = 0,
) -> list[_Instance]:
    out = []
    for i in range(start, start + replicas):
        ranks: list[_Rank] = []
        for r in range(nodes):
            used = {x.host.name for x in ranks}
            host = next((h for h in hosts if h.name not in used and pool.free(h) >= need), None)
            if host is None:
                raise PlanError(
                    where,
                    f"rank {r} of {role}{i} has no host: {len(hosts)} matched host(s), none with "
                    f"{need} free GPUs left for it",
                    key,
                )
            ranks.append(pool.take(host, need))
        out.append(_Instance(role=role, index=i, ranks=tuple(ranks), parallelism=par))
    return out


def _place(
    recipe: Recipe, playbook: Playbook, inventory: Inventory, views: Mapping[str, _HostView]
) -> list[_Instance]:
    roles = ENGINE_ROLES[recipe.topology]
    for role, placement in playbook.placement.items():
        if role not in roles and role not in INFRA_ROLES:
            expected = ", ".join((*roles, *INFRA_ROLES))
            raise PlanError(
                placement.source, f"role {role!r} does not fit a {recipe.topology} recipe; expected {expected}",
                f"placement/{role}",
            )
    missing = [r for r in roles if r not in playbook.placement]
    if missing:
        raise PlanError(playbook.source, f"recipe {recipe.id} needs a placement for {', '.join(missing)}", "placement")
    pool = _Pool(views)
    need = recipe.hardware.gpus_per_node
    instances: list[_Instance] = []
    for role in roles:
        placement = playbook.placement[role]
        key = f"placement/{role}"
        hosts = _hosts(inventory, placement, key)
        _check_skus(recipe, hosts, views, placement.source, key)
        if recipe.topology == "pd":
            assert recipe.pd is not None
            spec = recipe.pd.prefill if role == "prefill" else recipe.pd.decode
            replicas = placement.replicas or spec.replicas
            instances += _first_fit(pool, hosts, role, replicas, spec.nodes, need, spec.parallelism, placement.source, key)
        elif recipe.topology == "multinode":
            nodes = recipe.hardware.nodes
            if placement.replicas is not None:
                instances += _first_fit(
                    pool, hosts, role, placement.replicas, nodes, need, recipe.parallelism, placement.source, key
                )
                continue
            if len(hosts) % nodes:
                i = len(hosts) // nodes
                raise PlanError(
                    placement.source,
                    f"{len(hosts)} host(s) matched, not a multiple of {nodes} nodes per instance: "
                    f"rank {len(hosts) % nodes} of {role}{i} is missing",
                    key,
                )
            for i in range(len(hosts) // nodes):
                group = hosts[i * nodes:(i + 1) * nodes]
                instances += _first_fit(pool, group, role, 1, nodes, need, recipe.parallelism, placement.source, key, i)
        else:
            instances += _place_single(pool, hosts, placement, recipe, need, key)
    return instances


def _place_single(
    pool: _Pool, hosts: tuple[Host, ...], placement: Placement, recipe: Recipe, need: int, key: str
) -> list[_Instance]:
    ranks: list[_Rank] = []
    if placement.replicas is None:
        for h in hosts:
            if pool.free(h) < need:
                raise PlanError(
                    placement.source, f"host {h.name} has {pool.free(h)} free GPUs, an instance needs {need}", key
                )
            ranks.append(pool.take(h, need))
    else:
        while len(ranks) < placement.replicas:
            fitting = [h for h in hosts if pool.free(h) >= need]
            if not fitting:
                raise PlanError(
                    placement.source,
                    f"{placement.replicas} replicas of {need} GPUs do not fit on the {len(hosts)} matched "
                    f"host(s): only {len(ranks)} do",
                    key,
                )
            for h in fitting[: placement.replicas - len(ranks)]:
                ranks.append(pool.take(h, need))
    return [
        _Instance(role="single", index=i, ranks=(r,), parallelism=recipe.parallelism) for i, r in enumerate(ranks)
    ]


# ---------------------------------------------------------------------------------------------
# Engine units
# ---------------------------------------------------------------------------------------------


def _fill(path: str, host: Host) -> str:
    return path.replace("{models_dir}", host.spec.models_dir).replace("{cache_dir}", host.spec.cache_dir)


def _mounts(recipe: Recipe, host: Host) -> tuple[Mount, ...]:
    mounts = [dataclasses.replace(m, host=_fill(m.host, host)) for m in recipe.mounts]
    if not any(m.container == "/root/.cache" for m in mounts):
        # Kernel/JIT/compile caches and downloaded weights must survive a restart.
        mounts.append(Mount(host=host.spec.cache_dir, container="/root/.cache"))
    if not any(m.host == host.spec.models_dir for m in mounts):
        mounts.append(Mount(host=host.spec.models_dir, container=host.spec.models_dir, read_only=True))
    return tuple(mounts)


def _check_overrides(recipe: Recipe, ov: Overrides) -> None:
    if ov.engine_args and not flags.is_flag(ov.engine_args[0]):
        raise PlanError(ov.source, f"should start with a flag, got {ov.engine_args[0]!r}", "overrides/engine_args")
    owned = registry.get(recipe.engine).planner_flags
    for key, tokens in (("engine_args", ov.engine_args), ("remove_args", ov.remove_args)):
        for tok in tokens:
            if flags.is_flag(tok) and flags.flag_name(tok) in owned:
                raise PlanError(ov.source, f"{flags.flag_name(tok)} is set by the planner for each rank", f"overrides/{key}")
    for flag in ov.drop_docker_flags:
        if flag not in _DROPPABLE:
            raise PlanError(
                ov.source, f"cannot drop {flag!r}; droppable: {', '.join(sorted(_DROPPABLE))}", "overrides/drop_docker_flags"
            )


def reshaped(recipe: Recipe, ov: Overrides) -> Recipe:
    """The recipe with the playbook's model, shape and store overrides applied (the planner then
    treats it as the recipe: placement, argv, network env all follow)."""
    if ov.drop:
        recipe = dataclasses.replace(
            recipe,
            mooncake_store=None if "mooncake_store" in ov.drop else recipe.mooncake_store,
            gateway=None if "gateway" in ov.drop else recipe.gateway,
        )
    if ov.model is None and ov.parallelism is None and ov.nodes is None and ov.gpus_per_node is None:
        return recipe
    hw = dataclasses.replace(
        recipe.hardware, nodes=ov.nodes or recipe.hardware.nodes, gpus_per_node=ov.gpus_per_node or recipe.hardware.gpus_per_node
    )
    par = ov.parallelism or recipe.parallelism
    pd = recipe.pd
    if pd is not None and (ov.parallelism is not None or ov.nodes is not None):
        # A PD recipe's shape is per instance: the overrides reshape prefill and decode alike.
        def side(s: PDRole) -> PDRole:
            return dataclasses.replace(s, parallelism=ov.parallelism or s.parallelism, nodes=ov.nodes or s.nodes)

        pd = dataclasses.replace(pd, prefill=side(pd.prefill), decode=side(pd.decode))
    shapes = [(s.parallelism, s.nodes) for s in (pd.prefill, pd.decode)] if pd is not None else [(par, hw.nodes)]
    for shape, nodes in shapes:
        if shape.gpus != nodes * hw.gpus_per_node:
            raise PlanError(
                ov.source,
                f"tp*pp*dp = {shape.tp}*{shape.pp}*{shape.dp} = {shape.gpus} GPUs, but the shape is {nodes} node(s) x "
                f"{hw.gpus_per_node} GPUs (overrides nodes, gpus_per_node)",
                "overrides/parallelism",
            )
    return dataclasses.replace(recipe, model=ov.model or recipe.model, parallelism=par, hardware=hw, pd=pd)


def _apply(argv: tuple[str, ...], ov: Overrides) -> tuple[str, ...]:
    return flags.override(flags.remove(argv, ov.remove_args), ov.engine_args)


@dataclass(frozen=True, slots=True, kw_only=True)
class _Shared:
    """Per-plan values every engine unit needs."""

    recipe: Recipe
    engine: Engine
    playbook: Playbook
    deployment: str
    ports: Mapping[str, int]
    facts: Mapping[str, HostFacts] | None
    image: str
    images: RoleImages  # resolved: recipe's, then the playbook's, role by role
    timeout_s: int
    mooncake_master: str | None
    mooncake_unit: str | None
    served_model_name: str | None


def _unit_name(deployment: str, label: str, rank: int) -> str:
    return f"fleet-{deployment}-{label}-r{rank}"


def _instance_ports(sh: _Shared, inst: _Instance) -> dict[str, int]:
    slot = inst.ranks[0].slot
    return {k: sh.ports[k] + slot for k in (HTTP, DIST_INIT, BOOTSTRAP, MASTER_PORT, RAY)}


def _network_env(sh: _Shared, inst: _Instance, host: Host, ctx: InstanceContext) -> dict[str, str]:
    recipe, engine = sh.recipe, sh.engine
    cross_node = inst.parallelism.gpus > recipe.hardware.gpus_per_node
    pd = ctx.transfer_backend
    uses_mooncake = pd == "mooncake" or recipe.mooncake_store is not None
    gid = network.gid_index(host, sh.facts) if _needs_gid(recipe, inst) else None
    env: dict[str, str] = dict(engine.device_env(ctx.gpus))
    if engine.collective == "hccl":
        if cross_node or pd is not None:
            env.update(network.hccl_env(host))
    elif cross_node:
        env.update(network.nccl_env(host, gid))
    if uses_mooncake:
        protocol = _mooncake_protocol(recipe, host)
        # vLLM's Mooncake clients read no MOONCAKE_* env (protocol, devices and master come from
        # their config, their address from VLLM_HOST_IP); the transfer engine's MC_* env stays.
        env.update(network.mooncake_env(host, gid, protocol) if engine.mooncake_env else network.mc_env(host, gid, protocol))
    if pd == "nixl":
        env.update(network.ucx_env(host, gid))
    if engine.mooncake_env and recipe.mooncake_store is not None and sh.mooncake_master is not None:
        env.update(mooncake.client_env(recipe.mooncake_store, sh.mooncake_master, inst.parallelism, recipe.source))
    return env


def _mooncake_protocol(recipe: Recipe, host: Host) -> str:
    return network.mooncake_protocol(host, recipe.mooncake_store.protocol if recipe.mooncake_store else "rdma")


def _store_configs(sh: _Shared, units: list[Unit], hosts: Mapping[str, Host]) -> tuple[list[Unit], dict[str, str]]:
    """An engine whose Mooncake store client reads no env (vLLM's MooncakeStoreConnector) loads
    its config only from the JSON file named by MOONCAKE_CONFIG_PATH (fails its start when
    unset): each engine unit gets its own file in its unit directory, mounted read-only at the
    same path so native units read it there too.  An operator's MOONCAKE_CONFIG_PATH in the
    playbook env wins."""
    store, master = sh.recipe.mooncake_store, sh.mooncake_master
    if sh.engine.mooncake_env or store is None or master is None:
        return units, {}
    out: list[Unit] = []
    files: dict[str, str] = {}
    for u in units:
        host = hosts[u.host]
        protocol = _mooncake_protocol(sh.recipe, host)
        name = f"{sh.deployment}/{u.name}/{mooncake.VLLM_CONFIG_FILE}"
        files[name] = mooncake.vllm_store_config(
            store, master, protocol, network.mooncake_device(host, protocol), sh.recipe.source
        )
        path = f"{FILES_ROOT}/{name}"
        container = u.container
        if container is not None:
            mount = Mount(host=path, container=path, read_only=True)
            container = dataclasses.replace(container, mounts=(*container.mounts, mount))
        out.append(dataclasses.replace(u, env={mooncake.CONFIG_PATH_ENV: path, **u.env}, container=container))
    return out, files


def _container(sh: _Shared, inst: _Instance, rank: _Rank, group: str, role: Role, index: int) -> ContainerSpec:
    """An engine rank's container (on the host network unless the recipe says ``network: bridge``)."""
    recipe, host = sh.recipe, rank.host
    cross = len(inst.ranks) > 1 or inst.role in ("prefill", "decode") or recipe.mooncake_store is not None
    devices, gpus = sh.engine.container_devices(rank.gpus)
    if cross and host.spec.fabric != "none":
        devices += ("/dev/infiniband",)
    mounts = _mounts(recipe, host) + sh.engine.container_mounts(cross)
    return ContainerSpec(
        image=sh.image,
        shm_size=sh.playbook.overrides.shm_size or recipe.shm_size,
        gpus=gpus,
        devices=devices,
        # RDMA pins memory: without these NCCL/Mooncake silently fall back to TCP sockets.
        cap_add=("IPC_LOCK",) if cross else (),
        ulimits=("memlock=-1",) if cross else (),
        mounts=mounts,
        extra_args=sh.playbook.overrides.docker_args,
        labels=_labels(sh, group, role, index),
        network_host=recipe.network == "host",
    )


def _labels(sh: _Shared, group: str, role: Role, rank: int) -> dict[str, str]:
    return {
        "fleet.deployment": sh.deployment,
        "fleet.group": group,
        "fleet.rank": str(rank),
        "fleet.recipe": sh.recipe.id,
        "fleet.role": role,
    }


def _needs_gid(recipe: Recipe, inst: _Instance) -> bool:
    """Whether the instance's ranks move data over RDMA (NCCL across nodes, PD KV transfer or
    a Mooncake store), and so need their host's GID index."""
    cross_node = inst.parallelism.gpus > recipe.hardware.gpus_per_node
    pd = recipe.pd is not None and inst.role in ("prefill", "decode")
    return cross_node or pd or recipe.mooncake_store is not None


def _check_auto_gids(inventory: Inventory, recipe: Recipe, instances: Sequence[_Instance],
                     facts: Mapping[str, HostFacts] | None) -> None:  # fmt: skip
    """Every RoCE host whose ``gid_index: auto`` this plan needs has facts; else one error
    naming all of them and the command that gathers theirs."""
    needed = {r.host.name for inst in instances if _needs_gid(recipe, inst) for r in inst.ranks}
    missing = [
        h for h in inventory.hosts
        if h.name in needed and h.spec.fabric == "roce" and h.spec.gid_index == "auto"
        and (facts is None or h.name not in facts)
    ]  # fmt: skip
    if missing:
        names = [h.name for h in missing]
        raise PlanError(
            missing[0].source,
            f"gid_index is auto on {', '.join(names)} but no facts are cached for "
            f"{'them' if len(names) > 1 else 'it'}: run `fleet facts -i {inventory.path} --limit {','.join(names)}`",
        )


_REPO_ID = re.compile(r"[\w.-]+/[\w.-]+")


def _staged(sh: _Shared, host: Host) -> tuple[Recipe, str | None, dict[str, str]]:
    """The recipe as one host's engine sees it, its served name and extra env.  With
    ``weights: staged`` its repo ids become the local copies `fleet weights stage` makes
    ({models_dir}/<repo id>, through the unit's mount of the models dir), the served name stays
    the repo id, and the hub is off (HF_HUB_OFFLINE=1).  A draft goes the way of its target: in
    download mode both are repo ids the engine fetches into one cache (a draft the recipe keeps
    beside the target, ``draft_beside_target``, e.g. DSPARK, is then beside it there), staged both
    are local copies."""
    recipe = sh.recipe
    if sh.playbook.weights != "staged":
        return recipe, sh.served_model_name, {}
    spec = recipe.speculative
    root = host.spec.models_dir
    if runtimes.get(sh.playbook.runtime or host.spec.runtime).containers:
        root = next(m.container for m in _mounts(recipe, host) if m.host == host.spec.models_dir)

    def local(value: str) -> str:
        return posixpath.join(root, value) if _REPO_ID.fullmatch(value) else value

    if spec is not None and spec.draft_model:
        spec = dataclasses.replace(spec, draft_model=local(spec.draft_model))
    staged_recipe = dataclasses.replace(recipe, model=local(recipe.model), speculative=spec)
    return staged_recipe, sh.served_model_name or recipe.model, {"HF_HUB_OFFLINE": "1"}


def _engine_units(sh: _Shared, inst: _Instance, executor: Executor = "mp") -> list[Unit]:
    recipe, ov = sh.recipe, sh.playbook.overrides
    leader = inst.ranks[0].host
    ports = _instance_ports(sh, inst)
    group = f"{sh.deployment}/{inst.group_key}"
    pd = recipe.pd.transfer_backend if recipe.pd and inst.role in ("prefill", "decode") else None
    units: list[Unit] = []
    finals: list[tuple[str, ...]] = []
    for r, rank in enumerate(inst.ranks):
        host = rank.host
        recipe, served, offline = _staged(sh, host)
        ctx = InstanceContext(
            deployment=sh.deployment, role=inst.role, index=inst.index, rank=r, nnodes=len(inst.ranks),
            host=host, data_ip=network.data_ip(host), leader_ip=network.data_ip(leader), gpus=rank.gpus,
            parallelism=inst.parallelism,
            ports={**ports, NIXL_SIDE_CHANNEL: sh.ports[NIXL_SIDE_CHANNEL] + NIXL_STEP * rank.slot},
            served_model_name=served, transfer_backend=pd,
            mooncake_master=sh.mooncake_master, executor=executor,
        )
        written = sh.engine.argv(recipe, ctx)
        final = _apply(written, ov)
        if executor == "mp" and len(inst.ranks) > 1 and sh.engine.wants_ray(final):
            return _ray_units(sh, inst)
        written_env = {**recipe.env, **_network_env(sh, inst, host, ctx), **sh.engine.env(ctx), **offline}
        final_env = {**written_env, **ov.env}
        problem = sh.engine.stop_problem(final, STOP_TIMEOUT_S)
        if problem is not None:
            raise PlanError(ov.source, problem, "overrides/engine_args")
        if r == 0:  # the ranks' argv differ only in per-rank values (_check_same_args)
            _check_argv(recipe, ov, final)
        par = sh.engine.parallelism(final, inst.parallelism)
        _check_parallelism(recipe, ov, inst.parallelism, par)
        if par.gpus != inst.parallelism.gpus:
            raise PlanError(
                ov.source,
                f"tp*pp*dp = {par.tp}*{par.pp}*{par.dp} = {par.gpus} GPUs, but {inst.group_key} is placed on "
                f"{len(inst.ranks)} x {len(rank.gpus)} = {inst.parallelism.gpus}",
                "overrides/engine_args",
            )
        view = _recipe_view(recipe, inst.role, par)
        constraints.check(
            recipe.constraints,
            final=constraints.Subject(recipe=view, argv=final, env=final_env),
            written=constraints.Subject(recipe=_recipe_view(recipe, inst.role, inst.parallelism), argv=written, env=written_env),
            overrides=ov,
            skus=frozenset({host.spec.gpu_model} if host.spec.gpu_model else set()),
        )
        serves = r == 0
        unit_ports = sh.engine.listen_ports(ctx, serves)
        units.append(
            Unit(
                host=host.name,
                name=_unit_name(sh.deployment, inst.group_key, r),
                deployment=sh.deployment,
                role=inst.role,
                group=group,
                rank=r,
                nnodes=len(inst.ranks),
                gpus=rank.gpus,
                ports=unit_ports,
                argv=final,
                env=final_env,
                secrets=sh.playbook.secrets,
                container=_container(sh, inst, rank, group, inst.role, r),
                health=HealthCheck(url=f"http://{ctx.data_ip}:{ports[HTTP]}{sh.engine.health_path}", timeout_s=sh.timeout_s)
                if serves
                else None,
                start_order=1,
                wants=(sh.mooncake_unit,) if sh.mooncake_unit else (),
                runtime=sh.playbook.runtime or host.spec.runtime,
            )
        )
        finals.append(final)
    _check_same_args(sh, group, finals)
    return units


def _check_argv(recipe: Recipe, ov: Overrides, argv: tuple[str, ...]) -> None:
    """The pinned engine version's parser would accept ``argv``; else an error at the file that
    wrote the flag (the playbook's overrides, the recipe's engine_args, or the pin itself)."""
    problem = optioncheck.argv_error(argv, recipe.engine, recipe.engine_version)
    if problem is None:
        return
    flag = optioncheck.flag_of(problem)

    def wrote(tokens: tuple[str, ...]) -> bool:
        return flag is not None and any(flags.is_flag(t) and flags.flag_name(t) == flag for t in tokens)

    if wrote(ov.engine_args):
        raise PlanError(ov.source, problem, "overrides/engine_args")
    if wrote(recipe.engine_args):
        raise PlanError(recipe.source, problem, "engine_args")
    raise PlanError(recipe.source, f"{problem} (a flag fleet writes for {recipe.id}: does engine_version match?)",
                    "engine_version")  # fmt: skip


_PARALLEL_FIELDS = ("tp", "pp", "dp", "ep", "attn_dp", "dcp")


def _check_parallelism(recipe: Recipe, ov: Overrides, planned: Parallelism, argv_says: Parallelism) -> None:
    """``overrides.parallelism`` is what the engine runs: a flag in the argv saying otherwise
    (the recipe's engine_args or the overrides' own) is refused, not silently obeyed."""
    if ov.parallelism is None or recipe.pd is not None:
        return
    for name in _PARALLEL_FIELDS:
        want, got = getattr(planned, name), getattr(argv_says, name)
        if want != got:
            raise PlanError(
                ov.source,
                f"{name} is {want} here, but the engine argv asks for {got} (a flag in the recipe's engine_args "
                f"or overrides.engine_args): change it with overrides.engine_args or drop it with "
                f"overrides.remove_args",
                "overrides/parallelism",
            )


def _recipe_view(recipe: Recipe, role: EngineRole, par: Parallelism) -> Recipe:
    view = dataclasses.replace(recipe, parallelism=par)
    if recipe.pd is not None and role in ("prefill", "decode"):
        side = dataclasses.replace(getattr(recipe.pd, role), parallelism=par)
        view = dataclasses.replace(view, pd=dataclasses.replace(recipe.pd, **{role: side}))
    return view


def _check_same_args(sh: _Shared, group: str, finals: list[tuple[str, ...]]) -> None:
    per_rank = sh.engine.per_rank_flags
    digests = {hashlib.sha256("\0".join(flags.remove(a, per_rank)).encode()).hexdigest() for a in finals}
    if len(digests) > 1:
        raise PlanError(sh.playbook.source, f"ranks of {group} would run different argv", "overrides")


def _ray_units(sh: _Shared, inst: _Instance) -> list[Unit]:
    """vLLM on Ray: a Ray node per rank (group ``<role><i>-ray``) and one ``vllm serve`` on
    rank 0 that waits for all of them."""
    recipe, ov = sh.recipe, sh.playbook.overrides
    leader = inst.ranks[0].host
    ports = _instance_ports(sh, inst)
    ray_group = f"{sh.deployment}/{inst.group_key}-ray"
    units: list[Unit] = []
    for r, rank in enumerate(inst.ranks):
        host = rank.host
        ctx = InstanceContext(
            deployment=sh.deployment, role=inst.role, index=inst.index, rank=r, nnodes=len(inst.ranks),
            host=host, data_ip=network.data_ip(host), leader_ip=network.data_ip(leader), gpus=rank.gpus,
            parallelism=inst.parallelism, ports=ports, executor="ray",
        )
        env = {**recipe.env, **_network_env(sh, inst, host, ctx), **sh.engine.env(ctx), **ov.env}
        units.append(
            Unit(
                host=host.name,
                name=_unit_name(sh.deployment, f"{inst.group_key}-ray", r),
                deployment=sh.deployment,
                role=inst.role,
                group=ray_group,
                rank=r,
                nnodes=len(inst.ranks),
                gpus=rank.gpus,
                ports={RAY: ports[RAY]} if r == 0 else {},
                argv=sh.engine.ray_argv(ctx),
                env=env,
                secrets=sh.playbook.secrets,
                container=_container(sh, inst, rank, ray_group, inst.role, r),
                start_order=1,
                wants=(sh.mooncake_unit,) if sh.mooncake_unit else (),
                runtime=sh.playbook.runtime or host.spec.runtime,
            )
        )
    serve = _engine_units(sh, dataclasses.replace(inst, ranks=inst.ranks[:1]), executor="ray")[0]
    serve = dataclasses.replace(
        serve,
        gpus=(),
        container=dataclasses.replace(serve.container, gpus=()) if serve.container else None,
        wants=serve.wants + tuple(u.name for u in units),
    )
    return units + [serve]


# ---------------------------------------------------------------------------------------------
# Infrastructure units
# ---------------------------------------------------------------------------------------------


def _infra_host(
    role: Role, playbook: Playbook, inventory: Inventory, default: Host
) -> Host:
    placement = playbook.placement.get(role)
    if placement is None:
        return default
    return _hosts(inventory, placement, f"placement/{role}")[0]


def _infra_unit(
    sh: _Shared, role: Role, host: Host, argv: tuple[str, ...], ports: dict[str, int], health_path: str,
    health_port: int, start_order: int, wants: tuple[str, ...], image: str, mounts: tuple[Mount, ...] = (),
    ready_path: str | None = None,
) -> Unit:
    group = f"{sh.deployment}/{role}"
    base = f"http://{network.data_ip(host)}:{health_port}"
    return Unit(
        host=host.name,
        name=_unit_name(sh.deployment, role, 0),
        deployment=sh.deployment,
        role=role,
        group=group,
        ports=ports,
        argv=argv,
        container=ContainerSpec(
            image=image, ipc_host=False, shm_size=None, mounts=mounts,
            extra_args=sh.playbook.overrides.docker_args, labels=_labels(sh, group, role, 0),
        ),
        health=HealthCheck(url=f"{base}{health_path}", timeout_s=INFRA_TIMEOUT_S,
                           ready_url=None if ready_path is None else f"{base}{ready_path}"),
        start_order=start_order,
        wants=wants,
        runtime=sh.playbook.runtime or host.spec.runtime,
    )


def _url(leader: Unit) -> str:
    """An instance's HTTP base URL: its rank 0's health URL (data IP, instance port) without the path."""
    assert leader.health is not None
    return leader.health.base


def _router_unit(sh: _Shared, host: Host, prefill: list[Unit], decode: list[Unit]) -> Unit:
    assert sh.recipe.pd is not None
    port, metrics = sh.ports["router"], sh.ports["router_metrics"]
    argv = sh.engine.pd_router_argv(
        [Leader(url=_url(u), ports=u.ports) for u in prefill], [Leader(url=_url(u), ports=u.ports) for u in decode],
        port, metrics, sh.recipe.pd.transfer_backend,
    )
    ports = {"router": port, "router_metrics": metrics}
    wants = tuple(u.name for u in (*prefill, *decode))
    program = _router_program(sh, argv)
    return _infra_unit(sh, "router", host, argv, ports, program.health_path, port, 2, wants, sh.images.router or sh.image,
                       ready_path=program.ready_path)


def _regular_router_unit(sh: _Shared, host: Host, leaders: list[Unit]) -> Unit:
    """The router of a single or multinode playbook: regular mode over every instance's rank 0."""
    placement = sh.playbook.placement["router"]
    port, metrics = sh.ports["router"], sh.ports["router_metrics"]
    argv = sh.engine.router_argv(tuple(_url(u) for u in leaders), port, metrics)
    if argv is None:
        known = " and ".join(e.name for e in registry.engines() if e.router_argv((), port, metrics) is not None)
        raise PlanError(
            placement.source,
            f"a router in front of {sh.recipe.engine} instances is not supported: fleet knows the router "
            f"flags of {known} engines only; remove the router placement",
            "placement/router",
        )
    ports = {"router": port, "router_metrics": metrics}
    wants = tuple(u.name for u in leaders)
    program = _router_program(sh, argv)
    return _infra_unit(sh, "router", host, argv, ports, program.health_path, port, 2, wants, sh.images.router or sh.image,
                       ready_path=program.ready_path)


def _router_program(sh: _Shared, argv: tuple[str, ...]) -> router.Program:
    """The router program ``argv`` runs (its plug-in: health and readiness paths)."""
    program = router.of_argv(argv)
    if program is None:
        raise PlanError(
            sh.recipe.source,
            f"the router of {sh.recipe.engine} instances runs {images.program_of(argv)}, a program no router "
            "plug-in describes (launcher.engines.router.register adds one)",
            "engine",
        )
    return program


# ---------------------------------------------------------------------------------------------
# Checks over the whole plan
# ---------------------------------------------------------------------------------------------


def _check_ports(playbook: Playbook, units: list[Unit]) -> None:
    seen: dict[tuple[str, int], str] = {}
    for u in units:
        for name, port in sorted(u.ports.items()):
            owner = seen.get((u.host, port))
            if owner is not None:
                raise PlanError(
                    playbook.source,
                    f"port {port} on host {u.host} is used by both {owner} and {u.name} ({name})",
                    "ports",
                )
            seen[(u.host, port)] = f"{u.name} ({name})"


def _check_groups(playbook: Playbook, units: list[Unit]) -> None:
    groups: dict[str, list[Unit]] = {}
    for u in units:
        groups.setdefault(u.group, []).append(u)
    for group, members in groups.items():
        ranks = sorted(u.rank for u in members)
        leaders = [u for u in members if u.health is not None]
        group_images = {u.container.image if u.container else "" for u in members}
        if ranks != list(range(members[0].nnodes)) or len(leaders) > 1 or len(group_images) > 1:
            raise PlanError(playbook.source, f"group {group} is malformed: ranks {ranks}, {len(leaders)} leaders", "placement")


_ROLE_IMAGE_KEY = {"router": "router", "mooncake-master": "mooncake_master"}


def _check_role_images(recipe: Recipe, playbook: Playbook, units: list[Unit]) -> None:
    """A router or Mooncake master whose image fleet knows lacks its program is refused here,
    before any host is touched (``engines/images.py``; preflight's look inside stays the last line)."""
    for u in units:
        key = _ROLE_IMAGE_KEY.get(u.role)
        if key is None or u.container is None:
            continue
        fact = images.lacks(u.container.image, u.argv)
        if fact is None:
            continue
        overridden = getattr(playbook.overrides.images, key) is not None
        raise PlanError(
            playbook.source if overridden else recipe.source,
            f"the {u.role} runs {images.program_of(u.argv)}, which image {u.container.image} does not carry "
            f"({fact.source}): name an image that does in the recipe's images.{key} or the playbook's "
            f"overrides.images.{key}",
            f"overrides.images.{key}" if overridden else f"images.{key}",
        )


def _native(engine: Engine, units: list[Unit]) -> list[Unit]:
    """Units of a runtime without containers (systemd) run the engine natively: device selection
    moves into env, with the host's own indices (in a container they would be renumbered from 0)."""
    out = []
    for u in units:
        if not runtimes.get(u.runtime).containers:
            env = dict(u.env)
            if u.gpus:
                env[engine.visible_devices_env] = ",".join(str(g) for g in u.gpus)
            u = dataclasses.replace(u, container=None, env=env)
        out.append(u)
    return out


def _drop(playbook: Playbook, units: list[Unit]) -> list[Unit]:
    drops = [_DROPPABLE[f] for f in playbook.overrides.drop_docker_flags]
    out = []
    for u in units:
        c = u.container
        if c is not None:
            for drop in drops:
                c = drop(c)
        out.append(dataclasses.replace(u, container=c))
    return out


# ---------------------------------------------------------------------------------------------
# Entry points
# ---------------------------------------------------------------------------------------------


def plan(
    inventory: Inventory,
    catalog: Catalog,
    playbook: Playbook,
    facts: Mapping[str, HostFacts] | None = None,
) -> Plan:
    """Place ``playbook`` on ``inventory`` (see the module docstring for the rules)."""
    ov = playbook.overrides
    recipe = reshaped(catalog.get(playbook.recipe), ov)
    _check_overrides(recipe, ov)
    deployment = deployment_name(playbook.name)
    ports = _ports(recipe, playbook)
    views = {h.name: _host_view(h, facts) for h in inventory.hosts}
    instances = _place(recipe, playbook, inventory, views)
    _check_auto_gids(inventory, recipe, instances, facts)
    first = instances[0].ranks[0].host
    prefill_first = next((i.ranks[0].host for i in instances if i.role == "prefill"), first)
    decode_first = next((i.ranks[0].host for i in instances if i.role == "decode"), first)
    if "router" not in playbook.ports and (recipe.topology == "pd" or "router" in playbook.placement):
        router_host = _infra_host("router", playbook, inventory, decode_first if recipe.topology == "pd" else first)
        if any(r.host.name == router_host.name for i in instances for r in i.ranks):
            # Beside engines whose ports may include the default (8000 is vLLM's HTTP port):
            # the first router port no engine unit of this recipe may hold, as auto_playbook picks.
            ports["router"] = _free_router_port(recipe)

    units: list[Unit] = []
    master_addr = master_unit = None
    image = ov.image or recipe.image
    if recipe.mooncake_store is not None:
        host = _infra_host("mooncake-master", playbook, inventory, prefill_first)
        rpc = ports["mooncake_master"]
        master_addr = f"{network.data_ip(host)}:{rpc}"
        argv = mooncake.master_argv(rpc, ports["mooncake_metadata"], ports["mooncake_metrics"])
        mports = {k: ports[k] for k in ("mooncake_master", "mooncake_metadata", "mooncake_metrics")}
        sh0 = _shared(recipe, playbook, deployment, ports, facts, image, None, None)
        master = _infra_unit(sh0, "mooncake-master", host, argv, mports, mooncake.MASTER_HEALTH_PATH, ports["mooncake_metrics"], 0, (),
                             sh0.images.mooncake_master or image)
        master_unit = master.name
        units.append(master)
    sh = _shared(recipe, playbook, deployment, ports, facts, image, master_addr, master_unit)
    engine_units: list[Unit] = []
    for inst in instances:
        engine_units += _engine_units(sh, inst)
    engine_units, files = _store_configs(sh, engine_units, {h.name: h for h in inventory.hosts})
    units += engine_units
    leaders = [u for u in engine_units if u.health is not None]

    upstreams: tuple[str, ...]
    gw_wants: tuple[str, ...]
    if recipe.topology == "pd":
        host = _infra_host("router", playbook, inventory, decode_first)
        r = _router_unit(
            sh, host, [u for u in leaders if u.role == "prefill"], [u for u in leaders if u.role == "decode"]
        )
        units.append(r)
        upstreams = (f"{network.data_ip(host)}:{ports['router']}",)
        gw_default, gw_wants = host, (r.name,)
    elif "router" in playbook.placement:
        host = _infra_host("router", playbook, inventory, first)
        r = _regular_router_unit(sh, host, leaders)
        units.append(r)
        upstreams = (f"{network.data_ip(host)}:{ports['router']}",)
        gw_default, gw_wants = host, (r.name,)
    else:
        upstreams = tuple(u.health.url.split("//", 1)[1].rsplit("/", 1)[0] for u in leaders if u.health)
        gw_default, gw_wants = first, tuple(u.name for u in leaders)

    if recipe.gateway is not None:
        host = _infra_host("gateway", playbook, inventory, gw_default)
        port = ports["gateway"]
        name = f"gateway/{deployment}.conf"
        files[name] = router.gateway_conf(deployment, recipe.gateway.route, upstreams, port)
        mount = Mount(host=f"{FILES_ROOT}/{name}", container=router.GATEWAY_CONF_PATH, read_only=True)
        units.append(
            _infra_unit(
                sh, "gateway", host, router.GATEWAY_ARGV, {"gateway": port}, router.GATEWAY_HEALTH_PATH, port, 3, gw_wants,
                recipe.gateway.image, (mount,),
            )
        )
    _check_ports(playbook, units)
    _check_groups(playbook, units)
    units = _drop(playbook, _native(registry.get(recipe.engine), units))
    _check_role_images(recipe, playbook, units)
    units.sort(key=lambda u: (u.start_order, u.group, u.rank))
    return Plan(deployment=deployment, recipe=recipe.id, units=tuple(units), files=files)


def _shared(
    recipe: Recipe, playbook: Playbook, deployment: str, ports: Mapping[str, int],
    facts: Mapping[str, HostFacts] | None, image: str, master: str | None, master_unit: str | None,
) -> _Shared:
    ov = playbook.overrides.images
    images = RoleImages(router=ov.router or recipe.images.router,
                        mooncake_master=ov.mooncake_master or recipe.images.mooncake_master)
    return _Shared(
        recipe=recipe, engine=registry.get(recipe.engine), playbook=playbook, deployment=deployment, ports=ports, facts=facts, image=image, images=images,
        timeout_s=playbook.overrides.start_timeout_s or recipe.start_timeout_s,
        mooncake_master=master, mooncake_unit=master_unit,
        served_model_name=recipe.served_model_name or (recipe.gateway.route if recipe.gateway else None),
    )


def _fits(recipe: Recipe, host: Host) -> bool:
    spec = host.spec
    cross = recipe.topology != "single"
    return (
        spec.gpu_model in recipe.hardware.skus
        and spec.gpu_count >= recipe.hardware.gpus_per_node
        and (not cross or spec.fabric != "none")
    )


def auto_playbook(recipe: Recipe, inventory: Inventory, hosts_pattern: str | None = None) -> Playbook:
    """A playbook placing ``recipe`` on the first hosts (inventory order) that fit it, or on
    ``hosts_pattern``: one instance (PD: the recipe's xPyD), router on the first decode host."""
    source = recipe.source
    if hosts_pattern is not None:
        from launcher.config.patterns import select

        candidates = select(inventory, hosts_pattern, None, "--hosts")
    else:
        candidates = tuple(h for h in inventory.hosts if _fits(recipe, h))
    views = {h.name: _HostView(sku=h.spec.gpu_model, gpus=h.spec.gpu_count) for h in inventory.hosts}
    pool = _Pool(views)
    need = recipe.hardware.gpus_per_node
    fabric = " with an RDMA fabric" if recipe.topology != "single" else ""
    key = "hardware"

    def fit(role: EngineRole, replicas: int, nodes: int, par: Parallelism) -> list[_Instance]:
        try:
            return _first_fit(pool, candidates, role, replicas, nodes, need, par, source, key)
        except PlanError:
            raise PlanError(
                source,
                f"recipe {recipe.id} needs {replicas * nodes} more host(s) with {need} free "
                f"{'/'.join(recipe.hardware.skus)} GPUs{fabric}; {inventory.path} has {len(candidates)} "
                f"fitting host(s)",
                key,
            ) from None

    placement: dict[Role, Placement] = {}
    ports: dict[str, int] = {}

    def pattern(insts: list[_Instance]) -> str:
        names = {r.host.name for i in insts for r in i.ranks}
        return ":".join(h.name for h in inventory.hosts if h.name in names)

    if recipe.pd is not None:
        pre = fit("prefill", recipe.pd.prefill.replicas, recipe.pd.prefill.nodes, recipe.pd.prefill.parallelism)
        dec = fit("decode", recipe.pd.decode.replicas, recipe.pd.decode.nodes, recipe.pd.decode.parallelism)
        placement["prefill"] = Placement(hosts=pattern(pre), replicas=recipe.pd.prefill.replicas, source=source)
        placement["decode"] = Placement(hosts=pattern(dec), replicas=recipe.pd.decode.replicas, source=source)
        ports["router"] = _free_router_port(recipe)
    else:
        role: EngineRole = "rank" if recipe.topology == "multinode" else "single"
        insts = fit(role, 1, recipe.hardware.nodes, recipe.parallelism)
        placement[role] = Placement(hosts=pattern(insts), source=source)
    return Playbook(
        path=recipe.source.path,
        name=deployment_name(recipe.id),
        recipe=recipe.id,
        placement=placement,
        ports=ports,
        source=source,
    )


def _free_router_port(recipe: Recipe) -> int:
    taken = _reserved(recipe)
    return next(p for p in ROUTER_PORTS if p not in taken)


def _reserved(recipe: Recipe) -> set[int]:
    """Ports engine units of ``recipe`` may hold on a host with up to 8 instances."""
    base = default_ports(recipe)
    return {
        base[k] + i
        for k in (HTTP, DIST_INIT, BOOTSTRAP, MASTER_PORT, "mooncake_master", "mooncake_metadata", "mooncake_metrics", "gateway")
        for i in range(8)
    } | {base[NIXL_SIDE_CHANNEL] + i for i in range(8 * NIXL_STEP)}


def to_jsonable(value: object) -> object:
    """A plan (or any model value) as JSON-ready data: dataclasses -> dicts, tuples -> lists."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        return [to_jsonable(v) for v in value]
    return value
