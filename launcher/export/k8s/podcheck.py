"""What the API server checks on a pod template beyond its OpenAPI schema (restated, none of its
code), and what makes a set of exported objects hang together.

A pod template inside a LeaderWorkerSet or DisaggregatedSet is admitted against the CRD's schema
only; the API server's own pod validation runs when LWS creates the StatefulSets, where a failure
is an event nobody reads.  So every pod template of an export is checked here (``pod_problems``):
container, port and volume names, a mount naming no volume, duplicate mount paths, env names,
label syntax, resource quantities, a Deployment's selector against its template's labels.
``link_problems`` checks the objects together: every Service and every router's service
discovery selector (:func:`launcher.engines.router.discovery_selectors`) selects some pod
template of the export.
"""

from __future__ import annotations

import re
from typing import Any, Iterable, Mapping, Sequence

from launcher.engines import router

_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_IANA_SVC_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$")
_LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_QUANTITY = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)(([KMGTPE]i)|[numkMGTPE]|[eE][+-]?\d+)?$")
_API_SERVER = "API server pod validation"
WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"


def label_key_problem(key: str) -> str | None:
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not _DNS1123_SUBDOMAIN.match(prefix)):
        return f"label key {key!r}: prefix must be a DNS-1123 subdomain"
    if len(name) > 63 or not _LABEL_NAME.match(name):
        return f"label key {key!r}: name must be at most 63 alphanumerics, '-', '_' or '.'"
    return None


def _labels(file: str, path: str, labels: Any) -> list[str]:
    if not isinstance(labels, Mapping):
        return []
    out = []
    for k, v in labels.items():
        problem = label_key_problem(str(k))
        if problem is not None:
            out.append(f"{file}: {path}: {problem} ({_API_SERVER})")
        if not isinstance(v, str) or len(v) > 63 or not _LABEL_VALUE.match(v):
            out.append(f"{file}: {path}.{k}: label value {v!r} is not valid ({_API_SERVER})")
    return out


def _container(file: str, path: str, c: Mapping[str, Any], volumes: set[str]) -> list[str]:
    out = []
    seen_ports: set[str] = set()
    for i, p in enumerate(c.get("ports", [])):
        name = p.get("name")
        if name is not None:
            if len(name) > 15 or not _IANA_SVC_NAME.match(name) or "--" in name or not re.search("[a-z]", name):
                out.append(f"{file}: {path}.ports[{i}].name: {name!r} is not an IANA service name ({_API_SERVER})")
            if name in seen_ports:
                out.append(f"{file}: {path}.ports[{i}].name: {name!r} is used twice ({_API_SERVER})")
            seen_ports.add(name)
        if not 1 <= p.get("containerPort", 0) <= 65535:
            out.append(f"{file}: {path}.ports[{i}].containerPort: must be 1-65535 ({_API_SERVER})")
    for i, e in enumerate(c.get("env", [])):
        name = e.get("name", "")
        if not name or "=" in name:
            out.append(f"{file}: {path}.env[{i}].name: {name!r} is not an env name ({_API_SERVER})")
    for kind in ("limits", "requests"):
        for k, v in c.get("resources", {}).get(kind, {}).items():
            if not _QUANTITY.match(str(v)):
                out.append(f"{file}: {path}.resources.{kind}.{k}: {v!r} is not a quantity ({_API_SERVER})")
    paths: set[str] = set()
    for i, m in enumerate(c.get("volumeMounts", [])):
        if m.get("name") not in volumes:
            out.append(f"{file}: {path}.volumeMounts[{i}].name: no volume named {m.get('name')!r} ({_API_SERVER})")
        if m.get("mountPath") in paths:
            out.append(f"{file}: {path}.volumeMounts[{i}].mountPath: {m.get('mountPath')} is mounted twice ({_API_SERVER})")
        paths.add(m.get("mountPath"))
    return out


def pod_problems(file: str, path: str, template: Mapping[str, Any]) -> list[str]:
    """The API server's pod checks (see the module docstring) on one pod template at ``path``."""
    out = _labels(file, f"{path}.metadata.labels", template.get("metadata", {}).get("labels"))
    spec = template.get("spec", {})
    volumes: set[str] = set()
    for i, v in enumerate(spec.get("volumes", [])):
        name = v.get("name", "")
        if len(name) > 63 or not _DNS1123_LABEL.match(name) or name in volumes:
            out.append(f"{file}: {path}.spec.volumes[{i}].name: {name!r} is not a unique DNS-1123 label ({_API_SERVER})")
        volumes.add(name)
    names: set[str] = set()
    for kind in ("initContainers", "containers"):
        for i, c in enumerate(spec.get(kind, [])):
            where = f"{path}.spec.{kind}[{i}]"
            name = c.get("name", "")
            if len(name) > 63 or not _DNS1123_LABEL.match(name) or name in names:
                out.append(f"{file}: {where}.name: {name!r} is not a unique DNS-1123 label ({_API_SERVER})")
            names.add(name)
            out += _container(file, where, c, volumes)
    out += _labels(file, f"{path}.spec.nodeSelector", spec.get("nodeSelector"))
    return out


def selects(selector: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def deployment_problems(file: str, obj: Mapping[str, Any]) -> list[str]:
    spec = obj.get("spec", {})
    selector = spec.get("selector", {}).get("matchLabels", {})
    labels = spec.get("template", {}).get("metadata", {}).get("labels", {})
    if not selects(selector, labels):
        return [f"{file}: spec.selector: does not match the template's labels ({_API_SERVER})"]
    return []


def link_problems(objects: Iterable[tuple[str, Mapping[str, Any]]],
                  templates: Sequence[tuple[str, Mapping[str, str], Sequence[str]]]) -> list[str]:  # fmt: skip
    """Services and router selectors that select no pod template (``templates``: file, the pod
    labels as the controllers set them, the first container's argv)."""
    out = []
    for file, obj in objects:
        if obj.get("kind") == "Service":
            selector = obj.get("spec", {}).get("selector", {})
            if selector and not any(selects(selector, labels) for _, labels, _ in templates):
                out.append(f"{file}: spec.selector: {dict(selector)} selects no pod template of this export")
    for file, _, argv in templates:
        for selector in router.discovery_selectors(argv):
            if not any(selects(selector, labels) for _, labels, _ in templates):
                out.append(f"{file}: router selector {selector} selects no pod template of this export")
    return out


def pod_templates(obj: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """(path, pod template) of every pod template in ``obj``: a Deployment's, an LWS's leader and
    worker templates, each DisaggregatedSet role's."""
    spec = obj.get("spec", {})
    out: list[tuple[str, Mapping[str, Any]]] = []
    if "template" in spec:
        out.append(("spec.template", spec["template"]))
    if "leaderWorkerTemplate" in spec:
        out += _lwt("spec.leaderWorkerTemplate", spec["leaderWorkerTemplate"])
    for i, r in enumerate(spec.get("roles", [])):
        out += _lwt(f"spec.roles[{i}].spec.leaderWorkerTemplate", r.get("spec", {}).get("leaderWorkerTemplate", {}))
    return out


def _lwt(path: str, lwt: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    return [(f"{path}.{k}", lwt[k]) for k in ("leaderTemplate", "workerTemplate") if k in lwt]


def controller_labels(obj: Mapping[str, Any]) -> list[tuple[str, dict[str, str]]]:
    """(path, labels) of each pod template in ``obj`` with the LWS worker-index label LWS adds:
    "0" on the leader template (the worker template when there is no leader template), "1" as a
    worker's."""
    found = pod_templates(obj)
    paths = {p for p, _ in found}
    out = []
    for path, t in found:
        labels = dict(t.get("metadata", {}).get("labels", {}))
        if path.endswith("Template") and "leaderWorkerTemplate" in path:
            leader = path.endswith("leaderTemplate") or path.replace("workerTemplate", "leaderTemplate") not in paths
            labels[WORKER_INDEX_LABEL] = "0" if leader else "1"
        out.append((path, labels))
    return out
