"""SshTransport against real sshds: commands, files, timeouts, connection reuse."""

from __future__ import annotations

import os
import socket
import stat
import time
from pathlib import Path

import pytest

from launcher.errors import RemoteError, UnreachableError
from launcher.execute.command import Command, Secret
from launcher.execute.ssh import SshConnector
from launcher.execute.transport import PUT_TEMP_PREFIX, CommandTimeout, put_command

from .sshd import Sshd


def test_run_returns_exit_stdout_stderr(connector: SshConnector, fleet: tuple[Sshd, ...]) -> None:
    t = connector.connect(fleet[0].host())
    r = t.run(["sh", "-c", 'echo "out $FLEET_TEST_HOST"; echo err >&2; exit 3'], timeout=10)
    assert (r.host, r.exit_status, r.stdout, r.stderr) == ("h1", 3, b"out h1\n", b"err\n")
    assert not r.ok


def test_argv_is_quoted_exactly_once(connector: SshConnector, fleet: tuple[Sshd, ...]) -> None:
    t = connector.connect(fleet[0].host())
    tricky = ["it's", "$HOME", "a b", "*", ";echo no", ""]
    r = t.run(["printf", "%s|", *tricky], timeout=10)
    assert r.stdout.decode() == "|".join(tricky) + "|"


def test_stdin_and_env_reach_the_command(connector: SshConnector, fleet: tuple[Sshd, ...]) -> None:
    t = connector.connect(fleet[1].host())
    r = t.run(["sh", "-c", 'printf "%s:" "$GREETING"; cat'], timeout=10, stdin=b"from stdin",
              env={"GREETING": "hello world"})
    assert r.stdout == b"hello world:from stdin"


def test_large_stdout_and_stderr_do_not_stall(connector: SshConnector, fleet: tuple[Sshd, ...]) -> None:
    # Both streams well past paramiko's 2 MiB window: the reader must drain both.
    t = connector.connect(fleet[1].host())
    r = t.run(["sh", "-c", "head -c 3000000 /dev/zero >&2; head -c 3000000 /dev/zero"],
              timeout=30, stdin=b"x" * 3_000_000)
    assert (len(r.stdout), len(r.stderr), r.exit_status) == (3_000_000, 3_000_000, 0)


def test_check_raises_remote_error_with_masked_command(
    connector: SshConnector, fleet: tuple[Sshd, ...]
) -> None:
    t = connector.connect(fleet[0].host())
    cmd = Command(argv=("sh", "-c", 'echo "first" >&2; echo "bad token" >&2; exit 7', "x",
                        Secret("hunter2")))
    with pytest.raises(RemoteError) as info:
        t.run(cmd, timeout=10, check=True)
    assert str(info.value) == (
        "h1: sh -c 'echo \"first\" >&2; echo \"bad token\" >&2; exit 7' x ***: exit 7: bad token"
    )
    assert info.value.detail == "first\nbad token"
    assert "hunter2" not in repr(info.value.args)


def test_secret_is_sent_but_not_shown(connector: SshConnector, fleet: tuple[Sshd, ...]) -> None:
    t = connector.connect(fleet[0].host())
    r = t.run(Command(argv=("echo", Secret("s3cr3t"))), timeout=10)
    assert r.stdout == b"s3cr3t\n"
    assert r.command == "echo ***"


def test_put_get_round_trip_with_mode(
    connector: SshConnector, fleet: tuple[Sshd, ...], tmp_path: Path
) -> None:
    t = connector.connect(fleet[2].host())
    path = tmp_path / "new" / "dir" / "secret.env"
    data = bytes(range(256)) * 100
    t.put(str(path), data, 0o600)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert t.get(str(path)) == data
    t.put(str(path), b"replaced", 0o644)
    assert (path.read_bytes(), stat.S_IMODE(path.stat().st_mode)) == (b"replaced", 0o644)
    assert sorted(p.name for p in path.parent.iterdir()) == ["secret.env"]  # no temp left


def test_put_temp_file_is_never_readable_beyond_final_mode(
    connector: SshConnector, fleet: tuple[Sshd, ...], tmp_path: Path
) -> None:
    """Run the real put command by hand on the same connection and stop half-way through the
    content: the temp file must already carry the final mode (0600), never more."""
    connector.connect(fleet[2].host())  # the connection the transport uses
    client = connector._clients[next(iter(connector._clients))]  # noqa: SLF001 - test peeks
    transport = client.get_transport()
    assert transport is not None
    channel = transport.open_session()
    target = tmp_path / "token"
    channel.exec_command(put_command(str(target), 0o600).shell_text())
    channel.sendall(b"first half ")
    deadline = time.monotonic() + 10
    temps: list[Path] = []
    while not temps or temps[0].stat().st_size == 0:
        assert time.monotonic() < deadline, "the put command never created its temp file"
        temps = [p for p in tmp_path.iterdir() if p.name.startswith(PUT_TEMP_PREFIX)]
        time.sleep(0.01)
    assert stat.S_IMODE(temps[0].stat().st_mode) == 0o600
    assert not target.exists()
    channel.sendall(b"second half")
    channel.shutdown_write()
    assert channel.recv_exit_status() == 0
    assert target.read_bytes() == b"first half second half"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert not temps[0].exists()


def test_put_failure_names_the_path(connector: SshConnector, fleet: tuple[Sshd, ...], tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    t = connector.connect(fleet[2].host())
    with pytest.raises(RemoteError) as info:
        t.put(str(blocker / "sub" / "f"), b"x", 0o644)
    assert str(info.value).startswith(f"h3: put {blocker}/sub/f: exit 1: mkdir: ")


def test_get_missing_file(connector: SshConnector, fleet: tuple[Sshd, ...], tmp_path: Path) -> None:
    t = connector.connect(fleet[2].host())
    with pytest.raises(RemoteError) as info:
        t.get(str(tmp_path / "nope"))
    assert str(info.value) == (
        f"h3: cat -- {tmp_path}/nope: exit 1: cat: {tmp_path}/nope: No such file or directory"
    )


def test_command_timeout_closes_the_channel(connector: SshConnector, fleet: tuple[Sshd, ...]) -> None:
    t = connector.connect(fleet[3].host())
    with pytest.raises(CommandTimeout) as info:
        t.run(["sleep", "60"], timeout=1)
    assert str(info.value) == "h4: sleep 60: no exit status: timed out after 1s"
    # The connection survives the timeout and serves the next command.
    assert t.run(["echo", "next"], timeout=10).stdout == b"next\n"


def test_one_connection_per_host_reused_across_phases(
    connector: SshConnector, fleet: tuple[Sshd, ...]
) -> None:
    sshd = fleet[3]
    before = sshd.log_text().count("Accepted publickey")
    for _ in range(3):
        assert connector.connect(sshd.host()).run(["true"], timeout=10).ok
    assert sshd.log_text().count("Accepted publickey") == before + 1


def test_connection_sends_small_packets_at_once(connector: SshConnector, fleet: tuple[Sshd, ...]) -> None:
    """TCP_NODELAY: without it a command's stdin + EOF (and the next command's channel open after
    the last one's close) wait for the server's delayed ACK, ~40 ms per command (bench/README.md §5)."""
    t = connector.connect(fleet[2].host())
    assert t.run(["cat"], stdin=b"x", timeout=10).stdout == b"x"
    sock = t._client.get_transport().sock  # type: ignore[union-attr]
    assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1


def test_closed_connection_reports_unreachable(connector: SshConnector, fleet: tuple[Sshd, ...]) -> None:
    t = connector.connect(fleet[0].host())
    t.close()
    with pytest.raises(UnreachableError) as info:
        t.run(["true"], timeout=5)
    assert str(info.value) == "h1: unreachable: connection lost before true"
    # The connector notices the dead connection and opens a new one.
    assert connector.connect(fleet[0].host()).run(["true"], timeout=5).ok


def test_missing_key_file_is_an_input_error(connector: SshConnector, fleet: tuple[Sshd, ...]) -> None:
    from dataclasses import replace

    from launcher.errors import InputError

    host = replace(fleet[0].host(), key_file="/nonexistent/id_ed25519")
    with pytest.raises(InputError) as info:
        connector.connect(host)
    assert str(info.value) == (
        "<none>:0:0: h1/ansible_ssh_private_key_file: no such file: /nonexistent/id_ed25519"
    )


def test_wrong_client_key_is_unreachable(
    connector: SshConnector, fleet: tuple[Sshd, ...], tmp_path: Path
) -> None:
    from dataclasses import replace

    other = tmp_path / "other_key"
    os.system(f"ssh-keygen -q -t ed25519 -N '' -f {other}")
    with pytest.raises(UnreachableError) as info:
        connector.connect(replace(fleet[0].host(), key_file=str(other)))
    assert str(info.value) == (
        f"h1: unreachable: authentication as root at [127.0.0.1]:{fleet[0].port} failed: "
        "Authentication failed."
    )
