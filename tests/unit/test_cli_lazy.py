"""The CLI imports a command's module only when the command runs; the name table must match
what the modules register."""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys

import launcher.cli
from launcher.cli import _COMMANDS, cli


def test_table_matches_the_registered_commands() -> None:
    for mod in pkgutil.iter_modules(launcher.cli.__path__):
        importlib.import_module(f"launcher.cli.{mod.name}")
    assert set(cli.commands) == set(_COMMANDS)
    for name, module in _COMMANDS.items():
        assert cli.commands[name].callback.__module__ == f"launcher.cli.{module}", name  # type: ignore[union-attr]


def test_up_does_not_import_other_families() -> None:
    code = (
        "import sys\n"
        "from launcher.cli import cli\n"
        "cli.get_command(None, 'up')\n"
        "print(' '.join(sorted(m for m in sys.modules if m.startswith('launcher.'))))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert "launcher.cli.deploy" in out
    for other in ("launcher.cli.sandbox", "launcher.sandbox", "launcher.cli.recipes", "launcher.cli.run"):
        assert other not in out


def test_plan_loads_through_the_pipeline_without_ssh_or_templates() -> None:
    """fleet plan is pure: neither paramiko (the deploy layer) nor jinja2 (render) is imported."""
    code = (
        "import sys\n"
        "from launcher.cli import cli\n"
        "cli.get_command(None, 'plan')\n"
        "print(' '.join(sorted(sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert "launcher.cli.plan" in out and "launcher.pipeline" in out
    assert [m for m in ("paramiko", "jinja2", "launcher.deploy.orchestrate") if m in out] == []
