"""paramiko without invoke at start-up, and ``Match exec`` still honoured when a config uses it.
Each case runs in a fresh interpreter: whether invoke is loaded is process state."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

PROBE = """
import sys
from launcher.execute.ssh import load_ssh_config
cfg = load_ssh_config(sys.argv[1])
print(cfg.lookup("web1").get("hostname"), "invoke" in sys.modules)
"""


def _probe(config: Path) -> str:
    out = subprocess.run([sys.executable, "-c", PROBE, str(config)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_fleet_cli_start_does_not_import_invoke() -> None:
    code = "import sys, launcher.cli.deploy, launcher.execute.ssh; print('invoke' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "False", out.stderr


def test_plain_config_needs_no_invoke(tmp_path: Path) -> None:
    config = tmp_path / "config"
    config.write_text("Host web1\n  HostName 198.18.7.1\n")
    assert _probe(config) == "198.18.7.1 False"


def test_match_exec_gets_invoke_back(tmp_path: Path) -> None:
    config = tmp_path / "config"
    config.write_text('Match host web1 exec "test %h = web1"\n  HostName 198.18.7.2\n')
    assert _probe(config) == "198.18.7.2 True"
