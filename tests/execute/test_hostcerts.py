"""known_hosts markers against real sshds (issue 16 item 6): ``@cert-authority`` host
certificates made by ``ssh-keygen -s``, ``@revoked`` keys, the global file, lines OpenSSH skips."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from launcher.errors import HostKeyError
from launcher.execute.hostkeys import GLOBAL_KNOWN_HOSTS, KnownHosts
from launcher.execute.ssh import SshConnector

from .sshd import TEST_OPTIONS, Sshd, SshdFactory


def _ca(tmp_path: Path, name: str = "ca") -> tuple[Path, str]:
    key = tmp_path / name
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "", "-f", str(key)], check=True)
    return key, Path(f"{key}.pub").read_text().strip()


def _fp(pub: str) -> str:
    out = subprocess.run(["ssh-keygen", "-l", "-f", "-"], input=pub, capture_output=True, text=True, check=True)
    return out.stdout.split()[1]


def _connect(sshd: Sshd, known: Path, tmp_path: Path, **kw: object) -> bool:
    with SshConnector(KnownHosts((known,), record_to=tmp_path / "rec", **kw), TEST_OPTIONS) as c:  # type: ignore[arg-type]
        return c.connect(sshd.host()).run(["true"], timeout=10).ok


def _refused(sshd: Sshd, known: Path, tmp_path: Path, **kw: object) -> str:
    before = len(sshd.log_text())
    with pytest.raises(HostKeyError) as info:
        _connect(sshd, known, tmp_path, **kw)
    assert "Accepted publickey" not in sshd.log_text()[before:]  # refused before authentication
    return str(info.value)


def test_a_certificate_signed_by_a_known_ca_is_accepted(sshd_factory: SshdFactory, tmp_path: Path) -> None:
    ca, ca_pub = _ca(tmp_path)
    sshd = sshd_factory.start("cert-ok", ca=ca)
    known = tmp_path / "known_hosts"
    # The host's own key is nowhere: only the CA vouches for it.  Junk lines are skipped.
    known.write_text(f"@cert-authority [127.0.0.1]:* {ca_pub}\n@bogus x y z\nbad-line ssh-ed25519 %%%\n")
    assert _connect(sshd, known, tmp_path)
    assert not (tmp_path / "rec").exists()


@pytest.mark.parametrize(
    ("name", "cert_args", "problem"),
    [
        ("cert-name", ("-n", "other.example"), "its principals (other.example) do not name 127.0.0.1"),
        ("cert-old", ("-n", "127.0.0.1", "-V", "20200101:20200102"), "it expired at 2020-01-02 00:00:00 UTC"),
        ("cert-user", ("-n", "127.0.0.1", "-O", "force-command=x"), "it carries critical options"),
    ],
)
def test_an_invalid_certificate_is_refused_with_why(
    sshd_factory: SshdFactory, tmp_path: Path, name: str, cert_args: tuple[str, ...], problem: str
) -> None:
    ca, ca_pub = _ca(tmp_path)
    sshd = sshd_factory.start(name, ca=ca, cert_args=cert_args)
    known = tmp_path / "known_hosts"
    known.write_text(f"@cert-authority * {ca_pub}\n")
    assert _refused(sshd, known, tmp_path, trust_new=True).startswith(
        f"{name}: host key certificate refused: [127.0.0.1]:{sshd.port} ssh-ed25519-cert-v01@openssh.com "
        f"id '{name}-id' (CA {_fp(ca_pub)} at {known}:1): {problem}"
    )


def test_a_revoked_ca_is_refused(sshd_factory: SshdFactory, tmp_path: Path) -> None:
    ca, ca_pub = _ca(tmp_path)
    sshd = sshd_factory.start("cert-revoked-ca", ca=ca)
    known = tmp_path / "known_hosts"
    known.write_text(f"@cert-authority * {ca_pub}\n@revoked * {ca_pub}\n")
    assert _refused(sshd, known, tmp_path) == (
        f"cert-revoked-ca: host key revoked: [127.0.0.1]:{sshd.port} its CA ssh-ed25519 {_fp(ca_pub)} is marked "
        f"@revoked at {known}:2; refused"
    )


def test_a_certificate_from_an_unknown_ca_falls_back_to_the_plain_key(
    sshd_factory: SshdFactory, tmp_path: Path
) -> None:
    ca, _ = _ca(tmp_path)
    _, other_pub = _ca(tmp_path, "other-ca")
    sshd = sshd_factory.start("cert-other-ca", ca=ca)
    known = tmp_path / "known_hosts"
    known.write_text(f"@cert-authority * {other_pub}\n")
    assert _refused(sshd, known, tmp_path).startswith(f"cert-other-ca: host key unknown: [127.0.0.1]:{sshd.port} ")
    known.write_text(f"@cert-authority * {other_pub}\n{sshd.known_line}\n")
    assert _connect(sshd, known, tmp_path)


def test_a_revoked_host_key_is_refused_even_when_listed(
    fleet: tuple[Sshd, ...], tmp_path: Path
) -> None:
    known = tmp_path / "known_hosts"
    known.write_text(f"{fleet[0].known_line}\n@revoked * {fleet[0].host_key}\n{fleet[1].known_line}\n")
    for trust_new in (False, True):
        assert _refused(fleet[0], known, tmp_path, trust_new=trust_new) == (
            f"h1: host key revoked: [127.0.0.1]:{fleet[0].port} ssh-ed25519 {_fp(fleet[0].host_key)} is "
            f"marked @revoked at {known}:2; refused"
        )
    assert _connect(fleet[1], known, tmp_path)  # @revoked names a key, not every host


def test_global_known_hosts_is_read(fleet: tuple[Sshd, ...], tmp_path: Path) -> None:
    assert KnownHosts.for_operator().trust().files[2:4] == tuple(Path(p) for p in GLOBAL_KNOWN_HOSTS)
    glob = tmp_path / "ssh_known_hosts"
    glob.write_text(f"{fleet[0].known_line}\n")
    assert _connect(fleet[0], tmp_path / "none", tmp_path, global_files=(glob,))


def test_known_keys_of_a_ca_vouched_host_are_the_key_its_certificate_proved(
    sshd_factory: SshdFactory, tmp_path: Path
) -> None:
    """What `fleet weights` writes into the hosts' own known_hosts for rsync between them."""
    ca, ca_pub = _ca(tmp_path)
    sshd = sshd_factory.start("cert-keys", ca=ca)
    known = tmp_path / "known_hosts"
    known.write_text(f"@cert-authority * {ca_pub}\n")
    with SshConnector(KnownHosts((known,), record_to=tmp_path / "rec"), TEST_OPTIONS) as c:
        keys = c.known_keys(c.endpoint(sshd.host()))
    assert {t: f"{k.get_name()} {k.get_base64()}" for t, k in keys.items()} == {"ssh-ed25519": sshd.host_key}
