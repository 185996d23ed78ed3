"""``fleet run`` end to end: inventory → real sshds → per-host report and exit code."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

import launcher.cli.run  # noqa: F401 - registers `run` on the root group
from launcher.cli import cli

from .sshd import Sshd, free_port

SCRIPT = 'echo "hello from $FLEET_TEST_HOST"; [ "$FLEET_TEST_HOST" != h2 ] || { echo oops >&2; exit 3; }'


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A clean HOME: no ~/.ssh/config, known_hosts or fleet file of the machine leaks in."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    return home


@pytest.fixture
def inventory(tmp_path: Path, fleet: tuple[Sshd, ...]) -> tuple[Path, int]:
    dead_port = free_port()
    path = tmp_path / "hosts.yaml"
    path.write_text(
        "all:\n  vars:\n    ansible_user: root\n"
        f"    ansible_ssh_private_key_file: {fleet[0].client_key}\n"
        "  children:\n    gpu:\n      hosts:\n"
        f"        h1: {{ansible_host: 127.0.0.1, ansible_port: {fleet[0].port}}}\n"
        f"        h2: {{ansible_host: 127.0.0.1, ansible_port: {fleet[1].port}}}\n"
        f"        dead: {{ansible_host: 127.0.0.1, ansible_port: {dead_port}}}\n"
    )
    return path, dead_port


def _run(*args: str) -> Result:
    # The loaded machine's banner bound (--connect-timeout sets it), not the default 10 s: a live
    # sshd's banner waits for CPU at CI's load (~99 on two cores).  No host here is hung; the dead
    # one refuses at once.
    return CliRunner().invoke(cli, ["run", "--connect-timeout", "60", *args], catch_exceptions=False)


def test_partial_failure_is_exit_3_with_per_host_lines(
    home: Path, inventory: tuple[Path, int], known_hosts_file: Path
) -> None:
    inv, dead_port = inventory
    r = _run("-i", str(inv), "gpu", "--known-hosts", str(known_hosts_file), "--forks", "2",
             "--", SCRIPT)
    assert r.stdout.splitlines() == [
        "h1 | ok | exit 0",
        "h1 | stdout | hello from h1",
        "h2 | failed | exit 3",
        "h2 | stdout | hello from h2",
        "h2 | stderr | oops",
        f"dead | unreachable | connection refused by 127.0.0.1:{dead_port}",
    ]
    assert r.stderr == "fleet: 3 hosts: 1 ok, 1 failed, 1 unreachable\n"
    assert r.exit_code == 3


def test_all_ok_is_exit_0_and_argv_is_quoted_once(
    home: Path, inventory: tuple[Path, int], known_hosts_file: Path
) -> None:
    inv, _ = inventory
    r = _run("-i", str(inv), "h*", "--known-hosts", str(known_hosts_file), "--",
             "printf", "%s|", "a b", "$HOME", "x;y")
    assert r.stdout.splitlines() == [
        "h1 | ok | exit 0",
        "h1 | stdout | a b|$HOME|x;y|",
        "h2 | ok | exit 0",
        "h2 | stdout | a b|$HOME|x;y|",
    ]
    assert r.exit_code == 0


def test_all_failed_is_exit_1_and_json(
    home: Path, inventory: tuple[Path, int], known_hosts_file: Path
) -> None:
    inv, dead_port = inventory
    r = _run("-i", str(inv), "h2:dead", "--known-hosts", str(known_hosts_file), "--json",
             "--", SCRIPT)
    assert json.loads(r.stdout) == {"hosts": [
        {"host": "h2", "status": "failed", "exit_status": 3, "stdout": "hello from h2\n",
         "stderr": "oops\n"},
        {"host": "dead", "status": "unreachable",
         "error": f"connection refused by 127.0.0.1:{dead_port}"},
    ]}
    assert r.exit_code == 1


def test_unknown_host_refused_then_trusted(
    home: Path, inventory: tuple[Path, int], fleet: tuple[Sshd, ...]
) -> None:
    inv, _ = inventory
    r = _run("-i", str(inv), "h1", "--", "true")
    assert r.stdout.startswith(f"h1 | unreachable | host key unknown: [127.0.0.1]:{fleet[0].port} ")
    assert r.stdout.endswith("; verify it and add it, or pass --trust-new-hosts to record it\n")
    assert r.exit_code == 1
    r = _run("-i", str(inv), "h1", "--trust-new-hosts", "--", "true")
    assert (r.stdout, r.exit_code) == ("h1 | ok | exit 0\n", 0)
    assert "h1: recorded new host key ssh-ed25519 SHA256:" in r.stderr
    recorded = home / ".config" / "fleet" / "known_hosts"
    assert recorded.read_text() == f"{fleet[0].known_line}\n"
    r = _run("-i", str(inv), "h1", "--", "true")  # known now, without the flag
    assert (r.stdout, r.exit_code) == ("h1 | ok | exit 0\n", 0)


def test_command_timeout_is_a_failed_host(
    home: Path, inventory: tuple[Path, int], known_hosts_file: Path
) -> None:
    inv, _ = inventory
    # 5 s (from before the session opens, which waits for sshd's CPU at CI's load) against 60.
    r = _run("-i", str(inv), "h1", "--known-hosts", str(known_hosts_file), "--timeout", "5",
             "--", "sleep 60")
    assert r.stdout == "h1 | failed | sh -c 'sleep 60': no exit status: timed out after 5s\n"
    assert r.exit_code == 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["h1", "--", " "], "fleet: error: fleet run: no command given after the host pattern\n"),
        (["h1", "--known-hosts", "/nonexistent", "--", "true"],
         "fleet: error: --known-hosts /nonexistent: no such file\n"),
    ],
)
def test_bad_input_is_exit_2(
    home: Path, inventory: tuple[Path, int], args: list[str], message: str
) -> None:
    inv, _ = inventory
    r = _run("-i", str(inv), *args)
    assert (r.stdout, r.stderr, r.exit_code) == ("", message.format(inv=inv), 2)


def test_unmatched_pattern_is_exit_2(home: Path, inventory: tuple[Path, int]) -> None:
    # The wording after the position belongs to the pattern module; only its start is ours.
    inv, _ = inventory
    r = _run("-i", str(inv), "nope", "--", "true")
    assert r.stderr.startswith("fleet: error: pattern 'nope': ")
    assert (r.stdout, r.stderr.count("\n"), r.exit_code) == ("", 1, 2)


def test_bad_forks_is_a_usage_error(home: Path, inventory: tuple[Path, int]) -> None:
    inv, _ = inventory
    r = _run("-i", str(inv), "--forks", "0", "h1", "--", "true")
    assert r.exit_code == 2
    assert r.stderr == "fleet: error: invalid value for '--forks': 0 is not in the range x>=1 (see 'fleet run --help')\n"


def test_operator_known_hosts_is_read_by_default(
    home: Path, inventory: tuple[Path, int], fleet: tuple[Sshd, ...]
) -> None:
    inv, _ = inventory
    (home / ".ssh").mkdir()
    (home / ".ssh" / "known_hosts").write_text(f"{fleet[1].known_line}\n")
    r = _run("-i", str(inv), "h2", "--", "true")
    assert (r.stdout, r.exit_code) == ("h2 | ok | exit 0\n", 0)
    assert not (home / ".config" / "fleet" / "known_hosts").exists()
