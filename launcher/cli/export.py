"""``fleet export k8s``: a deployment as Kubernetes manifests (LeaderWorkerSet / DisaggregatedSet
``v0.10.0``), validated offline before anything is written.

    fleet export k8s TARGET -i INVENTORY [--hosts PATTERN] -o DIR [--namespace NS] [--rdma-resource NAME] [--models-pvc NAME] [--force]
    fleet export k8s TARGET --pools POOLS.yaml -o DIR [...]
    fleet export k8s --check DIR

TARGET is a playbook file or a recipe id, planned exactly as ``fleet plan`` plans it (the same
constraints, the same refusals); with ``--pools`` the hosts are the node pools' stand-ins
(docs/kubernetes.md).  DIR must be empty or absent unless ``--force`` (which replaces the files
this export writes).  ``--check DIR`` validates a directory written earlier (or edited since).
Namespace, RDMA resource and models PVC: the flag, else the playbook's ``kubernetes:`` keys, else
the pool file's (RDMA resource, PVC), else ``default`` / ``rdma/hca`` / hostPath.
"""

from __future__ import annotations

import os
from pathlib import Path

import click
import yaml

from launcher.cli import cli
from launcher.errors import FleetError, UsageError
from launcher.pipeline import is_playbook


@cli.group("export")
def export_group() -> None:
    """Export a deployment to another system's manifests."""


def _check_dir(directory: Path) -> list[str]:
    from launcher.export.k8s.files import KUSTOMIZATION
    from launcher.export.k8s.validate import check_set

    out: list[str] = []
    names = sorted(p.name for p in directory.glob("*.yaml"))
    objects: list[tuple[str, object]] = []
    kustomization: tuple[str, object] | None = None
    for name in names:
        try:
            docs = [d for d in yaml.safe_load_all((directory / name).read_text(encoding="utf-8")) if d is not None]
        except (OSError, yaml.YAMLError) as err:
            out.append(f"{name}: {str(err).splitlines()[0]}")
            continue
        if name == KUSTOMIZATION:
            kustomization = (name, docs[0] if len(docs) == 1 else None)
        else:
            objects += [(name, d) for d in docs]
    return out + check_set(objects, kustomization, names)


def _report(problems: list[str], where: str) -> None:
    if problems:
        for p in problems:
            click.echo(p, err=True)
        raise FleetError(f"fleet export k8s: {where}: {len(problems)} problem(s), the first: {problems[0]}")


@export_group.command("k8s")
@click.argument("target", required=False)
@click.option("-i", "--inventory", "inventory_path", default=None, metavar="INV", help="Inventory file (YAML or INI).")
@click.option("--pools", "pools_path", default=None, help="Node pool file, instead of an inventory.")
@click.option("--hosts", default=None, help="Host (or pool) pattern to place a recipe id on.")
@click.option("-o", "--output", "output", default=None, help="Directory to write the manifests into.")
@click.option("--namespace", default=None, help="Namespace of every object (default: the playbook's, else default).")
@click.option("--rdma-resource", default=None, help="RDMA device-plugin resource (default: the playbook's, the pool's, rdma/hca).")
@click.option("--models-pvc", default=None, help="PVC holding the weights instead of hostPath (default: the playbook's, the pool's).")
@click.option("--check", "check_dir", default=None, help="Validate an export directory instead.")
@click.option("--force", is_flag=True, help="Write into a non-empty DIR, replacing the files exported.")
def k8s_command(
    target: str | None, inventory_path: str | None, pools_path: str | None, hosts: str | None, output: str | None,
    namespace: str | None,
    rdma_resource: str | None, models_pvc: str | None, check_dir: str | None, force: bool,
) -> None:  # fmt: skip
    """Write TARGET (a playbook file or a recipe id) as LeaderWorkerSet / DisaggregatedSet manifests."""
    if check_dir is not None:
        if target or output or inventory_path or pools_path or hosts:
            raise UsageError("fleet export k8s: --check DIR takes no TARGET, -i, --pools, --hosts or -o")
        if not Path(check_dir).is_dir():
            raise UsageError(f"fleet export k8s: --check {check_dir}: not a directory")
        _report(_check_dir(Path(check_dir)), check_dir)
        click.echo(f"{check_dir}: valid (LeaderWorkerSet/DisaggregatedSet v0.10.0 CRDs, Kubernetes 1.36)")
        return
    if target is None or output is None:
        raise UsageError("fleet export k8s: TARGET and -o DIR are required (or --check DIR)")
    if (inventory_path is None) == (pools_path is None):
        raise UsageError("fleet export k8s: give exactly one of -i INVENTORY and --pools FILE")
    if hosts is not None and is_playbook(target):
        raise UsageError("fleet export k8s: --hosts places a recipe id; a playbook has its own placement")
    out = Path(output)
    if out.exists() and not out.is_dir():
        raise UsageError(f"fleet export k8s: -o {output}: not a directory")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise UsageError(f"fleet export k8s: -o {output}: directory is not empty (--force writes into it)")
    from launcher.export.k8s.run import export_target

    written, problems = export_target(
        target, inventory_path=inventory_path, pools_path=pools_path, namespace=namespace,
        rdma_resource=rdma_resource, models_pvc=models_pvc, place_on=hosts,
    )  # fmt: skip
    _report(problems, target)
    try:
        out.mkdir(parents=True, exist_ok=True)
        for name, text in written.files.items():
            path = out / name
            tmp = path.with_name(f".{name}.tmp")
            tmp.write_text(text, encoding="utf-8")
            os.replace(tmp, path)
    except OSError as err:
        raise FleetError(f"fleet export k8s: {err.filename or output}: {err.strerror}") from None
    objects = len(written.files) - len(written.extra)
    click.echo(f"{out}: {objects} objects + kustomization.yaml for {written.deployment} (kubectl apply -k {out})")
    for note in written.notes:
        click.echo(f"not carried over: {note}")
