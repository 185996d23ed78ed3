"""UserKnownHostsFile, GlobalKnownHostsFile and StrictHostKeyChecking from
``ansible_ssh_common_args`` and ssh config, honoured as OpenSSH does (issue 16 item 7), against
real sshds."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import pytest

from launcher.errors import HostKeyError, InputError
from launcher.execute.hostkeys import KnownHosts
from launcher.execute.ssh import SshConnector
from launcher.model import Host

from .sshd import TEST_OPTIONS, Sshd


def _known(tmp_path: Path) -> KnownHosts:
    """As `fleet` builds it, with the operator's default files pointing into tmp_path."""
    return KnownHosts(record_to=tmp_path / "fleet_known_hosts", user_files=(tmp_path / "default_known_hosts",))


def _run(host: Host, known: KnownHosts, config: Path | None = None) -> bool:
    options = dataclasses.replace(TEST_OPTIONS, ssh_config=str(config) if config else None)
    with SshConnector(known, options) as c:
        return c.connect(host).run(["true"], timeout=10).ok


def test_user_known_hosts_file_in_common_args(fleet: tuple[Sshd, ...], tmp_path: Path) -> None:
    # What the sandbox's printed inventory says; before, `fleet up` needed --known-hosts too.
    theirs = tmp_path / "sandbox_known_hosts"
    theirs.write_text(f"{fleet[0].known_line}\n")
    host = fleet[0].host(ssh_common_args=f"-o UserKnownHostsFile={theirs} -o StrictHostKeyChecking=yes")
    assert _run(host, _known(tmp_path))
    with pytest.raises(HostKeyError, match=r"^h1: host key unknown: "):
        _run(fleet[0].host(), _known(tmp_path))


def test_user_known_hosts_file_in_ssh_config(fleet: tuple[Sshd, ...], tmp_path: Path) -> None:
    theirs = tmp_path / "from_config"
    theirs.write_text(f"{fleet[1].known_line}\n")
    config = tmp_path / "ssh_config"
    config.write_text(f"Host 127.0.0.1\n  UserKnownHostsFile {tmp_path}/none {theirs}\n")
    assert _run(fleet[1].host(), _known(tmp_path), config)


def test_accept_new_records_in_the_user_file_and_says_so_every_run(
    fleet: tuple[Sshd, ...], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    theirs = tmp_path / "accept_new_known_hosts"
    args = f"-o UserKnownHostsFile={theirs} -o StrictHostKeyChecking=accept-new"
    said = (
        "StrictHostKeyChecking=accept-new (the inventory's ansible_ssh_common_args): new host keys are "
        "recorded without verification; changed keys are still refused"
    )
    with caplog.at_level(logging.WARNING, logger="fleet.execute"):
        with SshConnector(_known(tmp_path), TEST_OPTIONS) as c:
            for sshd in fleet[:2]:
                assert c.connect(sshd.host(ssh_common_args=args)).run(["true"], timeout=10).ok
    assert theirs.read_text() == f"{fleet[0].known_line}\n{fleet[1].known_line}\n"
    assert caplog.messages[0] == said
    recorded = [m for m in caplog.messages if "recorded new host key" in m]
    assert len(recorded) == 2 and len(caplog.messages) == 3  # said once per run, not per host
    for sshd, message in zip(fleet[:2], recorded):
        assert message.startswith(f"{sshd.name}: recorded new host key ssh-ed25519 SHA256:")
        assert message.endswith(f" for [127.0.0.1]:{sshd.port} in {theirs}")
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="fleet.execute"):
        assert _run(fleet[0].host(ssh_common_args=args), _known(tmp_path))
    assert caplog.messages == [said]  # known now, and still said


def test_no_still_refuses_a_changed_key(fleet: tuple[Sshd, ...], tmp_path: Path) -> None:
    theirs = tmp_path / "known"
    theirs.write_text(f"[127.0.0.1]:{fleet[0].port} {fleet[1].host_key}\n")
    host = fleet[0].host(ssh_common_args=f"-o UserKnownHostsFile={theirs} -o StrictHostKeyChecking=no")
    with pytest.raises(HostKeyError, match=r"^h1: host key changed: "):
        _run(host, _known(tmp_path))


def test_common_args_beat_ssh_config(fleet: tuple[Sshd, ...], tmp_path: Path) -> None:
    config = tmp_path / "ssh_config"
    config.write_text("Host *\n  StrictHostKeyChecking no\n")
    with pytest.raises(HostKeyError, match=r"^h2: host key unknown: "):
        _run(fleet[1].host(ssh_common_args="-o StrictHostKeyChecking=yes"), _known(tmp_path), config)
    assert _run(fleet[1].host(), _known(tmp_path), config)  # config alone: recorded, and said


def test_unknown_strict_value_is_bad_input(fleet: tuple[Sshd, ...], tmp_path: Path) -> None:
    host = fleet[0].host(ssh_common_args="-o StrictHostKeyChecking=maybe")
    with pytest.raises(InputError) as info:
        _run(host, _known(tmp_path))
    assert str(info.value) == "<none>:0:0: h1: StrictHostKeyChecking=maybe: expected yes, ask, accept-new or no"
