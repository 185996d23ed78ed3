"""An operator's own recipe directory, layered over the built-in catalog (``fleet --recipes DIR``,
``FLEET_RECIPES``, ``recipes =`` in fleet.cfg): new ids are added, an id already in the catalog is
replaced, and nothing in the installed package is edited."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from launcher.cli import cli
from tests.config.conftest import FIXTURES

BASE = (FIXTURES / "recipes" / "qwen" / "vllm-single-a100.yaml").read_text()


@pytest.fixture(autouse=True)
def catalog(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("FLEET_RECIPES_DIR", str(FIXTURES / "recipes"))
    for name in ("FLEET_RECIPES", "FLEET_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.chdir(tmp_path)


def _mine(root: Path) -> Path:
    (root / "qwen").mkdir(parents=True)
    (root / "qwen" / "vllm-single-a100.yaml").write_text(BASE.replace("Baseline, bf16", "Ours, bf16"))
    (root / "acme").mkdir()
    (root / "acme" / "qwen-a100.yaml").write_text(BASE.replace("catalog_entry: 3", "catalog_entry: 99"))
    return root


def _list(*args: str) -> dict[str, str]:
    result = CliRunner().invoke(cli, [*args, "recipes", "list", "--json"])
    assert result.exit_code == 0, result.output
    return {r["id"]: r["catalog_entry"] for r in json.loads(result.stdout)}


def _summary(recipe_id: str, *args: str) -> str:
    result = CliRunner().invoke(cli, [*args, "recipes", "show", recipe_id, "--json"])
    assert result.exit_code == 0, result.output
    return str(json.loads(result.stdout)["summary"])


def test_recipes_flag_adds_and_replaces(tmp_path: Path) -> None:
    mine = str(_mine(tmp_path / "mine"))
    assert "acme/qwen-a100" not in _list()
    assert _list("--recipes", mine)["acme/qwen-a100"] == 99
    assert len(_list("--recipes", mine)) == len(_list()) + 1
    assert _summary("qwen/vllm-single-a100", "--recipes", mine) == "Ours, bf16, TP1 on one A100."
    assert _summary("qwen/vllm-single-a100") == "Baseline, bf16, TP1 on one A100."


def test_a_layered_recipe_plans(tmp_path: Path) -> None:
    mine = str(_mine(tmp_path / "mine"))
    (tmp_path / "hosts.yaml").write_text(
        "all:\n  hosts:\n    a100-1: {ansible_host: 198.18.0.40, gpu_model: A100, gpu_count: 1}\n"
    )
    result = CliRunner().invoke(cli, ["--recipes", mine, "plan", "acme/qwen-a100", "-i", "hosts.yaml", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["recipe"] == "acme/qwen-a100"


def test_environment_and_config_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _mine(tmp_path / "mine")
    (tmp_path / "fleet.cfg").write_text("[defaults]\nrecipes = mine\n")
    assert "acme/qwen-a100" in _list()
    monkeypatch.setenv("FLEET_RECIPES", str(tmp_path / "nowhere"))
    result = CliRunner().invoke(cli, ["recipes", "list"])
    assert (result.exit_code, result.stderr) == (
        2, f"fleet: error: {tmp_path}/nowhere: recipe directory not found (from FLEET_RECIPES)\n",
    )  # fmt: skip


def test_recipes_flag_names_a_missing_directory() -> None:
    result = CliRunner().invoke(cli, ["--recipes", "nope", "recipes", "list"])
    assert (result.exit_code, result.stderr) == (
        2, "fleet: error: invalid value for '--recipes': Directory 'nope' does not exist (see 'fleet --help')\n",
    )  # fmt: skip
