"""Shared by the export tests: export a recipe or playbook on inventories/example.yaml (planned
as ``fleet plan`` plans it), and read pod templates back."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from launcher.export.k8s import run
from launcher.pipeline import planned

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = str(ROOT / "inventories" / "example.yaml")


@lru_cache(maxsize=None)
def exported(target: str, inventory: str = EXAMPLE) -> run.Written:
    inputs, nodes = run.load(target, inventory_path=inventory, pools_path=None)
    return run.build(inputs, planned(inputs), nodes, "default", target)


def objects(written: run.Written) -> dict[str, dict[str, Any]]:
    """File -> object, parsed back from the YAML text."""
    return {m.file: yaml.safe_load(written.files[m.file]) for m in written.export.manifests}


def of_kind(written: run.Written, kind: str) -> dict[str, Any]:
    (obj,) = [o for o in objects(written).values() if o["kind"] == kind]
    return obj
