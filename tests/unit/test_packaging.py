"""A built wheel carries the templates, the recipe catalog and the sandbox playbooks (top-level
dirs of the checkout, mapped into the package by pyproject.toml), and an installed wheel finds
them with no checkout in sight.

Offline: the wheel is built with ``pip wheel --no-build-isolation --no-index`` by an interpreter
whose own setuptools can build wheels (this one, else the OS ``python3``), from a copy of the
build inputs so the checkout gets no ``build/`` or ``*.egg-info``; it is installed with
``--no-deps --no-index`` into a venv that sees this interpreter's packages for the dependencies.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path, PurePosixPath

import pytest

REPO = Path(__file__).resolve().parents[2]
BUILD_INPUTS = ("pyproject.toml", "launcher", "templates", "recipes", "playbooks")
PLAYBOOK = REPO / "playbooks" / "single-qwen-a100.yaml"
INVENTORY = REPO / "inventories" / "example.yaml"
# setuptools < 70.1 needs the separate ``wheel`` package for bdist_wheel; later ones carry it.
CAN_BUILD = (
    "import importlib.util as u, sys; sys.exit(0 if u.find_spec('pip') and u.find_spec('setuptools') and "
    "(u.find_spec('wheel') or u.find_spec('setuptools.command.bdist_wheel')) else 1)"
)


def _clean_env() -> dict[str, str]:
    """This environment minus what would point the installed fleet back at the checkout."""
    drop = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "FLEET_RECIPES_DIR")
    return {k: v for k, v in os.environ.items() if k not in drop}


def _run(argv: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(argv, cwd=cwd, env=env or _clean_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"{argv[:4]} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def _builder() -> str:
    for python in (sys.executable, "/usr/bin/python3"):
        if shutil.which(python) and subprocess.run((python, "-c", CAN_BUILD), capture_output=True).returncode == 0:
            return python
    pytest.skip("no python3 here builds wheels offline (needs pip, setuptools and wheel: apt python3-wheel)")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("packaging")
    src = tmp / "src"
    src.mkdir()
    for name in BUILD_INPUTS:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(REPO / name, src / name)
    _run([_builder(), "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
          "--disable-pip-version-check", "-q", "-w", str(tmp / "dist"), str(src)], cwd=tmp)  # fmt: skip
    (built,) = (tmp / "dist").glob("fleet-*.whl")
    return built


def _checkout_files(pattern: str) -> set[str]:
    return {p.relative_to(REPO).as_posix() for p in REPO.glob(pattern) if "__pycache__" not in p.parts}


def test_wheel_carries_the_data_dirs_and_all_of_launcher(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    templates = _checkout_files("templates/*.j2")
    recipes = _checkout_files("recipes/*/*.yaml")
    playbooks = _checkout_files("playbooks/sandbox/*.yaml")
    assert templates and len(recipes) >= 54 and playbooks
    expected = (
        {"launcher/" + t for t in templates}
        | {"launcher/catalog/" + r.removeprefix("recipes/") for r in recipes}
        | {"launcher/sandbox/playbooks/" + p.removeprefix("playbooks/sandbox/") for p in playbooks}
        | {f for f in _checkout_files("launcher/**/*") if (REPO / f).is_file()}
    )
    assert sorted(expected - names) == []
    assert sorted(n for n in names if not n.startswith(("launcher/", "fleet-"))) == []


def test_pyproject_lists_every_dir_the_wheel_ships(wheel: Path) -> None:
    """setuptools ships an unlisted data dir only with a deprecation warning (and may stop)."""
    listed = set(tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    names = zipfile.ZipFile(wheel).namelist()
    shipped = {str(PurePosixPath(n).parent).replace("/", ".") for n in names if n.startswith("launcher/")}
    assert sorted(shipped - listed) == []


def test_installed_wheel_works_outside_the_checkout(wheel: Path, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", str(venv)], cwd=tmp_path)
    python = str(venv / "bin" / "python")
    # --ignore-installed: this interpreter may already have fleet (editable) at the same version.
    _run([python, "-m", "pip", "install", "--no-deps", "--no-index", "--ignore-installed",
          "--disable-pip-version-check", "-q", str(wheel)], cwd=tmp_path)  # fmt: skip
    where = _run([python, "-c", "import launcher; from launcher.config.recipes import default_root; "
                                "print(launcher.__file__); print(default_root())"], cwd=tmp_path)  # fmt: skip
    module, catalog = where.splitlines()
    assert module.startswith(str(venv)) and catalog.startswith(str(venv)), where

    fleet = str(venv / "bin" / "fleet")
    listed = json.loads(_run([fleet, "recipes", "list", "--json"], cwd=tmp_path))
    expected = {r.removeprefix("recipes/").removesuffix(".yaml") for r in _checkout_files("recipes/*/*.yaml")}
    assert sorted(r["id"] for r in listed) == sorted(expected) and len(listed) >= 54

    args = ["render", str(PLAYBOOK), "-i", str(INVENTORY), "-o"]
    _run([fleet, *args, str(tmp_path / "installed")], cwd=tmp_path)
    _run([sys.executable, "-c", "from launcher.cli import main; main()", *args, str(tmp_path / "checkout")],
         cwd=REPO, env=dict(_clean_env(), PYTHONPATH=str(REPO)))  # fmt: skip
    installed, checkout = _tree(tmp_path / "installed"), _tree(tmp_path / "checkout")
    assert any(path.endswith(".service") for path in installed), sorted(installed)  # a template's output
    assert installed == checkout


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}
