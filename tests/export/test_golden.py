"""Golden exports (``tests/golden/k8s/<id>/<file>``): one single, one multi-node PP and one PD
recipe per engine (vllm-ascend has only a single-node recipe in the catalog), auto-placed on
inventories/example.yaml, plus the PD playbook whose hosts differ in GID index and data NIC.
``UPDATE_GOLDEN=1 python -m pytest tests/export/test_golden.py`` rewrites them; review the diff."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.export.helpers import exported

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "k8s"
CASES = {
    "sglang single": "qwen/sglang-tp2-h100",
    "sglang pp": "kimi/sglang-tp8pp2-h100",
    "sglang pd": "glm/sglang-pd-tp8pp2ep8-6000d",
    "vllm single": "mistral/vllm-tp1-h100-baseline",
    "vllm pp": "kimi/vllm-tp8pp4-6000d",
    "vllm pd": "deepseek/vllm-pd-tp8-6000d-nvfp4",
    "vllm-ascend single": "qwen/vllm-ascend-1x910b3-baseline",
    "pd playbook": "playbooks/pd-glm-2p1d-6000d.yaml",
}


def _dir(target: str) -> Path:
    return GOLDEN / target.removesuffix(".yaml").replace("/", "__")


@pytest.mark.parametrize("target", list(CASES.values()), ids=list(CASES))
def test_export_golden(target: str) -> None:
    files = exported(target).files
    where = _dir(target)
    if os.environ.get("UPDATE_GOLDEN") == "1":
        where.mkdir(parents=True, exist_ok=True)
        for stale in where.iterdir():
            stale.unlink()
        for name, text in files.items():
            (where / name).write_text(text)
    assert where.is_dir(), f"{where} missing: run UPDATE_GOLDEN=1 python -m pytest tests/export/test_golden.py"
    assert sorted(p.name for p in where.iterdir()) == sorted(files)
    for name, text in files.items():
        assert (where / name).read_text() == text, f"{where / name} differs (UPDATE_GOLDEN=1 rewrites it)"


def test_no_stale_goldens() -> None:
    assert sorted(p.name for p in GOLDEN.iterdir()) == sorted(_dir(t).name for t in CASES.values())
