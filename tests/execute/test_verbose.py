"""``fleet -v`` / ``fleet --debug`` show each SSH connection and command with its duration (and,
with --debug, a multi-line script whole), on real sshds; without them, nothing of it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

import launcher.cli.run  # noqa: F401 - registers `run` on the root group
from launcher.cli import cli

from .sshd import Sshd


@pytest.fixture
def inventory(tmp_path: Path, fleet: tuple[Sshd, ...], monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.ssh/config of the machine leaks in
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    path = tmp_path / "hosts.yaml"
    path.write_text(
        "all:\n  vars:\n    ansible_user: root\n"
        f"    ansible_ssh_private_key_file: {fleet[0].client_key}\n"
        f"  hosts:\n    h1: {{ansible_host: 127.0.0.1, ansible_port: {fleet[0].port}}}\n"
    )
    return path


def _stderr(*args: str, inventory: Path, known_hosts: Path) -> list[str]:
    result = CliRunner().invoke(cli, [*args, "run", "-i", str(inventory), "--known-hosts", str(known_hosts), "h1",
                                      "--", "printf 'one\\ntwo\\n' >/dev/null\ntrue"])  # fmt: skip
    assert result.exit_code == 0, result.output
    return result.stderr.splitlines()


def _timed(lines: list[str]) -> list[str]:
    """The lines with their durations replaced by N (they vary run to run)."""
    return [re.sub(r" in \d+\.\d\d s$", " in N s", line) for line in lines
            if line.startswith(("fleet: info: ", "fleet: debug: "))]  # fmt: skip


def test_v_shows_connections_and_commands_with_durations(inventory: Path, known_hosts_file: Path,
                                                         fleet: tuple[Sshd, ...]) -> None:  # fmt: skip
    lines = _timed(_stderr("-v", inventory=inventory, known_hosts=known_hosts_file))
    assert lines[:2] == [
        f"fleet: info: h1: connected to 127.0.0.1:{fleet[0].port} in N s",
        "fleet: info: h1: sh -c 'printf '\"'\"'one\\ntwo\\n'\"'\"' >/dev/null … (2 lines; --debug shows it): exit 0 in N s",
    ]


def test_debug_also_shows_the_whole_script(inventory: Path, known_hosts_file: Path) -> None:
    lines = _stderr("--debug", inventory=inventory, known_hosts=known_hosts_file)
    at = lines.index("fleet: debug: h1: the whole command:")
    assert lines[at + 1 : at + 3] == ["sh -c 'printf '\"'\"'one\\ntwo\\n'\"'\"' >/dev/null", "true'"]


def test_quiet_without_v(inventory: Path, known_hosts_file: Path) -> None:
    assert _timed(_stderr(inventory=inventory, known_hosts=known_hosts_file)) == []
