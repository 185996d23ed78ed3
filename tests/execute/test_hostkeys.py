"""Strict host-key checking against real sshds: unknown, trusted-new, changed, hashed, ports."""

from __future__ import annotations

import logging
import subprocess
from pathlib import Path

import paramiko
import pytest

from launcher.errors import HostKeyError, UsageError
from launcher.execute.hostkeys import KnownHosts
from launcher.execute.ssh import SshConnector

from .sshd import TEST_OPTIONS, Sshd, SshdFactory


def _fingerprint(sshd: Sshd) -> str:
    return paramiko.PKey.from_type_string("ssh-ed25519", _key_blob(sshd)).fingerprint


def _key_blob(sshd: Sshd) -> bytes:
    import base64

    return base64.b64decode(sshd.host_key.split()[1])


def _connector(files: tuple[Path, ...], record_to: Path, trust_new: bool = False) -> SshConnector:
    return SshConnector(KnownHosts(files, record_to=record_to, trust_new=trust_new), TEST_OPTIONS)


def test_unknown_host_is_refused_before_any_command(
    sshd_factory: SshdFactory, tmp_path: Path
) -> None:
    sshd = sshd_factory.start("unknown1")
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    record = tmp_path / "fleet_known_hosts"
    with _connector((empty,), record) as connector, pytest.raises(HostKeyError) as info:
        connector.connect(sshd.host())
    assert str(info.value) == (
        f"unknown1: host key unknown: [127.0.0.1]:{sshd.port} ssh-ed25519 {_fingerprint(sshd)} "
        f"is not in {empty}, {record}; verify it and add it, or pass --trust-new-hosts to record it"
    )
    # Refused after the key exchange, before authentication: no session, no command.
    log = sshd.log_text()
    assert "Accepted publickey" not in log
    assert not record.exists()


def test_trust_new_records_the_key_and_reuses_it(
    sshd_factory: SshdFactory, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    sshd = sshd_factory.start("unknown2")
    record = tmp_path / "cfg" / "fleet" / "known_hosts"
    with caplog.at_level(logging.WARNING, logger="fleet.execute"):
        with _connector((), record, trust_new=True) as connector:
            assert connector.connect(sshd.host()).run(["true"], timeout=10).ok
    assert record.read_text() == f"{sshd.known_line}\n"
    assert caplog.messages == [
        f"unknown2: recorded new host key ssh-ed25519 {_fingerprint(sshd)} for "
        f"[127.0.0.1]:{sshd.port} in {record}"
    ]
    # The next run, without trust-new, knows the host from fleet's own file.
    with _connector((), record) as connector:
        assert connector.connect(sshd.host()).run(["true"], timeout=10).ok
    assert record.read_text() == f"{sshd.known_line}\n"


def test_changed_key_is_refused_even_with_trust_new(
    sshd_factory: SshdFactory, fleet: tuple[Sshd, ...], tmp_path: Path
) -> None:
    sshd = sshd_factory.start("changed")
    known = tmp_path / "known_hosts"
    # The entry for this port carries another server's key: as if the host were replaced.
    known.write_text(f"[127.0.0.1]:{sshd.port} {fleet[0].host_key}\n")
    record = tmp_path / "fleet_known_hosts"
    for trust_new in (False, True):
        with _connector((known,), record, trust_new) as connector, pytest.raises(HostKeyError) as info:
            connector.connect(sshd.host())
        assert str(info.value) == (
            f"changed: host key changed: [127.0.0.1]:{sshd.port} expected ssh-ed25519 "
            f"{_fingerprint(fleet[0])} (from {known}, {record}) got ssh-ed25519 "
            f"{_fingerprint(sshd)}; refused: verify the new key out of band and replace the "
            "old entry"
        )
    assert not record.exists()
    assert "Accepted publickey" not in sshd.log_text()


def test_changed_key_of_another_type_is_refused(
    sshd_factory: SshdFactory, tmp_path: Path
) -> None:
    sshd = sshd_factory.start("changedtype")
    other = tmp_path / "rsa"
    subprocess.run(["ssh-keygen", "-q", "-t", "rsa", "-b", "2048", "-N", "", "-f", str(other)],
                   check=True)
    known = tmp_path / "known_hosts"
    known.write_text(f"[127.0.0.1]:{sshd.port} {Path(f'{other}.pub').read_text()}")
    with _connector((known,), tmp_path / "rec", trust_new=True) as connector:
        with pytest.raises(HostKeyError) as info:
            connector.connect(sshd.host())
    assert str(info.value).startswith(
        f"changedtype: host key changed: [127.0.0.1]:{sshd.port} expected ssh-rsa SHA256:"
    )


def test_hashed_known_hosts_entry(fleet: tuple[Sshd, ...], tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    known.write_text("".join(f"{s.known_line}\n" for s in fleet[:2]))
    subprocess.run(["ssh-keygen", "-q", "-H", "-f", str(known)], check=True)
    assert known.read_text().startswith("|1|")  # ssh-keygen really hashed the names
    assert "127.0.0.1" not in known.read_text()
    with _connector((known,), tmp_path / "rec") as connector:
        for sshd in fleet[:2]:
            assert connector.connect(sshd.host()).run(["true"], timeout=10).ok
        with pytest.raises(HostKeyError, match=r"^h3: host key unknown: "):
            connector.connect(fleet[2].host())


def test_port_22_style_entry_does_not_cover_other_ports(
    fleet: tuple[Sshd, ...], tmp_path: Path
) -> None:
    # "127.0.0.1 key" is the entry for port 22 only; the port-specific one is [127.0.0.1]:port.
    known = tmp_path / "known_hosts"
    known.write_text(f"127.0.0.1 {fleet[0].host_key}\n")
    with _connector((known,), tmp_path / "rec") as connector:
        with pytest.raises(HostKeyError, match=rf"^h1: host key unknown: \[127.0.0.1\]:{fleet[0].port} "):
            connector.connect(fleet[0].host())


def test_missing_explicit_known_hosts_file_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError) as info:
        KnownHosts.for_operator((str(tmp_path / "nope"),))
    assert str(info.value) == f"--known-hosts {tmp_path}/nope: no such file"
