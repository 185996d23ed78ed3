"""Load -> plan -> export -> validate: what ``fleet export k8s`` runs before it writes anything.

Planning is :func:`launcher.pipeline.planned` (the facts ``fleet facts`` cached, the catalog's
constraints), so an override that breaks a constraint is refused with ``fleet plan``'s reason.
With ``--pools`` the inventory is the pools' stand-in hosts (:mod:`launcher.export.k8s.pools`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

import yaml

from launcher.export.k8s import files, manifests
from launcher.export.k8s.pools import NodeFacts, inventory_facts, load_pools, pool_inventory
from launcher.export.k8s.validate import check_set
from launcher.model import Plan, Recipe
from launcher.pipeline import Inputs, is_playbook, planned


@dataclass(frozen=True, slots=True, kw_only=True)
class Written:
    """The export directory's files (name -> text) and what the export says."""

    deployment: str
    files: Mapping[str, str]
    extra: frozenset[str]  # files that are not objects (kustomization, README, nodes.sh)
    notes: tuple[str, ...]
    export: manifests.Export


def load(target: str, *, inventory_path: str | None, pools_path: str | None, rdma_resource: str | None = None,
         models_pvc: str | None = None, place_on: str | None = None) -> tuple[Inputs, Mapping[str, NodeFacts]]:  # fmt: skip
    """The inputs (inventory, or pools' stand-ins; a recipe id placed on ``place_on``, a host or
    pool pattern, as ``fleet plan --hosts`` places it) and each host's node facts.  The RDMA resource
    and the models PVC: the flag's, else the playbook's ``kubernetes:``, else the pool's (or
    rdma/hca and hostPath)."""
    from launcher.config.inventory_sources import load_sources
    from launcher.config.playbook import load_playbook
    from launcher.config.recipes import open_catalog
    from launcher.plan import auto_playbook

    if pools_path is not None:
        inventory, nodes = pool_inventory(load_pools(pools_path), pools_path)
    else:
        assert inventory_path is not None
        inventory = load_sources(inventory_path)  # a file, a directory, a host list or a script, as -i takes
        nodes = inventory_facts(inventory)
    catalog = open_catalog()
    if is_playbook(target):
        playbook = load_playbook(Path(target), catalog, inventory)
    else:
        playbook = auto_playbook(catalog.get(target), inventory, place_on)
    k8s = playbook.kubernetes
    rdma, pvc = rdma_resource or k8s.rdma_resource, models_pvc or k8s.models_pvc
    nodes = {
        h: dataclasses.replace(f, rdma_resource=rdma or f.rdma_resource, models_pvc=pvc or f.models_pvc)
        for h, f in nodes.items()
    }
    return Inputs(inventory=inventory, catalog=catalog, playbook=playbook), nodes


def namespace_of(inputs: Inputs, flag: str | None) -> str:
    """The flag's namespace, else the playbook's, else ``default``."""
    return flag or inputs.playbook.kubernetes.namespace or "default"


def build(inputs: Inputs, the_plan: Plan, nodes: Mapping[str, NodeFacts], namespace: str, source: str) -> Written:
    """Export ``the_plan`` and render its files (not validated)."""
    recipe: Recipe = inputs.catalog.get(the_plan.recipe)
    ov = inputs.playbook.overrides
    opts = manifests.Options(namespace=namespace, image=ov.image or recipe.image, shm_size=ov.shm_size or recipe.shm_size)
    hosts = {h.name: h for h in inputs.inventory.hosts}
    ex = manifests.export(the_plan, recipe, hosts, nodes, opts)
    text = files.render(ex, source)
    extra = frozenset(text) - {m.file for m in ex.manifests}
    return Written(deployment=ex.deployment, files=text, extra=extra, notes=ex.notes, export=ex)


def check(written: Written) -> list[str]:
    """Every problem of the rendered files, read back from their YAML text as kubectl would."""
    objects = [(m.file, yaml.safe_load(written.files[m.file])) for m in written.export.manifests]
    kust = (files.KUSTOMIZATION, yaml.safe_load(written.files[files.KUSTOMIZATION]))
    return check_set(objects, kust, written.files)


def export_target(target: str, *, inventory_path: str | None, pools_path: str | None, namespace: str | None = None,
                  rdma_resource: str | None = None, models_pvc: str | None = None,
                  place_on: str | None = None) -> tuple[Written, list[str]]:  # fmt: skip
    """Load, plan, export and validate ``target``: the files and their problems (empty: valid)."""
    inputs, nodes = load(target, inventory_path=inventory_path, pools_path=pools_path, rdma_resource=rdma_resource,
                         models_pvc=models_pvc, place_on=place_on)  # fmt: skip
    source = target if is_playbook(target) else f"recipe {target}"
    written = build(inputs, planned(inputs), nodes, namespace_of(inputs, namespace), source)
    return written, check(written)
