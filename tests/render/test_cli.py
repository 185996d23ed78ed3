"""``fleet render``: per-host folders with the rendered modes, refusal of a non-empty output,
one-line errors."""

from __future__ import annotations

import stat
from pathlib import Path

from click.testing import CliRunner

from launcher.cli import cli
from launcher.render import render
from tests.render.corpus import plan_for

ROOT = Path(__file__).resolve().parents[2]
INVENTORY = str(ROOT / "inventories" / "example.yaml")
PLAYBOOK = str(ROOT / "playbooks" / "pd-glm-2p1d-6000d.yaml")


def run(*args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(cli, list(args))
    return r.exit_code, r.stdout, r.stderr


def test_writes_every_host_file_with_its_mode(tmp_path: Path) -> None:
    out = tmp_path / "out"
    code, stdout, stderr = run("render", PLAYBOOK, "-i", INVENTORY, "-o", str(out))
    assert (code, stderr) == (0, "")
    expected = render(plan_for("playbooks__pd-glm-2p1d-6000d"))
    written = {p for p in out.rglob("*") if p.is_file()}
    want = {out / h / f.path.lstrip("/") for h, rh in expected.hosts.items() for f in rh.files}
    assert written == want
    for h, rh in expected.hosts.items():
        for f in rh.files:
            p = out / h / f.path.lstrip("/")
            assert p.read_text(encoding="utf-8") == f.content
            assert stat.S_IMODE(p.stat().st_mode) == f.mode
    assert len(stdout.splitlines()) == len(expected.hosts)


def test_runtime_override_and_host_filter(tmp_path: Path) -> None:
    out = tmp_path / "out"
    code, _, stderr = run("render", PLAYBOOK, "-i", INVENTORY, "-o", str(out), "--runtime", "systemd", "--hosts", "ctl-01")
    assert (code, stderr) == (0, "")
    assert [p.name for p in out.iterdir()] == ["ctl-01"]
    assert list((out / "ctl-01" / "etc" / "systemd" / "system").glob("*.service"))


def test_refuses_non_empty_dir_unless_forced(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    code, _, stderr = run("render", PLAYBOOK, "-i", INVENTORY, "-o", str(out))
    assert (code, stderr) == (2, f"fleet: error: fleet render: -o {out}: directory is not empty (--force writes into it)\n")
    code, _, stderr = run("render", PLAYBOOK, "-i", INVENTORY, "-o", str(out), "--force")
    assert (code, stderr) == (0, "")
    assert (out / "keep.txt").read_text() == "mine"  # --force replaces host folders only


def test_unknown_recipe_is_one_line(tmp_path: Path) -> None:
    code, stdout, stderr = run("render", "nope/x", "-i", INVENTORY, "-o", str(tmp_path / "o"))
    assert code == 2 and stdout == "" and len(stderr.splitlines()) == 1
    assert stderr.startswith("fleet: error: unknown recipe 'nope/x'")
    assert not (tmp_path / "o").exists()


def test_host_filter_matching_no_unit(tmp_path: Path) -> None:
    code, _, stderr = run("render", PLAYBOOK, "-i", INVENTORY, "-o", str(tmp_path / "o"), "--hosts", "b300-01")
    assert (code, stderr) == (2, "fleet: error: fleet render: --hosts b300-01: no unit of glm-pd runs there\n")


def test_output_is_a_file(tmp_path: Path) -> None:
    f = tmp_path / "f"
    f.write_text("")
    code, _, stderr = run("render", PLAYBOOK, "-i", INVENTORY, "-o", str(f))
    assert (code, stderr) == (2, f"fleet: error: fleet render: -o {f}: not a directory\n")
