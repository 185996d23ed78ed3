"""A :class:`~launcher.model.Plan` as Kubernetes objects (pure): the k8s renderer beside docker and
systemd.

- **single**: a Deployment (one replica per planned instance) + a Service;
- **multinode**: a ``leaderworkerset.x-k8s.io/v1`` LeaderWorkerSet (``size`` = nodes, the leader
  template from rank 0, the worker template from the other ranks, ``RecreateGroupOnPodRestart``,
  ``LeaderCreated``: the leader's health needs every rank, so ``LeaderReady`` would never start
  the workers) + a Service on the leaders;
- **pd**: a ``disaggregatedset.x-k8s.io/v1`` DisaggregatedSet with a prefill and a decode role
  (replicas = the plan's xPyD, each role an LWS template as above);
- the router (if planned: always for PD) as a Deployment + Service with a ServiceAccount allowed
  to list pods: it finds the engines' leader pods by label (``--service-discovery``), since
  DisaggregatedSet's child names carry a revision hash; prefill pods carry the bootstrap port in
  the annotation the router's program reads (``Program.bootstrap_annotation``); the flags are
  the program's (:meth:`launcher.engines.router.Program.discovery_argv`);
- the Mooncake master as a Deployment + Service; the gateway as a ConfigMap + Deployment + Service.

Every object has ``metadata.namespace``; the pod labels are ``fleet.io/deployment`` and
``fleet.io/role``.  :func:`export` raises :class:`ExportError` for what has no equivalent.
"""

from __future__ import annotations

import dataclasses
import posixpath
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from launcher.engines import registry, router
from launcher.export.k8s import pods
from launcher.export.k8s.podcheck import WORKER_INDEX_LABEL, pod_templates
from launcher.export.k8s.pools import NodeFacts
from launcher.export.k8s.templates import Addresses, ExportError, Template, fold, fold_file, same_ports
from launcher.model import ContainerSpec, Host, Mount, Plan, Recipe, Unit
from launcher.network import data_ip
from launcher.observe.targets import METRICS_PATH, endpoints

LWS_API = "leaderworkerset.x-k8s.io/v1"
DS_API = "disaggregatedset.x-k8s.io/v1"
DEPLOYMENT_LABEL = "fleet.io/deployment"
ROLE_LABEL = "fleet.io/role"
RECIPE_ANNOTATION = "fleet.io/recipe"
FILES_ROOT = "/etc/fleet"
_ENGINE_ROLES = ("single", "rank", "prefill", "decode")


@dataclass(frozen=True, slots=True, kw_only=True)
class Manifest:
    """One object, written to ``file`` in the export directory."""

    file: str
    obj: Mapping[str, Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class Export:
    deployment: str
    namespace: str
    manifests: tuple[Manifest, ...]
    node_labels: tuple[tuple[str, Mapping[str, str]], ...]  # inventory host -> labels its node needs
    notes: tuple[str, ...]  # what could not be carried over, one line each
    secret_name: str | None  # the Secret the operator creates (None: the plan has no secrets)
    secret_keys: tuple[str, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class Options:
    namespace: str = "default"
    image: str  # for units the plan runs natively (systemd): the recipe's (or override's) image
    shm_size: str = "32g"  # likewise


class _Ctx:
    """What every builder reads: the plan, its hosts and the rewrite tables."""

    def __init__(self, plan: Plan, recipe: Recipe, hosts: Mapping[str, Host], nodes: Mapping[str, NodeFacts], opts: Options) -> None:
        self.plan, self.recipe, self.hosts, self.nodes, self.opts = plan, recipe, hosts, nodes, opts
        self.name = plan.deployment
        self.ns = opts.namespace
        engine = registry.get(recipe.engine)
        self.engine = engine
        self.notes: list[str] = []  # what the builders could not carry over
        self.metrics = {e.unit: int(e.address.rsplit(":", 1)[1]) for e in endpoints(plan.units)}
        self.secret_keys = tuple(sorted({s.name for u in plan.units for s in u.secrets}))
        self.secret_name = f"{self.name}-secrets" if self.secret_keys else None
        self.router = next((_program(u) for u in plan.units if u.role == "router"), None)
        services: dict[str, str] = {}
        for u in plan.units:
            if u.role in ("router", "mooncake-master", "gateway"):
                for port in u.ports.values():
                    services[f"{data_ip(hosts[u.host])}:{port}"] = f"{self.service_name(u.role)}:{port}"
        known = {data_ip(h) for h in hosts.values()} | {h.address for h in hosts.values()}  # every inventory host's
        self.addresses = Addresses(
            data_ip={h: data_ip(hosts[h]) for h in {u.host for u in plan.units}}, known=frozenset(known), services=services
        )

    def service_name(self, role: str) -> str:
        return f"{self.name}-{role}"

    def meta(self, name: str) -> dict[str, Any]:
        return {"name": name, "namespace": self.ns, "labels": {DEPLOYMENT_LABEL: self.name},
                "annotations": {RECIPE_ANNOTATION: self.recipe.id}}  # fmt: skip

    def labels(self, role: str) -> dict[str, str]:
        return {DEPLOYMENT_LABEL: self.name, ROLE_LABEL: role}

    def container(self, u: Unit) -> ContainerSpec:
        if u.container is not None:
            return u.container
        host = self.hosts[u.host]
        mounts = [dataclasses.replace(m, host=m.host.replace("{models_dir}", host.spec.models_dir)
                                      .replace("{cache_dir}", host.spec.cache_dir)) for m in self.recipe.mounts]  # fmt: skip
        if not any(m.host == host.spec.models_dir for m in mounts):
            mounts.append(Mount(host=host.spec.models_dir, container=host.spec.models_dir, read_only=True))
        return ContainerSpec(image=self.opts.image, shm_size=self.opts.shm_size, mounts=tuple(mounts))

    def annotations(self, u: Unit) -> dict[str, str]:
        out = {RECIPE_ANNOTATION: self.recipe.id}
        port = self.metrics.get(u.name)
        if port is not None:
            out.update({"prometheus.io/scrape": "true", "prometheus.io/port": str(port), "prometheus.io/path": METRICS_PATH})
        if u.role == "prefill" and "bootstrap" in u.ports and self.router is not None:
            out[self.router.bootstrap_annotation] = str(u.ports["bootstrap"])
        return out

    def node_terms(self, units: Sequence[Unit]) -> list[dict[str, str]]:
        terms: list[dict[str, str]] = []
        for u in units:
            labels = dict(self.nodes[u.host].labels)
            if labels not in terms:
                terms.append(labels)
        return terms


def _files_of(u: Unit) -> dict[str, str]:
    """Plan files ``u`` mounts: host path -> plan file name."""
    c = u.container
    if c is None:
        return {}
    return {m.host: m.host.removeprefix(FILES_ROOT + "/") for m in c.mounts if m.host.startswith(FILES_ROOT + "/")}


def _template_files(ctx: _Ctx, units: Sequence[Unit], key: str) -> tuple[list[Unit], dict[str, str], dict[str, str]]:
    """Units whose plan-file paths are replaced by one path per template (under
    /etc/fleet/<deployment>/<key>/), the ConfigMap data (file name -> content) and the
    template's host path -> ConfigMap key."""
    out: list[Unit] = []
    contents: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for u in units:
        env, mounts = dict(u.env), []
        c = u.container
        for host_path, name in _files_of(u).items():
            if name not in ctx.plan.files:
                continue
            base = posixpath.basename(name)
            path = f"{FILES_ROOT}/{ctx.name}/{key}/{base}"
            contents[base].append((u.name, ctx.plan.files[name]))
            env = {k: (path if v == host_path else v) for k, v in env.items()}
            mounts.append((host_path, path))
        if c is not None and mounts:
            # A file mounted at its host path (vLLM's store config, named by env) moves with it;
            # one mounted elsewhere (the gateway's conf) keeps its place in the container.
            moved = dict(mounts)
            c = dataclasses.replace(c, mounts=tuple(
                dataclasses.replace(m, host=moved[m.host], container=moved[m.host] if m.container == m.host else m.container)
                if m.host in moved else m for m in c.mounts))  # fmt: skip
        out.append(dataclasses.replace(u, env=env, container=c))
    data = {base: fold_file(base, cs, ctx.addresses) for base, cs in sorted(contents.items())}
    files_dir = {f"{FILES_ROOT}/{ctx.name}/{key}/{base}": base for base in data}
    return out, data, files_dir


def _pod(ctx: _Ctx, units: Sequence[Unit], key: str, container_name: str, engine: bool,
         leaders: Mapping[str, str | None]) -> tuple[dict[str, Any], list[Manifest], Template]:  # fmt: skip
    """The pod template of ``units`` (plus its ConfigMap, if it mounts fleet files)."""
    units, data, files_dir = _template_files(ctx, units, key)
    t = fold(units, ctx.addresses, leaders, ctx.nodes, sorted({s.name for u in units for s in u.secrets}), ctx.engine)
    extra: list[Manifest] = []
    files_map = None
    if data:
        files_map = f"{ctx.name}-{key}-files"
        extra.append(Manifest(file=f"configmap-{files_map}.yaml", obj={
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": ctx.meta(files_map), "data": data}))  # fmt: skip
    u = t.first
    pod = pods.pod_template(
        t, container_name, ctx.container(u), ctx.hosts[u.host], ctx.nodes[u.host],
        labels=ctx.labels(u.role), annotations=ctx.annotations(u), node_terms=ctx.node_terms(units) if engine else [],
        secret_name=ctx.secret_name or "", engine=engine, accelerator=ctx.engine.accelerator, files_map=files_map,
        files_dir=files_dir,
    )  # fmt: skip
    return pod, extra, t


def _groups(units: Sequence[Unit]) -> dict[str, list[Unit]]:
    out: dict[str, list[Unit]] = defaultdict(list)
    for u in units:
        out[u.group].append(u)
    return {g: sorted(us, key=lambda u: u.rank) for g, us in sorted(out.items())}


def _lws_template(ctx: _Ctx, role: str, units: Sequence[Unit]) -> tuple[dict[str, Any], list[Manifest], int]:
    """``leaderWorkerTemplate`` for the instances of one role: size, restart policy, templates."""
    groups = _groups(units)
    sizes = {len(us) for us in groups.values()}
    if len(sizes) != 1:
        raise ExportError(f"role {role}: instances of different sizes ({sorted(sizes)}) cannot share one LWS template")
    size = sizes.pop()
    leaders: dict[str, str | None] = {g: (data_ip(ctx.hosts[us[0].host]) if size > 1 else None) for g, us in groups.items()}
    leader_pod, extra, _ = _pod(ctx, [us[0] for us in groups.values()], f"{role}-leader" if size > 1 else role, "engine", True, leaders)
    lwt: dict[str, Any] = {"size": size, "restartPolicy": "RecreateGroupOnPodRestart"}
    if size == 1:
        lwt["workerTemplate"] = leader_pod
    else:
        worker_pod, more, _ = _pod(ctx, [u for us in groups.values() for u in us[1:]], f"{role}-worker", "engine", True, leaders)
        lwt["leaderTemplate"] = leader_pod
        lwt["workerTemplate"] = worker_pod
        extra += more
    return lwt, extra, len(groups)


def _service(ctx: _Ctx, name: str, selector: Mapping[str, str], ports: Mapping[str, int]) -> Manifest:
    obj = {
        "apiVersion": "v1", "kind": "Service", "metadata": ctx.meta(name),
        "spec": {"selector": dict(selector),
                 "ports": [{"name": pods.port_name(k), "port": v, "targetPort": v, "protocol": "TCP"}
                           for k, v in sorted(ports.items())]},
    }  # fmt: skip
    return Manifest(file=f"service-{name}.yaml", obj=obj)


def _deployment(ctx: _Ctx, name: str, role: str, pod: dict[str, Any], replicas: int) -> Manifest:
    obj = {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": ctx.meta(name),
        "spec": {"replicas": replicas, "selector": {"matchLabels": ctx.labels(role)}, "template": pod},
    }  # fmt: skip
    return Manifest(file=f"deployment-{name}.yaml", obj=obj)


def _engines(ctx: _Ctx, units: Sequence[Unit]) -> list[Manifest]:
    by_role: dict[str, list[Unit]] = defaultdict(list)
    for u in units:
        by_role[u.role].append(u)
    for role, role_units in by_role.items():
        groups = list(_groups(role_units).values())
        first = next(u for u in groups[0] if u.rank == 0).ports
        by_role[role] = [u for g in groups for u in same_ports(g, first)]
        if len(groups) > 1 and any(g[0].ports != groups[0][0].ports for g in groups):
            ctx.notes.append(f"{role} instances fleet runs side by side on one host on distinct ports all use "
                             f"the first instance's ports here ({_shown(first)})")  # fmt: skip
    if "single" in by_role and len({u.host for u in by_role["single"]}) < len(by_role["single"]):
        # Side by side on one port needs a network namespace per pod; a single-node instance
        # has no cross-node traffic that would want the host's network.
        by_role["single"] = [_pod_network(ctx, u) for u in by_role["single"]]
        ctx.notes.append("single instances fleet packs onto one host run on the pod network (no hostNetwork), "
                         "so they still pack on one port")  # fmt: skip
    out: list[Manifest] = []
    name = ctx.name
    if "prefill" in by_role or "decode" in by_role:
        roles = []
        for role in ("prefill", "decode"):
            lwt, extra, replicas = _lws_template(ctx, role, by_role[role])
            out += extra
            roles.append({"name": role, "spec": {"replicas": replicas, "startupPolicy": "LeaderCreated", "leaderWorkerTemplate": lwt}})
        ds = {"apiVersion": DS_API, "kind": "DisaggregatedSet", "metadata": ctx.meta(name), "spec": {"roles": roles}}
        out.append(Manifest(file=f"disaggregatedset-{name}.yaml", obj=ds))
        return out
    if "rank" in by_role:
        lwt, extra, replicas = _lws_template(ctx, "rank", by_role["rank"])
        lws = {"apiVersion": LWS_API, "kind": "LeaderWorkerSet", "metadata": ctx.meta(name),
               "spec": {"replicas": replicas, "startupPolicy": "LeaderCreated", "leaderWorkerTemplate": lwt}}  # fmt: skip
        leader = next(u for u in by_role["rank"] if u.rank == 0)
        out += extra
        out.append(Manifest(file=f"leaderworkerset-{name}.yaml", obj=lws))
        out.append(_service(ctx, name, {**ctx.labels("rank"), WORKER_INDEX_LABEL: "0"}, _http(leader)))
        return out
    singles = by_role["single"]
    pod, extra, _ = _pod(ctx, singles, "single", "engine", True, {u.group: None for u in singles})
    out += extra
    out.append(_deployment(ctx, name, "single", pod, len(_groups(singles))))
    out.append(_service(ctx, name, ctx.labels("single"), _http(singles[0])))
    return out


def _shown(ports: Mapping[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(ports.items()))


def _pod_network(ctx: _Ctx, u: Unit) -> Unit:
    return dataclasses.replace(u, container=dataclasses.replace(ctx.container(u), network_host=False))


def _http(u: Unit) -> dict[str, int]:
    return {"http": u.ports["http"]}


def _program(u: Unit) -> router.Program:
    program = router.of_argv(u.argv)
    assert program is not None, u.argv  # the planner refuses a router no program describes
    return program


def router_argv(ctx: _Ctx, u: Unit, engine_port: int) -> tuple[str, ...]:
    """The router's planned argv with the engine address lists replaced by service discovery of
    the leader pods in this namespace."""
    program = _program(u)
    leader = f"{WORKER_INDEX_LABEL}=0"
    dep = f"{DEPLOYMENT_LABEL}={ctx.name}"
    if program.is_pd(u.argv):
        return program.discovery_argv(u.argv, engine_port, ctx.ns, prefill=(dep, f"{ROLE_LABEL}=prefill", leader),
                                      decode=(dep, f"{ROLE_LABEL}=decode", leader))  # fmt: skip
    role = "rank" if any(x.role == "rank" for x in ctx.plan.units) else "single"
    selector = (dep, f"{ROLE_LABEL}={role}", *((leader,) if role == "rank" else ()))
    return program.discovery_argv(u.argv, engine_port, ctx.ns, selector=selector)


def _router(ctx: _Ctx, u: Unit, engine_port: int) -> list[Manifest]:
    name = ctx.service_name("router")
    argv = router_argv(ctx, u, engine_port)
    routed = dataclasses.replace(u, argv=argv)
    pod, extra, _ = _pod(ctx, [routed], "router", "router", False, {u.group: None})
    pod["spec"]["serviceAccountName"] = name
    rbac = [
        Manifest(file=f"serviceaccount-{name}.yaml", obj={"apiVersion": "v1", "kind": "ServiceAccount", "metadata": ctx.meta(name)}),
        Manifest(file=f"role-{name}.yaml", obj={
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": ctx.meta(name),
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}]}),
        Manifest(file=f"rolebinding-{name}.yaml", obj={
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": ctx.meta(name),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": ctx.ns}]}),
    ]  # fmt: skip
    return [*extra, *rbac, _deployment(ctx, name, "router", pod, 1), _service(ctx, name, ctx.labels("router"), u.ports)]


def _infra(ctx: _Ctx, u: Unit) -> list[Manifest]:
    """The Mooncake master or the gateway: one replica + a Service on its ports."""
    name = ctx.service_name(u.role)
    pod, extra, _ = _pod(ctx, [u], u.role, u.role, False, {u.group: None})
    return [*extra, _deployment(ctx, name, u.role, pod, 1), _service(ctx, name, ctx.labels(u.role), u.ports)]


def _notes(ctx: _Ctx, templates_derive: bool) -> list[str]:
    notes = [
        "per-host addresses: the data IP of each rank is the pod IP (hostNetwork: the node's "
        "InternalIP); where the data NIC carries another address, set the node's InternalIP to it",
    ]
    if any(u.container is not None and u.container.ulimits for u in ctx.plan.units):
        notes.append("ulimit memlock=-1 has no pod field: the container runtime's default applies "
                     "(containerd: unlimited for root); IPC_LOCK is kept")  # fmt: skip
    if any(u.container is not None and u.container.extra_args for u in ctx.plan.units):
        notes.append("the playbook's raw docker_args have no pod equivalent and were left out")
    if any(u.container is None for u in ctx.plan.units):  # a runtime without containers (systemd)
        notes.append("units fleet runs natively under systemd run in the recipe's image here")
    if templates_derive:
        notes.append("per-host RoCE GID index / data NIC (different between the hosts of a role, or auto in "
                     "the pool file): an init container (fleet-net-env) derives them on each node, as "
                     "gid_index: auto does")  # fmt: skip
    return notes + ctx.notes


def export(plan: Plan, recipe: Recipe, hosts: Mapping[str, Host], nodes: Mapping[str, NodeFacts], opts: Options) -> Export:
    """Every object of ``plan`` (see the module docstring), in a stable order."""
    ctx = _Ctx(plan, recipe, hosts, nodes, opts)
    if any(u.argv[:1] == ("ray",) for u in plan.units):
        raise ExportError("vLLM's Ray executor is not exported: LWS runs the mp executor (drop --distributed-executor-backend ray)")
    engines = [u for u in plan.units if u.role in _ENGINE_ROLES]
    manifests: list[Manifest] = []
    for u in plan.units:
        if u.role == "mooncake-master":
            manifests += _infra(ctx, u)
    manifests += _engines(ctx, engines)
    engine_port = next(u.ports["http"] for u in engines if "http" in u.ports)
    for u in plan.units:
        if u.role == "router":
            manifests += _router(ctx, u, engine_port)
        elif u.role == "gateway":
            manifests += _infra(ctx, u)
    derive = any("initContainers" in t["spec"] for m in manifests for _, t in pod_templates(m.obj))
    node_labels = tuple(
        (h, dict(nodes[h].labels)) for h in sorted({u.host for u in plan.units}) if nodes[h].label_node and nodes[h].labels
    )
    return Export(deployment=ctx.name, namespace=ctx.ns, manifests=tuple(manifests), node_labels=node_labels,
                  notes=tuple(_notes(ctx, derive)), secret_name=ctx.secret_name, secret_keys=ctx.secret_keys)  # fmt: skip
