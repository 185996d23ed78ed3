"""ProxyJump through a real sshd: one jump connection shared by several hosts at once."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest

from launcher.errors import InputError
from launcher.execute.fanout import run_all
from launcher.execute.hostkeys import KnownHosts
from launcher.execute.ssh import SshConnector, resolve, ssh_args
from launcher.execute.transport import Transport
from launcher.model import Host

from .sshd import TEST_OPTIONS, Sshd, SshdFactory


@pytest.fixture(scope="module")
def bastion(sshd_factory: SshdFactory, fleet: tuple[Sshd, ...]) -> Sshd:
    # Only the fleet's ports may be opened through it, so a host reached at all went through it.
    permit = " ".join(f"127.0.0.1:{s.port}" for s in fleet)
    return sshd_factory.start("bastion", extra_config=f"PermitOpen {permit}\n", log_level="DEBUG1")


def _whoami(host: Host, t: Transport) -> str:
    return t.run(["sh", "-c", "echo $FLEET_TEST_HOST"], timeout=20, check=True).stdout_text.strip()


def _connector(tmp_path: Path, known: Path, bastion: Sshd, **opts: object) -> SshConnector:
    with known.open("a") as f:
        f.write(f"{bastion.known_line}\n")
    return SshConnector(KnownHosts((known,), record_to=tmp_path / "rec"),
                        replace(TEST_OPTIONS, **opts))  # type: ignore[arg-type]


def _jumped(bastion: Sshd) -> list[int]:
    """Target ports of the direct-tcpip channels the bastion opened (its DEBUG1 log)."""
    pattern = r"server_request_direct_tcpip: originator .*? target 127\.0\.0\.1 port (\d+)"
    return [int(p) for p in re.findall(pattern, bastion.log_text())]


def test_jump_from_common_args_shared_by_many_hosts(
    tmp_path: Path, known_hosts_file: Path, fleet: tuple[Sshd, ...], bastion: Sshd
) -> None:
    accepted = bastion.log_text().count("Accepted publickey")
    jumped = len(_jumped(bastion))
    args = f"-o StrictHostKeyChecking=yes -o ProxyJump=root@127.0.0.1:{bastion.port}"
    hosts = [s.host(ssh_common_args=args) for s in fleet]
    with _connector(tmp_path, known_hosts_file, bastion) as connector:
        result = run_all(hosts, _whoami, connector=connector, forks=4)
        assert result.values() == {s.name: s.name for s in fleet}
        # A second phase reuses every connection: no new jump, no new channel.
        assert run_all(hosts, _whoami, connector=connector, forks=4).all_ok
    assert bastion.log_text().count("Accepted publickey") == accepted + 1
    assert sorted(_jumped(bastion)[jumped:]) == sorted(s.port for s in fleet)


def test_jump_from_ssh_config(
    tmp_path: Path, known_hosts_file: Path, fleet: tuple[Sshd, ...], bastion: Sshd
) -> None:
    config = tmp_path / "ssh_config"
    config.write_text(
        f"Host gw\n  HostName 127.0.0.1\n  Port {bastion.port}\n  User root\n"
        f"  IdentityFile {bastion.client_key}\n"
        f"Host node2\n  HostName 127.0.0.1\n  Port {fleet[1].port}\n  User root\n"
        f"  IdentityFile {bastion.client_key}\n  ProxyJump gw\n"
    )
    host = Host(name="n2", address="node2")  # everything else comes from ssh config
    with _connector(tmp_path, known_hosts_file, bastion, ssh_config=str(config)) as connector:
        assert _whoami(host, connector.connect(host)) == "h2"
    assert _jumped(bastion)[-1] == fleet[1].port


def test_target_the_jump_host_refuses_is_unreachable(
    tmp_path: Path, known_hosts_file: Path, bastion: Sshd, fleet: tuple[Sshd, ...]
) -> None:
    host = Host(name="far", address="127.0.0.1", port=9, user="root",
                key_file=str(bastion.client_key), ssh_common_args=f"-J 127.0.0.1:{bastion.port}")
    with _connector(tmp_path, known_hosts_file, bastion) as connector:
        result = run_all([host, fleet[0].host(ssh_common_args=host.ssh_common_args)], _whoami,
                         connector=connector)
    assert result.values() == {"h1": "h1"}
    (far,) = result.unreachable
    assert far.reason == (
        f"far: unreachable: jump host 127.0.0.1:{bastion.port} cannot open 127.0.0.1:9: "
        "Administratively prohibited"
    )


def test_unknown_jump_host_key_is_refused(
    tmp_path: Path, known_hosts_file: Path, bastion: Sshd, fleet: tuple[Sshd, ...]
) -> None:
    known = KnownHosts((known_hosts_file,), record_to=tmp_path / "rec")  # bastion not in it
    host = fleet[0].host(ssh_common_args=f"-J root@127.0.0.1:{bastion.port}")
    with SshConnector(known, TEST_OPTIONS) as connector:
        (outcome,) = run_all([host], _whoami, connector=connector).unreachable
    assert outcome.reason.startswith(
        f"root@127.0.0.1:{bastion.port}: host key unknown: [127.0.0.1]:{bastion.port} "
    )


@pytest.mark.parametrize(
    ("args", "spec"),
    [
        ("-J bastion", "bastion"),
        ("-Jops@bastion:2222", "ops@bastion:2222"),
        ("-o ProxyJump=a,b:23", "a,b:23"),
        ("-oProxyJump=a", "a"),
        ("-o 'ProxyJump a'", "a"),
        ("-o StrictHostKeyChecking=no -o ForwardAgent=yes", None),
    ],
)
def test_proxy_jump_from_common_args(args: str, spec: str | None) -> None:
    assert ssh_args(Host(name="x", address="x", ssh_common_args=args)).get("proxyjump") == spec


def test_jump_chain_and_bad_specs() -> None:
    host = Host(name="x", address="10.0.0.9", user="u", ssh_common_args="-J a@j1,[::1]:2200")
    endpoint = resolve(host, None, KnownHosts())
    assert endpoint.via is not None and endpoint.via.via is not None
    assert (endpoint.via.address, endpoint.via.port) == ("::1", 2200)
    assert (endpoint.via.via.user, endpoint.via.via.address, endpoint.via.via.port) == ("a", "j1", 22)
    with pytest.raises(InputError) as info:
        resolve(replace(host, ssh_common_args="-J j1:ssh"), None, KnownHosts())
    assert str(info.value) == "<none>:0:0: x: bad ProxyJump host j1:ssh"
