"""Control-host command injection through ssh_config's ``Match exec`` (issue 25 item 1).

paramiko expands ``%h`` (and ``%r``) in an operator's ``Match exec "..."`` line without quoting
and runs it with a shell: a host address such as ``127.0.0.1;touch X;true`` ran ``touch`` on the
control host during the first SSH lookup.  The real ssh_config file is read the way fleet reads
it (``~/.ssh/config`` under ``HOME``, through paramiko and invoke); a positive control proves
the ``Match exec`` line really runs for an ordinary host.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest

from launcher.errors import InputError
from launcher.execute.hostkeys import KnownHosts
from launcher.execute.ssh import SshConnector, SshOptions
from launcher.model import Host


def _config(tmp_path: Path) -> Path:
    """An ssh_config whose Match exec lines expand %h and %r into shell text, as many operators'
    do (``Match exec "host-in-vpn %h"``), plus one that proves exec lines run at all."""
    config = tmp_path / "ssh_config"
    config.write_text(f'Match exec "touch {tmp_path}/exec-ran"\n  Port 22\n'
                      'Match exec "true %h"\n  Port 22\nMatch exec "true %r"\n  Port 22\n')  # fmt: skip
    return config


@pytest.fixture(autouse=True)
def _stdin(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """invoke (which runs the exec lines) reads stdin; pytest's refuses reads."""
    with open(os.devnull) as null:
        monkeypatch.setattr(sys, "stdin", null)
        yield


def _connector(tmp_path: Path) -> SshConnector:
    return SshConnector(KnownHosts(record_to=tmp_path / "kh"), SshOptions(ssh_config=str(_config(tmp_path))))


def test_an_ordinary_host_runs_the_match_exec_lines(tmp_path: Path) -> None:
    """The positive control: the lookup below does run the config's exec lines."""
    _connector(tmp_path).endpoint(Host(name="h1", address="198.18.0.1"))
    assert (tmp_path / "exec-ran").exists()


@pytest.mark.parametrize(
    ("host", "message"),
    [
        (Host(name="h1", address=f"127.0.0.1;touch {{m}};true"),
         "h1: address should be a hostname or an IP address, got '127.0.0.1;touch {m};true'"),
        (Host(name="h1", address="198.18.0.1", user="u$(touch {m})"),
         "h1: user should be a user name of at most 256 letters, digits, '.', '_', '-' and '@' (not starting with '-'), "
         "got 'u$(touch {m})'"),
        (Host(name="h1", address="198.18.0.1", ssh_common_args="-J 'j;touch {m}'"),
         "h1: bad ProxyJump host j;touch {m}"),
        (Host(name="h1", address="198.18.0.1", ssh_common_args="-J 'x`touch {m}`@jump'"),
         "h1: bad ProxyJump host x`touch {m}`@jump"),
    ],
)
def test_a_hostile_address_user_or_jump_host_never_reaches_match_exec(
    tmp_path: Path, host: Host, message: str
) -> None:
    """A ``Host`` made by any other path than the inventory loader is checked again before the
    ssh_config lookup."""
    marker = tmp_path / "pwned"
    host = Host(name=host.name, address=host.address.format(m=marker),
                user=host.user.format(m=marker) if host.user else None,
                ssh_common_args=host.ssh_common_args.format(m=marker) if host.ssh_common_args else None)  # fmt: skip
    with pytest.raises(InputError) as err:
        _connector(tmp_path).endpoint(host)
    assert f"{err.value.key_path}: {err.value.message}" == message.format(m=marker)
    assert not marker.exists()


def test_fleet_run_refuses_the_inventory_before_any_ssh(tmp_path: Path) -> None:
    """The reported case through the real CLI with ``~/.ssh/config`` under HOME: one line
    naming file:line, exit 2, and nothing run on the control host."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    os.replace(_config(tmp_path), home / ".ssh" / "config")
    marker = tmp_path / "pwned"
    inv = tmp_path / "hosts.yaml"
    inv.write_text(f"all:\n  hosts:\n    h1:\n      ansible_host: '127.0.0.1;touch {marker};true'\n")
    env = {**os.environ, "HOME": str(home)}
    env.pop("SSH_AUTH_SOCK", None)
    proc = subprocess.run([sys.executable, "-c", "from launcher.cli import main; main()", "run", "-i", str(inv), "all", "--connect-timeout",
                           "2", "--", "true"], capture_output=True, text=True, env=env, timeout=120)  # fmt: skip
    assert (proc.returncode, proc.stderr) == (2, (
        f"fleet: error: {inv}:4:21: all/hosts/h1/ansible_host: should be a hostname or an IP address, got "
        f"'127.0.0.1;touch {marker};true'\n"
    ))  # fmt: skip
    assert not marker.exists()
