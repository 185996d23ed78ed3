"""The scripts fleet runs on hosts (launcher/hostscripts/) parse: every shell script passes
``sh -n`` and shellcheck (POSIX sh; installed by scripts/install.sh), every Python one compiles,
and each is loaded by the module that sends it (no file is dead, none is missing)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

import launcher
from launcher import hostscripts

DIR = Path(hostscripts.__file__).parent
SCRIPTS = sorted(p.name for p in DIR.iterdir() if p.is_file() and p.name != "__init__.py" and p.suffix != ".pyc")
SHELL = [n for n in SCRIPTS if n.endswith(".sh")]
PYTHON = [n for n in SCRIPTS if n.endswith(".py")]


def _sh_n(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["sh", "-n", str(path)], capture_output=True, text=True, timeout=30)


def _shellcheck(path: Path) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("shellcheck")
    assert exe is not None, "shellcheck not found: scripts/install.sh installs it (apt-get install shellcheck)"
    return subprocess.run([exe, "-s", "sh", str(path)], capture_output=True, text=True, timeout=60)


def test_every_script_is_shell_or_python() -> None:
    assert SCRIPTS and set(SCRIPTS) == set(SHELL) | set(PYTHON)


@pytest.mark.parametrize("name", SHELL)
def test_shell_script_parses_and_passes_shellcheck(name: str) -> None:
    res = _sh_n(DIR / name)
    assert (res.returncode, res.stderr) == (0, "")
    res = _shellcheck(DIR / name)
    assert res.returncode == 0, res.stdout


@pytest.mark.parametrize("name", PYTHON)
def test_python_script_compiles(name: str) -> None:
    compile(hostscripts.text(name), name, "exec")


def test_the_checks_catch_a_broken_script(tmp_path: Path) -> None:
    bad = tmp_path / "bad.sh"
    bad.write_text('if [ -n "$1" ]; then echo $1\n')
    assert _sh_n(bad).returncode != 0
    lint = tmp_path / "lint.sh"
    lint.write_text("x= 1\n")
    assert _sh_n(lint).returncode == 0 and _shellcheck(lint).returncode != 0
    with pytest.raises(SyntaxError):
        compile("def f(:\n", "bad.py", "exec")


def test_each_script_is_loaded_by_a_module() -> None:
    root = Path(launcher.__file__).parent
    used = {m for p in root.rglob("*.py") for m in re.findall(r'hostscripts\.text\("([^"]+)"\)', p.read_text())}
    assert used == set(SCRIPTS)


def test_the_write_scripts_name_their_temp_files_as_the_transports_do() -> None:
    """Leftover temp files are found (and tests look for them) by ``PUT_TEMP_PREFIX``."""
    from launcher.execute.transport import PUT_TEMP_PREFIX

    for name in ("put.sh", "files.sh"):
        assert f'mktemp "$dir/{PUT_TEMP_PREFIX}XXXXXX"' in hostscripts.text(name), name
