"""Preflight reads the manifests `fleet weights stage` writes: the probe (run here by sh, as on
a host) finds a dir whose files match its fleet-weights.json, names the ones that do not, and
the checks fail a copy that differs and ranks whose staged revisions differ, naming the fix."""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

from launcher.model import Plan, Unit
from launcher.preflight import checks
from launcher.preflight.rules.base import Check, PathProbe, ProbeResults
from launcher.weights.manifest import MANIFEST_NAME, Listing, for_host, from_listing, to_json
from tests.preflight.factory import host, inventory, recipe


def _staged_dir(root: Path, revision: str) -> Path:
    root.mkdir(parents=True)
    (root / "config.json").write_text("{}")
    (root / "model.safetensors").write_bytes(b"x" * 1000)
    files = {p.name: (p.stat().st_size, int(p.stat().st_mtime)) for p in root.iterdir()}
    sums = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in root.iterdir()}
    listing = Listing(exists=True, files=files, sha256=sums)
    (root / MANIFEST_NAME).write_text(to_json(for_host(from_listing("org/model", revision, listing), listing)))
    return root


def _probe(paths: list[str]) -> dict[str, checks.PathProbe]:
    out = subprocess.run(["sh", "-c", checks.host_probe_script(paths)], capture_output=True, text=True,
                         timeout=60).stdout  # fmt: skip
    return dict(checks.parse_host_probe(out, paths).paths)


def test_the_probe_checks_a_staged_copy_against_its_manifest(tmp_path: Path) -> None:
    good = _staged_dir(tmp_path / "good", "r1")
    bad = _staged_dir(tmp_path / "bad", "r1")
    (bad / "config.json").unlink()
    st = (bad / "model.safetensors").stat()
    os.utime(bad / "model.safetensors", (st.st_atime, st.st_mtime + 100))
    plain = tmp_path / "plain"
    plain.mkdir()
    found = _probe([str(good), str(bad), str(plain)])
    assert (found[str(good)].staged, found[str(good)].revision) == ("ok", "r1")
    assert found[str(bad)].staged == ("2 file(s) differ from fleet-weights.json: config.json: missing, "
                                      "model.safetensors: modified (mtime differs from the manifest's)")
    assert (found[str(plain)].staged, found[str(plain)].revision) == (None, None)


def _rank(name: str, h: str) -> Unit:
    return Unit(host=h, name=name, deployment="x", role="rank", group="x/rank0", rank=0, nnodes=2,
                argv=("python3", "-m", "sglang.launch_server", "--model-path", "/m/org/model"))


def test_ranks_with_different_staged_revisions_fail_naming_the_fix() -> None:
    inv = inventory(host("h1", "10.0.0.1"), host("h2", "10.0.0.2"))
    plan = Plan(deployment="x", recipe="fam/v", units=(_rank("u0", "h1"), _rank("u1", "h2")), files=())
    paths = {"h1": {"/m/org/model": PathProbe(exists=True, bytes=10, files=2, staged="ok", revision="r1")},
             "h2": {"/m/org/model": PathProbe(exists=True, bytes=10, files=2, staged="ok", revision="r2")}}
    found = checks.evaluate(plan, inv, recipe(), {}, ProbeResults(paths=paths))
    assert [c for c in found if c.name == "weights-revision"] == [Check(
        host="h1", unit="x", name="weights-revision", status="fail",
        message="staged weights differ in revision across ranks: h1=r1, h2=r2",
        fix="fleet weights stage PLAYBOOK -i INVENTORY --source DIR|HOST:PATH: every rank gets the source's copy")]
    differs = {"h1": {"/m/org/model": PathProbe(exists=True, bytes=10, files=2, revision="r1",
                                                      staged="1 file(s) differ from fleet-weights.json: a: missing")}}
    (weights,) = [c for c in checks.evaluate(plan, inv, recipe(), {}, ProbeResults(paths=differs))
                  if c.name == "weights" and c.host == "h1"]
    assert (weights.status, weights.message, weights.fix) == (
        "fail", "/m/org/model: 1 file(s) differ from fleet-weights.json: a: missing",
        "fleet weights stage PLAYBOOK -i INVENTORY --source DIR|HOST:PATH (moves only the differing files)")
