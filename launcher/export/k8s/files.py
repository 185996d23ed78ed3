"""An :class:`~launcher.export.k8s.manifests.Export` as files, and a directory read back (pure
text in, text out; the CLI does the I/O).

The directory: one ``<kind>-<name>.yaml`` per object, ``kustomization.yaml`` listing them (so
``kubectl apply -k DIR`` applies all), ``README.md`` (how to apply, the Secret to create, what
could not be carried over) and, with an inventory, ``nodes.sh`` (the node labels the pods select).
YAML is written with keys in build order and multi-line strings as literal blocks: byte-stable.
"""

from __future__ import annotations

import shlex
from typing import Any, Mapping

import yaml

from launcher.export.k8s.manifests import Export
from launcher.export.k8s.validate import LWS_VERSION

KUSTOMIZATION = "kustomization.yaml"


class _Dumper(yaml.SafeDumper):
    pass


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def dump(obj: Mapping[str, Any]) -> str:
    return yaml.dump(dict(obj), Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=100000, allow_unicode=True)


def kustomization(ex: Export) -> dict[str, Any]:
    return {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "namespace": ex.namespace,
        "resources": [m.file for m in ex.manifests],
    }


def nodes_sh(ex: Export) -> str:
    lines = [
        "#!/bin/sh",
        f"# Node labels the pods of {ex.deployment} select (node names taken to be the inventory's host names).",
        "set -e",
    ]
    for host, labels in ex.node_labels:
        argv = ["kubectl", "label", "node", "--overwrite", host, *(f"{k}={v}" for k, v in sorted(labels.items()))]
        lines.append(shlex.join(argv))
    return "\n".join(lines) + "\n"


def readme(ex: Export, source: str) -> str:
    out = [
        f"# {ex.deployment} on Kubernetes",
        "",
        f"Exported by `fleet export k8s` from {source}; LeaderWorkerSet / DisaggregatedSet "
        f"`{LWS_VERSION}` (install that LWS release first), core objects checked against Kubernetes "
        "1.36 schemas.",
        "",
        "Apply:",
        "",
        "```sh",
    ]
    if ex.node_labels:
        out.append("sh nodes.sh                     # label the nodes the pods select")
    if ex.secret_name:
        files = " ".join(f"--from-file={k}=PATH" for k in ex.secret_keys)
        out.append(f"kubectl -n {ex.namespace} create secret generic {ex.secret_name} {files}")
    out += ["kubectl apply -k .", "```", ""]
    if ex.secret_name:
        out += [f"Secrets ({', '.join(ex.secret_keys)}) are read from the Secret `{ex.secret_name}` "
                "(`secretKeyRef`); no value is in these files.", ""]  # fmt: skip
    out += ["Not carried over:", ""]
    out += [f"- {n}" for n in ex.notes]
    return "\n".join(out) + "\n"


def render(ex: Export, source: str) -> dict[str, str]:
    """File name -> content of the whole export directory."""
    out = {m.file: dump(m.obj) for m in ex.manifests}
    out[KUSTOMIZATION] = dump(kustomization(ex))
    out["README.md"] = readme(ex, source)
    if ex.node_labels:
        out["nodes.sh"] = nodes_sh(ex)
    return out
