"""Offline validation of exported objects (``fleet export k8s --check`` and the tests).

- LeaderWorkerSet / DisaggregatedSet: the vendored ``openAPIV3Schema`` of LWS ``v0.10.0``
  (``schemas/``, see its README) with ``jsonschema``, read as the API server reads a structural
  schema under ``kubectl apply``'s strict field validation: unknown fields are errors (unless
  ``x-kubernetes-preserve-unknown-fields``), ``x-kubernetes-int-or-string`` takes either,
  ``int32``/``int64`` formats are range-checked, ``x-kubernetes-list-type: map|set`` lists have
  unique keys/items, and every ``x-kubernetes-validations`` CEL rule is evaluated with ``celpy``
  (rules on ``oldSelf`` only apply to updates and are skipped);  ``metadata`` is checked against
  Kubernetes' ObjectMeta.
- Core objects (Deployment, Service, ConfigMap, ServiceAccount, Role, RoleBinding): the strict
  Kubernetes OpenAPI schemas of Kubernetes ``1.36`` (LWS v0.10.0 builds against k8s.io/api
  v0.36) shipped by ``kubernetes-validate``.
- What the schemas leave to the API server and LWS's admission webhooks (restated here, no code
  of theirs): object names (DNS-1035 labels for Services and LWS, DNS-1123 subdomains otherwise;
  a DisaggregatedSet's child LWS names ``<name>-0-<revision>-<role>`` too), LWS ``replicas`` in
  [0, 1000000], ``size`` >= 1 -- checked once the schemas pass.
- ``kustomization.yaml``: kustomize's JSON schema (from SchemaStore, vendored in ``schemas/``),
  its apiVersion/kind, and every listed resource present.

A problem is one line: ``FILE: INSTANCE.PATH: MESSAGE (schema: SCHEMA/PATH)`` — the schema's own
path, so a reader finds the rule.  A manifest that does not validate is a bug, never a warning.
"""

from __future__ import annotations

import copy
import json
import re
from functools import lru_cache
from importlib.resources import files
from typing import Any, Iterable, Iterator, Mapping, Sequence

import celpy
from celpy.adapter import json_to_cel
from celpy.celtypes import BoolType
from celpy.evaluation import CELEvalError
import jsonschema
import kubernetes_validate.utils as kv  # type: ignore[import-untyped]
from referencing import Registry, Resource

from launcher.export.k8s import podcheck

LWS_VERSION = "v0.10.0"
KUBERNETES_VERSION = "1.36"
_CRDS = {
    ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet"): "leaderworkerset.x-k8s.io_leaderworkersets.json",
    ("disaggregatedset.x-k8s.io/v1", "DisaggregatedSet"): "disaggregatedset.x-k8s.io_disaggregatedsets.json",
}
_OBJECT_META = "https://kubernetes.io/api/_definitions.json#/$defs/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
_INT_RANGE = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}


def _path(parts: Iterable[object]) -> str:
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "(root)"


def _problem(file: str, instance_path: Iterable[object], message: str, schema_path: Iterable[object]) -> str:
    return f"{file}: {_path(instance_path)}: {message} (schema: {'/'.join(str(s) for s in schema_path)})"


# ---------------------------------------------------------------------------------------------
# CRDs
# ---------------------------------------------------------------------------------------------


def _structural(node: Any) -> Any:
    """A CRD schema as JSON Schema with the API server's reading (see the module docstring)."""
    if isinstance(node, list):
        return [_structural(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: _structural(v) for k, v in node.items() if k != "x-kubernetes-validations"}
    if node.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if (
        node.get("type") == "object" and "properties" in node and "additionalProperties" not in node
        and not node.get("x-kubernetes-preserve-unknown-fields")
    ):  # fmt: skip
        out["additionalProperties"] = False
    return out


@lru_cache(maxsize=None)
def crd(api_version: str, kind: str) -> Mapping[str, Any]:
    """The vendored ``openAPIV3Schema`` of a CRD kind."""
    text = files("launcher.export.k8s").joinpath("schemas", _CRDS[(api_version, kind)]).read_text(encoding="utf-8")
    schema: Mapping[str, Any] = json.loads(text)["openAPIV3Schema"]
    return schema


_FORMATS = jsonschema.FormatChecker()


@_FORMATS.checks("int32")
def _int32(value: object) -> bool:
    return not isinstance(value, int) or _INT_RANGE["int32"][0] <= value <= _INT_RANGE["int32"][1]


@_FORMATS.checks("int64")
def _int64(value: object) -> bool:
    return not isinstance(value, int) or _INT_RANGE["int64"][0] <= value <= _INT_RANGE["int64"][1]


@lru_cache(maxsize=None)
def _crd_validator(api_version: str, kind: str) -> jsonschema.protocols.Validator:
    schema = _structural(copy.deepcopy(dict(crd(api_version, kind))))
    schema["properties"]["metadata"] = {"$ref": _OBJECT_META}
    return jsonschema.Draft202012Validator(schema, registry=_core_registry(), format_checker=_FORMATS)


@lru_cache(maxsize=None)
def _cel(rule: str) -> Any:
    env = celpy.Environment()
    return env.program(env.compile(rule))


def _cel_and_lists(file: str, schema: Mapping[str, Any], value: Any, ipath: list[object], spath: list[object]) -> Iterator[str]:
    """CEL rules and list-type uniqueness, walking ``value`` beside its schema."""
    for i, v in enumerate(schema.get("x-kubernetes-validations", [])):
        rule = v["rule"]
        if "oldSelf" in rule:
            continue  # a transition rule: only updates have an old object
        try:
            ok = _cel(rule).evaluate({"self": json_to_cel(value)})
        except CELEvalError as err:
            ok = err
        if not (isinstance(ok, BoolType) and bool(ok)):
            yield _problem(file, ipath, v.get("message") or f"failed rule {rule}", [*spath, "x-kubernetes-validations", i])
    if isinstance(value, dict):
        props = schema.get("properties", {})
        for k, v in value.items():
            if k in props:
                yield from _cel_and_lists(file, props[k], v, [*ipath, k], [*spath, "properties", k])
            elif isinstance(schema.get("additionalProperties"), dict):
                yield from _cel_and_lists(file, schema["additionalProperties"], v, [*ipath, k], [*spath, "additionalProperties"])
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        kind = schema.get("x-kubernetes-list-type")
        keys = schema.get("x-kubernetes-list-map-keys", [])
        seen: set[str] = set()
        for i, item in enumerate(value):
            if kind == "map" and isinstance(item, dict):
                key = json.dumps([item.get(k) for k in keys])
            elif kind == "set":
                key = json.dumps(item, sort_keys=True)
            else:
                key = None
            if key is not None:
                if key in seen:
                    yield _problem(file, [*ipath, i], f"duplicate entry {key}", [*spath, "x-kubernetes-list-type"])
                seen.add(key)
            yield from _cel_and_lists(file, schema["items"], item, [*ipath, i], [*spath, "items"])


def _crd_problems(file: str, obj: Mapping[str, Any]) -> list[str]:
    api, kind = obj["apiVersion"], obj["kind"]
    out = [_problem(file, e.absolute_path, e.message, ["openAPIV3Schema", *e.absolute_schema_path])
           for e in sorted(_crd_validator(api, kind).iter_errors(obj), key=lambda e: list(map(str, e.absolute_path)))]  # fmt: skip
    out += list(_cel_and_lists(file, crd(api, kind), obj, [], ["openAPIV3Schema"]))
    return out


# ---------------------------------------------------------------------------------------------
# Core objects
# ---------------------------------------------------------------------------------------------


def _schema_dir() -> str:
    return f"kubernetes-json-schema/v{KUBERNETES_VERSION}.0-local-strict"


@lru_cache(maxsize=1)
def _core_registry() -> Registry[Any]:
    defs = kv.schema_contents(f"{_schema_dir()}/_definitions.json", KUBERNETES_VERSION)
    registry: Registry[Any] = Resource.from_contents(defs) @ Registry()
    return registry


@lru_cache(maxsize=None)
def _core_validator(api_version: str, kind: str) -> jsonschema.protocols.Validator:
    group = api_version.split("/")[0].split(".")[0] + "-" + api_version.split("/")[-1] if "/" in api_version else api_version
    name = f"{kind.lower()}-{group}.json"
    try:
        schema = kv.schema_contents(f"{_schema_dir()}/{name}", KUBERNETES_VERSION)
    except FileNotFoundError:
        raise KeyError(f"{api_version} {kind}") from None
    registry = Resource.from_contents(schema) @ _core_registry()
    return jsonschema.Draft202012Validator(schema, registry=registry)


def _core_problems(file: str, obj: Mapping[str, Any]) -> list[str]:
    try:
        validator = _core_validator(obj["apiVersion"], obj["kind"])
    except KeyError:
        return [f"{file}: (root): no Kubernetes {KUBERNETES_VERSION} schema for {obj['apiVersion']} {obj['kind']}"]
    return [_problem(file, e.absolute_path, e.message, [f"{obj['kind'].lower()} {KUBERNETES_VERSION}", *e.absolute_schema_path])
            for e in sorted(validator.iter_errors(obj), key=lambda e: list(map(str, e.absolute_path)))]  # fmt: skip


# ---------------------------------------------------------------------------------------------
# What the API server and LWS's admission webhooks check beyond the schemas
# ---------------------------------------------------------------------------------------------

_DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_WEBHOOK = "LWS v0.10.0 admission webhook"
# DisaggregatedSet names each child LWS "<name>-<slice>-<8-hex revision>-<role>" (its utils.go).
_CHILD_EXTRA = len("-0-") + 8 + len("-")


def _name_problems(file: str, obj: Mapping[str, Any]) -> list[str]:
    name = obj.get("metadata", {}).get("name")
    if not isinstance(name, str):
        return [f"{file}: metadata.name: required"]
    kind = obj["kind"]
    if kind in ("Service", "LeaderWorkerSet"):
        # A Service's name is a DNS label; LWS names its headless Service after itself.
        if len(name) > 63 or not _DNS1035.match(name):
            return [f"{file}: metadata.name: {name!r} must be a DNS-1035 label: lowercase letters, digits and "
                    f"'-', starting with a letter, at most 63 (API server / {_WEBHOOK})"]  # fmt: skip
    elif len(name) > 253 or not _DNS1123_SUBDOMAIN.match(name):
        return [f"{file}: metadata.name: {name!r} must be a DNS-1123 subdomain (API server)"]
    return []


def _lws_spec_problems(file: str, path: str, spec: Mapping[str, Any]) -> list[str]:
    """generalValidate of LWS's webhook: replicas in [0, 1000000], size >= 1, their product in int32."""
    out = []
    replicas, size = spec.get("replicas", 1), spec.get("leaderWorkerTemplate", {}).get("size", 1)
    if isinstance(replicas, int) and not 0 <= replicas <= 1_000_000:
        out.append(f"{file}: {path}.replicas: {replicas} must be between 0 and 1000000 ({_WEBHOOK})")
    if isinstance(size, int) and size < 1:
        out.append(f"{file}: {path}.leaderWorkerTemplate.size: {size} must be equal or greater than 1 ({_WEBHOOK})")
    if isinstance(replicas, int) and isinstance(size, int) and replicas * size > _INT_RANGE["int32"][1]:
        out.append(f"{file}: {path}.replicas: replicas x size must not exceed {_INT_RANGE['int32'][1]} ({_WEBHOOK})")
    return out


def _admission_problems(file: str, obj: Mapping[str, Any]) -> list[str]:
    out = _name_problems(file, obj)
    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        return out
    if obj["kind"] == "LeaderWorkerSet":
        out += _lws_spec_problems(file, "spec", spec)
    elif obj["kind"] == "DisaggregatedSet":
        name = obj.get("metadata", {}).get("name", "")
        for i, role in enumerate(spec.get("roles", [])):
            if not isinstance(role, Mapping) or not isinstance(role.get("spec"), Mapping):
                continue
            out += _lws_spec_problems(file, f"spec.roles[{i}].spec", role["spec"])
            child = f"{name}-0-{'0' * 8}-{role.get('name', '')}"
            if isinstance(name, str) and (len(child) > 63 or not _DNS1035.match(child)):
                out.append(f"{file}: spec.roles[{i}].name: the child LeaderWorkerSet name {name}-0-<revision>-"
                           f"{role.get('name')} ({len(child)} characters) must be a DNS-1035 label of at most 63: "
                           f"shorten the deployment name to {63 - _CHILD_EXTRA - len(str(role.get('name')))} ({_WEBHOOK})")  # fmt: skip
    return out


def problems(file: str, obj: Mapping[str, Any]) -> list[str]:
    """Every problem of one object (empty: valid)."""
    if not isinstance(obj, Mapping) or not isinstance(obj.get("apiVersion"), str) or not isinstance(obj.get("kind"), str):
        return [f"{file}: (root): not a Kubernetes object (apiVersion and kind are required)"]
    if (obj["apiVersion"], obj["kind"]) in _CRDS:
        found = _crd_problems(file, obj)
    else:
        found = _core_problems(file, obj)
    return found or _admission_problems(file, obj)


@lru_cache(maxsize=1)
def _kustomization_validator() -> jsonschema.protocols.Validator:
    text = files("launcher.export.k8s").joinpath("schemas", "kustomization.json").read_text(encoding="utf-8")
    return jsonschema.Draft7Validator(json.loads(text))


def kustomization_problems(file: str, doc: Any, present: Iterable[str]) -> list[str]:
    """``kustomization.yaml`` against kustomize's schema (SchemaStore's, vendored), kustomize's
    apiVersion/kind, and every listed resource present."""
    if not isinstance(doc, Mapping):
        return [f"{file}: (root): not a mapping"]
    out = [_problem(file, e.absolute_path, e.message, ["kustomization", *e.absolute_schema_path])
           for e in sorted(_kustomization_validator().iter_errors(doc), key=lambda e: list(map(str, e.absolute_path)))]  # fmt: skip
    if doc.get("apiVersion") != "kustomize.config.k8s.io/v1beta1" or doc.get("kind") != "Kustomization":
        out.append(f"{file}: (root): apiVersion/kind must be kustomize.config.k8s.io/v1beta1 Kustomization")
    resources = doc.get("resources")
    if not isinstance(resources, list) or not resources:
        return [*out, f"{file}: resources: must list the objects' files"]
    have = set(present)
    out += [f"{file}: resources[{i}]: {r} is missing" for i, r in enumerate(resources) if isinstance(r, str) and r not in have]
    return out


def check_set(objects: Sequence[tuple[str, Any]], kustomization: tuple[str, Any] | None, present: Iterable[str]) -> list[str]:
    """Every problem of an export: each object (schemas, CEL, admission rules, then the API
    server's pod checks on its pod templates), the objects together (selectors that select
    nothing), the kustomization (``None``: missing)."""
    out: list[str] = []
    valid: list[tuple[str, Mapping[str, Any]]] = []
    for file, obj in objects:
        found = problems(file, obj)
        if not found:
            for path, template in podcheck.pod_templates(obj):
                found += podcheck.pod_problems(file, path, template)
            if obj["kind"] == "Deployment":
                found += podcheck.deployment_problems(file, obj)
            valid.append((file, obj))
        out += found
    # Selectors are judged against every object's templates, valid or not: one broken object is
    # reported once, not again as "selects nothing" from each object selecting it.
    shaped = [(f, o) for f, o in objects if isinstance(o, Mapping) and isinstance(o.get("spec", {}), Mapping)]
    templates = []
    for file, obj in shaped:
        try:
            pairs = zip(podcheck.controller_labels(obj), podcheck.pod_templates(obj))
            templates += [(file, labels, _argv(t)) for (_, labels), (_, t) in pairs]
        except (AttributeError, TypeError, KeyError):
            continue  # not shaped like a workload: its own problems say so
    out += podcheck.link_problems(valid, templates)
    if kustomization is None:
        return [*out, "kustomization.yaml: missing"]
    return out + kustomization_problems(kustomization[0], kustomization[1], present)


def _argv(template: Mapping[str, Any]) -> list[str]:
    containers = template.get("spec", {}).get("containers", [])
    c = containers[0] if containers else {}
    return [*c.get("command", []), *c.get("args", [])]
