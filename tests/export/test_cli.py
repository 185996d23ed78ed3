"""``fleet export k8s`` end to end through the CLI: the directory it writes (one file per object,
kustomization, README, nodes.sh), ``--check DIR`` on it and on a broken copy, the catalog's
constraints refused with ``fleet plan``'s reason, and one-line usage errors."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner, Result

from launcher.cli import cli
from tests.export.helpers import EXAMPLE, ROOT

PD = str(ROOT / "playbooks" / "pd-glm-2p1d-6000d.yaml")


def run(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def test_export_writes_objects_and_a_kustomization(tmp_path: Path) -> None:
    out = tmp_path / "out"
    r = run("export", "k8s", PD, "-i", EXAMPLE, "-o", str(out), "--namespace", "llm")
    assert r.exit_code == 0, r.output
    assert r.output.splitlines()[0] == f"{out}: 6 objects + kustomization.yaml for glm-pd (kubectl apply -k {out})"
    names = sorted(p.name for p in out.iterdir())
    kust = yaml.safe_load((out / "kustomization.yaml").read_text())
    assert kust["namespace"] == "llm"
    assert sorted(kust["resources"]) == sorted(n for n in names if n.endswith(".yaml") and n != "kustomization.yaml")
    assert {"README.md", "nodes.sh", "disaggregatedset-glm-pd.yaml", "deployment-glm-pd-router.yaml"} <= set(names)
    for n in kust["resources"]:
        assert yaml.safe_load((out / n).read_text())["metadata"]["namespace"] == "llm"
    assert "kubectl -n llm create secret generic glm-pd-secrets --from-file=HF_TOKEN=PATH" in (out / "README.md").read_text()
    assert "kubectl label node --overwrite rtx-03 fleet.io/gpu=rtx-6000d fleet.io/net=ens1f0np0.gid5" in (out / "nodes.sh").read_text()
    r = run("export", "k8s", "--check", str(out))
    assert (r.exit_code, r.output) == (0, f"{out}: valid (LeaderWorkerSet/DisaggregatedSet v0.10.0 CRDs, Kubernetes 1.36)\n")


def test_secrets_are_references_never_values(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert run("export", "k8s", PD, "-i", EXAMPLE, "-o", str(out)).exit_code == 0
    ds = yaml.safe_load((out / "disaggregatedset-glm-pd.yaml").read_text())
    env = ds["spec"]["roles"][0]["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]["containers"][0]["env"]
    assert {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "glm-pd-secrets", "key": "HF_TOKEN"}}} in env
    assert not any(o.get("kind") == "Secret" for p in out.glob("*.yaml") for o in [yaml.safe_load(p.read_text())])


def test_check_names_the_broken_file_and_schema_path(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert run("export", "k8s", "kimi/sglang-tp8pp2-h100", "-i", EXAMPLE, "-o", str(out)).exit_code == 0
    path = out / "leaderworkerset-kimi-sglang-tp8pp2-h100.yaml"
    obj = yaml.safe_load(path.read_text())
    obj["spec"]["leaderWorkerTemplate"]["size"] = "two"
    path.write_text(yaml.safe_dump(obj))
    r = run("export", "k8s", "--check", str(out))
    line = (
        "leaderworkerset-kimi-sglang-tp8pp2-h100.yaml: spec.leaderWorkerTemplate.size: 'two' is not of type "
        "'integer' (schema: openAPIV3Schema/properties/spec/properties/leaderWorkerTemplate/properties/size/type)"
    )
    assert r.exit_code == 1
    assert r.output == f"{line}\nfleet: error: fleet export k8s: {out}: 1 problem(s), the first: {line}\n"


def test_a_constraint_is_refused_with_fleet_plans_reason(tmp_path: Path) -> None:
    playbook = tmp_path / "pb.yaml"
    playbook.write_text(
        "name: bad\nrecipe: glm/sglang-tp8pp2ep8-6000d\nplacement:\n  rank: {hosts: 'rtx-01:rtx-02'}\n"
        "overrides:\n  remove_args: [--moe-runner-backend]\n"
    )
    plan = run("plan", str(playbook), "-i", EXAMPLE)
    export = run("export", "k8s", str(playbook), "-i", EXAMPLE, "-o", str(tmp_path / "out"))
    assert plan.exit_code == export.exit_code == 2
    assert "overrides/remove_args: refused by constraint sm120-moe-marlin: " in plan.output
    assert export.output == plan.output
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["qwen/sglang-tp2-h100", "-o", "x"], "give exactly one of -i INVENTORY and --pools FILE"),
        (["qwen/sglang-tp2-h100", "-i", EXAMPLE, "--pools", "p.yaml", "-o", "x"], "give exactly one of -i INVENTORY and --pools FILE"),
        (["qwen/sglang-tp2-h100", "-i", EXAMPLE], "TARGET and -o DIR are required (or --check DIR)"),
        (["--check", "nowhere"], "--check nowhere: not a directory"),
        (["qwen/sglang-tp2-h100", "--check", "."], "--check DIR takes no TARGET, -i, --pools, --hosts or -o"),
        ([PD, "-i", EXAMPLE, "--hosts", "h100", "-o", "x"], "--hosts places a recipe id; a playbook has its own placement"),
    ],
)
def test_usage_errors(args: list[str], message: str) -> None:
    r = run("export", "k8s", *args)
    assert (r.exit_code, r.output) == (2, f"fleet: error: fleet export k8s: {message}\n")


def test_a_non_empty_directory_needs_force(tmp_path: Path) -> None:
    (tmp_path / "keep.txt").write_text("x")
    r = run("export", "k8s", "qwen/sglang-tp2-h100", "-i", EXAMPLE, "-o", str(tmp_path))
    assert (r.exit_code, r.output) == (2, f"fleet: error: fleet export k8s: -o {tmp_path}: directory is not empty (--force writes into it)\n")
    assert run("export", "k8s", "qwen/sglang-tp2-h100", "-i", EXAMPLE, "-o", str(tmp_path), "--force").exit_code == 0
    assert (tmp_path / "keep.txt").read_text() == "x"


def test_an_export_that_does_not_validate_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A manifest that does not validate is a bug, never a warning: exit 1, the problems, no files."""
    from launcher.export.k8s import files
    from launcher.export.k8s.manifests import Export

    render = files.render

    def broken(ex: Export, source: str) -> dict[str, str]:
        out = render(ex, source)
        name = "leaderworkerset-kimi-sglang-tp8pp2-h100.yaml"
        out[name] = out[name].replace("    size: 2\n", "    size: 0\n")
        return out

    monkeypatch.setattr(files, "render", broken)
    out = tmp_path / "out"
    r = run("export", "k8s", "kimi/sglang-tp8pp2-h100", "-i", EXAMPLE, "-o", str(out))
    line = ("leaderworkerset-kimi-sglang-tp8pp2-h100.yaml: spec.leaderWorkerTemplate.size: 0 must be equal or "
            "greater than 1 (LWS v0.10.0 admission webhook)")  # fmt: skip
    assert (r.exit_code, r.output) == (1, f"{line}\nfleet: error: fleet export k8s: kimi/sglang-tp8pp2-h100: 1 problem(s), the first: {line}\n")
    assert not out.exists()


def test_hosts_places_a_recipe_id(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert run("export", "k8s", "qwen/sglang-tp2-h100", "-i", EXAMPLE, "--hosts", "h100-03", "-o", str(out)).exit_code == 0
    assert (out / "nodes.sh").read_text().splitlines()[-1] == "kubectl label node --overwrite h100-03 fleet.io/gpu=h100 fleet.io/net=ens10f0"
