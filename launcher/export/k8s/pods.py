"""A pod template (plain dict, as the API takes it) from a folded :class:`Template` (pure).

What maps to what (docs/kubernetes.md has the whole table):
- the unit's container: image, argv (``command``; with derived env, ``sh -c`` sources the init
  container's file first and the engine argv moves to ``args``), env (literal, ``status.podIP``,
  ``secretKeyRef``), its ports, ``IPC_LOCK`` and other added capabilities;
- the unit's accelerators -> ``nvidia.com/gpu`` (NPUs: ``huawei.com/Ascend910``), ``/dev/infiniband`` -> the
  node's RDMA resource; ``--shm-size`` -> a memory emptyDir at /dev/shm of the same size;
- host networking -> ``hostNetwork`` (+ ``ClusterFirstWithHostNet`` so Service and LWS names
  resolve), ``--ipc host`` -> ``hostIPC``;
- the models dir -> hostPath (or the PVC the node pool names), other host dirs -> hostPath, fleet's
  generated files -> a ConfigMap;
- the health check -> startup (the recipe's cold-start budget), readiness and liveness probes;
- fleet's stop grace -> ``terminationGracePeriodSeconds``.
"""

from __future__ import annotations

import math
import re
from importlib.resources import files
from typing import Any, Mapping
from urllib.parse import urlsplit

from launcher.export.k8s.pools import NodeFacts
from launcher.export.k8s.templates import ExportError, Template
from launcher.model import STOP_TIMEOUT_S, ContainerSpec, Host, Unit

# The device plugins' resource per kind of accelerator (launcher.engines.base.Engine.accelerator).
ACCELERATOR_RESOURCE = {"gpu": "nvidia.com/gpu", "npu": "huawei.com/Ascend910"}
NET_ENV_DIR = "/run/fleet"
NET_ENV_FILE = f"{NET_ENV_DIR}/net.env"
# Sources the derived env, then runs the engine argv given as "$@" (quoted once, here).
WRAPPER = f'set -a && . {NET_ENV_FILE} && set +a && exec "$@"'
PROBE_PERIOD_S = 10
_RDMA_ENV = ("NCCL_IB_HCA", "MOONCAKE_DEVICE", "UCX_NET_DEVICES")
# Port names are IANA service names: at most 15 characters, no '_'.
_PORT_NAMES = {
    "nixl_side_channel": "nixl", "mooncake_master": "rpc", "mooncake_metadata": "metadata",
    "mooncake_metrics": "metrics", "router_metrics": "metrics", "master_port": "master",
}  # fmt: skip


def port_name(name: str) -> str:
    return _PORT_NAMES.get(name, name.replace("_", "-"))[:15]


def quantity(docker_size: str) -> str:
    """docker's ``--shm-size`` (``32g``: binary units) as a Kubernetes quantity (``32Gi``)."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([bkmg]?)", docker_size.strip().lower())
    if m is None:
        raise ExportError(f"shm size {docker_size!r} is not a size like 32g")
    suffix = {"": "", "b": "", "k": "Ki", "m": "Mi", "g": "Gi"}[m.group(2)]
    return f"{m.group(1)}{suffix}"


def _probe(path: str, port: int, period: int, failures: int, timeout: int) -> dict[str, Any]:
    return {
        "httpGet": {"path": path, "port": port},
        "periodSeconds": period,
        "failureThreshold": failures,
        "timeoutSeconds": timeout,
    }


def probes(u: Unit, engine: bool) -> dict[str, Any]:
    """Startup probe with the unit's health deadline (the recipe's measured cold start), then
    liveness on the same endpoint and readiness on the unit's ready endpoint where it has one (a
    router is ready once a worker is: the Service sends it nothing before; it is not restarted
    while its workers start, which can take longer than its own deadline)."""
    if u.health is None:
        return {}
    url = urlsplit(u.health.url)
    ready = urlsplit(u.health.gate_url)
    assert url.port is not None and ready.port is not None, u.health
    timeout = 30 if engine else 5  # SGLang's /health runs a one-token generation (its own 20 s bound)
    return {
        "startupProbe": _probe(url.path, url.port, PROBE_PERIOD_S, max(1, math.ceil(u.health.timeout_s / PROBE_PERIOD_S)), timeout),
        "readinessProbe": _probe(ready.path, ready.port, PROBE_PERIOD_S, 3, timeout),
        "livenessProbe": _probe(url.path, url.port, 30, 5, timeout),
    }


def _env(t: Template, secret_name: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for e in t.env:
        if e.field is not None:
            out.append({"name": e.name, "valueFrom": {"fieldRef": {"fieldPath": e.field}}})
        elif e.secret is not None:
            out.append({"name": e.name, "valueFrom": {"secretKeyRef": {"name": secret_name, "key": e.secret}}})
        else:
            out.append({"name": e.name, "value": e.value})
    return out


def _resources(u: Unit, c: ContainerSpec, facts: NodeFacts, accelerator: str) -> dict[str, Any]:
    limits: dict[str, Any] = {}
    if u.gpus:
        limits[ACCELERATOR_RESOURCE[accelerator]] = len(u.gpus)
    if "/dev/infiniband" in c.devices or any(k in u.env for k in _RDMA_ENV):
        limits[facts.rdma_resource] = 1
    return {"limits": limits} if limits else {}


class _Volumes:
    """The pod's volumes, named once each."""

    def __init__(self) -> None:
        self.volumes: list[dict[str, Any]] = []
        self.mounts: list[dict[str, Any]] = []

    def add(self, name: str, source: dict[str, Any], path: str, read_only: bool = False, sub_path: str | None = None) -> None:
        if not any(v["name"] == name for v in self.volumes):
            self.volumes.append({"name": name, **source})
        mount: dict[str, Any] = {"name": name, "mountPath": path}
        if read_only:
            mount["readOnly"] = True
        if sub_path is not None:
            mount["subPath"] = sub_path
        self.mounts.append(mount)


def _volumes(t: Template, c: ContainerSpec, host: Host, facts: NodeFacts, files_map: str | None,
             files_dir: Mapping[str, str]) -> _Volumes:  # fmt: skip
    vols = _Volumes()
    if c.shm_size:
        vols.add("shm", {"emptyDir": {"medium": "Memory", "sizeLimit": quantity(c.shm_size)}}, "/dev/shm")
    for i, m in enumerate(c.mounts):
        if m.host in files_dir:
            assert files_map is not None
            key = files_dir[m.host]
            vols.add("files", {"configMap": {"name": files_map}}, m.container, True, key)
        elif m.host == host.spec.models_dir:
            source: dict[str, Any] = (
                {"persistentVolumeClaim": {"claimName": facts.models_pvc, "readOnly": m.read_only}}
                if facts.models_pvc
                else {"hostPath": {"path": m.host, "type": "Directory"}}
            )
            vols.add("models", source, m.container, m.read_only)
        elif m.host.startswith(host.spec.cache_dir):
            vols.add(f"cache-{i}", {"hostPath": {"path": m.host, "type": "DirectoryOrCreate"}}, m.container, m.read_only)
        else:
            vols.add(f"host-{i}", {"hostPath": {"path": m.host}}, m.container, m.read_only)
    if t.derived:
        vols.add("net-env", {"emptyDir": {}}, NET_ENV_DIR)
    return vols


def pod_template(
    t: Template, name: str, c: ContainerSpec, host: Host, facts: NodeFacts, *, labels: Mapping[str, str],
    annotations: Mapping[str, str], node_terms: list[dict[str, str]], secret_name: str, engine: bool,
    accelerator: str = "gpu", files_map: str | None = None, files_dir: Mapping[str, str] | None = None,
) -> dict[str, Any]:  # fmt: skip
    """The pod template of ``t`` (container ``name``): ``node_terms`` are the node label sets
    any of which the pods may land on (one: a nodeSelector; several: node affinity)."""
    u = t.first
    vols = _volumes(t, c, host, facts, files_map, files_dir or {})
    container: dict[str, Any] = {"name": name, "image": c.image}
    if t.derived:
        container["command"] = ["/bin/sh", "-c", WRAPPER, "fleet-net-env"]
        container["args"] = list(t.argv)
    else:
        container["command"] = list(t.argv)
    env = _env(t, secret_name)
    if env:
        container["env"] = env
    ports = [{"name": port_name(k), "containerPort": v, "protocol": "TCP"} for k, v in sorted(u.ports.items())]
    if ports:
        container["ports"] = ports
    resources = _resources(u, c, facts, accelerator)
    if resources:
        container["resources"] = resources
    if c.cap_add:
        container["securityContext"] = {"capabilities": {"add": list(c.cap_add)}}
    container.update(probes(u, engine))
    container["volumeMounts"] = vols.mounts
    spec: dict[str, Any] = {}
    if c.network_host:
        spec["hostNetwork"] = True
        spec["dnsPolicy"] = "ClusterFirstWithHostNet"
    if c.ipc_host:
        spec["hostIPC"] = True
    if t.derived:
        spec["initContainers"] = [_net_env_container(t, c)]
    spec["containers"] = [container]
    spec["terminationGracePeriodSeconds"] = STOP_TIMEOUT_S
    spec.update(_placement(node_terms))
    spec["volumes"] = vols.volumes
    meta: dict[str, Any] = {"labels": dict(labels)}
    if annotations:
        meta["annotations"] = dict(annotations)
    return {"metadata": meta, "spec": spec}


def _placement(terms: list[dict[str, str]]) -> dict[str, Any]:
    terms = [t for t in terms if t]
    if not terms:
        return {}
    if len(terms) == 1:
        return {"nodeSelector": dict(terms[0])}
    selector_terms = [
        {"matchExpressions": [{"key": k, "operator": "In", "values": [v]} for k, v in sorted(t.items())]} for t in terms
    ]
    return {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": selector_terms}}}}


def net_env_script() -> str:
    """The init container's program text (:mod:`launcher.export.k8s.net_env`'s source, run with
    ``python3 -c``)."""
    return files("launcher.export.k8s").joinpath("net_env.py").read_text(encoding="utf-8")


def _net_env_container(t: Template, c: ContainerSpec) -> dict[str, Any]:
    return {
        "name": "fleet-net-env",
        "image": c.image,
        "command": ["python3", "-c", net_env_script(), NET_ENV_FILE, ",".join(t.hcas), *t.derived],
        "env": [{"name": "FLEET_POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
        "volumeMounts": [{"name": "net-env", "mountPath": NET_ENV_DIR}],
    }


def shown_argv(container: Mapping[str, Any]) -> tuple[str, ...]:
    """The engine argv a container runs (``args`` behind the net-env wrapper, else ``command``)."""
    if container.get("command", [])[:3] == ["/bin/sh", "-c", WRAPPER]:
        return tuple(container["args"])
    return tuple(container["command"])
