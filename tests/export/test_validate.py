"""Deliberately broken exports fail validation, each with the schema's own path in the message:
the vendored LWS v0.10.0 CRDs (structural reading, int32 ranges, list-map keys, the CEL rule),
the core objects' Kubernetes 1.36 schemas, the kustomization."""

from __future__ import annotations

import copy
from typing import Any

from launcher.export.k8s import run
from launcher.export.k8s.validate import check_set, crd, kustomization_problems, problems
from tests.export.helpers import exported, of_kind

PD = "playbooks/pd-glm-2p1d-6000d.yaml"
LWS = "kimi/sglang-tp8pp2-h100"
LWT = "spec.roles[0].spec.leaderWorkerTemplate"
LWT_SCHEMA = "openAPIV3Schema/properties/spec/properties/roles/items/properties/spec/properties/leaderWorkerTemplate"


def ds() -> dict[str, Any]:
    return copy.deepcopy(of_kind(exported(PD), "DisaggregatedSet"))


def test_the_unbroken_exports_are_valid() -> None:
    assert run.check(exported(PD)) == []
    assert run.check(exported(LWS)) == []


def test_wrong_size_type() -> None:
    obj = ds()
    obj["spec"]["roles"][0]["spec"]["leaderWorkerTemplate"]["size"] = "2"
    assert problems("ds.yaml", obj) == [
        f"ds.yaml: {LWT}.size: '2' is not of type 'integer' (schema: {LWT_SCHEMA}/properties/size/type)"
    ]


def test_wrong_size_out_of_int32() -> None:
    obj = copy.deepcopy(of_kind(exported(LWS), "LeaderWorkerSet"))
    obj["spec"]["leaderWorkerTemplate"]["size"] = 2**31
    assert problems("lws.yaml", obj) == [
        "lws.yaml: spec.leaderWorkerTemplate.size: 2147483648 is not a 'int32' "
        "(schema: openAPIV3Schema/properties/spec/properties/leaderWorkerTemplate/properties/size/format)"
    ]


def test_unknown_field() -> None:
    obj = ds()
    obj["spec"]["roles"][0]["spec"]["leaderWorkerTemplate"]["sizes"] = 2
    assert problems("ds.yaml", obj) == [
        f"ds.yaml: {LWT}: Additional properties are not allowed ('sizes' was unexpected) "
        f"(schema: {LWT_SCHEMA}/additionalProperties)"
    ]


def test_missing_container() -> None:
    obj = ds()
    del obj["spec"]["roles"][0]["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"]
    assert problems("ds.yaml", obj) == [
        f"ds.yaml: {LWT}.workerTemplate.spec: 'containers' is a required property "
        f"(schema: {LWT_SCHEMA}/properties/workerTemplate/properties/spec/required)"
    ]


def test_the_cel_rule_of_disaggregatedset() -> None:
    rules = crd("disaggregatedset.x-k8s.io/v1", "DisaggregatedSet")["properties"]["spec"]["x-kubernetes-validations"]
    assert len(rules) == 1
    obj = ds()
    obj["spec"]["roles"][1]["spec"]["replicas"] = 0
    assert problems("ds.yaml", obj) == [
        "ds.yaml: spec: replicas must be zero for all non-External roles or non-zero for all non-External roles "
        "(schema: openAPIV3Schema/properties/spec/x-kubernetes-validations/0)"
    ]
    obj["spec"]["roles"][1]["scaling"] = {"mode": "External"}  # external roles are exempt
    assert problems("ds.yaml", obj) == []


def test_duplicate_container_names_break_the_list_map() -> None:
    obj = ds()
    containers = obj["spec"]["roles"][1]["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"]
    containers.append(copy.deepcopy(containers[0]))
    (p,) = problems("ds.yaml", obj)
    assert p.startswith('ds.yaml: spec.roles[1].spec.leaderWorkerTemplate.workerTemplate.spec.containers[1]: duplicate entry ["engine"]')
    assert p.endswith("/workerTemplate/properties/spec/properties/containers/x-kubernetes-list-type)")


def test_core_objects_against_kubernetes_1_36() -> None:
    written = exported(PD)
    dep = copy.deepcopy(of_kind(written, "Deployment"))
    dep["spec"]["template"]["spec"]["containers"][0]["imagePullPolicyy"] = "Always"
    assert problems("d.yaml", dep) == [
        "d.yaml: spec.template.spec.containers[0]: Additional properties are not allowed ('imagePullPolicyy' was "
        "unexpected) (schema: deployment 1.36/properties/spec/properties/template/properties/spec/properties/"
        "containers/items/additionalProperties)"
    ]
    svc = copy.deepcopy(of_kind(written, "Service"))
    svc["spec"]["ports"][0]["port"] = "http"
    assert problems("s.yaml", svc) == [
        "s.yaml: spec.ports[0].port: 'http' is not of type 'integer' "
        "(schema: service 1.36/properties/spec/properties/ports/items/properties/port/type)"
    ]
    assert problems("x.yaml", {"apiVersion": "v9", "kind": "Gadget"}) == [
        "x.yaml: (root): no Kubernetes 1.36 schema for v9 Gadget"
    ]


def test_crd_metadata_is_object_meta() -> None:
    obj = ds()
    obj["metadata"]["labels"] = {"a": 1}
    (p,) = problems("ds.yaml", obj)
    assert p.startswith("ds.yaml: metadata.labels.a: 1 is not of type 'string'")


def test_kustomization() -> None:
    good = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization", "resources": ["a.yaml"]}
    assert kustomization_problems("k.yaml", good, ["a.yaml"]) == []
    assert kustomization_problems("k.yaml", {**good, "resources": ["a.yaml", "b.yaml"], "basis": []}, ["a.yaml"]) == [
        "k.yaml: (root): Additional properties are not allowed ('basis' was unexpected) "
        "(schema: kustomization/additionalProperties)",
        "k.yaml: resources[1]: b.yaml is missing",
    ]
    assert kustomization_problems("k.yaml", {**good, "namespace": 3}, ["a.yaml"]) == [
        "k.yaml: namespace: 3 is not of type 'string' (schema: kustomization/properties/namespace/type)"
    ]


def test_size_zero_passes_the_schema_but_not_lws_admission() -> None:
    obj = copy.deepcopy(of_kind(exported(LWS), "LeaderWorkerSet"))
    obj["spec"]["leaderWorkerTemplate"]["size"] = 0
    assert problems("lws.yaml", obj) == [
        "lws.yaml: spec.leaderWorkerTemplate.size: 0 must be equal or greater than 1 (LWS v0.10.0 admission webhook)"
    ]


def test_names_the_api_server_would_refuse() -> None:
    obj = ds()
    obj["metadata"]["name"] = "glm-" + "x" * 41  # 45: the child "<name>-0-<rev>-prefill" is 64
    assert problems("ds.yaml", obj) == [
        "ds.yaml: spec.roles[0].name: the child LeaderWorkerSet name " + obj["metadata"]["name"] + "-0-<revision>-prefill "
        "(64 characters) must be a DNS-1035 label of at most 63: shorten the deployment name to 44 "
        "(LWS v0.10.0 admission webhook)"
    ]
    svc = copy.deepcopy(of_kind(exported(PD), "Service"))
    svc["metadata"]["name"] = "9router"
    assert problems("s.yaml", svc) == [
        "s.yaml: metadata.name: '9router' must be a DNS-1035 label: lowercase letters, digits and '-', starting "
        "with a letter, at most 63 (API server / LWS v0.10.0 admission webhook)"
    ]


def _set(written: run.Written) -> list[tuple[str, dict[str, Any]]]:
    return [(m.file, copy.deepcopy(dict(m.obj))) for m in written.export.manifests]


def _check(objects: list[tuple[str, dict[str, Any]]]) -> list[str]:
    kust = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization", "resources": [f for f, _ in objects]}
    return check_set(objects, ("kustomization.yaml", kust), [f for f, _ in objects])


def test_the_api_servers_pod_checks_inside_a_crd() -> None:
    """A pod template inside a DisaggregatedSet passes the CRD's schema with a mount of a volume
    that does not exist; the StatefulSet LWS makes from it would be refused."""
    objects = _set(exported(PD))
    assert _check(objects) == []
    file, obj = next((f, o) for f, o in objects if o["kind"] == "DisaggregatedSet")
    pod = obj["spec"]["roles"][0]["spec"]["leaderWorkerTemplate"]["workerTemplate"]
    pod["spec"]["volumes"] = [v for v in pod["spec"]["volumes"] if v["name"] != "shm"]
    pod["metadata"]["labels"]["fleet.io/role"] = "pre fill"
    assert problems(file, obj) == []  # the CRD's schema has no opinion
    assert _check(objects) == [
        f"{file}: {LWT}.workerTemplate.metadata.labels.fleet.io/role: label value 'pre fill' is not valid "
        "(API server pod validation)",
        f"{file}: {LWT}.workerTemplate.spec.containers[0].volumeMounts[0].name: no volume named 'shm' "
        "(API server pod validation)",
    ]


def test_selectors_that_select_nothing() -> None:
    objects = _set(exported(PD))
    svc = next(o for _, o in objects if o["kind"] == "Service")
    svc["spec"]["selector"]["fleet.io/role"] = "routr"
    dep = next(o for _, o in objects if o["kind"] == "Deployment")
    argv = dep["spec"]["template"]["spec"]["containers"][0]["command"]
    argv[argv.index("fleet.io/role=decode")] = "fleet.io/role=decoder"
    assert _check(objects) == [
        "service-glm-pd-router.yaml: spec.selector: {'fleet.io/deployment': 'glm-pd', 'fleet.io/role': 'routr'} "
        "selects no pod template of this export",
        "deployment-glm-pd-router.yaml: router selector {'fleet.io/deployment': 'glm-pd', 'fleet.io/role': 'decoder', "
        "'leaderworkerset.sigs.k8s.io/worker-index': '0'} selects no pod template of this export",
    ]
    dep["spec"]["selector"]["matchLabels"]["fleet.io/role"] = "x"
    assert "deployment-glm-pd-router.yaml: spec.selector: does not match the template's labels (API server pod validation)" in _check(objects)
