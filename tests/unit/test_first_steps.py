"""A newcomer's first steps (issue 16 item 19): the README's first commands work as written in a
root shell on a minimal Debian (no sudo), the scripts say in one line what to do when run as
another user, and `fleet --version` answers."""

from __future__ import annotations

import re
import subprocess
from importlib.metadata import version
from pathlib import Path

import pytest
from click.testing import CliRunner

from launcher.cli import cli

REPO = Path(__file__).resolve().parents[2]


def _first_commands() -> list[str]:
    block = re.search(r"```bash\n(.*?)```", (REPO / "README.md").read_text(), re.DOTALL)
    assert block is not None
    return [ln for ln in block.group(1).splitlines() if ln.strip() and not ln.startswith("#")]


def test_the_first_commands_need_no_sudo() -> None:
    assert _first_commands() == ["bash scripts/install.sh && fleet demo", "bash scripts/test.sh"]


@pytest.mark.parametrize("script", ["install.sh", "test.sh"])
def test_scripts_refuse_a_non_root_user_in_one_line(script: str) -> None:
    proc = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "bash", f"scripts/{script}"],
                          cwd=REPO, capture_output=True, text=True, timeout=30)  # fmt: skip
    assert (proc.returncode, proc.stdout, proc.stderr) == (
        1, "", f"scripts/{script}: run as root (sudo -i, then this command again)\n"
    )



def test_fleet_version() -> None:
    result = CliRunner().invoke(cli, ["--version"])
    assert (result.exit_code, result.output) == (0, f"fleet {version('fleet')}\n")
